//! smtp_line_length_limit (and lmtp's) end to end: a message with 1,500- and
//! 3,000-byte lines and a long header, relayed to Postfix's smtp-sink over
//! SMTP and over LMTP (`smtp-sink -L`), arrives with no line longer than the
//! limit, broken as Postfix's smtp client breaks them (CR LF SPACE), and
//! with the text intact once the inserted breaks are taken out.

use sluice_suite::{
    free_port, sent_dumps, smtp_sink, smtplib_send, wait_for, Dump, Instance, Sink,
};

const LIMIT: usize = 500;

/// The dump of the message to `rcpt` at `sink`, once `inst` logged it sent.
fn dump_for(sink: &Sink, inst: &Instance, rcpt: &str) -> Dump {
    wait_for(30, &format!("the message to {rcpt} at the sink"), || {
        sent_dumps(sink, inst)
            .into_iter()
            .find(|d| d.rcpts.iter().any(|r| r == rcpt))
    })
}

#[test]
fn long_lines_are_broken_at_the_limit_over_smtp_and_lmtp() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let lmtp = smtp_sink(&format!("127.0.0.1:{}", free_port()), &["-L"]);
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\n\
         relay unix - - n - - smtp\nlmtp unix - - n - - lmtp\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{}\nsmtpd_reject_unlisted_recipient = no\n\
         smtp_line_length_limit = {LIMIT}\nlmtp_line_length_limit = {LIMIT}\n\
         transport_maps = inline:{{ lmtp.example = lmtp:inet:127.0.0.1:{} }}\n",
        sink.port, lmtp.port
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);

    let letters = |n: usize, off: u8| -> String {
        (0..n)
            .map(|i| char::from(b'a' + ((i as u8).wrapping_add(off)) % 26))
            .collect()
    };
    let (l1500, l3000, subject) = (letters(1500, 0), letters(3000, 7), letters(700, 3));
    let exact = "x".repeat(LIMIT);
    let body = format!("first\n{l1500}\n{exact}\n{l3000}\nlast\n");
    let file = inst.root().join("long.eml");
    std::fs::write(&file, format!("Subject: {subject}\n\n{body}")).unwrap();

    for rcpt in ["b@lmtp.example", "a@up.example"] {
        smtplib_send(port, "alice@example.com", rcpt, &file);
        let which = if rcpt.ends_with("lmtp.example") {
            &lmtp
        } else {
            &sink
        };
        let dump = dump_for(which, &inst, rcpt);
        let longest = dump.text.lines().map(str::len).max().unwrap_or(0);
        assert!(
            longest <= LIMIT,
            "{rcpt}: a line of {longest} in {}",
            dump.path.display()
        );
        let unbroken = dump.text.replace("\n ", "");
        assert!(
            unbroken.contains(&body),
            "{rcpt}: the body is not intact:\n{}",
            dump.text
        );
        assert!(
            unbroken.contains(&format!("Subject: {subject}\n")),
            "{rcpt}: the header is not intact:\n{}",
            dump.text
        );
        // Broken where Postfix breaks: the limit, then limit - 1 after the space.
        assert!(dump.text.contains(&format!(
            "\n{}\n {}\n",
            &l1500[..LIMIT],
            &l1500[LIMIT..2 * LIMIT - 1]
        )));
        assert!(
            dump.text.contains(&format!("\n{exact}\n")),
            "{rcpt}: a line of exactly the limit"
        );
        // Logged once per message, in Postfix's words.
        let log = inst.log();
        let said = format!(
            "{}: breaking line > {LIMIT} bytes with <CR><LF>SPACE",
            dump.queue_id
        );
        assert_eq!(log.matches(&said).count(), 1, "{log}");
    }
    inst.stop();
}
