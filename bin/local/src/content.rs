//! Message content: from the queue's wire format to what mailboxes hold.
//!
//! The queue keeps data as it travels in SMTP: CRLF line ends and
//! dot-stuffing. Mailboxes want LF line ends and no stuffing; an mbox also
//! wants `From ` lines quoted (mboxrd: any line matching `^>*From ` gets one
//! more `>`, so readers can undo it). Bare CRs inside a line are kept. A
//! last line without a line end gets one. Nothing here can fail or panic,
//! whatever the bytes.

/// The lines of wire-format data, without their line ends, un-dot-stuffed.
pub fn lines(wire: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = wire.strip_suffix(b"\n").unwrap_or(wire);
    let empty = wire.is_empty();
    body.split(|&b| b == b'\n')
        .filter(move |_| !empty)
        .map(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            if l.first() == Some(&b'.') {
                &l[1..]
            } else {
                l
            }
        })
}

/// Un-dot-stuffed content with LF line ends (Maildir, pipes).
pub fn plain(wire: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(wire.len());
    for l in lines(wire) {
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    out
}

/// Whether a line needs one more `>` in an mbox: `^>*From `.
pub fn needs_quote(line: &[u8]) -> bool {
    let rest = &line[line.iter().take_while(|&&b| b == b'>').count()..];
    rest.starts_with(b"From ")
}

/// Content for an mbox: un-dot-stuffed, LF line ends, mboxrd quoting.
pub fn mbox_quoted(wire: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(wire.len() + 64);
    for l in lines(wire) {
        if needs_quote(l) {
            out.push(b'>');
        }
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    out
}

/// Whether the header section has `Delivered-To: <addr>` (case-insensitive,
/// folded lines unfolded), the mark of a mail loop through this host.
pub fn delivered_to(wire: &[u8], addr: &str) -> bool {
    let mut current: Option<String> = None;
    let check = |h: &Option<String>| {
        h.as_deref().is_some_and(|h| {
            h.split_once(':').is_some_and(|(name, value)| {
                name.trim().eq_ignore_ascii_case("delivered-to")
                    && value
                        .trim()
                        .trim_matches(['<', '>'])
                        .eq_ignore_ascii_case(addr)
            })
        })
    };
    for l in lines(wire) {
        if l.is_empty() {
            break;
        }
        let text = String::from_utf8_lossy(l);
        if l[0] == b' ' || l[0] == b'\t' {
            if let Some(h) = current.as_mut() {
                h.push_str(&text);
            }
            continue;
        }
        if check(&current) {
            return true;
        }
        current = Some(text.into_owned());
    }
    check(&current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unstuffing_and_line_ends() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"", b""),
            (b"a\r\nb\r\n", b"a\nb\n"),
            (b"..x\r\n.\r\n..\r\n", b".x\n\n.\n"),
            (b"no end", b"no end\n"),
            (b"bare\rcr\r\n", b"bare\rcr\n"),
            (b"\r\n\r\n", b"\n\n"),
            (b"nul\0byte\r\n", b"nul\0byte\n"),
            (b"lf only\n", b"lf only\n"),
        ];
        for (wire, want) in cases {
            assert_eq!(plain(wire), *want, "{:?}", String::from_utf8_lossy(wire));
        }
    }

    #[test]
    fn mboxrd_quoting() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"From me\r\n", b">From me\n"),
            (b">From me\r\n", b">>From me\n"),
            (b">>From x\r\n", b">>>From x\n"),
            (b"From\r\n", b"From\n"),
            (b" From x\r\n", b" From x\n"),
            (b">From\r\n", b">From\n"),
            (b"from x\r\n", b"from x\n"),
            (b"..From x\r\n", b".From x\n"),
            (b".From x\r\n", b">From x\n"),
        ];
        for (wire, want) in cases {
            assert_eq!(
                mbox_quoted(wire),
                *want,
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
    }

    #[test]
    fn delivered_to_is_found_in_headers_only() {
        let m = b"Subject: x\r\nDelivered-To: Bob@Example.org\r\n\r\nbody\r\n";
        assert!(delivered_to(m, "bob@example.org"));
        assert!(!delivered_to(m, "alice@example.org"));
        let body = b"Subject: x\r\n\r\nDelivered-To: bob@example.org\r\n";
        assert!(!delivered_to(body, "bob@example.org"));
        let folded = b"Delivered-To:\r\n bob@example.org\r\nX: y\r\n\r\n";
        assert!(delivered_to(folded, "bob@example.org"));
        let last = b"Delivered-To: <bob@example.org>";
        assert!(delivered_to(last, "bob@example.org"));
        assert!(!delivered_to(b"\xff\xfe:\0\r\n", "bob@example.org"));
    }
}
