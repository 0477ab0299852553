//! header_checks and body_checks in cleanup, end to end: swaks sends
//! through a relaying instance to Postfix's smtp-sink. REJECT refuses the
//! message at the end of DATA with 5.7.1 and queues nothing; IGNORE,
//! REPLACE and PREPEND show in the delivered message; DISCARD is 250 and
//! delivered nowhere; HOLD puts the message in the hold queue; an
//! unsupported action is a warning. A bad pattern or an unknown action is
//! named with its file and line by `sluice check` and by cleanup, which
//! then takes no mail rather than passing it unchecked.

use std::path::Path;

use sluice_suite::{
    free_port, queued_id, sink_dump, smtp_sink, swaks, wait_for, Instance, RECEIVE_MAIN_CF,
};

const HEADER_CHECKS: &str = "\
/^Subject:.*forbidden/ REJECT no forbidden subjects here
/^X-Secret:/ IGNORE
/^X-Old: (.*)/ REPLACE X-New: replaced $1
/^X-Mark:/ PREPEND X-Prepended: yes
/^Subject:.*discard me/ DISCARD spam
/^Subject:.*hold me/ HOLD held for review
/^X-Bcc:/ BCC someone@example.com
";

const BODY_CHECKS: &str = "\
/^bad body line$/ REJECT 5.7.1 body refused
/^drop this line$/ IGNORE
";

/// A relaying instance (smtpd on a free port) whose main.cf also gets
/// `extra`, with the tables written under its etc/ before it starts.
fn instance(sink_port: u16, tables: &[(&str, &str)], extra: &str) -> (Instance, u16) {
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let inst = Instance::new(&cf, "");
    let etc = inst.etc();
    for (name, text) in tables {
        std::fs::write(etc.join(name), text).unwrap();
    }
    let main = std::fs::read_to_string(etc.join("main.cf")).unwrap();
    let main = format!(
        "{main}{RECEIVE_MAIN_CF}relayhost = [127.0.0.1]:{sink_port}\n{}",
        extra.replace("$ETC", &etc.display().to_string())
    );
    std::fs::write(etc.join("main.cf"), main).unwrap();
    if let Some((uid, gid)) = inst.run_as {
        for (name, _) in tables {
            std::os::unix::fs::chown(etc.join(name), Some(uid), Some(gid)).unwrap();
        }
    }
    (inst, port)
}

