//! Any bytes as a message body, hashed whole and in pieces cut where the
//! input says (a CRLF or a run of blanks split across reads, as cleanup's
//! reads split them): the body hash must not depend on the cuts, for both
//! canonicalizations. The same bytes as a header block and as base64 text:
//! the field splitter, header canonicalization and the decoder must never panic.
#![no_main]

use dkim::canon::{self, BodyHasher, Canon};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte chooses the cut lengths (1..=16 bytes, cycling).
    let Some((&seed, body)) = data.split_first() else { return };
    for c in [Canon::Simple, Canon::Relaxed] {
        let mut whole = BodyHasher::new(c);
        whole.update(body);
        let mut cut = BodyHasher::new(c);
        let mut rest = body;
        let mut n = seed;
        while !rest.is_empty() {
            let take = usize::from(n % 16 + 1).min(rest.len());
            cut.update(&rest[..take]);
            rest = &rest[take..];
            n = n.rotate_left(3) ^ 0x5d;
        }
        assert_eq!(
            whole.finish().as_ref(),
            cut.finish().as_ref(),
            "{c:?} body hash depends on how the body was cut"
        );
    }
    let mut out = Vec::new();
    for f in canon::fields(data) {
        assert!(!f.name.is_empty() && f.raw.len() >= f.name.len());
        canon::header(Canon::Relaxed, f.raw, &mut out, true);
        canon::header(Canon::Simple, f.raw, &mut out, false);
    }
    if let Some(bytes) = dkim::base64::decode(data) {
        // What decodes re-encodes to the same value.
        let again = dkim::base64::encode(&bytes);
        assert_eq!(dkim::base64::decode(again.as_bytes()).as_deref(), Some(&bytes[..]));
    }
});
