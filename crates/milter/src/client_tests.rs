//! The client against a scripted milter: what goes out, what is decided.

use super::*;
use crate::codec::encode;

/// The commands (code, data) in a stream of packets; macro packets kept.
fn commands(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut v = Vec::new();
    while bytes.len() >= 5 {
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        v.push((bytes[4], bytes[5..4 + len].to_vec()));
        bytes = &bytes[4 + len..];
    }
    v
}

fn codes(bytes: &[u8]) -> String {
    commands(bytes).iter().map(|(c, _)| *c as char).collect()
}

fn negotiate(actions: u32, protocol: u32) -> Vec<u8> {
    let mut d = 6u32.to_be_bytes().to_vec();
    d.extend_from_slice(&actions.to_be_bytes());
    d.extend_from_slice(&protocol.to_be_bytes());
    let mut v = Vec::new();
    encode(&mut v, b'O', &d);
    v
}

fn resp(code: u8, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    encode(&mut v, code, data);
    v
}

fn events(c: &mut Client) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn ready(protocol: u32) -> Client {
    let mut c = Client::new(6);
    assert_eq!(codes(&c.transmit()), "O");
    c.receive(&negotiate(act::ALL, protocol));
    c
}

#[test]
fn one_command_in_flight_and_verdicts_in_order() {
    let mut c = ready(0);
    let m = [("j", "mx.example".to_string())];
    c.connect(&m, "client.example", b'4', 25, "192.0.2.1");
    c.helo(&[], "client.example");
    // Macros then CONNECT; HELO waits for CONNECT's answer.
    let out = c.transmit();
    assert_eq!(codes(&out), "DC");
    let cmds = commands(&out);
    assert_eq!(cmds[0].1, b"Cj\0mx.example\0");
    assert_eq!(cmds[1].1, b"client.example\x004\x00\x19192.0.2.1\0");
    c.receive(&resp(b'c', b""));
    assert_eq!(
        events(&mut c),
        [Event::Verdict(Stage::Connect, Verdict::Continue)]
    );
    assert_eq!(codes(&c.transmit()), "H");
    c.receive(&resp(b'c', b""));
    c.mail(&[], &["<a@x>", "SIZE=10"]);
    assert_eq!(
        commands(&c.transmit())[0],
        (b'M', b"<a@x>\0SIZE=10\0".to_vec())
    );
    c.receive(&resp(b'y', b"550 5.7.1 not you\0"));
    assert_eq!(
        events(&mut c),
        [
            Event::Verdict(Stage::Helo, Verdict::Continue),
            Event::Verdict(
                Stage::Mail,
                Verdict::Reject(Some("550 5.7.1 not you".into()))
            )
        ]
    );
}

#[test]
fn declined_stages_and_unanswered_ones_are_decided_at_once() {
    let mut c = ready(proto::NOCONNECT | proto::NR_HELO | proto::NOHDRS | proto::NR_BODY);
    c.connect(&[], "h", b'4', 25, "192.0.2.1");
    c.helo(&[], "h");
    c.mail(&[], &["<a@x>"]);
    assert_eq!(codes(&c.transmit()), "HM");
    assert_eq!(
        events(&mut c),
        [
            Event::Verdict(Stage::Connect, Verdict::Continue),
            Event::Verdict(Stage::Helo, Verdict::Continue)
        ]
    );
    c.receive(&resp(b'c', b""));
    c.data(&[]);
    c.content(&[], &Part::Header("Subject".into(), "x".into()));
    c.content(&[], &Part::EndOfHeaders);
    c.content(&[], &Part::Body(vec![b'a'; 70000]));
    c.end_of_message(&[]);
    // DATA is answered; the header is not sent; EOH is answered.
    assert_eq!(codes(&c.transmit()), "T");
    c.receive(&resp(b'c', b""));
    assert_eq!(codes(&c.transmit()), "N");
    c.receive(&resp(b'c', b""));
    // Two body chunks without answers, then the end.
    assert_eq!(codes(&c.transmit()), "BBE");
    c.receive(&resp(b'h', b"X-Scanned\0yes\0"));
    c.receive(&resp(b'c', b""));
    let ev = events(&mut c);
    assert_eq!(
        ev.last(),
        Some(&Event::Verdict(Stage::Eom, Verdict::Continue))
    );
    assert_eq!(
        c.take_edits(),
        [Edit::Header(HeaderChange::Add {
            name: "X-Scanned".into(),
            value: "yes".into()
        })]
    );
}

