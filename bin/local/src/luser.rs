//! `luser_relay`: where mail for an unknown local user goes instead of
//! bouncing, as Postfix's local/unknown.c.
//!
//! The value is expanded per recipient (`$user`, `$extension`, `$domain`,
//! `$local`, `$recipient`, `$recipient_delimiter`, `$home` and `$shell`,
//! empty for a user that does not exist; `${name}`, `${name?value}`,
//! `${name:value}` and `${name?{value1}:{value2}}`), `@$myorigin` is added
//! to an address without a domain, and the address is delivered as an alias
//! target would be: a local one through the aliases again, a remote one
//! forwarded. An expansion equal to the recipient itself still bounces.

use mail::StatusCode;

use crate::alias::{self, Target};
use crate::deliver::{split_extension, Delivery};
use crate::mailbox::Failure;

/// What `$name` stands for in one recipient's `luser_relay`.
pub struct Vars<'a> {
    /// `$user`: the local part without its extension.
    pub user: &'a str,
    /// `$extension`.
    pub extension: &'a str,
    /// `$domain`.
    pub domain: &'a str,
    /// `$local`: the whole local part.
    pub local: &'a str,
    /// `$recipient`: the whole address.
    pub recipient: &'a str,
    /// `$recipient_delimiter`: the delimiter found in the address.
    pub delimiter: &'a str,
}

impl Vars<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        Some(match name {
            "user" => self.user,
            "extension" => self.extension,
            "domain" => self.domain,
            "local" => self.local,
            "recipient" => self.recipient,
            "recipient_delimiter" => self.delimiter,
            // Only known users have a home and a shell.
            "home" | "shell" => "",
            _ => return None,
        })
    }
}

/// Expands `spec` with `vars`, Postfix's mac_expand syntax; an unknown name
/// or an unclosed brace is an error naming it.
pub fn expand(spec: &str, vars: &Vars<'_>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = spec;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(inner) = after.strip_prefix('{') {
            let end = closing(inner).ok_or_else(|| format!("unclosed \"${{\" in \"{spec}\""))?;
            out.push_str(&braced(&inner[..end], vars)?);
            rest = &inner[end + 1..];
        } else {
            let n = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let name = &after[..n];
            out.push_str(value(name, vars)?);
            rest = &after[n..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The position of the `}` that closes a brace opened just before `s`.
fn closing(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

fn value<'a>(name: &str, vars: &'a Vars<'_>) -> Result<&'a str, String> {
    vars.get(name)
        .ok_or_else(|| format!("unknown name \"${name}\""))
}

/// `{value}`: the value and what follows its closing brace.
fn unbrace(s: &str) -> Option<(&str, &str)> {
    let body = s.strip_prefix('{')?;
    closing(body).map(|end| (&body[..end], &body[end + 1..]))
}

/// `name`, `name?value`, `name:value` or `name?{value1}:{value2}`.
fn braced(inner: &str, vars: &Vars<'_>) -> Result<String, String> {
    let Some(op) = inner.find(['?', ':']) else {
        return value(inner, vars).map(str::to_string);
    };
    let set = !value(&inner[..op], vars)?.is_empty();
    let arg = &inner[op + 1..];
    let (when_set, when_empty) = match (inner.as_bytes()[op], unbrace(arg)) {
        (b'?', Some((v1, rest))) => match rest.strip_prefix(':').and_then(unbrace) {
            Some((v2, _)) => (v1, v2),
            None => (v1, ""),
        },
        (b'?', None) => (arg, ""),
        (_, Some((v, _))) => ("", v),
        (_, None) => ("", arg),
    };
    expand(if set { when_set } else { when_empty }, vars)
}

impl Delivery<'_> {
    /// `targets` with each user that does not exist replaced by where
    /// `luser_relay` sends it; `addr` is the recipient, `name` the alias or
    /// user it was looked up as, `ext` its extension.
    pub(crate) fn luser_relay(
        &self,
        targets: Vec<Target>,
        addr: &str,
        name: &str,
        ext: Option<&str>,
        src: &alias::Sources<'_>,
    ) -> Result<Vec<Target>, Failure> {
        let s = self.settings;
        if s.luser_relay.is_empty() {
            return Ok(targets);
        }
        let mut out = Vec::new();
        for t in targets {
            let Target::User(u) = &t else {
                out.push(t);
                continue;
            };
            // A lookup that fails is deferred by the delivery itself.
            if !matches!(sys::privilege::lookup_user(u), Ok(None)) {
                out.push(t);
                continue;
            }
            let (local, domain) = addr.rsplit_once('@').unwrap_or((addr, ""));
            // The recipient, or a user an alias named: that user's address.
            let own;
            let (recipient, local, domain, extension) = if u == name {
                (addr, local, domain, ext.unwrap_or(""))
            } else {
                own = format!("{u}@{}", s.myhostname);
                (own.as_str(), u.as_str(), s.myhostname.as_str(), "")
            };
            let delimiter = match extension {
                "" => "",
                _ => (local.len().checked_sub(extension.len() + 1))
                    .and_then(|i| local.get(i..i + 1))
                    .unwrap_or(""),
            };
            let vars = Vars {
                user: u,
                extension,
                domain,
                local,
                recipient,
                delimiter,
            };
            let to = expand(&s.luser_relay, &vars).map_err(|e| {
                Failure::defer(StatusCode::known(4, 3, 5), format!("luser_relay: {e}"))
            })?;
            let to = to.trim().to_lowercase();
            let to = match to.contains('@') {
                true => to,
                false => format!("{to}@{}", s.myorigin.to_lowercase()),
            };
            if to.is_empty() || to.starts_with('@') || to == recipient {
                out.push(t);
                continue;
            }
            let (lp, dom) = to.rsplit_once('@').unwrap_or((&to, ""));
            if !(src.local_domain)(dom) {
                out.push(Target::Remote(to.clone()));
                continue;
            }
            let (base, _) = split_extension(lp, &s.delimiter);
            let key = if (src.lookup)(lp).is_some() { lp } else { base };
            // Delivered as an alias target: through the aliases again, but
            // an unknown user there bounces (no second relay).
            out.extend(alias::expand(key, src)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansions_as_postfix_mac_expand() {
        let v = Vars {
            user: "ghost",
            extension: "tag",
            domain: "mx.example",
            local: "ghost+tag",
            recipient: "ghost+tag@mx.example",
            delimiter: "+",
        };
        let none = Vars {
            extension: "",
            delimiter: "",
            ..v
        };
        for (spec, vars, want) in [
            ("catchall", &v, "catchall"),
            ("$user@relay.example", &v, "ghost@relay.example"),
            ("${user}.x", &v, "ghost.x"),
            ("x$recipient_delimiter$extension", &v, "x+tag"),
            (
                "$local|$domain|$recipient",
                &v,
                "ghost+tag|mx.example|ghost+tag@mx.example",
            ),
            ("u${extension?+$extension}", &v, "u+tag"),
            ("u${extension?+$extension}", &none, "u"),
            ("${extension:none}", &none, "none"),
            ("${extension:none}", &v, ""),
            ("${extension?{a}:{b}}", &v, "a"),
            ("${extension?{a}:{b}}", &none, "b"),
            ("a$$b$home$shell", &v, "a$b"),
        ] {
            assert_eq!(expand(spec, vars).as_deref(), Ok(want), "{spec}");
        }
        for bad in ["$nosuch", "${user", "${nosuch?x}"] {
            assert!(expand(bad, &v).is_err(), "{bad}");
        }
    }
}
