//! Headers cleanup removes or writes, end to end through Postfix's
//! smtp-sink: message_drop_headers (a Bcc: a client left in reaches no
//! recipient), and the From: a local submission without one gets, made
//! from the envelope sender as Postfix's cleanup makes it.

use sluice_suite::{
    bin_dir, free_port, queued_id, relay_instance, sink_dump, smtp_sink, swaks, Instance,
};

/// Runs sendmail(1) of `inst` with `args`, `input` on its standard input.
fn sendmail(inst: &Instance, args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(bin_dir().join("sendmail"));
    cmd.args(args).env("SLUICE_CONFIG_DIR", inst.etc());
    if let Some((uid, gid)) = inst.run_as {
        cmd.uid(uid).gid(gid);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The queue id of the latest local submission (cleanup's `uid=` line).
fn last_local_id(inst: &Instance, nth: usize) -> String {
    let line = sluice_suite::wait_for(10, "the local submission", || {
        inst.log()
            .lines()
            .filter(|l| l.contains(": uid="))
            .nth(nth)
            .map(str::to_string)
    });
    let before = line.split(": uid=").next().unwrap();
    before.rsplit(' ').next().unwrap().to_string()
}

#[test]
fn bcc_return_path_and_content_length_never_reach_the_recipient() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst, port) = relay_instance(sink.port, "");
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@example.com",
        "--to",
        "bob@remote.example",
        "--header",
        "Bcc: hidden@remote.example",
        "--header",
        "Return-Path: <forged@example.net>",
        "--header",
        "Content-Length: 12",
        "--header",
        "Subject: dropped headers",
    ]);
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    let dump = sink_dump(&sink, &inst, &id, "bob@remote.example");
    let text = dump.text.to_ascii_lowercase();
    for gone in ["\nbcc:", "\nreturn-path: <forged", "\ncontent-length:"] {
        assert!(!text.contains(gone), "{gone} in:\n{}", dump.text);
    }
    assert!(text.contains("\nsubject: dropped headers"), "{}", dump.text);
    // message_drop_headers empty: kept, as Postfix before 3.0.
    let sink2 = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst2, port2) = relay_instance(sink2.port, "message_drop_headers =\n");
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port2}"),
        "--from",
        "alice@example.com",
        "--to",
        "bob@remote.example",
        "--header",
        "Bcc: hidden@remote.example",
    ]);
    assert_eq!(code, 0, "{out}");
    let dump = sink_dump(&sink2, &inst2, &queued_id(&out), "bob@remote.example");
    assert!(
        dump.text.contains("Bcc: hidden@remote.example"),
        "{}",
        dump.text
    );
}

#[test]
fn a_local_submission_gets_its_from_header_from_the_envelope_sender() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    // relay_instance's services, and public/submit for sendmail(1).
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n\
         submit unix n - n - - cleanup\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{}\nsmtpd_reject_unlisted_recipient = no\n",
        sink.port
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);
    let out = sendmail(
        &inst,
        &[
            "-f",
            "bob@example.net",
            "-F",
            "Bob Builder",
            "kim@remote.example",
        ],
        "Subject: from -f\n\nbody\n",
    );
    assert!(out.status.success(), "{out:?}");
    let id = last_local_id(&inst, 0);
    let dump = sink_dump(&sink, &inst, &id, "kim@remote.example");
    assert!(
        dump.text
            .contains("\nFrom: Bob Builder <bob@example.net>\n"),
        "{}",
        dump.text
    );
    let out = sendmail(
        &inst,
        &["-f", "<>", "kim@remote.example"],
        "Subject: null\n\nbody\n",
    );
    assert!(out.status.success(), "{out:?}");
    let id = last_local_id(&inst, 1);
    let dump = sink_dump(&sink, &inst, &id, "kim@remote.example");
    assert!(
        dump.text.contains("\nFrom: MAILER-DAEMON@"),
        "{}",
        dump.text
    );
}
