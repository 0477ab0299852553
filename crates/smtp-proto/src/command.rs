//! SMTP command parser: verbs, arguments and ESMTP parameters, plus the
//! command property table.
//!
//! [`parse_command`] takes one command line without its line end and returns a
//! typed [`Command`] or a [`CommandError`] that knows its reply. Verbs and
//! parameter keywords are case-insensitive. MAIL parameters: SIZE (RFC 1870),
//! BODY=7BIT|8BITMIME|BINARYMIME (RFC 6152, 3030), SMTPUTF8 (RFC 6531),
//! RET and ENVID (RFC 3461), AUTH (RFC 4954); RCPT parameters: NOTIFY and ORCPT (RFC 3461).
//! A duplicate or unknown parameter is 555 5.5.4; a bad value is 501 5.5.4.
//! Whether an extension is enabled is the session's business, not the
//! parser's: the parser recognizes every parameter it knows.
//!
//! [`COMMANDS`] is the one table of command properties (allowed before TLS when
//! TLS is required, ends a pipelining group, counts as junk), in the spirit of
//! Postfix's `smtpd_cmd_table`.
//!
//! Limits: ENVID at most 100 octets, AUTH 256, and ORCPT at most 500 decoded (RFC 3461);
//! SIZE must fit in a u64. Nothing here logs or panics.

use std::fmt;

use crate::address::{parse_path, AddressError, AddressRole, Mailbox, Path};
use crate::reply::{Reply, StatusCode};

/// The command verbs this crate knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// EHLO.
    Ehlo,
    /// HELO.
    Helo,
    /// MAIL FROM.
    Mail,
    /// RCPT TO.
    Rcpt,
    /// DATA.
    Data,
    /// BDAT (RFC 3030).
    Bdat,
    /// RSET.
    Rset,
    /// NOOP.
    Noop,
    /// VRFY.
    Vrfy,
    /// EXPN.
    Expn,
    /// HELP.
    Help,
    /// QUIT.
    Quit,
    /// STARTTLS (RFC 3207).
    StartTls,
    /// AUTH (RFC 4954), recognized so the session can refuse it properly.
    Auth,
}

/// Static properties of one command verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandInfo {
    /// The verb.
    pub verb: Verb,
    /// Its wire name.
    pub name: &'static str,
    /// Allowed when TLS is required but not yet active.
    pub before_tls: bool,
    /// Its reply must be flushed before the client may go on (RFC 2920 §3.1).
    pub ends_group: bool,
    /// Counts toward the junk command limit (Postfix `smtpd_junk_command_limit`).
    pub junk: bool,
}

const fn info(
    verb: Verb,
    name: &'static str,
    before_tls: bool,
    ends_group: bool,
    junk: bool,
) -> CommandInfo {
    CommandInfo {
        verb,
        name,
        before_tls,
        ends_group,
        junk,
    }
}

/// The command table (Postfix `smtpd_cmd_table`).
pub const COMMANDS: &[CommandInfo] = &[
    info(Verb::Ehlo, "EHLO", true, true, false),
    info(Verb::Helo, "HELO", true, true, false),
    info(Verb::Mail, "MAIL", false, false, false),
    info(Verb::Rcpt, "RCPT", false, false, false),
    info(Verb::Data, "DATA", false, true, false),
    // BDAT's reply is sent after its chunk; the chunk is not a group end.
    info(Verb::Bdat, "BDAT", false, false, false),
    info(Verb::Rset, "RSET", true, false, true),
    info(Verb::Noop, "NOOP", true, true, true),
    info(Verb::Vrfy, "VRFY", false, true, true),
    info(Verb::Expn, "EXPN", false, true, true),
    info(Verb::Help, "HELP", true, true, true),
    info(Verb::Quit, "QUIT", true, true, false),
    info(Verb::StartTls, "STARTTLS", true, true, false),
    info(Verb::Auth, "AUTH", false, true, false),
];

impl Verb {
    /// The verb's row in [`COMMANDS`].
    pub fn info(self) -> &'static CommandInfo {
        // Every verb has a row; the table and the enum are kept together above.
        COMMANDS
            .iter()
            .find(|c| c.verb == self)
            .expect("command: every Verb has a row in COMMANDS")
    }

    /// Looks a verb up by name, case-insensitively.
    pub fn from_name(name: &str) -> Option<Verb> {
        COMMANDS
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
            .map(|c| c.verb)
    }
}

/// BODY= values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Body {
    /// 7BIT.
    SevenBit,
    /// 8BITMIME (RFC 6152).
    EightBitMime,
    /// BINARYMIME (RFC 3030): only with BDAT.
    BinaryMime,
}

