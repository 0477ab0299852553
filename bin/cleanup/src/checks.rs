//! header_checks, mime_header_checks, nested_header_checks and
//! body_checks (header_checks(5)), sans-IO.
//!
//! As Postfix's cleanup: each logical header is checked as the client
//! sent it, unfolded (CRLF removed, the folding whitespace kept); which
//! table checks it is chosen as Postfix's `mime_state` with cleanup's
//! callbacks choose it: `mime_header_checks` for the MIME headers
//! (Content-*, MIME-Version) anywhere and for every header of a MIME part,
//! `nested_header_checks` for the other headers of an attached
//! message/rfc822, `header_checks` for the other headers of the message
//! itself. `body_checks` sees each body line of every part (boundaries
//! included) without its CRLF and dot-stuffing, up to
//! `body_checks_size_limit` bytes of each body (the message's, each
//! part's), as Postfix counts them. The body is walked for its MIME
//! structure (`smtp_proto::mime::Walker`) only when some table is set.
//!
//! The first table (and the first pattern in it) that matches decides;
//! its action is one of `tables::actions`. A line may be deleted (IGNORE),
//! replaced (REPLACE) or preceded by another (PREPEND); the message may be
//! refused (REJECT: 550 5.7.1, or the 4.x.x/5.x.x code the text starts
//! with), discarded (DISCARD) or held (HOLD). Each action makes a [`Hit`]
//! for the shell to log as Postfix does (`QUEUEID: reject: header
//! Subject: ... from client[addr]; from=<...> to=<...>: text`).
//!
//! A header longer than `header_size_limit` is cut, as Postfix's
//! mime_state cuts it: its lines (or pieces of [`MAX_BODY_LINE`] bytes of
//! a longer line) are kept while the header is shorter than the limit,
//! the rest is dropped without a word and the message goes on; the
//! primary headers always ([`truncate_headers`]), those of MIME parts when
//! the body is walked.
//!
//! Limits: the Received: header cleanup adds is not checked (Postfix
//! checks the one its smtpd adds); a body line longer than
//! [`MAX_BODY_LINE`] is checked in pieces of that size, as Postfix checks
//! the pieces of a line past line_length_limit. FILTER, REDIRECT, BCC,
//! PASS and STRIP are logged as unsupported and do nothing.

use std::borrow::Cow;

use mail::{Refusal, StatusCode};
use smtp_proto::mime::{self, Class, Walker};
use tables::actions::{self, Action};
use tables::Tables;

/// Body bytes checked as one line at most.
pub const MAX_BODY_LINE: usize = 2048;

/// The content check tables; `None` from [`Checks::from_config`] when no
/// table is set, so that mail then costs nothing per line.
#[derive(Debug, Default)]
pub struct Checks {
    header: Option<Tables>,
    mime: Option<Tables>,
    nested: Option<Tables>,
    body: Option<Tables>,
    body_limit: u64,
    header_limit: usize,
}

impl Checks {
    /// Opens `header_checks`, `mime_header_checks`,
    /// `nested_header_checks` and `body_checks`; an error names the
    /// parameter, the file and the line.
    pub fn from_config(cfg: &config::Config) -> Result<Option<Checks>, String> {
        let open = |param: &str, check: tables::Check<'_>| {
            let refs = cfg.maps(param);
            if refs.is_empty() {
                return Ok(None);
            }
            Tables::open_checked(&refs, check)
                .map(Some)
                .map_err(|e| format!("parameter \"{param}\": {e}"))
        };
        let header = open("header_checks", &actions::check_header_action)?;
        let mime = open("mime_header_checks", &actions::check_header_action)?;
        let nested = open("nested_header_checks", &actions::check_header_action)?;
        let body = open("body_checks", &actions::check_body_action)?;
        if header.is_none() && mime.is_none() && nested.is_none() && body.is_none() {
            return Ok(None);
        }
        Ok(Some(Checks {
            header,
            mime,
            nested,
            body,
            body_limit: cfg.size("body_checks_size_limit"),
            header_limit: header_limit(cfg),
        }))
    }

    /// Tables compiled already (tests); no MIME or nested header tables.
    #[cfg(test)]
    pub fn from_tables(header: Option<Tables>, body: Option<Tables>, body_limit: u64) -> Checks {
        Checks {
            mime: None,
            nested: None,
            header,
            body,
            body_limit,
            header_limit: 102_400,
        }
    }

    /// The same with mime_header_checks and nested_header_checks (tests).
    #[cfg(test)]
    pub fn with_mime(mut self, mime: Tables, nested: Tables, header_limit: usize) -> Checks {
        self.mime = Some(mime);
        self.nested = Some(nested);
        self.header_limit = header_limit;
        self
    }

    /// The table for a header of `class` named `name`, as Postfix's
    /// cleanup_header_callback picks it.
    fn table(&self, class: Class, name: &[u8]) -> Option<&Tables> {
        match class {
            _ if mime::is_mime_header(name) => self.mime.as_ref(),
            Class::Multipart => self.mime.as_ref(),
            Class::Primary => self.header.as_ref(),
            Class::Nested => self.nested.as_ref(),
        }
    }
}

