//! Canonicalization (RFC 6376 section 3.4), `simple` and `relaxed`, of
//! header fields and of the body.
//!
//! The body is canonicalized as it streams, from the wire form cleanup
//! stores (CRLF line ends, dot-stuffed): the stuffing dot at the start of
//! a line is dropped, since a verifier sees the message after the SMTP
//! layer removed it. Output goes to the hash through a small staging
//! array, so the body is never copied whole; empty lines are only counted
//! until something follows them, since those at the end do not count.

use ring::digest;

/// `simple` or `relaxed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canon {
    /// Bytes as they are (bodies: trailing empty lines dropped).
    Simple,
    /// White space runs folded to one space, trailing white space dropped;
    /// header names in lower case and header values unfolded.
    Relaxed,
}

impl Canon {
    /// Its name in `c=`.
    pub fn name(self) -> &'static str {
        match self {
            Canon::Simple => "simple",
            Canon::Relaxed => "relaxed",
        }
    }
}

const STAGE: usize = 4096;

/// The body hash being computed, fed wire-form bytes.
pub struct BodyHasher {
    canon: Canon,
    ctx: digest::Context,
    stage: [u8; STAGE],
    staged: usize,
    /// Empty lines seen and not emitted yet.
    blank: u64,
    /// The current line has had content (emitted or about to be).
    content: bool,
    /// Relaxed: white space seen since the last content byte of the line.
    wsp: bool,
    /// A CR was the last byte: a line end if LF follows.
    cr: bool,
    /// At the start of a line (where a stuffing dot may be).
    line_start: bool,
    /// Anything was emitted.
    any: bool,
}

impl std::fmt::Debug for BodyHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyHasher")
            .field("canon", &self.canon)
            .finish_non_exhaustive()
    }
}

impl BodyHasher {
    /// A hasher for a body canonicalized `canon`, with SHA-256.
    pub fn new(canon: Canon) -> Self {
        BodyHasher {
            canon,
            ctx: digest::Context::new(&digest::SHA256),
            stage: [0; STAGE],
            staged: 0,
            blank: 0,
            content: false,
            wsp: false,
            cr: false,
            line_start: true,
            any: false,
        }
    }

    fn emit(&mut self, b: u8) {
        if self.staged == STAGE {
            self.ctx.update(&self.stage);
            self.staged = 0;
        }
        self.stage[self.staged] = b;
        self.staged += 1;
        self.any = true;
    }

    fn byte(&mut self, b: u8) {
        if self.line_start {
            self.line_start = false;
            if b == b'.' {
                return;
            }
        }
        if self.canon == Canon::Relaxed && (b == b' ' || b == b'\t') {
            self.wsp = true;
            return;
        }
        if !self.content {
            self.content = true;
            for _ in 0..std::mem::take(&mut self.blank) {
                self.emit(b'\r');
                self.emit(b'\n');
            }
        }
        if std::mem::take(&mut self.wsp) {
            self.emit(b' ');
        }
        self.emit(b);
    }

    fn end_line(&mut self) {
        if self.content {
            self.emit(b'\r');
            self.emit(b'\n');
        } else {
            self.blank += 1;
        }
        self.content = false;
        self.wsp = false;
        self.line_start = true;
    }

    fn emit_run(&mut self, run: &[u8]) {
        if self.staged + run.len() <= STAGE {
            self.stage[self.staged..self.staged + run.len()].copy_from_slice(run);
            self.staged += run.len();
        } else {
            self.ctx.update(&self.stage[..self.staged]);
            self.staged = 0;
            self.ctx.update(run);
        }
        self.any = true;
    }

    fn special(&self, b: u8) -> bool {
        b == b'\r' || b == b'\n' || self.canon == Canon::Relaxed && (b == b' ' || b == b'\t')
    }

    /// Feeds body bytes (wire form, from just after the empty line).
    pub fn update(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            // Inside a line that has content, with nothing pending, ordinary
            // bytes go to the hash as a run rather than one at a time.
            if self.content && !self.cr && !self.wsp && !self.line_start && !self.special(b) {
                // A single space between ordinary bytes stays as it is in
                // relaxed form too, so most lines of text are one run.
                let mut j = i;
                while j < bytes.len() {
                    let c = bytes[j];
                    if !self.special(c) {
                        j += 1;
                    } else if c == b' ' && bytes.get(j + 1).is_some_and(|&d| !self.special(d)) {
                        j += 2;
                    } else {
                        break;
                    }
                }
                self.emit_run(&bytes[i..j]);
                i = j;
                continue;
            }
            i += 1;
            match b {
                b'\n' if self.cr => {
                    self.cr = false;
                    self.end_line();
                }
                b'\r' => {
                    if self.cr {
                        self.byte(b'\r');
                    }
                    self.cr = true;
                }
                _ => {
                    if std::mem::take(&mut self.cr) {
                        self.byte(b'\r');
                    }
                    self.byte(b);
                }
            }
        }
    }

    /// The body hash.
    pub fn finish(&mut self) -> digest::Digest {
        if std::mem::take(&mut self.cr) {
            self.byte(b'\r');
        }
        if self.content {
            self.end_line();
        }
        if !self.any && self.canon == Canon::Simple {
            self.emit(b'\r');
            self.emit(b'\n');
        }
        self.ctx.update(&self.stage[..self.staged]);
        self.staged = 0;
        self.ctx.clone().finish()
    }
}