/// RET= values (RFC 3461).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ret {
    /// Return the full message in a DSN.
    Full,
    /// Return headers only.
    Headers,
}

/// NOTIFY= value (RFC 3461): NEVER, or any of SUCCESS, FAILURE, DELAY.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Notify {
    /// NOTIFY=SUCCESS.
    pub success: bool,
    /// NOTIFY=FAILURE.
    pub failure: bool,
    /// NOTIFY=DELAY.
    pub delay: bool,
}

impl Notify {
    /// True for NOTIFY=NEVER.
    pub fn is_never(&self) -> bool {
        !(self.success || self.failure || self.delay)
    }
}

impl fmt::Display for Notify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_never() {
            return f.write_str("NEVER");
        }
        let mut parts = Vec::new();
        if self.success {
            parts.push("SUCCESS");
        }
        if self.failure {
            parts.push("FAILURE");
        }
        if self.delay {
            parts.push("DELAY");
        }
        f.write_str(&parts.join(","))
    }
}

/// ORCPT=addr-type;xtext (RFC 3461 §4.2), decoded and checked: `mail`'s
/// type, so that the envelope, DSNs and logs read what smtpd accepted.
pub use mail::Orcpt;

/// ESMTP parameters of MAIL FROM.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MailParams {
    /// SIZE=n.
    pub size: Option<u64>,
    /// BODY=.
    pub body: Option<Body>,
    /// SMTPUTF8.
    pub smtputf8: bool,
    /// RET=.
    pub ret: Option<Ret>,
    /// ENVID=, decoded from xtext.
    pub envid: Option<String>,
    /// AUTH= (RFC 4954 §5), decoded from xtext; `<>` for an unknown submitter.
    pub auth: Option<String>,
}

/// ESMTP parameters of RCPT TO.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RcptParams {
    /// NOTIFY=.
    pub notify: Option<Notify>,
    /// ORCPT=.
    pub orcpt: Option<Orcpt>,
}

/// A parsed command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// EHLO domain.
    Ehlo(String),
    /// HELO domain.
    Helo(String),
    /// `MAIL FROM:<path> params`.
    Mail {
        /// The reverse path.
        from: Path,
        /// Its parameters.
        params: MailParams,
    },
    /// `RCPT TO:<mailbox> params`.
    Rcpt {
        /// The recipient; `<Postmaster>` alone has an empty domain name.
        to: Mailbox,
        /// Its parameters.
        params: RcptParams,
    },
    /// DATA.
    Data,
    /// `BDAT size [LAST]`.
    Bdat {
        /// Chunk size in octets.
        size: u64,
        /// LAST was given.
        last: bool,
    },
    /// RSET.
    Rset,
    /// `NOOP [text]`.
    Noop,
    /// VRFY string.
    Vrfy(String),
    /// EXPN string.
    Expn(String),
    /// `HELP [topic]`.
    Help,
    /// QUIT.
    Quit,
    /// STARTTLS.
    StartTls,
    /// `AUTH mechanism [initial-response]`, kept raw.
    Auth(String),
}

impl Command {
    /// The command's verb.
    pub fn verb(&self) -> Verb {
        match self {
            Command::Ehlo(_) => Verb::Ehlo,
            Command::Helo(_) => Verb::Helo,
            Command::Mail { .. } => Verb::Mail,
            Command::Rcpt { .. } => Verb::Rcpt,
            Command::Data => Verb::Data,
            Command::Bdat { .. } => Verb::Bdat,
            Command::Rset => Verb::Rset,
            Command::Noop => Verb::Noop,
            Command::Vrfy(_) => Verb::Vrfy,
            Command::Expn(_) => Verb::Expn,
            Command::Help => Verb::Help,
            Command::Quit => Verb::Quit,
            Command::StartTls => Verb::StartTls,
            Command::Auth(_) => Verb::Auth,
        }
    }
}

/// Why a command line was refused; [`CommandError::reply`] gives the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandError {
    /// Not valid UTF-8, or a NUL or control character in the line.
    BadCharacters,
    /// Unknown verb.
    Unrecognized,
    /// Known verb, wrong arguments; holds the usage text.
    Syntax(Verb, &'static str),
    /// Bad MAIL FROM address.
    Sender(AddressError),
    /// Bad RCPT TO address.
    Recipient(AddressError),
    /// A parameter keyword this server does not know.
    UnknownParameter(String),
    /// A parameter given twice.
    DuplicateParameter(String),
    /// A known parameter with a bad value.
    BadParameterValue(String),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.reply().text())
    }
}

