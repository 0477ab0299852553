//! TCP port names from /etc/services, for inet service names like `smtp`.
//!
//! The file is read once per process. When it is missing or lacks a name, a
//! built-in table covers the mail ports (smtp 25, submission 587,
//! submissions/smtps 465), so a minimal container still starts. Only `tcp`
//! entries count; aliases are honoured. Malformed lines are skipped.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Ports known without /etc/services.
const BUILTIN: &[(&str, u16)] = &[
    ("smtp", 25),
    ("submission", 587),
    ("submissions", 465),
    ("smtps", 465),
    ("urd", 465),
];

/// Parses services(5) text into a map of TCP service names and aliases to ports.
pub fn parse_services(text: &str) -> HashMap<String, u16> {
    let mut map = HashMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        let (Some(name), Some(port_proto)) = (words.next(), words.next()) else {
            continue;
        };
        let Some((port, proto)) = port_proto.split_once('/') else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        if proto != "tcp" {
            continue;
        }
        for n in std::iter::once(name).chain(words) {
            map.entry(n.to_string()).or_insert(port);
        }
    }
    map
}

/// The TCP port of service `name`: /etc/services first, then the built-ins.
pub fn port_by_name(name: &str) -> Option<u16> {
    static SYSTEM: OnceLock<HashMap<String, u16>> = OnceLock::new();
    let system = SYSTEM.get_or_init(|| {
        std::fs::read_to_string("/etc/services")
            .map(|t| parse_services(&t))
            .unwrap_or_default()
    });
    system
        .get(name)
        .copied()
        .or_else(|| BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, p)| *p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let map = parse_services(
            "# comment\nsmtp\t\t25/tcp\t\tmail\nsmtp 25/udp\nsubmissions 465/tcp ssmtp smtps # tls\n\
             bad\nbad2 x/tcp\nbig 70000/tcp\ndomain 53/udp\n",
        );
        assert_eq!(map.get("smtp"), Some(&25));
        assert_eq!(map.get("mail"), Some(&25));
        assert_eq!(map.get("smtps"), Some(&465));
        assert_eq!(map.get("domain"), None);
        assert_eq!(map.get("big"), None);
        assert_eq!(map.get("tls"), None);
    }

    #[test]
    fn builtin_fallback() {
        assert_eq!(port_by_name("smtp"), Some(25));
        assert_eq!(port_by_name("submission"), Some(587));
        assert_eq!(port_by_name("smtps"), Some(465));
        assert_eq!(port_by_name("no-such-service-name"), None);
    }
}
