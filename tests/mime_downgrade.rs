//! 8BITMIME downgrade end to end: an 8-bit multipart message (one part
//! 8bit, one nested message/rfc822 with a binary part, one base64) relayed
//! to Postfix's smtp-sink without 8BITMIME (`-8`) arrives 7-bit, each 8-bit
//! part quoted-printable and decoding to what was sent; to a sink with
//! 8BITMIME, byte for byte as sent. And a message that needs SMTPUTF8, to
//! a server without it, is logged as Postfix logs it, not as a server's reply.

use std::process::Command;

use sluice_suite::{free_port, relay_instance, sink_dump, smtp_sink, wait_for, Instance};

/// The message sent (LF line ends, as smtp-sink dumps it).
const MESSAGE: &[u8] = b"From: a@example.com\n\
To: b@remote.example\n\
Subject: caf\xc3\xa9\n\
MIME-Version: 1.0\n\
Content-Type: multipart/mixed; boundary=\"outer\"\n\
Content-Transfer-Encoding: 8bit\n\
\n\
--outer\n\
Content-Type: text/plain; charset=utf-8\n\
Content-Transfer-Encoding: 8bit\n\
\n\
caf\xc3\xa9 = cr\xc3\xa8me\n\
.a line that starts with a dot, \xc3\xa9\n\
trailing space \n\
LONGLINE\n\
--outer\n\
Content-Type: message/rfc822\n\
Content-Transfer-Encoding: 8bit\n\
\n\
Subject: inner\n\
Content-Type: text/plain; charset=latin1\n\
Content-Transfer-Encoding: binary\n\
\n\
inner \xe9\n\
--outer\n\
Content-Type: application/octet-stream\n\
Content-Transfer-Encoding: base64\n\
\n\
AAECAw==\n\
--outer--\n";

fn message() -> Vec<u8> {
    let long: Vec<u8> = (0..300)
        .flat_map(|i| {
            if i % 3 == 0 {
                vec![0xc3, 0xa9]
            } else {
                vec![b'x']
            }
        })
        .collect();
    let s = MESSAGE;
    let at = s.windows(8).position(|w| w == b"LONGLINE").unwrap();
    [&s[..at], &long, &s[at + 8..]].concat()
}

/// Sends `file` with BODY=8BITMIME (and SMTPUTF8 when `utf8`); the queue id.
fn send(port: u16, from: &str, to: &str, file: &std::path::Path, utf8: bool) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import smtplib, sys\n\
             s = smtplib.SMTP('127.0.0.1', int(sys.argv[1]), timeout=60)\n\
             opts = ['BODY=8BITMIME'] + (['SMTPUTF8'] if sys.argv[5] == '1' else [])\n\
             s.ehlo()\n\
             data = open(sys.argv[4], 'rb').read().replace(b'\\n', b'\\r\\n')\n\
             s.mail(sys.argv[2], opts)\n\
             s.rcpt(sys.argv[3])\n\
             code, text = s.data(data)\n\
             print(text.decode())\n\
             s.quit()\n",
        )
        .arg(port.to_string())
        .arg(from)
        .arg(to)
        .arg(file)
        .arg(if utf8 { "1" } else { "0" })
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "smtplib: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().last().unwrap().to_string()
}

/// The message part of a dump: after smtp-sink's lines and the Received:
/// headers, without the empty line smtp-sink ends a dump with.
fn body_of(raw: &[u8]) -> &[u8] {
    let at = raw.windows(6).position(|w| w == b"\nFrom:").unwrap();
    let msg = &raw[at + 1..];
    msg.strip_suffix(b"\n")
        .filter(|m| m.ends_with(b"\n"))
        .unwrap_or(msg)
}

/// Quoted-printable decoding of `text` (LF lines).
fn unqp(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in text.split_inclusive(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let (line, soft) = match line.strip_suffix(b"=") {
            Some(l) => (l, true),
            None => (line, false),
        };
        let mut i = 0;
        while i < line.len() {
            if line[i] == b'=' && i + 2 < line.len() + 1 {
                let h = std::str::from_utf8(&line[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(h, 16).unwrap());
                i += 3;
            } else {
                out.push(line[i]);
                i += 1;
            }
        }
        if !soft {
            out.push(b'\n');
        }
    }
    out
}

/// The text between `start` and the next boundary line.
fn part<'a>(msg: &'a [u8], start: &[u8]) -> &'a [u8] {
    let at = msg.windows(start.len()).position(|w| w == start).unwrap() + start.len();
    let len = msg[at..]
        .windows(8)
        .position(|w| w == b"\n--outer")
        .unwrap()
        + 1;
    &msg[at..at + len]
}

