//! smtpd_milters against real milters: a Python milter on Debian's
//! python3-milter (libmilter) for every action — reject and tempfail at
//! MAIL, RCPT, a header and the end of the message, discard, quarantine
//! (hold), header changes, body replacement, recipient and sender
//! changes — whose changes are checked in the message a sink receives;
//! milters that are down, late or dying follow milter_default_action; and
//! opendkim signing mail whose signature dkimpy verifies against the key
//! published by dnsmasq (`milter_dkim.rs`).

use sluice_suite::test_milter::TestMilter;
use sluice_suite::testkit::ScriptedSink;
use sluice_suite::{queued_id, relay_instance, swaks, wait_for, Instance};

fn send(port: u16, from: &str, to: &[&str], subject: &str, extra: &[&str]) -> (i32, String) {
    let mut args = vec![
        "--server".to_string(),
        format!("127.0.0.1:{port}"),
        "--from".into(),
        from.into(),
        "--to".into(),
        to.join(","),
        "--header".into(),
        format!("Subject: {subject}"),
        "--body".into(),
        "Original body.\n.Leading dot.\n".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    swaks(&args)
}

fn milter_instance(sink: &ScriptedSink, milters: &str, extra: &str) -> (Instance, u16) {
    relay_instance(
        sink.port,
        &format!("smtpd_milters = {milters}\nmilter_command_timeout = 3s\nmilter_content_timeout = 3s\n{extra}"),
    )
}

#[test]
fn every_action_of_a_python_milter() {
    let milter = TestMilter::start();
    let sink = ScriptedSink::start();
    let (inst, port) = milter_instance(&sink, &format!("unix:{}", milter.socket().display()), "");

    // Refusals at MAIL and RCPT carry the milter's own reply.
    let (code, out) = send(
        port,
        "reject-mail@remote.example",
        &["a@remote.example"],
        "x",
        &[],
    );
    assert_ne!(code, 0);
    assert!(
        out.contains("550 5.7.1 sender refused by the test milter"),
        "{out}"
    );
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["reject-rcpt@remote.example"],
        "x",
        &[],
    );
    assert_ne!(code, 0);
    assert!(
        out.contains("550 5.7.1 recipient refused by the test milter"),
        "{out}"
    );
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["tempfail-rcpt@remote.example"],
        "x",
        &[],
    );
    assert_ne!(code, 0);
    assert!(out.contains("451 4.7.1"), "{out}");
    inst.wait_log(10, "milter-reject: RCPT from");

    // A rejected header rejects the message at its end; a tempfail there too.
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["a@remote.example"],
        "reject-header",
        &[],
    );
    assert_ne!(code, 0);
    assert!(out.contains("<** 550 5.7.1 Command rejected"), "{out}");
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["a@remote.example"],
        "tempfail-eom",
        &[],
    );
    assert_ne!(code, 0);
    assert!(out.contains("<** 451 4.7.1"), "{out}");

    // Discard: 250 for the client, nothing delivered.
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["d@remote.example"],
        "discard",
        &[],
    );
    assert_eq!(code, 0, "{out}");
    inst.wait_log(10, "milter-discard: END-OF-MESSAGE");

    // Every change at the end of the message.
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["kept@remote.example", "removed@test.example"],
        "please rewrite",
        &["--add-header", "X-Remove: this goes"],
    );
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    let msg = wait_for(20, "the rewritten message at the sink", || {
        sink.messages().into_iter().find(|m| {
            m.data.contains("please rewrite") || m.data.contains("changed by the test milter")
        })
    });
    assert_eq!(msg.from, "changed@test.example", "{msg:?}");
    let mut rcpts = msg.rcpts.clone();
    rcpts.sort();
    // added@test.example is local to nothing here: relayed like the rest.
    assert!(
        rcpts.contains(&"kept@remote.example".to_string()),
        "{rcpts:?}"
    );
    assert!(
        rcpts.contains(&"added@test.example".to_string()),
        "{rcpts:?}"
    );
    assert!(
        !rcpts.contains(&"removed@test.example".to_string()),
        "{rcpts:?}"
    );
    let d = &msg.data;
    let (head, body) = d.split_once("\r\n\r\n").expect("header and body");
    assert!(head.starts_with("Received: "), "{head}");
    let first_after_received = head
        .split("\r\n")
        .find(|l| !l.starts_with("Received:") && !l.starts_with(|c: char| c.is_whitespace()))
        .unwrap();
    assert_eq!(first_after_received, "X-First: inserted", "{head}");
    assert!(
        head.contains("\r\nSubject: changed by the test milter\r\n"),
        "{head}"
    );
    assert!(!head.contains("please rewrite"), "{head}");
    assert!(!head.contains("X-Remove"), "{head}");
    assert!(head.contains("\r\nX-Test-Milter: seen"), "{head}");
    assert_eq!(
        body,
        "The test milter replaced this body.\r\n.A line with a dot.\r\n"
    );
    // qmgr has the changed sender too (the envelope, not only the sink's view).
    inst.wait_log(10, &format!("{id}: from=<changed@test.example>"));

    // Quarantine: accepted, and on hold in the queue.
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["q@remote.example"],
        "quarantine me",
        &[],
    );
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    inst.wait_log(10, &format!("{id}: milter-hold: held by the test milter"));
    let held = wait_for(10, "the quarantined message on hold", || {
        inst.queue_json()
            .into_iter()
            .find(|l| l.contains(&id) && l.contains("\"queue_name\":\"hold\""))
    });
    assert!(held.contains("q@remote.example"), "{held}");

    // What the milter heard: the connection with j, HELO, the macros of
    // the sender stage, each header, and the queue id at the end of headers.
    let log = milter.log();
    assert!(
        log.contains("connect [127.0.0.1] 127.0.0.1 j=mx.test.example"),
        "{log}"
    );
    assert!(log.contains("helo "), "{log}");
    assert!(log.contains("header Subject: please rewrite"), "{log}");
    assert!(log.contains("header X-Remove: this goes"), "{log}");
    assert!(log.contains("eoh i="), "{log}");
    assert!(!log.contains("eoh i=None"), "{log}");
}

