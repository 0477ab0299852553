//! Virtual alias expansion in cleanup, end to end: swaks (or sendmail) →
//! smtpd → cleanup, which asks the router to map the recipients before
//! the message is queued → qmgr → smtp → Postfix's smtp-sink. One message
//! to an alias reaches every address it expands to, each logged with
//! `orig_to=` and carrying the alias as ORCPT into DSNs; loops, limits and
//! a missing router refuse the message with 451 at the end of DATA;
//! `receive_override_options = no_address_mappings` queues it unexpanded.

use sluice_suite::{free_port, queued_id, sink_dump, smtp_sink, swaks, wait_for, Instance, Sink};

const ALIASES: &str = "virtual_alias_domains = virt.example\n\
    virtual_alias_maps = inline:{ \
    { team@virt.example = a@remote.example, b@remote.example, c@mx.test.example }, \
    { loop1@virt.example = loop2@virt.example }, \
    { loop2@virt.example = loop1@virt.example }, \
    { big@virt.example = x1@remote.example, x2@remote.example, x3@remote.example, x4@remote.example }, \
    { one@virt.example = single@remote.example }, \
    { self@remote.example = self@remote.example, copy@remote.example } }\n\
    virtual_alias_expansion_limit = 3\n\
    transport_maps = inline:{ c@mx.test.example = error:5.1.1 mailbox unavailable }\n\
    sender_canonical_maps = inline:{ joe@example.com = joseph@example.com }\n";

/// An instance relaying to a sink; `router` false leaves the router out.
fn instance(sink_port: u16, extra: &str, router: bool) -> (Instance, u16) {
    let port = free_port();
    let router = if router {
        "router unix - - n - 1 router\n"
    } else {
        ""
    };
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\n{router}smtp unix - - n - - smtp\nrelay unix - - n - - smtp\n\
         submit unix n - n - - cleanup\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{sink_port}\n\
         smtpd_reject_unlisted_recipient = no\n{ALIASES}{extra}"
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);
    (inst, port)
}

fn swaks_to(port: u16, to: &str) -> (i32, String) {
    swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@example.com",
        "--to",
        to,
    ])
}

