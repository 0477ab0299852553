//! Mail flowing end to end: swaks → smtpd → cleanup → qmgr (router,
//! scheduler) → smtp → Postfix's smtp-sink; deferrals retried on schedule,
//! permanent failures bounced, everything journaled.

use std::path::Path;

use sluice_suite::{
    free_port, queued_id, relay_instance, sink_dump, smtp_sink, swaks, swaks_queued, wait_for,
    Dump, Instance, Kill, Sink,
};

fn sink_on(port: u16, extra: &[&str]) -> Sink {
    smtp_sink(&format!("127.0.0.1:{port}"), extra)
}

fn count(sink_dir: &Path) -> usize {
    std::fs::read_dir(sink_dir).map(|d| d.count()).unwrap_or(0)
}

/// The notice `notice` to alice@example.com as dumped at `sink`, whole,
/// and what Python's email package makes of it as a delivery status
/// notification.
fn notice_at(inst: &Instance, sink: &Sink, notice: &str) -> (Dump, String) {
    let dump = sink_dump(sink, inst, notice, "alice@example.com");
    let parsed = inst.python("parse_dsn.py", &[dump.path.to_str().unwrap()]);
    let p = String::from_utf8_lossy(&parsed.stdout).into_owned()
        + &String::from_utf8_lossy(&parsed.stderr);
    (dump, p)
}

fn send(port: u16, to: &str) -> String {
    swaks_queued(port, "alice@example.com", to, &[])
}

#[test]
fn relayed_mail_reaches_the_sink_and_leaves_the_queue() {
    let sink = sink_on(free_port(), &[]);
    let (inst, port) = relay_instance(sink.port, "");
    let ids: Vec<String> = (0..5)
        .map(|i| send(port, &format!("user{i}@remote.example")))
        .collect();
    wait_for(20, "5 messages at the sink", || {
        (count(sink.dir.path()) == 5).then_some(())
    });
    for id in &ids {
        inst.wait_log(10, &format!("{id}: to=<"));
        inst.wait_log(10, &format!("{id}: removed"));
    }
    assert!(inst.log().contains("status=sent (250 "), "{}", inst.log());
    wait_for(10, "an empty queue", || {
        inst.queue_json().is_empty().then_some(())
    });
}

#[test]
fn temporary_failures_are_deferred_retried_and_then_delivered() {
    let sink_port = free_port();
    let sink = sink_on(sink_port, &["-r", "rcpt"]);
    let (inst, port) = relay_instance(
        sink_port,
        "minimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n",
    );
    let id = send(port, "user@remote.example");
    inst.wait_log(
        10,
        &format!("{id}: to=<user@remote.example>, relay=127.0.0.1[127.0.0.1]:{sink_port}"),
    );
    inst.wait_log(10, "status=deferred");
    let q = inst.queue_json();
    assert_eq!(q.len(), 1, "{q:?}");
    assert!(
        q[0].contains("\"queue_name\":\"deferred\"") || q[0].contains("\"queue_name\":\"active\""),
        "{}",
        q[0]
    );
    // The retry comes by itself after the back-off.
    wait_for(20, "a second attempt", || {
        (inst
            .log()
            .matches(&format!("{id}: to=<user@remote.example>"))
            .count()
            >= 2)
            .then_some(())
    });
    // The destination recovers: the next retry delivers.
    drop(sink);
    let good = sink_on(sink_port, &[]);
    wait_for(30, "delivery after recovery", || {
        (count(good.dir.path()) == 1).then_some(())
    });
    inst.wait_log(10, &format!("{id}: removed"));
    assert!(inst.queue_json().is_empty());
}

#[test]
fn permanent_failures_are_bounced_and_unreachable_hosts_deferred() {
    let sink = sink_on(free_port(), &["-f", "rcpt"]);
    let (inst, port) = relay_instance(sink.port, "");
    let id = send(port, "nobody@remote.example");
    inst.wait_log(10, &format!("{id}: to=<nobody@remote.example>"));
    inst.wait_log(10, "status=bounced");
    inst.wait_log(10, &format!("{id}: removed"));
    drop(sink);
    // Nothing listens: connection refused, deferred, kept.
    let closed = free_port();
    let (inst2, port2) = relay_instance(closed, "");
    let id2 = send(port2, "x@remote.example");
    inst2.wait_log(10, &format!("{id2}: to=<x@remote.example>, relay=none"));
    let line = inst2.wait_log(10, "status=deferred");
    assert!(
        line.contains("Connection refused") || line.contains("connect to"),
        "{line}"
    );
    let q = inst2.queue_json();
    assert_eq!(q.len(), 1);
    // mailq shows why, as Postfix's does: the text, without a status code.
    assert!(q[0].contains("\"delay_reason\":\"connect to "), "{}", q[0]);
}

