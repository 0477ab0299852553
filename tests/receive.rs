//! The receive path end to end with real clients: swaks, Python's smtplib
//! and Postfix's smtp-source talking to smtpd → cleanup → qmgr, and
//! sendmail(1) submitting locally.

use sluice_suite::{
    free_port, make_cert, queued_id, receive_master_cf, swaks, wait_for, Instance, RECEIVE_MAIN_CF,
};

fn instance(main_extra: &str, smtpd_args: &str) -> (Instance, u16) {
    let port = free_port();
    let mut inst = Instance::new(
        &receive_master_cf(port, smtpd_args),
        &format!("{RECEIVE_MAIN_CF}{main_extra}"),
    );
    inst.start();
    inst.wait_port(port);
    (inst, port)
}

fn server(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

#[test]
fn swaks_message_is_queued_and_listed() {
    let (inst, port) = instance("", "");
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--from",
        "alice@example.com",
        "--to",
        "bob@mx.test.example",
        "--header",
        "Subject: hello",
        "--body",
        "Hi Bob",
    ]);
    assert_eq!(code, 0, "{out}");
    let qid = queued_id(&out);
    let q = inst.queue_json();
    assert_eq!(q.len(), 1, "{q:?}");
    assert!(
        q[0].contains(&format!("\"queue_id\":\"{qid}\""))
            && q[0].contains("\"sender\":\"alice@example.com\"")
            && q[0].contains("bob@mx.test.example"),
        "{}",
        q[0]
    );
    // Postfix's log lines, which pflogsumm reads.
    inst.wait_log(5, &format!("{qid}: client=unknown[127.0.0.1]"));
    inst.wait_log(5, &format!("{qid}: message-id="));
    inst.wait_log(5, &format!("{qid}: from=<alice@example.com>, size="));
    inst.wait_log(
        5,
        "disconnect from unknown[127.0.0.1] ehlo=1 mail=1 rcpt=1 data=1 quit=1 commands=5",
    );
    // mailq format.
    let out = inst.sluice(&["queue", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("-Queue ID-")
            && text.contains(&qid)
            && text.contains("-- 1 Kbytes in 1 Request."),
        "{text}"
    );
}

#[test]
fn no_open_relay_and_clear_rejections() {
    // 127.0.0.1 is outside mynetworks here; 127.0.0.2 is inside.
    let (inst, port) = instance("mynetworks = 127.0.0.2/32\n", "");
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--from",
        "a@example.com",
        "--to",
        "victim@elsewhere.example",
    ]);
    assert_ne!(code, 0);
    assert!(
        out.contains("554 5.7.1 <victim@elsewhere.example>: Relay access denied"),
        "{out}"
    );
    for trick in [
        "victim%elsewhere.example@mx.test.example",
        "\"victim@elsewhere.example\"@mx.test.example",
        "@mx.test.example:victim@elsewhere.example",
    ] {
        let (code, out) = swaks(&[
            "--server",
            &server(port),
            "--from",
            "a@example.com",
            "--to",
            trick,
        ]);
        assert_ne!(code, 0, "{trick}: {out}");
        assert!(out.contains("Relay access denied"), "{trick}: {out}");
    }
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--local-interface",
        "127.0.0.2",
        "--from",
        "a@example.com",
        "--to",
        "friend@elsewhere.example",
    ]);
    assert_eq!(code, 0, "mynetworks may relay: {out}");
    inst.wait_log(5, "NOQUEUE: reject: RCPT from unknown[127.0.0.1]: 554 5.7.1 <victim@elsewhere.example>: Relay access denied; from=<a@example.com> to=<victim@elsewhere.example> proto=ESMTP");
    assert_eq!(inst.queue_json().len(), 1);
}

