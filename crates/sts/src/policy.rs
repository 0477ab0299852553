//! MTA-STS policies and the DNS records that announce them (RFC 8461).
//!
//! [`parse`] reads a policy file as served at
//! `https://mta-sts.<domain>/.well-known/mta-sts.txt`: `key: value` lines
//! ended by CRLF or LF, `version: STSv1`, `mode` one of `enforce`,
//! `testing`, `none`, `max_age` in seconds (at most 31557600), and one or
//! more `mx` patterns (`mx.example.com` or `*.example.com`, a wildcard
//! standing for exactly one leftmost label). Unknown keys are ignored and
//! only the first of a repeated key counts, except `mx` (section 3.2).
//! Anything else is an error that names the line: a sender then acts as
//! if the domain had no policy, which is safer than guessing.
//!
//! [`sts_record`] and [`tlsrpt_rua`] read the `_mta-sts` and `_smtp._tls`
//! TXT records; a domain with several STS records has none (section 3.1).

use std::fmt;

/// The largest `max_age` the RFC allows (about a year).
pub const MAX_AGE_LIMIT: u64 = 31_557_600;

/// What a policy asks of senders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Deliver only to matching MX hosts over verified TLS; otherwise defer.
    Enforce,
    /// Deliver anyway; report what would have failed.
    Testing,
    /// The domain withdrew its policy.
    None,
}

impl Mode {
    /// The word as written in the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Testing => "testing",
            Mode::None => "none",
        }
    }
}

/// A parsed policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `mode`.
    pub mode: Mode,
    /// The `mx` patterns, lower case, in the order given.
    pub mx: Vec<String>,
    /// `max_age` in seconds.
    pub max_age: u64,
}

/// Why a policy file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyError {
    /// A line is not `key: value`.
    Syntax {
        /// 1-based line number.
        line: usize,
    },
    /// `version` is missing or not `STSv1`.
    Version,
    /// `mode` is missing or not one of the three words.
    Mode,
    /// `max_age` is missing, not a number, or too large.
    MaxAge,
    /// An `mx` value is not a host name or `*.` pattern, or none is given
    /// for `enforce` or `testing`.
    Mx(String),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Syntax { line } => write!(f, "line {line}: not \"key: value\""),
            PolicyError::Version => f.write_str("version is missing or not STSv1"),
            PolicyError::Mode => f.write_str("mode is missing or not enforce, testing or none"),
            PolicyError::MaxAge => {
                write!(
                    f,
                    "max_age is missing, not a number or over {MAX_AGE_LIMIT}"
                )
            }
            PolicyError::Mx(v) if v.is_empty() => f.write_str("no mx pattern"),
            PolicyError::Mx(v) => write!(f, "bad mx pattern \"{}\"", v.escape_debug()),
        }
    }
}

impl std::error::Error for PolicyError {}

/// Parses a policy file (RFC 8461 section 3.2).
pub fn parse(text: &str) -> Result<Policy, PolicyError> {
    let (mut version, mut mode, mut max_age) = (None, None, None);
    let mut mx = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.is_empty() {
            // The file may end with a line end; blank lines elsewhere are
            // not in the grammar but harm nothing.
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(PolicyError::Syntax { line: i + 1 });
        };
        let key = key.trim();
        let value = value.trim_matches(|c| c == ' ' || c == '\t');
        let key_ok = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-');
        if !key_ok {
            return Err(PolicyError::Syntax { line: i + 1 });
        }
        match key {
            "version" => {
                version.get_or_insert(value);
            }
            "mode" => {
                mode.get_or_insert(value);
            }
            "max_age" => {
                max_age.get_or_insert(value);
            }
            "mx" => {
                let p = value.to_ascii_lowercase();
                if !valid_pattern(&p) {
                    return Err(PolicyError::Mx(value.to_string()));
                }
                mx.push(p);
            }
            _ => {}
        }
    }
    if version != Some("STSv1") {
        return Err(PolicyError::Version);
    }
    let mode = match mode {
        Some("enforce") => Mode::Enforce,
        Some("testing") => Mode::Testing,
        Some("none") => Mode::None,
        _ => return Err(PolicyError::Mode),
    };
    let max_age = max_age
        .filter(|v| !v.is_empty() && v.len() <= 10 && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|v| *v <= MAX_AGE_LIMIT)
        .ok_or(PolicyError::MaxAge)?;
    if mx.is_empty() && mode != Mode::None {
        return Err(PolicyError::Mx(String::new()));
    }
    Ok(Policy { mode, mx, max_age })
}

