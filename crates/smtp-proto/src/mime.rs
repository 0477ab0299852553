//! The MIME structure of message content, sans-IO: which lines are
//! headers (of the message, of a MIME part, of an attached message) and
//! which are body, as Postfix's `mime_state.c` tells them apart.
//!
//! [`Walker`] takes content one record at a time (a line, or a piece of
//! a long one) and says what each record is; a header comes back whole,
//! with its continuation lines, once the record after it shows that it
//! ended. Multipart bodies are followed through their boundaries (every
//! `boundary` parameter counts, as in Postfix), message/rfc822 parts
//! into their headers, multipart/digest parts default to message/rfc822.
//!
//! Memory is bounded as in Postfix: a header keeps records only while it
//! is shorter than the header limit (`header_size_limit`); later records
//! of it are dropped and the header is marked truncated; at most
//! [`NESTING_LIMIT`] multipart levels are followed and a boundary keeps
//! at most [`BOUNDARY_LIMIT`] bytes. The parsing helpers ([`is_header`],
//! [`content_type`]) are shared with the 8BITMIME downgrade (`mime8`).

/// Deepest multipart nesting followed (Postfix's `mime_nesting_limit`).
pub const NESTING_LIMIT: usize = 100;
/// Longest boundary kept for matching (Postfix's `mime_boundary_length_limit`).
pub const BOUNDARY_LIMIT: usize = 2048;

/// Content-Type as far as a walk cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctype {
    /// text/*, and the default.
    Text,
    /// message/*.
    Message,
    /// multipart/*.
    Multipart,
    /// Anything else.
    Other,
}

/// The message/* subtypes that matter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stype {
    /// message/rfc822.
    Rfc822,
    /// message/global (RFC 6532).
    Global,
    /// Any other subtype.
    Other,
}

/// A parsed Content-Type value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentType {
    /// The type.
    pub ctype: Ctype,
    /// The subtype, for message/*.
    pub stype: Stype,
    /// For multipart/*: every boundary parameter, cut to [`BOUNDARY_LIMIT`].
    pub boundaries: Vec<Vec<u8>>,
    /// For multipart/*: the type of its parts that declare none.
    pub parts: (Ctype, Stype),
}

/// Parses a Content-Type header's value (after the colon).
pub fn content_type(value: &[u8]) -> ContentType {
    let tokens = tokenize(value);
    let mut groups = tokens.split(|t| *t == Tok::Special(b';'));
    let first = groups.next().unwrap_or(&[]);
    let word = |i: usize, w: &str| matches!(first.get(i), Some(Tok::Word(v)) if v.eq_ignore_ascii_case(w.as_bytes()));
    let slash = first.get(1) == Some(&Tok::Special(b'/'));
    let mut ct = ContentType {
        ctype: Ctype::Other,
        stype: Stype::Other,
        boundaries: Vec::new(),
        parts: (Ctype::Text, Stype::Other),
    };
    if word(0, "text") {
        ct.ctype = Ctype::Text;
    } else if word(0, "message") {
        ct.ctype = Ctype::Message;
        ct.stype = if slash && word(2, "rfc822") {
            Stype::Rfc822
        } else if slash && word(2, "global") {
            Stype::Global
        } else {
            Stype::Other
        };
    } else if word(0, "multipart") {
        ct.ctype = Ctype::Multipart;
        if slash && word(2, "digest") {
            ct.parts = (Ctype::Message, Stype::Rfc822);
        }
        for group in groups {
            if let [Tok::Word(n), Tok::Special(b'='), Tok::Word(v) | Tok::Quoted(v), ..] = group {
                if n.eq_ignore_ascii_case(b"boundary") {
                    let mut b = v.clone();
                    b.truncate(BOUNDARY_LIMIT);
                    ct.boundaries.push(b);
                }
            }
        }
    }
    ct
}

/// A header line's start: a name of printable ASCII, perhaps spaces (the
/// obsolete form), then a colon.
pub fn is_header(text: &[u8]) -> bool {
    let mut spaces = false;
    for (i, &c) in text.iter().enumerate() {
        match c {
            b':' => return i > 0,
            b' ' | b'\t' if i > 0 => spaces = true,
            33..=126 if !spaces => {}
            _ => return false,
        }
    }
    false
}

/// A header's name and its value (after the colon), from its raw text.
pub fn split_header(raw: &[u8]) -> (&[u8], &[u8]) {
    let colon = raw.iter().position(|&b| b == b':').unwrap_or(0);
    (
        raw[..colon].trim_ascii_end(),
        &raw[(colon + 1).min(raw.len())..],
    )
}