/// A milter hears every ESMTP parameter of MAIL FROM and RCPT TO, as
/// Postfix hands a milter the command's arguments (before, only SIZE, BODY
/// and SMTPUTF8 at MAIL, and none at RCPT).
#[test]
fn a_milter_hears_every_mail_and_rcpt_parameter() {
    let milter = TestMilter::start();
    let sink = ScriptedSink::start();
    let (_inst, port) = milter_instance(&sink, &format!("unix:{}", milter.socket().display()), "");
    let script = "import smtplib, sys
s = smtplib.SMTP('127.0.0.1', int(sys.argv[1]))
s.ehlo('client.test.example')
print(*s.mail('alice@remote.example', ['SIZE=100', 'BODY=8BITMIME', 'RET=HDRS', 'ENVID=e+2B1']))
print(*s.rcpt('a@remote.example', ['NOTIFY=SUCCESS,FAILURE', 'ORCPT=rfc822;orig+40remote.example']))
print(*s.rcpt('b@remote.example'))
s.quit()
";
    let out = std::process::Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("250")).count(),
        3,
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = wait_for(10, "the milter's second RCPT", || {
        let log = milter.log();
        log.contains("rcpt <b@remote.example>").then_some(log)
    });
    assert!(
        log.contains("mail <alice@remote.example> ")
            && log.contains(" args=SIZE=100,BODY=8BITMIME,RET=HDRS,ENVID=e+2B1\n"),
        "{log}"
    );
    assert!(
        log.contains(
            "rcpt <a@remote.example> args=NOTIFY=SUCCESS,FAILURE,ORCPT=rfc822;orig@remote.example\n"
        ),
        "{log}"
    );
    assert!(log.contains("rcpt <b@remote.example> args=\n"), "{log}");
}

