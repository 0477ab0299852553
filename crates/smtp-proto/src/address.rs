//! RFC 5321 paths and mailboxes: `<local@domain>`, `<>`, address literals,
//! quoted local parts, source routes and SMTPUTF8.
//!
//! [`parse_path`] reads the argument of `MAIL FROM:` / `RCPT TO:` up to the
//! first space after the path and returns the path and the rest (the ESMTP
//! parameters). What it accepts, and why:
//!
//! - `<local@domain>` with a dot-string or quoted-string local part (RFC 5321
//!   §4.1.2). The local part is kept exactly as sent (quotes included), because
//!   the receiver must not rewrite it; [`Mailbox::local_unquoted`] gives the
//!   dequoted form that relay checks need.
//! - A domain of letter/digit/hyphen labels (underscores accepted, as Postfix
//!   does, because real hostnames carry them), or an address literal
//!   `[1.2.3.4]`, `[IPv6:…]` or a general literal `[tag:text]`.
//! - A source route `@a,@b:user@d` is accepted and dropped (RFC 5321 §4.1.2 and
//!   Appendix C: servers SHOULD accept and ignore it).
//! - A path without angle brackets (`MAIL FROM:user@example.com`) and spaces
//!   after the colon, as Postfix does with `smtpd_strict_rfc821_envelopes = no`.
//! - UTF-8 in local parts and domains only when `utf8` is set (the transaction's
//!   MAIL command carried SMTPUTF8, RFC 6531); otherwise a non-ASCII byte is
//!   [`AddressError::Utf8NotAllowed`] (553 5.6.7).
//!
//! Limits: a domain is at most 255 octets and each label 63 (strict: DNS cannot
//! hold more); a whole path at most 256 octets (strict, RFC 5321 §4.5.3.1.3).
//! The local part limit of 64 octets is NOT enforced, like Postfix: SRS and VERP
//! senders routinely exceed it and the path limit already bounds it.
//! Nothing here logs or panics.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::reply::{Reply, StatusCode};

/// Longest path accepted, brackets included (RFC 5321 §4.5.3.1.3).
pub const MAX_PATH: usize = 256;
/// Longest domain accepted (RFC 5321 §4.5.3.1.2).
pub const MAX_DOMAIN: usize = 255;
/// Longest domain label accepted (RFC 1035).
pub const MAX_LABEL: usize = 63;

/// The domain part of a mailbox.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Domain {
    /// A host name, as sent (case preserved).
    Name(String),
    /// `[1.2.3.4]`.
    Ipv4(Ipv4Addr),
    /// `[IPv6:...]`.
    Ipv6(Ipv6Addr),
    /// `[tag:content]`, a general address literal (kept, not interpreted).
    General {
        /// The standardized tag.
        tag: String,
        /// The literal's content.
        content: String,
    },
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Domain::Name(n) => f.write_str(n),
            Domain::Ipv4(a) => write!(f, "[{a}]"),
            Domain::Ipv6(a) => write!(f, "[IPv6:{a}]"),
            Domain::General { tag, content } => write!(f, "[{tag}:{content}]"),
        }
    }
}

/// A mailbox `local@domain`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mailbox {
    /// The local part as sent on the wire (a quoted local part keeps its quotes).
    pub local: String,
    /// The domain.
    pub domain: Domain,
}

impl Mailbox {
    /// True when the local part is a quoted string.
    pub fn is_quoted(&self) -> bool {
        self.local.starts_with('"')
    }

    /// The local part with quotes and backslash escapes removed.
    pub fn local_unquoted(&self) -> String {
        match self
            .local
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
        {
            None => self.local.clone(),
            Some(inner) => {
                let mut out = String::with_capacity(inner.len());
                let mut esc = false;
                for c in inner.chars() {
                    if esc || c != '\\' {
                        out.push(c);
                        esc = false;
                    } else {
                        esc = true;
                    }
                }
                out
            }
        }
    }

    /// True when the dequoted local part holds `@`, `%` or `!`: the old relay
    /// tricks (`user%host@relay`, `host!user@relay`) that relay checks must see.
    pub fn has_routing_chars(&self) -> bool {
        self.local_unquoted().contains(['@', '%', '!'])
    }

