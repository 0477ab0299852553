//! Read-only figures for operators: the busiest destinations and the
//! active queue per transport and class, for `sluice status`, `sluice top`
//! and the metrics endpoint; and pages of destinations with what their
//! deliveries showed recently (`observed`), for `sluice sim`.
//!
//! Nothing here is on the delivery path: each call walks the destinations
//! once (O(destinations), plus O(n log n) for the n asked for) when an
//! operator asks, and changes nothing. Panics: never.

use crate::entry::Class;
use crate::ids::DestId;
use crate::observed::{Behaviour, SAMPLES};
use crate::sched::Scheduler;
use crate::time::Time;

/// One destination as an operator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestStats {
    /// Its transport's name.
    pub transport: String,
    /// Its nexthop.
    pub nexthop: String,
    /// Entries alive for it: queued, on connections and in flight.
    pub entries: u32,
    /// Entries waiting in its class queues, per class (small, medium, large).
    pub queued: [u32; 3],
    /// Entries on its connections, per class.
    pub inflight: [u32; 3],
    /// Its concurrency window.
    pub window: u32,
    /// Connections open or opening to it (busy workers).
    pub busy: u32,
    /// When deliveries are tried again, if it is dead.
    pub dead_until: Option<Time>,
}

/// One transport's share of the active queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportStats {
    /// The transport's name.
    pub name: String,
    /// Entries waiting in class queues, per class (small, medium, large).
    pub queued: [u64; 3],
    /// Entries on connections, per class.
    pub inflight: [u64; 3],
    /// Connections open or opening.
    pub connections: u32,
    /// Destinations known.
    pub destinations: u64,
    /// Of which dead.
    pub dead: u64,
}

impl Scheduler {
    /// The `top_n` destinations with the most entries (ties: dead ones
    /// first, then by transport and name, so the answer is stable).
    pub fn destination_stats(&self, top_n: usize) -> Vec<DestStats> {
        let mut ids: Vec<(u32, bool, DestId)> = self
            .dests
            .iter()
            .map(|(i, d)| (d.entries, d.dead.is_some(), i))
            .collect();
        // Borrowed, not cloned: the key is made on every comparison.
        fn key<'a>(
            s: &'a Scheduler,
            (n, dead, i): &(u32, bool, DestId),
        ) -> (std::cmp::Reverse<u32>, bool, u32, &'a str) {
            let d = &s.dests[*i];
            (std::cmp::Reverse(*n), !*dead, d.transport.0, &d.nexthop)
        }
        if ids.len() > top_n && top_n > 0 {
            ids.select_nth_unstable_by(top_n - 1, |a, b| key(self, a).cmp(&key(self, b)));
        }
        ids.truncate(top_n);
        ids.sort_by(|a, b| key(self, a).cmp(&key(self, b)));
        ids.into_iter()
            .filter_map(|(_, _, i)| self.dest_stats(i))
            .collect()
    }

    /// The figures of one destination, if the scheduler knows it.
    pub fn dest_stats(&self, d: DestId) -> Option<DestStats> {
        let x = self.dests.get(d)?;
        let mut queued = [0u32; 3];
        for c in Class::ALL {
            queued[c.idx()] = x.queues[c.idx()].len() as u32;
        }
        Some(DestStats {
            transport: self.transport_name(x.transport).to_string(),
            nexthop: x.nexthop.to_string(),
            entries: x.entries,
            queued,
            inflight: x.inflight,
            window: x.window.concurrency,
            busy: x.busy,
            dead_until: x.dead.map(|z| z.retry_at),
        })
    }

    /// The figures of the destination `nexthop` of `transport`, if known.
    pub fn destination(&self, transport: &str, nexthop: &str) -> Option<DestStats> {
        let t = self.transport_id(transport)?;
        self.dest_stats(self.dest_id(t, nexthop)?)
    }

    /// The active queue per transport and class, in configuration order.
    pub fn transport_stats(&self) -> Vec<TransportStats> {
        let mut out: Vec<TransportStats> = self
            .transports
            .iter()
            .map(|t| TransportStats {
                name: t.cfg.name.clone(),
                queued: [0; 3],
                inflight: t.inflight.map(u64::from),
                connections: t.workers,
                destinations: 0,
                dead: 0,
            })
            .collect();
        for (_, d) in self.dests.iter() {
            let Some(t) = out.get_mut(d.transport.0 as usize) else {
                continue;
            };
            for c in Class::ALL {
                t.queued[c.idx()] += d.queues[c.idx()].len() as u64;
            }
            t.destinations += 1;
            t.dead += u64::from(d.dead.is_some());
        }
        out
    }
}

