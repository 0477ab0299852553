//! The mail log read by a tool nobody here wrote: pflogsumm, pointed at
//! Sluice's syslog name, must count what the instance actually did:
//! mail sent by relay and locally, a deferral, a bounce and a rejection.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use sluice_suite::{free_port, smtp_sink, swaks, wait_for, Instance};

fn send(port: u16, to: &str) -> (i32, String) {
    swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@example.com",
        "--to",
        to,
    ])
}

/// The number before `what` in pflogsumm's Grand Totals.
fn total(summary: &str, what: &str) -> u64 {
    summary
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            let n = words.next()?.parse().ok()?;
            (words.next()? == what).then_some(n)
        })
        .unwrap_or_else(|| panic!("no {what:?} total in:\n{summary}"))
}

#[test]
fn pflogsumm_counts_received_delivered_and_rejected_mail() {
    if Command::new("pflogsumm").arg("--version").output().is_err() {
        panic!("pflogsumm is missing: scripts/test installs it");
    }
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\n\
         relay unix - - n - - smtp\nlocal unix - n n - - local\n"
    );
    let mut inst = Instance::new(&cf, "");
    let spool = inst.root().join("mail");
    std::fs::create_dir_all(&spool).unwrap();
    std::fs::set_permissions(&spool, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // Commands standing in for a full disk (EX_TEMPFAIL) and a broken
    // program (EX_DATAERR): one deferral and one bounce.
    let aliases = inst.root().join("aliases");
    std::fs::write(
        &aliases,
        "later: \"|exit 75\"\nbroken: \"|echo no such folder; exit 65\"\n",
    )
    .unwrap();
    let main = inst.etc().join("main.cf");
    let mut text = std::fs::read_to_string(&main).unwrap();
    text.push_str(&format!(
        "myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{}\nmail_spool_directory = {}\n\
         alias_maps = hash:{}\n",
        sink.port,
        spool.display(),
        aliases.display()
    ));
    std::fs::write(&main, text).unwrap();
    inst.start();
    inst.wait_port(port);

    for i in 0..3 {
        let (code, out) = send(port, &format!("user{i}@remote.example"));
        assert_eq!(code, 0, "{out}");
    }
    for to in ["nobody@localhost", "later@localhost", "broken@localhost"] {
        let (code, out) = send(port, to);
        assert_eq!(code, 0, "{out}");
    }
    // Not a user here: refused at RCPT, logged as a reject.
    let (code, out) = send(port, "no-such-user-here@localhost");
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("5.1.1"), "{out}");

    // Four sent, and the notice for the bounce sent to alice via the sink.
    wait_for(30, "five deliveries in the log", || {
        (inst.log().matches("status=sent").count() == 5).then_some(())
    });
    inst.wait_log(10, "status=deferred");
    inst.wait_log(10, "status=bounced");
    wait_for(10, "only the deferred message queued", || {
        (inst.queue_json().len() == 1).then_some(())
    });

    let log = inst.root().join("maillog");
    let out = Command::new("pflogsumm")
        .args(["--syslog_name=sluice", "--detail=10"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(total(&summary, "received"), 6, "{summary}");
    assert_eq!(total(&summary, "delivered"), 5, "{summary}");
    assert_eq!(total(&summary, "deferred"), 1, "{summary}");
    assert_eq!(total(&summary, "bounced"), 1, "{summary}");
    assert_eq!(total(&summary, "rejected"), 1, "{summary}");
    assert!(
        summary.contains("alice@example.com"),
        "senders listed: {summary}"
    );
}
