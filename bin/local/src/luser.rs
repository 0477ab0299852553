//! `luser_relay`: where mail for an unknown local user goes instead of
//! bouncing, as Postfix's local/unknown.c.
//!
//! The value is expanded per recipient (`$user`, `$extension`, `$domain`,
//! `$local`, `$recipient`, `$recipient_delimiter`, `$home` and `$shell`,
//! empty for a user that does not exist; `${name}`, `${name?value}`,
//! `${name:value}` and `${name?{value1}:{value2}}`, as config expands
//! main.cf; another name expands to nothing), `@$myorigin` is added
//! to an address without a domain, and the address is delivered as an alias
//! target would be: a local one through the aliases again, a remote one
//! forwarded. An expansion equal to the recipient itself still bounces.
//! sluice check warns about a name that is not one of these.

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
    /// The value of `$name`, `None` for a name luser_relay does not know.
    pub fn get(&self, name: &str) -> Option<&str> {
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

/// Expands `spec` for one recipient: config's `$name` forms, the names
/// of [`Vars`] only (any other expands to nothing, as in Postfix).
pub fn expand(spec: &str, vars: &Vars<'_>) -> Result<String, config::ExpandProblem> {
    config::expand_vars(spec, &|name| vars.get(name))
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
            // Postfix's local_expand: an unknown name is empty.
            ("x$nosuch${nosuch?y}", &v, "x"),
        ] {
            assert_eq!(expand(spec, vars).as_deref(), Ok(want), "{spec}");
        }
    }
}