impl std::error::Error for CommandError {}

impl CommandError {
    /// The reply the server sends for this error.
    pub fn reply(&self) -> Reply {
        match self {
            CommandError::BadCharacters => {
                Reply::enhanced(500, StatusCode::SYNTAX_ERROR, "Error: bad syntax")
            }
            CommandError::Unrecognized => Reply::enhanced(
                502,
                StatusCode::SYNTAX_ERROR,
                "Error: command not recognized",
            ),
            CommandError::Syntax(_, usage) => Reply::enhanced(
                501,
                StatusCode::INVALID_ARGUMENTS,
                format!("Syntax: {usage}"),
            ),
            CommandError::Sender(e) => e.reply(AddressRole::Sender),
            CommandError::Recipient(e) => e.reply(AddressRole::Recipient),
            CommandError::UnknownParameter(p) => Reply::enhanced(
                555,
                StatusCode::INVALID_ARGUMENTS,
                format!("Unsupported option: {p}"),
            ),
            CommandError::DuplicateParameter(p) => Reply::enhanced(
                555,
                StatusCode::INVALID_ARGUMENTS,
                format!("Duplicate option: {p}"),
            ),
            CommandError::BadParameterValue(p) => Reply::enhanced(
                501,
                StatusCode::INVALID_ARGUMENTS,
                format!("Bad {p} syntax"),
            ),
        }
    }
}

/// Decodes RFC 3461 xtext (`+XX` hex escapes; printable ASCII except `+` and `=`).
pub fn xtext_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => {
                let hex = b.get(i + 1..i + 3)?;
                // RFC 3461: hexchar uses upper-case hex digits; accept lower too.
                let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                out.push(v);
                i += 3;
            }
            c @ b'!'..=b'~' if c != b'=' => {
                out.push(c);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// Encodes a string as xtext (RFC 3461 §4): `+`, `=`, controls, space and non-ASCII become `+XX`.
pub fn xtext_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if (b'!'..=b'~').contains(&b) && b != b'+' && b != b'=' {
            out.push(b as char);
        } else {
            out.push_str(&format!("+{b:02X}"));
        }
    }
    out
}

/// Decodes the address of a `utf-8` ORCPT (RFC 6533): UTF-8 as it is and
/// `\x{HEX}` for a code point, a `+` being itself (as Postfix reads it,
/// though RFC 6533 wants `\x{2B}`); or, when the value is the xtext older
/// senders (Sluice's among them) wrote for a UTF-8 address, as xtext:
/// ASCII, no `\x{`, every `+` starting an upper-case `+XX` of a byte
/// xtext must escape (8-bit, `+`, `=`), decoding to UTF-8. `None` when an
/// escape is malformed.
pub fn uxtext_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let legacy = s.is_ascii()
        && !s.contains("\\x{")
        && s.contains('+')
        && b.iter().enumerate().all(|(i, &c)| {
            c != b'+'
                || b.get(i + 1..i + 3)
                    .filter(|h| h.iter().all(|x| matches!(x, b'0'..=b'9' | b'A'..=b'F')))
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .is_some_and(|v| v >= 0x80 || v == b'+' || v == b'=')
        });
    if let Some(d) = legacy.then(|| xtext_decode(s)).flatten() {
        return Some(d);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if let Some(tail) = rest.strip_prefix("\\x{") {
            let (hex, after) = tail.split_once('}')?;
            if hex.is_empty() || hex.len() > 6 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
            rest = after;
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    Some(out)
}

/// Encodes the address of a `utf-8` ORCPT as RFC 6533's utf-8-addr-xtext
/// (kept in `mail`, whose delivery status notifications write it too).
pub use mail::orcpt::uxtext_encode;

/// Splits `KEY[=VALUE]` parameters; keys are upper-cased.
fn split_params(s: &str) -> impl Iterator<Item = (String, Option<&str>)> {
    s.split(' ')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_ascii_uppercase(), Some(v)),
            None => (p.to_ascii_uppercase(), None),
        })
}

