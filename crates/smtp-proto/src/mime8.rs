//! 8-bit to 7-bit MIME downgrade for a server without 8BITMIME (RFC 6152).
//!
//! A streaming transformer in the manner of Postfix's `mime_state.c` with
//! `MIME_OPT_DOWNGRADE`: message content (CRLF lines, not dot-stuffed) goes
//! in with [`Downgrader::push`] in pieces of any size and comes out with
//! every MIME part that declares an 8-bit domain (`Content-Transfer-Encoding:
//! 8bit` or `binary`) re-encoded as quoted-printable, its
//! Content-Transfer-Encoding header replaced at the end of the part's
//! headers (`quoted-printable` for a leaf, `7bit` for multipart and
//! message, whose own parts are walked instead). Multipart bodies are
//! followed through their boundaries, message/rfc822 parts into their
//! headers. As Postfix does, and only that:
//! - a part is judged by what it declares: one without the header is 7-bit
//!   and passes as it is, 8-bit bytes and all (Postfix adds no MIME headers
//!   to a message that has none), as does one already in base64 or
//!   quoted-printable;
//! - headers pass unchanged, 8-bit bytes included;
//! - multipart/signed is converted like any other (its signature breaks; so
//!   does a DKIM signature over a converted body);
//! - quoted-printable lines get a soft break once past 72 characters (never
//!   more than 76), and end whitespace as `=20` / `=09`.
//!
//! Unlike Postfix, a primary header ended by a line that is neither a
//! header nor empty gets no empty line put before that line.
//!
//! Content that the walk leaves alone comes out byte for byte as it went
//! in. Memory is bounded: a line is handled in segments of at most
//! [`SEGMENT`] bytes (a longer one is quoted across segments, its boundary
//! test made on the first), one header of at most [`HEADER_LIMIT`] bytes
//! is held to be parsed (a longer one passes unparsed), and at most
//! [`NESTING_LIMIT`] multipart levels are followed; one more is
//! [`MimeError::Nesting`], which Postfix's smtp client bounces with 5.6.0.
//! Nothing here logs or panics.

use crate::mime::{is_header, tokenize, Boundaries, BoundaryLine, Ctype, Stype, Tok};
use crate::reply::StatusCode;

/// Longest piece of a line handled at once.
pub const SEGMENT: usize = 4096;
/// Longest header (with its continuation lines) parsed (Postfix's
/// `header_size_limit` default).
pub const HEADER_LIMIT: usize = 102_400;
pub use crate::mime::{BOUNDARY_LIMIT, NESTING_LIMIT};
/// Quoted-printable output length after which a soft break goes in.
const QP_BREAK: usize = 72;

/// Why content cannot be downgraded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MimeError {
    /// More multipart levels than [`NESTING_LIMIT`].
    Nesting,
}

impl MimeError {
    /// The status and text Postfix's smtp client gives the recipients.
    pub fn status(self) -> (StatusCode, &'static str) {
        match self {
            MimeError::Nesting => (
                StatusCode::known(5, 6, 0),
                "MIME nesting exceeds safety limit",
            ),
        }
    }
}

/// Where the walk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// The message's own headers.
    Primary,
    /// A part's headers after a boundary.
    Multipart,
    /// The headers of a message/rfc822 part.
    Nested,
    /// Body text.
    Body,
}

/// The streaming 8-bit to quoted-printable converter (see the module docs).
#[derive(Debug)]
pub struct Downgrader {
    /// Input not yet handled: at most one segment, no LF in it.
    line: Vec<u8>,
    /// The last record handled ended inside a line.
    cont: bool,
    state: State,
    ctype: Ctype,
    stype: Stype,
    /// The current part's content declares an 8-bit domain.
    eight: bool,
    stack: Boundaries,
    /// The header being collected, as it came (terminators included).
    header: Vec<u8>,
    /// The header did not fit [`HEADER_LIMIT`]: it went out unparsed.
    header_passing: bool,
    /// The quoted-printable line being built.
    qp: Vec<u8>,
    /// Parts whose content was converted.
    converted: u64,
    error: Option<MimeError>,
}

impl Default for Downgrader {
    fn default() -> Self {
        Self::new()
    }
}

impl Downgrader {
    /// A converter at the start of a message.
    pub fn new() -> Self {
        Self {
            line: Vec::new(),
            cont: false,
            state: State::Primary,
            ctype: Ctype::Text,
            stype: Stype::Other,
            eight: false,
            stack: Boundaries::default(),
            header: Vec::new(),
            header_passing: false,
            qp: Vec::new(),
            converted: 0,
            error: None,
        }
    }

