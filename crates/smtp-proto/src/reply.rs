//! SMTP replies: the `Reply` type, its wire formatting, enhanced status codes and
//! a bounded incremental reply parser for the client side.
//!
//! A [`Reply`] is a three-digit code, an optional RFC 3463 enhanced status code
//! ([`mail::StatusCode`])
//! and one or more text lines. [`Reply::write_to`] formats it as RFC 5321
//! §4.2 says (`250-first`, `250 last`), repeating the enhanced code on every
//! line as Postfix does, and replaces any CR or LF inside the text by a space so
//! that text coming from a policy table can never inject a reply line.
//!
//! [`ReplyParser`] reads replies from a server. It is bounded: a line longer than
//! its `max_line` or a reply with more than `max_lines` lines is an error, so a
//! hostile server sending an endless multi-line reply costs at most
//! `max_line * max_lines` bytes. It accepts a bare LF as a line end (a client
//! should be lenient in what it reads from servers; nothing is smuggled by it).
//! It does not log and never panics on peer input.

use std::fmt;

/// The enhanced status code of a reply is [`mail::StatusCode`], the one
/// type every program uses for RFC 3463 codes.
pub use mail::StatusCode;

/// One SMTP reply: code, optional enhanced code, one or more text lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The three-digit reply code (200–599).
    pub code: u16,
    /// The RFC 3463 enhanced status code, sent at the start of every line.
    pub enhanced: Option<StatusCode>,
    /// Text lines without the code prefix; never empty when formatted.
    pub lines: Vec<String>,
}

impl Reply {
    /// A one-line reply.
    pub fn new(code: u16, enhanced: Option<StatusCode>, text: impl Into<String>) -> Self {
        Self {
            code,
            enhanced,
            lines: vec![text.into()],
        }
    }

    /// A one-line reply with an enhanced code.
    pub fn enhanced(code: u16, enhanced: StatusCode, text: impl Into<String>) -> Self {
        Self::new(code, Some(enhanced), text)
    }

    /// A multi-line reply.
    pub fn multiline(code: u16, enhanced: Option<StatusCode>, lines: Vec<String>) -> Self {
        Self {
            code,
            enhanced,
            lines,
        }
    }

    /// `250 2.0.0 Ok`.
    pub fn ok() -> Self {
        Self::enhanced(250, StatusCode::OK, "Ok")
    }

    /// The first digit of the code: 2, 3, 4 or 5.
    pub fn class(&self) -> u16 {
        self.code / 100
    }

    /// True for 2xx and 3xx replies.
    pub fn is_positive(&self) -> bool {
        matches!(self.class(), 2 | 3)
    }

    /// True for 4xx replies.
    pub fn is_transient(&self) -> bool {
        self.class() == 4
    }

    /// True for 5xx replies.
    pub fn is_permanent(&self) -> bool {
        self.class() == 5
    }

    /// True for 4xx and 5xx replies.
    pub fn is_error(&self) -> bool {
        self.class() >= 4
    }

    /// A 5xx reply made 4xx, 5.x.x made 4.x.x, with the same text: what
    /// Postfix's smtpd sends under `soft_bounce` (smtpd_chat.c). Others as
    /// they are.
    pub fn softened(mut self) -> Self {
        if self.class() == 5 {
            self.code -= 100;
            self.enhanced = self.enhanced.map(StatusCode::softened);
        }
        self
    }

    /// The text lines joined by a space (for logs: `status=... (text)`).
    pub fn text(&self) -> String {
        self.lines.join(" ")
    }

    /// Appends the wire form (CRLF line ends) to `out`; `with_enhanced` false drops the enhanced code.
    pub fn write_to(&self, out: &mut Vec<u8>, with_enhanced: bool) {
        // A reply code outside 200..=599 is a caller bug; clamp rather than emit garbage.
        let code = self.code.clamp(200, 599);
        let n = self.lines.len().max(1);
        for i in 0..n {
            let line = self.lines.get(i).map(String::as_str).unwrap_or("");
            out.extend_from_slice(code.to_string().as_bytes());
            out.push(if i + 1 == n { b' ' } else { b'-' });
            if with_enhanced {
                if let Some(e) = self.enhanced {
                    out.extend_from_slice(e.to_string().as_bytes());
                    if !line.is_empty() {
                        out.push(b' ');
                    }
                }
            }
            // Why: reply text may come from access tables; a CR or LF in it would
            // let the table author (or an attacker feeding it) forge reply lines.
            out.extend(
                line.bytes()
                    .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
            );
            out.extend_from_slice(b"\r\n");
        }
    }

    /// The wire form with enhanced codes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write_to(&mut v, true);
        v
    }
}

impl From<mail::Refusal> for Reply {
    /// The reply a refusal is on the wire.
    fn from(r: mail::Refusal) -> Self {
        Self::enhanced(r.code, r.status, r.text)
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code)?;
        if let Some(e) = self.enhanced {
            write!(f, " {e}")?;
        }
        write!(f, " {}", self.text())
    }
}

