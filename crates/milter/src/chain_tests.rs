//! The chain against scripted milters: turns, refusals, edits passed on.

use super::*;
use crate::client::HeaderChange;
use crate::codec::{act, encode};

fn packet(code: u8, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    encode(&mut v, code, data);
    v
}

fn negotiate(version: u32, protocol: u32) -> Vec<u8> {
    let mut d = version.to_be_bytes().to_vec();
    d.extend_from_slice(&act::ALL.to_be_bytes());
    d.extend_from_slice(&protocol.to_be_bytes());
    packet(b'O', &d)
}

/// The command codes in a stream of packets (macro packets as `D`).
fn codes(mut bytes: &[u8]) -> String {
    let mut s = String::new();
    while bytes.len() >= 5 {
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        s.push(bytes[4] as char);
        bytes = &bytes[4 + len..];
    }
    s
}

/// The data of every packet of a code.
fn data_of(mut bytes: &[u8], code: u8) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    while bytes.len() >= 5 {
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        if bytes[4] == code {
            v.push(bytes[5..4 + len].to_vec());
        }
        bytes = &bytes[4 + len..];
    }
    v
}

/// Answers CONTINUE to each command milter `i` is sent, until it is sent
/// nothing more or the end of the message; the codes it was sent.
fn go_on(c: &mut Chain, i: usize, now: Instant) -> String {
    let mut all = String::new();
    loop {
        let sent = codes(&c.transmit(i));
        if sent.is_empty() {
            return all;
        }
        all.push_str(&sent);
        if sent.ends_with('E') {
            return all;
        }
        c.receive(i, &packet(b'c', b""), now);
    }
}

fn peer() -> Peer {
    Peer {
        name: "[192.0.2.1]".into(),
        family: b'4',
        port: 25,
        addr: "192.0.2.1".into(),
    }
}

fn opts(protocol: u32) -> Options {
    Options {
        default_action: DefaultAction::Tempfail,
        protocol,
        connect_timeout: Duration::from_secs(5),
        command_timeout: Duration::from_secs(5),
        content_timeout: Duration::from_secs(5),
        macros: MacroLists::default(),
        edit_limit: 1 << 20,
    }
}

/// Two milters that have negotiated version 6 with no flags.
fn two(now: Instant) -> Chain {
    let mut c = Chain::new(&["one".into(), "two".into()], opts(6), now);
    for i in 0..2 {
        assert_eq!(codes(&c.transmit(i)), "O");
        c.receive(i, &negotiate(6, 0), now);
    }
    c
}

#[test]
fn each_milter_in_turn_and_a_refusal_stops_the_rest() {
    let now = Instant::now();
    let mut c = two(now);
    assert_eq!(c.mail(vec![], vec!["<a@x>".into()], now), None);
    // Only the first is asked; the second waits for its answer.
    assert_eq!(codes(&c.transmit(0)), "M");
    assert_eq!(codes(&c.transmit(1)), "");
    c.receive(0, &packet(b'c', b""), now);
    assert_eq!(codes(&c.transmit(1)), "M");
    c.receive(1, &packet(b'c', b""), now);
    assert_eq!(c.poll_verdict(), Some(Verdict::Continue));

    assert_eq!(c.rcpt(vec![], vec!["<r@x>".into()], now), None);
    assert_eq!(codes(&c.transmit(0)), "R");
    c.receive(0, &packet(b'y', b"550 5.7.1 no\0"), now);
    assert_eq!(
        c.poll_verdict(),
        Some(Verdict::Reject(Some("550 5.7.1 no".into())))
    );
    // The second never heard of the refused recipient.
    assert_eq!(codes(&c.transmit(1)), "");
}

#[test]
fn the_second_milter_sees_the_message_as_the_first_left_it() {
    let now = Instant::now();
    let mut c = two(now);
    c.mail(vec![], vec!["<a@x>".into()], now);
    assert_eq!(go_on(&mut c, 0, now), "M");
    assert_eq!(go_on(&mut c, 1, now), "M");
    assert_eq!(c.poll_verdict(), Some(Verdict::Continue));
    c.data(&vec![("i", "QID".to_string())], now);
    c.content(
        &vec![("i", "QID".to_string())],
        b"Subject: hi\r\n\r\nold body\r\n",
        now,
    );
    // The content streams to the first only.
    assert_eq!(go_on(&mut c, 0, now), "DTLDNB");
    assert_eq!(go_on(&mut c, 1, now), "DT");
    assert_eq!(c.end_of_message(vec![], now), None);
    assert_eq!(go_on(&mut c, 0, now), "E");
    assert_eq!(go_on(&mut c, 1, now), "");
    let mut eom = packet(b'h', b"X-One\0yes\0");
    eom.extend(packet(b'b', b"new body\r\n"));
    eom.extend(packet(b'c', b""));
    c.receive(0, &eom, now);
    // Now the second hears the changed message, then its end.
    let mut out = Vec::new();
    loop {
        let bytes = c.transmit(1);
        if bytes.is_empty() {
            break;
        }
        out.extend_from_slice(&bytes);
        if codes(&bytes).ends_with('E') {
            break;
        }
        c.receive(1, &packet(b'c', b""), now);
    }
    assert_eq!(codes(&out), "LLDNBE");
    let headers = data_of(&out, b'L');
    assert_eq!(headers[1], b"X-One\0yes\0");
    assert_eq!(data_of(&out, b'B')[0], b"new body\r\n");
    let mut eom = packet(b'b', b"newer\r\n");
    eom.extend(packet(b'c', b""));
    c.receive(1, &eom, now);
    assert_eq!(c.poll_verdict(), Some(Verdict::Continue));
    assert_eq!(
        c.take_edits(),
        vec![
            Edit::Header(HeaderChange::Add {
                name: "X-One".into(),
                value: "yes".into()
            }),
            Edit::ReplaceBody(b"newer\r\n".to_vec())
        ]
    );
}

