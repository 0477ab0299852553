//! ORCPT (RFC 3461 §4.2): the original recipient a DSN names, checked once.
//!
//! smtpd builds an [`Orcpt`] when it parses RCPT (the address decoded from
//! xtext), cleanup when address mapping rewrites a recipient, local(8)
//! when it forwards; everything that shows one (the DSN's
//! `Original-Recipient:`, the log's `orig_to=`, the smtp agent's ORCPT=)
//! reads it through this type. The envelope and the IPC keep it in its
//! stored form, `type;address` with the address decoded, which
//! [`Orcpt::parse`] reads back with the same checks: a stored value they
//! refuse (none written by Sluice, which never wrote one without `;`, but
//! an old journal may hold a control character smtpd once let through) is
//! treated as no ORCPT rather than shown. A control character is refused
//! because the address is copied into a notice's header fields and into
//! log lines, where CR and LF would start new ones.

use std::fmt;

/// Longest decoded address, in bytes (RFC 3461 §4.2 caps the parameter at 500).
pub const MAX_ORCPT: usize = 500;

/// A checked original recipient: an address type and the decoded address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Orcpt {
    addr_type: String,
    addr: String,
}

impl Orcpt {
    /// An ORCPT of type `addr_type` (letters, digits and `-`, as RFC 3461's
    /// atom for it) for `addr` (not empty, at most [`MAX_ORCPT`] bytes, no
    /// control character); `None` when either is not.
    pub fn new(addr_type: &str, addr: &str) -> Option<Orcpt> {
        split_checked(addr_type, addr).map(|(t, a)| Orcpt {
            addr_type: t.to_string(),
            addr: a.to_string(),
        })
    }

    /// The ORCPT recorded for a recipient that was rewritten or forwarded:
    /// its address as it was, `rfc822`, or `utf-8` (RFC 6533) when not ASCII.
    pub fn of_address(address: &str) -> Option<Orcpt> {
        let t = if address.is_ascii() {
            "rfc822"
        } else {
            "utf-8"
        };
        Orcpt::new(t, address)
    }

    /// Reads the stored form `type;address`, with the checks of [`Orcpt::new`].
    pub fn parse(stored: &str) -> Option<Orcpt> {
        let (t, a) = split(stored)?;
        Orcpt::new(t, a)
    }

    /// The address type, e.g. `rfc822`.
    pub fn addr_type(&self) -> &str {
        &self.addr_type
    }

    /// The original recipient, decoded.
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

/// The stored form, `type;address`.
impl fmt::Display for Orcpt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{};{}", self.addr_type, self.addr)
    }
}

/// The address a stored ORCPT names, borrowed, with the checks of
/// [`Orcpt::new`]: for callers that only show it.
pub fn stored_addr(stored: &str) -> Option<&str> {
    split(stored).map(|(_, a)| a)
}

/// Encodes the address of a `utf-8` ORCPT as RFC 6533's utf-8-addr-xtext,
/// good with or without SMTPUTF8: printable ASCII but `+`, `=` and `\` as
/// it is, every other character `\x{HEX}`. The ORCPT parameter and a
/// `message/delivery-status` (which is ASCII) give a UTF-8 address so.
pub fn uxtext_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_graphic() && !matches!(c, '+' | '=' | '\\') {
            out.push(c);
        } else {
            // HEXPOINT: at least two digits (RFC 6533).
            out.push_str(&format!("\\x{{{:02X}}}", c as u32));
        }
    }
    out
}

/// Splits and checks the stored form.
fn split(stored: &str) -> Option<(&str, &str)> {
    let (t, a) = stored.split_once(';')?;
    split_checked(t, a)
}

fn split_checked<'a>(addr_type: &'a str, addr: &'a str) -> Option<(&'a str, &'a str)> {
    let type_ok = !addr_type.is_empty()
        && addr_type
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let addr_ok =
        !addr.is_empty() && addr.len() <= MAX_ORCPT && !addr.chars().any(char::is_control);
    (type_ok && addr_ok).then_some((addr_type, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_once_for_every_reader() {
        let o = Orcpt::parse("rfc822;bob@orig.example").unwrap();
        assert_eq!((o.addr_type(), o.addr()), ("rfc822", "bob@orig.example"));
        assert_eq!(o.to_string(), "rfc822;bob@orig.example");
        assert_eq!(
            stored_addr("rfc822;bob@orig.example"),
            Some("bob@orig.example")
        );
        // The address may hold ';' (the first one ends the type).
        assert_eq!(stored_addr("rfc822;a;b@c"), Some("a;b@c"));
        let refused = [
            "bob@orig.example",                       // no type
            ";bob@orig.example",                      // empty type
            "rfc822;",                                // empty address
            "rfc 822;bob@orig.example",               // a space in the type
            "rfc822;bob@orig.example\r\nBcc: x@evil", // CR LF: a new header field
            "rfc822;bob\0@orig.example",              // NUL
            "rfc822;bob\t@orig.example",              // TAB
            "rfc822;bob\u{7f}@orig.example",          // DEL
            "utf-8;b\u{85}ob@orig.example",           // C1 NEL
        ];
        for s in refused {
            assert_eq!(Orcpt::parse(s), None, "{s:?}");
            assert_eq!(stored_addr(s), None, "{s:?}");
        }
        assert!(Orcpt::new("rfc822", &"a".repeat(MAX_ORCPT)).is_some());
        assert!(Orcpt::new("rfc822", &"a".repeat(MAX_ORCPT + 1)).is_none());
        assert_eq!(
            Orcpt::of_address("ü@例え.jp").unwrap().to_string(),
            "utf-8;ü@例え.jp"
        );
    }
}