    /// True when any part is non-ASCII (the message then needs SMTPUTF8 downstream).
    pub fn is_utf8(&self) -> bool {
        !self.to_string().is_ascii()
    }
}

impl fmt::Display for Mailbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `<Postmaster>` (RFC 5321 §4.1.1.3) is the one mailbox without a domain.
        if self.domain == Domain::Name(String::new()) {
            return f.write_str(&self.local);
        }
        write!(f, "{}@{}", self.local, self.domain)
    }
}

/// A reverse or forward path: the null path `<>` or a mailbox.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// `<>`, the null reverse path (bounces).
    Null,
    /// `<mailbox>`.
    Mailbox(Mailbox),
}

impl Path {
    /// The mailbox, if not null.
    pub fn mailbox(&self) -> Option<&Mailbox> {
        match self {
            Path::Null => None,
            Path::Mailbox(m) => Some(m),
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Null => f.write_str("<>"),
            Path::Mailbox(m) => write!(f, "<{m}>"),
        }
    }
}

/// Why a path was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddressError {
    /// Nothing where the path should be.
    Empty,
    /// `<` without `>` (or the reverse).
    UnbalancedBrackets,
    /// The local part is not a dot-string or quoted string.
    BadLocalPart,
    /// No `@domain`.
    MissingDomain,
    /// The domain is not a valid host name.
    BadDomain,
    /// An address literal that is not `[IPv4]`, `[IPv6:...]` or `[tag:text]`.
    BadAddressLiteral,
    /// A source route that is not `@domain,@domain:`.
    BadSourceRoute,
    /// The domain or one of its labels is too long.
    DomainTooLong,
    /// The path is longer than [`MAX_PATH`].
    PathTooLong,
    /// Non-ASCII without SMTPUTF8.
    Utf8NotAllowed,
    /// `<>` where a mailbox is required (RCPT TO).
    NullNotAllowed,
    /// Characters after the path that are not separated by a space.
    TrailingGarbage,
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressError::Empty => "empty address",
            AddressError::UnbalancedBrackets => "unbalanced angle brackets",
            AddressError::BadLocalPart => "bad local part",
            AddressError::MissingDomain => "missing domain",
            AddressError::BadDomain => "bad domain",
            AddressError::BadAddressLiteral => "bad address literal",
            AddressError::BadSourceRoute => "bad source route",
            AddressError::DomainTooLong => "domain too long",
            AddressError::PathTooLong => "address too long",
            AddressError::Utf8NotAllowed => "non-ASCII address without SMTPUTF8",
            AddressError::NullNotAllowed => "null address not allowed here",
            AddressError::TrailingGarbage => "garbage after address",
        })
    }
}

impl std::error::Error for AddressError {}

/// Which envelope address an error is about; it selects the enhanced code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressRole {
    /// MAIL FROM.
    Sender,
    /// RCPT TO.
    Recipient,
}

impl AddressError {
    /// The reply for this error: 501 5.1.7 (sender) or 501 5.1.3 (recipient), 553 5.6.7 for UTF-8.
    pub fn reply(&self, role: AddressRole) -> Reply {
        if *self == AddressError::Utf8NotAllowed {
            return Reply::enhanced(
                553,
                StatusCode::UTF8_REQUIRED,
                "Error: non-ASCII address requires SMTPUTF8",
            );
        }
        let (e, who) = match role {
            AddressRole::Sender => (StatusCode::BAD_SENDER_SYNTAX, "sender"),
            AddressRole::Recipient => (StatusCode::BAD_ADDRESS, "recipient"),
        };
        Reply::enhanced(501, e, format!("Bad {who} address syntax ({self})"))
    }
}

fn is_atext(c: char, utf8: bool) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || (utf8 && !c.is_ascii())
}

/// Checks a dot-string local part: atoms of atext joined by single dots.
fn valid_dot_string(s: &str, utf8: bool) -> bool {
    !s.is_empty()
        && s.split('.')
            .all(|atom| !atom.is_empty() && atom.chars().all(|c| is_atext(c, utf8)))
}