/// Whether a header name is one Postfix counts as MIME (`HDR_OPT_MIME`
/// in header_opts.c): those go to mime_header_checks wherever they are.
pub fn is_mime_header(name: &[u8]) -> bool {
    [
        &b"content-description"[..],
        b"content-disposition",
        b"content-id",
        b"content-transfer-encoding",
        b"content-type",
        b"mime-version",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// A token of a structured header value (RFC 2045 `tspecials`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tok {
    Word(Vec<u8>),
    Quoted(Vec<u8>),
    Special(u8),
}

/// Tokens of a structured header value, comments and folding dropped.
pub(crate) fn tokenize(value: &[u8]) -> Vec<Tok> {
    const SPECIALS: &[u8] = b"()<>@,;:\\\"/[]?=";
    let mut out = Vec::new();
    let mut i = 0;
    while i < value.len() {
        let c = value[i];
        match c {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'(' => {
                let mut depth = 0usize;
                while i < value.len() {
                    match value[i] {
                        b'\\' => i += 1,
                        b'(' => depth += 1,
                        b')' => depth = depth.saturating_sub(1),
                        _ => {}
                    }
                    i += 1;
                    if depth == 0 {
                        break;
                    }
                }
            }
            b'"' => {
                let mut q = Vec::new();
                i += 1;
                while i < value.len() && value[i] != b'"' {
                    if value[i] == b'\\' && i + 1 < value.len() {
                        i += 1;
                    }
                    if value[i] != b'\r' && value[i] != b'\n' {
                        q.push(value[i]);
                    }
                    i += 1;
                }
                i += 1;
                out.push(Tok::Quoted(q));
            }
            _ if SPECIALS.contains(&c) => {
                out.push(Tok::Special(c));
                i += 1;
            }
            _ => {
                let start = i;
                while i < value.len()
                    && !SPECIALS.contains(&value[i])
                    && !matches!(value[i], b' ' | b'\t' | b'\r' | b'\n')
                    && value[i] > 31
                {
                    i += 1;
                }
                if i == start {
                    i += 1;
                } else {
                    out.push(Tok::Word(value[start..i].to_vec()));
                }
            }
        }
    }
    out
}

/// Which header block a header is in (Postfix's `MIME_HDR_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// The message's own headers.
    Primary,
    /// The headers of a MIME part, after a boundary.
    Multipart,
    /// The headers of an attached message/rfc822.
    Nested,
}

/// A complete header, as it came (line ends included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Where it is.
    pub class: Class,
    /// Its text, continuation lines included, up to the limit.
    pub raw: Vec<u8>,
    /// Records past the limit were dropped.
    pub truncated: bool,
}

/// What one record was.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// The header this record showed to be complete.
    pub header: Option<Header>,
    /// The record is body text (else it went into a header, or was
    /// dropped from one past the limit).
    pub body: bool,
    /// The record is the empty line that ends a header block: a body
    /// (or an attached message's headers) starts after it.
    pub ends_headers: bool,
}

/// One open multipart.
#[derive(Debug)]
struct Level {
    boundary: Vec<u8>,
    parts: (Ctype, Stype),
}

/// The boundaries of the open multiparts, innermost last: the one walk of
/// Postfix's mime_state that cleanup's checks ([`Walker`]) and the smtp
/// client's downgrade (`mime8`) both follow.
#[derive(Debug, Default)]
pub struct Boundaries(Vec<Level>);

/// What a boundary line did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundaryLine {
    /// `--boundary`: a part starts, of this type unless its headers say.
    Part(Ctype, Stype),
    /// `--boundary--`: the multipart (and every one inside it) ended.
    End,
}

impl Boundaries {
    /// Opens the multiparts `ct` declares (every boundary parameter counts,
    /// as in Postfix: content hidden behind a second one is still found);
    /// false when that would pass [`NESTING_LIMIT`] levels.
    pub fn open(&mut self, ct: &ContentType) -> bool {
        for boundary in &ct.boundaries {
            if self.0.len() >= NESTING_LIMIT {
                return false;
            }
            self.0.push(Level {
                boundary: boundary.clone(),
                parts: ct.parts,
            });
        }
        true
    }

    /// Whether a body line can be a boundary: `text` (without its line
    /// end) starts with `--` and a multipart is open.
    pub fn may_be(&self, text: &[u8]) -> bool {
        !self.0.is_empty() && text.len() > 2 && text.starts_with(b"--")
    }

    /// A line that starts with `--` and what follows it (`rest`): a
    /// boundary of an open multipart ends the parts inside it.
    pub fn line(&mut self, rest: &[u8]) -> Option<BoundaryLine> {
        let at = self.0.iter().rposition(|l| rest.starts_with(&l.boundary))?;
        self.0.truncate(at + 1);
        let level = &self.0[at];
        if rest[level.boundary.len()..].starts_with(b"--") {
            self.0.pop();
            Some(BoundaryLine::End)
        } else {
            Some(BoundaryLine::Part(level.parts.0, level.parts.1))
        }
    }
}