#[test]
fn smuggling_sequences_never_end_a_message() {
    let (inst, port) = instance("", "");
    for variant in ["lf", "cr", "crlf-lf", "lf-crlf"] {
        let out = inst.python("smuggle.py", &["127.0.0.1", &port.to_string(), variant]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("queued as"), "{variant}: {text}");
        assert!(
            text.contains("550 5.5.2"),
            "{variant}: bare newlines are refused with a clear code: {text}"
        );
    }
    assert!(inst.queue_json().is_empty());
    inst.wait_log(5, "reject: END-OF-MESSAGE");
}

#[test]
fn normalize_mode_accepts_one_message_not_two() {
    let (inst, port) = instance("smtpd_forbid_bare_newline = normalize\n", "");
    let out = inst.python("smuggle.py", &["127.0.0.1", &port.to_string(), "lf"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("queued as").count(), 1, "{text}");
    assert_eq!(inst.queue_json().len(), 1);
}

#[test]
fn smtplib_pipelined_sessions_and_smtp_source() {
    let (inst, port) = instance("", "");
    let results = inst.root().join("sent.txt");
    let out = inst.python(
        "send_many.py",
        &[
            "127.0.0.1",
            &port.to_string(),
            "60",
            "4",
            results.to_str().unwrap(),
        ],
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("ok=60 temp=0 error=0"), "{summary}");
    // smtp-source: 5 sessions, 100 messages, 3 recipients each.
    let st = std::process::Command::new("smtp-source")
        .args([
            "-s",
            "5",
            "-m",
            "100",
            "-r",
            "3",
            "-f",
            "src@test.example",
            "-t",
            "sink@mx.test.example",
            "-l",
            "2048",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .status()
        .expect("smtp-source is installed by scripts/test");
    assert!(st.success());
    let q = wait_for(10, "160 messages queued", || {
        let q = inst.queue_json();
        (q.len() == 160).then_some(q)
    });
    let from_source = q.iter().filter(|l| l.contains("src@test.example")).count();
    assert_eq!(from_source, 100);
}

#[test]
fn starttls_discards_pipelined_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = make_cert(dir.path());
    use std::os::unix::fs::PermissionsExt;
    for p in [dir.path().to_path_buf(), cert.clone(), key.clone()] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let extra = format!(
        "smtpd_tls_security_level = may\nsmtpd_tls_cert_file = {}\nsmtpd_tls_key_file = {}\n",
        cert.display(),
        key.display()
    );
    let (inst, port) = instance(&extra, "");
    let out = inst.python("starttls_inject.py", &["127.0.0.1", &port.to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert!(
        lines.next().unwrap_or("").starts_with("250-"),
        "the first reply in TLS answers our EHLO: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        lines.next().unwrap_or("").starts_with("250 2.1.0"),
        "MAIL in TLS works, so the injected one was dropped: {text}"
    );
    // And a normal TLS submission.
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--tls",
        "--from",
        "a@example.com",
        "--to",
        "u@mx.test.example",
    ]);
    assert_eq!(code, 0, "{out}");
    inst.wait_log(5, "TLS connection established from unknown[127.0.0.1]");
    let q = inst.queue_json();
    assert_eq!(q.len(), 1);
}

#[test]
fn sendmail_submits_and_fails_cleanly_when_down() {
    let (mut inst, _port) = instance("", "");
    let sendmail = sluice_suite::bin_dir().join("sendmail");
    let (etc, run_as) = (inst.etc(), inst.run_as);
    let run = |args: &[&str], input: &str| {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new(&sendmail);
        cmd.args(args).env("SLUICE_CONFIG_DIR", &etc);
        if let Some((uid, gid)) = run_as {
            cmd.uid(uid).gid(gid);
        }
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // sendmail may refuse before reading its input (bad arguments).
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        child.wait_with_output().unwrap()
    };
    let out = run(
        &["-t", "-i"],
        "To: Bob <bob@example.org>\nBcc: hidden@example.org\nSubject: t\n\n.leading dot\nbody\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let q = inst.queue_json();
    assert_eq!(q.len(), 1);
    assert!(
        q[0].contains("bob@example.org") && q[0].contains("hidden@example.org"),
        "{}",
        q[0]
    );
    inst.wait_log(5, "uid=");
    let out = run(
        &["root"],
        "Subject: no -i\n\nline\n.\nnot part of the message\n",
    );
    assert!(out.status.success());
    assert_eq!(inst.queue_json().len(), 2);
    let out = run(&["bad address@"], "x\n");
    assert_eq!(out.status.code(), Some(67));
    inst.stop();
    let out = run(&["root"], "Subject: while down\n\nbody\n");
    assert_eq!(
        out.status.code(),
        Some(75),
        "EX_TEMPFAIL when the mail system is down"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not accepting mail"));
}

#[test]
fn data_refused_when_cleanup_is_missing() {
    // No cleanup service at all: DATA gets a temporary error, never a 250.
    let port = free_port();
    let cf = format!("127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\n");
    let mut inst = Instance::new(&cf, RECEIVE_MAIN_CF);
    inst.start();
    inst.wait_port(port);
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--from",
        "a@example.com",
        "--to",
        "u@mx.test.example",
    ]);
    assert_ne!(code, 0);
    assert!(out.contains("451 4.3.0"), "{out}");
}

#[test]
fn connection_count_limit_uses_anvil() {
    let (inst, port) = instance(
        "smtpd_client_connection_count_limit = 2\nsmtpd_client_event_limit_exceptions =\n",
        "",
    );
    let hold: Vec<_> = (0..2)
        .map(|_| {
            let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut b = [0u8; 64];
            use std::io::Read;
            let _ = (&s).read(&mut b);
            s
        })
        .collect();
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--from",
        "a@example.com",
        "--to",
        "u@mx.test.example",
    ]);
    assert_ne!(code, 0);
    assert!(
        out.contains("421 4.7.0 Error: too many connections from 127.0.0.1"),
        "{out}"
    );
    inst.wait_log(
        5,
        "Connection concurrency limit exceeded: 3 from unknown[127.0.0.1]",
    );
    drop(hold);
}

