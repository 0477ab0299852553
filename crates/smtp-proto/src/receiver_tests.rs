//! Tests of the DATA and BDAT receivers: tables of normal and hostile inputs,
//! chunking invariance and proptests.

use super::*;
use proptest::prelude::*;

fn limits(bare: BareNewline) -> ReceiverLimits {
    ReceiverLimits {
        bare_newline: bare,
        ..ReceiverLimits::default()
    }
}

/// Feeds `input` in the given piece sizes (cycled); returns consumed, output, summary.
fn run_data(
    l: ReceiverLimits,
    input: &[u8],
    pieces: &[usize],
) -> (usize, Vec<u8>, Option<DataSummary>) {
    let mut r = DataReceiver::new(l);
    let mut out = Vec::new();
    let mut at = 0;
    let mut k = 0;
    while at < input.len() {
        let n = pieces
            .get(k % pieces.len().max(1))
            .copied()
            .unwrap_or(input.len())
            .max(1);
        k += 1;
        let end = (at + n).min(input.len());
        let before = out.len();
        let (used, done) = r.feed(&input[at..end], &mut out);
        assert!(
            out.len() - before <= 2 * (end - at) + 4,
            "output bounded by input"
        );
        let len = end - at;
        at += used;
        if let Some(s) = done {
            return (at, out, Some(s));
        }
        assert_eq!(used, len, "consumes all unless done");
    }
    (at, out, None)
}

const ALL: [BareNewline; 3] = [
    BareNewline::Reject,
    BareNewline::Normalize,
    BareNewline::Allow,
];

