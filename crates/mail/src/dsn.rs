//! Delivery status notification types (RFC 3461, RFC 3463, RFC 3464).
//!
//! `Notify` is the RCPT NOTIFY= option, `Ret` the MAIL RET= option,
//! `DsnAction` the per-recipient action of a report, `StatusCode` an
//! enhanced status code `class.subject.detail`. Parsing is strict and never
//! panics; limits follow RFC 3463 (class 2, 4 or 5; subject and detail up to
//! three digits).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// RCPT NOTIFY=: `Never`, or any of success/failure/delay; `Default` when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Notify {
    /// No NOTIFY= given: failure (and maybe delay) notices, at the MTA's choice.
    #[default]
    Default,
    /// NOTIFY=NEVER.
    Never,
    /// NOTIFY= a list of conditions.
    On {
        /// SUCCESS was listed.
        success: bool,
        /// FAILURE was listed.
        failure: bool,
        /// DELAY was listed.
        delay: bool,
    },
}

impl Notify {
    /// Whether a failure notice is wanted.
    pub fn wants_failure(&self) -> bool {
        match self {
            Self::Default => true,
            Self::Never => false,
            Self::On { failure, .. } => *failure,
        }
    }

    /// Whether a delay notice is wanted.
    pub fn wants_delay(&self) -> bool {
        match self {
            Self::Default => true,
            Self::Never => false,
            Self::On { delay, .. } => *delay,
        }
    }

    /// Whether a success notice is wanted.
    pub fn wants_success(&self) -> bool {
        matches!(self, Self::On { success: true, .. })
    }

    /// NOTIFY for a copy an alias or `.forward` sends on (RFC 3461 §6.2.7,
    /// Postfix's local(8)): SUCCESS is dropped, because the expansion
    /// already reported success; SUCCESS alone becomes NEVER.
    pub fn forwarded(self) -> Notify {
        match self {
            Self::On {
                success: true,
                failure: false,
                delay: false,
            } => Self::Never,
            Self::On { failure, delay, .. } => Self::On {
                success: false,
                failure,
                delay,
            },
            other => other,
        }
    }
}

/// MAIL RET=: return the full message or only its headers in a DSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Ret {
    /// RET=FULL.
    Full,
    /// RET=HDRS.
    Hdrs,
}

/// The action of one recipient in a delivery status report (RFC 3464).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DsnAction {
    /// Permanently failed.
    Failed,
    /// Still being retried.
    Delayed,
    /// Delivered to the final mailbox.
    Delivered,
    /// Relayed to a system that does not do DSN.
    Relayed,
    /// Expanded to several recipients (alias, list).
    Expanded,
}

/// An RFC 3463 enhanced status code, `class.subject.detail`.
///
/// Decoding checks the ranges as [`StatusCode::new`] does (a peer or a
/// record cannot bring a class-9 code in); the encoding is the three
/// numbers, as it always was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "StatusCodeWire")]
pub struct StatusCode {
    class: u8,
    subject: u16,
    detail: u16,
}

/// A status code as encoded, before its ranges are checked.
#[derive(Deserialize)]
struct StatusCodeWire {
    class: u8,
    subject: u16,
    detail: u16,
}

impl TryFrom<StatusCodeWire> for StatusCode {
    type Error = String;

    fn try_from(w: StatusCodeWire) -> Result<Self, String> {
        StatusCode::new(w.class, w.subject, w.detail).ok_or_else(|| {
            format!(
                "{}.{}.{} is not an enhanced status code (RFC 3463)",
                w.class, w.subject, w.detail
            )
        })
    }
}

/// Why a string is not an enhanced status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseStatusError {
    /// Not three dot-separated numbers.
    Shape,
    /// Class other than 2, 4 or 5.
    Class,
    /// Subject or detail longer than three digits.
    Range,
}

impl fmt::Display for ParseStatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Shape => "enhanced status code must be class.subject.detail",
            Self::Class => "enhanced status class must be 2, 4 or 5",
            Self::Range => "enhanced status subject and detail have at most 3 digits",
        })
    }
}

