//! The egress proxies of `smtp_proxy`: which to try first, and which are down.
//!
//! In Halon's architecture the sending addresses live on a layer of
//! HAProxy hosts, and any instance can send from any of them. smtp(8)
//! connects to a proxy and opens with a PROXY protocol v2 header naming
//! the source address the proxy is to use and the host to reach; HAProxy
//! does the rest with `bind ... accept-proxy`, `server s 0.0.0.0` (the
//! destination the header names) and `source 0.0.0.0 usesrc clientip`
//! (the source it names). HAProxy and its own header rather than SOCKS5:
//! HAProxy does not serve SOCKS5, SOCKS5 has no standard way to ask for a
//! source address (KumoMTA ships a proxy of its own for that), and the
//! PROXY header is already what Sluice reads on the way in.
//!
//! New connections start at the next proxy in turn, so that the proxies
//! share the load. A proxy that failed goes to the back of the order for
//! [`DOWN_TIME`], so that connections do not wait on it while another
//! answers; it is still tried after the others, and a connection through
//! it brings it back. Nothing here reads the clock: the caller passes `now`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long a proxy that failed is tried only after the others.
pub const DOWN_TIME: Duration = Duration::from_secs(60);

/// The proxies of one transport and what is known of them.
#[derive(Debug, Default)]
pub struct Proxies {
    list: Vec<SocketAddr>,
    /// Per proxy of `list`: tried last until then.
    down: Vec<Option<Instant>>,
    /// Where the next connection starts in `list`.
    next: usize,
}

impl Proxies {
    /// The proxies `list` names, none known to be down.
    pub fn new(list: Vec<SocketAddr>) -> Proxies {
        Proxies {
            down: vec![None; list.len()],
            list,
            next: 0,
        }
    }

    /// A new list (a reload); what is known of proxies still in it stays.
    pub fn replace(&mut self, list: Vec<SocketAddr>) {
        if list == self.list {
            return;
        }
        let down = list
            .iter()
            .map(|p| {
                self.list
                    .iter()
                    .position(|q| q == p)
                    .and_then(|i| self.down[i])
            })
            .collect();
        *self = Proxies {
            list,
            down,
            next: 0,
        };
    }

    /// The order in which a new connection tries the proxies at `now`:
    /// those up from the next in turn, then those down, the one down the
    /// longest first. Empty: connect directly.
    pub fn order(&mut self, now: Instant) -> Vec<SocketAddr> {
        let n = self.list.len();
        if n == 0 {
            return Vec::new();
        }
        let start = self.next % n;
        self.next = (start + 1) % n;
        let turn = (0..n).map(|k| (start + k) % n);
        let mut up: Vec<usize> = Vec::with_capacity(n);
        let mut down: Vec<(Instant, usize)> = Vec::new();
        for i in turn {
            match self.down[i] {
                Some(until) if until > now => down.push((until, i)),
                _ => up.push(i),
            }
        }
        down.sort();
        up.into_iter()
            .chain(down.into_iter().map(|(_, i)| i))
            .map(|i| self.list[i])
            .collect()
    }

    /// `proxy` failed at `now`: true when it was not known to be down.
    pub fn failed(&mut self, proxy: SocketAddr, now: Instant) -> bool {
        let Some(i) = self.list.iter().position(|p| *p == proxy) else {
            return false;
        };
        let was_up = self.down[i].is_none_or(|until| until <= now);
        self.down[i] = Some(now + DOWN_TIME);
        was_up
    }

    /// `proxy` took a connection: true when it was known to be down.
    pub fn worked(&mut self, proxy: SocketAddr) -> bool {
        match self.list.iter().position(|p| *p == proxy) {
            Some(i) => self.down[i].take().is_some(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn proxies_take_turns_and_a_failed_one_goes_last_for_a_while() {
        let (a, b, c) = (
            sa("192.0.2.1:3025"),
            sa("192.0.2.2:3025"),
            sa("[2001:db8::3]:3025"),
        );
        let mut p = Proxies::new(vec![a, b, c]);
        let t0 = Instant::now();
        assert_eq!(p.order(t0), [a, b, c]);
        assert_eq!(p.order(t0), [b, c, a]);
        assert_eq!(p.order(t0), [c, a, b]);
        assert!(p.failed(b, t0), "newly down");
        assert!(!p.failed(b, t0), "already down");
        assert_eq!(p.order(t0), [a, c, b], "b tried last");
        assert!(p.failed(a, t0 + Duration::from_secs(1)));
        assert_eq!(
            p.order(t0 + Duration::from_secs(2)),
            [c, b, a],
            "the one down longest first among the down"
        );
        // Their time is up: back in turn.
        assert_eq!(p.order(t0 + DOWN_TIME + Duration::from_secs(1)), [c, a, b]);
        assert!(p.worked(a));
        assert!(!p.worked(a));
        assert_eq!(p.order(t0 + Duration::from_secs(3)), [a, c, b]);
        // A reload keeps what is known of the proxies that stay.
        p.replace(vec![b, sa("192.0.2.9:3025")]);
        assert_eq!(
            p.order(t0 + Duration::from_secs(3)),
            [sa("192.0.2.9:3025"), b]
        );
        assert!(!p.failed(sa("192.0.2.77:1"), t0), "not one of ours");
        assert!(Proxies::new(Vec::new()).order(t0).is_empty());
    }
}
