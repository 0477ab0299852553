//! Figures for operators: rolling delivery counters and per-destination
//! figures (deliveries, messages deferred per destination).
//!
//! Counters cost O(1) per delivery result: a bucket per second over the
//! last minute, cleared lazily as time moves on. Times are whole seconds
//! since the epoch (the counters' buckets), taken from the caller's clock.

use std::collections::HashMap;
use std::sync::Arc;

use ipc::queuectl::Counter;
use mail::QueueId;

/// Seconds of history a rolling counter keeps.
const WINDOW: usize = 60;

/// Events per second over the last minute, and their total.
#[derive(Clone, Debug)]
pub struct Rolling {
    total: u64,
    /// The second the newest bucket belongs to.
    last: u64,
    buckets: [u32; WINDOW],
}

impl Default for Rolling {
    fn default() -> Self {
        Rolling {
            total: 0,
            last: 0,
            buckets: [0; WINDOW],
        }
    }
}

impl Rolling {
    /// Counts `n` events at second `now`.
    pub fn add(&mut self, now: u64, n: u64) {
        // A clock stepping back counts in the newest bucket rather than
        // overwriting history.
        let now = now.max(self.last);
        if now > self.last {
            let gap = (now - self.last).min(WINDOW as u64);
            for s in 1..=gap {
                self.buckets[((self.last + s) % WINDOW as u64) as usize] = 0;
            }
            self.last = now;
        }
        let b = &mut self.buckets[(now % WINDOW as u64) as usize];
        *b = b.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        self.total += n;
    }

    /// Events in the `secs` seconds up to and including `now`.
    fn last_secs(&self, now: u64, secs: u64) -> u64 {
        (now.saturating_sub(secs - 1)..=now)
            .filter(|s| *s <= self.last && self.last - s < WINDOW as u64)
            .map(|s| u64::from(self.buckets[(s % WINDOW as u64) as usize]))
            .sum()
    }

    /// The counter as reported at second `now`.
    pub fn counter(&self, now: u64) -> Counter {
        Counter {
            total: self.total,
            last_10s: self.last_secs(now, 10),
            last_60s: self.last_secs(now, 60),
        }
    }

    /// Nothing counted in the last minute.
    pub fn quiet(&self, now: u64) -> bool {
        self.last_secs(now, WINDOW as u64) == 0
    }
}

/// What qmgr knows of one destination beyond the scheduler's figures.
#[derive(Debug, Default)]
pub struct DestFig {
    /// Recipients delivered.
    pub sent: Rolling,
    /// Messages deferred for it, waiting for their retry.
    pub deferred: u64,
}

/// (transport, nexthop), shared between the figures and the messages that
/// wait for the destination.
type DestKey = Arc<(String, String)>;

/// Per-destination figures: deliveries and deferred messages.
///
/// A deferred message leaves the scheduler, which then forgets the
/// destination's share of it; this keeps the count of messages waiting for
/// each destination until they are tried again, deleted or removed, so a
/// dead destination shows how much mail waits for it. Counts start when
/// qmgr starts: messages deferred before are counted once they are retried.
#[derive(Debug, Default)]
pub struct DestFigures {
    by_dest: HashMap<DestKey, DestFig>,
    waiting: HashMap<QueueId, Vec<DestKey>>,
}

impl DestFigures {
    fn key(&mut self, transport: &str, nexthop: &str) -> DestKey {
        let probe = (transport.to_string(), nexthop.to_string());
        match self.by_dest.get_key_value(&probe) {
            Some((k, _)) => k.clone(),
            None => {
                let k = Arc::new(probe);
                self.by_dest.insert(k.clone(), DestFig::default());
                k
            }
        }
    }

    /// `n` recipients were delivered to a destination.
    pub fn delivered(&mut self, now: u64, transport: &str, nexthop: &str, n: u64) {
        let k = self.key(transport, nexthop);
        if let Some(f) = self.by_dest.get_mut(&k) {
            f.sent.add(now, n);
        }
    }

    /// Message `id` has recipients deferred for a destination.
    pub fn deferred(&mut self, id: QueueId, transport: &str, nexthop: &str) {
        let k = self.key(transport, nexthop);
        let w = self.waiting.entry(id).or_default();
        if w.contains(&k) {
            return;
        }
        w.push(k.clone());
        if let Some(f) = self.by_dest.get_mut(&k) {
            f.deferred += 1;
        }
    }

