//! Traffic shaping's tenant and job ids end to end: taken by cleanup from
//! the headers `tenant_id_header` and `job_id_header` name (and removed
//! before delivery unless `shaping_header_keep`), or set by an smtpd access
//! action, which wins; kept in the journal across kill -9 and a restart;
//! shown by `sluice queue list --json`.

use std::path::{Path, PathBuf};

use sluice_suite::testkit::ShapingSink;
use sluice_suite::{free_port, relay_instance, smtplib_send, wait_for, Instance};

/// Writes a message with these header lines to a file for smtplib.
fn message(dir: &Path, name: &str, headers: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!("{headers}Subject: {name}\r\n\r\nbody of {name}\r\n"),
    )
    .unwrap();
    p
}

/// The queue id of the queued message whose listing has `needle`, once there is one.
fn queued_with(inst: &Instance, needle: &str) -> String {
    let line = wait_for(30, &format!("a queued message with {needle}"), || {
        std::panic::catch_unwind(|| inst.queue_json())
            .ok()?
            .into_iter()
            .find(|l| l.contains(needle))
    });
    line.split("\"queue_id\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_string()
}

/// What smtpd answers to RCPT TO:<`to`>, as smtplib reports it.
fn rcpt_reply(port: u16, to: &str) -> String {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import smtplib, sys\n\
             s = smtplib.SMTP('127.0.0.1', int(sys.argv[1]), timeout=60)\n\
             s.ehlo(); s.mail('alice@example.com')\n\
             print(s.rcpt(sys.argv[2]))\n\
             s.quit()\n",
        )
        .arg(port.to_string())
        .arg(to)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn id_headers_set_tenant_and_job_and_are_removed_before_delivery() {
    let sink = ShapingSink::start(&["127.0.0.1"]);
    let (inst, port) = relay_instance(
        sink.port,
        "tenant_id_header = X-Tenant-ID\njob_id_header = X-Job-ID:\n",
    );
    let m = message(
        inst.root(),
        "shaped",
        "X-Tenant-ID:  acme \r\nx-job-id: spring\r\n sale\r\nX-Tenant-ID: second\r\n",
    );
    smtplib_send(port, "alice@example.com", "bob@remote.example", &m);
    // A value that is not an id is ignored, and the header still removed.
    let long = format!("X-Tenant-ID: {}\r\n", "t".repeat(65));
    let m = message(inst.root(), "toolong", &long);
    smtplib_send(port, "alice@example.com", "carol@remote.example", &m);
    let got = sink.wait_messages(2, 30);
    for msg in &got {
        let headers = msg
            .data
            .split("\r\n\r\n")
            .next()
            .unwrap()
            .to_ascii_lowercase();
        assert!(
            !headers.contains("x-tenant-id") && !headers.contains("x-job-id"),
            "{}",
            msg.data
        );
    }
    assert!(got.iter().any(|m| m.data.contains("Subject: shaped")));
    inst.wait_log(10, ": tenant=acme, job=spring sale");
    inst.wait_log(10, "ignoring tenant id header value \"tttt");
    assert!(
        !inst.log().contains("tenant=second"),
        "only the first header counts"
    );
}

#[test]
fn an_access_action_wins_over_the_header_and_the_header_can_be_kept() {
    let sink = ShapingSink::start(&["127.0.0.1"]);
    let (inst, port) = relay_instance(
        sink.port,
        "tenant_id_header = X-Tenant-ID\nshaping_header_keep = yes\n\
         smtpd_recipient_restrictions = check_recipient_access inline:{ boss@remote.example=TENANT vip, jobs@remote.example=JOB j-7 }\n",
    );
    for to in ["bob", "boss", "jobs"] {
        let m = message(inst.root(), to, "X-Tenant-ID: acme\r\n");
        smtplib_send(
            port,
            "alice@example.com",
            &format!("{to}@remote.example"),
            &m,
        );
    }
    let got = sink.wait_messages(3, 30);
    assert!(
        got.iter().all(|m| m.data.contains("X-Tenant-ID: acme\r\n")),
        "kept"
    );
    inst.wait_log(10, ": tenant=vip");
    inst.wait_log(10, ": tenant=acme, job=j-7");
    let log = inst.log();
    assert_eq!(
        log.lines().filter(|l| l.ends_with(": tenant=acme")).count(),
        1,
        "bob's, from the header: {log}"
    );
    assert!(!log.contains("tenant=vip, job="), "{log}");
}

#[test]
fn a_bad_access_action_is_a_configuration_error_not_a_silent_pass() {
    let sink = ShapingSink::start(&["127.0.0.1"]);
    let (inst, port) = relay_instance(
        sink.port,
        "smtpd_recipient_restrictions = check_recipient_access inline:{ boss@remote.example=TENANT }\n",
    );
    let out = rcpt_reply(port, "boss@remote.example");
    // As Postfix: the client reads no table and no value; the log does.
    assert!(
        out.contains("451") && out.contains("4.3.5 Server configuration error'"),
        "{out}"
    );
    inst.wait_log(10, "warning: access table inline:{ boss@remote.example=TENANT }: bad action \"TENANT\" for key \"boss@remote.example\"");
}

#[test]
fn a_queued_message_keeps_its_tenant_and_job_across_kill_9_and_restart() {
    // Nothing listens there: the message stays deferred.
    let (mut inst, port) = relay_instance(
        free_port(),
        "tenant_id_header = X-Tenant-ID\njob_id_header = X-Job-ID\n",
    );
    let m = message(inst.root(), "kept", "X-Tenant-ID: acme\r\nX-Job-ID: j1\r\n");
    smtplib_send(port, "alice@example.com", "bob@remote.example", &m);
    // Large enough for a pool file rather than the journal record.
    let big = "x".repeat(200_000);
    let m = message(
        inst.root(),
        "big",
        &format!("X-Tenant-ID: bigco\r\nX-Pad: {big}\r\n"),
    );
    smtplib_send(port, "alice@example.com", "bob@remote.example", &m);
    let both = |inst: &Instance| {
        let a = queued_with(inst, "\"tenant\":\"acme\",\"job\":\"j1\"");
        let b = queued_with(inst, "\"tenant\":\"bigco\"");
        (a, b)
    };
    let before = both(&inst);
    inst.wait_log(20, "status=deferred");
    let qmgr = inst.pids("qmgr");
    for p in &qmgr {
        sys::process::signal(*p, 9).unwrap();
    }
    inst.wait_pid("qmgr", &qmgr);
    assert_eq!(both(&inst), before, "after kill -9 of qmgr");
    inst.stop();
    inst.start();
    assert_eq!(both(&inst), before, "after a restart");
}
