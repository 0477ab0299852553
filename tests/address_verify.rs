//! Address verification end to end: a client's RCPT reaches
//! reject_unverified_recipient in smtpd, qmgr probes the address through
//! the smtp agent at testkit's scripted sink (which answers per
//! recipient), and the probe's result decides the RCPT: known addresses
//! are accepted, unknown ones refused with the server's words, temporary
//! failures deferred; results are cached until they expire, and kept in
//! address_verify_map across a restart. A probe is MAIL FROM the verify
//! sender, RCPT, RSET: no message reaches the server. Then the same
//! against a real Postfix (Debian's) as the verified server, whose local
//! recipient table and access map decide.

use std::time::Duration;

use sluice_suite::postfix::{Postfix, PostfixOptions};
use sluice_suite::smtp_client::SmtpClient;
use sluice_suite::testkit::ScriptedSink;
use sluice_suite::{free_port, relay_instance, wait_for, Instance};

/// A relaying instance whose recipients are verified; `extra` is appended to main.cf.
fn verifying(sink: &ScriptedSink, extra: &str) -> (Instance, u16) {
    verifying_at(sink.port, extra)
}

/// As [`verifying`], relaying to 127.0.0.1:`port`.
fn verifying_at(port: u16, extra: &str) -> (Instance, u16) {
    relay_instance(
        port,
        &format!(
            "smtpd_recipient_restrictions = reject_unverified_recipient, permit_mynetworks, reject\n\
             unverified_recipient_reject_code = 550\n\
             address_verify_poll_count = 3\naddress_verify_poll_delay = 2s\n{extra}"
        ),
    )
}

/// The reply to RCPT TO:<to> in a fresh transaction.
fn rcpt(port: u16, to: &str) -> String {
    let (mut c, greeting) = SmtpClient::connect(port);
    assert!(greeting.starts_with("220"), "{greeting}");
    c.expect("EHLO client.test", "250");
    c.expect("MAIL FROM:<alice@example.com>", "250");
    let (r, _) = c.timed(&format!("RCPT TO:<{to}>"));
    c.expect("QUIT", "221");
    r.trim_end().to_string()
}

/// How many RCPT TO commands for `to` the sink has seen.
fn probes_of(sink: &ScriptedSink, to: &str) -> usize {
    let want = format!("RCPT TO:<{to}>");
    sink.sessions()
        .iter()
        .flat_map(|s| s.commands.iter())
        .filter(|c| c.eq_ignore_ascii_case(&want))
        .count()
}

#[test]
fn known_unknown_and_failing_addresses_are_answered_as_their_probes_found() {
    let sink = ScriptedSink::start();
    sink.rcpt_reply("nobody", "550 5.1.1 <nobody@remote.example>: User unknown");
    sink.rcpt_reply("busy", "451 4.2.1 mailbox busy, try later");
    let (inst, port) = verifying(&sink, "");

    let relay = format!("127.0.0.1[127.0.0.1]:{}", sink.port);
    assert!(rcpt(port, "known@remote.example").starts_with("250 2.1.5"));
    assert_eq!(
        rcpt(port, "nobody@remote.example"),
        format!(
            "550 5.1.1 <nobody@remote.example>: Recipient address rejected: undeliverable address: \
             host {relay} said: 550 5.1.1 <nobody@remote.example>: User unknown (in reply to RCPT TO command)"
        )
    );
    assert_eq!(
        rcpt(port, "busy@remote.example"),
        format!(
            "450 4.1.1 <busy@remote.example>: Recipient address rejected: unverified address: \
             host {relay} said: 451 4.2.1 mailbox busy, try later (in reply to RCPT TO command)"
        )
    );

    // Each probe ran once, as the verify sender, and ended with RSET: no
    // DATA, no message.
    for a in ["known", "nobody", "busy"] {
        assert_eq!(probes_of(&sink, &format!("{a}@remote.example")), 1, "{a}");
    }
    let probe_sessions: Vec<_> = sink
        .sessions()
        .into_iter()
        .filter(|s| s.commands.iter().any(|c| c.contains("double-bounce")))
        .collect();
    assert!(!probe_sessions.is_empty());
    for s in &probe_sessions {
        let cmds = s.commands.join("\n");
        assert!(
            cmds.contains("MAIL FROM:<double-bounce@mx.test.example>"),
            "{cmds}"
        );
        assert!(cmds.contains("RSET"), "{cmds}");
        assert!(!cmds.contains("DATA"), "{cmds}");
    }
    assert!(sink.messages().is_empty());
    let log = inst.log();
    assert!(
        log.contains("to=<known@remote.example>") && log.contains("status=deliverable"),
        "{log}"
    );
    assert!(log.contains("status=undeliverable"), "{log}");
    assert!(
        log.contains("NOQUEUE: reject: RCPT from") && log.contains("undeliverable address"),
        "{log}"
    );

    // Cached: asked again, answered without a probe.
    assert!(rcpt(port, "known@remote.example").starts_with("250"));
    assert!(rcpt(port, "nobody@remote.example").starts_with("550 5.1.1"));
    assert_eq!(probes_of(&sink, "known@remote.example"), 1);
    assert_eq!(probes_of(&sink, "nobody@remote.example"), 1);

    // A verified recipient's mail is relayed as any other.
    sluice_suite::smtplib_send(
        port,
        "alice@example.com",
        "known@remote.example",
        &write_message(&inst),
    );
    wait_for(30, "the message at the sink", || {
        (!sink.messages().is_empty()).then_some(())
    });
    assert_eq!(sink.messages()[0].rcpts, ["known@remote.example"]);
}