/// `header_size_limit` as a length (0 would keep nothing: one byte then).
pub fn header_limit(cfg: &config::Config) -> usize {
    usize::try_from(cfg.size("header_size_limit"))
        .unwrap_or(usize::MAX)
        .max(1)
}

/// A line that matched, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Postfix's word for what was done: reject, discard, hold, warning,
    /// info, replace, prepend, ignore; or the unsupported action's word.
    pub action: String,
    /// `header`, `body`, or `mime-error` (the MIME structure itself).
    pub class: &'static str,
    /// The line, cut to 200 characters as Postfix does.
    pub line: String,
    /// The action's text.
    pub text: String,
    /// Logged as a warning (an unsupported or unknown action).
    pub warning: bool,
}

/// What the checks of a message decided so far.
#[derive(Debug, Default)]
pub struct Verdict {
    /// The message is refused with this.
    pub reject: Option<Refusal>,
    /// The message is accepted and delivered nowhere.
    pub discard: bool,
    /// The message is queued on hold.
    pub hold: bool,
    /// What to log, in order (drained by the shell).
    pub hits: Vec<Hit>,
}

/// What becomes of one checked line.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    Keep,
    Drop,
    Replace(String),
    /// This line first, then the checked one, kept.
    Prepend(String),
}

impl Verdict {
    /// Carries out a table's result for `line`.
    fn act(&mut self, class: &'static str, line: &str, value: &str) -> Fate {
        let mut hit = |action: &str, text: &str, warning: bool| {
            self.hits.push(Hit {
                action: action.to_string(),
                class,
                line: line.chars().take(200).collect(),
                text: text.to_string(),
                warning,
            })
        };
        let action = match actions::parse_action(value) {
            Ok(a) => a,
            // Only a `$n` result can get here: the rest is checked when
            // the table is read. Postfix warns and goes on.
            Err(why) => {
                hit("unknown action", &format!("{why} in \"{value}\""), true);
                return Fate::Keep;
            }
        };
        let header_text = |t: &str| class == "body" || actions::is_header(t);
        match action {
            Action::Reject(text) => {
                let refusal = reject_reply(&text);
                hit(
                    "reject",
                    &format!("{} {}", refusal.status, refusal.text),
                    false,
                );
                self.reject.get_or_insert(refusal);
                Fate::Keep
            }
            Action::Discard(text) => {
                hit("discard", &text, false);
                self.discard = true;
                Fate::Keep
            }
            Action::Hold(text) => {
                if !self.hold && !self.discard {
                    hit("hold", &text, false);
                    self.hold = true;
                }
                Fate::Keep
            }
            Action::Warn(text) => {
                hit("warning", &text, false);
                Fate::Keep
            }
            Action::Info(text) => {
                hit("info", &text, false);
                Fate::Keep
            }
            Action::Ignore => Fate::Drop,
            Action::Dunno => Fate::Keep,
            Action::Prepend(t) | Action::Replace(t) if !header_text(&t) => {
                hit(
                    "unknown action",
                    &format!("bad header text \"{t}\": need \"headername: headervalue\""),
                    true,
                );
                Fate::Keep
            }
            Action::Prepend(t) => {
                hit("prepend", &t, false);
                Fate::Prepend(t)
            }
            Action::Replace(t) => {
                hit("replace", &t, false);
                Fate::Replace(t)
            }
            Action::Unsupported(word, text) => {
                hit(
                    "unsupported action",
                    format!("{word} {text}").trim_end(),
                    true,
                );
                Fate::Keep
            }
        }
    }
}

