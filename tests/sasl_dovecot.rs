//! SASL AUTH through a real Dovecot (Debian's dovecot-core, started by the
//! test on a private socket with a passwd-file of test users), with swaks
//! and Python's smtplib as clients: the shipped master.cf's `submission`
//! service uncommented (TLS and AUTH required, relay only when
//! authenticated), AUTH refused before STARTTLS on port 25, right and wrong
//! passwords, password guessing cut off by smtpd_hard_error_limit and
//! limited across connections by anvil (smtpd_client_auth_rate_limit), a
//! Dovecot that is down (454 4.7.0, then AUTH again once it is back) or
//! stopped (454 4.7.0 after smtpd_sasl_timeout, other sessions served), and
//! sessions that go on while Dovecot delays another's failure; the login
//! in Received: with smtpd_sasl_authenticated_header.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use sluice_suite::dovecot::Dovecot;
use sluice_suite::{
    free_port, make_cert, queued_id, receive_master_cf, swaks, Instance, RECEIVE_MAIN_CF,
};

/// `\0alice\0secret`, and a wrong password for alice.
const ALICE_PLAIN: &str = "AGFsaWNlAHNlY3JldA==";
const ALICE_WRONG: &str = "AGFsaWNlAGd1ZXNz";

/// The shipped master.cf's commented `submission` entry, uncommented, on
/// 127.0.0.1:`port` instead of port 587.
fn shipped_submission(port: u16) -> String {
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/master.cf"))
            .unwrap();
    let mut out = String::new();
    let mut inside = false;
    for line in shipped.lines() {
        if line.starts_with("#submission ") {
            inside = true;
            out += &line[1..].replacen("submission", &format!("127.0.0.1:{port}"), 1);
            out.push('\n');
        } else if inside && line.starts_with("#  -o ") {
            out += &line[1..];
            out.push('\n');
        } else {
            inside = false;
        }
    }
    assert!(
        out.contains("smtpd_sasl_auth_enable=yes"),
        "etc/master.cf has no submission entry with AUTH: {out}"
    );
    out
}

struct Setup {
    inst: Instance,
    smtp: u16,
    submission: u16,
    _pki: tempfile::TempDir,
}