/// Printable ASCII (%d32-126), or any non-ASCII character under SMTPUTF8.
fn printable(c: char, utf8: bool) -> bool {
    (' '..='~').contains(&c) || (utf8 && !c.is_ascii())
}

/// Checks a quoted string including its quotes.
fn valid_quoted(s: &str, utf8: bool) -> bool {
    let Some(inner) = s.strip_prefix('"').and_then(|x| x.strip_suffix('"')) else {
        return false;
    };
    if s.len() < 2 {
        return false;
    }
    let mut esc = false;
    for c in inner.chars() {
        if esc {
            // quoted-pairSMTP = "\" %d32-126
            if !printable(c, utf8) {
                return false;
            }
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else if c == '"' || !printable(c, utf8) {
            return false;
        }
    }
    !esc
}

/// Parses a domain or address literal.
pub fn parse_domain(s: &str, utf8: bool) -> Result<Domain, AddressError> {
    if let Some(lit) = s.strip_prefix('[') {
        let lit = lit
            .strip_suffix(']')
            .ok_or(AddressError::BadAddressLiteral)?;
        if let Ok(a) = lit.parse::<Ipv4Addr>() {
            return Ok(Domain::Ipv4(a));
        }
        if let Some((tag, content)) = lit.split_once(':') {
            if tag.eq_ignore_ascii_case("IPv6") {
                return content
                    .parse::<Ipv6Addr>()
                    .map(Domain::Ipv6)
                    .map_err(|_| AddressError::BadAddressLiteral);
            }
            let tag_ok = !tag.is_empty()
                && tag.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !tag.ends_with('-');
            // dcontent = %d33-90 / %d94-126
            let content_ok = !content.is_empty()
                && content
                    .bytes()
                    .all(|b| (33..=90).contains(&b) || (94..=126).contains(&b));
            if tag_ok && content_ok {
                return Ok(Domain::General {
                    tag: tag.to_string(),
                    content: content.to_string(),
                });
            }
        }
        return Err(AddressError::BadAddressLiteral);
    }
    if s.len() > MAX_DOMAIN {
        return Err(AddressError::DomainTooLong);
    }
    if s.is_empty() {
        return Err(AddressError::MissingDomain);
    }
    for label in s.split('.') {
        if label.len() > MAX_LABEL {
            return Err(AddressError::DomainTooLong);
        }
        let ok = !label.is_empty()
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| {
                c.is_ascii_alphanumeric() || c == '-' || c == '_' || (utf8 && !c.is_ascii())
            });
        if !ok {
            if !utf8 && !label.is_ascii() {
                return Err(AddressError::Utf8NotAllowed);
            }
            return Err(AddressError::BadDomain);
        }
    }
    Ok(Domain::Name(s.to_string()))
}

/// Parses `local@domain` (no brackets, no route).
pub fn parse_mailbox(s: &str, utf8: bool) -> Result<Mailbox, AddressError> {
    if !utf8 && !s.is_ascii() {
        return Err(AddressError::Utf8NotAllowed);
    }
    // The local part ends at the last '@' outside a quoted string.
    let at = if s.starts_with('"') {
        let close = quoted_end(s).ok_or(AddressError::BadLocalPart)?;
        match s[close..].strip_prefix('@') {
            Some(_) => close,
            None if close == s.len() => return Err(AddressError::MissingDomain),
            None => return Err(AddressError::BadLocalPart),
        }
    } else {
        s.rfind('@').ok_or(AddressError::MissingDomain)?
    };
    let (local, domain) = (&s[..at], &s[at + 1..]);
    let local_ok = if local.starts_with('"') {
        valid_quoted(local, utf8)
    } else {
        valid_dot_string(local, utf8)
    };
    if !local_ok {
        return Err(AddressError::BadLocalPart);
    }
    Ok(Mailbox {
        local: local.to_string(),
        domain: parse_domain(domain, utf8)?,
    })
}