#[test]
fn a_rejected_header_rejects_the_message_at_its_end() {
    let mut c = ready(0);
    c.mail(&[], &["<a@x>"]);
    c.transmit();
    c.receive(&resp(b'c', b""));
    c.content(&[], &Part::Header("Subject".into(), "spam".into()));
    c.content(&[], &Part::Header("From".into(), "x".into()));
    c.content(&[], &Part::EndOfHeaders);
    c.end_of_message(&[]);
    assert_eq!(codes(&c.transmit()), "L");
    c.receive(&resp(b'r', b""));
    // Nothing more of the message goes out; the end is decided.
    assert_eq!(codes(&c.transmit()), "");
    assert_eq!(
        events(&mut c),
        [
            Event::Verdict(Stage::Mail, Verdict::Continue),
            Event::Verdict(Stage::Eom, Verdict::Reject(None))
        ]
    );
}

#[test]
fn abort_drops_the_transaction_and_ignores_its_answer() {
    let mut c = ready(0);
    c.mail(&[], &["<a@x>"]);
    c.rcpt(&[], &["<b@x>"]);
    c.abort();
    assert_eq!(codes(&c.transmit()), "M");
    c.receive(&resp(b't', b""));
    // The MAIL answer is dropped; ABORT went without waiting.
    assert_eq!(events(&mut c), []);
    assert_eq!(codes(&c.transmit()), "A");
    c.mail(&[], &["<c@x>"]);
    assert_eq!(codes(&c.transmit()), "M");
    c.receive(&resp(b'd', b""));
    c.end_of_message(&[]);
    assert_eq!(
        events(&mut c),
        [
            Event::Verdict(Stage::Mail, Verdict::Discard),
            Event::Verdict(Stage::Eom, Verdict::Discard)
        ]
    );
    c.quit();
    assert_eq!(codes(&c.transmit()), "Q");
    assert!(c.is_finished());
}

#[test]
fn edits_must_be_negotiated_and_come_at_the_end() {
    let mut c = Client::new(6);
    c.transmit();
    c.receive(&negotiate(act::ADDHDRS, 0));
    c.mail(&[], &["<a@x>"]);
    c.transmit();
    c.receive(&resp(b'c', b""));
    c.end_of_message(&[]);
    c.transmit();
    c.receive(&resp(b'b', b"new body\r\n"));
    assert!(matches!(events(&mut c).last(), Some(Event::Failed(_))));

    let mut c = ready(0);
    c.mail(&[], &["<a@x>"]);
    c.transmit();
    c.receive(&resp(b'h', b"X\0y\0"));
    assert!(matches!(events(&mut c).last(), Some(Event::Failed(_))));
}

