//! Message content: from the queue's wire format to what mailboxes hold.
//!
//! The queue keeps data as it travels in SMTP: CRLF line ends and
//! dot-stuffing. Mailboxes want LF line ends and no stuffing; an mbox also
//! wants `From ` lines quoted (mboxrd: any line matching `^>*From ` gets one
//! more `>`, so readers can undo it). Bare CRs inside a line are kept. A
//! last line without a line end gets one. Nothing here can fail or panic,
//! whatever the bytes.
//!
//! A message is converted a chunk at a time ([`Unwire`]), so a large one
//! is never held whole: the state a line needs (is a CR its line end, was
//! its first byte a dot, has it begun with `>*From `) is carried from one
//! chunk to the next, wherever the chunks are cut.

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

/// Un-dot-stuffed content with LF line ends (Maildir, pipes), at once.
#[cfg(test)]
pub fn plain(wire: &[u8]) -> Vec<u8> {
    Unwire::new(false).all(wire)
}

/// Content for an mbox: un-dot-stuffed, LF line ends, mboxrd quoting, at once.
#[cfg(test)]
pub fn mbox_quoted(wire: &[u8]) -> Vec<u8> {
    Unwire::new(true).all(wire)
}

const FROM: &[u8] = b"From ";

/// Where in its line the converter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing of the line seen yet: a dot here is stuffing.
    Start,
    /// (mbox) Past the `>`s that began the line (passed through, since one
    /// more `>` anywhere in the run is the same line), with this many
    /// bytes of `From ` held back until the quoting is decided.
    Prefix(usize),
    /// The rest of the line: copied through.
    Body,
}

/// Wire format to mailbox format, incrementally: [`Unwire::feed`] each
/// chunk, then [`Unwire::finish`]. The output is what [`plain`] or
/// [`mbox_quoted`] give for the whole, however the input is cut. At most
/// four bytes (a partial `From `) and a CR are held between chunks.
#[derive(Debug, Clone)]
pub struct Unwire {
    quote: bool,
    phase: Phase,
    /// A CR was the last byte: the line end if an LF follows, else content.
    cr: bool,
    /// Some byte of the current line has been seen (it gets a line end
    /// at the end of the data even without one).
    in_line: bool,
}

impl Unwire {
    /// A converter; `quote` adds mboxrd quoting.
    pub fn new(quote: bool) -> Unwire {
        Unwire {
            quote,
            phase: Phase::Start,
            cr: false,
            in_line: false,
        }
    }

    /// Converts the whole of `wire` at once.
    #[cfg(test)]
    pub fn all(mut self, wire: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(wire.len() + 64);
        self.feed(wire, &mut out);
        self.finish(&mut out);
        out
    }

    /// Converts the next chunk, appending to `out`.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        while let Some(&b) = input.first() {
            if self.cr {
                self.cr = false;
                if b == b'\n' {
                    self.end_line(out);
                    input = &input[1..];
                } else {
                    // A bare CR is content; `b` is looked at again.
                    self.content(b'\r', out);
                }
                continue;
            }
            match b {
                b'\r' => {
                    self.cr = true;
                    self.in_line = true;
                    input = &input[1..];
                }
                b'\n' => {
                    self.end_line(out);
                    input = &input[1..];
                }
                _ if self.phase == Phase::Body => {
                    let n = input
                        .iter()
                        .position(|&c| c == b'\r' || c == b'\n')
                        .unwrap_or(input.len());
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                }
                _ => {
                    self.content(b, out);
                    input = &input[1..];
                }
            }
        }
    }

    /// Ends the data: a last line without a line end gets one (a CR
    /// just before the end is taken as that line end, as it is when whole).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.cr = false;
        if self.in_line {
            self.end_line(out);
        }
    }

    /// One byte of a line that is not its line end.
    fn content(&mut self, b: u8, out: &mut Vec<u8>) {
        self.in_line = true;
        let after_start = if self.quote {
            Phase::Prefix(0)
        } else {
            Phase::Body
        };
        match self.phase {
            Phase::Start if b == b'.' => self.phase = after_start,
            Phase::Start => {
                self.phase = after_start;
                self.content(b, out);
            }
            Phase::Prefix(0) if b == b'>' => out.push(b),
            Phase::Prefix(n) if b == FROM[n] => {
                if n + 1 == FROM.len() {
                    out.push(b'>');
                    out.extend_from_slice(FROM);
                    self.phase = Phase::Body;
                } else {
                    self.phase = Phase::Prefix(n + 1);
                }
            }
            Phase::Prefix(n) => {
                out.extend_from_slice(&FROM[..n]);
                out.push(b);
                self.phase = Phase::Body;
            }
            Phase::Body => out.push(b),
        }
    }

    fn end_line(&mut self, out: &mut Vec<u8>) {
        if let Phase::Prefix(n) = self.phase {
            out.extend_from_slice(&FROM[..n]);
        }
        out.push(b'\n');
        self.phase = Phase::Start;
        self.in_line = false;
    }
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