/// REJECT's reply: 550 5.7.1 and the text, or the 4.x.x/5.x.x code the
/// text starts with (4: 451, the message is deferred).
pub fn reject_reply(text: &str) -> Refusal {
    // A `$n` result copies client text: no control character may reach
    // the reply (or the log line made from it).
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let text = text.as_str();
    let (first, rest) = match text.split_once([' ', '\t']) {
        Some((f, r)) => (f, r.trim_start()),
        None => (text, ""),
    };
    let (status, text) = match first.parse::<StatusCode>() {
        Ok(s) if matches!(s.class(), 4 | 5) => (s, rest),
        _ => (StatusCode::NOT_AUTHORIZED, text),
    };
    let text = if text.is_empty() {
        "message content rejected"
    } else {
        text
    };
    let code = if status.class() == 4 { 451 } else { 550 };
    Refusal::new(code, status, text)
}

/// Runs header_checks over a complete header section (CRLF lines); gives
/// the section as the actions left it.
pub fn check_headers<'a>(checks: &Checks, section: &'a [u8], v: &mut Verdict) -> Cow<'a, [u8]> {
    if checks.header.is_none() && checks.mime.is_none() {
        return section.into();
    }
    let mut out = Vec::with_capacity(section.len() + 64);
    let mut changed = false;
    let mut start = 0;
    while start < section.len() {
        // A logical header: its first line and the lines folded into it.
        let mut end = start;
        loop {
            end += section[end..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(section.len() - end, |i| i + 1);
            if end >= section.len() || !matches!(section[end], b' ' | b'\t') {
                break;
            }
        }
        let raw = &section[start..end];
        start = end;
        changed |= check_header(checks, Class::Primary, raw, false, v, &mut out);
    }
    if changed {
        out.into()
    } else {
        section.into()
    }
}

/// Checks one logical header of `class` (`raw`, CRLF lines, dot-stuffed
/// when `body`) and writes what its action leaves; true when that is not
/// `raw`.
fn check_header(
    checks: &Checks,
    class: Class,
    raw: &[u8],
    body: bool,
    v: &mut Verdict,
    out: &mut Vec<u8>,
) -> bool {
    let tables = checks.table(class, mime::split_header(raw).0);
    let fate = match tables {
        Some(tables) if v.reject.is_none() => {
            let text = String::from_utf8_lossy(raw)
                .replace("\r\n", "")
                .replace('\n', "");
            match tables.lookup(&text) {
                Some(value) => v.act("header", &text, &value),
                None => Fate::Keep,
            }
        }
        _ => Fate::Keep,
    };
    match fate {
        Fate::Keep => {
            out.extend_from_slice(raw);
            return false;
        }
        Fate::Drop => {}
        Fate::Replace(t) => push_line(out, &t, body),
        Fate::Prepend(t) => {
            push_line(out, &t, body);
            out.extend_from_slice(raw);
        }
    }
    true
}

/// Cuts every header of a complete header section (CRLF lines) that is
/// longer than `limit`, as Postfix's mime_state does: its lines, or
/// pieces of [`MAX_BODY_LINE`] bytes of a longer line, are kept while the
/// header is shorter than `limit`; a cut line gets its CRLF back.
pub fn truncate_headers(section: &[u8], limit: usize) -> Cow<'_, [u8]> {
    if section.len() <= limit {
        return section.into();
    }
    let mut out = Vec::with_capacity(section.len());
    let mut kept = 0;
    let mut cut = false;
    for line in section.split_inclusive(|&b| b == b'\n') {
        let joins = matches!(line.first(), Some(b' ' | b'\t'));
        if !joins {
            kept = 0;
        }
        let mut first = true;
        let mut rest = line;
        while !rest.is_empty() {
            let piece = &rest[..rest.len().min(MAX_BODY_LINE)];
            rest = &rest[piece.len()..];
            if kept < limit {
                out.extend_from_slice(piece);
                // Measured as Postfix measures it: unfolded, a line end
                // one byte.
                let text = piece.strip_suffix(b"\n").unwrap_or(piece);
                let text = text.strip_suffix(b"\r").unwrap_or(text);
                kept += text.len() + usize::from(joins && first);
            } else {
                cut = true;
                if out.ends_with(b"\r") {
                    out.push(b'\n');
                } else if !out.ends_with(b"\n") {
                    out.extend_from_slice(b"\r\n");
                }
            }
            first = false;
        }
    }
    if cut {
        out.into()
    } else {
        section.into()
    }
}

