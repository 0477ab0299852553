//! Parameters a postmaster sets are honoured or said to be ignored, seen
//! from outside as a postmaster would: `sluice check` and the mail log
//! name a set parameter that Sluice does not implement, smtpd refuses MAIL
//! before HELO with `smtpd_helo_required = yes`, and `soft_bounce = yes`
//! turns smtpd's 5xx refusals into 4xx ones (swaks, Python's smtplib).

use std::process::Command;

use sluice_suite::{free_port, receive_master_cf, swaks, Instance, RECEIVE_MAIN_CF};

fn instance(main_extra: &str) -> (Instance, u16) {
    let port = free_port();
    let mut inst = Instance::new(
        &receive_master_cf(port, ""),
        &format!("{RECEIVE_MAIN_CF}{main_extra}"),
    );
    inst.start();
    inst.wait_port(port);
    (inst, port)
}

#[test]
fn unimplemented_parameters_are_reported_by_check_and_in_the_log() {
    let (inst, _port) = instance("debug_peer_list = 127.0.0.1\nenable_original_recipient = yes\n");
    let main_cf = inst.etc().join("main.cf");
    let line = std::fs::read_to_string(&main_cf)
        .unwrap()
        .lines()
        .position(|l| l.starts_with("debug_peer_list"))
        .unwrap()
        + 1;
    let want = format!(
        "{}, line {line}: parameter debug_peer_list is not implemented by Sluice and has no effect",
        main_cf.display(),
    );
    let out = inst.sluice(&["check"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("sluice: warning: {want}\n")), "{err}");
    // Its default value asks for nothing Sluice lacks.
    assert!(!err.contains("enable_original_recipient"), "{err}");
    inst.wait_log(10, &want);
    // A reload reads main.cf again and says so again, for what it now sets.
    let mut text = std::fs::read_to_string(&main_cf).unwrap();
    text.push_str("smtpd_data_restrictions = reject\n");
    std::fs::write(&main_cf, text).unwrap();
    assert!(inst.sluice(&["reload"]).status.success());
    inst.wait_log(
        10,
        "parameter smtpd_data_restrictions is not implemented by Sluice and has no effect",
    );
}

/// MAIL FROM without HELO through smtplib; the reply as "code text".
fn mail_without_helo(port: u16) -> String {
    let script = format!(
        "import smtplib\ns = smtplib.SMTP('127.0.0.1', {port})\n\
         code, text = s.docmd('MAIL', 'FROM:<alice@example.com>')\n\
         print(code, text.decode())\ns.quit()\n"
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn helo_required_refuses_mail_before_helo() {
    let (inst, port) = instance("smtpd_helo_required = yes\n");
    assert_eq!(
        mail_without_helo(port),
        "503 5.5.1 Error: send HELO/EHLO first"
    );
    drop(inst);
    let (_inst, port) = instance("");
    assert!(mail_without_helo(port).starts_with("250 "));
}

/// The RCPT reply swaks got for a recipient our relay control refuses.
fn relay_refusal(main_extra: &str) -> String {
    let (_inst, port) = instance(&format!(
        "smtpd_relay_restrictions = reject_unauth_destination\n{main_extra}"
    ));
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@example.com",
        "--to",
        "victim@elsewhere.example",
        "--quit-after",
        "RCPT",
    ]);
    assert_ne!(code, 0, "{out}");
    out.lines()
        .find(|l| l.starts_with("<** "))
        .unwrap_or_else(|| panic!("no refusal: {out}"))
        .to_string()
}

#[test]
fn soft_bounce_makes_smtpd_refusals_temporary() {
    assert!(relay_refusal("").starts_with("<** 554 5.7.1 "));
    let soft = relay_refusal("soft_bounce = yes\n");
    assert!(soft.starts_with("<** 454 4.7.1 "), "{soft}");
    assert!(soft.contains("Relay access denied"), "{soft}");
}
