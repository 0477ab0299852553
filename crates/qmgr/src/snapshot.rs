//! `sluice sim`'s picture of the live queue, taken page by page without
//! stopping delivery: every message with its pending recipients (and,
//! where qmgr has routed them, their transport and nexthop), retry time
//! and hold state; every destination the scheduler knows with what its
//! deliveries showed recently (`sched::observed`); the holds in force;
//! and how long new mail took from its arrival to the scheduler.
//!
//! Messages are paged first, then destinations, each in key order. A
//! page of messages reads the journal once per message (as `sluice queue
//! list` does) and costs O(queued messages) in memory to choose its ids,
//! so a large queue is several round trips, each small enough for one
//! frame: recipients are grouped by domain and route, a page ends once it
//! holds [`GROUPS_MAX`] groups, and a message with more groups than that
//! keeps the first ones, the rest counted in the last. A page of
//! destinations holds at most [`DEST_PAGE_MAX`] (a destination with
//! samples is about 500 bytes encoded, at most about 1,300 with the
//! longest names and every ring full).
//! Holds come with the first page of messages. Messages or destinations
//! that come or go between pages are simply seen or not.

use std::collections::BTreeMap;

use ipc::queuectl::{self, SnapDest, SnapFrom, SnapMessage, SnapRcpt};
use mail::QueueId;

use crate::{QueueManager, Store};

/// Messages per page at most, whatever the client asks (a page of
/// messages with a few recipients each stays well under a frame).
pub const PAGE_MAX: u32 = 5000;
/// Recipient groups per page (and per message) at most: about 5 MB.
pub const GROUPS_MAX: usize = 100_000;
/// Destinations per page at most: under 7 MB at the longest names and
/// the fullest rings (about 1,300 bytes each).
pub const DEST_PAGE_MAX: u32 = 5000;
/// Arrival-to-scheduler times kept (a ring).
pub const PICKUPS: usize = 64;

/// How long recent first attempts took from their arrival (cleanup's
/// clock) to the scheduler: cleanup's commit, qmgr's pickup and routing,
/// which a replay adds to mail arriving after its snapshot.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pickups {
    ring: Vec<u32>,
    next: usize,
}

impl Pickups {
    /// A message that arrived at `arrival_ms` reached the scheduler at `now_ms`.
    pub(crate) fn record(&mut self, arrival_ms: u64, now_ms: u64) {
        let ms = u32::try_from(now_ms.saturating_sub(arrival_ms)).unwrap_or(u32::MAX);
        if self.ring.len() < PICKUPS {
            self.ring.push(ms);
        } else {
            self.ring[self.next] = ms;
        }
        self.next = (self.next + 1) % PICKUPS;
    }

    /// The samples, oldest first.
    pub(crate) fn samples(&self) -> Vec<u32> {
        if self.ring.len() < PICKUPS {
            return self.ring.clone();
        }
        self.ring[self.next..]
            .iter()
            .chain(&self.ring[..self.next])
            .copied()
            .collect()
    }
}

impl<S: Store> QueueManager<S> {
    /// One page of the snapshot, from where `from` says, at most `max`.
    pub(crate) fn snapshot(&self, from: &SnapFrom, max: u32) -> queuectl::Snapshot {
        match from {
            SnapFrom::Messages(after) => self.snap_messages(after.as_deref(), max),
            SnapFrom::Destinations(after) => {
                let after = after.as_ref().map(|(t, n)| (t.as_str(), n.as_str()));
                let (destinations, more) =
                    self.snap_destinations(after, max.clamp(1, DEST_PAGE_MAX) as usize);
                queuectl::Snapshot {
                    now_ms: self.now.0,
                    more,
                    destinations,
                    ..queuectl::Snapshot::default()
                }
            }
        }
    }

    fn snap_messages(&self, after: Option<&str>, max: u32) -> queuectl::Snapshot {
        let max = max.clamp(1, PAGE_MAX) as usize;
        let after: Option<QueueId> = after.and_then(|a| a.parse().ok());
        let mut ids: Vec<QueueId> = self
            .state
            .messages
            .keys()
            .filter(|id| after.is_none_or(|a| **id > a))
            .copied()
            .collect();
        let more = ids.len() > max;
        if more {
            ids.select_nth_unstable(max - 1);
            ids.truncate(max);
        }
        ids.sort();
        let mut messages: Vec<SnapMessage> = Vec::new();
        let mut groups = 0;
        let mut cut = false;
        for id in &ids {
            if groups >= GROUPS_MAX {
                cut = true;
                break;
            }
            if let Some(m) = self.snap_message(id) {
                groups += m.recipients.len();
                messages.push(m);
            }
        }
        let first = after.is_none();
        let mut page = queuectl::Snapshot {
            now_ms: self.now.0,
            messages,
            more: more || cut,
            ..queuectl::Snapshot::default()
        };
        if first {
            page.holds = self.holds_summary();
            page.holds_saved = self.holds_saved();
            page.pickup_ms = self.deliver.pickups.samples();
        }
        page
    }

