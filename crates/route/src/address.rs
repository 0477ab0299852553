//! Parsing recipient addresses as they arrive, hostile ones included.
//!
//! Turns the external form (`"john doe"@Example.COM`, `<@a,@b:u@c>`) into
//! an [`Addr`]: the local part unquoted (Postfix's internal form) and the
//! domain folded to lower case. Source routes are dropped, as RFC 5321
//! allows and Postfix does; quoting is undone and redone on output only
//! where needed. Refuses, with a typed reason: control characters and NUL,
//! more than [`MAX_ADDRESS`] bytes, non-ASCII without SMTPUTF8, an empty
//! local part, a malformed domain. Never panics.

use std::fmt;

/// The longest address accepted: 64 + 1 + 255 (RFC 3696 errata).
pub const MAX_ADDRESS: usize = 320;

/// A parsed address: unquoted local part and lower-case domain.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    /// The local part, unquoted.
    pub local: String,
    /// The domain, lower case, no trailing dot; empty when there was none.
    pub domain: String,
}

/// Why an address was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddressError {
    /// NUL, CR, LF or another control character.
    Control,
    /// Longer than [`MAX_ADDRESS`] bytes.
    TooLong(usize),
    /// Non-ASCII, and the client did not ask for SMTPUTF8.
    NeedsSmtputf8,
    /// `@domain` with nothing before the `@`.
    EmptyLocalPart,
    /// A quoted string that does not end, or text after it.
    BadQuoting,
    /// A character not allowed unquoted in a local part.
    BadLocalPart(char),
    /// A source route without its `:`.
    BadSourceRoute,
    /// A domain that is not a host name or an address literal.
    BadDomain(String),
    /// Rewriting did not settle (`%` and `!` nested beyond reason).
    TooManyRewrites,
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressError::Control => write!(f, "address contains a control character"),
            AddressError::TooLong(n) => write!(f, "address is {n} bytes long, over {MAX_ADDRESS}"),
            AddressError::NeedsSmtputf8 => write!(f, "non-ASCII address without SMTPUTF8"),
            AddressError::EmptyLocalPart => write!(f, "empty local part"),
            AddressError::BadQuoting => write!(f, "malformed quoted local part"),
            AddressError::BadLocalPart(c) => write!(
                f,
                "character '{}' not allowed in an unquoted local part",
                c.escape_debug()
            ),
            AddressError::BadSourceRoute => write!(f, "malformed source route"),
            AddressError::BadDomain(d) => write!(f, "malformed domain \"{}\"", d.escape_debug()),
            AddressError::TooManyRewrites => write!(f, "too many address rewrites"),
        }
    }
}

impl std::error::Error for AddressError {}

/// Parses an address; `Ok(None)` is the null address `<>`.
pub fn parse(text: &str, smtputf8: bool) -> Result<Option<Addr>, AddressError> {
    if text.len() > MAX_ADDRESS {
        return Err(AddressError::TooLong(text.len()));
    }
    if text.chars().any(|c| c.is_control()) {
        return Err(AddressError::Control);
    }
    if !smtputf8 && !text.is_ascii() {
        return Err(AddressError::NeedsSmtputf8);
    }
    let mut s = text.trim();
    if let Some(inner) = s.strip_prefix('<').and_then(|r| r.strip_suffix('>')) {
        s = inner.trim();
    }
    if s.is_empty() {
        return Ok(None);
    }
    if s.starts_with('@') {
        // A source route `@a,@b:user@c`: only the mailbox after ':' counts.
        let colon = source_route_end(s).ok_or(AddressError::BadSourceRoute)?;
        s = &s[colon + 1..];
        if s.is_empty() {
            return Err(AddressError::BadSourceRoute);
        }
    }
    let (local, domain) = split(s)?;
    let local = unquote(local)?;
    if local.is_empty() {
        return Err(AddressError::EmptyLocalPart);
    }
    let domain = match domain {
        Some(d) => normalize_domain(d)?,
        None => String::new(),
    };
    Ok(Some(Addr { local, domain }))
}

/// The index of the ':' ending a source route, if the prefix is one.
fn source_route_end(s: &str) -> Option<usize> {
    let colon = s.find(':')?;
    let route = &s[..colon];
    route
        .split(',')
        .all(|hop| {
            hop.strip_prefix('@')
                .is_some_and(|h| !h.is_empty() && !h.contains(['@', '"']))
        })
        .then_some(colon)
}

/// Splits at the last `@` outside quotes.
fn split(s: &str) -> Result<(&str, Option<&str>), AddressError> {
    let mut in_quotes = false;
    let mut escaped = false;
    let mut at = None;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            '@' if !in_quotes => at = Some(i),
            _ => {}
        }
    }
    if in_quotes {
        return Err(AddressError::BadQuoting);
    }
    Ok(match at {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    })
}