/// Why a server's reply could not be parsed; the client should close the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplyError {
    /// A line was longer than the parser's `max_line`.
    LineTooLong,
    /// A multi-line reply had more than `max_lines` lines.
    TooManyLines,
    /// A line did not start with three digits followed by space, `-` or the line end.
    BadSyntax,
    /// The lines of one multi-line reply carried different codes.
    CodeMismatch,
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReplyError::LineTooLong => "reply line too long",
            ReplyError::TooManyLines => "too many lines in multi-line reply",
            ReplyError::BadSyntax => "malformed reply line",
            ReplyError::CodeMismatch => "reply code changed within a multi-line reply",
        })
    }
}

impl std::error::Error for ReplyError {}

/// Incremental, bounded parser of server replies.
#[derive(Debug)]
pub struct ReplyParser {
    max_line: usize,
    max_lines: usize,
    line: Vec<u8>,
    line_too_long: bool,
    code: Option<u16>,
    lines: Vec<String>,
    failed: Option<ReplyError>,
}

impl Default for ReplyParser {
    fn default() -> Self {
        // RFC 5321 §4.5.3.1.5: reply lines are at most 512 octets; allow slack.
        Self::new(2048, 100)
    }
}

impl ReplyParser {
    /// A parser accepting lines up to `max_line` bytes and replies up to `max_lines` lines.
    pub fn new(max_line: usize, max_lines: usize) -> Self {
        Self {
            max_line: max_line.max(4),
            max_lines: max_lines.max(1),
            line: Vec::new(),
            line_too_long: false,
            code: None,
            lines: Vec::new(),
            failed: None,
        }
    }

    /// True while part of a reply has been read but not all of it.
    pub fn is_partial(&self) -> bool {
        !self.line.is_empty() || self.code.is_some()
    }

    /// Consumes input up to the end of the first complete reply.
    ///
    /// Returns how many bytes were used and, when a reply ended, the reply or the
    /// error. After an error the parser stays failed: every later call returns it.
    pub fn parse(&mut self, input: &[u8]) -> (usize, Option<Result<Reply, ReplyError>>) {
        if let Some(e) = &self.failed {
            return (input.len(), Some(Err(e.clone())));
        }
        let mut used = 0;
        while used < input.len() {
            let rest = &input[used..];
            match rest.iter().position(|&b| b == b'\n') {
                None => {
                    self.push_line_bytes(rest);
                    used = input.len();
                }
                Some(i) => {
                    self.push_line_bytes(&rest[..i]);
                    used += i + 1;
                    if let Some(r) = self.end_line() {
                        if let Err(e) = &r {
                            self.failed = Some(e.clone());
                        }
                        return (used, Some(r));
                    }
                }
            }
        }
        (used, None)
    }

    fn push_line_bytes(&mut self, b: &[u8]) {
        if self.line_too_long {
            return;
        }
        if self.line.len() + b.len() > self.max_line {
            self.line_too_long = true;
            self.line.clear();
        } else {
            self.line.extend_from_slice(b);
        }
    }

    fn end_line(&mut self) -> Option<Result<Reply, ReplyError>> {
        if self.line_too_long {
            return Some(Err(ReplyError::LineTooLong));
        }
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.len() < 3 || !line[..3].iter().all(u8::is_ascii_digit) || line[0] < b'2' {
            return Some(Err(ReplyError::BadSyntax));
        }
        let code = u16::from(line[0] - b'0') * 100
            + u16::from(line[1] - b'0') * 10
            + u16::from(line[2] - b'0');
        let (last, text) = match line.get(3) {
            None => (true, &line[3..3]),
            Some(b' ') => (true, &line[4..]),
            Some(b'-') => (false, &line[4..]),
            Some(_) => return Some(Err(ReplyError::BadSyntax)),
        };
        if let Some(c) = self.code {
            if c != code {
                return Some(Err(ReplyError::CodeMismatch));
            }
        }
        self.code = Some(code);
        if self.lines.len() >= self.max_lines {
            return Some(Err(ReplyError::TooManyLines));
        }
        self.lines.push(String::from_utf8_lossy(text).into_owned());
        if !last {
            return None;
        }
        self.code = None;
        let lines = std::mem::take(&mut self.lines);
        Some(Ok(split_enhanced(code, lines)))
    }
}