impl std::error::Error for ParseStatusError {}

impl StatusCode {
    /// 2.0.0 success.
    pub const OK: Self = Self {
        class: 2,
        subject: 0,
        detail: 0,
    };
    /// 4.3.1 mail system full.
    pub const SYSTEM_FULL: Self = Self {
        class: 4,
        subject: 3,
        detail: 1,
    };
    /// 4.3.0 other mail system problem.
    pub const SYSTEM_TEMP: Self = Self {
        class: 4,
        subject: 3,
        detail: 0,
    };
    /// 4.4.7 delivery time expired (as a delay); bounces use 5.4.7.
    pub const EXPIRED_DELAY: Self = Self {
        class: 4,
        subject: 4,
        detail: 7,
    };
    /// 5.4.7 delivery time expired.
    pub const EXPIRED: Self = Self {
        class: 5,
        subject: 4,
        detail: 7,
    };

    /// 4.4.0 a routing or connection problem of no finer kind.
    pub const NETWORK_TEMP: Self = Self::known(4, 4, 0);
    /// 4.4.1 no answer from the host.
    pub const NO_ANSWER: Self = Self::known(4, 4, 1);
    /// 4.4.2 the connection was lost.
    pub const CONNECTION_LOST: Self = Self::known(4, 4, 2);
    /// 4.7.5 the server's certificate did not satisfy the TLS policy.
    pub const TLS_POLICY: Self = Self::known(4, 7, 5);
    /// 5.1.3 bad destination address syntax.
    pub const BAD_ADDRESS: Self = Self::known(5, 1, 3);
    /// 2.1.0 other address status: sender accepted.
    pub const SENDER_OK: Self = Self::known(2, 1, 0);
    /// 2.1.5 destination address valid.
    pub const RECIPIENT_OK: Self = Self::known(2, 1, 5);
    /// 2.6.0 other or undefined media status: message accepted.
    pub const MESSAGE_OK: Self = Self::known(2, 6, 0);
    /// 4.3.2 system not accepting network messages (shutdown).
    pub const NOT_ACCEPTING: Self = Self::known(4, 3, 2);
    /// 4.5.3 too many recipients.
    pub const TOO_MANY_RECIPIENTS: Self = Self::known(4, 5, 3);
    /// 4.7.0 other or undefined security status (temporary): error limit,
    /// too many commands.
    pub const TEMP_SECURITY: Self = Self::known(4, 7, 0);
    /// 5.1.1 bad destination mailbox address (user unknown).
    pub const USER_UNKNOWN: Self = Self::known(5, 1, 1);
    /// 5.1.7 bad sender's mailbox address syntax.
    pub const BAD_SENDER_SYNTAX: Self = Self::known(5, 1, 7);
    /// 5.3.4 message too big for system.
    pub const MESSAGE_TOO_BIG: Self = Self::known(5, 3, 4);
    /// 5.5.0 other or undefined protocol status.
    pub const PROTOCOL: Self = Self::known(5, 5, 0);
    /// 5.5.1 invalid command (bad sequence, not implemented).
    pub const INVALID_COMMAND: Self = Self::known(5, 5, 1);
    /// 5.5.2 syntax error (unrecognized command, bad line ending, line too long).
    pub const SYNTAX_ERROR: Self = Self::known(5, 5, 2);
    /// 5.5.4 invalid command arguments (bad or unsupported parameter).
    pub const INVALID_ARGUMENTS: Self = Self::known(5, 5, 4);
    /// 5.6.7 non-ASCII address without SMTPUTF8 (RFC 6531 §3.7.4.1 / RFC 6533).
    pub const UTF8_REQUIRED: Self = Self::known(5, 6, 7);
    /// 5.7.0 other or undefined security status (TLS required, refused session).
    pub const SECURITY: Self = Self::known(5, 7, 0);
    /// 5.7.1 delivery not authorized (relay denied).
    pub const NOT_AUTHORIZED: Self = Self::known(5, 7, 1);

