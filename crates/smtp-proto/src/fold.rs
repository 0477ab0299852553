//! Breaking content lines longer than `smtp_line_length_limit`, as Postfix's
//! smtp client does (`smtp_text_out` in `src/smtp/smtp_proto.c`).
//!
//! A line of more than `limit` bytes is sent as `limit` bytes, CR LF and a
//! SPACE, then at most `limit - 1` further bytes, and so on: header lines
//! become folded header lines, body lines get a space where they were
//! broken. A line of exactly `limit` bytes goes as it is. The count leaves
//! out the CR LF and, in dot-stuffed content, the stuffing dot (Postfix
//! counts the line as queued, then adds the dot). The input is streamed in
//! chunks of any size; a CR is only known to end a line once the next byte
//! is seen, so one at the end of a chunk is held until then (or until
//! [`Folder::finish`]). Limits: none beyond the caller's buffers; never panics.

/// The position in the content, carried from one chunk to the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Folder {
    /// Longest line sent, in bytes; 0 for no limit.
    limit: usize,
    /// Bytes of the current output line so far (without a stuffing dot).
    col: usize,
    /// The next byte starts an input line (so a dot there is stuffing).
    at_start: bool,
    /// A CR that ended the last chunk, not yet written.
    held_cr: bool,
    /// Breaks inserted so far.
    broken: u64,
}

impl Folder {
    /// A folder at the start of the content; `limit` 0 folds nothing.
    pub fn new(limit: usize) -> Folder {
        Folder {
            limit,
            at_start: true,
            ..Folder::default()
        }
    }

    /// True when no line is ever broken.
    pub fn is_off(&self) -> bool {
        self.limit == 0
    }

    /// How many breaks were inserted so far (Postfix logs the first).
    pub fn broken(&self) -> u64 {
        self.broken
    }

    /// Follows `input` without writing: true when it can be sent as it is
    /// (no line in it needs breaking and no CR is left held). On false the
    /// folder is as it was, for [`Folder::fold`] to write the same input.
    pub fn passes(&mut self, input: &[u8], stuffed: bool) -> bool {
        if self.is_off() {
            return true;
        }
        if self.held_cr {
            return false;
        }
        let before = *self;
        let mut sink = Vec::new();
        let mut changed = false;
        self.run(input, stuffed, &mut sink, &mut changed, false);
        if changed || self.held_cr {
            *self = before;
            return false;
        }
        true
    }

    /// Appends `input` to `out` with long lines broken. `stuffed`: the input
    /// is dot-stuffed (a dot that starts a line is stuffing and not counted).
    pub fn fold(&mut self, input: &[u8], stuffed: bool, out: &mut Vec<u8>) {
        if self.is_off() {
            out.extend_from_slice(input);
            return;
        }
        let mut changed = false;
        self.run(input, stuffed, out, &mut changed, true);
    }