fn write_message(inst: &Instance) -> std::path::PathBuf {
    let p = inst.root().join("message.txt");
    std::fs::write(&p, "Subject: verified\r\n\r\nhello\r\n").unwrap();
    p
}

#[test]
fn a_probe_without_a_result_defers_only_what_the_rest_would_accept() {
    // Postfix's unverified_recipient_tempfail_action = defer_if_permit:
    // behind the unfinished probe the list still says reject, so the
    // client gets the rejection, not a deferral to retry forever.
    let sink = ScriptedSink::start();
    let lists = "smtpd_recipient_restrictions = reject_unverified_recipient, \
                 check_recipient_access inline:{blocked@remote.example=REJECT}, permit_mynetworks, reject\n\
                 address_verify_poll_count = 1\n";
    let (_inst, port) = relay_instance(sink.port, lists);
    let r = rcpt(port, "blocked@remote.example");
    assert!(r.starts_with("554 5.7.1"), "{r}");
    assert_eq!(
        rcpt(port, "fresh@remote.example"),
        "450 4.1.1 <fresh@remote.example>: Recipient address rejected: unverified address: \
         Address verification in progress"
    );
    // defer: the deferral at once, whatever comes after.
    let (_inst, port) = relay_instance(
        sink.port,
        &format!("{lists}unverified_recipient_tempfail_action = defer\n"),
    );
    let r = rcpt(port, "blocked@remote.example");
    assert!(r.starts_with("450 4.1.1"), "{r}");
}

#[test]
fn a_result_is_used_until_it_expires_then_probed_again() {
    let sink = ScriptedSink::start();
    sink.rcpt_reply("moved", "550 5.1.6 recipient has moved");
    let (_inst, port) = verifying(
        &sink,
        "address_verify_negative_expire_time = 4s\naddress_verify_negative_refresh_time = 4s\n",
    );
    assert!(rcpt(port, "moved@remote.example").starts_with("550 5.1.1"));
    // The server takes the address again; the cache does not know yet.
    sink.clear_rcpt_replies();
    assert!(rcpt(port, "moved@remote.example").starts_with("550 5.1.1"));
    assert_eq!(probes_of(&sink, "moved@remote.example"), 1);
    // Past the negative expiry time: probed again, and accepted.
    std::thread::sleep(Duration::from_secs(4));
    assert!(rcpt(port, "moved@remote.example").starts_with("250"));
    assert_eq!(probes_of(&sink, "moved@remote.example"), 2);
}

#[test]
fn without_time_to_wait_a_miss_is_deferred_and_the_next_query_has_the_result() {
    let sink = ScriptedSink::start();
    let (_inst, port) = verifying(&sink, "address_verify_poll_count = 1\n");
    assert_eq!(
        rcpt(port, "new@remote.example"),
        "450 4.1.1 <new@remote.example>: Recipient address rejected: unverified address: \
         Address verification in progress"
    );
    wait_for(30, "the probe", || {
        (probes_of(&sink, "new@remote.example") == 1).then_some(())
    });
    wait_for(30, "the probe's result", || {
        rcpt(port, "new@remote.example")
            .starts_with("250")
            .then_some(())
    });
}

#[test]
fn the_cache_survives_a_restart_of_the_instance() {
    let sink = ScriptedSink::start();
    sink.rcpt_reply("nobody", "550 5.1.1 no such user");
    let (mut inst, port) = verifying(&sink, "");
    assert!(rcpt(port, "nobody@remote.example").starts_with("550"));
    assert!(rcpt(port, "known@remote.example").starts_with("250"));
    inst.stop();
    let saved = std::fs::read_to_string(inst.root().join("spool/state/verify_cache"))
        .expect("address_verify_map written at exit");
    assert!(
        saved.contains("nobody@remote.example\tundeliverable\t"),
        "{saved}"
    );
    // A save cut short by a crash: its torn last line is skipped.
    std::fs::write(
        inst.root().join("spool/state/verify_cache"),
        format!("{saved}torn@remote.example\tdeliv"),
    )
    .unwrap();
    sink.clear_rcpt_replies();
    inst.start();
    inst.wait_port(port);
    assert!(rcpt(port, "nobody@remote.example").starts_with("550"));
    assert!(rcpt(port, "known@remote.example").starts_with("250"));
    assert_eq!(probes_of(&sink, "nobody@remote.example"), 1);
    assert_eq!(probes_of(&sink, "known@remote.example"), 1);
    inst.wait_log(20, "1 line(s) cut short or unreadable, skipped");
}