#[test]
fn access_hold_and_discard() {
    let (inst, port) = instance(
        "smtpd_recipient_restrictions = check_recipient_access static:HOLD\n",
        "",
    );
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--from",
        "a@example.com",
        "--to",
        "u@mx.test.example",
    ]);
    assert_eq!(code, 0, "{out}");
    let q = inst.queue_json();
    assert_eq!(q.len(), 1);
    assert!(q[0].contains("\"queue_name\":\"hold\""), "{}", q[0]);
    let listing = String::from_utf8_lossy(&inst.sluice(&["queue", "list"]).stdout).into_owned();
    assert!(
        listing
            .lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().next().unwrap().ends_with('!')),
        "{listing}"
    );
    drop(inst);
    let (inst, port) = instance(
        "smtpd_recipient_restrictions = check_recipient_access static:DISCARD\n",
        "",
    );
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--from",
        "a@example.com",
        "--to",
        "u@mx.test.example",
    ]);
    assert_eq!(code, 0, "DISCARD claims success: {out}");
    assert!(out.contains("250 2.0.0 Ok: queued as"), "{out}");
    inst.wait_log(5, "discard: END-OF-MESSAGE");
    assert!(
        inst.queue_json().is_empty(),
        "a discarded message is not queued"
    );
}

#[test]
fn access_tables_from_files_decide() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("recipient_access");
    std::fs::write(&table, "# who may get mail\nblocked@mx.test.example  REJECT no mail for you\nmx.test.example  OK\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (inst, port) = instance(
        &format!(
            "smtpd_recipient_restrictions = check_recipient_access hash:{}\n",
            table.display()
        ),
        "",
    );
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--from",
        "a@example.com",
        "--to",
        "blocked@mx.test.example",
    ]);
    assert_ne!(code, 0);
    assert!(
        out.contains(
            "554 5.7.1 <blocked@mx.test.example>: Recipient address rejected: no mail for you"
        ),
        "{out}"
    );
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--from",
        "a@example.com",
        "--to",
        "friend@mx.test.example",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(inst.queue_json().len(), 1);
}