fn parse_mail_params(s: &str) -> Result<MailParams, CommandError> {
    let mut p = MailParams::default();
    let mut seen: Vec<String> = Vec::new();
    for (key, value) in split_params(s) {
        if seen.contains(&key) {
            return Err(CommandError::DuplicateParameter(key));
        }
        seen.push(key.clone());
        let bad = || CommandError::BadParameterValue(key.clone());
        match key.as_str() {
            "SIZE" => {
                let v = value.ok_or_else(bad)?;
                if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                p.size = Some(v.parse().map_err(|_| bad())?);
            }
            "BODY" => {
                let v = value.ok_or_else(bad)?.to_ascii_uppercase();
                p.body = Some(match v.as_str() {
                    "7BIT" => Body::SevenBit,
                    "8BITMIME" => Body::EightBitMime,
                    "BINARYMIME" => Body::BinaryMime,
                    _ => return Err(bad()),
                });
            }
            "SMTPUTF8" => {
                if value.is_some() {
                    return Err(bad());
                }
                p.smtputf8 = true;
            }
            "RET" => {
                let v = value.ok_or_else(bad)?.to_ascii_uppercase();
                p.ret = Some(match v.as_str() {
                    "FULL" => Ret::Full,
                    "HDRS" => Ret::Headers,
                    _ => return Err(bad()),
                });
            }
            "ENVID" => {
                // Printable US-ASCII only (RFC 3461 4.4), as Postfix's smtpd
                // checks: xtext would let "+0D+0A" through to a DSN's
                // Original-Envelope-Id field.
                let v = value.ok_or_else(bad)?;
                let d = xtext_decode(v).filter(|d| {
                    !d.is_empty() && d.len() <= 100 && d.bytes().all(|b| (b' '..=b'~').contains(&b))
                });
                p.envid = Some(d.ok_or_else(bad)?);
            }
            "AUTH" => {
                // An addr-spec or `<>`, at most a path's length.
                let v = value.ok_or_else(bad)?;
                let d = xtext_decode(v).filter(|d| !d.is_empty() && d.len() <= 256);
                p.auth = Some(d.ok_or_else(bad)?);
            }
            _ => return Err(CommandError::UnknownParameter(key)),
        }
    }
    Ok(p)
}

fn parse_rcpt_params(s: &str) -> Result<RcptParams, CommandError> {
    let mut p = RcptParams::default();
    let mut seen: Vec<String> = Vec::new();
    for (key, value) in split_params(s) {
        if seen.contains(&key) {
            return Err(CommandError::DuplicateParameter(key));
        }
        seen.push(key.clone());
        let bad = || CommandError::BadParameterValue(key.clone());
        match key.as_str() {
            "NOTIFY" => {
                let v = value.ok_or_else(bad)?.to_ascii_uppercase();
                let mut n = Notify::default();
                if v != "NEVER" {
                    for w in v.split(',') {
                        let flag = match w {
                            "SUCCESS" => &mut n.success,
                            "FAILURE" => &mut n.failure,
                            "DELAY" => &mut n.delay,
                            _ => return Err(bad()),
                        };
                        if *flag {
                            return Err(bad());
                        }
                        *flag = true;
                    }
                }
                p.notify = Some(n);
            }
            "ORCPT" => {
                // A control character (xtext lets "+0D+0A" through) would
                // reach a DSN's header fields and the log: refused here,
                // where the client can be told (Postfix's bounce server
                // replaces it with '?' instead).
                let v = value.ok_or_else(bad)?;
                let (t, x) = v.split_once(';').ok_or_else(bad)?;
                let addr = if t.eq_ignore_ascii_case("utf-8") {
                    uxtext_decode(x)
                } else {
                    xtext_decode(x)
                };
                let addr = addr.ok_or_else(bad)?;
                p.orcpt = Some(Orcpt::new(t, &addr).ok_or_else(bad)?);
            }
            _ => return Err(CommandError::UnknownParameter(key)),
        }
    }
    Ok(p)
}

/// Strips a case-insensitive prefix such as `FROM:`.
fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Options that change how a line is parsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParseOptions {
    /// The current transaction's MAIL had SMTPUTF8: UTF-8 is allowed in RCPT addresses.
    pub utf8_transaction: bool,
}

