//! Egress through a proxy layer (issue 21): smtp(8) with `smtp_proxy`
//! naming two real HAProxy instances (Debian's), each reading the PROXY
//! protocol v2 header smtp sends and connecting to the destination it
//! names from the source address it names (`usesrc clientip`). The
//! sources, 127.0.0.2 and 127.0.0.3, stand for addresses that live on the
//! proxy hosts; the traffic-shaping policy chooses one per message by
//! its sender domain. The destination is the shaping sink behind a
//! relayhost, which records each connection's source address; HAProxy's
//! session log says which proxy carried each connection.
//!
//! Needs root: HAProxy binds a source address that is not its own with
//! IP_TRANSPARENT. Without root or haproxy the tests fail saying so.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use sluice_suite::haproxy::HaProxy;
use sluice_suite::testkit::{ShapingSink, Unanswering};
use sluice_suite::{free_port, require_root, wait_for, Instance};

const POLICY: &str = "sources:
  - id: a
    localip: [127.0.0.2]
    senderdomain: [a.example]
  - id: b
    localip: [127.0.0.3]
    senderdomain: [b.example]
  - id: both
    localip: [127.0.0.2, 127.0.0.3]
policies:
  - fields: [localip]
    default:
      concurrency: 20
";

/// A test's world: the sink, two egress proxies and an instance that
/// relays everything to the sink through them.
struct World {
    sink: ShapingSink,
    proxies: Vec<HaProxy>,
    ports: Vec<u16>,
    inst: Instance,
    port: u16,
    metrics: u16,
    dir: tempfile::TempDir,
}

fn world() -> World {
    world_with(None, None)
}

/// A world whose first proxy is `first` (a port that is no haproxy) when
/// given, and whose relayhost is port `relay` when given (else the sink).
fn world_with(first: Option<u16>, relay: Option<u16>) -> World {
    require_root("HAProxy's usesrc clientip binds the source address the PROXY header names");
    let dir = tempfile::tempdir().unwrap();
    let sink = ShapingSink::start(&["127.0.0.1"]);
    let mut proxies = Vec::new();
    let port0 = match first {
        Some(p) => p,
        None => {
            let (p0, port0) = HaProxy::egress(dir.path(), "proxy0");
            proxies.push(p0);
            port0
        }
    };
    let (p1, port1) = HaProxy::egress(dir.path(), "proxy1");
    proxies.push(p1);
    let port = free_port();
    let metrics = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{}\nsmtpd_reject_unlisted_recipient = no\n\
         minimal_backoff_time = 1s\nmaximal_backoff_time = 2s\nqueue_run_delay = 1s\n\
         policy_file = policy.yaml\nsmtp_source_pool = both\n\
         smtp_proxy = 127.0.0.1:{port0}, 127.0.0.1:{port1}\nsmtp_connect_timeout = 1s\n\
         transport_retry_time = 2s\n\
         metrics_listen = 127.0.0.1:{metrics}\n",
        relay.unwrap_or(sink.port)
    );
    let mut inst = Instance::new(&cf, &main);
    std::fs::write(inst.etc().join("policy.yaml"), POLICY).unwrap();
    let check = inst.sluice(&["check"]);
    assert!(
        check.status.success(),
        "sluice check: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    inst.start();
    inst.wait_port(port);
    World {
        sink,
        proxies,
        ports: vec![port0, port1],
        inst,
        port,
        metrics,
        dir,
    }
}

impl World {
    /// `n` messages from `from` over `sessions` sessions of smtp-source.
    fn send(&self, n: u32, sessions: u32, from: &str) {
        let st = Command::new("smtp-source")
            .args(["-s", &sessions.to_string(), "-m", &n.to_string()])
            .args(["-f", from, "-t", "rcpt@remote.example"])
            .arg(format!("127.0.0.1:{}", self.port))
            .status()
            .expect("smtp-source is installed by scripts/test");
        assert!(st.success(), "smtp-source from {from}");
    }