/// One destination of a page: its figures, its recent behaviour (if it
/// had any) and the ages in ms of its transactions under way.
pub type Page = (DestStats, Option<Behaviour>, Vec<u32>);

impl Scheduler {
    /// Destinations with their figures, what their deliveries showed
    /// recently and how long each of their transactions under way at
    /// `now` had run, [`SAMPLES`] at most (`sluice sim`), in (transport, nexthop) order: at
    /// most `max` after `after`, and whether more follow. One page costs a
    /// pass over the destinations' names and the connections; only the
    /// page's figures are copied.
    pub fn behaviours(
        &self,
        now: Time,
        after: Option<(&str, &str)>,
        max: usize,
    ) -> (Vec<Page>, bool) {
        fn key<'a>(s: &'a Scheduler, d: &'a crate::destination::Destination) -> (&'a str, &'a str) {
            (s.transport_name(d.transport), &d.nexthop)
        }
        let mut ids: Vec<_> = self
            .dests
            .iter()
            .filter(|(_, d)| after.is_none_or(|a| key(self, d) > a))
            .map(|(i, d)| (key(self, d), i))
            .collect();
        let max = max.max(1);
        let more = ids.len() > max;
        if more {
            ids.select_nth_unstable(max - 1);
            ids.truncate(max);
        }
        ids.sort_unstable();
        let mut running: std::collections::HashMap<crate::DestId, Vec<u32>> =
            ids.iter().map(|(_, i)| (*i, Vec::new())).collect();
        for (_, c) in self.conns.iter() {
            // At most as many as transaction samples: a page stays bounded.
            if let (Some(_), Some(v)) = (c.in_flight, running.get_mut(&c.dest)) {
                if v.len() >= SAMPLES {
                    continue;
                }
                v.push(u32::try_from(now.since(c.txn_since).as_millis()).unwrap_or(u32::MAX));
            }
        }
        let page = ids
            .into_iter()
            .filter_map(|(_, i)| {
                let b = self.dests[i].observed.as_ref().map(|o| o.behaviour());
                let r = running.remove(&i).unwrap_or_default();
                Some((self.dest_stats(i)?, b, r))
            })
            .collect();
        (page, more)
    }
}

#[cfg(test)]
mod tests {
    use crate::event::{
        Action, ConnFailure, Event, NewMessage, QueueId, RecipientGroup, Status, StatusCode,
    };
    use crate::{SchedConfig, Scheduler, Time, TransportConfig};

    /// Adds a message whose `rcpts` recipients all go to `nexthop`.
    fn add(s: &mut Scheduler, q: u64, nexthop: &str, rcpts: u32) {
        let msg = NewMessage {
            queue_id: QueueId(q),
            sender: "a@x".into(),
            tenant: None,
            job: None,
            size: 1000,
            arrival: Time(0),
            attempts: 0,
            recipients: rcpts,
        };
        s.handle(Time(0), Event::MessageAdded(msg)).unwrap();
        while let Some(a) = s.poll_action() {
            if let Action::ReadRecipients { queue_id, .. } = a {
                let g = RecipientGroup {
                    domain: String::new(),
                    transport: "smtp".into(),
                    nexthop: nexthop.into(),
                    hosts: vec![vec!["mx".into()]],
                    recipients: (0..rcpts).collect(),
                };
                let ev = Event::RecipientsRead {
                    queue_id,
                    groups: vec![g],
                    remaining: 0,
                };
                s.handle(Time(0), ev).unwrap();
            }
        }
    }

    fn sched() -> Scheduler {
        let mut c = SchedConfig::default();
        c.transports[0].destination_recipient_limit = 1;
        c.transports[0].connection_backlog_limit = 1;
        Scheduler::new(c).unwrap()
    }

