//! run_sendmail(1) end to end, as Postfix's: a message piped from an mbox
//! loses its leading "From " line, and `-N`, `-R`, `-V` set the envelope's
//! DSN options, which the bounce daemon honours.

use sluice_suite::{
    free_port, run_sendmail, sink_dump, smtp_sink, submit_relay_instance, Instance,
};

/// The queue id of the message the instance logged as handed to `rcpt`.
fn id_for(inst: &Instance, rcpt: &str) -> String {
    let line = inst.wait_log(20, &format!(": to=<{rcpt}>"));
    let head = line.split_once(": to=<").unwrap().0;
    head.rsplit(' ').next().unwrap().to_string()
}

/// Postfix's sendmail skips leading "From " and ">From " lines (skip_from_
/// in sendmail.c); kept, the line sat in the header section, where
/// Python's email package reports a defect and local(8) writes ">From".
#[test]
fn a_leading_mbox_from_line_is_dropped() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let inst = submit_relay_instance(sink.port, "");
    let out = run_sendmail(
        &inst,
        &["r@remote.example"],
        "From x@y Fri Nov 27 05:00:00 2026\n>From z@y Fri Nov 27 05:00:00 2026\n\
         Subject: s\n\nFrom the body\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = id_for(&inst, "r@remote.example");
    let dump = sink_dump(&sink, &inst, &id, "r@remote.example");
    assert!(!dump.text.contains("From x@y"), "{}", dump.text);
    assert!(!dump.text.contains("From z@y"), "{}", dump.text);
    assert!(dump.text.contains("\nSubject: s\n"), "{}", dump.text);
    assert!(dump.text.contains("\nFrom the body\n"), "{}", dump.text);
}

/// `-N never` asks for no notice, `-R hdrs` for the headers only and `-V`
/// names the envelope (Original-Envelope-Id), as Postfix's sendmail passes
/// them to cleanup; a bad value is ignored with a warning, as by Postfix,
/// and the message goes with the defaults.
#[test]
fn dsn_options_reach_the_bounce() {
    let good = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let bad = smtp_sink(&format!("127.0.0.1:{}", free_port()), &["-f", "rcpt"]);
    let extra = format!(
        "transport_maps = inline:{{ remote.example = smtp:[127.0.0.1]:{} }}\n",
        bad.port
    );
    let inst = submit_relay_instance(good.port, &extra);
    let body = "Subject: dsn test\nFrom: alice@example.com\n\nthe secret body\n";
    let run = |args: &[&str], rcpt: &str| {
        let mut all = vec!["-f", "alice@example.com"];
        all.extend_from_slice(args);
        all.push(rcpt);
        let out = run_sendmail(&inst, &all, body);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = id_for(&inst, rcpt);
        let line = inst.wait_log(20, &format!("{id}: to=<{rcpt}>"));
        assert!(line.contains("status=bounced"), "{line}");
        inst.wait_log(20, &format!("{id}: removed"));
        (id, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let notice = |id: &str| {
        let line = inst.wait_log(20, &format!("{id}: sender non-delivery notification: "));
        let notice_id = line.rsplit(' ').next().unwrap().to_string();
        let dump = sink_dump(&good, &inst, &notice_id, "alice@example.com");
        let parsed = inst.python("parse_dsn.py", &[dump.path.to_str().unwrap()]);
        let p = String::from_utf8_lossy(&parsed.stdout).into_owned()
            + &String::from_utf8_lossy(&parsed.stderr);
        (dump, p)
    };

    let (never, _) = run(&["-N", "never"], "never@remote.example");
    let (hdrs, _) = run(&["-R", "hdrs", "-V", "env-42"], "hdrs@remote.example");
    let (dump, p) = notice(&hdrs);
    assert!(p.contains("part: text/rfc822-headers"), "{p}");
    assert!(p.contains("original-envelope-id: env-42"), "{p}");
    assert!(!dump.text.contains("the secret body"), "{}", dump.text);
    // The -N never message had its chance before: no notice for it.
    let log = inst.log();
    assert!(
        !log.contains(&format!("{never}: sender non-delivery notification")),
        "{log}"
    );

    let (full, warned) = run(&["-N", "sometimes", "-R", "body"], "full@remote.example");
    assert!(
        warned.contains("sendmail: warning: bad -N option value: 'sometimes' -- ignored")
            && warned.contains("bad -R option value"),
        "{warned}"
    );
    let (dump, p) = notice(&full);
    assert!(p.contains("part: message/rfc822"), "{p}");
    assert!(dump.text.contains("the secret body"), "{}", dump.text);
}