#[test]
fn every_edit_and_a_long_body_replacement() {
    let mut c = ready(0);
    c.mail(&[], &["<a@x>"]);
    c.transmit();
    c.receive(&resp(b'c', b""));
    c.end_of_message(&[]);
    c.transmit();
    let mut ins = 0u32.to_be_bytes().to_vec();
    ins.extend_from_slice(b"X-First\0v\0");
    let mut chg = 1u32.to_be_bytes().to_vec();
    chg.extend_from_slice(b"Subject\0\0");
    for r in [
        resp(b'p', b""),
        resp(b'i', &ins),
        resp(b'm', &chg),
        resp(b'+', b"<new@x>\0"),
        resp(b'-', b"<old@x>\0"),
        resp(b'e', b"<s@x>\0"),
        resp(b'b', b"part one "),
        resp(b'b', b"part two\r\n"),
        resp(b'q', b"looks odd\0"),
        resp(b'c', b""),
    ] {
        c.receive(&r);
    }
    assert_eq!(
        events(&mut c),
        [
            Event::Verdict(Stage::Mail, Verdict::Continue),
            Event::Progress,
            Event::Verdict(Stage::Eom, Verdict::Continue)
        ]
    );
    assert_eq!(
        c.take_edits(),
        [
            Edit::Header(HeaderChange::Insert {
                index: 0,
                name: "X-First".into(),
                value: "v".into()
            }),
            Edit::Header(HeaderChange::Change {
                index: 1,
                name: "Subject".into(),
                value: "".into()
            }),
            Edit::AddRecipient {
                address: "<new@x>".into(),
                args: None
            },
            Edit::DeleteRecipient {
                address: "<old@x>".into()
            },
            Edit::ChangeSender {
                address: "<s@x>".into(),
                args: None
            },
            Edit::ReplaceBody(b"part one part two\r\n".to_vec()),
            Edit::Quarantine("looks odd".into()),
        ]
    );
}

#[test]
fn bad_reply_codes_and_garbage_fail_the_milter() {
    for bad in [
        &b"250 ok\0"[..],
        b"55\0",
        b"550 a\r\nb\0",
        b"550 4.7.1 of another class\0",
    ] {
        let mut c = ready(0);
        c.mail(&[], &["<a@x>"]);
        c.transmit();
        c.receive(&resp(b'y', bad));
        assert!(matches!(events(&mut c).last(), Some(Event::Failed(_))));
    }
    // A reply of several lines is a reply.
    let mut c = ready(0);
    c.mail(&[], &["<a@x>"]);
    c.transmit();
    c.receive(&resp(b'y', b"554-5.7.1 one\r\n554 5.7.1 two\0"));
    assert!(matches!(
        events(&mut c).last(),
        Some(Event::Verdict(_, Verdict::Reject(Some(_))))
    ));
    let mut c = Client::new(6);
    c.receive(b"\xff\xff\xff\xffjunk");
    assert!(matches!(events(&mut c).last(), Some(Event::Failed(_))));
}

#[test]
fn a_body_replacement_past_the_limit_fails_the_milter() {
    let mut c = ready(0);
    c.set_edit_limit(100_000);
    c.mail(&[], &["<a@x>"]);
    c.transmit();
    c.receive(&resp(b'c', b""));
    c.end_of_message(&[]);
    c.transmit();
    for _ in 0..3 {
        c.receive(&resp(b'b', &[b'x'; 40_000]));
    }
    assert!(matches!(events(&mut c).last(), Some(Event::Failed(_))));
}

#[test]
fn leading_spaces_only_for_a_milter_that_asks() {
    for (protocol, sent, given, kept) in [
        (0, &b"Subject\0x\0"[..], &b"X-A\0 v\0"[..], " v"),
        (proto::HDR_LEADSPC, b"Subject\0 x\0", b"X-A\0 v\0", "v"),
    ] {
        let mut c = ready(protocol);
        c.mail(&[], &["<a@x>"]);
        c.transmit();
        c.receive(&resp(b'c', b""));
        c.content(&[], &Part::Header("Subject".into(), " x".into()));
        assert_eq!(commands(&c.transmit())[0], (b'L', sent.to_vec()));
        c.receive(&resp(b'c', b""));
        c.end_of_message(&[]);
        c.transmit();
        c.receive(&resp(b'h', given));
        c.receive(&resp(b'c', b""));
        assert_eq!(
            c.take_edits(),
            [Edit::Header(HeaderChange::Add {
                name: "X-A".into(),
                value: kept.into()
            })]
        );
    }
}
