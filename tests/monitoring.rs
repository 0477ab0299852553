//! The operator's view: `sluice status` (text and JSON), `sluice top --once`
//! and the Prometheus endpoint, read back after a known mail mix: mail
//! delivered to smtp-sink, mail bounced by another, mail for a destination
//! nobody listens on (dead), and mail stuck at a sink that never answers
//! DATA (slow).

use sluice_suite::{dumped, free_port, smtp_sink, swaks, wait_for, Instance, Sink};

struct Mix {
    inst: Instance,
    good: Sink,
    _bad: Sink,
    _slow: Sink,
    dead_port: u16,
    slow_port: u16,
}

fn send(port: u16, to: &str) {
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@example.com",
        "--to",
        to,
    ]);
    assert_eq!(code, 0, "{out}");
}

/// 3 messages delivered, 1 bounced (its notice delivered too), 3 for a dead
/// destination, 2 in flight to a slow one.
fn mix(extra: &str) -> Mix {
    let good = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let bad = smtp_sink(&format!("127.0.0.1:{}", free_port()), &["-f", "rcpt"]);
    // DATA is answered after an hour: the transactions stay in flight.
    let slow = smtp_sink(&format!("127.0.0.1:{}", free_port()), &["-w", "3600"]);
    let dead_port = free_port();
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\n\
         deadend unix - - n - - smtp\n"
    );
    // One connection at a time to the dead destination, so that two
    // refused connections pass the failed cohort limit; its one host is
    // never skipped as in retry (which would defer the next messages
    // without a connection, and so without a failed cohort), as it was
    // while destdb named hosts by address alone and the good sink's
    // deliveries on the same address cleared the dead port's record.
    let main = format!(
        "myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{}\nsmtpd_reject_unlisted_recipient = no\n\
         deadend_initial_destination_concurrency = 1\ndeadend_host_retry_time = 0s\n\
         transport_maps = inline:{{ bounce.example = smtp:[127.0.0.1]:{}, dead.example = deadend:[127.0.0.1]:{dead_port}, slow.example = smtp:[127.0.0.1]:{} }}\n{extra}",
        good.port, bad.port, slow.port
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);
    for i in 0..3 {
        send(port, &format!("user{i}@good.example"));
    }
    send(port, "nobody@bounce.example");
    for i in 0..3 {
        send(port, &format!("user{i}@dead.example"));
    }
    for i in 0..2 {
        send(port, &format!("user{i}@slow.example"));
    }
    // The three, and the notice for the bounce.
    wait_for(30, "4 messages at the good sink", || {
        (dumped(&good) == 4).then_some(())
    });
    inst.wait_log(20, "is not responding: deliveries suspended");
    let slow_port = slow.port;
    Mix {
        inst,
        good,
        _bad: bad,
        _slow: slow,
        dead_port,
        slow_port,
    }
}

#[test]
fn status_and_top_show_the_dead_and_the_slow_destination() {
    let m = mix("");
    let (dead, slow) = (m.dead_port.to_string(), m.slow_port.to_string());
    // The figures settle as the scheduler works; poll until they do.
    let json = wait_for(30, "dead and slow destinations in status --json", || {
        let out = m.inst.sluice(&["status", "--json"]);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let checked = m
            .inst
            .python("status_json.py", &[&text, "dead-and-slow", &dead, &slow]);
        let verdict = String::from_utf8_lossy(&checked.stdout).trim().to_string();
        assert!(checked.status.success(), "{text}\n{checked:?}");
        (verdict == "ok").then_some(text)
    });
    assert!(
        json.contains("\"deliveries\":{\"sent\":{\"total\":4,"),
        "{json}"
    );

    // The text status: a short version of the same.
    let out = m.inst.sluice(&["status"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("queue: 5 messages (incoming 0, active 2, deferred 3, hold 0)"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "dead destinations: [127.0.0.1]:{dead} (deadend, retry "
        )),
        "{text}"
    );
    assert!(text.contains("since qmgr start: sent 4, "), "{text}");
    assert!(
        text.contains(&format!(
            "busiest destination: [127.0.0.1]:{dead} (deadend): 0 queued, 3 deferred, window 0, busy 0"
        )),
        "{text}"
    );

    // One frame of top: the table rows a person reads.
    let out = m.inst.sluice(&["top", "--once"]);
    assert!(out.status.success(), "{out:?}");
    let frame = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        !frame.contains('\x1b'),
        "--once does not clear the screen: {frame:?}"
    );
    let row = |prefix: &str| -> Vec<String> {
        frame
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no row {prefix} in\n{frame}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    // DESTINATION TRANSPORT QUEUED INFLT DEFER WINDOW BUSY DEAD SENT/s
    let d = row(&format!("[127.0.0.1]:{dead} "));
    assert_eq!(&d[1..5], ["deadend", "0", "0", "3"], "{frame}");
    assert_eq!(d[7], "retry", "{frame}");
    let s = row(&format!("[127.0.0.1]:{slow} "));
    assert_eq!(&s[1..3], ["smtp", "2"], "{frame}");
    assert_eq!(s[7], "-", "{frame}");
    let busy: u32 = s[6].parse().unwrap();
    assert!(busy >= 1, "{frame}");
    // TRANSPORT CONNS DESTS DEAD SMALL MEDIUM LARGE
    let t = row("deadend ");
    assert_eq!(t[3], "1", "one dead destination: {frame}");
    assert!(frame.contains("queue: 5 messages"), "{frame}");
    drop(m.good);
}

#[test]
fn prometheus_endpoint_reports_the_mix() {
    let mport = free_port();
    let m = mix(&format!("metrics_listen = 127.0.0.1:{mport}\n"));
    m.inst.wait_log(
        10,
        &format!("serving metrics at http://127.0.0.1:{mport}/metrics"),
    );
    let (dead, slow) = (m.dead_port.to_string(), m.slow_port.to_string());
    let url = format!("http://127.0.0.1:{mport}/metrics");
    let out = wait_for(30, "the mix in the metrics", || {
        let out = m.inst.python("metrics.py", &[&url, &dead, &slow]);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (text == "ok").then_some(text)
    });
    assert_eq!(out, "ok");
    // Anything but GET /metrics is refused, and the endpoint keeps serving.
    let out = m.inst.python("metrics.py", &[&url, "bad-requests"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok", "{out:?}");
}

#[test]
fn metrics_are_off_by_default_and_a_bad_address_is_refused() {
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\ncleanup unix - - n - 0 cleanup\nqmgr unix - - n 300 1 qmgr\n"
    );
    let inst = Instance::new(&cf, "");
    let out = inst.sluice(&["config", "metrics_listen"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "metrics_listen =\n");
    let cf_path = inst.etc().join("main.cf");
    let main = std::fs::read_to_string(&cf_path).unwrap();
    std::fs::write(&cf_path, format!("{main}metrics_listen = 9103\n")).unwrap();
    let out = inst.sluice(&["check"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("main.cf, line ")
            && err.contains("parameter \"metrics_listen\": bad listening address \"9103\""),
        "{err}"
    );
    // start refuses it too, naming the same.
    let out = inst.sluice(&["start"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bad listening address"),
        "{out:?}"
    );
}