/// The streaming MIME structure walk (see the module docs).
#[derive(Debug)]
pub struct Walker {
    /// In a header block, with its class; `None` in body text.
    block: Option<Class>,
    ctype: Ctype,
    stype: Stype,
    stack: Boundaries,
    header: Vec<u8>,
    /// The header's length as Postfix counts it (see `add`).
    size: usize,
    truncated: bool,
    /// The last record ended inside a line.
    cont: bool,
    limit: usize,
    /// More multipart levels than [`NESTING_LIMIT`] were declared.
    too_deep: bool,
}

impl Walker {
    /// A walk at the start of a message, keeping headers of at most
    /// `header_limit` bytes (a record that starts below it is kept whole).
    pub fn new(header_limit: usize) -> Self {
        Walker {
            block: Some(Class::Primary),
            ctype: Ctype::Text,
            stype: Stype::Other,
            stack: Boundaries::default(),
            header: Vec::new(),
            size: 0,
            truncated: false,
            cont: false,
            limit: header_limit.max(1),
            too_deep: false,
        }
    }

    /// Whether more multipart levels than [`NESTING_LIMIT`] were declared
    /// (the deeper ones are not followed).
    pub fn too_deep(&self) -> bool {
        self.too_deep
    }

    /// One record: `text` without dot-stuffing or line end, `raw` as it
    /// came; `ends_line` when the line ends with it.
    pub fn record(&mut self, text: &[u8], raw: &[u8], ends_line: bool) -> Step {
        let prev_cont = std::mem::replace(&mut self.cont, !ends_line);
        let mut step = Step::default();
        if let Some(class) = self.block {
            if !self.header.is_empty() {
                if prev_cont || matches!(text.first(), Some(b' ' | b'\t')) {
                    self.add(text, raw, !prev_cont);
                    return step;
                }
                step.header = self.end_header(class);
            }
            if !prev_cont && is_header(text) {
                self.size = 0;
                self.add(text, raw, false);
                return step;
            }
            if text.is_empty() && ends_line && !prev_cont {
                self.end_block();
                step.body = true;
                step.ends_headers = true;
                return step;
            }
            // Not a header: the block ended without its empty line.
            self.block = None;
        }
        if !prev_cont && self.stack.may_be(text) {
            self.boundary(&text[2..]);
        }
        step.body = true;
        step
    }

    /// The content ended, or a header block was fed without its empty
    /// line (which may follow): the header still held, if any.
    pub fn finish(&mut self) -> Option<Header> {
        let class = self.block?;
        if self.header.is_empty() {
            return None;
        }
        self.end_header(class)
    }

    /// A record of the header, kept if the header is still shorter than
    /// the limit, measured as Postfix measures it: unfolded, a line end
    /// counting one byte (`joins`: this record starts a line).
    fn add(&mut self, text: &[u8], raw: &[u8], joins: bool) {
        if self.size < self.limit {
            self.header.extend_from_slice(raw);
            self.size += text.len() + usize::from(joins);
        } else {
            self.truncated = true;
        }
    }

    fn end_header(&mut self, class: Class) -> Option<Header> {
        let mut raw = std::mem::take(&mut self.header);
        if self.truncated && !raw.ends_with(b"\n") {
            // Cut inside a line: the line end it lost comes back.
            raw.extend_from_slice(if raw.ends_with(b"\r") { b"\n" } else { b"\r\n" });
        }
        let (name, value) = split_header(&raw);
        if name.eq_ignore_ascii_case(b"content-type") {
            let ct = content_type(value);
            self.ctype = ct.ctype;
            self.stype = ct.stype;
            if !self.stack.open(&ct) {
                self.too_deep = true;
            }
        }
        Some(Header {
            class,
            raw,
            truncated: std::mem::take(&mut self.truncated),
        })
    }

    /// The empty line after a header block: what the body that follows is.
    fn end_block(&mut self) {
        self.block = match (self.ctype, self.stype) {
            (Ctype::Message, Stype::Rfc822 | Stype::Global) => Some(Class::Nested),
            _ => None,
        };
        self.ctype = Ctype::Text;
        self.stype = Stype::Other;
    }

    /// A line that starts with `--` and what follows it: a boundary of an
    /// open multipart ends the parts inside it.
    fn boundary(&mut self, rest: &[u8]) {
        match self.stack.line(rest) {
            None => {}
            Some(BoundaryLine::End) => {
                self.block = None;
                self.ctype = Ctype::Other;
            }
            Some(BoundaryLine::Part(ctype, stype)) => {
                self.block = Some(Class::Multipart);
                (self.ctype, self.stype) = (ctype, stype);
            }
        }
    }
}

#[cfg(test)]
#[path = "mime_tests.rs"]
mod tests;