    fn snap_message(&self, id: &QueueId) -> Option<SnapMessage> {
        let m = self.state.messages.get(id)?;
        let (rec, h) = self.head(id)?;
        let pending = self.state.pending(*id, &rec);
        let routes = self
            .deliver
            .by_id
            .get(id)
            .and_then(|q| self.deliver.msgs.get(q))
            .map(|d| &d.routes);
        let env = &h.envelope;
        let mut by: BTreeMap<(String, &str, &str), u32> = BTreeMap::new();
        for i in &pending {
            let Some(r) = env.recipients.get(*i as usize) else {
                continue;
            };
            let route = routes.and_then(|x| x.get(i));
            let domain = r.address.rsplit_once('@').map_or("", |(_, d)| d);
            let key = (
                domain.to_ascii_lowercase(),
                route.map_or("", |x| x.transport.as_str()),
                route.map_or("", |x| x.nexthop.as_str()),
            );
            if by.len() < GROUPS_MAX || by.contains_key(&key) {
                *by.entry(key).or_default() += 1;
            } else if let Some(mut last) = by.last_entry() {
                // Past the cap: counted with the last group.
                *last.get_mut() += 1;
            }
        }
        let recipients = by
            .into_iter()
            .map(|((domain, transport, nexthop), count)| SnapRcpt {
                domain,
                transport: transport.to_string(),
                nexthop: nexthop.to_string(),
                count,
            })
            .collect();
        Some(SnapMessage {
            id: id.to_string(),
            arrival_ms: env.arrival.as_micros() / 1000,
            sender: env.sender.clone(),
            size: env.size,
            tenant: env.tenant.clone(),
            job: env.job.clone(),
            held: m.held,
            next_attempt: m.next_attempt,
            active: self.is_active(id),
            recipients,
        })
    }

    /// The holds in force in their saved form (static ones are the
    /// policy file's, which a replay reads itself).
    fn holds_saved(&self) -> String {
        let now = self.now.0;
        self.deliver.sched.shaper_ref().map_or(String::new(), |sh| {
            let holds: Vec<shaping::Hold> = sh.active_holds(now).cloned().collect();
            shaping::holdfile::format(&holds)
        })
    }

    fn snap_destinations(&self, after: Option<(&str, &str)>, max: usize) -> (Vec<SnapDest>, bool) {
        let (page, more) = self.deliver.sched.behaviours(self.now, after, max);
        let dests = page
            .into_iter()
            .map(|(d, b, running_ms)| {
                let b = b.unwrap_or_default();
                SnapDest {
                    transport: d.transport,
                    nexthop: d.nexthop,
                    entries: d.entries,
                    window: d.window,
                    busy: d.busy,
                    dead_until_ms: d.dead_until.map(|t| t.0),
                    txn_ms: b.txn_ms,
                    greeting_ms: b.greeting_ms,
                    replies: [b.replies_2xx, b.replies_4xx, b.replies_5xx, b.conn_failures],
                    busy_ok: b.busy_ok,
                    refused_at: b.refused_at,
                    running_ms,
                }
            })
            .collect();
        (dests, more)
    }
}

#[cfg(test)]
mod tests {
    use ipc::queuectl::{Request, Response, SnapDest, SnapFrom, Snapshot};

    use super::{DEST_PAGE_MAX, PICKUPS};
    use crate::testkit::{settings, World};
    use crate::Event;

    fn page(w: &mut World, after: Option<String>, max: u32) -> Snapshot {
        ask(w, SnapFrom::Messages(after), max)
    }

    fn ask(w: &mut World, from: SnapFrom, max: u32) -> Snapshot {
        w.handle(Event::Control {
            client: 7,
            request: 1,
            body: Request::Snapshot { from, max },
        });
        match w.replies.pop() {
            Some(Response::Snapshot(s)) => *s,
            other => panic!("a snapshot, not {other:?}"),
        }
    }