fn send(port: u16, headers: &[&str], body: &str) -> (i32, String) {
    let mut args = vec![
        "--server".to_string(),
        format!("127.0.0.1:{port}"),
        "--from".into(),
        "alice@remote.example".into(),
        "--to".into(),
        "bob@dest.example".into(),
        "--body".into(),
        body.into(),
    ];
    for h in headers {
        args.push("--header".into());
        args.push(h.to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    swaks(&args)
}

#[test]
fn header_and_body_checks_act_on_mail() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (mut inst, port) = instance(
        sink.port,
        &[
            ("header_checks", HEADER_CHECKS),
            ("body_checks", BODY_CHECKS),
        ],
        "header_checks = regexp:$ETC/header_checks\nbody_checks = regexp:$ETC/body_checks\n",
    );
    inst.start();
    inst.wait_port(port);

    // REJECT on a header: 5.7.1 with the table's text, logged as Postfix
    // logs it, nothing queued.
    let (code, out) = send(port, &["Subject: something forbidden"], "hello\n");
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("550 5.7.1 no forbidden subjects here"),
        "{out}"
    );
    let log = inst.wait_log(10, "reject: header Subject: something forbidden from ");
    let line = log
        .lines()
        .find(|l| l.contains("reject: header Subject: something forbidden"))
        .unwrap();
    assert!(
        line.contains("[127.0.0.1]; from=<alice@remote.example> to=<bob@dest.example> proto=ESMTP")
            && line.ends_with(": 5.7.1 no forbidden subjects here"),
        "{line}"
    );

    // REJECT on a body line, dot-stuffing undone before the match.
    let (code, out) = send(port, &["Subject: fine"], "ok\nbad body line\nmore\n");
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("550 5.7.1 body refused"), "{out}");
    inst.wait_log(10, "reject: body bad body line from ");
    assert!(inst.queued_ids().is_empty(), "{:?}", inst.queue_json());

    // DISCARD: 250 to the client, logged, never queued nor delivered.
    let (code, out) = send(port, &["Subject: please discard me"], "x\n");
    assert_eq!(code, 0, "{out}");
    let discarded = queued_id(&out);
    inst.wait_log(
        10,
        &format!("{discarded}: discard: header Subject: please discard me from "),
    );

    // HOLD: queued on hold, as `sluice queue hold` leaves it.
    let (code, out) = send(port, &["Subject: hold me"], "x\n");
    assert_eq!(code, 0, "{out}");
    let held = queued_id(&out);
    inst.wait_log(10, &format!("{held}: hold: header Subject: hold me from "));
    wait_for(10, "the held message in the hold queue", || {
        inst.queue_json()
            .iter()
            .any(|l| l.contains(&held) && l.contains("\"queue_name\":\"hold\""))
            .then_some(())
    });

    // IGNORE, REPLACE and PREPEND show in the delivered message; the
    // unsupported BCC is a warning and changes nothing; an IGNOREd body
    // line is gone, a dot-stuffed one arrives as it was sent.
    let (code, out) = send(
        port,
        &[
            "Subject: edited",
            "X-Secret: do not pass",
            "X-Old: v1",
            "X-Mark: m",
            "X-Bcc: b",
        ],
        "keep this\ndrop this line\n.dotted\nend\n",
    );
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    let dump = sink_dump(&sink, &inst, &id, "bob@dest.example");
    let text = &dump.text;
    assert!(!text.contains("X-Secret"), "{text}");
    assert!(
        text.contains("X-New: replaced v1\n") && !text.contains("X-Old"),
        "{text}"
    );
    assert!(text.contains("X-Prepended: yes\nX-Mark: m\n"), "{text}");
    assert!(text.contains("X-Bcc: b\n"), "{text}");
    assert!(text.contains("keep this\n.dotted\nend\n"), "{text}");
    assert!(!text.contains("drop this line"), "{text}");
    let log = inst.log();
    assert!(
        log.contains(&format!("{id}: unsupported action: header X-Bcc: b from "))
            && log.contains(": BCC someone@example.com"),
        "{log}"
    );
    assert!(
        !log.contains(&format!("{discarded}: to=<")),
        "a discarded message was delivered:\n{log}"
    );
    let left: Vec<String> = inst.queued_ids().into_iter().collect();
    assert_eq!(left, [held], "only the held message stays queued");

    // A reload reads the tables again, as `postfix reload` makes a new
    // cleanup read them.
    let table = inst.etc().join("header_checks");
    std::fs::write(&table, "/^Subject: new rule/ REJECT 4.7.1 later please\n").unwrap();
    assert!(inst.sluice(&["reload"]).status.success());
    wait_for(10, "the new rule in force", || {
        let (code, out) = send(port, &["Subject: new rule"], "x\n");
        (code != 0 && out.contains("451 4.7.1 later please")).then_some(())
    });
    // A table broken by an edit is not reloaded (cleanup would stop on it
    // and mail wait): sluice reload says so, the running rules stay.
    std::fs::write(&table, "/^Subject: (unclosed/ REJECT x\n").unwrap();
    let out = inst.sluice(&["reload"]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("parameter \"header_checks\"") && said.contains("not reloading"),
        "{said}"
    );
    let (code, out) = send(port, &["Subject: new rule"], "x\n");
    assert!(code != 0 && out.contains("451 4.7.1 later please"), "{out}");
    let (code, out) = send(port, &["Subject: fine"], "x\n");
    assert_eq!(code, 0, "mail still taken: {out}");
    inst.stop();
}

#[test]
fn bad_tables_are_named_by_sluice_check_and_stop_cleanup() {
    let bad_pattern = "/^Subject: ok/ WARN fine\n/^Subject: (unclosed/ REJECT\n";
    let bad_action = "/^x/ DUNNO\n\n/^y/ FROBNICATE now\n";
    let (mut inst, port) = instance(
        free_port(),
        &[("header_checks", bad_pattern), ("body_checks", bad_action)],
        "header_checks = regexp:$ETC/header_checks\nbody_checks = pcre:$ETC/body_checks\n",
    );
    let etc = inst.etc();
    let out = inst.sluice(&["check"]);
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    let named = |param: &str, file: &Path, line: usize| {
        said.lines().any(|l| {
            l.contains(&format!("parameter \"{param}\""))
                && l.contains(&format!("{}, line {line}", file.display()))
        })
    };
    assert!(
        named("header_checks", &etc.join("header_checks"), 2),
        "{said}"
    );
    assert!(named("body_checks", &etc.join("body_checks"), 3), "{said}");
    assert!(said.contains("FROBNICATE"), "{said}");

    // cleanup stops at start with the same words; the mail is never
    // accepted unchecked (smtpd waits for a cleanup that keeps failing).
    inst.start();
    inst.wait_port(port);
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@remote.example",
        "--to",
        "bob@dest.example",
        "--timeout",
        "5",
    ]);
    assert_ne!(code, 0, "{out}");
    assert!(!out.contains("queued as"), "{out}");
    let log = inst.wait_log(10, "parameter \"header_checks\"");
    assert!(
        log.contains(&format!("{}, line 2", etc.join("header_checks").display())),
        "{log}"
    );
    assert!(inst.queued_ids().is_empty());
    inst.stop();
}