/// One header field of a header block: its name and its whole text,
/// continuation lines and final CRLF included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    /// The name, as written.
    pub name: &'a [u8],
    /// The field, CRLF included.
    pub raw: &'a [u8],
}

/// The fields of a header block (lines ending in CRLF); text that is not
/// a field (no colon) is skipped.
pub fn fields(block: &[u8]) -> Vec<Field<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < block.len() {
        let end = match find_crlf(&block[i..]) {
            Some(n) => i + n + 2,
            None => block.len(),
        };
        let next_continues = matches!(block.get(end), Some(b' ' | b'\t'));
        i = end;
        if next_continues {
            continue;
        }
        let raw = &block[start..end];
        if let Some(colon) = raw.iter().position(|&b| b == b':') {
            let name = trim_wsp_end(&raw[..colon]);
            if !name.is_empty() {
                out.push(Field { name, raw });
            }
        }
        start = end;
    }
    out
}

fn find_crlf(s: &[u8]) -> Option<usize> {
    s.windows(2).position(|w| w == b"\r\n")
}

fn trim_wsp_end(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(0, |p| p + 1);
    &s[..n]
}

/// Appends the canonical form of one header field (`raw` with or without
/// its final CRLF) to `out`, with a final CRLF when `crlf`.
pub fn header(canon: Canon, raw: &[u8], out: &mut Vec<u8>, crlf: bool) {
    let raw = raw.strip_suffix(b"\r\n").unwrap_or(raw);
    match canon {
        Canon::Simple => out.extend_from_slice(raw),
        Canon::Relaxed => {
            let colon = raw.iter().position(|&b| b == b':').unwrap_or(raw.len());
            out.extend(
                trim_wsp_end(&raw[..colon])
                    .iter()
                    .map(u8::to_ascii_lowercase),
            );
            out.push(b':');
            let value = raw.get(colon + 1..).unwrap_or(&[]);
            let mut wsp = false;
            let mut started = false;
            for &b in value {
                match b {
                    b'\r' | b'\n' => {}
                    b' ' | b'\t' => wsp = true,
                    _ => {
                        if wsp && started {
                            out.push(b' ');
                        }
                        wsp = false;
                        started = true;
                        out.push(b);
                    }
                }
            }
        }
    }
    if crlf {
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(canon: Canon, chunks: &[&[u8]]) -> Vec<u8> {
        // The reference: hash of the expected canonical text.
        let mut h = BodyHasher::new(canon);
        for c in chunks {
            h.update(c);
        }
        h.finish().as_ref().to_vec()
    }

    fn sha(s: &[u8]) -> Vec<u8> {
        digest::digest(&digest::SHA256, s).as_ref().to_vec()
    }

    #[test]
    fn rfc6376_section_3_4_5_example() {
        let wire: &[u8] = b" C \r\nD \t E\r\n\r\n\r\n";
        assert_eq!(body(Canon::Relaxed, &[wire]), sha(b" C\r\nD E\r\n"));
        assert_eq!(body(Canon::Simple, &[wire]), sha(b" C \r\nD \t E\r\n"));
        let mut out = Vec::new();
        header(Canon::Relaxed, b"A: X\r\n", &mut out, true);
        header(Canon::Relaxed, b"B : Y\t\r\n\tZ  \r\n", &mut out, true);
        assert_eq!(out, b"a:X\r\nb:Y Z\r\n");
    }

    #[test]
    fn empty_bodies() {
        assert_eq!(body(Canon::Simple, &[]), sha(b"\r\n"));
        assert_eq!(body(Canon::Relaxed, &[]), sha(b""));
        assert_eq!(body(Canon::Simple, &[b"\r\n\r\n"]), sha(b"\r\n"));
        assert_eq!(body(Canon::Relaxed, &[b" \r\n\t\r\n"]), sha(b""));
    }

    #[test]
    fn chunk_boundaries_do_not_matter() {
        let wire: &[u8] =
            b"Hi  there \r\n..dots\r\n.\tx\r\n\r\n \r\nend\r\r\n8bit \xc3\xa9\r\n\r\n\r\n";
        for canon in [Canon::Simple, Canon::Relaxed] {
            let whole = body(canon, &[wire]);
            for cut in 0..wire.len() {
                assert_eq!(
                    body(canon, &[&wire[..cut], &wire[cut..]]),
                    whole,
                    "cut {cut}"
                );
            }
            let bytes: Vec<&[u8]> = wire.chunks(1).collect();
            assert_eq!(body(canon, &bytes), whole);
        }
        assert_eq!(
            body(Canon::Relaxed, &[wire]),
            sha(b"Hi there\r\n.dots\r\n x\r\n\r\n\r\nend\r\r\n8bit \xc3\xa9\r\n")
        );
    }

    #[test]
    fn unterminated_last_line_gets_crlf() {
        assert_eq!(body(Canon::Simple, &[b"a\r\nb"]), sha(b"a\r\nb\r\n"));
        assert_eq!(body(Canon::Relaxed, &[b"a\r\nb  "]), sha(b"a\r\nb\r\n"));
    }

    #[test]
    fn fields_are_split_with_their_continuations() {
        let block = b"From: a@b\r\nSubject: one\r\n two\r\nX:y\r\n";
        let f = fields(block);
        assert_eq!(f.len(), 3);
        assert_eq!(f[1].name, b"Subject");
        assert_eq!(f[1].raw, b"Subject: one\r\n two\r\n");
        assert_eq!(f[2].raw, b"X:y\r\n");
    }
}