    /// qmgr's Prometheus text.
    fn metrics(&self) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.metrics)).expect("metrics endpoint");
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    }

    /// Failures counted for the proxy on `port`.
    fn proxy_failures(&self, port: u16) -> u64 {
        let label = format!("proxy=\"127.0.0.1:{port}\"}} ");
        self.metrics()
            .lines()
            .find(|l| l.starts_with("sluice_proxy_failures_total{") && l.contains(&label))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// Until every connection the sink took is closed (the idle ones
    /// after connection_cache_time_limit).
    fn wait_closed(&self) {
        wait_for(30, "the connections closed", || {
            self.sink
                .conns()
                .iter()
                .all(|c| c.closed.is_some())
                .then_some(())
        });
    }

    fn queue_is_empty(&self) -> bool {
        self.inst.queued_ids().is_empty()
    }

    /// Sends `n` messages over `sessions` sessions from `from` and waits
    /// until each has arrived from `source` and the queue is empty; gives
    /// the mail log.
    fn all_arrive(&self, (n, sessions): (u32, u32), from: &str, source: &str) -> String {
        self.send(n, sessions, from);
        let msgs = self.sink.wait_messages(n as usize, 60);
        assert!(msgs.iter().all(|m| m.source.to_string() == source));
        wait_for(30, "the queue empty", || {
            self.queue_is_empty().then_some(())
        });
        self.inst.log()
    }
}

/// No destination was declared dead and no host put aside.
fn assert_nothing_dead(log: &str) {
    let dead: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("is not responding") || l.contains("deliveries suspended"))
        .collect();
    assert!(dead.is_empty(), "a destination was declared dead: {dead:?}");
}

#[test]
fn each_message_leaves_from_the_source_its_policy_chooses_through_the_proxies() {
    let w = world();
    // Both pools in the queue at once, on connections to one destination.
    w.send(12, 3, "sender@a.example");
    w.send(12, 3, "sender@b.example");
    let msgs = w.sink.wait_messages(24, 60);
    for m in &msgs {
        let want = if m.from.ends_with("@a.example") {
            "127.0.0.2"
        } else {
            assert!(m.from.ends_with("@b.example"), "{}", m.from);
            "127.0.0.3"
        };
        assert_eq!(
            m.source.to_string(),
            want,
            "message from {} came from the policy's source (connection {} of {:?})",
            m.from,
            m.conn,
            msgs.iter()
                .map(|m| (m.conn, m.from.as_str()))
                .collect::<Vec<_>>()
        );
    }
    // Every connection the sink saw came through a proxy, and both took
    // their turns.
    w.wait_closed();
    let conns = w.sink.conns().len();
    let through: Vec<usize> = w.proxies.iter().map(HaProxy::sessions).collect();
    assert_eq!(
        through.iter().sum::<usize>(),
        conns,
        "sessions per proxy {through:?}, sink connections {conns}"
    );
    assert!(
        through.iter().all(|n| *n > 0),
        "both proxies carried connections: {through:?}"
    );
    // The relay logged is the destination, not the proxy.
    let log = w.inst.log();
    let sent: Vec<&str> = log.lines().filter(|l| l.contains("status=sent")).collect();
    assert_eq!(sent.len(), 24, "{log}");
    let relay = format!("relay=127.0.0.1[127.0.0.1]:{},", w.sink.port);
    assert!(sent.iter().all(|l| l.contains(&relay)), "{sent:?}");
    assert!(!log.contains("connect to proxy"), "{log}");
    assert_eq!(w.proxy_failures(w.ports[0]), 0);
    assert_eq!(w.proxy_failures(w.ports[1]), 0);
    // The shaping policy counted per real source address.
    let show = w.inst.sluice(&["policy", "show"]);
    let show = String::from_utf8_lossy(&show.stdout);
    for key in ["localip=127.0.0.2", "localip=127.0.0.3"] {
        assert!(show.contains(key), "{key} in:\n{show}");
    }
}