const MIME_CHECKS: &str = "/^Content-Disposition:.*evil\\.exe/ REJECT 5.7.1 no executables\n";
const NESTED_CHECKS: &str = "/^Subject:.*nested spam/ REJECT 5.7.1 no nested spam\n";

/// Sends `message` (headers, empty line, body; LF lines) as it is.
fn send_data(port: u16, dir: &Path, message: &str) -> (i32, String) {
    let path = dir.join("message");
    std::fs::write(&path, message).unwrap();
    swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@remote.example",
        "--to",
        "bob@dest.example",
        "--data",
        path.to_str().unwrap(),
    ])
}

/// A message with a part whose headers say `part` and an attached
/// message whose Subject is `inner`.
fn multipart(part: &str, inner: &str) -> String {
    format!(
        "From: alice@remote.example\nTo: bob@dest.example\nSubject: mime\nMIME-Version: 1.0\n\
         Content-Type: multipart/mixed; boundary=\"outer\"\n\npreamble\n--outer\n\
         Content-Type: text/plain\n\nSubject: nested spam (body text, not a header)\n--outer\n\
         Content-Type: application/octet-stream\n{part}\n\nAAAA\n--outer\n\
         Content-Type: message/rfc822\n\nFrom: carol@example.org\nSubject: {inner}\n\n\
         inner body\n--outer--\n"
    )
}

#[test]
fn mime_and_nested_header_checks_and_header_size_limit() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (mut inst, port) = instance(
        sink.port,
        &[
            ("header_checks", HEADER_CHECKS),
            ("mime_checks", MIME_CHECKS),
            ("nested_checks", NESTED_CHECKS),
        ],
        "header_checks = regexp:$ETC/header_checks\nmime_header_checks = regexp:$ETC/mime_checks\n\
         nested_header_checks = regexp:$ETC/nested_checks\nheader_size_limit = 1000\n",
    );
    inst.start();
    inst.wait_port(port);
    let dir = tempfile::tempdir().unwrap();

    // A part's header matches mime_header_checks: refused, logged as
    // Postfix logs a header REJECT.
    let part = "Content-Disposition: attachment; filename=\"evil.exe\"";
    let (code, out) = send_data(port, dir.path(), &multipart(part, "hello"));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("550 5.7.1 no executables"), "{out}");
    inst.wait_log(
        10,
        "reject: header Content-Disposition: attachment; filename=\"evil.exe\" from ",
    );

    // The attached message's Subject matches nested_header_checks.
    let part = "Content-Disposition: attachment; filename=\"fine.bin\"";
    let (code, out) = send_data(port, dir.path(), &multipart(part, "nested spam inside"));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("550 5.7.1 no nested spam"), "{out}");
    inst.wait_log(10, "reject: header Subject: nested spam inside from ");
    assert!(inst.queued_ids().is_empty(), "{:?}", inst.queue_json());

    // header_checks sees neither: a part header or an attached message's
    // Subject that only it would refuse passes, as in Postfix; a body
    // line like a header is not one.
    let part = "X-Note: something forbidden";
    let (code, out) = send_data(
        port,
        dir.path(),
        &multipart(part, "Subject: something forbidden"),
    );
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    let dump = sink_dump(&sink, &inst, &id, "bob@dest.example");
    assert!(
        dump.text.contains("X-Note: something forbidden\n"),
        "{}",
        dump.text
    );

    // A header past header_size_limit is cut: its lines are kept while it
    // is shorter than the limit, the rest dropped; the message goes on.
    let lines: Vec<String> = (0..30)
        .map(|i| format!(" line{i:02} {}", "x".repeat(60)))
        .collect();
    let message = format!(
        "From: alice@remote.example\nSubject: long\nX-Long: start\n{}\nX-After: kept\n\nbody\n",
        lines.join("\n")
    );
    let (code, out) = send_data(port, dir.path(), &message);
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    let dump = sink_dump(&sink, &inst, &id, "bob@dest.example");
    let text = &dump.text;
    // Counted unfolded as Postfix counts: "X-Long: start" is 13 bytes,
    // each line 69 more (68 and the LF): the 15th line starts at 979.
    assert!(text.contains(" line14 "), "{text}");
    assert!(!text.contains(" line15 "), "{text}");
    assert!(
        text.contains(&format!("line14 {}\nX-After: kept\n", "x".repeat(60))),
        "{text}"
    );
    assert!(text.contains("\nbody\n"), "{text}");
    inst.stop();
}