    #[test]
    fn busiest_first_and_counts_add_up() {
        let mut s = sched();
        add(&mut s, 1, "big.example", 12);
        add(&mut s, 2, "small.example", 1);
        let top = s.destination_stats(1);
        assert_eq!(top.len(), 1);
        let big = &top[0];
        assert_eq!(
            (big.transport.as_str(), big.nexthop.as_str()),
            ("smtp", "big.example")
        );
        assert_eq!(big.entries, 12);
        assert_eq!(big.window, 5, "the initial window");
        assert!(big.busy > 0 && big.busy <= 5, "{big:?}");
        assert!(big.dead_until.is_none());
        let q: u32 = big.queued.iter().sum::<u32>() + big.inflight.iter().sum::<u32>();
        assert_eq!(q, 12, "every entry is queued or on a connection: {big:?}");
        let both = s.destination_stats(10);
        assert_eq!(both.len(), 2);
        assert_eq!(both[1].nexthop, "small.example");
        assert_eq!(s.destination("smtp", "small.example").unwrap().entries, 1);
        assert!(s.destination("smtp", "nowhere.example").is_none());
        let t = s.transport_stats();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].destinations, 2);
        let total: u64 = t[0].queued.iter().sum::<u64>() + t[0].inflight.iter().sum::<u64>();
        assert_eq!(total, 13);
        assert_eq!(u64::from(t[0].connections), u64::from(big.busy) + 1);
    }

    #[test]
    fn a_dead_destination_shows_its_retry_time() {
        let mut s = sched();
        add(&mut s, 1, "dead.example", 20);
        let now = Time(30_000);
        loop {
            let Some(c) = s.conns.iter().map(|(c, _)| c).next() else {
                break;
            };
            let ev = Event::ConnectionFailed {
                conn: c,
                failure: ConnFailure::Unreachable,
                status: Status::new(StatusCode::SYSTEM_TEMP, "refused"),
                remote: None,
            };
            s.handle(now, ev).unwrap();
            while s.poll_action().is_some() {}
        }
        let d = s
            .destination("smtp", "dead.example")
            .expect("kept while dead");
        assert_eq!(
            d.dead_until,
            Some(now + std::time::Duration::from_secs(300))
        );
        assert_eq!(d.entries, 0, "its mail was deferred");
        assert_eq!(s.destination_stats(5)[0].nexthop, "dead.example");
        assert_eq!(s.transport_stats()[0].dead, 1);
    }

    #[test]
    fn a_replay_starts_a_destination_at_the_window_it_gives_within_the_limit() {
        let mut t = TransportConfig::new("smtp");
        t.destination_concurrency_limit = 8;
        let mut cfg = SchedConfig {
            transports: vec![t],
            ..SchedConfig::default()
        };
        for (n, w) in [("a.example", 7), ("b.example", 30)] {
            cfg.windows.insert(("smtp".into(), n.into()), w);
        }
        let mut s = Scheduler::new(cfg).unwrap();
        let now = Time(0);
        s.handle(
            now,
            Event::MessageAdded(NewMessage {
                queue_id: QueueId(1),
                sender: "s@x.example".into(),
                tenant: None,
                job: None,
                size: 100,
                arrival: now,
                attempts: 0,
                recipients: 3,
            }),
        )
        .unwrap();
        let groups = ["a.example", "b.example", "c.example"]
            .iter()
            .enumerate()
            .map(|(i, n)| RecipientGroup {
                domain: n.to_string(),
                transport: "smtp".into(),
                nexthop: n.to_string(),
                hosts: vec![vec![n.to_string()]],
                recipients: vec![i as u32],
            })
            .collect();
        s.handle(
            now,
            Event::RecipientsRead {
                queue_id: QueueId(1),
                groups,
                remaining: 0,
            },
        )
        .unwrap();
        let (page, more) = s.behaviours(now, None, 10);
        assert!(!more);
        let windows: Vec<(String, u32)> = page
            .into_iter()
            .map(|(d, _, _)| (d.nexthop, d.window))
            .collect();
        assert_eq!(
            windows,
            [
                ("a.example".to_string(), 7),
                ("b.example".to_string(), 8),
                ("c.example".to_string(), 5)
            ],
            "its own, the limit's, the transport's initial"
        );
        let (page, more) = s.behaviours(now, Some(("smtp", "a.example")), 1);
        assert!(
            more && page[0].0.nexthop == "b.example",
            "pages after a key"
        );
    }
}