/// The recipients the sink was given (smtp-sink -d writes X-Rcpt-Args:),
/// from every dump it has begun: a recipient is in a dump once its first
/// block is written, whole or not.
fn sink_rcpts(sink: &Sink) -> Vec<String> {
    let Ok(d) = std::fs::read_dir(sink.dir.path()) else {
        return vec![];
    };
    let mut v: Vec<String> = d
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .flat_map(|t| {
            t.lines()
                .take_while(|l| l.starts_with("X-"))
                .filter_map(|l| l.strip_prefix("X-Rcpt-Args: "))
                .map(|a| a.split_whitespace().next().unwrap_or("").to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn one_message_to_an_alias_reaches_every_address_it_expands_to() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst, port) = instance(sink.port, "", true);
    let (code, out) = swaks_to(port, "team@virt.example");
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    // a and b at the sink, with the sender's bounce for c beside them.
    let line = inst.wait_log(20, &format!("{id}: sender non-delivery notification: "));
    let notice = line.rsplit(' ').next().unwrap().to_string();
    wait_for(20, "a, b and the notice at the sink", || {
        let r = sink_rcpts(&sink);
        (r.len() == 3).then_some(())
    });
    assert_eq!(
        sink_rcpts(&sink),
        [
            "<a@remote.example>",
            "<alice@example.com>",
            "<b@remote.example>"
        ],
        "{}",
        inst.log()
    );
    // Logged as Postfix logs expanded recipients.
    for a in ["a@remote.example", "b@remote.example"] {
        inst.wait_log(
            10,
            &format!("{id}: to=<{a}>, orig_to=<team@virt.example>, relay="),
        );
    }
    inst.wait_log(
        10,
        &format!("{id}: to=<c@mx.test.example>, orig_to=<team@virt.example>, relay=none"),
    );
    assert!(
        !inst.log().contains("expands to several recipients"),
        "{}",
        inst.log()
    );
    // The bounce for c names the alias as the original recipient.
    let file = sink_dump(&sink, &inst, &notice, "alice@example.com").path;
    let parsed = inst.python("parse_dsn.py", &[file.to_str().unwrap()]);
    let p = String::from_utf8_lossy(&parsed.stdout);
    for needle in [
        "report-type: delivery-status",
        "final-recipient: rfc822; c@mx.test.example",
        "original-recipient: rfc822; team@virt.example",
        "action: failed",
        "status: 5.1.1",
    ] {
        assert!(
            p.contains(needle),
            "missing {needle:?} in:\n{p}\n{}",
            String::from_utf8_lossy(&parsed.stderr)
        );
    }
    // A one-to-one alias is delivered to its target, also with orig_to.
    let (code, out) = swaks_to(port, "one@virt.example");
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    inst.wait_log(
        20,
        &format!("{id}: to=<single@remote.example>, orig_to=<one@virt.example>, relay="),
    );
    wait_for(20, "single@ at the sink", || {
        sink_rcpts(&sink)
            .contains(&"<single@remote.example>".to_string())
            .then_some(())
    });
    // An alias that lists itself: cleanup queues both, and qmgr delivers
    // the address itself rather than expanding it again.
    let (code, out) = swaks_to(port, "self@remote.example");
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    inst.wait_log(20, &format!("{id}: to=<self@remote.example>, relay="));
    inst.wait_log(
        20,
        &format!("{id}: to=<copy@remote.example>, orig_to=<self@remote.example>, relay="),
    );
    wait_for(20, "self@ and copy@ at the sink", || {
        let r = sink_rcpts(&sink);
        (r.contains(&"<self@remote.example>".to_string())
            && r.contains(&"<copy@remote.example>".to_string()))
        .then_some(())
    });
    assert!(!inst.log().contains("status=deferred"), "{}", inst.log());
}

#[test]
fn loops_limits_and_a_missing_router_refuse_the_message_at_data() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst, port) = instance(sink.port, "", true);
    for (to, why) in [
        ("loop1@virt.example", "virtual alias loop"),
        ("big@virt.example", "expansion size"),
    ] {
        let (code, out) = swaks_to(port, to);
        assert_ne!(code, 0, "{out}");
        let data_reply = out
            .lines()
            .rev()
            .find(|l| l.starts_with("<** 451 4.3.0"))
            .unwrap_or_else(|| panic!("no 451 after DATA:\n{out}"));
        assert!(data_reply.contains(why), "{data_reply}");
        assert!(
            out.contains("354 End data"),
            "refused at the end of DATA, not before:\n{out}"
        );
    }
    assert!(
        inst.queue_json().is_empty(),
        "nothing queued: {:?}",
        inst.queue_json()
    );

    // sendmail gets EX_TEMPFAIL (75) for the same refusal.
    let out = sendmail(&inst, &["loop1@virt.example"], "Subject: t\n\nbody\n");
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("virtual alias loop"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Without a router, mail to anyone is refused for now, not queued unmapped.
    let (_down, port) = instance(sink.port, "", false);
    let (code, out) = swaks_to(port, "team@virt.example");
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("<** 451 4.3.0 Error: address rewriting service unavailable"),
        "{out}"
    );
}

#[test]
fn the_envelope_sender_goes_through_sender_canonical_maps() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst, port) = instance(sink.port, "", true);
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "joe@example.com",
        "--to",
        "one@virt.example",
    ]);
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    inst.wait_log(20, &format!("{id}: from=<joseph@example.com>"));
    let text = sink_dump(&sink, &inst, &id, "single@remote.example").text;
    assert!(
        text.contains("X-Mail-Args: <joseph@example.com>")
            && text.contains("X-Rcpt-Args: <single@remote.example>"),
        "{text}"
    );
}

fn sendmail(inst: &Instance, args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(sluice_suite::bin_dir().join("sendmail"));
    cmd.args(["-i", "-f", "alice@example.com"])
        .args(args)
        .env("SLUICE_CONFIG_DIR", inst.etc());
    if let Some((uid, gid)) = inst.run_as {
        cmd.uid(uid).gid(gid);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait_with_output().unwrap()
}

#[test]
fn no_address_mappings_queues_the_alias_as_given() {
    // The cleanup in front of a content filter: the alias stays, and qmgr
    // does not map it (Postfix's qmgr asks trivial-rewrite to resolve only):
    // without the content filter's reinjection it is no such user.
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst, port) = instance(
        sink.port,
        "receive_override_options = no_address_mappings\n",
        true,
    );
    let (code, out) = swaks_to(port, "team@virt.example");
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    let line = inst.wait_log(20, &format!("{id}: to=<team@virt.example>"));
    assert!(
        line.contains("status=bounced") && line.contains("virtual alias table"),
        "{line}"
    );
    // sendmail's mail is not mapped either: queued under the alias itself.
    let out = sendmail(&inst, &["one@virt.example"], "Subject: t\n\nbody\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    inst.wait_log(20, "to=<one@virt.example>");
}
