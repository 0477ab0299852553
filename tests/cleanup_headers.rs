//! Headers cleanup removes or writes, end to end through Postfix's
//! smtp-sink: message_drop_headers (a Bcc: a client left in reaches no
//! recipient), and the From: a local submission without one gets, made
//! from the envelope sender as Postfix's cleanup makes it.

use sluice_suite::{
    free_port, relay_instance, run_sendmail, sink_dump, smtp_sink, submit_relay_instance,
    swaks_queued, Instance,
};

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
    let extra = [
        "--header",
        "Bcc: hidden@remote.example",
        "--header",
        "Return-Path: <forged@example.net>",
        "--header",
        "Content-Length: 12",
        "--header",
        "Subject: dropped headers",
    ];
    let id = swaks_queued(port, "alice@example.com", "bob@remote.example", &extra);
    let dump = sink_dump(&sink, &inst, &id, "bob@remote.example");
    let text = dump.text.to_ascii_lowercase();
    for gone in ["\nbcc:", "\nreturn-path: <forged", "\ncontent-length:"] {
        assert!(!text.contains(gone), "{gone} in:\n{}", dump.text);
    }
    assert!(text.contains("\nsubject: dropped headers"), "{}", dump.text);
    // message_drop_headers empty: kept, as Postfix before 3.0.
    let sink2 = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst2, port2) = relay_instance(sink2.port, "message_drop_headers =\n");
    let extra = ["--header", "Bcc: hidden@remote.example"];
    let id = swaks_queued(port2, "alice@example.com", "bob@remote.example", &extra);
    let dump = sink_dump(&sink2, &inst2, &id, "bob@remote.example");
    assert!(
        dump.text.contains("Bcc: hidden@remote.example"),
        "{}",
        dump.text
    );
}

#[test]
fn a_local_submission_gets_its_from_header_from_the_envelope_sender() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let inst = submit_relay_instance(sink.port, "");
    let out = run_sendmail(
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
    let out = run_sendmail(
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