#[test]
fn a_refusal_at_connect_answers_the_next_event_and_the_second_is_not_told() {
    let now = Instant::now();
    let mut c = two(now);
    c.connect(vec![], peer(), now);
    assert_eq!(codes(&c.transmit(0)), "C");
    c.receive(0, &packet(b't', b""), now);
    assert_eq!(codes(&c.transmit(1)), "");
    assert_eq!(
        c.mail(vec![], vec!["<a@x>".into()], now),
        Some(Verdict::Tempfail(None))
    );
    assert_eq!(codes(&c.transmit(1)), "");
}

#[test]
fn a_late_milter_follows_the_default_action_and_is_logged() {
    let now = Instant::now();
    let mut c = two(now);
    c.mail(vec![], vec!["<a@x>".into()], now);
    c.expire(now + Duration::from_secs(6));
    assert_eq!(
        c.poll_verdict(),
        Some(Verdict::Tempfail(Some(
            "451 4.3.5 Server configuration problem - try again later".into()
        )))
    );
    assert_eq!(
        c.take_warnings(),
        ["milter one: timeout; applying milter_default_action = tempfail"]
    );
}

#[test]
fn version_2_offers_its_flags_and_sends_no_data_event() {
    let now = Instant::now();
    let mut c = Chain::new(&["old".into()], opts(2), now);
    let out = c.transmit(0);
    let neg = &data_of(&out, b'O')[0];
    assert_eq!(&neg[..4], &2u32.to_be_bytes());
    assert_eq!(&neg[8..12], &0x7fu32.to_be_bytes());
    // Flags of version 6 that a milter claims are not honoured below it.
    c.receive(0, &negotiate(2, crate::codec::proto::NR_CONN), now);
    c.connect(vec![("j", "mx".into())], peer(), now);
    assert_eq!(codes(&c.transmit(0)), "DC");
    c.receive(0, &packet(b'c', b""), now);
    c.mail(vec![], vec!["<a@x>".into()], now);
    c.transmit(0);
    c.receive(0, &packet(b'c', b""), now);
    c.poll_verdict();
    c.data(&vec![("i", "QID".to_string())], now);
    c.content(&vec![], b"Subject: x\r\n\r\nb\r\n", now);
    assert_eq!(go_on(&mut c, 0, now), "LNB");
}

#[test]
fn a_newer_milter_than_offered_is_dropped() {
    let now = Instant::now();
    let mut c = Chain::new(&["new".into()], opts(4), now);
    c.transmit(0);
    c.receive(0, &negotiate(6, 0), now);
    assert!(c.is_failed(0));
    assert!(c.take_warnings()[0].contains("protocol version 6 conflict"));
}

#[test]
fn macros_follow_the_lists_and_a_milters_own_list() {
    let now = Instant::now();
    let lists = MacroLists {
        mail: vec!["{mail_addr}".into()],
        ..MacroLists::default()
    };
    let mut o = opts(6);
    o.macros = lists;
    let mut c = Chain::new(&["m".into()], o, now);
    c.transmit(0);
    // The milter asks for {client_addr} and i at RCPT (SMFIM_ENVRCPT = 3).
    let mut d = 6u32.to_be_bytes().to_vec();
    d.extend_from_slice(&act::ALL.to_be_bytes());
    d.extend_from_slice(&0u32.to_be_bytes());
    d.extend_from_slice(&3u32.to_be_bytes());
    d.extend_from_slice(b"{client_addr} i\0");
    c.receive(0, &packet(b'O', &d), now);
    let known = || {
        vec![
            ("i", "QID".to_string()),
            ("{mail_addr}", "a@x".to_string()),
            ("{client_addr}", "192.0.2.1".to_string()),
        ]
    };
    c.mail(known(), vec!["<a@x>".into()], now);
    let out = c.transmit(0);
    assert_eq!(data_of(&out, b'D')[0], b"M{mail_addr}\0a@x\0");
    c.receive(0, &packet(b'c', b""), now);
    c.rcpt(known(), vec!["<r@x>".into()], now);
    let out = c.transmit(0);
    assert_eq!(
        data_of(&out, b'D')[0],
        b"R{client_addr}\x00192.0.2.1\0i\0QID\0"
    );
}

#[test]
fn an_unknown_command_carries_its_list_and_a_version_3_milter_hears_it() {
    let now = Instant::now();
    let mut o = opts(3);
    o.macros.unknown = vec!["{client_addr}".into()];
    let mut c = Chain::new(&["m".into()], o, now);
    c.transmit(0);
    c.receive(0, &negotiate(3, 0), now);
    let known = vec![("{client_addr}", "192.0.2.1".to_string())];
    assert_eq!(c.unknown(known, "XYZZY x", now), None);
    let out = c.transmit(0);
    assert_eq!(codes(&out), "DU");
    assert_eq!(data_of(&out, b'D')[0], b"U{client_addr}\x00192.0.2.1\0");
    assert_eq!(data_of(&out, b'U')[0], b"XYZZY x\0");
    c.receive(0, &packet(b't', b""), now);
    assert_eq!(c.poll_verdict(), Some(Verdict::Tempfail(None)));
    // Version 2 has no unknown-command event: it is not sent.
    let mut c = Chain::new(&["m".into()], opts(2), now);
    c.transmit(0);
    c.receive(0, &negotiate(2, 0), now);
    assert_eq!(c.unknown(vec![], "XYZZY", now), Some(Verdict::Continue));
    assert_eq!(codes(&c.transmit(0)), "");
}