#[test]
fn unlisted_local_recipients_are_refused_via_the_router() {
    let dir = tempfile::tempdir().unwrap();
    let aliases = dir.path().join("aliases");
    std::fs::write(&aliases, "postmaster: root\nsales: root\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = free_port();
    let cf = receive_master_cf(port, "") + "router unix - - n - 1 router\n";
    let main = format!(
        "myhostname = mx.test.example\nmydomain = test.example\nalias_maps = hash:{a}\nlocal_recipient_maps = $alias_maps\n",
        a = aliases.display()
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--from",
        "a@example.com",
        "--to",
        "ghost@mx.test.example",
    ]);
    assert_ne!(code, 0);
    assert!(out.contains("550 5.1.1 <ghost@mx.test.example>: Recipient address rejected: User unknown in local recipient table"), "{out}");
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--from",
        "a@example.com",
        "--to",
        "sales@mx.test.example",
    ]);
    assert_eq!(code, 0, "{out}");
    // Remote recipients from mynetworks are not checked against local tables.
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--from",
        "a@example.com",
        "--to",
        "someone@elsewhere.example",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(inst.queue_json().len(), 2);
}

#[test]
fn implicit_tls_service_for_submissions() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = make_cert(dir.path());
    use std::os::unix::fs::PermissionsExt;
    for p in [dir.path().to_path_buf(), cert.clone(), key.clone()] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let extra = format!(
        "smtpd_tls_cert_file = {}\nsmtpd_tls_key_file = {}\n",
        cert.display(),
        key.display()
    );
    let (inst, port) = instance(&extra, "-o smtpd_tls_wrappermode=yes");
    // swaks --tlsc: TLS from the first byte, as on port 465.
    let (code, out) = swaks(&[
        "--server",
        &server(port),
        "--tlsc",
        "--from",
        "a@example.com",
        "--to",
        "u@mx.test.example",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("queued as"), "{out}");
    inst.wait_log(5, "TLS connection established from unknown[127.0.0.1]");
    // A plaintext client gets nothing it can read as SMTP.
    let (code, _) = swaks(&[
        "--server",
        &server(port),
        "--timeout",
        "3",
        "--from",
        "a@example.com",
        "--to",
        "u@mx.test.example",
    ]);
    assert_ne!(code, 0);
}

