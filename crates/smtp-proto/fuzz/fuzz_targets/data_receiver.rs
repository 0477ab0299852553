//! Fuzz the DATA receiver: never panics, output bounded by input, the same
//! result for any split of the input, and (except under `no`) no terminator in
//! the output.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smtp_proto::receiver::{BareNewline, DataReceiver, ReceiverLimits};

fn run(l: ReceiverLimits, data: &[u8], step: usize) -> (usize, Vec<u8>, bool) {
    let mut r = DataReceiver::new(l);
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let end = (at + step).min(data.len());
        let (n, done) = r.feed(&data[at..end], &mut out);
        at += n;
        if done.is_some() {
            return (at, out, true);
        }
    }
    (at, out, false)
}

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let mode = [BareNewline::Reject, BareNewline::Normalize, BareNewline::Allow][data[0] as usize % 3];
    let data = &data[1..];
    let l = ReceiverLimits { max_size: 0, max_line: None, bare_newline: mode };
    let whole = run(l, data, usize::MAX / 2);
    assert_eq!(whole, run(l, data, 1));
    assert_eq!(whole, run(l, data, 7));
    assert!(whole.1.len() <= 2 * data.len() + 4);
    if mode != BareNewline::Allow {
        let mut framed = b"\r\n".to_vec();
        framed.extend_from_slice(&whole.1);
        assert!(!framed.windows(5).any(|w| w == b"\r\n.\r\n"));
    }
});