#[test]
fn a_proxy_killed_during_delivery_leaves_the_other_to_carry_all_the_mail() {
    let mut w = world();
    // A slow destination: connections stay busy through the kill.
    w.sink.delay("127.0.0.1", Duration::from_millis(40));
    let acked = w.dir.path().join("acked.txt");
    let sender = {
        let (port, acked) = (w.port.to_string(), acked.to_str().unwrap().to_string());
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/send_many.py");
        std::thread::spawn(move || {
            Command::new("python3")
                .arg(script)
                .args([
                    "127.0.0.1",
                    &port,
                    "300",
                    "4",
                    &acked,
                    "512",
                    "remote.example",
                ])
                .output()
                .expect("python3")
        })
    };
    wait_for(60, "mail through both proxies", || {
        (w.sink.messages().len() >= 40 && w.proxies.iter().all(|p| p.sessions() > 0)).then_some(())
    });
    w.proxies[0].kill();
    let before = w.proxies[1].sessions();
    let out = sender.join().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("ok=300 "), "{said}");
    let mids: BTreeSet<String> = std::fs::read_to_string(&acked)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    assert_eq!(mids.len(), 300);
    wait_for(120, "every accepted message at the destination", || {
        let msgs = w.sink.messages();
        mids.iter()
            .all(|mid| msgs.iter().any(|m| m.data.contains(mid.as_str())))
            .then_some(())
    });
    wait_for(30, "the queue empty", || w.queue_is_empty().then_some(()));
    assert!(
        w.proxies[1].sessions() > before,
        "the other proxy carried the rest"
    );
    let log = w.inst.log();
    // The kill cut transactions short: deferred, then delivered through
    // the other proxy.
    assert!(log.contains("lost connection with"), "{log}");
    // Refused once it is gone, or reset if the kill caught a connection
    // the dying proxy had accepted.
    let failed = format!("connect to proxy 127.0.0.1:{}: ", w.ports[0]);
    assert!(log.contains(&failed), "{log}");
    assert!(w.proxy_failures(w.ports[0]) > 0, "{}", w.metrics());
    assert_eq!(w.proxy_failures(w.ports[1]), 0);
    assert!(!log.contains("status=bounced"), "{log}");
    assert_nothing_dead(&log);
}

#[test]
fn with_every_proxy_down_mail_is_deferred_and_the_destination_stays_alive() {
    let mut w = world();
    for p in &mut w.proxies {
        p.kill();
    }
    w.send(20, 1, "sender@a.example");
    let line = w.inst.wait_log(60, "no egress proxy could be reached");
    for port in &w.ports {
        assert!(
            line.contains(&format!(
                "connect to proxy 127.0.0.1:{port}: Connection refused"
            )),
            "the reason names every proxy: {line}"
        );
    }
    let log = w.inst.wait_log(60, "status=deferred");
    assert!(log.contains("dsn=4.4.0"), "{log}");
    assert!(w.sink.conns().is_empty());
    // The transport is throttled after a local failure (Postfix's
    // transport_retry_time): the destination's first connections fail,
    // and its other mail is deferred with them, not tried proxy by
    // proxy, message by message (then each deferral costs an attempt
    // through each proxy). Two rounds of every message, at least.
    let deferrals = || w.inst.log().matches("status=deferred").count();
    wait_for(30, "every message deferred twice", || {
        (deferrals() >= 40).then_some(())
    });
    for p in &w.ports {
        let failures = w.proxy_failures(*p);
        let deferred = deferrals();
        assert!(
            failures > 0 && failures * 2 <= deferred as u64,
            "{deferred} deferrals cost {failures} attempts through the proxy on port {p}"
        );
    }
    // The proxies come back: the mail goes at its next retry, the
    // destination never having been declared dead.
    let restarted: Vec<HaProxy> = w
        .ports
        .iter()
        .enumerate()
        .map(|(i, port)| HaProxy::egress_on(w.dir.path(), &format!("again{i}"), *port))
        .collect();
    let msgs = w.sink.wait_messages(20, 60);
    assert!(msgs.iter().all(|m| m.source.to_string() == "127.0.0.2"));
    wait_for(30, "the queue empty", || w.queue_is_empty().then_some(()));
    assert!(restarted.iter().map(HaProxy::sessions).sum::<usize>() > 0);
    let log = w.inst.log();
    assert!(!log.contains("status=bounced"), "{log}");
    assert_nothing_dead(&log);
}

#[test]
fn a_proxy_that_does_not_answer_is_passed_over_after_the_connect_timeout() {
    // The first proxy drops every SYN, as a proxy host behind a dead link.
    let silent = Unanswering::start();
    let w = world_with(Some(silent.port), None);
    let log = w.all_arrive((6, 2), "sender@b.example", "127.0.0.3");
    let timed_out = format!(
        "connect to proxy 127.0.0.1:{}: Connection timed out",
        silent.port
    );
    assert!(log.contains(&timed_out), "{log}");
    assert!(w.proxy_failures(silent.port) > 0, "{}", w.metrics());
    assert_eq!(w.proxy_failures(w.ports[1]), 0);
    assert!(!log.contains("status=deferred"), "{log}");
    assert_nothing_dead(&log);
}