/// A host name, or `*.` and a host name of at least two labels.
fn valid_pattern(p: &str) -> bool {
    let name = p.strip_prefix("*.").unwrap_or(p);
    valid_host(name) && (name.len() == p.len() || name.contains('.'))
}

/// LDH labels of 1 to 63 characters, not starting or ending with `-`.
fn valid_host(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

impl Policy {
    /// Whether MX host `host` matches one of the patterns (section 4.1):
    /// exactly, or `*.rest` with one label in place of the `*`.
    pub fn mx_matches(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.mx.iter().any(|p| match p.strip_prefix("*.") {
            Some(rest) => host
                .split_once('.')
                .is_some_and(|(label, tail)| !label.is_empty() && tail == rest),
            None => *p == host,
        })
    }
}

/// The `id` of a domain's `_mta-sts` TXT records (section 3.1): records
/// that do not begin with `v=STSv1` are not about MTA-STS; `None` when
/// none is, when more than one is, or when the one there is malformed.
pub fn sts_record<'a>(records: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut found: Vec<&str> = records
        .into_iter()
        .filter(|r| {
            let r = r.trim_start();
            r.strip_prefix("v=STSv1")
                .is_some_and(|rest| rest.is_empty() || rest.trim_start().starts_with(';'))
        })
        .collect();
    if found.len() != 1 {
        return None;
    }
    let fields = fields(found.pop()?)?;
    let id = fields.iter().find(|(k, _)| *k == "id").map(|(_, v)| *v)?;
    (!id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| id.to_string())
}

/// The `mailto:` addresses of a domain's `_smtp._tls` TXT record (RFC
/// 8460 section 3): exactly one record beginning with `v=TLSRPTv1`, its
/// `rua` a comma-separated list of URIs; `https:` ones are not used here.
pub fn tlsrpt_rua<'a>(records: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let found: Vec<&str> = records
        .into_iter()
        .filter(|r| {
            r.trim_start()
                .strip_prefix("v=TLSRPTv1")
                .is_some_and(|rest| rest.is_empty() || rest.trim_start().starts_with(';'))
        })
        .collect();
    let [one] = found.as_slice() else {
        return Vec::new();
    };
    let Some(fields) = fields(one) else {
        return Vec::new();
    };
    let Some((_, rua)) = fields.iter().find(|(k, _)| *k == "rua") else {
        return Vec::new();
    };
    rua.split(',')
        .filter_map(|u| {
            let u = u.trim();
            let rest = u
                .get(..7)
                .filter(|s| s.eq_ignore_ascii_case("mailto:"))
                .map(|_| &u[7..])?;
            // Header fields (`?subject=`) are not used.
            let addr = percent_decode(rest.split('?').next().unwrap_or(""))?;
            let (local, domain) = addr.rsplit_once('@')?;
            (!local.is_empty()
                && valid_host(&domain.to_ascii_lowercase())
                && !addr.bytes().any(|b| b <= b' ' || b == b'<' || b == b'>'))
            .then_some(addr)
        })
        .collect()
}

/// `k=v` fields separated by `;`, the first being `v=`.
fn fields(record: &str) -> Option<Vec<(&str, &str)>> {
    let mut out = Vec::new();
    for part in record.split(';') {
        let part = part.trim_matches(|c| c == ' ' || c == '\t');
        if part.is_empty() {
            continue;
        }
        let (k, v) = part.split_once('=')?;
        out.push((k.trim(), v.trim()));
    }
    Some(out)
}