#[test]
fn data_table() {
    type Row = (
        &'static [u8],
        BareNewline,
        &'static [u8],
        Option<usize>,
        Option<Refusal>,
    );
    let rows: &[Row] = &[
        (
            b"Hello\r\n.\r\n",
            BareNewline::Reject,
            b"Hello\r\n",
            Some(10),
            None,
        ),
        (b".\r\n", BareNewline::Reject, b"", Some(3), None),
        (b".\r\nQUIT\r\n", BareNewline::Reject, b"", Some(3), None),
        (
            b"..\r\n.\r\n",
            BareNewline::Reject,
            b"..\r\n",
            Some(7),
            None,
        ),
        (
            b".foo\r\n.\r\n",
            BareNewline::Reject,
            b".foo\r\n",
            Some(9),
            None,
        ),
        (
            b"a\r\n\r\n.\r\n",
            BareNewline::Reject,
            b"a\r\n\r\n",
            Some(8),
            None,
        ),
        (
            b"a\r\n.\r\nMAIL FROM:<>\r\n",
            BareNewline::Reject,
            b"a\r\n",
            Some(6),
            None,
        ),
        (
            b"a\0b\r\n.\r\n",
            BareNewline::Reject,
            b"a\0b\r\n",
            Some(8),
            None,
        ),
        // bare LF / CR, three policies
        (
            b"a\nb\r\n.\r\n",
            BareNewline::Reject,
            b"a",
            Some(8),
            Some(Refusal::BareLf),
        ),
        (
            b"a\rb\r\n.\r\n",
            BareNewline::Reject,
            b"a",
            Some(8),
            Some(Refusal::BareCr),
        ),
        (
            b"a\nb\r\n.\r\n",
            BareNewline::Normalize,
            b"a\r\nb\r\n",
            Some(8),
            None,
        ),
        (
            b"a\rb\r\n.\r\n",
            BareNewline::Normalize,
            b"a\r\nb\r\n",
            Some(8),
            None,
        ),
        (
            b"a\nb\r\n.\r\n",
            BareNewline::Allow,
            b"a\nb\r\n",
            Some(8),
            None,
        ),
        (
            b"a\r\r\n.\r\n",
            BareNewline::Normalize,
            b"a\r\n\r\n",
            Some(7),
            None,
        ),
        // a lone dot after a converted newline is stuffed, never a terminator
        (
            b"a\n.\r\n.\r\n",
            BareNewline::Normalize,
            b"a\r\n..\r\n",
            Some(8),
            None,
        ),
        (
            b"a\r\n.\nb\r\n.\r\n",
            BareNewline::Normalize,
            b"a\r\n..\r\nb\r\n",
            Some(11),
            None,
        ),
        (
            b"a\r\n.\rb\r\n.\r\n",
            BareNewline::Normalize,
            b"a\r\n..\r\nb\r\n",
            Some(11),
            None,
        ),
        (
            b"a\r\n.\nb\r\n.\r\n",
            BareNewline::Allow,
            b"a\r\n.\nb\r\n",
            Some(11),
            None,
        ),
        (
            b"a\r\n.\rb\r\n.\r\n",
            BareNewline::Allow,
            b"a\r\n.\rb\r\n",
            Some(11),
            None,
        ),
        (b"\n.\n", BareNewline::Allow, b"\n.\n", None, None),
    ];
    for (i, (input, bare, want_out, want_done, want_ref)) in rows.iter().enumerate() {
        let (used, out, sum) = run_data(limits(*bare), input, &[input.len()]);
        assert_eq!(
            out,
            *want_out,
            "row {i} output: {:?}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(sum.map(|_| used), *want_done, "row {i} consumed");
        assert_eq!(sum.and_then(|s| s.refusal), *want_ref, "row {i} refusal");
    }
}

/// Every smuggling line-end mix: none may end the message, in any mode.
const SMUGGLE: &[&[u8]] = &[
    b"\n.\n",
    b"\r.\r",
    b"\r\n.\n",
    b"\n.\r\n",
    b"\r.\n",
    b"\n.\r",
    b"\r\n.\r",
    b"\r.\r\n",
    b"\n.\r\r\n",
    b"\r\n.\r\r\n",
    b"\r\n.\n\r\n",
    b"\n\n.\n\n",
    b"\r\r.\r\r",
    b"\r\n\x00.\r\n",
    b"\r\n .\r\n",
];

#[test]
fn smuggling_never_terminates() {
    for bare in ALL {
        for s in SMUGGLE {
            let mut input = b"hello".to_vec();
            input.extend_from_slice(s);
            input.extend_from_slice(b"RCPT TO:<evil@x.com>\r\n");
            for pieces in [&[1usize][..], &[2, 3], &[input.len()]] {
                let (used, out, sum) = run_data(limits(bare), &input, pieces);
                assert!(sum.is_none(), "{bare:?} {s:?} ended the message");
                assert_eq!(used, input.len());
                let mut framed = b"\r\n".to_vec();
                framed.extend_from_slice(&out);
                assert!(
                    !framed.windows(5).any(|w| w == b"\r\n.\r\n"),
                    "{bare:?} {s:?}: output holds a terminator"
                );
            }
            // The real terminator still works afterwards.
            let mut full = input.clone();
            full.extend_from_slice(b"\r\n.\r\n");
            let (used, _, sum) = run_data(limits(bare), &full, &[7]);
            assert!(sum.is_some() && used == full.len(), "{bare:?} {s:?}");
        }
    }
}

#[test]
fn size_limit_consumes_to_end() {
    let l = ReceiverLimits {
        max_size: 5,
        ..ReceiverLimits::default()
    };
    let (used, out, sum) = run_data(l, b"123456\r\nmore\r\n.\r\nQUIT\r\n", &[3]);
    assert_eq!(used, 17);
    assert!(out.len() <= 5);
    let sum = sum.unwrap();
    assert_eq!(sum.refusal, Some(Refusal::TooBig));
    assert_eq!(sum.size, 14);
    assert_eq!(Refusal::TooBig.reply().code, 552);
    // exactly at the limit is fine
    let l = ReceiverLimits {
        max_size: 3,
        ..ReceiverLimits::default()
    };
    let (_, out, sum) = run_data(l, b"a\r\n.\r\n", &[1]);
    assert_eq!(
        (out.as_slice(), sum.unwrap().refusal),
        (&b"a\r\n"[..], None)
    );
}

#[test]
fn ten_megabyte_line() {
    let mut input = vec![b'x'; 10 << 20];
    input.extend_from_slice(b"\r\n.\r\n");
    let l = ReceiverLimits {
        max_size: 0,
        ..ReceiverLimits::default()
    };
    let (used, out, sum) = run_data(l, &input, &[65536]);
    let sum = sum.unwrap();
    assert_eq!(used, input.len());
    assert_eq!(out.len(), (10 << 20) + 2);
    assert_eq!((sum.longest_line, sum.refusal), (10 << 20, None));
    let l = ReceiverLimits {
        max_size: 0,
        max_line: Some(998),
        ..ReceiverLimits::default()
    };
    let (_, out, sum) = run_data(l, &input, &[65536]);
    assert_eq!(sum.unwrap().refusal, Some(Refusal::LineTooLong));
    assert!(out.len() <= 999);
}

fn run_bdat(l: ReceiverLimits, chunks: &[&[u8]]) -> (Vec<u8>, DataSummary) {
    let mut r = BdatReceiver::new(l);
    let mut out = Vec::new();
    for c in chunks {
        r.feed(c, &mut out);
    }
    let s = r.finish(&mut out);
    (out, s)
}

#[test]
fn bdat_table() {
    type Row = (
        &'static [&'static [u8]],
        BareNewline,
        &'static [u8],
        Option<Refusal>,
    );
    let rows: &[Row] = &[
        (&[b"abc"], BareNewline::Reject, b"abc\r\n", None),
        (&[b""], BareNewline::Reject, b"", None),
        (&[b".x\r\n"], BareNewline::Reject, b"..x\r\n", None),
        (&[b"a\r\n.\r\n"], BareNewline::Reject, b"a\r\n..\r\n", None),
        (
            &[b"a\r", b"\n.", b"b"],
            BareNewline::Reject,
            b"a\r\n..b\r\n",
            None,
        ),
        (&[b"a\nb"], BareNewline::Reject, b"a", Some(Refusal::BareLf)),
        (&[b"a\nb"], BareNewline::Normalize, b"a\r\nb\r\n", None),
        (&[b"a\n.\n"], BareNewline::Normalize, b"a\r\n..\r\n", None),
        (&[b"a\nb"], BareNewline::Allow, b"a\nb\r\n", None),
        (&[b"a\r"], BareNewline::Normalize, b"a\r\n", None),
        (&[b"a\r"], BareNewline::Reject, b"a", Some(Refusal::BareCr)),
        (&[b"a\r"], BareNewline::Allow, b"a\r\r\n", None),
        (&[b"a\r\r\n"], BareNewline::Normalize, b"a\r\n\r\n", None),
    ];
    for (i, (chunks, bare, want, refusal)) in rows.iter().enumerate() {
        let (out, s) = run_bdat(limits(*bare), chunks);
        assert_eq!(out, *want, "row {i}: {:?}", String::from_utf8_lossy(&out));
        assert_eq!(s.refusal, *refusal, "row {i}");
    }
}