    /// Message `id` is tried again, deleted or gone: it waits no more.
    pub fn forget(&mut self, id: &QueueId) {
        for k in self.waiting.remove(id).unwrap_or_default() {
            if let Some(f) = self.by_dest.get_mut(&k) {
                f.deferred = f.deferred.saturating_sub(1);
            }
        }
    }

    /// The figures of one destination.
    pub fn get(&self, transport: &str, nexthop: &str) -> Option<&DestFig> {
        self.by_dest
            .get(&(transport.to_string(), nexthop.to_string()))
    }

    /// The `n` destinations with the most deferred messages.
    pub fn most_deferred(&self, n: usize) -> Vec<(String, String)> {
        let mut v: Vec<(&DestKey, u64)> = self
            .by_dest
            .iter()
            .filter(|(_, f)| f.deferred > 0)
            .map(|(k, f)| (k, f.deferred))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        v.into_iter()
            .take(n)
            .map(|(k, _)| (k.0.clone(), k.1.clone()))
            .collect()
    }

    /// Drops destinations with nothing waiting and no delivery in the last
    /// minute, so that the table does not grow with every destination ever
    /// seen.
    pub fn prune(&mut self, now: u64) {
        self.by_dest
            .retain(|k, f| f.deferred > 0 || !f.sent.quiet(now) || Arc::strong_count(k) > 1);
    }
}

/// Delivery results since qmgr started, per recipient, and egress
/// proxy failures.
#[derive(Debug, Default)]
pub struct Totals {
    /// Delivered.
    pub sent: Rolling,
    /// Deferred.
    pub deferred: Rolling,
    /// Bounced.
    pub bounced: Rolling,
    /// Connections an egress proxy failed, per transport and proxy.
    pub proxy_failures: std::collections::BTreeMap<(String, std::net::SocketAddr), u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rolling_counts_the_last_seconds_only() {
        let mut r = Rolling::default();
        r.add(1000, 3);
        r.add(1005, 2);
        let c = r.counter(1005);
        assert_eq!((c.total, c.last_10s, c.last_60s), (5, 5, 5));
        // 1000 leaves the 10-second window at 1010.
        assert_eq!(r.counter(1010).last_10s, 2);
        assert_eq!(r.counter(1059).last_60s, 5);
        assert_eq!(r.counter(1060).last_60s, 2);
        // Buckets are reused after a minute without stale counts.
        r.add(1065, 1);
        let c = r.counter(1065);
        assert_eq!((c.total, c.last_10s, c.last_60s), (6, 1, 1));
        r.add(5000, 1);
        assert_eq!(r.counter(5000).last_60s, 1);
        // A clock that steps back counts in the newest second.
        r.add(4990, 1);
        assert_eq!(r.counter(5000).last_10s, 2);
        assert!(r.quiet(5100));
    }

    #[test]
    fn deferred_messages_are_counted_once_per_destination() {
        let id = |n| QueueId::from_parts(1_700_000_000_000_000, 1, n).unwrap();
        let mut f = DestFigures::default();
        f.deferred(id(1), "smtp", "dead.example");
        f.deferred(id(1), "smtp", "dead.example");
        f.deferred(id(1), "smtp", "other.example");
        f.deferred(id(2), "smtp", "dead.example");
        assert_eq!(f.get("smtp", "dead.example").unwrap().deferred, 2);
        assert_eq!(
            f.most_deferred(1),
            [("smtp".to_string(), "dead.example".to_string())]
        );
        f.forget(&id(1));
        assert_eq!(f.get("smtp", "dead.example").unwrap().deferred, 1);
        assert_eq!(f.get("smtp", "other.example").unwrap().deferred, 0);
        f.delivered(100, "smtp", "live.example", 4);
        f.prune(100);
        assert!(f.get("smtp", "other.example").is_none(), "nothing left");
        assert!(f.get("smtp", "live.example").is_some(), "recent deliveries");
        f.prune(200);
        assert!(f.get("smtp", "live.example").is_none());
        assert!(f.get("smtp", "dead.example").is_some(), "still waiting");
    }
}