/// `%XX` escapes of a URI, as UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_example_parses() {
        let p = parse(
            "version: STSv1\r\nmode: enforce\r\nmx: mail.example.com\r\nmx: *.example.net\r\nmx: backupmx.example.com\r\nmax_age: 604800\r\n",
        )
        .unwrap();
        assert_eq!(p.mode, Mode::Enforce);
        assert_eq!(p.max_age, 604800);
        assert_eq!(
            p.mx,
            ["mail.example.com", "*.example.net", "backupmx.example.com"]
        );
        assert!(p.mx_matches("mail.example.com"));
        assert!(p.mx_matches("MX1.Example.NET."));
        assert!(!p.mx_matches("a.mx1.example.net"));
        assert!(!p.mx_matches("example.net"));
        assert!(!p.mx_matches("mail.example.com.evil.test"));
    }

    #[test]
    fn bad_policies_are_refused_with_the_reason() {
        let cases: &[(&str, PolicyError)] = &[
            (
                "mode: enforce\nmx: a.test\nmax_age: 1\n",
                PolicyError::Version,
            ),
            (
                "version: STSv2\nmode: enforce\nmx: a.test\nmax_age: 1\n",
                PolicyError::Version,
            ),
            (
                "version: STSv1\nmode: strict\nmx: a.test\nmax_age: 1\n",
                PolicyError::Mode,
            ),
            (
                "version: STSv1\nmode: enforce\nmx: a.test\n",
                PolicyError::MaxAge,
            ),
            (
                "version: STSv1\nmode: enforce\nmx: a.test\nmax_age: -1\n",
                PolicyError::MaxAge,
            ),
            (
                "version: STSv1\nmode: enforce\nmx: a.test\nmax_age: 31557601\n",
                PolicyError::MaxAge,
            ),
            (
                "version: STSv1\nmode: enforce\nmax_age: 86400\n",
                PolicyError::Mx(String::new()),
            ),
            (
                "version: STSv1\nmode: testing\nmx: *.test\nmax_age: 1\n",
                PolicyError::Mx("*.test".into()),
            ),
            (
                "version: STSv1\nmode: testing\nmx: a..test\nmax_age: 1\n",
                PolicyError::Mx("a..test".into()),
            ),
            (
                "version: STSv1\nmode: testing\nmx: a.*.test\nmax_age: 1\n",
                PolicyError::Mx("a.*.test".into()),
            ),
            ("version: STSv1\n<html>\n", PolicyError::Syntax { line: 2 }),
            (
                "version: STSv1\nmode: enforce\nmx: a\0.test\nmax_age: 1\n",
                PolicyError::Mx("a\0.test".into()),
            ),
            ("", PolicyError::Version),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).as_ref(), Err(want), "{text:?}");
        }
    }

    #[test]
    fn first_key_wins_unknown_keys_are_ignored_and_none_needs_no_mx() {
        let p =
            parse("version: STSv1\nmode: none\nmode: enforce\nmax_age: 10\nfuture: x\n").unwrap();
        assert_eq!(p.mode, Mode::None);
        assert!(p.mx.is_empty());
    }

    #[test]
    fn sts_records() {
        assert_eq!(
            sts_record(["v=STSv1; id=20160831085700Z;"]),
            Some("20160831085700Z".into())
        );
        assert_eq!(
            sts_record(["v=STSv1;id=abc", "v=spf1 -all"]),
            Some("abc".into())
        );
        assert_eq!(
            sts_record(["v=STSv1; id=a", "v=STSv1; id=b"]),
            None,
            "two records"
        );
        assert_eq!(sts_record(["v=STSv1; id=has-dash"]), None);
        assert_eq!(sts_record(["v=STSv1;"]), None);
        assert_eq!(sts_record(["v=STSv10; id=a"]), None);
        assert_eq!(sts_record(Vec::<&str>::new()), None);
    }

    #[test]
    fn tlsrpt_records() {
        assert_eq!(
            tlsrpt_rua(["v=TLSRPTv1; rua=mailto:reports@example.com,https://r.example.com/x"]),
            ["reports@example.com"]
        );
        assert_eq!(
            tlsrpt_rua(["v=TLSRPTv1;rua=mailto:a%2Bb@example.com?subject=x, mailto:c@d.example"]),
            ["a+b@example.com", "c@d.example"]
        );
        assert!(tlsrpt_rua([
            "v=TLSRPTv1; rua=mailto:a@b.example",
            "v=TLSRPTv1; rua=mailto:c@d.example"
        ])
        .is_empty());
        assert!(tlsrpt_rua(["v=TLSRPTv1; rua=mailto:<x>@b.example"]).is_empty());
        assert!(tlsrpt_rua(["v=STSv1; id=1"]).is_empty());
    }
}