#[test]
fn a_real_postfix_decides_as_its_tables_say() {
    let tmp = tempfile::Builder::new()
        .prefix("sluice-pf")
        .tempdir()
        .unwrap();
    let pf_port = free_port();
    let pf = Postfix::start(
        tmp.path(),
        pf_port,
        &PostfixOptions {
            main_extra: "local_recipient_maps = inline:{known=x, busy=x}\n\
                         smtpd_recipient_restrictions = check_recipient_access \
                         inline:{{busy@dest.test.example = 450 4.2.1 mailbox busy}}, \
                         permit_mynetworks, reject_unauth_destination\n"
                .into(),
            ..PostfixOptions::default()
        },
    );
    let (inst, port) = verifying_at(pf_port, "");
    let relay = format!("127.0.0.1[127.0.0.1]:{pf_port}");
    assert!(rcpt(port, "known@dest.test.example").starts_with("250"));
    assert_eq!(
        rcpt(port, "nobody@dest.test.example"),
        format!(
            "550 5.1.1 <nobody@dest.test.example>: Recipient address rejected: undeliverable address: \
             host {relay} said: 550 5.1.1 <nobody@dest.test.example>: Recipient address rejected: \
             User unknown in local recipient table (in reply to RCPT TO command)"
        )
    );
    assert_eq!(
        rcpt(port, "busy@dest.test.example"),
        format!(
            "450 4.1.1 <busy@dest.test.example>: Recipient address rejected: unverified address: \
             host {relay} said: 450 4.2.1 <busy@dest.test.example>: Recipient address rejected: \
             mailbox busy (in reply to RCPT TO command)"
        )
    );
    // Postfix saw the probes from the verify sender, and no message came of them.
    let log = pf.log();
    assert!(
        log.contains("from=<double-bounce@mx.test.example> to=<nobody@dest.test.example>"),
        "{log}"
    );
    assert!(!pf.queue_json().contains("double-bounce"));
    // A verified recipient's mail reaches Postfix.
    sluice_suite::smtplib_send(
        port,
        "alice@example.com",
        "known@dest.test.example",
        &write_message(&inst),
    );
    pf.wait_queued("known@dest.test.example");
}

#[test]
fn an_unverified_sender_is_refused_at_rcpt_time() {
    let sink = ScriptedSink::start();
    sink.rcpt_reply("forged", "550 5.1.1 no such user here");
    let (_inst, port) = relay_instance(
        sink.port,
        "smtpd_sender_restrictions = reject_unverified_sender\n\
         unverified_sender_reject_code = 550\n\
         address_verify_poll_count = 3\naddress_verify_poll_delay = 2s\n",
    );
    let relay = format!("127.0.0.1[127.0.0.1]:{}", sink.port);
    let rcpt_from = |from: &str| {
        let (mut c, _) = SmtpClient::connect(port);
        c.expect("EHLO client.test", "250");
        c.expect(&format!("MAIL FROM:<{from}>"), "250");
        let (r, _) = c.timed("RCPT TO:<bob@remote.example>");
        c.expect("QUIT", "221");
        r.trim_end().to_string()
    };
    assert_eq!(
        rcpt_from("forged@remote.example"),
        format!(
            "550 5.1.7 <forged@remote.example>: Sender address rejected: undeliverable address: \
             host {relay} said: 550 5.1.1 no such user here (in reply to RCPT TO command)"
        )
    );
    assert!(rcpt_from("real@remote.example").starts_with("250"));
    // The null sender is not verified.
    assert!(rcpt_from("").starts_with("250"));
    assert_eq!(probes_of(&sink, "forged@remote.example"), 1);
    assert_eq!(probes_of(&sink, "bob@remote.example"), 0);
}

#[test]
fn an_alias_is_verified_by_the_address_it_maps_to() {
    let sink = ScriptedSink::start();
    // The alias itself is unknown at the server: only what it maps to is.
    sink.rcpt_reply("sales", "550 5.1.1 <sales@remote.example>: User unknown");
    let (_inst, port) = verifying(
        &sink,
        "virtual_alias_maps = inline:{ sales@remote.example = known@remote.example }\n",
    );
    let r = rcpt(port, "sales@remote.example");
    assert!(r.starts_with("250 2.1.5"), "{r}");
    assert_eq!(probes_of(&sink, "known@remote.example"), 1);
    assert_eq!(probes_of(&sink, "sales@remote.example"), 0);
}
