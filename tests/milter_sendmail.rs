//! Milters beyond one smtpd milter, against the Python test milter
//! (`tests/scripts/test_milter.py`, Debian's python3-milter):
//! `non_smtpd_milters` filtering mail submitted with sendmail(1) — every
//! action, with sendmail's exit codes, Postfix's pretended session
//! (localhost [127.0.0.1]) and macros, a refused recipient as a
//! configuration error, and bounces left alone; two `smtpd_milters` asked
//! one after another, the second seeing the first's changes and not
//! hearing of what the first refused; `milter_mail_macros` choosing the
//! macros; recipients a milter adds going through `virtual_alias_maps`;
//! a milter's reply of several lines read alike by smtpd at RCPT and at
//! the end of data and by cleanup at the end of a sendmail submission.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use sluice_suite::test_milter::TestMilter;
use sluice_suite::testkit::ScriptedSink;
use sluice_suite::{bin_dir, free_port, swaks, wait_for, Instance};

/// An instance relaying to the sink, with the sendmail(1) submission
/// socket; `extra` goes into main.cf.
fn instance(sink_port: u16, extra: &str) -> (Instance, u16) {
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         submit unix n - n - - cleanup\nqmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\n\
         smtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nmyorigin = test.example\nrelayhost = [127.0.0.1]:{sink_port}\n\
         smtpd_reject_unlisted_recipient = no\nmilter_command_timeout = 3s\nmilter_content_timeout = 3s\n\
         virtual_alias_maps = inline:{{ {{ added@test.example = mapped@remote.example }} }}\n{extra}"
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);
    (inst, port)
}

