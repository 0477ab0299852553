//! Transports: the worker (process or connection) limit, the three class
//! rings, class shares and the recipient slot pool.
//!
//! Selection within a transport is Wietse's: round-robin over non-empty
//! classes, then over destinations in the class ring. To guarantee each
//! class at least a third of a busy transport (and all of an idle one), a
//! class whose entries in flight are below its fair share
//! (capacity / active classes) is served before classes at or above it;
//! when it cannot use a worker the others may, so nothing idles.
//! Panics: never.

use crate::classq::DestRing;
use crate::config::TransportConfig;
use crate::entry::Class;
use crate::feedback::FeedbackParams;
use crate::ids::{ConnId, DestId, MsgId};
use crate::time::Time;
use std::collections::{BTreeSet, VecDeque};

/// A transport.
#[derive(Clone, Debug)]
pub struct Transport {
    /// Its configuration.
    pub cfg: TransportConfig,
    /// Feedback parameters derived from `cfg`.
    pub fb: FeedbackParams,
    /// Connections open or opening.
    pub workers: u32,
    /// One destination ring per class.
    pub rings: [DestRing; 3],
    /// Next class in the round-robin.
    pub class_cursor: usize,
    /// Entries assigned to connections, per class.
    pub inflight: [u32; 3],
    /// Destinations parked until a worker frees.
    pub waiting: VecDeque<DestId>,
    /// Idle cached connections by idle time (oldest first).
    pub idle: BTreeSet<(Time, ConnId)>,
    /// Unused recipient slots (`<transport>_recipient_limit` pool).
    pub pool: u32,
    /// Messages with unread recipients and a job here, in enqueue order.
    pub unread_jobs: VecDeque<MsgId>,
}

impl Transport {
    /// A transport from its configuration.
    pub fn new(cfg: TransportConfig) -> Self {
        Transport {
            fb: FeedbackParams::from_transport(&cfg),
            pool: cfg.recipient_limit,
            cfg,
            workers: 0,
            rings: Default::default(),
            class_cursor: 0,
            inflight: [0; 3],
            waiting: VecDeque::new(),
            idle: BTreeSet::new(),
            unread_jobs: VecDeque::new(),
        }
    }

    /// Workers not in use.
    pub fn free_workers(&self) -> u32 {
        self.cfg.process_limit.saturating_sub(self.workers)
    }

    /// Entry capacity used for class shares: workers × backlog per worker.
    pub fn capacity(&self) -> u32 {
        self.cfg
            .process_limit
            .saturating_mul(self.cfg.connection_backlog_limit.max(1))
    }

    /// Classes to try, in round-robin order, under-share classes first.
    pub fn class_order(&self, shares: bool) -> ([Class; 3], usize) {
        let active: Vec<usize> = (0..3)
            .filter(|&c| !self.rings[c].is_empty() || self.inflight[c] > 0)
            .collect();
        let share = self.capacity() / (active.len().max(1) as u32);
        let mut order = [Class::Small; 3];
        let mut n = 0;
        let rot = |k: usize| (self.class_cursor + k) % 3;
        if shares {
            for k in 0..3 {
                let c = rot(k);
                if !self.rings[c].is_empty() && self.inflight[c] < share {
                    order[n] = Class::ALL[c];
                    n += 1;
                }
            }
        }
        for k in 0..3 {
            let c = rot(k);
            if !self.rings[c].is_empty() && !order[..n].contains(&Class::ALL[c]) {
                order[n] = Class::ALL[c];
                n += 1;
            }
        }
        (order, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_share_class_goes_first() {
        let mut t = Transport::new(TransportConfig::new("smtp").without_connection_reuse());
        t.cfg.process_limit = 9;
        for c in 0..3 {
            t.rings[c].push(DestId(c as u32));
        }
        t.inflight = [0, 5, 4];
        t.class_cursor = 1;
        let (order, n) = t.class_order(true);
        assert_eq!(n, 3);
        // share = 9/3 = 3: only Small is under it, then the rotation from 1.
        assert_eq!(order, [Class::Small, Class::Medium, Class::Large]);
        let (order, _) = t.class_order(false);
        assert_eq!(order, [Class::Medium, Class::Large, Class::Small]);
    }

    #[test]
    fn idle_transport_gives_all_to_one_class() {
        let mut t = Transport::new(TransportConfig::new("smtp"));
        t.rings[2].push(DestId(0));
        let (order, n) = t.class_order(true);
        assert_eq!((n, order[0]), (1, Class::Large));
        assert_eq!(t.free_workers(), 100);
    }
}