    /// A code from literal parts, for constants: out of RFC 3463's ranges
    /// it fails to compile when used in a `const`, and panics otherwise.
    pub const fn known(class: u8, subject: u16, detail: u16) -> Self {
        assert!(
            matches!(class, 2 | 4 | 5) && subject <= 999 && detail <= 999,
            "mail::StatusCode::known: outside RFC 3463"
        );
        Self {
            class,
            subject,
            detail,
        }
    }

    /// `class.0.0` for an SMTP reply code's first digit (2, 4 or 5; any
    /// other reply is a transient failure), as Postfix makes up a status
    /// for a server that sends none.
    pub fn of_reply(code: u16) -> Self {
        match code / 100 {
            2 => Self::known(2, 0, 0),
            5 => Self::known(5, 0, 0),
            _ => Self::known(4, 0, 0),
        }
    }

    /// A code from its parts; `None` outside RFC 3463's ranges.
    pub fn new(class: u8, subject: u16, detail: u16) -> Option<Self> {
        (matches!(class, 2 | 4 | 5) && subject <= 999 && detail <= 999).then_some(Self {
            class,
            subject,
            detail,
        })
    }

    /// 5.x.x made 4.x.x (Postfix's `soft_bounce`); others as they are.
    pub fn softened(self) -> StatusCode {
        StatusCode {
            class: if self.class == 5 { 4 } else { self.class },
            ..self
        }
    }

    /// The class digit: 2 success, 4 transient, 5 permanent.
    pub fn class(&self) -> u8 {
        self.class
    }

    /// The subject number.
    pub fn subject(&self) -> u16 {
        self.subject
    }

    /// The detail number.
    pub fn detail(&self) -> u16 {
        self.detail
    }

    /// Whether this is a permanent failure (class 5).
    pub fn is_permanent(&self) -> bool {
        self.class == 5
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.class, self.subject, self.detail)
    }
}

impl FromStr for StatusCode {
    type Err = ParseStatusError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.split('.');
        let (Some(c), Some(sj), Some(d), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ParseStatusError::Shape);
        };
        let num = |p: &str, max: usize| -> Result<u16, ParseStatusError> {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ParseStatusError::Shape);
            }
            if p.len() > max {
                return Err(ParseStatusError::Range);
            }
            p.parse().map_err(|_| ParseStatusError::Shape)
        };
        let class = num(c, 1)?;
        let (subject, detail) = (num(sj, 3)?, num(d, 3)?);
        Self::new(class as u8, subject, detail).ok_or(ParseStatusError::Class)
    }
}

/// The outcome of one delivery attempt: an enhanced status code and the
/// text that explains it (a server's reply, or the agent's own reason).
///
/// What travels between agents, qmgr, the journal and the logs, so that
/// nobody parses `"4.4.1 text"` back into its parts. The class of `code`
/// decides: 2 delivered, 4 deferred, 5 bounced.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Status {
    /// The enhanced status code.
    pub code: StatusCode,
    /// One line of explanation, without the code.
    pub text: String,
}

impl Status {
    /// A status from its parts. An operating system error's text is
    /// written as Postfix writes it (`Connection refused`), without the
    /// ` (os error 111)` Rust's `io::Error` adds: reasons reach logs,
    /// notices and their readers.
    pub fn new(code: StatusCode, text: impl Into<String>) -> Self {
        Self {
            code,
            text: without_os_error_numbers(text.into()),
        }
    }

    /// Whether the recipient was delivered (class 2).
    pub fn is_success(&self) -> bool {
        self.code.class == 2
    }

    /// Whether the failure is permanent (class 5).
    pub fn is_permanent(&self) -> bool {
        self.code.is_permanent()
    }

    /// Whether the failure is transient (class 4).
    pub fn is_transient(&self) -> bool {
        self.code.class == 4
    }

    /// This status with a permanent failure made transient, 5.x.x to
    /// 4.x.x with the same text (Postfix's `soft_bounce`); others as is.
    pub fn softened(&self) -> Status {
        Status {
            code: self.code.softened(),
            text: self.text.clone(),
        }
    }