/// Moves a leading enhanced code (same class as the reply) out of the text lines.
fn split_enhanced(code: u16, mut lines: Vec<String>) -> Reply {
    let first = lines.first().and_then(|l| {
        let word = l.split(' ').next().unwrap_or("");
        word.parse::<StatusCode>()
            .ok()
            .filter(|e| u16::from(e.class()) == code / 100)
    });
    if let Some(e) = first {
        let prefix = e.to_string();
        for l in &mut lines {
            if let Some(rest) = l.strip_prefix(&prefix) {
                if rest.is_empty() || rest.starts_with(' ') {
                    *l = rest.strip_prefix(' ').unwrap_or(rest).to_string();
                }
            }
        }
    }
    Reply {
        code,
        enhanced: first,
        lines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_single_and_multi() {
        let r = Reply::enhanced(250, StatusCode::OK, "Ok");
        assert_eq!(r.to_bytes(), b"250 2.0.0 Ok\r\n");
        let r = Reply::multiline(250, None, vec!["mx.example".into(), "PIPELINING".into()]);
        assert_eq!(r.to_bytes(), b"250-mx.example\r\n250 PIPELINING\r\n");
        let mut v = Vec::new();
        Reply::enhanced(550, StatusCode::USER_UNKNOWN, "no\r\n250 ok").write_to(&mut v, false);
        assert_eq!(v, b"550 no  250 ok\r\n");
    }

    #[test]
    fn enhanced_parse_table() {
        for (s, ok) in [
            ("2.0.0", true),
            ("5.7.1", true),
            ("4.999.999", true),
            ("3.0.0", false),
            ("2.0", false),
            ("2.0.0.0", false),
            ("2.1000.0", false),
            ("22.0.0", false),
            ("2.a.0", false),
            ("", false),
        ] {
            assert_eq!(s.parse::<StatusCode>().is_ok(), ok, "{s}");
        }
    }

    fn parse_all(p: &mut ReplyParser, mut input: &[u8]) -> Vec<Result<Reply, ReplyError>> {
        let mut out = Vec::new();
        while !input.is_empty() {
            let (n, r) = p.parse(input);
            input = &input[n..];
            if let Some(r) = r {
                let stop = r.is_err();
                out.push(r);
                if stop {
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn parse_replies() {
        let mut p = ReplyParser::default();
        let input = b"220 mx ESMTP\r\n250-mx\r\n250-PIPELINING\r\n250 SIZE 100\r\n550 5.1.1 <a@b>: no\r\n250\n";
        let got = parse_all(&mut p, input);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0].as_ref().unwrap().code, 220);
        assert_eq!(
            got[1].as_ref().unwrap().lines,
            ["mx", "PIPELINING", "SIZE 100"]
        );
        let r = got[2].as_ref().unwrap();
        assert_eq!(r.enhanced, Some(StatusCode::USER_UNKNOWN));
        assert_eq!(r.lines, ["<a@b>: no"]);
        assert_eq!(got[3].as_ref().unwrap().lines, [""]);
    }

    #[test]
    fn parse_byte_by_byte_same() {
        let input = b"250-2.1.0 a\r\n250 2.1.0 b\r\n354 go\r\n";
        let whole = parse_all(&mut ReplyParser::default(), input);
        let mut p = ReplyParser::default();
        let mut got = Vec::new();
        for b in input {
            let (n, r) = p.parse(std::slice::from_ref(b));
            assert_eq!(n, 1);
            got.extend(r);
        }
        assert_eq!(whole, got);
        assert_eq!(got[0].as_ref().unwrap().lines, ["a", "b"]);
    }

    #[test]
    fn parse_errors() {
        for (input, err) in [
            (&b"25\r\n"[..], ReplyError::BadSyntax),
            (b"abc\r\n", ReplyError::BadSyntax),
            (b"250x\r\n", ReplyError::BadSyntax),
            (b"150 x\r\n", ReplyError::BadSyntax),
            (b"250-a\r\n251 b\r\n", ReplyError::CodeMismatch),
        ] {
            let got = parse_all(&mut ReplyParser::default(), input);
            assert_eq!(got.last().unwrap().as_ref().unwrap_err(), &err);
        }
        let mut p = ReplyParser::new(16, 3);
        assert_eq!(
            parse_all(&mut p, &[b'2'; 100]).len(),
            0,
            "no line end yet, no reply"
        );
        assert_eq!(p.parse(b"\n").1, Some(Err(ReplyError::LineTooLong)));
        let mut p = ReplyParser::new(16, 3);
        let endless = b"250-x\r\n".repeat(10);
        let got = parse_all(&mut p, &endless);
        assert_eq!(got, vec![Err(ReplyError::TooManyLines)]);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_bounded(input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3000), step in 1usize..64) {
            let mut p = ReplyParser::new(64, 4);
            for piece in input.chunks(step) {
                let mut rest = piece;
                while !rest.is_empty() {
                    let (n, r) = p.parse(rest);
                    proptest::prop_assert!(n > 0 && n <= rest.len());
                    rest = &rest[n..];
                    if let Some(Ok(r)) = r {
                        proptest::prop_assert!(r.lines.len() <= 4);
                    }
                    proptest::prop_assert!(p.line.len() <= 64 && p.lines.len() <= 4);
                }
            }
        }
    }
}