#[test]
fn a_milter_that_is_down_follows_milter_default_action() {
    let sink = ScriptedSink::start();
    let gone = tempfile::tempdir().unwrap();
    let missing = format!("unix:{}/nothing.sock", gone.path().display());

    // tempfail (the default): 451 4.3.5, nothing queued.
    let (inst, port) = milter_instance(&sink, &missing, "");
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["a@remote.example"],
        "x",
        &[],
    );
    assert_ne!(code, 0);
    assert!(
        out.contains("451 4.3.5 Server configuration problem"),
        "{out}"
    );
    inst.wait_log(10, "applying milter_default_action = tempfail");
    assert!(inst.queued_ids().is_empty());
    drop(inst);

    // reject: 550 5.5.0.
    let (inst, port) = milter_instance(&sink, &missing, "milter_default_action = reject\n");
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["a@remote.example"],
        "x",
        &[],
    );
    assert_ne!(code, 0);
    assert!(out.contains("550 5.5.0"), "{out}");
    drop(inst);

    // accept: mail flows as if there were no milter.
    let (inst, port) = milter_instance(&sink, &missing, "milter_default_action = accept\n");
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["flows@remote.example"],
        "x",
        &[],
    );
    assert_eq!(code, 0, "{out}");
    wait_for(20, "the message at the sink", || {
        sink.messages()
            .into_iter()
            .find(|m| m.rcpts.contains(&"flows@remote.example".to_string()))
    });
    drop(inst);

    // quarantine: accepted and held.
    let (inst, port) = milter_instance(&sink, &missing, "milter_default_action = quarantine\n");
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["held@remote.example"],
        "x",
        &[],
    );
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    wait_for(10, "the message on hold", || {
        inst.queue_json()
            .into_iter()
            .find(|l| l.contains(&id) && l.contains("\"queue_name\":\"hold\""))
    });
}

#[test]
fn a_late_milter_follows_milter_default_action() {
    let milter = TestMilter::start();
    let sink = ScriptedSink::start();
    let (inst, port) = milter_instance(
        &sink,
        &format!("unix:{}", milter.socket().display()),
        "milter_default_action = tempfail\n",
    );
    // The milter sleeps 6 s at the end of this message; the content
    // timeout is 3 s: the client gets 451 and nothing is queued.
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["a@remote.example"],
        "slow",
        &[],
    );
    assert_ne!(code, 0);
    assert!(out.contains("<** 451 4.3.5"), "{out}");
    inst.wait_log(10, "timeout; applying milter_default_action = tempfail");
    assert!(inst.queued_ids().is_empty(), "{:?}", inst.queue_json());
    // A new session has a new connection: the milter serves it again.
    let (code, out) = send(
        port,
        "alice@remote.example",
        &["b@remote.example"],
        "fine",
        &[],
    );
    assert_eq!(code, 0, "{out}");
}

/// A looping message (hopcount_limit) is refused with a milter in the
/// path too (smtpd runs smtpd_milters, so the milter has seen the
/// message's end when cleanup counts its hops: it is refused all the
/// same), and the next message is accepted.
#[test]
fn a_looping_message_is_refused_with_a_milter_in_the_path() {
    let milter = TestMilter::start();
    let sink = ScriptedSink::start();
    let (_inst, port) = milter_instance(
        &sink,
        &format!("unix:{}", milter.socket().display()),
        "hopcount_limit = 5\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut data = String::new();
    for n in 0..4 {
        data.push_str(&format!(
            "Received: from h{n}.example by r{n}.example; Thu, 26 Nov 2026 10:00:00 +0000\r\n"
        ));
    }
    data.push_str("Subject: loopy\r\n\r\nbody\r\n.\r\n");
    let path = dir.path().join("msg");
    std::fs::write(&path, data).unwrap();
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "a@remote.example",
        "--to",
        "b@remote.example",
        "--data",
        path.to_str().unwrap(),
    ]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("<** 554 5.4.0 Error: too many hops"), "{out}");
    let (code, out) = send(port, "a@remote.example", &["b@remote.example"], "fine", &[]);
    assert_eq!(code, 0, "{out}");
    let log = wait_for(10, "the milter's end of the second message", || {
        let log = milter.log();
        log.contains("eom fine").then_some(log)
    });
    assert!(log.contains("header Subject: loopy"), "{log}");
    let got = wait_for(20, "the second message at the sink", || {
        let m = sink.messages();
        (!m.is_empty()).then_some(m)
    });
    assert_eq!(got.len(), 1, "only the second is relayed");
}