#[test]
fn deferred_mail_survives_a_restart_and_is_delivered_after_it() {
    let sink_port = free_port();
    let (mut inst, port) = relay_instance(
        sink_port,
        "minimal_backoff_time = 1s\nmaximal_backoff_time = 1s\n",
    );
    let id = send(port, "later@remote.example");
    inst.wait_log(10, "status=deferred");
    inst.stop();
    let sink = sink_on(sink_port, &[]);
    inst.start();
    wait_for(30, "delivery after the restart", || {
        (count(sink.dir.path()) == 1).then_some(())
    });
    inst.wait_log(10, &format!("{id}: removed"));
}

#[test]
fn permanent_failure_sends_an_rfc3464_notice_to_the_sender() {
    let good = sink_on(free_port(), &[]);
    let bad = sink_on(free_port(), &["-f", "rcpt"]);
    let extra = format!(
        "transport_maps = inline:{{ remote.example = smtp:[127.0.0.1]:{} }}\n",
        bad.port
    );
    let (inst, port) = relay_instance(good.port, &extra);
    // DSN parameters through the whole chain: ENVID, RET=HDRS, NOTIFY, ORCPT
    // (swaks cannot set them; Python's smtplib can).
    let script = r#"
import smtplib, sys
s = smtplib.SMTP("127.0.0.1", int(sys.argv[1]))
s.ehlo("client.test.example")
s.mail("alice@example.com", ["RET=HDRS", "ENVID=QQ314"])
s.rcpt("nobody@remote.example", ["NOTIFY=FAILURE", "ORCPT=rfc822;orig@remote.example"])
code, msg = s.data(b"Subject: bounced\r\nFrom: alice@example.com\r\n\r\nsecret body\r\n")
print(code, msg.decode())
s.quit()
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("250"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = text.split("queued as ").nth(1).unwrap().trim().to_string();
    inst.wait_log(15, &format!("{id}: to=<nobody@remote.example>"));
    let line = inst.wait_log(15, &format!("{id}: sender non-delivery notification: "));
    let notice_id = line.rsplit(' ').next().unwrap().to_string();
    let (notice, p) = notice_at(&inst, &good, &notice_id);
    for needle in [
        "content-type: multipart/report",
        "report-type: delivery-status",
        "to: alice@example.com",
        "part: message/delivery-status",
        "reporting-mta: dns; mx.test.example",
        "original-envelope-id: QQ314",
        "final-recipient: rfc822; nobody@remote.example",
        "original-recipient: rfc822; orig@remote.example",
        "action: failed",
        "status: 5.",
        "diagnostic-code: smtp; 5",
        "part: text/rfc822-headers",
        "returned-headers: True",
    ] {
        assert!(p.contains(needle), "missing {needle:?} in:\n{p}");
    }
    assert!(
        !notice.text.contains("secret body"),
        "RET=HDRS: no body in the notice"
    );
    assert!(
        notice.text.contains("MAIL FROM:<>")
            || notice.text.contains("X-Mail-Args: FROM:<>")
            || inst.log().contains(&format!("{notice_id}: from=<>")),
        "notices have the null sender"
    );
}

/// A sink that offers SMTPUTF8 (tests/scripts/bdat_sink.py; Postfix 3.7's
/// smtp-sink does not), keeping each transaction's commands and content in
/// `N.cmd` and `N.msg` under its directory.
fn smtputf8_sink() -> (Kill, u16, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/bdat_sink.py");
    let child = std::process::Command::new("python3")
        .arg(script)
        .arg(port.to_string())
        .arg(dir.path())
        .spawn()
        .expect("python3");
    // Its own greeting, not another process's on the same port.
    wait_for(10, "the SMTPUTF8 sink", || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        let mut banner = [0u8; 64];
        let n = std::io::Read::read(&mut s, &mut banner).ok()?;
        String::from_utf8_lossy(&banner[..n])
            .contains("bdat-sink")
            .then_some(())
    });
    (Kill(child), port, dir)
}

