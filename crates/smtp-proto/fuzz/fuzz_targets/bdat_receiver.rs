//! Fuzz the BDAT receiver: chunks of arbitrary bytes give bounded, valid wire
//! format (no terminator inside, CRLF at the end) under reject and normalize.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smtp_proto::receiver::{BareNewline, BdatReceiver, ReceiverLimits};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let mode = [BareNewline::Reject, BareNewline::Normalize, BareNewline::Allow][data[0] as usize % 3];
    let step = usize::from(data[1]).max(1);
    let data = &data[2..];
    let l = ReceiverLimits { max_size: 0, max_line: None, bare_newline: mode };
    let mut r = BdatReceiver::new(l);
    let mut out = Vec::new();
    for chunk in data.chunks(step) {
        r.feed(chunk, &mut out);
    }
    let s = r.finish(&mut out);
    assert!(out.len() <= 2 * data.len() + 2);
    if s.refusal.is_none() && !out.is_empty() {
        assert!(out.ends_with(b"\r\n"));
    }
    if mode == BareNewline::Normalize {
        let mut framed = b"\r\n".to_vec();
        framed.extend_from_slice(&out);
        assert!(!framed.windows(5).any(|w| w == b"\r\n.\r\n"));
    }
});
