//! `sluice sim`'s picture of the live queue, taken page by page without
//! stopping delivery: every message with its pending recipients (and,
//! where qmgr has routed them, their transport and nexthop), retry time
//! and hold state; every destination the scheduler knows with what its
//! deliveries showed recently (`sched::observed`); the holds in force.
//!
//! A page reads the journal once per message (as `sluice queue list`
//! does) and costs O(queued messages) in memory to choose its ids, so a
//! large queue is several round trips, each small enough for one frame.
//! Messages that come or go between pages are simply seen or not.

use ipc::queuectl::{self, SnapDest, SnapMessage, SnapRcpt};
use mail::QueueId;

use crate::{QueueManager, Store};

/// Messages per page at most, whatever the client asks (a page of
/// messages with a few recipients each stays well under a frame).
pub const PAGE_MAX: u32 = 5000;

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
        let messages = ids.iter().filter_map(|id| self.snap_message(id)).collect();
        queuectl::Snapshot {
            now_ms: self.now.0,
            messages,
            more,
            destinations: self.snap_destinations(),
            holds: self.holds_summary(),
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
        let recipients = pending
            .iter()
            .filter_map(|i| {
                let r = env.recipients.get(*i as usize)?;
                let route = routes.and_then(|x| x.get(i));
                Some(SnapRcpt {
                    address: r.address.clone(),
                    transport: route.map(|x| x.transport.clone()).unwrap_or_default(),
                    nexthop: route.map(|x| x.nexthop.clone()).unwrap_or_default(),
                })
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
        let all: Vec<_> = first.messages.iter().chain(&second.messages).collect();
        let ids: Vec<String> = all.iter().map(|m| m.id.clone()).collect();
        let mut want = vec![a.to_string(), held.to_string(), fresh.to_string()];
        want.sort();
        assert_eq!(ids, want, "every message once, in id order");
        let by = |id: mail::QueueId| all.iter().find(|m| m.id == id.to_string()).unwrap();
        let deferred = by(a);
        assert_eq!(deferred.recipients.len(), 1, "only the pending recipient");
        assert_eq!(deferred.recipients[0].address, "r2@c.example");
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
