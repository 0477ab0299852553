//! The receivers of a move, used in turn: each `--to HOST:PORT`, and
//! within one, each address its name resolves to.

use std::net::SocketAddr;

/// One receiver address and the name its certificate must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// As given on the command line.
    pub given: String,
    /// The host part (a name or an address), checked against the
    /// receiver's certificate.
    pub host: String,
    /// One of its addresses.
    pub addr: SocketAddr,
}

/// Splits `HOST:PORT` or `[ADDR]:PORT`.
pub fn split(given: &str) -> Result<(String, u16), String> {
    let bad = || format!("--to {given:?}: write HOST:PORT or [ADDRESS]:PORT");
    let (host, port) = given.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

/// Every (target, address) pair, interleaved so that consecutive picks
/// go to different targets first, then to a target's other addresses.
pub fn interleave(resolved: Vec<(String, String, Vec<SocketAddr>)>) -> Vec<Target> {
    let longest = resolved.iter().map(|r| r.2.len()).max().unwrap_or(0);
    let mut out = Vec::new();
    for i in 0..longest {
        for (given, host, addrs) in &resolved {
            if let Some(a) = addrs.get(i) {
                out.push(Target {
                    given: given.clone(),
                    host: host.clone(),
                    addr: *a,
                });
            }
        }
    }
    out
}

/// Round-robin over targets.
#[derive(Debug)]
pub struct Rotation {
    targets: Vec<Target>,
    next: usize,
}

impl Rotation {
    /// Over these targets.
    pub fn new(targets: Vec<Target>) -> Rotation {
        Rotation { targets, next: 0 }
    }

    /// The targets.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// The index of the next target in turn, skipping those `usable`
    /// says no to; `None` when none is.
    pub fn pick(&mut self, usable: impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.targets.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if usable(i) {
                self.next = (i + 1) % n;
                return Some(i);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn targets_and_their_addresses_take_turns() {
        let t = interleave(vec![
            (
                "a:1".into(),
                "a".into(),
                vec![a("127.0.0.1:1"), a("127.0.0.2:1")],
            ),
            ("b:2".into(), "b".into(), vec![a("127.0.0.3:2")]),
        ]);
        let order: Vec<_> = t.iter().map(|t| t.addr.to_string()).collect();
        assert_eq!(order, ["127.0.0.1:1", "127.0.0.3:2", "127.0.0.2:1"]);
        let mut r = Rotation::new(t);
        let picks: Vec<_> = (0..6).map(|_| r.pick(|_| true).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        // A target that failed is skipped; none usable: None.
        let picks: Vec<_> = (0..3).map(|_| r.pick(|i| i != 1).unwrap()).collect();
        assert_eq!(picks, [0, 2, 0]);
        assert_eq!(r.pick(|_| false), None);
    }

    #[test]
    fn host_port_forms() {
        assert_eq!(
            split("mx.example:2526").unwrap(),
            ("mx.example".into(), 2526)
        );
        assert_eq!(split("[::1]:25").unwrap(), ("::1".into(), 25));
        for bad in ["mx.example", "mx:0", ":25", "mx:x"] {
            assert!(split(bad).is_err(), "{bad}");
        }
    }
}