/// An address as it may appear in a header line: no control characters
/// (a peer's CR or LF must not start a header of its own).
pub fn clean(addr: &str) -> String {
    addr.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
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

    /// The line-at-a-time conversion of a whole message, as local did it
    /// before it streamed: what [`Unwire`] must give however it is fed.
    fn reference(wire: &[u8], quote: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for l in lines(wire) {
            let rest = &l[l.iter().take_while(|&&b| b == b'>').count()..];
            if quote && rest.starts_with(b"From ") {
                out.push(b'>');
            }
            out.extend_from_slice(l);
            out.push(b'\n');
        }
        out
    }

    /// `wire` fed in the pieces that `cuts` (ascending offsets) make.
    fn fed(wire: &[u8], quote: bool, cuts: &[usize]) -> Vec<u8> {
        let mut u = Unwire::new(quote);
        let mut out = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain([&wire.len()]) {
            u.feed(&wire[at..c], &mut out);
            at = c;
        }
        u.finish(&mut out);
        out
    }

    /// Every cut into two pieces, and one byte at a time, of inputs where
    /// a cut can fall between CR and LF, after a line-start dot, inside
    /// `From ` and inside a run of `>`.
    #[test]
    fn chunk_boundaries_anywhere_give_the_same_content() {
        let inputs: &[&[u8]] = &[
            b"From me\r\nx\r\n",
            b">>>From deep\r\n>>From\r\n>Fro\r\nFrom",
            b".From dot\r\n..From two\r\n.\r\n..\r\n.",
            b"a\r\r\nb\rc\r\n\r\r\n\r",
            b"\r\nFrom \r\n\rFrom x\r\n>\r>From y\r\n",
            b"Subject: x\r\n\r\nbody\r\nFro",
            b"From",
            b"\r",
            b".\r",
            b"\n\n.\n.From\n",
            b"FFrom x\r\nFromFrom \r\n>>F>rom\r\n",
        ];
        for wire in inputs {
            for quote in [false, true] {
                let want = reference(wire, quote);
                assert_eq!(fed(wire, quote, &[]), want);
                for cut in 0..=wire.len() {
                    assert_eq!(
                        fed(wire, quote, &[cut]),
                        want,
                        "{:?} cut at {cut}, quote {quote}",
                        String::from_utf8_lossy(wire)
                    );
                }
                let every: Vec<usize> = (1..wire.len()).collect();
                assert_eq!(fed(wire, quote, &every), want, "byte by byte");
            }
        }
    }

    /// Pseudo-random messages over the bytes that matter, cut at
    /// pseudo-random places, against the whole-message conversion.
    #[test]
    fn random_messages_in_random_chunks() {
        let alphabet = b"\r\n.>From x";
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let len = (next() % 40) as usize;
            let wire: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let mut cuts: Vec<usize> = (0..next() % 6)
                .map(|_| (next() % (len as u64 + 1)) as usize)
                .collect();
            cuts.sort_unstable();
            for quote in [false, true] {
                assert_eq!(
                    fed(&wire, quote, &cuts),
                    reference(&wire, quote),
                    "{:?} cut at {cuts:?}, quote {quote}",
                    String::from_utf8_lossy(&wire)
                );
            }
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