/// Removes quoting: `"a b"` → `a b`, `"a\"b"` → `a"b`; mixed forms such
/// as `"a".b` are accepted piecewise as RFC 822 allowed.
fn unquote(local: &str) -> Result<String, AddressError> {
    let mut out = String::with_capacity(local.len());
    let mut chars = local.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => loop {
                match chars.next() {
                    None => return Err(AddressError::BadQuoting),
                    Some('"') => break,
                    Some('\\') => out.push(chars.next().ok_or(AddressError::BadQuoting)?),
                    Some(q) => out.push(q),
                }
            },
            c if c.is_whitespace() || "()<>[],;:\\".contains(c) => {
                return Err(AddressError::BadLocalPart(c))
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Lower-cases and checks a domain; keeps address literals as written.
pub fn normalize_domain(d: &str) -> Result<String, AddressError> {
    let bad = || AddressError::BadDomain(d.to_string());
    if d.starts_with('[') {
        let inner = d
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .ok_or_else(bad)?;
        let ok = match inner.get(..5) {
            Some(p) if p.eq_ignore_ascii_case("ipv6:") => {
                inner[5..].parse::<std::net::Ipv6Addr>().is_ok()
            }
            _ => inner.parse::<std::net::Ipv4Addr>().is_ok(),
        };
        return if ok {
            Ok(d.to_ascii_lowercase())
        } else {
            Err(bad())
        };
    }
    let d = d.strip_suffix('.').unwrap_or(d);
    if d.is_empty() || d.len() > 255 {
        return Err(bad());
    }
    for label in d.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .chars()
                .all(|c| c.is_alphanumeric() || c == '-' || c == '_');
        if !ok {
            return Err(bad());
        }
    }
    Ok(d.to_lowercase())
}

/// Whether a local part must be quoted in the external form.
fn needs_quotes(local: &str) -> bool {
    local.is_empty()
        || local.starts_with('.')
        || local.ends_with('.')
        || local.contains("..")
        || local
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "()<>[],;:\\\"@".contains(c))
}

impl Addr {
    /// An address from parts already in internal form.
    pub fn new(local: &str, domain: &str) -> Addr {
        Addr {
            local: local.to_string(),
            domain: domain.to_string(),
        }
    }

    /// The internal form `local@domain`, unquoted (used as lookup key).
    pub fn internal(&self) -> String {
        if self.domain.is_empty() {
            self.local.clone()
        } else {
            format!("{}@{}", self.local, self.domain)
        }
    }
}

impl fmt::Display for Addr {
    /// The external form, quoting the local part where RFC 5321 needs it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if needs_quotes(&self.local) {
            f.write_str("\"")?;
            for c in self.local.chars() {
                if c == '"' || c == '\\' {
                    f.write_str("\\")?;
                }
                write!(f, "{c}")?;
            }
            f.write_str("\"")?;
        } else {
            f.write_str(&self.local)?;
        }
        if !self.domain.is_empty() {
            write!(f, "@{}", self.domain)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let long = format!("{}@example.com", "a".repeat(320));
        type Case<'a> = (
            &'a str,
            bool,
            Result<Option<(&'a str, &'a str)>, AddressError>,
        );
        let cases: &[Case] = &[
            ("user@Example.COM", false, Ok(Some(("user", "example.com")))),
            (
                "<User@example.com.>",
                false,
                Ok(Some(("User", "example.com"))),
            ),
            ("", false, Ok(None)),
            ("<>", false, Ok(None)),
            ("\"john doe\"@x.org", false, Ok(Some(("john doe", "x.org")))),
            ("\"a\\\"b@c\"@x.org", false, Ok(Some(("a\"b@c", "x.org")))),
            ("\"unterminated@x.org", false, Err(AddressError::BadQuoting)),
            ("@a.net,@b.net:joe@c.net", false, Ok(Some(("joe", "c.net")))),
            ("@a.net:", false, Err(AddressError::BadSourceRoute)),
            ("@example.com", false, Err(AddressError::BadSourceRoute)),
            ("@x:@example.com", false, Err(AddressError::EmptyLocalPart)),
            ("\"\"@example.com", false, Err(AddressError::EmptyLocalPart)),
            (
                "user%other@example.com",
                false,
                Ok(Some(("user%other", "example.com"))),
            ),
            (
                "host!user@example.com",
                false,
                Ok(Some(("host!user", "example.com"))),
            ),
            ("plainuser", false, Ok(Some(("plainuser", "")))),
            (
                "a b@example.com",
                false,
                Err(AddressError::BadLocalPart(' ')),
            ),
            ("a\0b@example.com", false, Err(AddressError::Control)),
            (
                "a\r\nRCPT TO:<x>@example.com",
                false,
                Err(AddressError::Control),
            ),
            (&long, false, Err(AddressError::TooLong(long.len()))),
            ("jöran@exämple.se", false, Err(AddressError::NeedsSmtputf8)),
            ("jöran@EXÄMPLE.se", true, Ok(Some(("jöran", "exämple.se")))),
            (
                "user@exa mple.com",
                false,
                Err(AddressError::BadDomain("exa mple.com".into())),
            ),
            (
                "user@-bad.com",
                false,
                Err(AddressError::BadDomain("-bad.com".into())),
            ),
            (
                "user@a..com",
                false,
                Err(AddressError::BadDomain("a..com".into())),
            ),
            ("user@", false, Err(AddressError::BadDomain("".into()))),
            ("user@[192.0.2.1]", false, Ok(Some(("user", "[192.0.2.1]")))),
            (
                "user@[IPv6:2001:DB8::1]",
                false,
                Ok(Some(("user", "[ipv6:2001:db8::1]"))),
            ),
            (
                "user@[999.1.1.1]",
                false,
                Err(AddressError::BadDomain("[999.1.1.1]".into())),
            ),
        ];
        for (text, utf8, want) in cases {
            let got = parse(text, *utf8);
            let want = want.clone().map(|o| o.map(|(l, d)| Addr::new(l, d)));
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn external_form_quotes_where_needed() {
        for (local, ext) in [
            ("joe", "joe@x"),
            ("john doe", "\"john doe\"@x"),
            ("a\"b", "\"a\\\"b\"@x"),
            (".a", "\".a\"@x"),
        ] {
            let a = Addr::new(local, "x");
            assert_eq!(a.to_string(), ext);
            assert_eq!(parse(&a.to_string(), false).unwrap(), Some(a));
        }
    }
}