#[test]
fn sendmail_bs_speaks_smtp_on_stdin() {
    let (inst, _port) = instance("", "");
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(sluice_suite::bin_dir().join("sendmail"));
    cmd.arg("-bs").env("SLUICE_CONFIG_DIR", inst.etc());
    if let Some((uid, gid)) = inst.run_as {
        cmd.uid(uid).gid(gid);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        // DSN parameters are kept as smtpd keeps them.
        .write_all(b"EHLO local\r\nMAIL FROM:<me@mx.test.example> RET=HDRS ENVID=bs+2D1\r\nRCPT TO:<you@mx.test.example> NOTIFY=NEVER\r\nDATA\r\nSubject: bs\r\n\r\nhi\r\n.\r\nQUIT\r\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("220 "), "{text}");
    assert!(text.contains("250 2.0.0 Ok: queued as"), "{text}");
    assert!(
        text.trim_end().ends_with("221 2.0.0 Bye") || text.contains("221"),
        "{text}"
    );
    assert_eq!(inst.queue_json().len(), 1);
    let id = text
        .split("queued as ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .unwrap();
    let shown = inst.sluice(&["queue", "show", id]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("envid: bs-1\n"), "{shown}");
}

#[test]
fn mail_from_is_refused_when_the_queue_file_system_is_short_of_space() {
    use sluice_suite::smtp_client::SmtpClient;
    let free = sys::fs::free_space(std::env::temp_dir().as_path()).expect("statvfs");
    let more = free.saturating_mul(4);
    // queue_minfree above the free space; then message_size_limit over
    // two thirds of it (Postfix's 1.5 times rule, queue_minfree = 0); then
    // a SIZE= that does not fit.
    for (extra, size, code) in [
        (
            format!("queue_minfree = {more}\n"),
            None,
            "452 4.3.1 Insufficient system storage",
        ),
        (
            format!("message_size_limit = {more}\n"),
            None,
            "452 4.3.1 Insufficient system storage",
        ),
        (
            "message_size_limit = 0\n".to_string(),
            Some(more),
            "452 4.3.1 Insufficient system storage",
        ),
        ("message_size_limit = 0\n".to_string(), Some(1000), "250"),
    ] {
        let (inst, port) = instance(&extra, "");
        let (mut c, _) = SmtpClient::connect(port);
        c.expect("EHLO client.example", "250");
        let cmd = match size {
            Some(n) => format!("MAIL FROM:<a@example.com> SIZE={n}"),
            None => "MAIL FROM:<a@example.com>".to_string(),
        };
        let r = c.expect(&cmd, code);
        if code.starts_with("452") {
            inst.wait_log(5, "NOQUEUE: reject: MAIL from unknown[127.0.0.1]: 452 4.3.1 Insufficient system storage");
            assert!(r.contains("Insufficient system storage"), "{r}");
        }
        c.expect("QUIT", "221");
    }
}

/// A local client that writes to cleanup's submission socket itself
/// (not through sendmail, whose address syntax would refuse it) cannot
/// bring a CR LF in an envelope address: it would forge log lines and add
/// header fields to the message's notices. Refused with 501 5.1.3.
#[test]
fn cleanup_refuses_an_envelope_address_with_a_control_character() {
    use ipc::cleanup::{Cleanup, Origin, Request, Response};
    let (inst, _port) = instance("", "");
    let sock = inst.root().join("spool/public/submit");
    let begin = |sender: &str, rcpt: &str| {
        let mut c = ipc::Client::<Cleanup>::connect(&sock, std::time::Duration::from_secs(5))
            .expect("connect cleanup");
        let envelope = mail::Envelope {
            sender: sender.into(),
            recipients: vec![mail::Recipient::new(rcpt.to_string())],
            ..mail::Envelope::default()
        };
        c.call(&Request::Begin {
            envelope: Box::new(envelope),
            origin: Origin::Local {
                user: "root".into(),
                full_name: None,
            },
            hold: false,
            quiet: false,
        })
        .expect("cleanup's answer")
    };
    for (sender, rcpt) in [
        (
            "alice@example.com\r\nBcc: x@evil.example",
            "bob@example.org",
        ),
        ("alice@example.com", "bob@example.org\nX-Injected: yes"),
    ] {
        match begin(sender, rcpt) {
            Response::Failed { reply } => {
                assert_eq!(
                    (reply.code, reply.status.to_string()),
                    (501, "5.1.3".into())
                )
            }
            other => panic!("{sender:?} {rcpt:?}: {other:?}"),
        }
    }
    assert!(matches!(
        begin("alice@example.com", "bob@example.org"),
        Response::Started { .. }
    ));
    inst.wait_log(5, "an envelope address with a control character: refused");
}

/// A message that has made `hopcount_limit` hops (Received: headers, the
/// one Sluice adds included) is refused at the end of DATA as a mail loop,
/// as Postfix's cleanup and smtpd do; one hop fewer is accepted.
#[test]
fn a_message_with_too_many_received_headers_is_refused_as_a_loop() {
    let (inst, port) = instance("hopcount_limit = 10\n", "");
    let dir = tempfile::tempdir().unwrap();
    let send = |hops: usize| {
        let mut data = String::new();
        for n in 0..hops {
            data.push_str(&format!(
                "Received: from hop{n}.example (hop{n}.example [192.0.2.{n}])\r\n\tby relay{n}.example; Thu, 26 Nov 2026 10:00:00 +0000\r\n"
            ));
        }
        data.push_str("From: a@example.com\r\nSubject: loop?\r\n\r\nbody\r\n.\r\n");
        let path = dir.path().join(format!("msg{hops}"));
        std::fs::write(&path, data).unwrap();
        swaks(&[
            "--server",
            &server(port),
            "--from",
            "a@example.com",
            "--to",
            "bob@mx.test.example",
            "--data",
            path.to_str().unwrap(),
        ])
    };
    let (code, out) = send(9);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("<** 554 5.4.0 Error: too many hops"), "{out}");
    assert!(inst.queue_json().is_empty(), "nothing queued");
    inst.wait_log(5, "message rejected: hopcount exceeded");
    let (code, out) = send(8);
    assert_eq!(code, 0, "{out}");
    assert_eq!(inst.queue_json().len(), 1);
}

/// `sluice config ...; sluice reload`, then waits until the smtpd that
/// served before has handed new clients on (its "leaving when idle").
fn reload_smtpd(inst: &Instance, edits: &[&str], seen: usize) {
    let mut args = vec!["config"];
    args.extend(edits);
    assert!(inst.sluice(&args).status.success());
    assert!(inst.sluice(&["reload"]).status.success());
    wait_for(10, "smtpd to retire", || {
        (inst
            .log()
            .matches("reload: TLS settings or certificate files changed")
            .count()
            > seen)
            .then_some(())
    });
}

#[test]
fn a_reload_turns_tls_on_and_off_for_new_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = make_cert(dir.path());
    use std::os::unix::fs::PermissionsExt;
    for p in [dir.path().to_path_buf(), cert.clone(), key.clone()] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (inst, port) = instance("", "");
    let srv = server(port);
    let send = |tls: bool, to: &str| {
        let mut args = vec!["--server", &srv, "--from", "a@example.com", "--to", to];
        if tls {
            args.push("--tls");
        }
        swaks(&args)
    };
    let (code, out) = send(false, "before@mx.test.example");
    assert_eq!(code, 0, "{out}");

    let (cert_p, key_p) = (
        format!("smtpd_tls_cert_file={}", cert.display()),
        format!("smtpd_tls_key_file={}", key.display()),
    );
    reload_smtpd(
        &inst,
        &[&cert_p, &key_p, "smtpd_tls_security_level=encrypt"],
        0,
    );
    // Before the fix: no STARTTLS in EHLO and this message was queued.
    let (code, out) = send(false, "plain@mx.test.example");
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("530 5.7.0 Must issue a STARTTLS command first"),
        "{out}"
    );
    let (code, out) = send(true, "encrypted@mx.test.example");
    assert_eq!(code, 0, "{out}");
    inst.wait_log(5, "TLS connection established from unknown[127.0.0.1]");

    // And back: plaintext is taken again, STARTTLS no longer offered.
    reload_smtpd(&inst, &["smtpd_tls_security_level=none"], 1);
    let (code, out) = send(false, "plain-again@mx.test.example");
    assert_eq!(code, 0, "{out}");
    let (code, out) = send(true, "tls-again@mx.test.example");
    assert_ne!(code, 0, "{out}");
    assert!(!out.contains("250-STARTTLS"), "{out}");
    let q = inst.queue_json();
    for (rcpt, queued) in [
        ("before@", true),
        ("plain@", false),
        ("encrypted@", true),
        ("plain-again@", true),
        ("tls-again@", false),
    ] {
        assert_eq!(q.iter().any(|l| l.contains(rcpt)), queued, "{rcpt}: {q:?}");
    }
}