#[test]
fn a_host_that_refuses_behind_a_working_proxy_is_the_hosts_failure_not_the_proxys() {
    // Nothing listens there: HAProxy cannot connect and closes ours.
    let closed = free_port();
    let w = world_with(None, Some(closed));
    w.send(1, 1, "sender@a.example");
    let line = w
        .inst
        .wait_log(60, "closed by the proxy before the greeting");
    let what = format!("connect to 127.0.0.1[127.0.0.1]:{closed} via proxy 127.0.0.1:");
    assert!(line.contains(&what), "{line}");
    let deferred = w.inst.wait_log(60, "status=deferred");
    assert!(deferred.contains("dsn=4.4.1"), "{deferred}");
    let log = w.inst.log();
    assert!(!log.contains("connect to proxy"), "{log}");
    for port in &w.ports {
        assert_eq!(w.proxy_failures(*port), 0, "{}", w.metrics());
    }
}

/// A proxy that takes the connection and resets it once the PROXY header
/// is in (closing with unread input sends a reset): what a proxy killed
/// with the connection accepted does, on demand.
struct Resetting {
    port: u16,
}

impl Resetting {
    fn start() -> Resetting {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                // Once the header's first byte is in, the rest is left
                // unread: the close is then a reset, however slow the
                // header's writer was.
                let mut first = [0u8; 1];
                let _ = conn.read_exact(&mut first);
                std::thread::sleep(Duration::from_millis(20));
                drop(conn);
            }
        });
        Resetting { port }
    }
}

#[test]
fn a_proxy_that_resets_after_the_header_is_passed_for_the_next_with_the_same_address() {
    let reset = Resetting::start();
    let w = world_with(Some(reset.port), None);
    let log = w.all_arrive((3, 1), "sender@a.example", "127.0.0.2");
    let lost = format!(
        "connect to proxy 127.0.0.1:{}: lost before the greeting",
        reset.port
    );
    assert!(log.contains(&lost), "{log}");
    // The host's one address was tried again through the other proxy: not
    // given up as "no address", not deferred, nothing counted against it.
    assert!(!log.contains("no address"), "{log}");
    assert!(!log.contains("status=deferred"), "{log}");
    assert!(w.proxy_failures(reset.port) > 0, "{}", w.metrics());
    assert_nothing_dead(&log);
}

#[test]
fn an_ipv6_proxy_carries_mail_from_an_ipv6_source_address() {
    require_root("HAProxy's usesrc clientip binds the source address the PROXY header names");
    let dir = tempfile::tempdir().unwrap();
    let sink = ShapingSink::start(&["::1"]);
    let (proxy, proxy_port) = HaProxy::egress_v6(dir.path(), "proxy6");
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nrelayhost = [::1]:{}\nsmtpd_reject_unlisted_recipient = no\n\
         inet_protocols = all\npolicy_file = policy.yaml\nsmtp_source_pool = v6\n\
         smtp_proxy = [::1]:{proxy_port}\nsmtp_connect_timeout = 1s\n",
        sink.port
    );
    let mut inst = Instance::new(&cf, &main);
    std::fs::write(
        inst.etc().join("policy.yaml"),
        "sources:\n  - id: v6\n    localip: ['::1']\npolicies:\n  - fields: [localip]\n    default:\n      concurrency: 5\n",
    )
    .unwrap();
    let check = inst.sluice(&["check"]);
    assert!(
        check.status.success(),
        "sluice check: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    inst.start();
    inst.wait_port(port);
    let st = Command::new("smtp-source")
        .args([
            "-s",
            "2",
            "-m",
            "4",
            "-f",
            "sender@a.example",
            "-t",
            "rcpt@remote.example",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .status()
        .expect("smtp-source is installed by scripts/test");
    assert!(st.success());
    let msgs = sink.wait_messages(4, 60);
    assert!(
        msgs.iter().all(|m| m.source.to_string() == "::1"),
        "every message came from the IPv6 source, through the proxy"
    );
    assert!(proxy.sessions() > 0, "the proxy carried them");
    let log = inst.log();
    assert!(log.contains("relay=::1[::1]:"), "{log}");
    assert!(!log.contains("status=deferred"), "{log}");
}