    /// A status from a reason written as text, `5.1.1 text`, as a
    /// transport table's `error:` next hop is written (Postfix's error(8)
    /// reads it so); `default` when the text does not start with a code.
    /// A first word that looks like a code (a digit, then a dot) and is
    /// none is an error: whoever wrote it meant a code. For that edge only,
    /// parsed once: status that is typed stays typed.
    pub fn from_reason(reason: &str, default: StatusCode) -> Result<Self, ParseStatusError> {
        let reason = reason.trim();
        let (word, text) = reason
            .split_once(char::is_whitespace)
            .unwrap_or((reason, ""));
        let looks_like_code = word.starts_with(|c: char| c.is_ascii_digit()) && word.contains('.');
        if !looks_like_code {
            return Ok(Self::new(default, reason));
        }
        Ok(Self::new(word.parse()?, text.trim_start()))
    }
}

/// `text` less every ` (os error N)` in it.
fn without_os_error_numbers(text: String) -> String {
    const MARK: &str = " (os error ";
    if !text.contains(MARK) {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(i) = rest.find(MARK) {
        let after = &rest[i + MARK.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && after[digits..].starts_with(')') {
            out.push_str(&rest[..i]);
            rest = &after[digits + 1..];
        } else {
            out.push_str(&rest[..i + MARK.len()]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

impl fmt::Display for Status {
    /// `code text`, as a reason is written where one string is wanted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.text)
    }
}

/// An SMTP reply that refuses (4xx or 5xx): its reply code, enhanced
/// status code and text.
///
/// What cleanup answers, what the policy decides and what a submission
/// reports, typed end to end so that nobody splits `"550 5.7.1 text"`
/// again; smtp-proto turns it into the reply on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Refusal {
    /// The SMTP reply code: 4xx try again, 5xx never.
    pub code: u16,
    /// The enhanced status code.
    pub status: StatusCode,
    /// One line of explanation, without the codes.
    pub text: String,
}

impl Refusal {
    /// A refusal from its parts.
    pub fn new(code: u16, status: StatusCode, text: impl Into<String>) -> Self {
        Self {
            code,
            status,
            text: text.into(),
        }
    }

    /// A refusal whose enhanced code is `class.subject.detail` with the
    /// class taken from `code` (5 for 5xx, 4 otherwise), as the built-in
    /// replies that serve both a temporary and a permanent code write it.
    pub fn of_class(code: u16, subject: u16, detail: u16, text: impl Into<String>) -> Self {
        let class = if code >= 500 { 5 } else { 4 };
        Self::new(code, StatusCode::known(class, subject, detail), text)
    }

    /// A refusal as an access table or a milter writes one: `4NN text`
    /// or `5NN text`, the text optionally led by an enhanced code of the
    /// same class; without one the code is `class.subject.detail` of
    /// `default` (as [`Refusal::of_class`]). `None` when `s` does not
    /// start with a 4xx or 5xx reply code: the edge where a user's string
    /// becomes a typed reply, parsed once.
    pub fn parse(s: &str, default: (u16, u16)) -> Option<Self> {
        let s = s.trim();
        let (word, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
        let rest = rest.trim();
        if word.len() != 3 || !word.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let code: u16 = word.parse().ok().filter(|c| (400..600).contains(c))?;
        let (status, text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        Some(match status.parse::<StatusCode>() {
            Ok(e) if u16::from(e.class()) == code / 100 => Self::new(code, e, text.trim_start()),
            _ => Self::of_class(code, default.0, default.1, rest),
        })
    }

    /// Whether trying again cannot help (a 5xx reply).
    pub fn is_permanent(&self) -> bool {
        self.code >= 500
    }

    /// A milter's own reply (SMFIR_REPLYCODE) as the refusal it makes,
    /// checked as Postfix's milter8.c checks it: a 4xx or 5xx code, then a
    /// space or a `-`; an enhanced code, if the text starts with a digit,
    /// of the reply's class (Postfix checks the first line; this checks
    /// every line). A reply of several lines (`554-5.7.1 first`,
    /// `554 5.7.1 last`) keeps the first line's codes and every line's
    /// text, on one line, where Postfix passes the lines on as they are.
    /// Without an enhanced code it is `class.subject.detail` of `default`
    /// (as [`Refusal::of_class`]). Sendmail takes the reply as a format
    /// string, so milters double a `%`: as Postfix does, `%%` is read as
    /// `%` and a `%` alone is dropped. `None` for a reply that is
    /// malformed: the milter failed.
    pub fn from_milter_reply(reply: &str, default: (u16, u16)) -> Option<Self> {
        let mut first: Option<(u16, Option<StatusCode>)> = None;
        let mut text = String::new();
        for line in reply.split('\n').map(|l| l.trim_end_matches('\r')) {
            if line.trim().is_empty() {
                continue;
            }
            let (code, status, rest) = milter_line(line)?;
            match first {
                None => first = Some((code, status)),
                // Postfix sends the lines on as they are; one reply has one code.
                Some((c, _)) if c != code => return None,
                Some(_) => {}
            }
            if !rest.is_empty() {
                if !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(rest);
            }
        }
        let (code, status) = first?;
        let text = unpercent(&text);
        Some(match status {
            Some(s) => Self::new(code, s, text),
            None => Self::of_class(code, default.0, default.1, text),
        })
    }
}

/// A milter reply's text as Postfix's milter8.c reads it: a `%` is
/// dropped and the character after it taken as it is (`%%` is `%`).
fn unpercent(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '%' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// One line of a milter's reply: its code, its enhanced code if it has
/// one, and its text; `None` when malformed (see
/// [`Refusal::from_milter_reply`]).
fn milter_line(line: &str) -> Option<(u16, Option<StatusCode>, &str)> {
    let b = line.as_bytes();
    let code_ok = b.len() >= 3
        && matches!(b[0], b'4' | b'5')
        && b[1..3].iter().all(u8::is_ascii_digit)
        && matches!(b.get(3), Some(b' ' | b'-'));
    if !code_ok || line.contains(|c: char| c.is_control() && c != '\t') {
        return None;
    }
    let code: u16 = line[..3].parse().ok()?;
    let rest = line.get(4..).unwrap_or("").trim();
    if !rest.starts_with(|c: char| c.is_ascii_digit()) {
        return Some((code, None, rest));
    }
    // Postfix looks at the first digit alone: of another class, the
    // reply is malformed; of the same, text that is no code stays text.
    if rest.as_bytes()[0] != b[0] {
        return None;
    }
    let (word, text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    Some(match word.parse::<StatusCode>() {
        Ok(status) => (code, Some(status), text.trim_start()),
        Err(_) => (code, None, rest),
    })
}

impl fmt::Display for Refusal {
    /// `code status text`, as the reply reads on the wire and in the log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.code, self.status, self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_error_numbers_are_left_out_of_a_reason() {
        let refused = std::io::Error::from_raw_os_error(111);
        let s = Status::new(
            StatusCode::known(4, 4, 1),
            format!("connect to mx.example[192.0.2.1]:25: {refused}"),
        );
        assert_eq!(
            s.text,
            "connect to mx.example[192.0.2.1]:25: Connection refused"
        );
        for (text, want) in [
            ("a (os error 13) and b (os error 2)", "a and b"),
            (
                "kept (os error x) (os error ) (os error 5",
                "kept (os error x) (os error ) (os error 5",
            ),
            ("plain", "plain"),
        ] {
            assert_eq!(Status::new(StatusCode::known(5, 0, 0), text).text, want);
        }
    }

    /// A decoded status code is in RFC 3463's ranges: the encoding of a
    /// good one is unchanged and reads back; a class-9 one (from a faulty
    /// peer or record) is an error, not a code.
    #[test]
    fn a_decoded_status_code_is_checked() {
        let good = StatusCode::known(4, 7, 1);
        let bytes = postcard::to_allocvec(&good).unwrap();
        assert_eq!(bytes, [4, 7, 1]);
        assert_eq!(postcard::from_bytes::<StatusCode>(&bytes).unwrap(), good);
        assert!(postcard::from_bytes::<StatusCode>(&[9, 7, 1]).is_err());
        let long = postcard::to_allocvec(&(5u8, 1000u16, 1u16)).unwrap();
        assert!(postcard::from_bytes::<StatusCode>(&long).is_err());
    }

    #[test]
    fn a_forwarded_copy_drops_success() {
        let on = |success, failure, delay| Notify::On {
            success,
            failure,
            delay,
        };
        for (given, sent_on) in [
            (Notify::Default, Notify::Default),
            (Notify::Never, Notify::Never),
            (on(true, false, false), Notify::Never),
            (on(true, true, false), on(false, true, false)),
            (on(false, true, true), on(false, true, true)),
        ] {
            assert_eq!(given.forwarded(), sent_on, "{given:?}");
        }
    }

    #[test]
    fn statuses_from_reasons_and_replies() {
        let s =
            Status::from_reason("4.4.1 connect to x: refused", StatusCode::SYSTEM_TEMP).unwrap();
        assert_eq!(
            (s.code, s.text.as_str()),
            (StatusCode::NO_ANSWER, "connect to x: refused")
        );
        assert_eq!(s.to_string(), "4.4.1 connect to x: refused");
        assert!(s.is_transient() && !s.is_permanent() && !s.is_success());
        let s = Status::from_reason("no code here", StatusCode::known(5, 0, 0)).unwrap();
        assert_eq!(
            (s.code.to_string(), s.text.as_str()),
            ("5.0.0".into(), "no code here")
        );
        // What means a code and is none is refused, not taken for text.
        for (bad, why) in [
            ("9.9.9 odd", ParseStatusError::Class),
            ("5.1 short", ParseStatusError::Shape),
            ("5.1.1000 long", ParseStatusError::Range),
        ] {
            assert_eq!(
                Status::from_reason(bad, StatusCode::SYSTEM_TEMP),
                Err(why),
                "{bad}"
            );
        }
        // A reply code is not an enhanced code: it is text.
        let s = Status::from_reason("550 gone", StatusCode::known(5, 0, 0)).unwrap();
        assert_eq!(s.to_string(), "5.0.0 550 gone");
        let s = Status::from_reason("5.1.1", StatusCode::OK).unwrap();
        assert_eq!((s.code, s.text.as_str()), (StatusCode::USER_UNKNOWN, ""));
        assert_eq!(StatusCode::of_reply(250), StatusCode::OK);
        assert_eq!(StatusCode::of_reply(421).to_string(), "4.0.0");
        assert_eq!(StatusCode::of_reply(554).to_string(), "5.0.0");
        assert_eq!(StatusCode::of_reply(999).to_string(), "4.0.0");
    }

    #[test]
    fn a_milters_reply_as_postfix_takes_it() {
        let r = |s: &str| Refusal::from_milter_reply(s, (7, 1)).map(|r| r.to_string());
        assert_eq!(r("554 5.7.1 spam").as_deref(), Some("554 5.7.1 spam"));
        assert_eq!(r("451 4.7.0 later").as_deref(), Some("451 4.7.0 later"));
        // No enhanced code: the default's, of the reply's class.
        assert_eq!(r("550 no status").as_deref(), Some("550 5.7.1 no status"));
        assert_eq!(r("421 ").as_deref(), Some("421 4.7.1 "));
        // A digit of the same class that is no code stays text.
        assert_eq!(r("550 5 apples").as_deref(), Some("550 5.7.1 5 apples"));
        // Written for Sendmail, which takes it as a format string.
        assert_eq!(
            r("550 5.7.1 90%% spam, 100% sure").as_deref(),
            Some("550 5.7.1 90% spam, 100 sure")
        );
        // Several lines: the first's codes, every line's text.
        assert_eq!(
            r("554-5.7.1 first line\r\n554 5.7.1 second line").as_deref(),
            Some("554 5.7.1 first line second line")
        );
        assert_eq!(
            r("550-first\n550 second").as_deref(),
            Some("550 5.7.1 first second")
        );
        // Malformed, as milter8.c finds it: not 4xx or 5xx, no separator,
        // an enhanced code of another class, lines of other codes, no
        // code at all.
        for bad in [
            "250 2.0.0 ok",
            "354 go on",
            "5501 x",
            "550x text",
            "421",
            "550 4.7.1 wrong class",
            "451 5.7.1 wrong class",
            "554-5.7.1 one\r\n451 4.7.1 two",
            "go away",
            "",
            "55",
        ] {
            assert_eq!(r(bad), None, "{bad:?}");
        }
    }

    type Case = (&'static str, Result<(u8, u16, u16), ParseStatusError>);

    #[test]
    fn status_codes_table() {
        let cases: &[Case] = &[
            ("2.0.0", Ok((2, 0, 0))),
            ("4.3.1", Ok((4, 3, 1))),
            ("5.7.999", Ok((5, 7, 999))),
            ("5.1000.1", Err(ParseStatusError::Range)),
            ("3.0.0", Err(ParseStatusError::Class)),
            ("55.0.0", Err(ParseStatusError::Range)),
            ("5.0", Err(ParseStatusError::Shape)),
            ("5.0.0.0", Err(ParseStatusError::Shape)),
            ("5..0", Err(ParseStatusError::Shape)),
            ("5.+1.0", Err(ParseStatusError::Shape)),
            ("", Err(ParseStatusError::Shape)),
            ("5.0.0\0", Err(ParseStatusError::Shape)),
        ];
        for (s, want) in cases {
            let got = s
                .parse::<StatusCode>()
                .map(|c| (c.class(), c.subject(), c.detail()));
            assert_eq!(&got, want, "{s:?}");
            if let Ok(c) = s.parse::<StatusCode>() {
                assert_eq!(c.to_string(), *s);
            }
        }
    }

    #[test]
    fn refusals_as_tables_write_them() {
        let r = |s| Refusal::parse(s, (7, 1)).map(|r| r.to_string());
        assert_eq!(
            r("550 5.1.1 no such user").as_deref(),
            Some("550 5.1.1 no such user")
        );
        assert_eq!(r(" 450   4.2.0  busy ").as_deref(), Some("450 4.2.0 busy"));
        assert_eq!(r("554 go away").as_deref(), Some("554 5.7.1 go away"));
        assert_eq!(r("421 4.4.5").as_deref(), Some("421 4.4.5 "));
        assert_eq!(r("451").as_deref(), Some("451 4.7.1 "));
        // An enhanced code of the other class, or no code at all, is text.
        assert_eq!(r("550 4.1.1 odd").as_deref(), Some("550 5.7.1 4.1.1 odd"));
        assert_eq!(r("550 5.1 short").as_deref(), Some("550 5.7.1 5.1 short"));
        for bad in ["250 ok", "600 x", "55 x", "5500 x", "abc", "", "REJECT 550"] {
            assert_eq!(r(bad), None, "{bad:?}");
        }
        let p = Refusal::parse("452 4.3.1 full", (7, 1)).unwrap();
        assert!(!p.is_permanent() && p.status == StatusCode::SYSTEM_FULL && p.text == "full");
        assert!(Refusal::of_class(550, 1, 1, "x").is_permanent());
        assert_eq!(
            Refusal::of_class(450, 1, 1, "x").status.to_string(),
            "4.1.1"
        );
    }

    #[test]
    fn notify_defaults() {
        assert!(Notify::Default.wants_failure() && !Notify::Default.wants_success());
        assert!(!Notify::Never.wants_failure() && !Notify::Never.wants_delay());
        let n = Notify::On {
            success: true,
            failure: false,
            delay: false,
        };
        assert!(n.wants_success() && !n.wants_failure());
    }
}
