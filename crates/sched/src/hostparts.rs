//! Host names as the scheduler writes them, split back into a name and an
//! address (shaping counts by both), and the port that makes two hosts on
//! one address different hosts for destdb.

use std::net::IpAddr;

/// The SMTP port, left out of host names.
const SMTP_PORT: u16 = 25;

/// A host's name and address as the scheduler names hosts: `mx.example`
/// (an MX name), `mx.example[192.0.2.1]` (one of its addresses, when a
/// policy counts by `remoteip`) or `[192.0.2.1]:25` (a literal); the
/// address is empty when the name does not say it. A port that
/// [`host_key`] added is left out of both.
pub fn host_parts(host: &str) -> (&str, &str) {
    let ip = |s: &str| s.parse::<IpAddr>().is_ok();
    let bare = strip_port(host);
    match bare.split_once('[') {
        Some((name, rest)) => {
            let addr = rest.split(']').next().unwrap_or("");
            let addr = if ip(addr) { addr } else { "" };
            (if name.is_empty() { host } else { name }, addr)
        }
        None => (bare, ""),
    }
}

/// The scheduler's name for host `name` (`mx.example` or
/// `mx.example[192.0.2.1]`) reached on `port`. destdb keeps one retry record
/// per name, and a host is an address and a port (Postfix keeps next hops
/// on different ports apart): a port other than 25 is written after the
/// name, `mx.example:2525`, `127.0.0.1:9`; an IPv6 address as a name is
/// bracketed as its own address first so that its colons stay unambiguous.
pub fn host_key(name: &str, port: u16) -> String {
    if port == SMTP_PORT || port == 0 {
        return name.to_string();
    }
    if name.contains(':') && !name.ends_with(']') {
        return format!("{name}[{name}]:{port}");
    }
    format!("{name}:{port}")
}

/// `host` without a `:port` that [`host_key`] added: one after a `]`, or
/// after a name without colons (an IPv6 address keeps its own).
fn strip_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((rest, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && !rest.is_empty()
                && !rest.starts_with('[')
                && (rest.ends_with(']') || !rest.contains(':')) =>
        {
            rest
        }
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_other_than_smtp_is_part_of_the_host_but_not_of_its_name() {
        let cases: &[(&str, u16, &str, (&str, &str))] = &[
            ("mx.example", 25, "mx.example", ("mx.example", "")),
            ("mx.example", 0, "mx.example", ("mx.example", "")),
            ("127.0.0.1", 9, "127.0.0.1:9", ("127.0.0.1", "")),
            ("mx.example", 2525, "mx.example:2525", ("mx.example", "")),
            (
                "mx.example[192.0.2.1]",
                2525,
                "mx.example[192.0.2.1]:2525",
                ("mx.example", "192.0.2.1"),
            ),
            (
                "2001:db8::1",
                9,
                "2001:db8::1[2001:db8::1]:9",
                ("2001:db8::1", "2001:db8::1"),
            ),
            ("2001:db8::1", 25, "2001:db8::1", ("2001:db8::1", "")),
        ];
        for &(name, port, key, parts) in cases {
            assert_eq!(host_key(name, port), key, "{name} {port}");
            assert_eq!(host_parts(key), parts, "{key}");
        }
        assert_ne!(host_key("127.0.0.1", 9), host_key("127.0.0.1", 23501));
        // Next hops written as hosts keep their old split.
        assert_eq!(
            host_parts("[192.0.2.9]:25"),
            ("[192.0.2.9]:25", "192.0.2.9")
        );
    }
}