/// An instance with smtpd on two ports: a port-25 style one (STARTTLS
/// offered, AUTH on but only under TLS) and the shipped submission entry.
fn setup(dovecot: &Dovecot, extra: &str) -> Setup {
    let pki = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(pki.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (cert, key) = make_cert(pki.path());
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let smtp = free_port();
    let submission = free_port();
    let master = format!(
        "{}{}",
        receive_master_cf(smtp, ""),
        shipped_submission(submission)
    );
    let main = format!(
        "{RECEIVE_MAIN_CF}smtpd_tls_security_level = may\n\
         smtpd_tls_cert_file = {}\nsmtpd_tls_key_file = {}\n\
         smtpd_sasl_auth_enable = yes\nsmtpd_sasl_type = dovecot\n\
         smtpd_sasl_path = {}\n{extra}",
        cert.display(),
        key.display(),
        dovecot.socket.display()
    );
    let mut inst = Instance::new(&master, &main);
    let check = inst.sluice(&["check"]);
    assert!(
        check.status.success(),
        "sluice check refuses the shipped submission service: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    inst.start();
    inst.wait_port(smtp);
    inst.wait_port(submission);
    Setup {
        inst,
        smtp,
        submission,
        _pki: pki,
    }
}

/// Runs tests/scripts/sasl_client.py against `port`; its output lines.
fn client(inst: &Instance, port: u16, steps: &[&str]) -> Vec<String> {
    let mut args = vec![port.to_string()];
    args.extend(steps.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = inst.python("sasl_client.py", &args);
    assert!(
        out.status.success(),
        "sasl_client.py {steps:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn submission_through_dovecot_with_swaks_and_smtplib() {
    let dovecot = Dovecot::start(&[("alice", "secret"), ("bob", "hunter2")], 0);
    let s = setup(&dovecot, "smtpd_hard_error_limit = 3\n");
    let sub = s.submission.to_string();
    let server = format!("127.0.0.1:{sub}");

    // swaks, PLAIN, right password: relayed to a remote domain.
    let (code, t) = swaks(&[
        "--server",
        &server,
        "--tls",
        "--auth",
        "PLAIN",
        "--auth-user",
        "alice",
        "--auth-password",
        "secret",
        "--from",
        "alice@test.example",
        "--to",
        "far@remote.example",
    ]);
    assert_eq!(code, 0, "{t}");
    assert!(t.contains("235 2.7.0 Authentication successful"), "{t}");
    let line = s.inst.wait_log(10, "sasl_username=alice");
    assert!(
        line.contains("client=unknown[127.0.0.1], sasl_method=PLAIN, sasl_username=alice"),
        "{line}"
    );

    // swaks, LOGIN, wrong password: 535 5.7.8 and nothing queued.
    let (code, t) = swaks(&[
        "--server",
        &server,
        "--tls",
        "--auth",
        "LOGIN",
        "--auth-user",
        "bob",
        "--auth-password",
        "wrong",
        "--to",
        "far@remote.example",
    ]);
    assert_ne!(code, 0, "{t}");
    assert!(t.contains("535 5.7.8 Error: authentication failed"), "{t}");
    s.inst.wait_log(10, "SASL LOGIN authentication failed");

    // No relay without AUTH, even from loopback (mynetworks).
    let (code, t) = swaks(&["--server", &server, "--tls", "--to", "far@remote.example"]);
    assert_ne!(code, 0, "{t}");
    assert!(
        t.contains("554 5.7.1 <far@remote.example>: Access denied"),
        "{t}"
    );

    // No mail at all before STARTTLS on submission, and no AUTH offered.
    let out = client(
        &s.inst,
        s.submission,
        &[
            "ehlo",
            "auth",
            &format!("PLAIN {ALICE_PLAIN}"),
            "send",
            "alice@test.example",
            "far@remote.example",
        ],
    );
    assert_eq!(out[0], "auth: -", "{out:?}");
    assert!(out[1].starts_with("auth: 530 5.7.0"), "{out:?}");
    assert!(out[2].starts_with("send: 530 5.7.0"), "{out:?}");

    // smtplib's login() after STARTTLS, right and wrong passwords.
    let out = client(
        &s.inst,
        s.submission,
        &[
            "starttls",
            "ehlo",
            "login",
            "bob",
            "hunter2",
            "send",
            "bob@test.example",
            "far@remote.example",
            "quit",
        ],
    );
    assert_eq!(
        out,
        [
            "auth: PLAIN LOGIN",
            "login: 235 2.7.0 Authentication successful",
            "send: ok"
        ]
    );
    let out = client(
        &s.inst,
        s.submission,
        &[
            "starttls",
            "login",
            "bob",
            "secret",
            "send",
            "bob@test.example",
            "far@remote.example",
        ],
    );
    assert!(out[0].starts_with("login: 535 5.7.8"), "{out:?}");
    assert!(out[1].starts_with("send: 554 5.7.1"), "{out:?}");

    // Port 25: AUTH neither offered nor accepted before STARTTLS
    // (smtpd_tls_auth_only = yes by default), offered after it.
    let out = client(
        &s.inst,
        s.smtp,
        &[
            "ehlo",
            "auth",
            &format!("PLAIN {ALICE_PLAIN}"),
            "starttls",
            "ehlo",
            "auth",
            &format!("PLAIN {ALICE_PLAIN}"),
        ],
    );
    assert_eq!(
        out,
        [
            "auth: -",
            "auth: 530 5.7.0 Must issue a STARTTLS command first",
            "auth: PLAIN LOGIN",
            "auth: 235 2.7.0 Authentication successful"
        ]
    );

    // Guessing on one connection ends at smtpd_hard_error_limit (3).
    let wrong = format!("PLAIN {ALICE_WRONG}");
    let out = client(
        &s.inst,
        s.smtp,
        &[
            "starttls", "auth", &wrong, "auth", &wrong, "auth", &wrong, "auth", &wrong,
        ],
    );
    assert_eq!(
        out.iter()
            .filter(|l| l.starts_with("auth: 535 5.7.8"))
            .count(),
        3,
        "{out:?}"
    );
    assert!(
        out[3].contains("421 4.7.0") || out[3].starts_with("closed:"),
        "{out:?}"
    );
    s.inst.wait_log(10, "TooManyErrors from unknown[127.0.0.1]");

    // The authenticated messages: queued with the user's name, and
    // ESMTPSA in their Received: header.
    let ids = s.inst.queued_ids();
    assert_eq!(ids.len(), 2, "{ids:?}");
    for id in ids {
        let out = s.inst.sluice(&["queue", "show", &id]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("with ESMTPSA"), "{text}");
    }
}

#[test]
fn failed_auth_is_rate_limited_per_client_through_anvil() {
    let dovecot = Dovecot::start(&[("alice", "secret")], 0);
    let s = setup(
        &dovecot,
        "smtpd_client_auth_rate_limit = 2\nsmtpd_client_event_limit_exceptions =\n",
    );
    let wrong = format!("PLAIN {ALICE_WRONG}");
    let out = client(
        &s.inst,
        s.smtp,
        &["starttls", "auth", &wrong, "auth", &wrong, "quit"],
    );
    assert_eq!(
        out.iter()
            .filter(|l| l.starts_with("auth: 535 5.7.8"))
            .count(),
        2,
        "{out:?}"
    );
    // A new connection: even the right password is not tried.
    let out = client(
        &s.inst,
        s.smtp,
        &["starttls", "auth", &format!("PLAIN {ALICE_PLAIN}")],
    );
    assert_eq!(
        out,
        ["auth: 450 4.7.1 Error: too many AUTH commands from 127.0.0.1"]
    );
    let line = s.inst.wait_log(10, "AUTH command rate limit exceeded");
    assert!(
        line.contains(": 3 from unknown[127.0.0.1] for service"),
        "{line}"
    );
    // Another service counts on its own (anvil keys by service).
    let out = client(
        &s.inst,
        s.submission,
        &["starttls", "auth", &format!("PLAIN {ALICE_PLAIN}")],
    );
    assert_eq!(out, ["auth: 235 2.7.0 Authentication successful"]);
}

#[test]
fn dovecot_down_is_a_temporary_failure_and_its_return_is_noticed() {
    let mut dovecot = Dovecot::start(&[("alice", "secret")], 0);
    let s = setup(&dovecot, "");
    let plain = format!("PLAIN {ALICE_PLAIN}");
    let out = client(&s.inst, s.smtp, &["starttls", "auth", &plain]);
    assert_eq!(out, ["auth: 235 2.7.0 Authentication successful"]);
    dovecot.stop();
    let out = client(
        &s.inst,
        s.smtp,
        &["starttls", "auth", &plain, "auth", &plain],
    );
    assert_eq!(
        out,
        [
            "auth: 454 4.7.0 Temporary authentication failure",
            "auth: 454 4.7.0 Temporary authentication failure"
        ]
    );
    s.inst.wait_log(10, "SASL PLAIN authentication aborted");
    dovecot.run();
    let out = client(&s.inst, s.smtp, &["starttls", "auth", &plain]);
    assert_eq!(out, ["auth: 235 2.7.0 Authentication successful"]);
}

/// Reads one SMTP reply (all its lines).
fn reply(r: &mut BufReader<TcpStream>) -> String {
    let mut all = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).expect("reply");
        assert!(!line.is_empty(), "connection closed; so far {all:?}");
        all += &line;
        if line.as_bytes().get(3) != Some(&b'-') {
            return all;
        }
    }
}

fn session(port: u16) -> (TcpStream, BufReader<TcpStream>) {
    let w = TcpStream::connect(("127.0.0.1", port)).unwrap();
    w.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut r = BufReader::new(w.try_clone().unwrap());
    assert!(reply(&mut r).starts_with("220 "));
    (w, r)
}

#[test]
fn a_session_waiting_for_dovecot_holds_up_no_other() {
    // Dovecot answers a wrong password only after 5 seconds.
    let dovecot = Dovecot::start(&[("alice", "secret")], 5);
    // AUTH in plaintext on this port: the test speaks raw SMTP.
    let s = setup(&dovecot, "smtpd_tls_auth_only = no\n");
    let (mut wa, mut ra) = session(s.smtp);
    let (mut wb, mut rb) = session(s.smtp);
    wa.write_all(b"EHLO a\r\n").unwrap();
    assert!(reply(&mut ra).contains("AUTH PLAIN LOGIN"));
    wb.write_all(b"EHLO b\r\n").unwrap();
    reply(&mut rb);
    wa.write_all(format!("AUTH PLAIN {ALICE_WRONG}\r\n").as_bytes())
        .unwrap();
    // B authenticates and sends its MAIL while A waits for Dovecot.
    wb.write_all(format!("AUTH PLAIN {ALICE_PLAIN}\r\n").as_bytes())
        .unwrap();
    assert_eq!(reply(&mut rb), "235 2.7.0 Authentication successful\r\n");
    wb.write_all(b"MAIL FROM:<alice@test.example>\r\n").unwrap();
    assert_eq!(reply(&mut rb), "250 2.1.0 Ok\r\n");
    // A has no answer yet: its failure is still delayed by Dovecot.
    wa.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let early = ra.get_mut().read(&mut byte);
    assert!(
        matches!(&early, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "A was answered before Dovecot's failure delay ended: {early:?}"
    );
    wa.set_nonblocking(false).unwrap();
    assert_eq!(
        reply(&mut ra),
        "535 5.7.8 Error: authentication failed: authentication failure\r\n"
    );
}

#[test]
fn a_stopped_dovecot_gives_454_after_the_timeout_and_delays_no_other_session() {
    let dovecot = Dovecot::start(&[("alice", "secret")], 0);
    let s = setup(
        &dovecot,
        "smtpd_tls_auth_only = no\nsmtpd_sasl_timeout = 2s\n",
    );
    // Stopped before smtpd's first session connects to it: the kernel
    // accepts the connection, and no handshake ever comes.
    dovecot.pause();
    let (mut wa, mut ra) = session(s.smtp);
    wa.write_all(b"EHLO a\r\n").unwrap();
    reply(&mut ra);
    wa.write_all(format!("AUTH PLAIN {ALICE_PLAIN}\r\n").as_bytes())
        .unwrap();
    // Another session is served while A waits.
    let (mut wb, mut rb) = session(s.smtp);
    wb.write_all(b"EHLO b\r\nMAIL FROM:<b@test.example>\r\n")
        .unwrap();
    assert!(reply(&mut rb).starts_with("250-"));
    assert_eq!(reply(&mut rb), "250 2.1.0 Ok\r\n");
    assert_eq!(
        reply(&mut ra),
        "454 4.7.0 Temporary authentication failure\r\n"
    );
    s.inst
        .wait_log(10, "no answer within smtpd_sasl_timeout (2s)");
    // Back: the next AUTH connects again and succeeds.
    dovecot.resume();
    wa.write_all(format!("AUTH PLAIN {ALICE_PLAIN}\r\n").as_bytes())
        .unwrap();
    assert_eq!(reply(&mut ra), "235 2.7.0 Authentication successful\r\n");
}

/// `smtpd_sasl_authenticated_header`: the login name in Received: when
/// asked, as Postfix writes it, and not by default.
#[test]
fn the_authenticated_header_names_the_login_only_when_asked() {
    let dovecot = Dovecot::start(&[("alice", "secret")], 0);
    for (extra, shown) in [
        ("smtpd_sasl_authenticated_header = yes\n", true),
        ("", false),
    ] {
        let s = setup(&dovecot, extra);
        let (code, t) = swaks(&[
            "--server",
            &format!("127.0.0.1:{}", s.submission),
            "--tls",
            "--auth",
            "PLAIN",
            "--auth-user",
            "alice",
            "--auth-password",
            "secret",
            "--from",
            "alice@test.example",
            "--to",
            "far@remote.example",
        ]);
        assert_eq!(code, 0, "{t}");
        let id = queued_id(&t);
        let out = s.inst.sluice(&["queue", "show", &id]);
        let text = String::from_utf8_lossy(&out.stdout);
        let received = text
            .split("Received: ")
            .nth(1)
            .and_then(|r| r.split(";").next())
            .unwrap_or_else(|| panic!("no Received: in {text}"));
        // Between the client and "by", as Postfix puts it.
        let before_by = received.split("by mx.test.example").next().unwrap();
        assert_eq!(
            before_by.contains("(Authenticated sender: alice)"),
            shown,
            "{extra}: {received}"
        );
        assert!(received.contains("with ESMTPSA"), "{received}");
    }
}
