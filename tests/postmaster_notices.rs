//! The postmaster's copies that `notify_classes` asks for (bounce, delay),
//! end to end: a real instance relays to Postfix's smtp-sink, which
//! refuses one destination's recipients, and the notices are read from the
//! sink's dumps with Python's `email` (tests/scripts/parse_dsn.py).

use sluice_suite::{free_port, relay_instance, sink_dump, smtp_sink, swaks_queued, Instance, Sink};

/// Sends one message from alice@example.com to `to`; its queue id.
fn send(port: u16, to: &str) -> String {
    let extra = ["--header", "Subject: copied", "--body", "secret body"];
    swaks_queued(port, "alice@example.com", to, &extra)
}

/// The notice `id` the sink got for `rcpt`, parsed.
fn parsed(inst: &Instance, sink: &Sink, id: &str, rcpt: &str) -> (String, String) {
    let dump = sink_dump(sink, inst, id, rcpt);
    let out = inst.python("parse_dsn.py", &[dump.path.to_str().unwrap()]);
    let p =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (dump.text, p)
}

/// notify_classes = bounce: the sender gets its notice with the whole
/// message; bounce_notice_recipient gets a copy with the headers only,
/// from the double-bounce sender, as Postfix's bounce daemon sends it.
#[test]
fn notify_classes_bounce_copies_every_bounce_to_the_postmaster() {
    let good = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let bad = smtp_sink(&format!("127.0.0.1:{}", free_port()), &["-f", "rcpt"]);
    let extra = format!(
        "transport_maps = inline:{{ remote.example = smtp:[127.0.0.1]:{} }}\n\
         notify_classes = bounce, resource, software\n\
         bounce_notice_recipient = pm@elsewhere.example\n",
        bad.port
    );
    let (inst, port) = relay_instance(good.port, &extra);
    let id = send(port, "nobody@remote.example");
    let line = inst.wait_log(15, &format!("{id}: sender non-delivery notification: "));
    let to_sender = line.rsplit(' ').next().unwrap().to_string();
    let line = inst.wait_log(15, &format!("{id}: postmaster non-delivery notification: "));
    let copy = line.rsplit(' ').next().unwrap().to_string();

    let (text, p) = parsed(&inst, &good, &to_sender, "alice@example.com");
    assert!(
        p.contains("subject: Undelivered Mail Returned to Sender"),
        "{p}"
    );
    assert!(text.contains("secret body"), "the sender gets it whole");

    let (text, p) = parsed(&inst, &good, &copy, "pm@elsewhere.example");
    for needle in [
        "subject: Postmaster Copy: Undelivered Mail",
        "to: pm@elsewhere.example",
        "final-recipient: rfc822; nobody@remote.example",
        "action: failed",
        "part: text/rfc822-headers",
    ] {
        assert!(p.contains(needle), "missing {needle:?} in:\n{p}");
    }
    assert!(text.contains("Subject: copied"), "{text}");
    assert!(!text.contains("secret body"), "headers only: {text}");
    assert!(
        inst.log()
            .contains(&format!("{copy}: from=<double-bounce@mx.test.example>")),
        "{}",
        inst.log()
    );
}

/// Without bounce in notify_classes (Postfix's default) nobody but the
/// sender hears of a bounce.
#[test]
fn by_default_the_postmaster_gets_no_copy() {
    let good = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let bad = smtp_sink(&format!("127.0.0.1:{}", free_port()), &["-f", "rcpt"]);
    let extra = format!(
        "transport_maps = inline:{{ remote.example = smtp:[127.0.0.1]:{} }}\n\
         bounce_notice_recipient = pm@elsewhere.example\n",
        bad.port
    );
    let (inst, port) = relay_instance(good.port, &extra);
    let id = send(port, "nobody@remote.example");
    let line = inst.wait_log(15, &format!("{id}: sender non-delivery notification: "));
    let to_sender = line.rsplit(' ').next().unwrap().to_string();
    parsed(&inst, &good, &to_sender, "alice@example.com");
    // The notice is delivered; had a copy been made, it would have been
    // queued before the original was removed.
    inst.wait_log(15, &format!("{id}: removed"));
    assert!(
        !inst.log().contains("postmaster non-delivery notification"),
        "{}",
        inst.log()
    );
}

/// notify_classes = delay: delay_notice_recipient gets a copy of the
/// sender's delay warning.
#[test]
fn notify_classes_delay_copies_the_delay_warning() {
    let good = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let dead = free_port();
    let extra = format!(
        "transport_maps = inline:{{ remote.example = smtp:[127.0.0.1]:{dead} }}\n\
         delay_warning_time = 1s\nminimal_backoff_time = 1s\nmaximal_backoff_time = 1s\n\
         queue_run_delay = 1s\nhost_retry_time = 1s\n\
         notify_classes = delay\ndelay_notice_recipient = ops@elsewhere.example\n"
    );
    let (inst, port) = relay_instance(good.port, &extra);
    let id = send(port, "later@remote.example");
    inst.wait_log(30, &format!("{id}: sender delay notification: "));
    let line = inst.wait_log(30, &format!("{id}: postmaster delay notification: "));
    let copy = line.rsplit(' ').next().unwrap().to_string();
    let (text, p) = parsed(&inst, &good, &copy, "ops@elsewhere.example");
    for needle in [
        "subject: Postmaster Warning: Delayed Mail",
        "final-recipient: rfc822; later@remote.example",
        "action: delayed",
    ] {
        assert!(p.contains(needle), "missing {needle:?} in:\n{p}");
    }
    assert!(!text.contains("secret body"), "headers only: {text}");
}