    #[test]
    fn pages_cover_the_queue_with_routes_holds_retries_and_what_destinations_showed() {
        let mut w = World::new(settings());
        let a = w.arrive("alice@a.example", &["r1@b.example", "r2@c.example"]);
        w.route_all(&[]);
        w.deliver_all(|r| if r.starts_with("r1") { 250 } else { 450 });
        let held = w.stage("bob@a.example", &["r@d.example"], true);
        w.handle(Event::Committed {
            id: held,
            hold: true,
        });
        let fresh = w.arrive("carol@a.example", &["x@b.example"]);
        w.route_all(&[]);
        let first = page(&mut w, None, 2);
        assert!(first.more);
        assert_eq!(first.messages.len(), 2);
        let last = first.messages.last().map(|m| m.id.clone());
        let second = page(&mut w, last, 2);
        assert!(!second.more);
        assert!(second.holds.is_empty() && second.pickup_ms.is_empty());
        assert_eq!(
            first.pickup_ms.len(),
            2,
            "both first attempts timed from arrival to the scheduler"
        );
        assert!(
            first.destinations.is_empty(),
            "destinations come in their own pages"
        );
        let dests = ask(&mut w, SnapFrom::Destinations(None), 100);
        assert!(!dests.more && dests.messages.is_empty());
        let all: Vec<_> = first.messages.iter().chain(&second.messages).collect();
        let ids: Vec<String> = all.iter().map(|m| m.id.clone()).collect();
        let mut want = vec![a.to_string(), held.to_string(), fresh.to_string()];
        want.sort();
        assert_eq!(ids, want, "every message once, in id order");
        let by = |id: mail::QueueId| all.iter().find(|m| m.id == id.to_string()).unwrap();
        let deferred = by(a);
        assert_eq!(deferred.recipients.len(), 1, "only the pending recipient");
        assert_eq!(deferred.recipients[0].domain, "c.example");
        assert_eq!(deferred.recipients[0].count, 1);
        assert!(deferred.next_attempt > 0 && !deferred.held && !deferred.active);
        assert!(by(held).held);
        let f = by(fresh);
        assert!(f.active, "routed and in the scheduler");
        assert_eq!(f.recipients[0].nexthop, "b.example");
        assert!(!f.recipients[0].transport.is_empty());
        let b = dests
            .destinations
            .iter()
            .find(|d| d.nexthop == "b.example")
            .expect("b.example is known");
        assert_eq!(b.replies[0], 1, "one 2xx: {b:?}");
        assert_eq!(b.txn_ms.len(), 1, "one transaction timed");
        let c = dests.destinations.iter().find(|d| d.nexthop == "c.example");
        assert!(c.is_none_or(|c| c.replies[1] == 1), "{c:?}");
    }

    #[test]
    fn many_destinations_come_in_pages_in_order_each_within_a_frame() {
        let mut w = World::new(settings());
        // In messages of 100 recipients: one message of 12,000 is routed
        // slowly in a debug build.
        for m in 0..120 {
            let rcpts: Vec<String> = (0..100)
                .map(|i| format!("r@d{:05}.example", m * 100 + i))
                .collect();
            let refs: Vec<&str> = rcpts.iter().map(String::as_str).collect();
            w.arrive("alice@a.example", &refs);
            w.route_all(&[]);
        }
        let mut after = None;
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            // The client may ask for more than a page holds: qmgr caps it.
            let p = ask(&mut w, SnapFrom::Destinations(after.clone()), u32::MAX);
            pages += 1;
            assert!(p.messages.is_empty() && p.holds.is_empty());
            assert!(p.destinations.len() <= DEST_PAGE_MAX as usize);
            assert!(ipc::encode(&p).len() < ipc::MAX_FRAME as usize);
            seen.extend(
                p.destinations
                    .iter()
                    .map(|d| (d.transport.clone(), d.nexthop.clone())),
            );
            match p.destinations.last() {
                Some(d) if p.more => after = Some((d.transport.clone(), d.nexthop.clone())),
                _ => break,
            }
        }
        assert_eq!(pages, 3, "12,000 destinations in pages of 5,000");
        assert_eq!(seen.len(), 12_000, "every destination once");
        assert!(seen.windows(2).all(|x| x[0] < x[1]), "in key order");
        // After the last one there is nothing more.
        let end = ask(&mut w, SnapFrom::Destinations(seen.last().cloned()), 10);
        assert!(end.destinations.is_empty() && !end.more);
    }

    #[test]
    fn a_full_page_of_the_largest_destinations_fits_a_frame() {
        // Every sample ring full with the largest values, the longest names.
        let d = SnapDest {
            transport: "t".repeat(64),
            nexthop: format!("[{}]:65535", "h".repeat(255)),
            entries: u32::MAX,
            window: u32::MAX,
            busy: u32::MAX,
            dead_until_ms: Some(u64::MAX),
            txn_ms: vec![(u32::MAX, u16::MAX); sched::observed::SAMPLES],
            greeting_ms: vec![u32::MAX; sched::observed::GREETINGS],
            replies: [u64::MAX; 4],
            busy_ok: u32::MAX,
            refused_at: Some(u32::MAX),
            running_ms: vec![u32::MAX; sched::observed::SAMPLES],
        };
        let page = Snapshot {
            now_ms: u64::MAX,
            destinations: vec![d; DEST_PAGE_MAX as usize],
            more: true,
            pickup_ms: vec![u32::MAX; PICKUPS],
            ..Snapshot::default()
        };
        let len = ipc::encode(&page).len();
        assert!(len < ipc::MAX_FRAME as usize, "{len} bytes");
    }
}