/// Undoes dot-stuffing of a wire-format text (lines start after CRLF).
fn unstuff(wire: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut bol = true;
    let mut i = 0;
    while i < wire.len() {
        if bol && wire[i] == b'.' {
            i += 1;
        }
        bol = false;
        if let Some(&b) = wire.get(i) {
            out.push(b);
            bol = out.ends_with(b"\r\n");
            i += 1;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn data_chunking_invariant(
        input in proptest::collection::vec(prop::sample::select(vec![b'a', b'.', b'\r', b'\n', 0u8, 0xff]), 0..200),
        pieces in proptest::collection::vec(1usize..17, 1..8),
        mode in 0usize..3,
    ) {
        let l = limits(ALL[mode]);
        let whole = run_data(l, &input, &[input.len().max(1)]);
        prop_assert_eq!(&whole, &run_data(l, &input, &[1]));
        prop_assert_eq!(&whole, &run_data(l, &input, &pieces));
        let (used, out, sum) = whole;
        if sum.is_some() {
            prop_assert!(input[..used].ends_with(b".\r\n"));
            let mut framed = b"\r\n".to_vec();
            framed.extend_from_slice(&input[..used]);
            prop_assert!(framed.ends_with(b"\r\n.\r\n"));
        }
        if ALL[mode] != BareNewline::Allow {
            let mut framed = b"\r\n".to_vec();
            framed.extend_from_slice(&out);
            prop_assert!(!framed.windows(5).any(|w| w == b"\r\n.\r\n"));
        }
        if ALL[mode] == BareNewline::Normalize {
            for (k, &b) in out.iter().enumerate() {
                if b == b'\n' { prop_assert!(k > 0 && out[k - 1] == b'\r'); }
                if b == b'\r' && k + 1 < out.len() { prop_assert_eq!(out[k + 1], b'\n'); }
            }
        }
    }

    #[test]
    fn data_arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..2000), mode in 0usize..3) {
        let (used, out, _) = run_data(limits(ALL[mode]), &input, &[13]);
        prop_assert!(used <= input.len());
        prop_assert!(out.len() <= 2 * input.len() + 4);
    }

    #[test]
    fn bdat_round_trip(
        lines in proptest::collection::vec("[a-z.]{0,6}", 0..10),
        cut in proptest::collection::vec(0usize..40, 0..4),
    ) {
        let mut content = Vec::new();
        for l in &lines { content.extend_from_slice(l.as_bytes()); content.extend_from_slice(b"\r\n"); }
        let mut chunks: Vec<&[u8]> = Vec::new();
        let mut at = 0;
        let mut cuts: Vec<usize> = cut.iter().map(|c| (*c).min(content.len())).collect();
        cuts.sort();
        for c in cuts { chunks.push(&content[at..c.max(at)]); at = c.max(at); }
        chunks.push(&content[at..]);
        let (out, s) = run_bdat(limits(BareNewline::Reject), &chunks);
        prop_assert_eq!(s.refusal, None);
        prop_assert_eq!(unstuff(&out), content.clone());
        let mut framed = b"\r\n".to_vec();
        framed.extend_from_slice(&out);
        prop_assert!(!framed.windows(5).any(|w| w == b"\r\n.\r\n"));
        // And the DATA receiver takes that wire format back unchanged.
        let mut wire = out.clone();
        wire.extend_from_slice(b".\r\n");
        let (used, back, sum) = run_data(limits(BareNewline::Reject), &wire, &[5]);
        prop_assert_eq!(used, wire.len());
        prop_assert!(sum.is_some());
        prop_assert_eq!(back, out);
    }

    #[test]
    fn bdat_arbitrary_bytes(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..5), mode in 0usize..3) {
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let (out, s) = run_bdat(limits(ALL[mode]), &refs);
        let total: usize = chunks.iter().map(Vec::len).sum();
        prop_assert!(out.len() <= 2 * total + 2);
        if ALL[mode] != BareNewline::Allow {
            let mut framed = b"\r\n".to_vec();
            framed.extend_from_slice(&out);
            prop_assert!(!framed.windows(5).any(|w| w == b"\r\n.\r\n") || s.refusal.is_some());
        }
    }
}
