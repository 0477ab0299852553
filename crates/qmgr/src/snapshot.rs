//! `sluice sim`'s picture of the live queue, taken page by page without
//! stopping delivery: every message with its pending recipients (and,
//! where qmgr has routed them, their transport and nexthop), retry time
//! and hold state; every destination the scheduler knows with what its
//! deliveries showed recently (`sched::observed`); the holds in force.
//!
//! A page reads the journal once per message (as `sluice queue list`
//! does) and costs O(queued messages) in memory to choose its ids, so a
//! large queue is several round trips, each small enough for one frame:
//! recipients are grouped by domain and route, a page ends once it holds
//! [`GROUPS_MAX`] groups, and a message with more groups than that keeps
//! the first ones, the rest counted in the last. Destinations and holds
//! come with the first page only. Messages that come or go between pages
//! are simply seen or not.

use std::collections::BTreeMap;

use ipc::queuectl::{self, SnapDest, SnapMessage, SnapRcpt};
use mail::QueueId;

use crate::{QueueManager, Store};

/// Messages per page at most, whatever the client asks (a page of
/// messages with a few recipients each stays well under a frame).
pub const PAGE_MAX: u32 = 5000;
/// Recipient groups per page (and per message) at most: about 5 MB.
pub const GROUPS_MAX: usize = 100_000;

impl<S: Store> QueueManager<S> {
    /// One page of the snapshot: messages after `after`, at most `max`.
    pub(crate) fn snapshot(&self, after: Option<&str>, max: u32) -> queuectl::Snapshot {
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
        queuectl::Snapshot {
            now_ms: self.now.0,
            messages,
            more: more || cut,
            destinations: if first {
                self.snap_destinations()
            } else {
                Vec::new()
            },
            holds: if first {
                self.holds_summary()
            } else {
                Vec::new()
            },
        }
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

    fn snap_destinations(&self) -> Vec<SnapDest> {
        self.deliver
            .sched
            .behaviours()
            .into_iter()
            .map(|(d, b)| {
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
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use ipc::queuectl::{Request, Response, Snapshot};

    use crate::testkit::{settings, World};
    use crate::Event;

    fn page(w: &mut World, after: Option<String>, max: u32) -> Snapshot {
        w.handle(Event::Control {
            client: 7,
            request: 1,
            body: Request::Snapshot { after, max },
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
        assert!(second.destinations.is_empty(), "with the first page only");
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
        let b = first
            .destinations
            .iter()
            .find(|d| d.nexthop == "b.example")
            .expect("b.example is known");
        assert_eq!(b.replies[0], 1, "one 2xx: {b:?}");
        assert_eq!(b.txn_ms.len(), 1, "one transaction timed");
        let c = first.destinations.iter().find(|d| d.nexthop == "c.example");
        assert!(c.is_none_or(|c| c.replies[1] == 1), "{c:?}");
    }
}