/// sendmail(1) as the instance's user: its exit code and what it printed.
fn sendmail(inst: &Instance, args: &[&str], message: &str) -> (i32, String) {
    let mut cmd = Command::new(bin_dir().join("sendmail"));
    cmd.args(args)
        .env("SLUICE_CONFIG_DIR", inst.etc())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((uid, gid)) = inst.run_as {
        cmd.uid(uid).gid(gid);
    }
    let mut child = cmd.spawn().expect("sendmail");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(message.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn at_sink(sink: &ScriptedSink, needle: &str) -> sluice_suite::testkit::Message {
    wait_for(
        20,
        &format!("a message with {needle:?} at the sink"),
        || {
            sink.messages()
                .into_iter()
                .find(|m| m.data.contains(needle))
        },
    )
}

#[test]
fn sendmail_mail_goes_through_non_smtpd_milters_with_every_action() {
    let milter = TestMilter::start();
    let sink = ScriptedSink::start();
    sink.rcpt_reply("bounce-me", "550 5.1.1 no such user here");
    let (inst, port) = instance(
        sink.port,
        &format!("non_smtpd_milters = unix:{}\n", milter.socket().display()),
    );

    // Accepted: the milter's header is in the message delivered, and it
    // was told of a session from localhost with Postfix's macros.
    let (code, err) = sendmail(
        &inst,
        &["-f", "alice@test.example", "a@remote.example"],
        "Subject: hello from sendmail\n\nbody\n",
    );
    assert_eq!(code, 0, "{err}");
    let msg = at_sink(&sink, "hello from sendmail");
    assert!(msg.data.contains("X-Test-Milter: seen\r\n"), "{}", msg.data);
    let log = milter.log();
    assert!(
        log.contains("connect localhost 127.0.0.1 j=mx.test.example _=localhost [127.0.0.1]"),
        "{log}"
    );
    assert!(log.contains("helo localhost"), "{log}");
    // The default milter_mail_macros: {mail_addr} and i, no {client_addr}.
    assert!(
        log.contains("mail <alice@test.example> auth=None addr=alice@test.example client=None i="),
        "{log}"
    );
    assert!(!log.contains("i=None"), "{log}");
    assert!(log.contains("rcpt <a@remote.example>"), "{log}");
    assert!(log.contains("eom hello from sendmail i="), "{log}");

    // Refused at MAIL: sendmail says why and exits 65 (EX_DATAERR).
    let (code, err) = sendmail(
        &inst,
        &["-f", "reject-mail@test.example", "a@remote.example"],
        "Subject: refused\n\nbody\n",
    );
    assert_eq!(code, 65, "{err}");
    assert!(
        err.contains("550 5.7.1 sender refused by the test milter"),
        "{err}"
    );
    inst.wait_log(
        10,
        "milter-reject: END-OF-MESSAGE from localhost[127.0.0.1]: 5.7.1 sender refused by the test milter; from=<reject-mail@test.example>",
    );

    // A temporary failure at the end: 75 (EX_TEMPFAIL).
    let (code, err) = sendmail(
        &inst,
        &["a@remote.example"],
        "Subject: tempfail-eom\n\nbody\n",
    );
    assert_eq!(code, 75, "{err}");
    assert!(err.contains("451 4.7.1"), "{err}");

    // A refused recipient is a configuration error, as with Postfix.
    let (code, err) = sendmail(
        &inst,
        &["reject-rcpt@remote.example"],
        "Subject: rcpt\n\nbody\n",
    );
    assert_eq!(code, 75, "{err}");
    assert!(err.contains("4.3.5 Server configuration error"), "{err}");
    inst.wait_log(
        10,
        "milter configuration error: can't reject recipient in non-smtpd(8) submission",
    );

    // Discard: sendmail is told it was queued; nothing is delivered.
    let (code, err) = sendmail(
        &inst,
        &["a@remote.example"],
        "Subject: discard me\n\nbody\n",
    );
    assert_eq!(code, 0, "{err}");
    inst.wait_log(
        10,
        "milter-discard: END-OF-MESSAGE from localhost[127.0.0.1]",
    );

    // Quarantine: held.
    let (code, err) = sendmail(
        &inst,
        &["a@remote.example"],
        "Subject: quarantine me\n\nbody\n",
    );
    assert_eq!(code, 0, "{err}");
    inst.wait_log(10, "milter-hold: held by the test milter");

    // Every change: headers, body, sender and recipients, the added
    // recipient mapped by virtual_alias_maps.
    let (code, err) = sendmail(
        &inst,
        &["kept@remote.example", "removed@test.example"],
        "Subject: please rewrite\nX-Remove: this goes\n\nOriginal body.\n",
    );
    assert_eq!(code, 0, "{err}");
    let msg = at_sink(&sink, "changed by the test milter");
    assert_eq!(msg.from, "changed@test.example", "{msg:?}");
    let mut rcpts = msg.rcpts.clone();
    rcpts.sort();
    assert_eq!(rcpts, ["kept@remote.example", "mapped@remote.example"]);
    assert!(msg.data.contains("X-First: inserted\r\n"), "{}", msg.data);
    assert!(!msg.data.contains("X-Remove"), "{}", msg.data);
    assert!(
        msg.data
            .contains("\r\n\r\nThe test milter replaced this body.\r\n.A line with a dot.\r\n"),
        "{}",
        msg.data
    );

    // A bounce is mail Sluice makes itself: not filtered.
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "sender@remote.example",
        "--to",
        "bounce-me@remote.example",
        "--header",
        "Subject: to be bounced",
    ]);
    assert_eq!(code, 0, "{out}");
    let bounce = wait_for(30, "the bounce at the sink", || {
        sink.messages()
            .into_iter()
            .find(|m| m.from.is_empty() && m.rcpts == ["sender@remote.example"])
    });
    assert!(!bounce.data.contains("X-Test-Milter"), "{}", bounce.data);
    assert!(
        !milter.log().contains("sender@remote.example"),
        "{}",
        milter.log()
    );
    // Nothing the milters refused or discarded was delivered.
    for m in sink.messages() {
        assert!(
            !m.data.contains("Subject: refused") && !m.data.contains("discard me"),
            "{}",
            m.data
        );
    }
}