/// Parses one command line (without CRLF).
pub fn parse_command(line: &[u8], opts: ParseOptions) -> Result<Command, CommandError> {
    let line = std::str::from_utf8(line).map_err(|_| CommandError::BadCharacters)?;
    // Why: a NUL or other control byte has no place in a command and is a
    // classic way to make two parsers disagree about where a field ends.
    if line.chars().any(|c| c.is_control() && c != '\t') {
        return Err(CommandError::BadCharacters);
    }
    let line = line.trim_end_matches([' ', '\t']);
    let (word, arg) = match line.find([' ', '\t']) {
        Some(i) => (&line[..i], line[i + 1..].trim_start_matches([' ', '\t'])),
        None => (line, ""),
    };
    let verb = Verb::from_name(word).ok_or(CommandError::Unrecognized)?;
    let syntax = |usage| Err(CommandError::Syntax(verb, usage));
    match verb {
        Verb::Ehlo | Verb::Helo => {
            if arg.is_empty() {
                return syntax(if verb == Verb::Ehlo {
                    "EHLO hostname"
                } else {
                    "HELO hostname"
                });
            }
            Ok(if verb == Verb::Ehlo {
                Command::Ehlo(arg.to_string())
            } else {
                Command::Helo(arg.to_string())
            })
        }
        Verb::Mail => {
            let Some(rest) = strip_prefix_ci(arg, "FROM:") else {
                return syntax("MAIL FROM:<address>");
            };
            // The parameters decide whether the address may be UTF-8, so find
            // the path's extent leniently first, then parse for real.
            let params_at = path_end(rest);
            let params = parse_mail_params(&rest[params_at..])?;
            let (from, _) =
                parse_path(&rest[..params_at], params.smtputf8).map_err(CommandError::Sender)?;
            Ok(Command::Mail { from, params })
        }
        Verb::Rcpt => {
            let Some(rest) = strip_prefix_ci(arg, "TO:") else {
                return syntax("RCPT TO:<address>");
            };
            let params_at = path_end(rest);
            let params = parse_rcpt_params(&rest[params_at..])?;
            let path_text = rest[..params_at].trim_start_matches(' ');
            // RFC 5321 §4.1.1.3: <Postmaster> without a domain must be accepted.
            if path_text.eq_ignore_ascii_case("<postmaster>") {
                return Ok(Command::Rcpt {
                    to: Mailbox {
                        local: path_text[1..path_text.len() - 1].to_string(),
                        domain: crate::address::Domain::Name(String::new()),
                    },
                    params,
                });
            }
            match parse_path(path_text, opts.utf8_transaction).map_err(CommandError::Recipient)? {
                (Path::Mailbox(to), _) => Ok(Command::Rcpt { to, params }),
                (Path::Null, _) => Err(CommandError::Recipient(AddressError::NullNotAllowed)),
            }
        }
        Verb::Bdat => {
            let mut it = arg.split(' ').filter(|w| !w.is_empty());
            let size = it
                .next()
                .filter(|s| s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()));
            let size = size.and_then(|s| s.parse::<u64>().ok());
            let last = match it.next() {
                None => false,
                Some(w) if w.eq_ignore_ascii_case("LAST") => true,
                Some(_) => return syntax("BDAT count [LAST]"),
            };
            match (size, it.next()) {
                (Some(size), None) => Ok(Command::Bdat { size, last }),
                _ => syntax("BDAT count [LAST]"),
            }
        }
        Verb::Data | Verb::Rset | Verb::Quit | Verb::StartTls => {
            if !arg.is_empty() {
                return syntax(verb.info().name);
            }
            Ok(match verb {
                Verb::Data => Command::Data,
                Verb::Rset => Command::Rset,
                Verb::Quit => Command::Quit,
                _ => Command::StartTls,
            })
        }
        Verb::Noop => Ok(Command::Noop),
        Verb::Help => Ok(Command::Help),
        Verb::Vrfy | Verb::Expn => {
            if arg.is_empty() {
                return syntax(if verb == Verb::Vrfy {
                    "VRFY address"
                } else {
                    "EXPN mailing-list"
                });
            }
            Ok(if verb == Verb::Vrfy {
                Command::Vrfy(arg.to_string())
            } else {
                Command::Expn(arg.to_string())
            })
        }
        Verb::Auth => Ok(Command::Auth(arg.to_string())),
    }
}