#[test]
fn eight_bit_parts_become_quoted_printable_without_8bitmime() {
    let plain = smtp_sink(&format!("127.0.0.1:{}", free_port()), &["-8"]);
    let (inst, port) = relay_instance(plain.port, "");
    let file = inst.root().join("8bit.eml");
    let msg = message();
    std::fs::write(&file, &msg).unwrap();
    let id = send(port, "a@example.com", "b@remote.example", &file, false);
    let dump = sink_dump(&plain, &inst, &id, "b@remote.example");
    let raw = std::fs::read(&dump.path).unwrap();
    let got = body_of(&raw);
    assert!(
        !dump.text.contains("BODY=8BITMIME"),
        "no BODY=8BITMIME to a server without it:\n{}",
        dump.text
    );
    // The headers keep their 8-bit bytes (Postfix converts bodies only).
    let head_end = got.windows(2).position(|w| w == b"\n\n").unwrap();
    let (head, body) = got.split_at(head_end);
    assert!(
        head.ends_with(b"Content-Transfer-Encoding: 7bit"),
        "{}",
        dump.text
    );
    assert!(
        body.iter().all(|&b| b < 128),
        "8-bit bytes left:\n{}",
        dump.text
    );
    assert!(body.split(|&b| b == b'\n').all(|l| l.len() <= 76));
    let first =
        b"Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: quoted-printable\n\n";
    let inner = b"Content-Type: text/plain; charset=latin1\nContent-Transfer-Encoding: quoted-printable\n\n";
    for (head, orig) in [
        (&first[..], &b"Content-Transfer-Encoding: 8bit\n\n"[..]),
        (inner, b"Content-Transfer-Encoding: binary\n\n"),
    ] {
        let wanted = part(
            &msg[msg.windows(9).position(|w| w == b"\n--outer\n").unwrap()..],
            orig,
        );
        let sent = part(got, head);
        assert_eq!(
            String::from_utf8_lossy(&unqp(sent)),
            String::from_utf8_lossy(wanted)
        );
    }
    assert!(body.windows(19).any(|w| w == b"\nContent-Type: mess"));
    assert!(
        got.windows(25).any(|w| w == b"\n.a line that starts with"),
        "the dot survives"
    );
    assert!(
        got.ends_with(b"base64\n\nAAECAw==\n--outer--\n"),
        "{}",
        dump.text
    );
}

#[test]
fn eight_bit_content_is_sent_unchanged_with_8bitmime() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst, port) = relay_instance(sink.port, "");
    let file = inst.root().join("8bit.eml");
    let msg = message();
    std::fs::write(&file, &msg).unwrap();
    let id = send(port, "a@example.com", "b@remote.example", &file, false);
    let dump = sink_dump(&sink, &inst, &id, "b@remote.example");
    let raw = std::fs::read(&dump.path).unwrap();
    assert!(dump.text.contains("BODY=8BITMIME"), "{}", dump.text);
    assert_eq!(
        String::from_utf8_lossy(body_of(&raw)),
        String::from_utf8_lossy(&msg)
    );
}

#[test]
fn disable_mime_output_conversion_sends_it_unchanged() {
    let plain = smtp_sink(&format!("127.0.0.1:{}", free_port()), &["-8"]);
    let (inst, port) = relay_instance(plain.port, "disable_mime_output_conversion = yes\n");
    let file = inst.root().join("8bit.eml");
    let msg = message();
    std::fs::write(&file, &msg).unwrap();
    let id = send(port, "a@example.com", "b@remote.example", &file, false);
    let dump = sink_dump(&plain, &inst, &id, "b@remote.example");
    let raw = std::fs::read(&dump.path).unwrap();
    assert_eq!(
        String::from_utf8_lossy(body_of(&raw)),
        String::from_utf8_lossy(&msg)
    );
}

#[test]
fn smtputf8_refusal_is_not_put_in_the_servers_mouth() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst, port) = relay_instance(sink.port, "smtp_discard_ehlo_keywords = smtputf8\n");
    let file = inst.root().join("utf8.eml");
    std::fs::write(&file, "From: j\u{f6}@example.com\nSubject: x\n\nbody\n").unwrap();
    let id = send(port, "j\u{f6}@example.com", "b@remote.example", &file, true);
    let relay = format!("127.0.0.1[127.0.0.1]:{}", sink.port);
    let line = wait_for(30, "the bounce of the SMTPUTF8 message", || {
        inst.log()
            .lines()
            .find(|l| l.contains(&id) && l.contains("status=bounced"))
            .map(str::to_string)
    });
    assert!(
        line.contains(&format!(
            "dsn=5.6.7, status=bounced (SMTPUTF8 is required, but was not offered by host {relay})"
        )),
        "{line}"
    );
    assert!(!line.contains("said"), "{line}");
    let _: &Instance = &inst;
}

/// Mail that asked for SMTPUTF8 but holds no UTF-8 (ASCII addresses and
/// header) goes to a server without SMTPUTF8 as plain mail, as Postfix's
/// smtp client sends it (only SMTPUTF8_FLAG_SENDER, _RECIPIENT or _HEADER
/// make it required); with a UTF-8 Subject it is refused as before. Before,
/// every message that said SMTPUTF8 bounced there.
#[test]
fn smtputf8_mail_without_utf8_goes_to_a_server_without_smtputf8() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst, port) = relay_instance(sink.port, "smtp_discard_ehlo_keywords = smtputf8\n");
    let plain = inst.root().join("plain.eml");
    std::fs::write(
        &plain,
        "From: jo@example.com\nSubject: x\n\nbody caf\u{e9}\n",
    )
    .unwrap();
    let id = send(port, "jo@example.com", "b@remote.example", &plain, true);
    let dump = sink_dump(&sink, &inst, &id, "b@remote.example");
    assert!(dump.text.contains("body caf\u{e9}"), "{}", dump.text);
    let utf8 = inst.root().join("utf8.eml");
    std::fs::write(
        &utf8,
        "From: jo@example.com\nSubject: gr\u{fc}\u{df}e\n\nbody\n",
    )
    .unwrap();
    let id = send(port, "jo@example.com", "b@remote.example", &utf8, true);
    let line = wait_for(30, "the bounce of the UTF-8 header", || {
        inst.log()
            .lines()
            .find(|l| l.contains(&format!("{id}: to=<")) && l.contains("status=bounced"))
            .map(str::to_string)
    });
    assert!(line.contains("dsn=5.6.7"), "{line}");
}
