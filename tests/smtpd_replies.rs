//! smtpd's replies to details of the protocol, with real clients (swaks,
//! Python's smtplib) where they can say it: the codes of access tables'
//! REJECT and DEFER (access_map_reject_code, access_map_defer_code), VRFY
//! of an unknown local user, command lines ending in a bare LF, and HELP
//! naming only what is offered.

use std::process::Command;

use sluice_suite::smtp_client::SmtpClient;
use sluice_suite::{free_port, make_cert, receive_master_cf, swaks, Instance, RECEIVE_MAIN_CF};

fn instance(master_extra: &str, main: &str) -> (Instance, u16) {
    let port = free_port();
    let mut inst = Instance::new(&(receive_master_cf(port, "") + master_extra), main);
    inst.start();
    inst.wait_port(port);
    (inst, port)
}

/// Runs a Python smtplib session: `body` uses `s`, connected and greeted.
fn smtplib(port: u16, body: &str) -> String {
    let script = format!(
        "import smtplib, ssl\ns = smtplib.SMTP('127.0.0.1', {port}, timeout=30)\n\
         s.ehlo('client.test.example')\n{body}\ns.quit()\n"
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn access_table_reject_and_defer_use_the_configured_codes() {
    let main = format!(
        "{RECEIVE_MAIN_CF}access_map_reject_code = 550\naccess_map_defer_code = 451\n\
         smtpd_recipient_restrictions = check_recipient_access inline:{{blocked@mx.test.example=REJECT}}, \
         check_recipient_access inline:{{later@mx.test.example=DEFER}}\n"
    );
    let (inst, port) = instance("", &main);
    let server = format!("127.0.0.1:{port}");
    let send = |to: &str| {
        swaks(&[
            "--server",
            &server,
            "--from",
            "a@example.com",
            "--to",
            to,
            "--quit-after",
            "RCPT",
        ])
    };
    let (_, out) = send("blocked@mx.test.example");
    assert!(
        out.contains(
            "550 5.7.1 <blocked@mx.test.example>: Recipient address rejected: Access denied"
        ),
        "{out}"
    );
    let (_, out) = send("later@mx.test.example");
    assert!(
        out.contains(
            "451 4.7.1 <later@mx.test.example>: Recipient address rejected: Access denied"
        ),
        "{out}"
    );
    inst.wait_log(
        5,
        "NOQUEUE: reject: RCPT from unknown[127.0.0.1]: 550 5.7.1 <blocked@mx.test.example>",
    );
    // A code outside 400-599 is named by `sluice check`, not used.
    let mut bad = std::fs::OpenOptions::new()
        .append(true)
        .open(inst.etc().join("main.cf"))
        .unwrap();
    std::io::Write::write_all(&mut bad, b"access_map_reject_code = 250\n").unwrap();
    let out = inst.sluice(&["check"]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("\"access_map_reject_code\": 250 is not an SMTP reply code from 400 to 599"),
        "{text}"
    );
}

#[test]
fn vrfy_of_an_unknown_local_user_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let aliases = dir.path().join("aliases");
    std::fs::write(&aliases, "postmaster: root\nsales: root\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let main = format!(
        "myhostname = mx.test.example\nmydomain = test.example\nalias_maps = hash:{a}\nlocal_recipient_maps = $alias_maps\n",
        a = aliases.display()
    );
    let (inst, port) = instance("router unix - - n - 1 router\n", &main);
    let out = smtplib(
        port,
        "print(s.verify('ghost@mx.test.example'))\nprint(s.verify('ghost'))\n\
         print(s.verify('sales@mx.test.example'))\nprint(s.verify('someone@elsewhere.example'))",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(
        lines[0],
        "(550, b'5.1.1 <ghost@mx.test.example>: Recipient address rejected: User unknown in local recipient table')"
    );
    assert!(
        lines[1].starts_with("(550, b'5.1.1 <ghost@mx.test.example>:"),
        "unqualified: in $myorigin: {out}"
    );
    assert_eq!(lines[2], "(252, b'2.0.0 sales@mx.test.example')");
    assert_eq!(lines[3], "(252, b'2.0.0 someone@elsewhere.example')");
    inst.wait_log(
        5,
        "NOQUEUE: reject: VRFY from unknown[127.0.0.1]: 550 5.1.1 <ghost@mx.test.example>",
    );
}

#[test]
fn commands_ending_in_a_bare_lf_are_accepted() {
    // The default smtpd_forbid_bare_newline (reject) is about content.
    let (inst, port) = instance("", RECEIVE_MAIN_CF);
    let (mut c, _) = SmtpClient::connect(port);
    for (cmd, code) in [
        ("EHLO client.test.example\n", "250"),
        ("MAIL FROM:<a@example.com>\n", "250"),
        ("RCPT TO:<u@mx.test.example>\n", "250"),
        ("DATA\r\n", "354"),
        ("Subject: lf\r\n\r\nbody\r\n.\r\n", "250"),
        ("QUIT\n", "221"),
    ] {
        c.send(cmd);
        let r = c.reply();
        assert!(r.starts_with(code), "{cmd:?}: {r}");
    }
    assert_eq!(inst.queue_json().len(), 1);
    // Bare LF in content is still refused.
    let out = inst.python("smuggle.py", &["127.0.0.1", &port.to_string(), "lf"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("550 5.5.2") && !text.contains("queued as"),
        "{text}"
    );
    assert_eq!(inst.queue_json().len(), 1);
}

#[test]
fn help_names_starttls_and_auth_only_when_offered() {
    let (_plain, port) = instance("", RECEIVE_MAIN_CF);
    let out = smtplib(port, "print(s.help().decode())");
    assert!(out.starts_with("2.0.0 Commands: EHLO"), "{out}");
    assert!(!out.contains("STARTTLS") && !out.contains("AUTH"), "{out}");

    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = make_cert(dir.path());
    use std::os::unix::fs::PermissionsExt;
    for p in [dir.path().to_path_buf(), cert.clone(), key.clone()] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let main = format!(
        "{RECEIVE_MAIN_CF}smtpd_tls_security_level = may\nsmtpd_tls_cert_file = {}\nsmtpd_tls_key_file = {}\n",
        cert.display(),
        key.display()
    );
    let (_tls, port) = instance("", &main);
    let out = smtplib(
        port,
        "print(s.help().decode())\ns.starttls(context=ssl._create_unverified_context())\n\
         s.ehlo('client.test.example')\nprint(s.help().decode())",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].ends_with(" STARTTLS"), "offered before TLS: {out}");
    assert!(!lines[1].contains("STARTTLS"), "not once in TLS: {out}");
}