/// Index just past the closing quote of a quoted string starting at 0.
fn quoted_end(s: &str) -> Option<usize> {
    let mut esc = false;
    for (i, c) in s.char_indices().skip(1) {
        if esc {
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else if c == '"' {
            return Some(i + 1);
        }
    }
    None
}

/// Strips an `@a,@b:` source route, checking its domains.
fn strip_route(s: &str, utf8: bool) -> Result<&str, AddressError> {
    if !s.starts_with('@') {
        return Ok(s);
    }
    let colon = s.find(':').ok_or(AddressError::BadSourceRoute)?;
    for hop in s[..colon].split(',') {
        let d = hop.strip_prefix('@').ok_or(AddressError::BadSourceRoute)?;
        parse_domain(d, utf8).map_err(|e| match e {
            AddressError::Utf8NotAllowed => e,
            _ => AddressError::BadSourceRoute,
        })?;
    }
    Ok(&s[colon + 1..])
}

/// Parses a path at the start of `s` (after `FROM:`/`TO:`, leading spaces allowed).
///
/// Returns the path and the rest of the line after it (the parameters, still
/// with their leading space).
pub fn parse_path(s: &str, utf8: bool) -> Result<(Path, &str), AddressError> {
    let s = s.trim_start_matches(' ');
    let (inner, rest) = if let Some(body) = s.strip_prefix('<') {
        let close = find_close(body).ok_or(AddressError::UnbalancedBrackets)?;
        (&body[..close], &body[close + 1..])
    } else {
        // Lenient form without brackets: the path ends at the first space.
        let end = s.find(' ').unwrap_or(s.len());
        let word = &s[..end];
        if word.is_empty() {
            return Err(AddressError::Empty);
        }
        if word.contains(['<', '>']) {
            return Err(AddressError::UnbalancedBrackets);
        }
        (word, &s[end..])
    };
    if !rest.is_empty() && !rest.starts_with(' ') {
        return Err(AddressError::TrailingGarbage);
    }
    if inner.len() + 2 > MAX_PATH {
        return Err(AddressError::PathTooLong);
    }
    if inner.is_empty() {
        return Ok((Path::Null, rest));
    }
    let mailbox = strip_route(inner, utf8)?;
    Ok((Path::Mailbox(parse_mailbox(mailbox, utf8)?), rest))
}

/// Position of the `>` closing the path, skipping quoted strings.
fn find_close(body: &str) -> Option<usize> {
    let mut in_quote = false;
    let mut esc = false;
    for (i, c) in body.char_indices() {
        if esc {
            esc = false;
        } else if in_quote && c == '\\' {
            esc = true;
        } else if c == '"' {
            in_quote = !in_quote;
        } else if c == '>' && !in_quote {
            return Some(i);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str, utf8: bool) -> String {
        let (p, rest) = parse_path(s, utf8).unwrap_or_else(|e| panic!("{s}: {e}"));
        format!("{p}|{rest}")
    }

    #[test]
    fn accepted_paths() {
        for (input, utf8, want) in [
            ("<a@example.com>", false, "<a@example.com>|"),
            ("<>", false, "<>|"),
            ("<> SIZE=10", false, "<>| SIZE=10"),
            ("  <a@b.c> BODY=8BITMIME", false, "<a@b.c>| BODY=8BITMIME"),
            ("a@example.com", false, "<a@example.com>|"),
            ("a@example.com SIZE=1", false, "<a@example.com>| SIZE=1"),
            ("<\"john doe\"@ex.com>", false, "<\"john doe\"@ex.com>|"),
            ("<\"a>b\"@ex.com>", false, "<\"a>b\"@ex.com>|"),
            ("<\"a\\\"b\"@ex.com>", false, "<\"a\\\"b\"@ex.com>|"),
            ("<\"\"@ex.com>", false, "<\"\"@ex.com>|"),
            ("<\"a@b\"@ex.com>", false, "<\"a@b\"@ex.com>|"),
            ("<u@[1.2.3.4]>", false, "<u@[1.2.3.4]>|"),
            ("<u@[IPv6:2001:db8::1]>", false, "<u@[IPv6:2001:db8::1]>|"),
            ("<u@[ipv6:::1]>", false, "<u@[IPv6:::1]>|"),
            ("<u@[x-tag:abc]>", false, "<u@[x-tag:abc]>|"),
            ("<@a.com,@b.com:u@d.com>", false, "<u@d.com>|"),
            ("<@a.com:u@d.com>", false, "<u@d.com>|"),
            ("<user%host@relay.com>", false, "<user%host@relay.com>|"),
            (
                "<a.b.c+tag@my_host.example>",
                false,
                "<a.b.c+tag@my_host.example>|",
            ),
            ("<jöran@bücher.de>", true, "<jöran@bücher.de>|"),
            ("<\"ö x\"@ex.com>", true, "<\"ö x\"@ex.com>|"),
        ] {
            assert_eq!(ok(input, utf8), want, "{input}");
        }
    }

    #[test]
    fn refused_paths() {
        let long_local = format!("<{}@ex.com>", "a".repeat(250));
        let long_label = format!("<a@{}.com>", "a".repeat(64));
        for (input, err) in [
            ("", AddressError::Empty),
            ("<a@b.com", AddressError::UnbalancedBrackets),
            ("a@b>", AddressError::UnbalancedBrackets),
            ("<a@b.com>x", AddressError::TrailingGarbage),
            ("<a>", AddressError::MissingDomain),
            ("<a@>", AddressError::MissingDomain),
            ("<.a@b.com>", AddressError::BadLocalPart),
            ("<a..b@b.com>", AddressError::BadLocalPart),
            ("<a.@b.com>", AddressError::BadLocalPart),
            ("<a b@b.com>", AddressError::BadLocalPart),
            ("<\"a@b.com>", AddressError::UnbalancedBrackets),
            ("<\"a\"b@b.com>", AddressError::BadLocalPart),
            ("<a\0@b.com>", AddressError::BadLocalPart),
            ("<a@-b.com>", AddressError::BadDomain),
            ("<a@b..com>", AddressError::BadDomain),
            ("<a@b.com.>", AddressError::BadDomain),
            ("<a@b c>", AddressError::BadDomain),
            ("<a@[1.2.3]>", AddressError::BadAddressLiteral),
            ("<a@[IPv6:zz]>", AddressError::BadAddressLiteral),
            ("<a@[1.2.3.4>", AddressError::BadAddressLiteral),
            ("<@a.com u@d.com>", AddressError::BadSourceRoute),
            ("<@a..com:u@d.com>", AddressError::BadSourceRoute),
            ("<a@b,@c:u@d.com>", AddressError::BadLocalPart),
            ("<jöran@b.de>", AddressError::Utf8NotAllowed),
            ("<j@bücher.de>", AddressError::Utf8NotAllowed),
            (long_local.as_str(), AddressError::PathTooLong),
            (long_label.as_str(), AddressError::DomainTooLong),
        ] {
            assert_eq!(parse_path(input, false).map(|p| p.0), Err(err), "{input:?}");
        }
    }

    #[test]
    fn helpers() {
        let m = parse_mailbox("\"a@b\\\"c\"@ex.com", false).unwrap();
        assert!(m.is_quoted());
        assert_eq!(m.local_unquoted(), "a@b\"c");
        assert!(m.has_routing_chars());
        assert!(parse_mailbox("a!b@ex.com", false)
            .unwrap()
            .has_routing_chars());
        assert!(!parse_mailbox("ab@ex.com", false)
            .unwrap()
            .has_routing_chars());
        assert!(parse_mailbox("ö@ex.com", true).unwrap().is_utf8());
        let r = AddressError::BadDomain.reply(AddressRole::Recipient);
        assert_eq!((r.code, r.enhanced), (501, Some(StatusCode::BAD_ADDRESS)));
        let r = AddressError::BadDomain.reply(AddressRole::Sender);
        assert_eq!(r.enhanced, Some(StatusCode::BAD_SENDER_SYNTAX));
        assert_eq!(
            AddressError::Utf8NotAllowed.reply(AddressRole::Sender).code,
            553
        );
    }
}