/// A table's text as a CRLF line, dot-stuffed in the body.
fn push_line(out: &mut Vec<u8>, text: &str, body: bool) {
    if body && text.starts_with('.') {
        out.push(b'.');
    }
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Runs the body through the checks as it streams: body lines through
/// body_checks, the headers of MIME parts and attached messages through
/// mime_header_checks and nested_header_checks (cut at
/// header_size_limit); complete lines go out as the actions left them,
/// the last partial line and a part's header are held back until their
/// end comes.
#[derive(Debug, Default)]
pub struct BodyScan {
    partial: Vec<u8>,
    /// Body bytes checked so far.
    seen: u64,
    /// The empty line that ends the headers went by.
    started: bool,
    /// Past body_checks_size_limit: the rest of this body goes through
    /// unchecked (the headers of parts, and the parts after, are still
    /// checked).
    done: bool,
    /// The MIME structure, once the primary headers were seen.
    walker: Option<Walker>,
    /// The next byte fed starts a line (false inside a line longer than
    /// [`MAX_BODY_LINE`], between its pieces).
    mid_line: bool,
}

impl BodyScan {
    /// The primary header section (CRLF lines) as it came, so that the
    /// walk knows the message's Content-Type; a scan not given it walks
    /// from the first line fed (headers past the held ones).
    pub fn primary(&mut self, checks: &Checks, headers: &[u8]) {
        let w = self
            .walker
            .get_or_insert_with(|| Walker::new(checks.header_limit));
        for line in headers.split_inclusive(|&b| b == b'\n') {
            let text = line.strip_suffix(b"\n").unwrap_or(line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            w.record(text, line, line.ends_with(b"\n"));
        }
        // Its last header is complete (it was checked with the others):
        // parsed now, not written again.
        w.finish();
    }

    /// Feeds content from the empty line after the headers on; gives what
    /// to write now.
    pub fn feed<'a>(&mut self, checks: &Checks, bytes: &'a [u8], v: &mut Verdict) -> Cow<'a, [u8]> {
        if self.done && self.partial.is_empty() && self.walker.is_none() {
            return bytes.into();
        }
        let mut buf = std::mem::take(&mut self.partial);
        buf.extend_from_slice(bytes);
        let mut out = Vec::with_capacity(buf.len() + 64);
        let mut start = 0;
        while start < buf.len() {
            let rest = &buf[start..];
            let (line, len, whole) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) if i < MAX_BODY_LINE + 2 => (&rest[..i + 1], i + 1, true),
                _ if rest.len() > MAX_BODY_LINE => (&rest[..MAX_BODY_LINE], MAX_BODY_LINE, false),
                _ => break,
            };
            start += len;
            self.line(checks, line, whole, v, &mut out);
        }
        self.partial = buf[start..].to_vec();
        out.into()
    }

    /// The content ended: the last line, if it had no CRLF, and a part's
    /// header still held.
    pub fn finish(&mut self, checks: &Checks, v: &mut Verdict) -> Vec<u8> {
        let rest = std::mem::take(&mut self.partial);
        let mut out = Vec::new();
        if !rest.is_empty() {
            self.line(checks, &rest, false, v, &mut out);
        }
        if let Some(h) = self.walker.as_mut().and_then(Walker::finish) {
            check_header(checks, h.class, &h.raw, true, v, &mut out);
        }
        out
    }

    /// One line (`whole`: with its line end) or piece of a long one.
    fn line(
        &mut self,
        checks: &Checks,
        raw: &[u8],
        whole: bool,
        v: &mut Verdict,
        out: &mut Vec<u8>,
    ) {
        let bare = raw.strip_suffix(b"\n").unwrap_or(raw);
        let bare = bare.strip_suffix(b"\r").unwrap_or(bare);
        // Only a piece that starts a line can carry its stuffing dot; only
        // a whole line may be edited: a piece replaced, dropped or preceded
        // by a line would make the next piece start a line unstuffed (a
        // "." there would end the message at the next hop).
        let starts = !std::mem::replace(&mut self.mid_line, !whole);
        let editable = starts && whole;
        let unstuffed = bare.strip_prefix(b".").filter(|_| starts).unwrap_or(bare);
        let first = !std::mem::replace(&mut self.started, true);
        if let Some(w) = self.walker.as_mut() {
            let step = w.record(unstuffed, raw, whole);
            if let Some(h) = step.header {
                check_header(checks, h.class, &h.raw, true, v, out);
            }
            // Postfix refuses it when a header table is set (cleanup's
            // MIME_OPT_REPORT_NESTING).
            let header_tables =
                checks.header.is_some() || checks.mime.is_some() || checks.nested.is_some();
            if w.too_deep() && header_tables && v.reject.is_none() {
                const TEXT: &str = "MIME nesting exceeds safety limit";
                v.hits.push(Hit {
                    action: "reject".to_string(),
                    class: "mime-error",
                    line: TEXT.to_string(),
                    text: String::new(),
                    warning: false,
                });
                v.reject = Some(Refusal::new(550, StatusCode::known(5, 6, 0), TEXT));
            }
            if !step.body {
                return;
            }
            if step.ends_headers {
                // body_checks_size_limit counts per body, as Postfix's
                // body offset starts again after each header block.
                self.seen = 0;
                self.done = false;
            }
        }
        // The empty line that separates the headers from the body; a
        // message without one starts its body with this line, which is
        // checked as any other.
        let Some(tables) = checks
            .body
            .as_ref()
            .filter(|_| !(first && whole && bare.is_empty()))
        else {
            out.extend_from_slice(raw);
            return;
        };
        if self.done || v.reject.is_some() {
            out.extend_from_slice(raw);
            return;
        }
        self.seen += bare.len() as u64;
        if checks.body_limit > 0 && self.seen > checks.body_limit {
            self.done = true;
            out.extend_from_slice(raw);
            return;
        }
        let text = String::from_utf8_lossy(unstuffed);
        let fate = match tables.lookup(&text) {
            Some(value) => v.act("body", &text, &value),
            None => Fate::Keep,
        };
        let fate = match fate {
            Fate::Keep => Fate::Keep,
            _ if !editable => {
                v.hits.push(Hit {
                    action: "warning".to_string(),
                    class: "body",
                    line: text.chars().take(200).collect(),
                    text: format!("not edited: part of a line longer than {MAX_BODY_LINE} bytes"),
                    warning: true,
                });
                Fate::Keep
            }
            f => f,
        };
        match fate {
            Fate::Keep => out.extend_from_slice(raw),
            Fate::Drop => {}
            Fate::Replace(t) => push_line(out, &t, true),
            Fate::Prepend(t) => {
                push_line(out, &t, true);
                out.extend_from_slice(raw);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(text: &str) -> Tables {
        Tables::from_tables(vec![
            tables::Table::from_regexp("regexp:t", "t", text).unwrap()
        ])
    }

    fn headers(rules: &str) -> Checks {
        Checks::from_tables(Some(tables(rules)), None, 51200)
    }

    fn body(rules: &str, limit: u64) -> Checks {
        Checks::from_tables(None, Some(tables(rules)), limit)
    }

    #[test]
    fn reject_replies() {
        let r = reject_reply("");
        assert_eq!(r.to_string(), "550 5.7.1 message content rejected");
        assert_eq!(reject_reply("no spam").to_string(), "550 5.7.1 no spam");
        assert_eq!(reject_reply("4.7.0 later").to_string(), "451 4.7.0 later");
        assert_eq!(
            reject_reply("5.7.9").to_string(),
            "550 5.7.9 message content rejected"
        );
        assert_eq!(reject_reply("2.0.0 ok").to_string(), "550 5.7.1 2.0.0 ok");
        // A `$1` that copied a lone CR or other control byte of the client's.
        assert_eq!(
            reject_reply("bad\r250 ok\x07").to_string(),
            "550 5.7.1 bad 250 ok "
        );
    }

    #[test]
    fn header_actions_on_unfolded_headers() {
        let c = headers(
            "/^Subject:.*viagra/ REJECT no pills\n/^X-Drop:/ IGNORE\n\
             /^X-Old: (.*)/ REPLACE X-New: $1\n/^To:/ PREPEND X-Before: to\n\
             /^X-Warn:/ WARN careful\n/^X-Bcc:/ BCC a@b\n/^X-Bad:/ $0\n",
        );
        let section =
            b"To: a@b\r\nX-Drop: 1\r\n\tfolded\r\nX-Old: v\r\nX-Warn: w\r\nX-Bcc: x\r\nX-Bad: y\r\n";
        let mut v = Verdict::default();
        let out = check_headers(&c, section, &mut v);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "X-Before: to\r\nTo: a@b\r\nX-New: v\r\nX-Warn: w\r\nX-Bcc: x\r\nX-Bad: y\r\n"
        );
        assert!(v.reject.is_none());
        let words: Vec<(&str, bool)> = v
            .hits
            .iter()
            .map(|h| (h.action.as_str(), h.warning))
            .collect();
        assert_eq!(
            words,
            [
                ("prepend", false),
                ("replace", false),
                ("warning", false),
                ("unsupported action", true),
                ("unknown action", true)
            ]
        );
        // Folded headers are matched unfolded.
        let mut v = Verdict::default();
        let out = check_headers(&c, b"Subject: cheap\r\n viagra\r\nFrom: x\r\n", &mut v);
        assert_eq!(&*out, b"Subject: cheap\r\n viagra\r\nFrom: x\r\n");
        assert_eq!(v.reject.unwrap().to_string(), "550 5.7.1 no pills");
        assert_eq!(v.hits[0].line, "Subject: cheap viagra");
        assert_eq!(v.hits[0].text, "5.7.1 no pills");
    }

    #[test]
    fn discard_and_hold() {
        let c = headers("/^X-D:/ DISCARD gone\n/^X-H:/ HOLD look\n");
        let mut v = Verdict::default();
        check_headers(&c, b"X-H: 1\r\nX-H: 2\r\n", &mut v);
        assert!(v.hold && !v.discard);
        assert_eq!(v.hits.len(), 1, "the first HOLD only is logged");
        let mut v = Verdict::default();
        check_headers(&c, b"X-D: 1\r\nX-H: 2\r\n", &mut v);
        assert!(v.discard && !v.hold, "held no more once discarded");
    }

    #[test]
    fn body_lines_across_chunks_unstuffed_and_edited() {
        let c = body(
            "/^bad word$/ REJECT\n/^drop me/ IGNORE\n/^\\.dot$/ REPLACE .new\n/^mark$/ PREPEND before\n",
            0,
        );
        let content = b"\r\nfirst\r\ndrop me\r\n..dot\r\nmark\r\nlast";
        for cut in 0..content.len() {
            let mut v = Verdict::default();
            let mut s = BodyScan::default();
            let mut out = s.feed(&c, &content[..cut], &mut v).into_owned();
            out.extend_from_slice(&s.feed(&c, &content[cut..], &mut v));
            out.extend_from_slice(&s.finish(&c, &mut v));
            assert_eq!(
                String::from_utf8_lossy(&out),
                "\r\nfirst\r\n..new\r\nbefore\r\nmark\r\nlast",
                "cut {cut}"
            );
            assert!(v.reject.is_none());
        }
        let mut v = Verdict::default();
        let mut s = BodyScan::default();
        s.feed(&c, b"\r\nok\r\nbad word\r\n", &mut v);
        assert_eq!(
            v.reject.unwrap().to_string(),
            "550 5.7.1 message content rejected"
        );
        // A message without headers: its first line is body, and checked.
        let mut v = Verdict::default();
        let mut s = BodyScan::default();
        s.feed(&c, b"bad word\r\nok\r\n", &mut v);
        assert!(v.reject.is_some(), "the first line of a headerless body");
    }

    #[test]
    fn long_lines_are_checked_in_pieces_and_the_size_limit_stops_checks() {
        let c = body("/^x+$/ REJECT\n", 0);
        let mut v = Verdict::default();
        let mut s = BodyScan::default();
        let long = format!("\r\n{}", "x".repeat(MAX_BODY_LINE * 3));
        let out = s.feed(&c, long.as_bytes(), &mut v);
        assert!(out.len() >= MAX_BODY_LINE * 2, "pieces go out as they come");
        assert!(v.reject.is_some());
        let c = body("/^late$/ REJECT\n", 10);
        let mut v = Verdict::default();
        let mut s = BodyScan::default();
        let out = s.feed(&c, b"\r\n0123456789\r\nlate\r\n", &mut v);
        assert_eq!(&*out, b"\r\n0123456789\r\nlate\r\n");
        assert!(v.reject.is_none(), "past body_checks_size_limit");
    }

    /// An edit never splits a line longer than MAX_BODY_LINE: a piece
    /// replaced or dropped would leave the next piece at a line's start
    /// unstuffed, and a "." there ends the message at the next hop.
    #[test]
    fn pieces_of_a_long_line_are_checked_but_never_edited() {
        let line = format!("viagra{}", "y".repeat(MAX_BODY_LINE + 100));
        let content = format!("\r\n{line}\r\n..\r\nend\r\n");
        for rule in [
            "/viagra/ REPLACE [x]\n",
            "/viagra/ IGNORE\n",
            "/viagra/ PREPEND X: y\n",
        ] {
            let c = body(rule, 0);
            for step in [1, 7, 4096] {
                let mut v = Verdict::default();
                let mut s = BodyScan::default();
                let mut out = Vec::new();
                for piece in content.as_bytes().chunks(step) {
                    out.extend_from_slice(&s.feed(&c, piece, &mut v));
                }
                out.extend_from_slice(&s.finish(&c, &mut v));
                assert_eq!(String::from_utf8_lossy(&out), content, "{rule} step {step}");
                assert!(
                    v.hits.iter().any(|h| h.warning),
                    "{rule}: the edit is reported"
                );
            }
        }
        // A whole line is still edited, its dot-stuffing kept.
        let c = body("/^viagra$/ REPLACE .x\n", 0);
        let mut v = Verdict::default();
        let mut s = BodyScan::default();
        let out = s.feed(&c, b"\r\nviagra\r\n..\r\n", &mut v).into_owned();
        assert_eq!(String::from_utf8_lossy(&out), "\r\n..x\r\n..\r\n");
        // REJECT still sees a piece.
        let c = body("/viagra/ REJECT\n", 0);
        let mut v = Verdict::default();
        let mut s = BodyScan::default();
        s.feed(&c, content.as_bytes(), &mut v);
        assert!(v.reject.is_some());
    }

    /// Runs the body scan over `content` (headers, empty line, body),
    /// fed in pieces of `step` bytes.
    fn scan(c: &Checks, content: &[u8], step: usize) -> (Vec<u8>, Verdict) {
        let end = find_end(content);
        let mut v = Verdict::default();
        let mut s = BodyScan::default();
        s.primary(c, &content[..end]);
        let mut out = content[..end].to_vec();
        for piece in content[end..].chunks(step) {
            out.extend_from_slice(&s.feed(c, piece, &mut v));
        }
        out.extend_from_slice(&s.finish(c, &mut v));
        (out, v)
    }

    fn find_end(content: &[u8]) -> usize {
        content
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(content.len(), |i| i + 2)
    }

    const MIME: &[u8] = b"Subject: s\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n\
        --b\r\nContent-Type: text/plain\r\nX-Part: evil\r\n\r\nbody text\r\n\
        --b\r\nContent-Type: message/rfc822\r\n\r\nSubject: inner evil\r\n\
        X-Long: 1\r\n 2\r\n 3\r\n 4\r\n\r\n..dot\r\n--b--\r\n";

    #[test]
    fn part_headers_go_to_their_tables_and_body_lines_to_body_checks() {
        let c = Checks::from_tables(
            Some(tables(
                "/^Subject: s$/ WARN primary\n/evil/ REJECT wrong table\n",
            )),
            Some(tables(
                "/^\\.dot$/ WARN dot\n/^X-Part/ REJECT body saw a header\n",
            )),
            0,
        )
        .with_mime(
            tables("/^X-Part: (.*)/ REPLACE X-Part: was $1\n/^Content-Type: message/ WARN m\n"),
            tables("/^Subject: inner/ PREPEND X-Seen: nested\n"),
            12,
        );
        for step in [1, 5, 4096] {
            let (out, v) = scan(&c, MIME, step);
            assert_eq!(
                String::from_utf8_lossy(&out),
                "Subject: s\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n\
                 --b\r\nContent-Type: text/plain\r\nX-Part: was evil\r\n\r\nbody text\r\n\
                 --b\r\nContent-Type: message/rfc822\r\n\r\nX-Seen: nested\r\nSubject: inner evil\r\n\
                 X-Long: 1\r\n 2\r\n\r\n..dot\r\n--b--\r\n",
                "step {step}"
            );
            assert!(v.reject.is_none(), "step {step}: {:?}", v.reject);
            let words: Vec<&str> = v.hits.iter().map(|h| h.text.as_str()).collect();
            assert_eq!(
                words,
                ["X-Part: was evil", "m", "X-Seen: nested", "dot"],
                "step {step}"
            );
        }
        // The primary headers: MIME ones to mime_header_checks.
        let mut v = Verdict::default();
        check_headers(&c, b"Subject: s\r\nContent-Type: message/x\r\n", &mut v);
        let words: Vec<&str> = v.hits.iter().map(|h| h.text.as_str()).collect();
        assert_eq!(words, ["primary", "m"]);
    }

    #[test]
    fn body_checks_size_limit_counts_per_part() {
        let content = b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\n\
            0123456789AB\r\nlate\r\n--b\r\n\r\nlate\r\n--b--\r\n";
        let c = body("/^late$/ WARN seen\n", 10);
        let (out, v) = scan(&c, content, 7);
        assert_eq!(out, content);
        assert_eq!(v.hits.len(), 1, "only the second part's line: {:?}", v.hits);
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut content = String::from("Subject: s\r\n");
        for i in 0..mime::NESTING_LIMIT + 2 {
            content.push_str(&format!(
                "Content-Type: multipart/mixed; boundary=b{i}\r\n\r\n--b{i}\r\n"
            ));
        }
        content.push_str("\r\nbody\r\n");
        let c = headers("/^X-Never:/ WARN\n");
        let (_, v) = scan(&c, content.as_bytes(), 4096);
        let r = v.reject.expect("refused");
        assert_eq!(r.to_string(), "550 5.6.0 MIME nesting exceeds safety limit");
        assert_eq!(v.hits[0].class, "mime-error");
        // body_checks alone: not refused, as in Postfix.
        let c = body("/^never$/ REJECT\n", 0);
        let (out, v) = scan(&c, content.as_bytes(), 4096);
        assert!(v.reject.is_none());
        assert_eq!(out, content.as_bytes());
    }

    #[test]
    fn long_headers_are_cut_as_postfix_cuts_them() {
        let section = b"A: 12345\r\n 678\r\n 9\r\nB: x\r\n";
        assert_eq!(&*truncate_headers(section, 100), section);
        assert_eq!(
            &*truncate_headers(section, 12),
            b"A: 12345\r\n 678\r\nB: x\r\n"
        );
        let long = format!("A: {}\r\nB: x\r\n", "y".repeat(3 * MAX_BODY_LINE));
        let cut = truncate_headers(long.as_bytes(), 10);
        assert_eq!(cut.len(), MAX_BODY_LINE + 2 + 6);
        assert!(cut.ends_with(b"y\r\nB: x\r\n"));
    }

    #[test]
    fn hostile_bytes_do_not_panic() {
        let c = Checks::from_tables(Some(tables("/./ WARN\n")), Some(tables("/./ WARN\n")), 0);
        let mut v = Verdict::default();
        for junk in [&b"\xff\xfe:\r\n"[..], b"\0\0\0", b"\n\n\r\r", b"\r", b""] {
            check_headers(&c, junk, &mut v);
            let mut s = BodyScan::default();
            s.feed(&c, junk, &mut v);
            s.finish(&c, &mut v);
        }
    }
}