    /// Writes a CR still held at the end of the content.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.held_cr {
            self.held_cr = false;
            self.data(b'\r', out, &mut false, true);
        }
    }

    fn run(
        &mut self,
        input: &[u8],
        stuffed: bool,
        out: &mut Vec<u8>,
        changed: &mut bool,
        write: bool,
    ) {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            if self.held_cr {
                self.held_cr = false;
                if b == b'\n' {
                    self.line_end(b"\r\n", out, write);
                    i += 1;
                    continue;
                }
                self.data(b'\r', out, changed, write);
            }
            match b {
                b'\r' => self.held_cr = true,
                b'\n' => self.line_end(b"\n", out, write),
                b'.' if stuffed && self.at_start => {
                    self.at_start = false;
                    if write {
                        out.push(b'.');
                    }
                }
                _ => {
                    // The bytes up to the line's end go as one run when
                    // they fit (nearly always): this is every message's path.
                    let end = input[i..]
                        .iter()
                        .position(|&c| c == b'\r' || c == b'\n')
                        .map_or(input.len(), |p| i + p);
                    let run = &input[i..end];
                    if run.len() <= self.limit.saturating_sub(self.col) {
                        self.at_start = false;
                        self.col += run.len();
                        if write {
                            out.extend_from_slice(run);
                        }
                    } else {
                        for &c in run {
                            self.data(c, out, changed, write);
                        }
                    }
                    i = end;
                    continue;
                }
            }
            i += 1;
        }
    }

    fn line_end(&mut self, end: &[u8], out: &mut Vec<u8>, write: bool) {
        if write {
            out.extend_from_slice(end);
        }
        self.col = 0;
        self.at_start = true;
    }

    fn data(&mut self, b: u8, out: &mut Vec<u8>, changed: &mut bool, write: bool) {
        self.at_start = false;
        if self.col >= self.limit {
            // A full line with more to come: break it with CR LF SPACE.
            *changed = true;
            self.broken += 1;
            if write {
                out.extend_from_slice(b"\r\n ");
            }
            self.col = 1;
        }
        if write {
            out.push(b);
        }
        self.col += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Folds `input` in chunks of `step` bytes.
    fn fold(limit: usize, input: &[u8], stuffed: bool, step: usize) -> Vec<u8> {
        let mut f = Folder::new(limit);
        let mut out = Vec::new();
        for c in input.chunks(step.max(1)) {
            f.fold(c, stuffed, &mut out);
        }
        f.finish(&mut out);
        out
    }

    fn longest(wire: &[u8]) -> usize {
        wire.split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l).len())
            .max()
            .unwrap_or(0)
    }

    /// Undoes the folding: the text as it was.
    fn unfold(wire: &[u8]) -> Vec<u8> {
        let s = String::from_utf8_lossy(wire).replace("\r\n ", "");
        s.into_bytes()
    }

    #[test]
    fn lines_are_broken_as_postfix_breaks_them() {
        let a = |n: usize| "a".repeat(n);
        let cases: &[(usize, String, String)] = &[
            // Exactly the limit: as it is.
            (10, format!("{}\r\n", a(10)), format!("{}\r\n", a(10))),
            // One more: limit bytes, CR LF SPACE, the rest.
            (10, format!("{}\r\n", a(11)), format!("{}\r\n a\r\n", a(10))),
            // Continuations carry limit - 1 bytes after their space.
            (
                10,
                format!("{}\r\n", a(10 + 9 + 9)),
                format!("{}\r\n {}\r\n {}\r\n", a(10), a(9), a(9)),
            ),
            (
                10,
                format!("{}\r\n", a(10 + 9 + 1)),
                format!("{}\r\n {}\r\n a\r\n", a(10), a(9)),
            ),
            // A header line becomes a folded header.
            (
                12,
                "Subject: abcdefghij\r\n\r\nbody\r\n".into(),
                "Subject: abc\r\n defghij\r\n\r\nbody\r\n".into(),
            ),
            // No limit.
            (0, format!("{}\r\n", a(3000)), format!("{}\r\n", a(3000))),
            // Without a final line end.
            (4, "abcdef".into(), "abcd\r\n ef".into()),
        ];
        for (limit, input, want) in cases {
            for step in [1, 2, 3, 7, 4096] {
                let got = fold(*limit, input.as_bytes(), true, step);
                assert_eq!(
                    String::from_utf8_lossy(&got),
                    *want,
                    "limit {limit} step {step}"
                );
            }
        }
    }

    #[test]
    fn a_3000_byte_line_fits_the_limit_and_unfolds_to_itself() {
        let line: String = (0..3000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let input = format!("Subject: x\r\n\r\n{line}\r\nend\r\n");
        for step in [1, 500, 998, 4096] {
            let got = fold(998, input.as_bytes(), true, step);
            assert!(longest(&got) <= 998, "step {step}");
            assert_eq!(unfold(&got), input.as_bytes(), "step {step}");
            // 998 + 997 + 997 + 8
            assert_eq!(got.windows(3).filter(|w| w == b"\r\n ").count(), 3);
        }
    }

    #[test]
    fn a_stuffing_dot_is_not_counted_and_stays_first() {
        // "..." on the wire is ".." as queued: the limit counts what follows
        // the stuffing dot, and a continuation starts with its space.
        let got = fold(4, b"..abcdef\r\n.\r\n", true, 1);
        assert_eq!(got, b"..abc\r\n def\r\n.\r\n");
        // Unstuffed (BDAT) content: every dot counts.
        let got = fold(4, b".abcdef\r\n", false, 1);
        assert_eq!(got, b".abc\r\n def\r\n");
    }

    #[test]
    fn a_cr_at_the_end_of_a_chunk_waits_for_the_next_byte() {
        let mut f = Folder::new(3);
        let mut out = Vec::new();
        assert!(f.passes(b"abc", true));
        assert!(!f.passes(b"\r", true), "a held CR must be written by fold");
        f.fold(b"\r", true, &mut out);
        assert!(
            !f.passes(b"\nabc\r\n", true),
            "the held CR is not written yet"
        );
        f.fold(b"\nabc\r\n", true, &mut out);
        assert_eq!(out, b"\r\nabc\r\n");
        assert!(f.passes(b"abc", true));
        let before = f;
        assert!(!f.passes(b"abcd", true));
        assert_eq!(f, before, "unchanged after a refusal");
        out.clear();
        let mut f = Folder::new(3);
        f.fold(b"abc\r", true, &mut out);
        f.fold(b"x", true, &mut out);
        f.finish(&mut out);
        assert_eq!(out, b"abc\r\n \rx");
    }

    /// The folding rule one byte at a time, as written before runs of
    /// bytes were copied whole: the reference the fast path must match.
    fn reference(limit: usize, input: &[u8], stuffed: bool) -> Vec<u8> {
        let (mut out, mut col, mut at_start) = (Vec::new(), 0usize, true);
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            if b == b'\r' && input.get(i + 1) == Some(&b'\n') || b == b'\n' {
                let end: &[u8] = if b == b'\n' { b"\n" } else { b"\r\n" };
                out.extend_from_slice(end);
                i += end.len();
                (col, at_start) = (0, true);
                continue;
            }
            if b == b'.' && stuffed && at_start {
                out.push(b'.');
            } else {
                if col >= limit {
                    out.extend_from_slice(b"\r\n ");
                    col = 1;
                }
                out.push(b);
                col += 1;
            }
            at_start = false;
            i += 1;
        }
        out
    }

    #[test]
    fn runs_copied_whole_fold_as_byte_by_byte() {
        // A small generator (no dependency): lines of every length around
        // the limit, dots, lone CRs and LFs, cut at every step size.
        let mut seed = 0x2545_f491_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for round in 0..300 {
            let limit = 1 + (next() % 12) as usize;
            let mut input = Vec::new();
            for _ in 0..(next() % 8) {
                if next() % 3 == 0 {
                    input.push(b'.');
                }
                for _ in 0..(next() % 30) {
                    input.push(match next() % 20 {
                        0 => b'\r',
                        1 => b'.',
                        _ => b'a',
                    });
                }
                input.extend_from_slice(if next() % 5 == 0 { b"\n" } else { b"\r\n" });
            }
            for stuffed in [true, false] {
                let want = reference(limit, &input, stuffed);
                for step in [1, 2, 3, 7, 64] {
                    let got = fold(limit, &input, stuffed, step);
                    assert_eq!(
                        String::from_utf8_lossy(&got),
                        String::from_utf8_lossy(&want),
                        "round {round} limit {limit} stuffed {stuffed} step {step}"
                    );
                }
            }
        }
    }
}
