//! Fuzz the delivery agent's client session: arbitrary server bytes, fed in
//! the middle of a transaction (after a greeting and an EHLO whose keywords
//! the first byte picks) or from the start. No panic, no loop, every byte
//! used or the session closed, recipient replies only for real recipients
//! and at most once each per message, and what the client writes stays
//! bounded.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smtp_proto::address::parse_mailbox;
use smtp_proto::client_session::ClientTls;
use smtp_proto::{
    ClientAction, ClientConfig, ClientSession, Envelope, MailParams, Path, RcptParams,
};

const KEYWORDS: [&str; 7] = [
    "PIPELINING",
    "CHUNKING",
    "SIZE 10240000",
    "DSN",
    "SMTPUTF8",
    "8BITMIME",
    "STARTTLS",
];

fn envelope(utf8: bool) -> Envelope {
    let to = |s: &str| {
        (
            parse_mailbox(s, false).expect("fuzz: literal"),
            RcptParams::default(),
        )
    };
    Envelope {
        from: Path::Mailbox(parse_mailbox("a@example.org", false).expect("fuzz: literal")),
        params: MailParams {
            size: Some(40),
            smtputf8: utf8,
            ..MailParams::default()
        },
        recipients: vec![
            to("b@example.net"),
            to("c@example.net"),
            to("d@example.net"),
        ],
        utf8_required: utf8,
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (caps, flags, step, data) = (data[0], data[1], usize::from(data[2]).max(1), &data[3..]);
    let tls = [
        ClientTls::Disabled,
        ClientTls::Opportunistic,
        ClientTls::Required,
    ][usize::from(flags & 3) % 3];
    let cfg = ClientConfig {
        tls,
        max_reply_line: 512,
        max_reply_lines: 20,
        ..ClientConfig::default()
    };
    let mut c = ClientSession::new(cfg, flags & 4 != 0);
    let mut input = Vec::new();
    if flags & 8 == 0 {
        // A well-behaved start: greeting and EHLO, so the fuzzed bytes land mid-transaction.
        input.extend_from_slice(b"220 mx.example.net ESMTP\r\n250-mx.example.net\r\n");
        for (i, k) in KEYWORDS.iter().enumerate() {
            if caps & (1 << i) != 0 {
                input.extend_from_slice(format!("250-{k}\r\n").as_bytes());
            }
        }
        input.extend_from_slice(b"250 HELP\r\n");
    }
    input.extend_from_slice(data);
    let env = envelope(flags & 16 != 0);
    let content: &[u8] = b"Subject: t\r\n\r\n..dot\r\nbody";
    let mut messages = 0;
    let mut seen = [false; 3];
    let mut wrote = 0usize;
    let mut at = 0;
    for _ in 0..2 * input.len() + 100 {
        let mut progress = false;
        if at < input.len() && !c.is_closed() {
            let end = (at + step).min(input.len());
            let n = c.feed(&input[at..end]);
            assert!(n <= end - at);
            progress |= n > 0;
            at += n;
        }
        while let Some(a) = c.poll_action() {
            progress = true;
            match a {
                ClientAction::Ready => {
                    if messages < 3 && c.send_message(&env) {
                        messages += 1;
                        seen = [false; 3];
                    } else {
                        c.quit();
                    }
                }
                ClientAction::StartTls => {
                    // The shell drops what arrived in plaintext after the 220.
                    at = input.len().min(at + step);
                    c.tls_established();
                }
                ClientAction::Recipient { index, .. } => {
                    assert!(index < seen.len(), "reply for recipient {index}");
                    assert!(!seen[index], "two replies for recipient {index}");
                    seen[index] = true;
                }
                ClientAction::SendContent => {}
                ClientAction::SenderRefused(_) | ClientAction::MessageDone(_) => {}
                ClientAction::Failed(_) | ClientAction::Close => {}
            }
        }
        while c.wants_content() {
            c.send_content(content);
            c.end_content();
            progress = true;
        }
        wrote += c.take_output().len();
        assert!(
            wrote <= 64 * 1024 + 4 * input.len(),
            "client wrote {wrote} bytes for {} in",
            input.len()
        );
        if !progress {
            break;
        }
    }
    // The session never stalls: it uses every byte or closes.
    assert!(
        at == input.len() || c.is_closed(),
        "stalled at {at} of {}",
        input.len()
    );
});
