//! clusterd end to end (issue 15): clusterd started by master, three full
//! instances whose qmgr link to it with mutual TLS, all sending from the
//! same source address to a grouping with concurrency 2, and the shaping
//! sink on port 25 of loopback addresses (MX records from dnsmasq)
//! recording every connection. Needs root (port 25, binding the source
//! address), dnsmasq, smtp-source and openssl; without them the tests fail
//! saying so. Each test has its own sink addresses (127.N.0.x). The
//! issue's scenarios that need a real network (clusterd killed, an
//! instance killed holding slots, `cluster: false`, fairness over five
//! instances) are in `cluster_netns.rs`; these are what loopback shows.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sluice_suite::pki::pki;
use sluice_suite::testkit::ShapingSink;
use sluice_suite::{dnsmasq, free_port, wait_for, Instance, Kill};

const POLICY: &str = "rate:
  algorithm: tokenbucket
groupings:
  - id: orange
    remotemx: [\"*.mx.orange.test\"]
sources:
  - id: solo
    localip: [127.0.0.2]
policies:
  - fields: [localip, grouping]
    default:
      concurrency: 20
    conditions:
      - if: { grouping: orange }
        then: { concurrency: 2, transactions: 3 }
";

fn tls_params(pki: &Path, name: &str) -> String {
    format!(
        "cluster_tls_cert_file = {d}/{name}.pem\ncluster_tls_key_file = {d}/{name}.key\n\
         cluster_tls_CAfile = {d}/ca.pem\n",
        d = pki.display()
    )
}

struct Cluster {
    sink: ShapingSink,
    coord: Instance,
    cport: u16,
    insts: Vec<(Instance, u16)>,
    pki: tempfile::TempDir,
    _dns: Kill,
}

fn cluster(net: u8, n: usize) -> Cluster {
    cluster_with(net, n, POLICY)
}

fn cluster_with(net: u8, n: usize, policy: &str) -> Cluster {
    assert!(
        sys::is_root(),
        "the cluster tests need root: the sink listens on port 25, where MX delivery goes"
    );
    let pki_dir = tempfile::Builder::new()
        .prefix("sluice-pki")
        .tempdir()
        .unwrap();
    let names: Vec<String> = std::iter::once("clusterd.test".to_string())
        .chain((1..=n).map(|i| format!("mx{i}.test")))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    pki(pki_dir.path(), &refs);
    // The instances run as nobody: the keys must be readable to them.
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(pki_dir.path())
        .status()
        .unwrap();
    let ip = |h: u8| format!("127.{net}.0.{h}");
    let sink = ShapingSink::start_on(&[&ip(10)], 25);
    let records = [
        "--mx-host=orange.test,in1.mx.orange.test,10".to_string(),
        format!("--host-record=in1.mx.orange.test,{}", ip(10)),
        // Nothing listens there: a host to find unreachable.
        "--mx-host=down.test,mx.down.test,10".to_string(),
        format!("--host-record=mx.down.test,{}", ip(11)),
    ];
    let refs: Vec<&str> = records.iter().map(String::as_str).collect();
    let (dns_kill, dns) = dnsmasq(&refs);
    let cport = free_port();
    let mut coord = Instance::new(
        "clusterd unix - - n 300 1 clusterd\n",
        &format!(
            "myhostname = clusterd.test\ncluster_listen = 127.0.0.1:{cport}\n{}",
            tls_params(pki_dir.path(), "clusterd.test")
        ),
    );
    coord.start();
    coord.wait_log(20, "coordinating on 127.0.0.1");
    let mut insts = Vec::new();
    for i in 1..=n {
        let port = free_port();
        let cf = format!(
            "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
             qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
        );
        let main = format!(
            "myhostname = mx{i}.test\nsmtpd_reject_unlisted_recipient = no\ndns_servers = {dns}\n\
             inet_protocols = ipv4\nminimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n\
             policy_file = policy.yaml\nsmtp_source_pool = solo\n\
             cluster_server = 127.0.0.1:{cport}\ncluster_tls_server_name = clusterd.test\n{}",
            tls_params(pki_dir.path(), &format!("mx{i}.test"))
        );
        let mut inst = Instance::new(&cf, &main);
        std::fs::write(inst.etc().join("policy.yaml"), policy).unwrap();
        inst.start();
        inst.wait_port(port);
        insts.push((inst, port));
    }
    for (inst, _) in &insts {
        inst.wait_log(20, "cluster: linked to clusterd");
    }
    let plural = if n == 1 { "" } else { "s" };
    coord.wait_log(20, &format!("{n} instance{plural} connected"));
    Cluster {
        sink,
        coord,
        cport,
        insts,
        pki: pki_dir,
        _dns: dns_kill,
    }
}

impl Cluster {
    fn send(&self, i: usize, n: u32) {
        let st = Command::new("smtp-source")
            .args(["-s", "5", "-m", &n.to_string()])
            .args(["-f", "bulk@sender.example", "-t", "someone@orange.test"])
            .arg(format!("127.0.0.1:{}", self.insts[i].1))
            .status()
            .expect("smtp-source is installed by scripts/test");
        assert!(st.success(), "smtp-source to instance {i}");
    }

    fn sent_by(&self, i: usize) -> usize {
        self.insts[i]
            .0
            .log()
            .lines()
            .filter(|l| l.contains("status=sent"))
            .count()
    }
}

#[test]
fn three_instances_keep_a_grouping_at_two_connections_cluster_wide_and_all_take_turns() {
    let c = cluster(41, 3);
    c.sink.delay("127.41.0.10", Duration::from_millis(100));
    for i in 0..3 {
        c.send(i, 30);
    }
    c.sink.wait_messages(90, 180);
    let most = c
        .sink
        .max_concurrent_where(|x| x.source.ip().to_string() == "127.0.0.2");
    assert_eq!(
        most, 2,
        "connections from 127.0.0.2 to orange, sampled at every connect, from three instances"
    );
    for i in 0..3 {
        assert!(
            c.sent_by(i) >= 20,
            "instance {i} delivered {}",
            c.sent_by(i)
        );
    }
    let out = c.insts[0].0.sluice(&["cluster", "status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("(linked), 3 instances: mx1.test, mx2.test, mx3.test"),
        "{text}"
    );
    assert!(text.contains("localip=127.0.0.2,grouping=orange"), "{text}");
    let json = c.insts[0].0.sluice(&["cluster", "status", "--json"]);
    let json = String::from_utf8_lossy(&json.stdout);
    assert!(
        json.contains("\"state\":\"linked\",\"instances\":3"),
        "{json}"
    );
}

#[test]
fn a_peer_without_a_certificate_of_the_cluster_ca_is_refused_and_logged() {
    let c = cluster(43, 1);
    // A certificate from another CA, and none at all.
    let other = tempfile::tempdir().unwrap();
    pki(other.path(), &["intruder.test"]);
    let addr = format!("127.0.0.1:{}", c.cport);
    for with_cert in [true, false] {
        let mut cmd = Command::new("openssl");
        cmd.args(["s_client", "-connect", &addr, "-CAfile"])
            .arg(c.pki.path().join("ca.pem"));
        if with_cert {
            cmd.arg("-cert")
                .arg(other.path().join("intruder.test.pem"))
                .arg("-key")
                .arg(other.path().join("intruder.test.key"));
        }
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl s_client");
        let _ = out;
    }
    for why in [
        "TLS handshake failed: invalid peer certificate",
        "TLS handshake failed: peer sent no certificates",
    ] {
        let line = c.coord.wait_log(10, why);
        assert!(
            line.contains("warning: refused unknown[127.0.0.1]:"),
            "{line}"
        );
    }
    assert!(
        !c.coord.log().contains("intruder"),
        "no instance joined under the intruder's name"
    );
    // The instance that has a good certificate is still linked.
    let out = c.insts[0].0.sluice(&["cluster", "status", "--json"]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains("\"state\":\"linked\""), "{json}");
}

#[test]
fn sluice_check_refuses_a_cluster_link_without_its_certificates() {
    let inst = Instance::new(
        "clusterd unix - - n 300 1 clusterd\n",
        "cluster_server = 127.0.0.1:4650\ncluster_tls_cert_file = /nonexistent/mx.pem\n",
    );
    let out = inst.sluice(&["check"]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("master.cf runs clusterd but cluster_listen is empty"),
        "{text}"
    );
    assert!(
        text.contains("cluster_tls_CAfile is empty: the cluster link is mutual TLS only"),
        "{text}"
    );
    let inst = Instance::new(
        "",
        "cluster_server = 127.0.0.1:4650\ncluster_tls_cert_file = /nonexistent/mx.pem\n\
         cluster_tls_CAfile = /nonexistent/ca.pem\ncluster_rate_division = fastest\n",
    );
    let out = inst.sluice(&["check"]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("cluster_rate_division"), "{text}");
    assert!(
        text.contains("line"),
        "a bad value is refused with its line: {text}"
    );
}

#[test]
fn a_host_one_instance_could_not_reach_is_skipped_by_the_others() {
    let c = cluster(46, 2);
    let to_down = |i: usize| {
        let st = Command::new("smtp-source")
            .args(["-s", "1", "-m", "1"])
            .args(["-f", "bulk@sender.example", "-t", "someone@down.test"])
            .arg(format!("127.0.0.1:{}", c.insts[i].1))
            .status()
            .expect("smtp-source is installed by scripts/test");
        assert!(st.success(), "smtp-source to instance {i}");
    };
    to_down(0);
    c.insts[0]
        .0
        .wait_log(30, "connect to mx.down.test[127.46.0.11]:25");
    c.insts[1].0.wait_log(20, "put host mx.down.test in retry");
    to_down(1);
    let line = c.insts[1].0.wait_log(30, "to=<someone@down.test>");
    assert!(
        line.contains("status=deferred") && line.contains("delivery temporarily suspended"),
        "{line}"
    );
    assert!(
        !c.insts[1].0.log().contains("connect to mx.down.test"),
        "the second instance did not pay the connect attempt itself:\n{}",
        c.insts[1].0.log()
    );
}

#[test]
fn clusterd_drops_a_peer_that_stops_reading_instead_of_queueing_for_it_without_bound() {
    use cluster::proto::{encode, RateUse, ToCoord, WireRate, VERSION};
    use std::io::Write;
    assert!(
        sys::is_root(),
        "the cluster tests run as root: the instances' certificates are made readable to nobody"
    );
    let pki_dir = tempfile::tempdir().unwrap();
    pki(pki_dir.path(), &["clusterd.test", "mx9.test"]);
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(pki_dir.path())
        .status()
        .unwrap();
    let cport = free_port();
    let mut coord = Instance::new(
        "clusterd unix - - n 300 1 clusterd\n",
        &format!(
            "myhostname = clusterd.test\ncluster_listen = 127.0.0.1:{cport}\n{}",
            tls_params(pki_dir.path(), "clusterd.test")
        ),
    );
    coord.start();
    coord.wait_log(20, "coordinating on 127.0.0.1");
    // An instance that says hello, then asks for a part of many rates
    // and never reads clusterd's answers (one allotment per key).
    let d = pki_dir.path();
    let cfg = tls::mutual_client_config(
        &d.join("mx9.test.pem"),
        &d.join("mx9.test.key"),
        &d.join("ca.pem"),
    )
    .unwrap();
    let conn = rustls::ClientConnection::new(cfg, "clusterd.test".try_into().unwrap()).unwrap();
    let sock = std::net::TcpStream::connect(("127.0.0.1", cport)).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let hello = ToCoord::Hello {
        version: VERSION,
        name: "mx9.test".into(),
        known: 0,
        keys: vec![],
        held: vec![],
        rates: vec![],
    };
    tls.write_all(&encode(&hello)).unwrap();
    tls.flush().unwrap();
    coord.wait_log(20, "instance mx9.test joined");
    let limit = WireRate {
        tokens: 10,
        per_ms: 1000,
        fixed_window: false,
    };
    for round in 0..5u32 {
        let ids = round * 50_000..(round + 1) * 50_000;
        let mut bytes: Vec<u8> = ids
            .clone()
            .flat_map(|id| {
                encode(&ToCoord::Key {
                    id,
                    name: format!("localip=192.0.2.1,grouping=g{id}"),
                })
            })
            .collect();
        let rates = ids
            .map(|id| RateUse {
                key: id,
                limit,
                used: 1,
                starved: true,
            })
            .collect();
        bytes.extend(encode(&ToCoord::Heartbeat { rates }));
        // clusterd may already have dropped us: the later writes fail.
        if tls.write_all(&bytes).and_then(|()| tls.flush()).is_err() {
            break;
        }
    }
    let line = coord.wait_log(60, "the peer stopped reading");
    assert!(
        line.contains("disconnect from mx9.test[127.0.0.1]:") && line.contains("bytes queued"),
        "{line}"
    );
    coord.wait_log(10, "instance mx9.test left: 0 connected");
    // clusterd itself goes on: a new peer is welcome.
    let again = std::net::TcpStream::connect(("127.0.0.1", cport));
    assert!(again.is_ok(), "clusterd still listens");
}

#[test]
fn an_instance_restarted_while_clusterd_is_away_divides_by_the_count_it_last_heard() {
    let mut c = cluster(47, 3);
    let saved = c.insts[0].0.root().join("spool/state/cluster.instances");
    wait_for(10, "the count kept", || {
        (std::fs::read_to_string(&saved).ok()?.trim() == "3").then_some(())
    });
    c.coord.stop();
    let inst = &mut c.insts[0].0;
    inst.stop();
    inst.start();
    let json = wait_for(20, "a cluster view", || {
        let out = inst.sluice(&["cluster", "status", "--json"]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    });
    assert!(
        json.contains("\"instances\":3") && !json.contains("\"state\":\"linked\""),
        "restarted without clusterd, it divides by the 3 it last heard, not by 1: {json}"
    );
}
