//! Traffic shaping end to end (issue 14): a real instance routing by MX
//! records from dnsmasq to the shaping sink, which listens on port 25 of
//! several loopback addresses and records every connection's source
//! address and every message's arrival, under the policy file.
//! Needs root (port 25) and dnsmasq; without them the tests fail saying so.
//! Each test has its own sink addresses (127.N.0.x), so they run together.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_suite::testkit::{ShapingSink, SinkConn, Stage};
use sluice_suite::{dnsmasq, free_port, wait_for, Instance, Kill};

/// The example, with `replies` and extra clauses per test.
fn policy(extra_yahoo: &str, replies: &str, algorithm: &str) -> String {
    format!(
        "rate:
  algorithm: {algorithm}
groupings:
  - id: orange
    remotemx: [\"*.mx.orange.test\"]
    recipientdomains: [\"orange.test\", \"*.orange.test\"]
  - id: yahoo
    remotemx: [\"*.yahoodns.test\"]
sources:
  - id: pool1
    localip: [127.0.0.2, 127.0.0.3]
  - id: solo
    localip: [127.0.0.2]
policies:
  - fields: [jobid]
  - fields: [localip]
  - fields: [tenantid]
  - fields: [tenantid, grouping]
  - fields: [localip, grouping]
    default:
      concurrency: 20
    conditions:
      - if: {{ grouping: orange }}
        then: {{ concurrency: 2, rate: 10/1 }}
      - if: {{ localip: 127.0.0.2, grouping: yahoo }}
        then: {{ concurrency: 5, cluster: false {extra_yahoo} }}
{replies}"
    )
}

/// A shaping test's world: the sink, DNS for its domains, and an instance.
struct World {
    sink: ShapingSink,
    inst: Instance,
    port: u16,
    _dns: Kill,
}

/// `net` is the test's second address byte; hosts: in1/in2/in3.mx.orange.test
/// (orange.test, wanadoo.test, voila.test) at .10–.12, mx.other.test at
/// .13, mta5.am0.yahoodns.test (yahoo.test) at .14.
fn world(net: u8, policy: &str, pool: &str) -> World {
    assert!(
        sys::is_root(),
        "the shaping tests need root: the sink listens on port 25, where MX delivery goes"
    );
    let ip = |h: u8| format!("127.{net}.0.{h}");
    let ips: Vec<String> = (10..=14).map(ip).collect();
    let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
    let sink = ShapingSink::start_on(&refs, 25);
    let records = [
        "--mx-host=orange.test,in1.mx.orange.test,10".to_string(),
        "--mx-host=wanadoo.test,in2.mx.orange.test,10".to_string(),
        "--mx-host=voila.test,in3.mx.orange.test,10".to_string(),
        "--mx-host=other.test,mx.other.test,10".to_string(),
        "--mx-host=yahoo.test,mta5.am0.yahoodns.test,10".to_string(),
        format!("--host-record=in1.mx.orange.test,{}", ip(10)),
        format!("--host-record=in2.mx.orange.test,{}", ip(11)),
        format!("--host-record=in3.mx.orange.test,{}", ip(12)),
        format!("--host-record=mx.other.test,{}", ip(13)),
        format!("--host-record=mta5.am0.yahoodns.test,{}", ip(14)),
    ];
    let refs: Vec<&str> = records.iter().map(String::as_str).collect();
    let (dns_kill, dns) = dnsmasq(&refs);
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nsmtpd_reject_unlisted_recipient = no\ndns_servers = {dns}\n\
         inet_protocols = ipv4\nminimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n\
         policy_file = policy.yaml\nsmtp_source_pool = {pool}\ntenant_id_header = X-Tenant-ID\n"
    );
    let mut inst = Instance::new(&cf, &main);
    std::fs::write(inst.etc().join("policy.yaml"), policy).unwrap();
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
        inst,
        port,
        _dns: dns_kill,
    }
}

impl World {
    fn ip(&self, h: u8) -> String {
        let net = match self.sink.ips[0] {
            std::net::IpAddr::V4(v) => v.octets()[1],
            _ => unreachable!(),
        };
        format!("127.{net}.0.{h}")
    }

    /// `n` messages to `rcpt` through smtp-source over `sessions` sessions.
    fn send(&self, n: u32, sessions: u32, rcpt: &str) {
        let st = Command::new("smtp-source")
            .args(["-s", &sessions.to_string(), "-m", &n.to_string()])
            .args(["-f", "bulk@sender.example", "-t", rcpt])
            .arg(format!("127.0.0.1:{}", self.port))
            .status()
            .expect("smtp-source is installed by scripts/test");
        assert!(st.success(), "smtp-source to {rcpt}");
    }

    fn sluice(&self, args: &[&str]) -> String {
        let out = self.inst.sluice(args);
        assert!(
            out.status.success(),
            "sluice {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Messages that arrived at host `h` (its address's last byte).
    fn at(&self, h: u8) -> usize {
        let want = self.ip(h);
        self.sink
            .messages()
            .iter()
            .filter(|m| m.listen.to_string() == want)
            .count()
    }
}

fn source(c: &SinkConn) -> String {
    c.source.ip().to_string()
}

#[test]
fn a_grouping_gets_two_connections_per_source_while_other_mail_flows() {
    let w = world(21, &policy("", "", "tokenbucket"), "pool1");
    for h in 10..=13 {
        w.sink.delay(&w.ip(h), Duration::from_millis(150));
    }
    // Three domains that orange hosts, and one elsewhere.
    w.send(30, 10, "a@orange.test");
    w.send(30, 10, "b@wanadoo.test");
    w.send(30, 10, "c@voila.test");
    w.send(60, 10, "d@other.test");
    w.sink.wait_messages(150, 120);
    let orange: Vec<String> = (10..=12).map(|h| w.ip(h)).collect();
    for src in ["127.0.0.2", "127.0.0.3"] {
        let most = w.sink.max_concurrent_where(|c| {
            source(c) == src && orange.contains(&c.listen.ip().to_string())
        });
        assert_eq!(
            most, 2,
            "connections from {src} to orange's hosts, sampled at every connect"
        );
    }
    let other = w.ip(13);
    let most_other = ["127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|src| {
            w.sink
                .max_concurrent_where(|c| source(c) == *src && c.listen.ip().to_string() == other)
        })
        .max()
        .unwrap();
    assert!(
        most_other > 2,
        "other.test is not held to orange's limit: {most_other}"
    );
    let sources: std::collections::BTreeSet<String> = w.sink.conns().iter().map(source).collect();
    assert_eq!(
        sources.into_iter().collect::<Vec<_>>(),
        ["127.0.0.2", "127.0.0.3"],
        "every connection left from the pool"
    );
    let show = w.sluice(&["policy", "show"]);
    let line = show
        .lines()
        .find(|l| l.starts_with("localip=127.0.0.2,grouping=orange "))
        .unwrap_or_else(|| panic!("no orange key in:\n{show}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!((cols[1], cols[3]), ("2", "10/1s"), "{line}");
    let json = w.sluice(&["policy", "show", "--json"]);
    assert!(
        json.contains("\"key\":\"localip=127.0.0.3,grouping=orange\",\"concurrency\":2"),
        "{json}"
    );
}

/// Arrival times as wall-clock milliseconds.
fn wall_ms(sink: &ShapingSink) -> Vec<u64> {
    let (sys_now, now) = (SystemTime::now(), Instant::now());
    let base = sys_now.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    sink.messages()
        .iter()
        .map(|m| base - now.duration_since(m.at).as_millis() as u64)
        .collect()
}

#[test]
fn a_token_bucket_of_10_per_second_delivers_600_in_60_seconds_evenly() {
    let w = world(22, &policy("", "", "tokenbucket"), "solo");
    w.send(700, 10, "a@orange.test");
    let first = w.sink.wait_messages(1, 30)[0].at;
    std::thread::sleep(Duration::from_secs(61).saturating_sub(first.elapsed()));
    let n = w
        .sink
        .messages()
        .iter()
        .filter(|m| m.at.duration_since(first) < Duration::from_secs(60))
        .count();
    // A full bucket's 10 at once, then one every 100 ms: 609.
    assert!((588..=612).contains(&n), "{n} messages in 60 s");
    let ms = wall_ms(&w.sink);
    let early = ms.iter().filter(|t| *t % 1000 < 250).count() as f64 / ms.len() as f64;
    assert!(
        early < 0.4,
        "spread over each second: {early:.2} in its first quarter"
    );
}

#[test]
fn a_fixed_window_sends_its_10_at_the_start_of_each_second() {
    let w = world(23, &policy("", "", "fixedwindow"), "solo");
    w.send(200, 10, "a@orange.test");
    let first = w.sink.wait_messages(1, 30)[0].at;
    std::thread::sleep(Duration::from_secs(11).saturating_sub(first.elapsed()));
    // The first seconds include connecting: a token taken late in one
    // window can arrive in the next. From then on, windows are plain.
    let all = wall_ms(&w.sink);
    let start = all.iter().min().unwrap() / 1000 + 2;
    let ms: Vec<u64> = all.into_iter().filter(|t| t / 1000 >= start).collect();
    let mut per_second: BTreeMap<u64, usize> = BTreeMap::new();
    for t in &ms {
        *per_second.entry(t / 1000).or_default() += 1;
    }
    assert!(
        per_second.values().all(|&n| n <= 10),
        "at most 10 in any window: {per_second:?}"
    );
    let early = ms.iter().filter(|t| *t % 1000 < 250).count() as f64 / ms.len() as f64;
    assert!(
        early > 0.8,
        "bursts at window starts: {early:.2} in the first quarter"
    );
    assert!(ms.len() >= 70, "{} in about 8 s", ms.len());
}

#[test]
fn connectinterval_transactions_and_idletimeout_show_in_the_connection_log() {
    let w = world(
        24,
        &policy(
            ", transactions: 3, idletimeout: 2s, connectinterval: 1s",
            "",
            "tokenbucket",
        ),
        "solo",
    );
    // 8: the last connection carries 2 and is then pooled, idle.
    w.send(8, 3, "y@yahoo.test");
    let msgs = w.sink.wait_messages(8, 30);
    let yahoo = w.ip(14);
    let conns: Vec<SinkConn> = wait_for(10, "every yahoo connection closed", || {
        let c: Vec<SinkConn> = w
            .sink
            .conns()
            .into_iter()
            .filter(|c| c.listen.ip().to_string() == yahoo)
            .collect();
        c.iter().all(|c| c.closed.is_some()).then_some(c)
    });
    assert!(conns.len() >= 3, "{} connections", conns.len());
    assert!(
        conns.iter().all(|c| c.transactions <= 3),
        "transactions: {:?}",
        conns.iter().map(|c| c.transactions).collect::<Vec<_>>()
    );
    for pair in conns.windows(2) {
        let gap = pair[1].connected.duration_since(pair[0].connected);
        assert!(gap >= Duration::from_millis(900), "connects {gap:?} apart");
    }
    let last_msg = msgs.iter().map(|m| m.at).max().unwrap();
    let last_close = conns.iter().filter_map(|c| c.closed).max().unwrap();
    let idle = last_close.duration_since(last_msg);
    assert!(
        (Duration::from_millis(1500)..Duration::from_millis(3500)).contains(&idle),
        "the last connection idled {idle:?} (idletimeout 2s)"
    );
}

#[test]
fn a_suspension_for_30s_holds_its_grouping_while_other_mail_flows() {
    let w = world(25, &policy("", "", "tokenbucket"), "pool1");
    let id = w.sluice(&[
        "queue",
        "suspend",
        "grouping=yahoo",
        "--for",
        "30s",
        "--tag",
        "their outage",
    ]);
    let id = id.trim().to_string();
    let t0 = Instant::now();
    w.inst.wait_log(
        10,
        &format!("shaping: grouping=yahoo suspended by the administrator for 30s, hold id {id} (their outage)"),
    );
    let list = w.sluice(&["queue", "suspensions"]);
    assert!(
        list.contains("grouping=yahoo") && list.contains("their outage"),
        "{list}"
    );
    w.send(5, 1, "y@yahoo.test");
    w.send(5, 1, "o@other.test");
    wait_for(15, "other.test's mail", || (w.at(13) == 5).then_some(()));
    while t0.elapsed() < Duration::from_secs(28) {
        assert_eq!(w.at(14), 0, "nothing for yahoo during the suspension");
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_for(15, "yahoo's mail once the suspension ended", || {
        (w.at(14) == 5).then_some(())
    });
    assert!(t0.elapsed() >= Duration::from_secs(29));
    assert!(
        !w.inst.log().contains("to=<y@yahoo.test>, relay=none"),
        "no deferral noise for suspended mail"
    );
}

#[test]
fn a_ts04_reply_suspends_that_source_for_yahoo_only_then_ramps_back() {
    let replies = "replies:
  - match: '\\[TS04\\]'
    threshold: immediate
    fields: [localip, grouping]
    if: { grouping: yahoo }
    action: suspend
    duration: 20s
    ramp: { step: 50%, interval: 5s }
";
    let w = world(26, &policy("", replies, "tokenbucket"), "solo");
    let yahoo = w.ip(14);
    w.sink.reply(
        &yahoo,
        Stage::Rcpt,
        "421 4.7.0 [TS04] Messages from 127.0.0.2 temporarily deferred",
    );
    w.send(1, 1, "first@yahoo.test");
    let line = w.inst.wait_log(
        30,
        "shaping: localip=127.0.0.2,grouping=yahoo suspended by reply rule 1 for 20s",
    );
    let t0 = Instant::now();
    assert!(line.contains("hold id"), "{line}");
    w.sink.clear_replies();
    let show = w.sluice(&["policy", "show"]);
    assert!(
        show.lines()
            .any(|l| l.contains("localip=127.0.0.2,grouping=yahoo") && l.contains("suspend")),
        "{show}"
    );
    let json = w.sluice(&["policy", "show", "--json"]);
    assert!(
        json.contains(
            "\"key\":\"localip=127.0.0.2,grouping=yahoo\",\"concurrency\":5,\"concurrency_now\":0,"
        ),
        "suspended: {json}"
    );
    assert!(json.contains("\"cluster_false\":\"concurrency\""), "{json}");
    assert!(json.contains("\"origin\":\"reply rule 1\""), "{json}");
    w.send(3, 1, "later@yahoo.test");
    w.send(3, 1, "o@orange.test");
    wait_for(15, "orange's mail from the same source", || {
        (w.at(10) == 3).then_some(())
    });
    while t0.elapsed() < Duration::from_secs(18) {
        assert_eq!(
            w.at(14),
            0,
            "nothing for yahoo from 127.0.0.2 while suspended"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_for(30, "yahoo's mail after the ramp began", || {
        (w.at(14) == 4).then_some(())
    });
}

#[test]
fn a_ts03_refusal_at_the_greeting_suspends_that_source_and_is_quoted_as_sent() {
    let replies = "replies:
  - match: '^554 5\\.7\\.1 \\[TS03\\]'
    threshold: immediate
    fields: [localip, grouping]
    if: { grouping: yahoo }
    action: suspend
    duration: 60s
";
    let w = world(29, &policy("", replies, "tokenbucket"), "solo");
    let yahoo = w.ip(14);
    let ts03 = "554 5.7.1 [TS03] All messages from 127.0.0.2 will be permanently deferred";
    w.sink.reply(&yahoo, Stage::Greeting, ts03);
    w.send(1, 1, "first@yahoo.test");
    // Before: worded "refused to talk to me", the refusal never reached the rules.
    w.inst.wait_log(
        30,
        "shaping: localip=127.0.0.2,grouping=yahoo suspended by reply rule 1 for 60s",
    );
    let log = w.inst.log();
    assert!(
        log.contains(&format!("refused to talk to me: {ts03}")),
        "the server quoted as it sent it: {log}"
    );
}

#[test]
fn reload_keeps_the_bucket_and_restart_keeps_suspensions() {
    let slow =
        |rate: &str| policy("", "", "tokenbucket").replace("rate: 10/1", &format!("rate: {rate}"));
    let mut w = world(27, &slow("1/10"), "solo");
    w.send(1, 1, "a@orange.test");
    let first = w.sink.wait_messages(1, 30)[0].at;
    // A changed rate, reloaded (a change of the policy file alone is
    // one): the new bucket holds 2, but the emptied one is kept, not refilled.
    std::fs::write(w.inst.etc().join("policy.yaml"), slow("2/20")).unwrap();
    w.sluice(&["reload"]);
    wait_for(10, "the new rate in force", || {
        w.sluice(&["policy", "show"])
            .contains("2/20s")
            .then_some(())
    });
    w.send(1, 1, "b@orange.test");
    let second = w.sink.wait_messages(2, 30)[1].at;
    let gap = second.duration_since(first);
    assert!(
        gap >= Duration::from_secs(8),
        "the second waited for a token: {gap:?}"
    );

    // A broken policy reloaded: qmgr says where, and keeps the one in force.
    std::fs::write(
        w.inst.etc().join("policy.yaml"),
        "policies:\n  - fields: [colour]\n",
    )
    .unwrap();
    w.sluice(&["reload"]);
    let warn = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        w.inst.wait_log(10, "keeping the running configuration")
    }))
    .unwrap_or_else(|_| panic!("{}", w.inst.log()));
    assert!(warn.contains("policy.yaml:2:"), "{warn}");
    let show = w.sluice(&["policy", "show"]);
    assert!(
        show.contains("localip=127.0.0.2,grouping=orange") && show.contains("2/20s"),
        "{show}"
    );
    std::fs::write(w.inst.etc().join("policy.yaml"), slow("2/20")).unwrap();

    let id = w
        .sluice(&["queue", "suspend", "grouping=yahoo"])
        .trim()
        .to_string();
    w.inst.stop();
    w.inst.start();
    w.inst.wait_port(w.port);
    let list = w.sluice(&["queue", "suspensions"]);
    assert!(
        list.lines()
            .any(|l| l.trim_start().starts_with(&id) && l.contains("grouping=yahoo")),
        "suspension {id} after a restart:\n{list}"
    );
    w.send(1, 1, "y@yahoo.test");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(w.at(14), 0, "still suspended after the restart");
    w.sluice(&["queue", "resume", &id]);
    wait_for(20, "yahoo's mail once resumed", || {
        (w.at(14) == 1).then_some(())
    });
}

/// `n` messages with `X-Tenant-ID: tenant` (none when empty) to `rcpt`,
/// through Python's smtplib in one session.
fn send_as_tenant(port: u16, n: u32, tenant: &str, rcpt: &str) {
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import smtplib, sys\n\
             port, n, tenant, rcpt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]\n\
             s = smtplib.SMTP('127.0.0.1', port, timeout=60)\n\
             for i in range(n):\n\
             \x20   head = ('X-Tenant-ID: %s\\r\\n' % tenant) if tenant else ''\n\
             \x20   s.sendmail('sender@tenants.example', [rcpt], head + 'Subject: %d\\r\\n\\r\\nbody\\r\\n' % i)\n\
             s.quit()\n",
        )
        .args([&port.to_string(), &n.to_string(), tenant, rcpt])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "smtplib: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_tenant_gets_its_own_rate_and_other_mail_does_not_wait_for_it() {
    let tenants = "  - fields: [tenantid]\n    conditions:\n      - if: { tenantid: acme }\n        then: { rate: 4/1 }\n";
    let p = policy("", "", "tokenbucket").replace("  - fields: [tenantid]\n", tenants);
    let w = world(28, &p, "pool1");
    let t0 = Instant::now();
    send_as_tenant(w.port, 24, "acme", "a@other.test");
    // The same destination, queued behind acme's mail: the scheduler
    // passes over what shaping refuses for acme's side.
    send_as_tenant(w.port, 24, "", "b@other.test");
    let msgs = w.sink.wait_messages(48, 60);
    let (acme, rest): (Vec<_>, Vec<_>) = msgs
        .iter()
        .partition(|m| m.rcpts.iter().any(|r| r == "a@other.test"));
    assert_eq!((acme.len(), rest.len()), (24, 24));
    assert!(
        acme.iter().all(|m| !m.data.contains("X-Tenant-ID")),
        "the tenant header is removed before delivery"
    );
    // acme: a full bucket of 4, then 4 a second: 20 more take about 5 s.
    let first = acme.iter().map(|m| m.at).min().unwrap();
    let last = acme.iter().map(|m| m.at).max().unwrap();
    let span = last.duration_since(first);
    assert!(
        (Duration::from_millis(4500)..Duration::from_secs(8)).contains(&span),
        "acme's 24 took {span:?}"
    );
    let rest_last = rest.iter().map(|m| m.at).max().unwrap();
    assert!(
        rest_last.duration_since(t0) < last.duration_since(t0),
        "the other mail did not wait for acme's rate"
    );
    let show = w.sluice(&["policy", "show"]);
    assert!(
        show.lines()
            .any(|l| l.starts_with("tenantid=acme ") && l.contains("4/1s")),
        "{show}"
    );
}
