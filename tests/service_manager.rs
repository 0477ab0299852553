//! What the package and its service manager rely on, on real instances:
//! master telling `$NOTIFY_SOCKET` it is ready (systemd's Type=notify),
//! the mail log opened again after logrotate, sendmail(1) acting on the
//! names mailq and newaliases, and smtpd answering 451 4.3.5 to every
//! client while its configuration is unusable.

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::Duration;

use sluice_suite::{
    free_port, receive_master_cf, running, swaks, wait_for, Instance, RECEIVE_MAIN_CF,
};

#[test]
fn under_systemd_master_stays_in_front_and_says_ready_then_stopping() {
    let port = free_port();
    let inst = Instance::new(&receive_master_cf(port, ""), RECEIVE_MAIN_CF);
    let notify = inst.root().join("notify");
    let sock = UnixDatagram::bind(&notify).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut cmd = Command::new(sluice_suite::bin_dir().join("sluice"));
    cmd.arg("-c")
        .arg(inst.etc())
        .arg("start")
        .env("NOTIFY_SOCKET", &notify);
    if let Some((uid, gid)) = inst.run_as {
        use std::os::unix::process::CommandExt;
        std::os::unix::fs::chown(&notify, Some(uid), Some(gid)).unwrap();
        cmd.uid(uid).gid(gid);
    }
    let mut child = cmd.spawn().expect("sluice start");
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("READY=1 within 30 s");
    let ready = String::from_utf8_lossy(&buf[..n]).into_owned();
    // `sluice start` became master: systemd's main pid is the one it started.
    assert_eq!(ready, format!("READY=1\nMAINPID={}", child.id()));
    assert_eq!(inst.master_pid(), child.id() as i32);
    // Ready means the services are open: a client is greeted at once.
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--quit-after",
        "EHLO",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(running(child.id() as i32), "master stays in the foreground");

    let out = inst.sluice(&["stop"]);
    assert!(out.status.success(), "{out:?}");
    let n = sock.recv(&mut buf).expect("STOPPING=1");
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert!(child.wait().unwrap().success());
}

#[test]
fn reopen_moves_master_and_daemons_to_the_new_log_file() {
    let port = free_port();
    let mut inst = Instance::new(&receive_master_cf(port, ""), RECEIVE_MAIN_CF);
    inst.start();
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--quit-after",
        "EHLO",
    ]);
    assert_eq!(code, 0, "{out}");
    inst.wait_log(10, "connect from");
    let log = inst.root().join("maillog");
    let rotated = inst.root().join("maillog.1");
    std::fs::rename(&log, &rotated).unwrap();

    let out = inst.sluice(&["reopen"]);
    assert!(out.status.success(), "{out:?}");
    inst.wait_log(10, "reopened the mail log");
    // The smtpd that was already running writes the new file as well.
    let smtpd = inst.pids(&format!("127.0.0.1:{port}"));
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--quit-after",
        "EHLO",
    ]);
    assert_eq!(code, 0, "{out}");
    let line = inst.wait_log(10, "connect from");
    assert_eq!(smtpd.len(), 1, "one smtpd serves both clients");
    assert!(
        line.contains(&format!("[{}]", smtpd[0])),
        "the same smtpd logs to the new file: {line}"
    );
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert!(!old.contains("reopened the mail log"), "{old}");
}

#[test]
fn sendmail_called_mailq_or_newaliases_does_what_the_name_says() {
    let port = free_port();
    let mut inst = Instance::new(&receive_master_cf(port, ""), RECEIVE_MAIN_CF);
    let aliases = inst.root().join("aliases");
    std::fs::write(&aliases, "postmaster: root\n").unwrap();
    let set = inst.sluice(&["config", &format!("alias_maps=hash:{}", aliases.display())]);
    assert!(set.status.success(), "{set:?}");
    inst.start();
    let links = tempfile::tempdir().unwrap();
    for name in ["mailq", "newaliases"] {
        std::os::unix::fs::symlink(
            sluice_suite::bin_dir().join("sendmail"),
            links.path().join(name),
        )
        .unwrap();
    }
    let run = |name: &str| {
        let mut cmd = Command::new(links.path().join(name));
        cmd.env("SLUICE_CONFIG_DIR", inst.etc());
        if let Some((uid, gid)) = inst.run_as {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid);
        }
        cmd.output().unwrap()
    };
    let out = run("mailq");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Mail queue is empty\n"
    );
    let out = run("newaliases");
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("{}: 1 aliases", aliases.display())),
        "{out:?}"
    );
    // A broken alias file: newaliases fails and says where.
    std::fs::write(&aliases, "postmaster root\n").unwrap();
    let out = run("newaliases");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{out:?}"
    );
}

#[test]
fn smtpd_with_an_unknown_restriction_answers_451_4_3_5_until_fixed() {
    let port = free_port();
    let mut inst = Instance::new(
        &receive_master_cf(port, ""),
        &format!("{RECEIVE_MAIN_CF}smtpd_recipient_restrictions = permit_mynetworks, reject_bogus_thing\n"),
    );
    inst.start();
    let server = format!("127.0.0.1:{port}");
    let send = || {
        swaks(&[
            "--server",
            &server,
            "--from",
            "a@test.example",
            "--to",
            "b@test.example",
        ])
    };
    let (code, out) = send();
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("451 4.3.5 Server configuration error"),
        "{out}"
    );
    inst.wait_log(10, "reject_bogus_thing");
    // The process stays up and tells the next client the same.
    let first = inst.pids(&server);
    assert_eq!(first.len(), 1, "one smtpd process");
    let (_, out) = send();
    assert!(
        out.contains("451 4.3.5 Server configuration error"),
        "{out}"
    );
    assert_eq!(inst.pids(&server), first, "smtpd did not exit");

    // Fixed and reloaded, mail is accepted again.
    let fixed = inst.sluice(&["config", "smtpd_recipient_restrictions=permit_mynetworks"]);
    assert!(fixed.status.success(), "{fixed:?}");
    let out = inst.sluice(&["reload"]);
    assert!(out.status.success(), "{out:?}");
    wait_for(20, "a 250 from a fresh smtpd", || {
        let (code, out) = send();
        (code == 0).then_some(out)
    });
}

#[test]
fn smtpd_whose_certificate_does_not_load_answers_451_4_3_5() {
    let port = free_port();
    let mut inst = Instance::new(
        &receive_master_cf(port, ""),
        &format!(
            "{RECEIVE_MAIN_CF}smtpd_tls_security_level = may\nsmtpd_tls_cert_file = /nonexistent/cert.pem\n"
        ),
    );
    inst.start();
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--quit-after",
        "EHLO",
    ]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("451 4.3.5 Server configuration error"),
        "{out}"
    );
    inst.wait_log(10, "/nonexistent/cert.pem");
}