/// Byte offset where a MAIL/RCPT path ends (after `>`, quotes respected) and parameters begin.
fn path_end(s: &str) -> usize {
    let t = s.trim_start_matches(' ');
    let lead = s.len() - t.len();
    if t.starts_with('<') {
        let mut in_quote = false;
        let mut esc = false;
        for (i, c) in t.char_indices() {
            if esc {
                esc = false;
            } else if in_quote && c == '\\' {
                esc = true;
            } else if c == '"' {
                in_quote = !in_quote;
            } else if c == '>' && !in_quote {
                return lead + i + 1 + t[i + 1..].find(' ').unwrap_or(t.len() - i - 1);
            }
        }
        s.len()
    } else {
        lead + t.find(' ').unwrap_or(t.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command, CommandError> {
        parse_command(s.as_bytes(), ParseOptions::default())
    }

    fn code(s: &str) -> u16 {
        p(s).unwrap_err().reply().code
    }

    #[test]
    fn table_is_complete() {
        for v in [
            Verb::Ehlo,
            Verb::Helo,
            Verb::Mail,
            Verb::Rcpt,
            Verb::Data,
            Verb::Bdat,
            Verb::Rset,
            Verb::Noop,
            Verb::Vrfy,
            Verb::Expn,
            Verb::Help,
            Verb::Quit,
            Verb::StartTls,
            Verb::Auth,
        ] {
            assert_eq!(Verb::from_name(v.info().name), Some(v));
        }
        assert!(Verb::Data.info().ends_group && !Verb::Mail.info().ends_group);
        assert!(Verb::StartTls.info().before_tls && !Verb::Mail.info().before_tls);
    }

    #[test]
    fn simple_commands() {
        assert_eq!(
            p("ehlo client.example").unwrap(),
            Command::Ehlo("client.example".into())
        );
        assert_eq!(p("HeLo x").unwrap(), Command::Helo("x".into()));
        assert_eq!(p("DATA").unwrap(), Command::Data);
        assert_eq!(p("data  ").unwrap(), Command::Data);
        assert_eq!(p("NOOP anything").unwrap(), Command::Noop);
        assert_eq!(p("quit").unwrap(), Command::Quit);
        assert_eq!(p("STARTTLS").unwrap(), Command::StartTls);
        assert_eq!(
            p("BDAT 100").unwrap(),
            Command::Bdat {
                size: 100,
                last: false
            }
        );
        assert_eq!(
            p("bdat 0 last").unwrap(),
            Command::Bdat {
                size: 0,
                last: true
            }
        );
        assert_eq!(p("VRFY root").unwrap(), Command::Vrfy("root".into()));
        assert_eq!(p("AUTH PLAIN").unwrap(), Command::Auth("PLAIN".into()));
    }

    #[test]
    fn mail_and_rcpt() {
        let c = p("MAIL FROM:<a@b.com> SIZE=1000 BODY=8bitmime RET=HDRS ENVID=QQ+2B1").unwrap();
        let Command::Mail { from, params } = c else {
            panic!()
        };
        assert_eq!(from.to_string(), "<a@b.com>");
        assert_eq!(params.size, Some(1000));
        assert_eq!(params.body, Some(Body::EightBitMime));
        assert_eq!(params.ret, Some(Ret::Headers));
        assert_eq!(params.envid.as_deref(), Some("QQ+1"));
        let c = p("MAIL FROM:<a@b.com> AUTH=alice+2Bx@b.com").unwrap();
        let Command::Mail { params, .. } = c else {
            panic!()
        };
        assert_eq!(params.auth.as_deref(), Some("alice+x@b.com"));
        for bad in [
            "MAIL FROM:<a@b.com> AUTH",
            "MAIL FROM:<a@b.com> AUTH=",
            "MAIL FROM:<a@b.com> AUTH=a+ZZ",
        ] {
            assert_eq!(p(bad).unwrap_err().reply().code, 501, "{bad}");
        }
        let c = p("mail from: <jö@b.de> SMTPUTF8").unwrap();
        assert!(matches!(
            c,
            Command::Mail {
                params: MailParams { smtputf8: true, .. },
                ..
            }
        ));
        assert!(matches!(
            p("MAIL FROM:<>").unwrap(),
            Command::Mail {
                from: Path::Null,
                ..
            }
        ));
        let c = p("RCPT TO:<c@d.com> NOTIFY=SUCCESS,DELAY ORCPT=rfc822;c+40d.com").unwrap();
        let Command::Rcpt { to, params } = c else {
            panic!()
        };
        assert_eq!(to.to_string(), "c@d.com");
        let n = params.notify.unwrap();
        assert!(n.success && n.delay && !n.failure);
        assert_eq!(params.orcpt.unwrap().addr(), "c@d.com");
        let c = p("RCPT TO:<x@y.z> NOTIFY=NEVER").unwrap();
        assert!(
            matches!(c, Command::Rcpt { params: RcptParams { notify: Some(n), .. }, .. } if n.is_never())
        );
        assert!(matches!(
            p("RCPT TO:<Postmaster>").unwrap(),
            Command::Rcpt { .. }
        ));
        let opts = ParseOptions {
            utf8_transaction: true,
        };
        assert!(parse_command("RCPT TO:<ü@x.de>".as_bytes(), opts).is_ok());
    }

    /// `line` is refused with 501 5.5.4, as a bad parameter.
    fn refused_as_bad_syntax(line: &str) {
        let e = parse_command(line.as_bytes(), ParseOptions::default()).unwrap_err();
        let r = e.reply();
        assert_eq!(
            (r.code, r.to_string().contains("5.5.4")),
            (501, true),
            "{line}: {r}"
        );
    }

    /// xtext can carry any byte: an ORCPT decoding to a control character
    /// (CR LF would add fields to a DSN and lines to the log) is refused
    /// with the reply Postfix gives a bad ORCPT.
    #[test]
    fn orcpt_with_a_control_character_is_refused() {
        for orcpt in [
            "rfc822;a@b.com+0D+0ABcc:+20x@evil.example",
            "rfc822;a+0A@b.com",
            "rfc822;a+0D@b.com",
            "rfc822;a+00@b.com",
            "rfc822;a+09@b.com",
            "rfc822;a+7F@b.com",
            "utf-8;a+C2+85@b.com",
            "rfc+0A822;a@b.com",
        ] {
            let line = format!("RCPT TO:<a@b.com> ORCPT={orcpt}");
            refused_as_bad_syntax(&line);
        }
        let ok = "RCPT TO:<a@b.com> ORCPT=utf-8;+C3+BC@b.com";
        let Ok(Command::Rcpt { params, .. }) =
            parse_command(ok.as_bytes(), ParseOptions::default())
        else {
            panic!("{ok}")
        };
        assert_eq!(params.orcpt.unwrap().addr(), "ü@b.com");
    }

    /// A `utf-8` ORCPT (RFC 6533) is read in each form a sender may use:
    /// `\x{HEX}`, UTF-8 as it is (SMTPUTF8), and older senders' `+XX`;
    /// a malformed escape, a surrogate or a control character is refused.
    #[test]
    fn a_utf8_orcpt_is_read_in_each_of_its_forms() {
        let orcpt = |v: &str| {
            let line = format!("RCPT TO:<a@b.com> ORCPT={v}");
            match parse_command(line.as_bytes(), ParseOptions::default()) {
                Ok(Command::Rcpt { params, .. }) => params.orcpt.map(|o| o.addr().to_string()),
                other => panic!("{line}: {other:?}"),
            }
        };
        for v in [
            "utf-8;\\x{FC}ser@b.com",
            "UTF-8;üser@b.com",
            "utf-8;+C3+BCser@b.com",
            "utf-8;\\x{fc}ser@b.com",
        ] {
            assert_eq!(orcpt(v).as_deref(), Some("üser@b.com"), "{v}");
        }
        assert_eq!(orcpt("utf-8;a\\x{2B}b@c.com").as_deref(), Some("a+b@c.com"));
        // A + is itself unless the whole value is older senders' xtext.
        for v in [
            "ä+x@c.com",
            "ä+de@c.com",
            "bob+cafe@x.example",
            "ä+41@c.com",
            "a+41@c.com",
            "ann+DEV@x.example",
            "bob+1234@x.example",
            "jobs+2024@x.example",
            "x+C3@y.example",
        ] {
            assert_eq!(orcpt(&format!("utf-8;{v}")).as_deref(), Some(v), "{v}");
        }
        assert_eq!(orcpt("utf-8;a+2Bb@c.com").as_deref(), Some("a+b@c.com"));
        for v in [
            "utf-8;\\x{}@b.com",
            "utf-8;\\x{D800}@b.com",
            "utf-8;\\x{110000}@b.com",
            "utf-8;\\x{FC@b.com",
            "utf-8;\\x{85}@b.com",
            "utf-8;a\\x{D}\\x{A}Bcc:x@b.com",
            "utf-8;a+C2+85b@c.com",
        ] {
            refused_as_bad_syntax(&format!("RCPT TO:<a@b.com> ORCPT={v}"));
        }
        // What the smtp client writes reads back as it was.
        for a in ["üser+tag=x@b.com", "a\\b@c.com", "用户@例子.广告"] {
            let v = format!("utf-8;{}", uxtext_encode(a));
            assert!(v.is_ascii(), "{v}");
            assert_eq!(orcpt(&v).as_deref(), Some(a), "{v}");
        }
    }

    /// An ENVID must decode to printable US-ASCII (RFC 3461 4.4): CR LF
    /// would add a field to the DSN's per-message part.
    #[test]
    fn envid_with_a_control_character_or_8bit_is_refused() {
        for envid in ["a+0D+0AX-Evil:+20yes", "a+00", "a+7F", "a+C3+BC", "a+09b"] {
            let line = format!("MAIL FROM:<a@b.com> ENVID={envid}");
            refused_as_bad_syntax(&line);
        }
        let ok = "MAIL FROM:<a@b.com> ENVID=QQ+20314";
        let Ok(Command::Mail { params, .. }) =
            parse_command(ok.as_bytes(), ParseOptions::default())
        else {
            panic!("{ok}")
        };
        assert_eq!(params.envid.as_deref(), Some("QQ 314"));
    }

    #[test]
    fn errors_and_codes() {
        for (line, want) in [
            ("FOO", 502),
            ("", 502),
            ("MAILFROM:<a@b>", 502),
            ("EHLO", 501),
            ("MAIL <a@b.com>", 501),
            ("MAIL FROM:<a@b.com> FOO=1", 555),
            ("MAIL FROM:<a@b.com> SIZE=1 SIZE=2", 555),
            ("MAIL FROM:<a@b.com> size=1 SIZE=2", 555),
            ("MAIL FROM:<a@b.com> SIZE=x", 501),
            ("MAIL FROM:<a@b.com> SIZE=99999999999999999999999", 501),
            ("MAIL FROM:<a@b.com> BODY=9BIT", 501),
            ("MAIL FROM:<a@b.com> RET=ALL", 501),
            ("MAIL FROM:<a@b.com> ENVID=a=b", 501),
            ("MAIL FROM:<a@b.com> SMTPUTF8=yes", 501),
            ("MAIL FROM:<a@@b.com>", 501),
            ("MAIL FROM:<jö@b.de>", 553),
            ("RCPT TO:<>", 501),
            ("RCPT TO:<a@b.com> NOTIFY=NEVER,SUCCESS", 501),
            ("RCPT TO:<a@b.com> NOTIFY=SUCCESS,SUCCESS", 501),
            ("RCPT TO:<a@b.com> ORCPT=rfc822", 501),
            ("RCPT TO:<a@b.com> ORCPT=rfc822;a+zz", 501),
            ("RCPT TO:<a@b.com> SIZE=1", 555),
            ("RCPT TO:<ü@x.de>", 553),
            ("RCPT TO:a", 501),
            ("DATA x", 501),
            ("BDAT", 501),
            ("BDAT x", 501),
            ("BDAT 1 LAST x", 501),
            ("BDAT 1 FIRST", 501),
            ("BDAT 99999999999999999999999", 501),
            ("NOOP \0", 500),
            ("MAIL FROM:<a\0@b.com>", 500),
        ] {
            assert_eq!(code(line), want, "{line:?}");
        }
        assert_eq!(
            parse_command(b"HELO \xff", ParseOptions::default()),
            Err(CommandError::BadCharacters)
        );
        let r = p("RCPT TO:<a@b..com>").unwrap_err().reply();
        assert_eq!(r.enhanced, Some(StatusCode::BAD_ADDRESS));
        let r = p("MAIL FROM:<a@b..com>").unwrap_err().reply();
        assert_eq!(r.enhanced, Some(StatusCode::BAD_SENDER_SYNTAX));
        assert_eq!(
            p("MAIL FROM:<a@b.com> X=1").unwrap_err().reply().enhanced,
            Some(StatusCode::INVALID_ARGUMENTS)
        );
    }

    #[test]
    fn xtext_round_trip() {
        for s in ["plain", "a+b=c d", "ünï", "", "+++", "\x01\x7f"] {
            let e = xtext_encode(s);
            assert!(e.bytes().all(|b| (b'!'..=b'~').contains(&b) && b != b'='));
            assert_eq!(xtext_decode(&e).as_deref(), Some(s), "{s}");
        }
        for bad in ["+", "+4", "+G0", "a b", "a=b", "+4\u{e9}"] {
            assert_eq!(xtext_decode(bad), None, "{bad}");
        }
        assert_eq!(xtext_decode("+2b").as_deref(), Some("+"));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_lines_never_panic(line in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), utf8 in proptest::prelude::any::<bool>()) {
            if let Err(e) = parse_command(&line, ParseOptions { utf8_transaction: utf8 }) {
                let code = e.reply().code;
                proptest::prop_assert!((500..600).contains(&code));
            }
        }

        #[test]
        fn address_like_lines(s in "(MAIL FROM:|RCPT TO:|mail from: )[<>@\\[\\]\"\\\\.:,a-zA-Z0-9 =+;_-]{0,80}") {
            match parse_command(s.as_bytes(), ParseOptions::default()) {
                Ok(Command::Mail { from, .. }) => proptest::prop_assert!(from.to_string().len() <= crate::address::MAX_PATH + 2),
                Ok(Command::Rcpt { .. }) => {}
                Ok(other) => proptest::prop_assert!(false, "{other:?}"),
                Err(e) => proptest::prop_assert!(e.reply().code >= 500),
            }
        }
    }
}