#[test]
fn smtpd_milters_run_in_turn_and_their_macros_follow_the_lists() {
    let first = TestMilter::start();
    let second = TestMilter::start();
    let sink = ScriptedSink::start();
    let (inst, port) = instance(
        sink.port,
        &format!(
            "smtpd_milters = unix:{}, unix:{}\nmilter_mail_macros = i {{mail_addr}} {{client_addr}}\n",
            first.socket().display(),
            second.socket().display()
        ),
    );
    let send = |from: &str, to: &str, subject: &str| {
        swaks(&[
            "--server",
            &format!("127.0.0.1:{port}"),
            "--from",
            from,
            "--to",
            to,
            "--header",
            &format!("Subject: {subject}"),
            "--add-header",
            "X-Remove: this goes",
            "--body",
            "Original body.\n",
        ])
    };

    // The first rejects the sender: the second never hears of it.
    let (code, out) = send("reject-mail@remote.example", "a@remote.example", "x");
    assert_ne!(code, 0);
    assert!(
        out.contains("550 5.7.1 sender refused by the test milter"),
        "{out}"
    );
    assert!(first.log().contains("mail <reject-mail@remote.example>"));
    assert!(
        !second.log().contains("reject-mail"),
        "the second milter heard of a refused sender: {}",
        second.log()
    );

    // The first rewrites; the second sees the message as it left it.
    let (code, out) = send(
        "alice@remote.example",
        "kept@remote.example",
        "please rewrite",
    );
    assert_eq!(code, 0, "{out}");
    let msg = at_sink(&sink, "changed by the test milter");
    let log = second.log();
    assert!(log.contains("header X-First: inserted"), "{log}");
    assert!(
        log.contains("header Subject: changed by the test milter"),
        "{log}"
    );
    assert!(!log.contains("header X-Remove"), "{log}");
    assert!(log.contains("header X-Test-Milter: seen"), "{log}");
    // Both added their header; the recipient the first added is mapped.
    assert_eq!(
        msg.data.matches("X-Test-Milter: seen\r\n").count(),
        2,
        "{}",
        msg.data
    );
    let mut rcpts = msg.rcpts.clone();
    rcpts.sort();
    assert_eq!(rcpts, ["kept@remote.example", "mapped@remote.example"]);
    // milter_mail_macros names {client_addr}: it is sent.
    assert!(
        first.log().contains(
            "mail <alice@remote.example> auth=None addr=alice@remote.example client=127.0.0.1"
        ),
        "{}",
        first.log()
    );

    // A command smtpd does not know: the milters hear it; a temporary
    // refusal replaces the 502, a permanent one does not, as with Postfix.
    // (Its macros go out as Postfix sends them, but libmilter keeps none
    // for this event, so the test milter cannot show them.)
    let script = "import smtplib,sys\n\
                  s=smtplib.SMTP('127.0.0.1',int(sys.argv[1]))\n\
                  s.ehlo('client.example')\n\
                  print(s.docmd('XYZZY please tempfail'))\n\
                  print(s.docmd('XYZZY other'))\n\
                  s.quit()\n";
    let out = Command::new("/usr/bin/python3")
        .args(["-c", script, &port.to_string()])
        .output()
        .expect("python3");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = said.lines().collect();
    assert!(lines[0].starts_with("(451, b'4.7.1"), "{said}");
    assert!(lines[1].starts_with("(502, b'5.5.2"), "{said}");
    assert!(
        first.log().contains("unknown XYZZY please tempfail"),
        "{}",
        first.log()
    );
    drop(inst);
}

#[test]
fn a_milters_reply_of_several_lines_reads_the_same_in_smtpd_and_in_cleanup() {
    let milter = TestMilter::start();
    let sink = ScriptedSink::start();
    let socket = milter.socket().display().to_string();
    let (inst, port) = instance(
        sink.port,
        &format!("smtpd_milters = unix:{socket}\nnon_smtpd_milters = unix:{socket}\n"),
    );
    let want = "554 5.7.1 first line second line";
    let send = |to: &str, subject: &str| {
        swaks(&[
            "--server",
            &format!("127.0.0.1:{port}"),
            "--from",
            "alice@remote.example",
            "--to",
            to,
            "--header",
            &format!("Subject: {subject}"),
        ])
    };

    // smtpd, at RCPT.
    let (code, out) = send("multiline-rcpt@remote.example", "x");
    assert_ne!(code, 0, "{out}");
    assert!(out.contains(&format!("<** {want}\n")), "{out}");

    // smtpd, at the end of data.
    let (code, out) = send("a@remote.example", "multiline-eom");
    assert_ne!(code, 0, "{out}");
    assert!(out.contains(&format!("<** {want}\n")), "{out}");

    // cleanup, at the end of a sendmail submission: the same words, and
    // sendmail's exit for a permanent refusal, 65 (EX_DATAERR).
    let (code, err) = sendmail(
        &inst,
        &["a@remote.example"],
        "Subject: multiline-eom\n\nbody\n",
    );
    assert_eq!(code, 65, "{err}");
    assert!(err.contains(want), "{err}");
    assert!(
        sink.messages()
            .iter()
            .all(|m| !m.data.contains("multiline-eom")),
        "a refused message was delivered"
    );
}