    /// How many parts had their content converted so far.
    pub fn converted(&self) -> u64 {
        self.converted
    }

    /// Converts `input`, appending what is ready to `out`; after an error
    /// nothing more comes out.
    pub fn push(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), MimeError> {
        while !input.is_empty() {
            if let Some(e) = self.error {
                return Err(e);
            }
            let room = SEGMENT - self.line.len();
            let take = input.len().min(room);
            match input[..take].iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.line.extend_from_slice(&input[..=i]);
                    input = &input[i + 1..];
                    let line = std::mem::take(&mut self.line);
                    let body = line.len() - 1 - usize::from(line.ends_with(b"\r\n"));
                    self.record(&line[..body], &line, true, out);
                    self.line = line;
                    self.line.clear();
                }
                None => {
                    self.line.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    if self.line.len() == SEGMENT {
                        // A CR at the end may start the CR LF: it waits.
                        let keep = usize::from(self.line.ends_with(b"\r"));
                        let seg: Vec<u8> = self.line.drain(..SEGMENT - keep).collect();
                        self.record(&seg, &seg, false, out);
                    }
                }
            }
        }
        self.error.map_or(Ok(()), Err)
    }

    /// Ends the content: a last line without CR LF gets one, as Postfix's
    /// walk ends it, and a header still held goes out.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), MimeError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if !self.line.is_empty() {
            let seg = std::mem::take(&mut self.line);
            self.record(&seg, &seg, false, out);
        }
        if self.cont {
            self.record(b"", b"\r\n", true, out);
        }
        if self.state != State::Body {
            self.end_header(out);
            self.end_headers(out);
            self.state = State::Body;
        }
        self.error.map_or(Ok(()), Err)
    }

    /// One record: `text` without its line end, `raw` as it came; `norm`
    /// when it ends a line (else the line goes on in the next record).
    fn record(&mut self, text: &[u8], raw: &[u8], norm: bool, out: &mut Vec<u8>) {
        let prev_cont = self.cont;
        self.cont = !norm;
        if self.state != State::Body {
            if self.header_open() {
                if prev_cont || matches!(text.first(), Some(b' ' | b'\t')) {
                    self.add_header(raw, out);
                    return;
                }
                self.end_header(out);
            }
            if is_header(text) {
                self.add_header(raw, out);
                return;
            }
            self.end_headers(out);
            if text.is_empty() && norm {
                match (self.ctype, self.stype) {
                    (Ctype::Message, Stype::Rfc822) => self.set(State::Nested, Ctype::Text),
                    (Ctype::Message, Stype::Global) if !self.eight => {
                        self.set(State::Nested, Ctype::Text)
                    }
                    (Ctype::Multipart, _) => self.set(State::Body, Ctype::Other),
                    _ => self.state = State::Body,
                }
            } else {
                // Postfix's walk puts an empty line before it in the primary
                // header; left out, so that content with nothing to convert
                // comes out as it went in (a DKIM signature over it holds).
                // A converted part has a new header written just now: the
                // line must not read as its continuation.
                if self.eight {
                    out.extend_from_slice(b"\r\n");
                }
                self.state = State::Body;
            }
        }
        if self.state == State::Body && !prev_cont && self.stack.may_be(text) {
            self.boundary(&text[2..]);
        }
        if self.eight && self.state == State::Body {
            self.quote(text, norm, out);
        } else {
            out.extend_from_slice(raw);
        }
    }

    /// A line that starts with `--` and what follows it: a boundary of an
    /// open multipart ends the parts inside it.
    fn boundary(&mut self, rest: &[u8]) {
        match self.stack.line(rest) {
            None => {}
            Some(BoundaryLine::End) => self.set(State::Body, Ctype::Other),
            Some(BoundaryLine::Part(ctype, stype)) => {
                self.set(State::Multipart, ctype);
                self.stype = stype;
            }
        }
    }

    fn set(&mut self, state: State, ctype: Ctype) {
        self.state = state;
        self.ctype = ctype;
        self.stype = Stype::Other;
        self.eight = false;
    }

    fn header_open(&self) -> bool {
        !self.header.is_empty() || self.header_passing
    }

    fn add_header(&mut self, raw: &[u8], out: &mut Vec<u8>) {
        if self.header_passing {
            out.extend_from_slice(raw);
        } else if self.header.len() + raw.len() > HEADER_LIMIT {
            // Too long to parse: it goes out as it is.
            out.append(&mut self.header);
            out.extend_from_slice(raw);
            self.header_passing = true;
        } else {
            self.header.extend_from_slice(raw);
        }
    }

    /// A complete header: parsed for the walk, and written unless it is the
    /// Content-Transfer-Encoding that conversion replaces.
    fn end_header(&mut self, out: &mut Vec<u8>) {
        self.header_passing = false;
        if self.header.is_empty() {
            return;
        }
        let header = std::mem::take(&mut self.header);
        let colon = header.iter().position(|&b| b == b':').unwrap_or(0);
        let name = header[..colon].trim_ascii_end();
        let value = &header[colon + 1..];
        let mut cte = false;
        if name.eq_ignore_ascii_case(b"content-type") {
            self.content_type(value);
        } else if name.eq_ignore_ascii_case(b"content-transfer-encoding") {
            cte = true;
            let tokens = tokenize(value);
            if let Some(Tok::Word(w)) = tokens.first() {
                let w = w.as_slice();
                for (known, eight) in [
                    (&b"7bit"[..], false),
                    (b"8bit", true),
                    (b"binary", true),
                    (b"base64", false),
                    (b"quoted-printable", false),
                ] {
                    // Once one says 8-bit the part is converted, whatever
                    // a later one says: every one of them is then dropped
                    // (a later "7bit" kept would let 8-bit bytes through,
                    // an earlier one dropped would leave two).
                    if w.eq_ignore_ascii_case(known) {
                        self.eight |= eight;
                    }
                }
            }
        }
        if !(cte && self.eight) {
            out.extend_from_slice(&header);
        }
        self.header = header;
        self.header.clear();
    }

    /// The end of a header block: the replacement Content-Transfer-Encoding.
    fn end_headers(&mut self, out: &mut Vec<u8>) {
        if !self.eight {
            return;
        }
        let domain = matches!(
            (self.ctype, self.stype),
            (Ctype::Multipart, _) | (Ctype::Message, Stype::Rfc822 | Stype::Other)
        );
        out.extend_from_slice(if domain {
            &b"Content-Transfer-Encoding: 7bit\r\n"[..]
        } else {
            self.converted += 1;
            b"Content-Transfer-Encoding: quoted-printable\r\n"
        });
    }

    fn content_type(&mut self, value: &[u8]) {
        let ct = crate::mime::content_type(value);
        self.ctype = ct.ctype;
        if ct.ctype == Ctype::Message {
            self.stype = ct.stype;
        }
        if !self.stack.open(&ct) {
            self.error = Some(MimeError::Nesting);
        }
    }

    /// Quoted-printable for one record of converted content.
    fn quote(&mut self, text: &[u8], norm: bool, out: &mut Vec<u8>) {
        for &ch in text {
            if self.qp.len() > QP_BREAK {
                self.qp.push(b'=');
                out.extend_from_slice(&self.qp);
                out.extend_from_slice(b"\r\n");
                self.qp.clear();
            }
            if (ch < 32 && ch != b'\t') || ch == b'=' || ch > 126 {
                hex(ch, &mut self.qp);
            } else {
                self.qp.push(ch);
            }
        }
        if norm {
            if let Some(&ch @ (b' ' | b'\t')) = self.qp.last() {
                self.qp.pop();
                hex(ch, &mut self.qp);
            }
            out.extend_from_slice(&self.qp);
            out.extend_from_slice(b"\r\n");
            self.qp.clear();
        }
    }
}

fn hex(ch: u8, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.extend_from_slice(&[b'=', HEX[usize::from(ch >> 4)], HEX[usize::from(ch & 15)]]);
}

/// Dot-stuffs `plain` onto `out` for DATA: a dot that starts a line gets
/// another. `mid_line` says whether the previous piece ended inside a
/// line; the same for this one is returned.
pub fn stuff(plain: &[u8], mut mid_line: bool, out: &mut Vec<u8>) -> bool {
    for &b in plain {
        if b == b'.' && !mid_line {
            out.push(b'.');
        }
        out.push(b);
        mid_line = b != b'\n';
    }
    mid_line
}

#[cfg(test)]
#[path = "mime8_tests.rs"]
mod tests;