/// RFC 6533: mail received with SMTPUTF8 for a UTF-8 recipient, which
/// bounces (its next hop, smtp-sink, offers no SMTPUTF8: 5.6.7), earns its
/// UTF-8 sender a global report (message/global-delivery-status with
/// `Final-Recipient: utf-8; ...`, the original as message/global), which
/// needs SMTPUTF8 itself: it is queued with it and relayed with it. Before,
/// the report was a plain one with raw UTF-8 in it, and its recipient,
/// a UTF-8 address without SMTPUTF8, was refused, so no notice went out.
#[test]
fn an_smtputf8_bounce_is_a_global_report_relayed_with_smtputf8() {
    let (_relay, relay_port, relay_dir) = smtputf8_sink();
    let bad = sink_on(free_port(), &[]);
    let extra = format!(
        "transport_maps = inline:{{ remote.example = smtp:[127.0.0.1]:{} }}\n",
        bad.port
    );
    let (inst, port) = relay_instance(relay_port, &extra);
    let script = r#"
import smtplib, sys
s = smtplib.SMTP("127.0.0.1", int(sys.argv[1]))
s.ehlo("client.test.example")
s.mail("\u00e5lice@example.com", ["SMTPUTF8"])
s.rcpt("d\u00e4ve@remote.example", ["ORCPT=utf-8;d\\x{E4}ve@orig.example"])
code, msg = s.data("Subject: gr\u00fc\u00dfe\r\nFrom: \u00e5lice@example.com\r\n\r\nsecret body\r\n".encode())
print(code, msg.decode())
s.quit()
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("250"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = text.split("queued as ").nth(1).unwrap().trim().to_string();
    let line = inst.wait_log(15, &format!("{id}: to=<d\u{e4}ve@remote.example>"));
    assert!(
        line.contains("status=bounced") && line.contains("5.6.7"),
        "{line}"
    );
    let line = inst.wait_log(15, &format!("{id}: sender non-delivery notification: "));
    let notice_id = line.rsplit(' ').next().unwrap().to_string();
    let line = inst.wait_log(15, &format!("{notice_id}: to=<\u{e5}lice@example.com>"));
    assert!(line.contains("status=sent"), "{line}");
    let cmd = std::fs::read_to_string(relay_dir.path().join("1.cmd")).unwrap();
    let mail = cmd.lines().next().unwrap_or("");
    assert!(
        mail.starts_with("MAIL FROM:<>") && mail.split(' ').any(|p| p == "SMTPUTF8"),
        "the notice is relayed with SMTPUTF8: {cmd}"
    );
    assert!(cmd.contains("RCPT TO:<\u{e5}lice@example.com>"), "{cmd}");
    let file = relay_dir.path().join("1.msg");
    let parsed = inst.python("parse_dsn.py", &[file.to_str().unwrap()]);
    let p = String::from_utf8_lossy(&parsed.stdout).into_owned()
        + &String::from_utf8_lossy(&parsed.stderr);
    for needle in [
        "content-type: multipart/report",
        "to: \u{e5}lice@example.com",
        "part: text/plain",
        "part: message/global-delivery-status",
        "reporting-mta: dns; mx.test.example",
        "x-sluice-sender: utf-8; \u{e5}lice@example.com",
        "final-recipient: utf-8; d\u{e4}ve@remote.example",
        "original-recipient: utf-8; d\u{e4}ve@orig.example",
        "action: failed",
        "status: 5.6.7",
        "part: message/global",
        "returned-subject: gr\u{fc}\u{df}e",
        "returned-body: 'secret body\\r\\n'",
    ] {
        assert!(
            p.lines().any(|l| l == needle),
            "missing {needle:?} in:\n{p}"
        );
    }
}

/// ORCPT is xtext, which can carry CR LF: a value that decodes to a control
/// character would add header fields to a DSN and forge log lines, so
/// smtpd refuses it at RCPT with 501 5.5.4 (Postfix's reply to a bad
/// ORCPT), and the transaction goes on with the recipients it accepted.
#[test]
fn an_envid_or_orcpt_with_control_characters_is_refused() {
    let sink = sink_on(free_port(), &[]);
    let (inst, port) = relay_instance(sink.port, "");
    let script = r#"
import smtplib, sys
s = smtplib.SMTP("127.0.0.1", int(sys.argv[1]))
s.ehlo("client.test.example")
c, m = s.mail("alice@example.com", ["ENVID=e1+0D+0AX-Injected:+20yes"])
print(c, m.decode())
s.mail("alice@example.com", ["ENVID=e1"])
for orcpt in ["rfc822;x@y+0D+0AX-Injected:+20yes", "rfc822;x@y+0A", "rfc822;x+00@y", "rfc822;x+7F@y"]:
    c, m = s.rcpt("a@remote.example", ["ORCPT=" + orcpt])
    print(c, m.decode())
c, m = s.rcpt("a@remote.example", ["ORCPT=rfc822;orig@remote.example"])
print(c, m.decode())
c, m = s.data(b"Subject: hi\r\n\r\nbody\r\n")
print(c, m.decode())
s.quit()
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        7,
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for l in &lines[..5] {
        assert!(l.starts_with("501 5.5.4 "), "{text}");
    }
    assert!(lines[5].starts_with("250"), "{text}");
    let id = lines[6].split("queued as ").nth(1).unwrap().trim();
    let line = inst.wait_log(15, &format!("{id}: to=<a@remote.example>"));
    assert!(
        line.contains("orig_to=<orig@remote.example>") && line.contains("status=sent"),
        "{line}"
    );
    let log = inst.log();
    assert!(!log.lines().any(|l| l.starts_with("X-Injected")), "{log}");
}

#[test]
fn a_delivery_result_is_made_durable_without_a_later_arrival() {
    // Results ride in the next arrival's commit, or are committed on
    // their own a moment later: with no arrival after it, a delivered
    // message must still not be delivered again after a kill -9 of qmgr.
    let sink = sink_on(free_port(), &[]);
    let (inst, port) = relay_instance(sink.port, "");
    let id = send(port, "once@remote.example");
    wait_for(20, "the message at the sink", || {
        (count(sink.dir.path()) == 1).then_some(())
    });
    inst.wait_log(20, &format!("{id}: removed"));
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let qmgr = inst.pids("qmgr");
    for p in &qmgr {
        sys::process::signal(*p, 9).unwrap();
    }
    inst.wait_pid("qmgr", &qmgr);
    // The new qmgr replays the journal; a result not made durable would
    // bring the message back and deliver it again.
    std::thread::sleep(std::time::Duration::from_millis(3000));
    assert!(inst.queue_json().is_empty(), "{:?}", inst.queue_json());
    assert_eq!(
        count(sink.dir.path()),
        1,
        "delivered again after the restart"
    );
}

#[test]
fn kill_9_during_delivery_loses_nothing() {
    let sink = sink_on(free_port(), &[]);
    let (mut inst, port) = relay_instance(
        sink.port,
        "minimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n",
    );
    let results = inst.root().join("acked.txt");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/send_many.py");
    let mut sender = std::process::Command::new("python3")
        .arg(&script)
        .args([
            "127.0.0.1",
            &port.to_string(),
            "3000",
            "4",
            results.to_str().unwrap(),
            "1024",
            "remote.example",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut kills = 0;
    let mut n = 0u64;
    while sender.try_wait().unwrap().is_none() {
        std::thread::sleep(std::time::Duration::from_millis(100));
        n += 1;
        let victim = if n.is_multiple_of(2) { "qmgr" } else { "smtp" };
        let st = std::panic::catch_unwind(|| inst.status());
        if let Ok(st) = st {
            if let Some(p) = st
                .services
                .iter()
                .find(|s| s.name == victim)
                .and_then(|s| s.processes.first())
            {
                sys::process::signal(p.pid, 9).unwrap();
                kills += 1;
                // Let the successor get through its start: a daemon killed
                // before it reports ready counts as a failed start, and
                // master throttles those (doubling), which would only test
                // the throttle.
                if victim == "qmgr" {
                    inst.wait_pid("qmgr", &[p.pid]);
                    std::thread::sleep(std::time::Duration::from_millis(400));
                }
            }
        }
    }
    assert!(kills >= 2, "only {kills} kills");
    let acked: Vec<String> = std::fs::read_to_string(&results)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    assert!(!acked.is_empty());
    // Every acknowledged message reaches the sink (or is still queued for
    // retry): wait until the queue drains, then look for each Message-ID.
    wait_for(90, "the queue to drain after the kills", || {
        std::panic::catch_unwind(|| inst.queue_json())
            .ok()
            .filter(|q| q.is_empty())
            .map(drop)
    });
    let mut delivered = String::new();
    for e in std::fs::read_dir(sink.dir.path()).unwrap() {
        delivered.push_str(&std::fs::read_to_string(e.unwrap().path()).unwrap_or_default());
    }
    let missing: Vec<&String> = acked
        .iter()
        .filter(|mid| !delivered.contains(mid.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged messages never arrived after {kills} kills: {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(5)]
    );
    // Duplicates only for transactions in flight at a kill: at most a few per kill.
    let copies = acked
        .iter()
        .map(|m| delivered.matches(m.as_str()).count())
        .filter(|c| *c > 1)
        .count();
    assert!(
        copies <= kills * 8,
        "{copies} duplicated messages after {kills} kills"
    );
    inst.stop();
}

#[test]
fn defer_transports_hold_mail_until_flushed() {
    let sink = sink_on(free_port(), &[]);
    let (inst, port) = relay_instance(sink.port, "defer_transports = smtp\n");
    let id = send(port, "later@remote.example");
    let line = inst.wait_log(10, &format!("{id}: to=<later@remote.example>, relay=none"));
    assert!(
        line.contains("status=deferred") && line.contains("deferred transport"),
        "{line}"
    );
    assert_eq!(count(sink.dir.path()), 0);
    let out = inst.sluice(&["queue", "flush"]);
    assert!(out.status.success());
    wait_for(20, "delivery after the flush", || {
        (count(sink.dir.path()) == 1).then_some(())
    });
    inst.wait_log(10, &format!("{id}: removed"));
}

#[test]
fn a_bounced_message_stays_queued_until_its_notice_is() {
    // The notice must be on disk before the failed message goes: with
    // cleanup out of service the message waits (through a kill -9 of
    // qmgr), then leaves once the notice is queued.
    let sink = sink_on(free_port(), &["-f", "rcpt"]);
    let (inst, port) = relay_instance(sink.port, "defer_transports = smtp\nqueue_run_delay = 1s\n");
    let id = send(port, "gone@remote.example");
    inst.wait_log(10, &format!("{id}: to=<gone@remote.example>, relay=none"));

    let cf = inst.etc().join("master.cf");
    let full = std::fs::read_to_string(&cf).unwrap();
    let without: String = full
        .lines()
        .filter(|l| !l.starts_with("cleanup "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&cf, &without).unwrap();
    assert!(inst.sluice(&["reload"]).status.success());
    wait_for(10, "cleanup out of service", || {
        inst.pids("cleanup").is_empty().then_some(())
    });

    assert!(inst.sluice(&["queue", "flush"]).status.success());
    inst.wait_log(10, &format!("{id}: to=<gone@remote.example>, relay="));
    inst.wait_log(10, "status=bounced");
    inst.wait_log(10, "connect to cleanup for notices");
    // Several retries later it is still there, with its notice owed.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(
        !inst.log().contains(&format!("{id}: removed")),
        "{}",
        inst.log()
    );
    assert_eq!(inst.queue_json().len(), 1);

    // A crash now: the journal still says a notice is owed. master.cf is
    // put back first, whole (a rename, never a truncated file), because
    // master restarts qmgr at once and qmgr reads it at start.
    let qmgr = inst.pids("qmgr");
    assert_eq!(qmgr.len(), 1);
    let tmp = cf.with_extension("new");
    std::fs::write(&tmp, &full).unwrap();
    std::fs::rename(&tmp, &cf).unwrap();
    sys::process::signal(qmgr[0], 9).unwrap();
    assert!(inst.sluice(&["reload"]).status.success());
    inst.wait_pid("qmgr", &qmgr);
    assert!(inst.sluice(&["queue", "flush"]).status.success());
    inst.wait_log(20, &format!("{id}: sender non-delivery notification: "));
    inst.wait_log(10, &format!("{id}: removed"));
}

#[test]
fn status_json_gives_services_and_queue_sizes() {
    let sink = sink_on(free_port(), &[]);
    let (inst, port) = relay_instance(sink.port, "defer_transports = smtp\n");
    let id = send(port, "later@remote.example");
    inst.wait_log(10, &format!("{id}: to=<later@remote.example>, relay=none"));
    let out = inst.sluice(&["status", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    // A JSON parser nobody here wrote reads it.
    let checked = inst.python("status_json.py", &[text.trim(), "one-deferred"]);
    assert_eq!(
        String::from_utf8_lossy(&checked.stdout).trim(),
        "ok",
        "{text}\n{checked:?}"
    );
}

#[test]
fn a_full_active_queue_admits_senders_in_turn() {
    // Two messages in delivery at a time: 30 from a bulk sender and then one
    // from another sender wait for admission. Admitted FIFO, the small
    // sender's message would be the 31st delivered; in turn by sender, it
    // is among the first.
    let sink = sink_on(free_port(), &[]);
    let (inst, port) = relay_instance(
        sink.port,
        "defer_transports = smtp\nqmgr_message_active_limit = 2\n",
    );
    let st = std::process::Command::new("smtp-source")
        .args([
            "-s",
            "2",
            "-m",
            "30",
            "-f",
            "bulk@example.com",
            "-t",
            "list@remote.example",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .status()
        .expect("smtp-source is installed by scripts/test");
    assert!(st.success());
    wait_for(20, "30 bulk messages deferred", || {
        (inst.log().matches("status=deferred").count() == 30).then_some(())
    });
    let small = send(port, "friend@remote.example");
    inst.wait_log(
        10,
        &format!("{small}: to=<friend@remote.example>, relay=none"),
    );
    assert!(inst.sluice(&["queue", "flush"]).status.success());
    wait_for(30, "31 messages at the sink", || {
        (count(sink.dir.path()) == 31).then_some(())
    });
    let sent: Vec<String> = inst
        .log()
        .lines()
        .filter(|l| l.contains("status=sent"))
        .map(String::from)
        .collect();
    let at = sent
        .iter()
        .position(|l| l.contains(&format!("{small}: to=<friend@remote.example>")))
        .expect("the small sender's delivery is logged");
    assert!(
        at < 4,
        "delivered {}th of {}:\n{}",
        at + 1,
        sent.len(),
        sent.join("\n")
    );
}

#[test]
fn a_reload_reaches_qmgr_without_a_restart() {
    let sink = sink_on(free_port(), &[]);
    let (inst, port) = relay_instance(sink.port, "defer_transports = smtp\n");
    let first = send(port, "first@remote.example");
    let line = inst.wait_log(
        10,
        &format!("{first}: to=<first@remote.example>, relay=none"),
    );
    assert!(line.contains("deferred transport"), "{line}");
    let qmgr = inst.pids("qmgr");
    assert!(inst
        .sluice(&["config", "defer_transports="])
        .status
        .success());
    assert!(inst.sluice(&["reload"]).status.success());
    wait_for(10, "qmgr reloaded", || {
        inst.log()
            .lines()
            .any(|l| l.contains("qmgr") && l.contains("reloaded configuration"))
            .then_some(())
    });
    // New mail goes out at once; the same qmgr process did it.
    let second = send(port, "second@remote.example");
    let line = inst.wait_log(20, &format!("{second}: to=<second@remote.example>"));
    assert!(line.contains("status=sent"), "{line}");
    assert_eq!(inst.pids("qmgr"), qmgr);
}

#[test]
fn a_delayed_message_warns_its_sender_once() {
    // delay_warning_time: one RFC 3464 "delayed" notice to the sender, not
    // one per retry, and not again after qmgr is killed and restarted.
    let good = sink_on(free_port(), &[]);
    let dead = free_port();
    let extra = format!(
        "transport_maps = inline:{{ remote.example = smtp:[127.0.0.1]:{dead} }}\n\
         delay_warning_time = 1s\nminimal_backoff_time = 1s\nmaximal_backoff_time = 1s\n\
         queue_run_delay = 1s\nhost_retry_time = 1s\n"
    );
    let (inst, port) = relay_instance(good.port, &extra);
    let id = send(port, "later@remote.example");
    let line = inst.wait_log(30, &format!("{id}: sender delay notification: "));
    let notice = line.rsplit(' ').next().unwrap().to_string();
    let (_, p) = notice_at(&inst, &good, &notice);
    for needle in [
        "report-type: delivery-status",
        "to: alice@example.com",
        "subject: Delayed Mail (still being retried)",
        "final-recipient: rfc822; later@remote.example",
        "action: delayed",
        "status: 4.",
        "part: text/rfc822-headers",
    ] {
        assert!(p.contains(needle), "missing {needle:?} in:\n{p}");
    }
    let tries = |inst: &Instance| {
        inst.log()
            .matches(&format!("{id}: to=<later@remote.example>"))
            .count()
    };
    // Retries go on; a crash of qmgr does not make it warn again.
    let before = tries(&inst);
    wait_for(20, "two more retries", || {
        (tries(&inst) >= before + 2).then_some(())
    });
    let qmgr = inst.pids("qmgr");
    sys::process::signal(qmgr[0], 9).unwrap();
    inst.wait_pid("qmgr", &qmgr);
    let before = tries(&inst);
    wait_for(30, "two retries after the restart", || {
        (tries(&inst) >= before + 2).then_some(())
    });
    assert_eq!(
        inst.log().matches("sender delay notification").count(),
        1,
        "{}",
        inst.log()
    );
    assert_eq!(count(good.dir.path()), 1);
}

#[test]
fn notify_success_is_reported_when_the_next_hop_cannot() {
    // RFC 3461: a server without DSN (smtp-sink -N) cannot carry NOTIFY=SUCCESS
    // on, so the sender gets an "Action: relayed" report from us; a server
    // with DSN gets the request and reports itself; NOTIFY=FAILURE gets none.
    let good = sink_on(free_port(), &[]);
    let nodsn = sink_on(free_port(), &["-N"]);
    let dsn = sink_on(free_port(), &[]);
    let extra = format!(
        "transport_maps = inline:{{ remote.example = smtp:[127.0.0.1]:{}, dsn.example = smtp:[127.0.0.1]:{} }}\n",
        nodsn.port, dsn.port
    );
    let (inst, port) = relay_instance(good.port, &extra);
    let script = r#"
import smtplib, sys
s = smtplib.SMTP("127.0.0.1", int(sys.argv[1]))
s.ehlo("client.test.example")
s.mail("alice@example.com", ["ENVID=OK42"])
s.rcpt("a@remote.example", ["NOTIFY=SUCCESS"])
s.rcpt("b@dsn.example", ["NOTIFY=SUCCESS,FAILURE"])
s.rcpt("c@remote.example", ["NOTIFY=FAILURE"])
code, msg = s.data(b"Subject: report me\r\nFrom: alice@example.com\r\n\r\nbody\r\n")
print(code, msg.decode())
s.quit()
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("250"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = text.split("queued as ").nth(1).unwrap().trim().to_string();
    let line = inst.wait_log(20, &format!("{id}: sender delivery status notification: "));
    let notice = line.rsplit(' ').next().unwrap().to_string();
    inst.wait_log(15, &format!("{id}: removed"));
    let (_, p) = notice_at(&inst, &good, &notice);
    for needle in [
        "subject: Successful Mail Delivery Report",
        "original-envelope-id: OK42",
        "final-recipient: rfc822; a@remote.example",
        "action: relayed",
        "status: 2.0.0",
        // The server that accepted it, and its reply as sent (Postfix's
        // fields; before: no Remote-MTA and "X-Sluice; 250 2.0.0 Ok").
        "remote-mta: dns; 127.0.0.1",
        "diagnostic-code: smtp; 250 2.0.0 Ok",
        "part: text/rfc822-headers",
    ] {
        assert!(p.contains(needle), "missing {needle:?} in:\n{p}");
    }
    assert!(
        !p.contains("b@dsn.example") && !p.contains("c@remote.example"),
        "{p}"
    );
    assert_eq!(count(good.dir.path()), 1, "one report only");
    // The DSN-capable server got the request itself.
    let dumped = sink_dump(&dsn, &inst, &id, "b@dsn.example").text;
    assert!(dumped.contains("NOTIFY=SUCCESS,FAILURE"), "{dumped}");
}

#[test]
fn a_notice_owed_survives_retries_of_the_rest_of_the_message() {
    // One recipient bounces while cleanup is away, the other keeps being
    // retried: each retry restates the message at the journal head, and the
    // owed notice must go with it, through a kill -9 of qmgr as well.
    let good = sink_on(free_port(), &[]);
    let bad = sink_on(free_port(), &["-f", "rcpt"]);
    let dead = free_port();
    let extra = format!(
        "transport_maps = inline:{{ gone.example = smtp:[127.0.0.1]:{}, later.example = smtp:[127.0.0.1]:{dead} }}\n\
         queue_run_delay = 1s\nminimal_backoff_time = 1s\nmaximal_backoff_time = 1s\nhost_retry_time = 1s\n",
        bad.port
    );
    let (inst, port) = relay_instance(good.port, &extra);
    let cf = inst.etc().join("master.cf");
    let full = std::fs::read_to_string(&cf).unwrap();
    let without: String = full
        .lines()
        .filter(|l| !l.starts_with("cleanup "))
        .map(|l| format!("{l}\n"))
        .collect();
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@example.com",
        "--to",
        "x@gone.example,y@later.example",
    ]);
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    std::fs::write(&cf, &without).unwrap();
    assert!(inst.sluice(&["reload"]).status.success());
    wait_for(10, "cleanup out of service", || {
        inst.pids("cleanup").is_empty().then_some(())
    });
    inst.wait_log(15, &format!("{id}: to=<x@gone.example>"));
    let tries = |inst: &Instance| {
        inst.log()
            .matches(&format!("{id}: to=<y@later.example>"))
            .count()
    };
    wait_for(20, "three tries of the deferred recipient", || {
        (tries(&inst) >= 3).then_some(())
    });
    // master.cf back whole (a rename, never a truncated file) before the
    // crash: master restarts qmgr at once and qmgr reads it at start.
    let qmgr = inst.pids("qmgr");
    let tmp = cf.with_extension("new");
    std::fs::write(&tmp, &full).unwrap();
    std::fs::rename(&tmp, &cf).unwrap();
    sys::process::signal(qmgr[0], 9).unwrap();
    assert!(inst.sluice(&["reload"]).status.success());
    inst.wait_pid("qmgr", &qmgr);
    inst.wait_log(30, &format!("{id}: sender non-delivery notification: "));
    assert!(!inst.log().contains(&format!("{id}: removed")));
}

#[test]
fn deferral_reasons_survive_a_restart() {
    // mailq shows the last reason under a deferred recipient; after a
    // restart it comes from the journal.
    let dead = free_port();
    let (mut inst, port) = relay_instance(
        dead,
        "minimal_backoff_time = 1h\nmaximal_backoff_time = 1h\n",
    );
    let id = send(port, "later@remote.example");
    inst.wait_log(15, &format!("{id}: to=<later@remote.example>, relay=none"));
    let listed = |inst: &Instance| {
        String::from_utf8_lossy(&inst.sluice(&["queue", "list"]).stdout).into_owned()
    };
    let before = listed(&inst);
    assert!(before.contains("Connection refused"), "{before}");
    inst.stop();
    inst.start();
    let after = wait_for(20, "qmgr back", || {
        let l = listed(&inst);
        l.contains(&id).then_some(l)
    });
    assert!(after.contains("Connection refused"), "{after}");
    let shown = String::from_utf8_lossy(&inst.sluice(&["queue", "show", &id]).stdout).into_owned();
    assert!(
        shown.contains("<later@remote.example>: deferred (4.4.1 connect to"),
        "{shown}"
    );
}

#[test]
fn retries_back_off_by_age_and_expired_mail_bounces() {
    // Unreachable next hop: the time between attempts grows with the
    // message's age (Postfix's rule, so a restart does not reset it), and
    // after maximal_queue_lifetime the sender gets the notice. A kill -9 of
    // qmgr in the middle changes neither.
    let good = sink_on(free_port(), &[]);
    let dead = free_port();
    let extra = format!(
        "transport_maps = inline:{{ remote.example = smtp:[127.0.0.1]:{dead} }}\n\
         minimal_backoff_time = 1s\nmaximal_backoff_time = 4s\nmaximal_queue_lifetime = 14s\n\
         host_retry_time = 0\nqueue_run_delay = 1s\n"
    );
    let (inst, port) = relay_instance(good.port, &extra);
    let id = send(port, "gone@remote.example");
    // The delay= of each deferral is the message's age at that attempt.
    let ages = |inst: &Instance| -> Vec<f64> {
        inst.log()
            .lines()
            .filter(|l| {
                l.contains(&format!("{id}: to=<gone@remote.example>"))
                    && l.contains("status=deferred")
            })
            .filter_map(|l| l.split("delay=").nth(1)?.split(',').next()?.parse().ok())
            .collect()
    };
    wait_for(20, "three attempts", || {
        (ages(&inst).len() >= 3).then_some(())
    });
    let qmgr = inst.pids("qmgr");
    let before_kill = ages(&inst).len();
    sys::process::signal(qmgr[0], 9).unwrap();
    inst.wait_pid("qmgr", &qmgr);
    inst.wait_log(40, "status=bounced");
    inst.wait_log(20, &format!("{id}: sender non-delivery notification: "));
    let a = ages(&inst);
    assert!(a.len() >= 4, "{a:?}");
    // The gap across the kill may be short: a deferral whose record the
    // kill kept from the journal is tried again at once (at least once,
    // never lost).
    let gaps: Vec<f64> = a
        .windows(2)
        .enumerate()
        .filter(|(i, _)| *i + 1 != before_kill)
        .map(|(_, w)| w[1] - w[0])
        .collect();
    // 1 s, then the age (about 1, 2, 4 s), capped at 4 s; never shorter
    // than the minimum, never much longer than the cap.
    assert!(gaps.iter().all(|g| (0.9..=5.5).contains(g)), "{gaps:?}");
    assert!(
        gaps.iter().any(|g| *g >= 1.9),
        "the wait grows with the age: {gaps:?}"
    );
    let bounced = inst
        .log()
        .lines()
        .find(|l| {
            l.contains(&format!("{id}: to=<gone@remote.example>")) && l.contains("status=bounced")
        })
        .map(String::from)
        .unwrap();
    assert!(bounced.contains("expired"), "{bounced}");
}

/// bounce_size_limit: a bounced message larger than the limit comes back
/// as its headers only (text/rfc822-headers), as Postfix's, though its
/// sender left RET to its default (the whole message); a notice never carries a large
/// original back to its sender.
#[test]
fn a_bounce_returns_a_large_original_as_headers_only() {
    let good = sink_on(free_port(), &[]);
    let bad = sink_on(free_port(), &["-f", "rcpt"]);
    let extra = format!(
        "transport_maps = inline:{{ remote.example = smtp:[127.0.0.1]:{} }}\nbounce_size_limit = 1000\n",
        bad.port
    );
    let (inst, port) = relay_instance(good.port, &extra);
    let dir = tempfile::tempdir().unwrap();
    let body = "x".repeat(76) + "\r\n";
    let data = format!(
        "Subject: big\r\nFrom: alice@example.com\r\n\r\n{}.\r\n",
        body.repeat(2000)
    );
    let path = dir.path().join("big");
    std::fs::write(&path, data).unwrap();
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@example.com",
        "--to",
        "nobody@remote.example",
        "--data",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    let line = inst.wait_log(15, &format!("{id}: sender non-delivery notification: "));
    let notice_id = line.rsplit(' ').next().unwrap().to_string();
    let (notice, p) = notice_at(&inst, &good, &notice_id);
    assert!(p.contains("part: text/rfc822-headers"), "{p}");
    assert!(
        notice.text.lines().any(|l| l.trim_end() == "Subject: big"),
        "{}",
        notice.text
    );
    assert!(
        !notice.text.contains(&"x".repeat(76)),
        "no body in the notice"
    );
    assert!(notice.text.len() < 10_000, "{} bytes", notice.text.len());
}
