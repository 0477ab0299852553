//! Admission and the active queue (Postfix's `qmgr_active.c`).
//!
//! A message is admitted when its arrival is durable, its retry time comes,
//! it is released, requeued or flushed; admitted messages wait in turn by
//! sender (`sched::admission`) and are activated while fewer than
//! `qmgr_message_active_limit` are in delivery, at most a thousand per
//! turn. Activating reads the head record back, restates a retried message
//! at the journal head (so older segments can go) and hands its pending
//! recipients to resolution. When a message leaves delivery it is removed
//! (once the notices it owes are queued) or scheduled for its next attempt.
//! Nothing starts while the journal cannot be written.

use std::collections::HashSet;

use mail::{Envelope, QueueId};
use queue::{Lsn, Record};
use sched::admission::Admission;
use sched::Time;

use crate::{QueueManager, Store, ACTIVATE_PER_TURN};

/// Messages waiting to be activated.
#[derive(Debug, Default)]
pub(crate) struct Active {
    /// In their senders' turns.
    to_activate: Admission<u32, QueueId>,
    /// Admitted by a flush: defer_transports do not hold them back.
    flushing: HashSet<QueueId>,
}

impl Active {
    /// Whether messages wait for room.
    pub(crate) fn waiting(&self) -> bool {
        !self.to_activate.is_empty()
    }
}

impl<S: Store> QueueManager<S> {
    /// Sorts recovery's messages: due now (and new arrivals), in id order,
    /// or later by retry time. Replay's deferred index is in (time, id)
    /// order already, so a million deferred messages make one bulk build
    /// here, not a sort and a million inserts.
    pub(crate) fn recovered(&mut self) {
        let now = self.now;
        let mut due: Vec<QueueId> = self.state.incoming.clone();
        let mut later = Vec::with_capacity(self.state.deferred.len());
        for (at, id, _) in self.state.deferred.iter() {
            let at = Time::from_secs(at);
            if at <= now {
                due.push(id);
            } else {
                later.push((at, id));
            }
        }
        due.sort_unstable();
        for id in due {
            if self.state.messages.contains_key(&id) {
                self.admit(id);
            }
        }
        self.retry.bulk(later);
    }

    /// Queues a message for delivery, in its sender's line.
    pub(crate) fn admit(&mut self, id: QueueId) {
        let key = match self.state.messages.get(&id) {
            Some(m) if self.settings.admission_by_sender => m.sender_key,
            _ => 0,
        };
        self.active.to_activate.push(id, key);
    }

    /// Admits `ids` for a flush: defer_transports do not hold them.
    pub(crate) fn admit_flushed(&mut self, ids: Vec<QueueId>) {
        self.active.flushing.extend(ids.iter().copied());
        for id in ids {
            self.admit(id);
        }
    }

    /// Whether another message may become active.
    pub(crate) fn room(&self) -> bool {
        !self.settings.transports.is_empty()
            && !self.stalled
            && self.deliver.active() < self.settings.active_limit
    }

    /// Hands waiting and due messages to delivery.
    pub(crate) fn activate_waiting(&mut self) {
        if self.settings.transports.is_empty() {
            self.active.to_activate.clear();
            return;
        }
        // Results could not be journaled: start nothing new until they can.
        if self.stalled {
            return;
        }
        for id in self.retry.pop_due(self.now) {
            self.admit(id);
        }
        for _ in 0..ACTIVATE_PER_TURN {
            if !self.room() {
                break;
            }
            let Some(id) = self.active.to_activate.pop() else {
                break;
            };
            // Taken whether or not it is activated now, so it cannot linger.
            let flush = self.active.flushing.remove(&id);
            if self.is_active(&id) {
                continue;
            }
            let Some(m) = self.state.messages.get(&id) else {
                continue;
            };
            if m.held {
                continue;
            }
            let (head_lsn, next) = (m.head, m.next_attempt);
            let rec = match self.store.read_at(head_lsn) {
                Ok(r) => r,
                Err(e) => {
                    self.warn(format!(
                        "{id}: reading its journal record: {e}; trying again later"
                    ));
                    self.retry.schedule(self.now + self.settings.run_delay, id);
                    continue;
                }
            };
            let pending = self.state.pending(id, &rec);
            // Agents read inline data from the journal, where the head
            // record as read now lies once durable; its segment is kept
            // while the message is in delivery (restating moves the head).
            let span = if head_lsn < self.store.durable() {
                rec.data_span(head_lsn).map(|s| (head_lsn, s))
            } else {
                None
            };
            // A retried message is restated at the head of the journal, so
            // the segments holding its older records can go.
            if next > 0 {
                // Restatements are not new results: written, not counted.
                for r in self.state.restatement(id, &rec, 0).unwrap_or_default() {
                    self.write(r);
                }
            }
            let head = match rec {
                Record::Arrived(h) | Record::Rewritten { head: h, .. } => h,
                _ => continue,
            };
            // Where the head record is now (restated or not): while it stays
            // there, `finished` knows the pending recipients without it.
            let at = self.state.messages.get(&id).map_or(head_lsn, |m| m.head);
            let attempts = self.retry.attempts(&id);
            self.activate(head, pending, attempts, flush, span, at);
        }
    }

    /// A message left delivery; its deferred recipients are due at
    /// `next_attempt` (the scheduler's), else after `queue_run_delay`.
    /// `known` is what activation learnt: then the head record is read
    /// back only when a notice needs it.
    pub(crate) fn finished(
        &mut self,
        id: QueueId,
        next_attempt: Option<Time>,
        known: Option<Activated>,
    ) {
        let Some(m) = self.state.messages.get(&id) else {
            return;
        };
        let at = m.head;
        // Results only add to `done` until the message is restated (a new
        // head record), so the recipients pending at activation less those
        // done since are the ones `Replay::pending` would find in the record.
        let (pending, envelope, mut head) = match known.filter(|k| k.head == at) {
            Some(k) => {
                let done = self.state.done(id);
                let pending: Vec<u32> = k
                    .pending
                    .into_iter()
                    .filter(|r| !done.contains(r))
                    .collect();
                (pending, k.envelope, None)
            }
            None => match self.store.read_at(at) {
                Ok(rec) => {
                    let pending = self.state.pending(id, &rec);
                    match rec {
                        Record::Arrived(h) | Record::Rewritten { head: h, .. } => {
                            (pending, h.envelope.clone(), Some(h))
                        }
                        _ => (pending, mail::Envelope::default(), None),
                    }
                }
                Err(e) => return self.unreadable(id, e),
            },
        };
        let warn = !pending.is_empty() && self.warning_due(id, &envelope);
        if head.is_none() && (warn || self.owes_notice(id)) {
            head = match self.store.read_at(at) {
                Ok(Record::Arrived(h) | Record::Rewritten { head: h, .. }) => Some(h),
                Ok(_) => None,
                Err(e) => return self.unreadable(id, e),
            };
        }
        if let Some(h) = head {
            if warn {
                self.maybe_warn(&h, &pending);
            }
            self.owe_notice(h);
        }
        if pending.is_empty() {
            if self.notices.owes(&id) {
                self.notices.remove_after(id);
            } else {
                self.remove_message(id);
            }
        } else {
            self.retry.tried(id);
            let at = next_attempt.unwrap_or(self.now + self.settings.run_delay);
            self.retry.schedule(at, id);
        }
    }

    /// A message whose head record could not be read back: tried again
    /// after `queue_run_delay`.
    fn unreadable(&mut self, id: QueueId, e: String) {
        self.warn(format!(
            "{id}: reading its journal record: {e}; trying again later"
        ));
        self.retry.schedule(self.now + self.settings.run_delay, id);
    }
}

/// What activation learnt of a message, kept while it is in delivery.
pub(crate) struct Activated {
    /// Where its head record was.
    pub(crate) head: Lsn,
    /// Its recipients pending then.
    pub(crate) pending: Vec<u32>,
    /// Its envelope.
    pub(crate) envelope: Envelope,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use queue::{Record, Replay};

    use crate::testkit::{settings, World, T0};
    use crate::{Event, MemStore, Settings, Store};

    /// Messages whose recipients the router was asked about.
    fn routing(w: &World) -> usize {
        w.router.len()
    }

    #[test]
    fn the_active_limit_holds_back_the_rest_until_room_frees() {
        let mut w = World::new(Settings {
            active_limit: 2,
            ..settings()
        });
        let ids: Vec<_> = (0..5)
            .map(|i| w.arrive(&format!("s{i}@a.example"), &["r@b.example"]))
            .collect();
        assert_eq!(routing(&w), 2, "two active at most");
        w.settle(|_| 250);
        for id in &ids {
            assert!(!w.live(*id), "{id} delivered and removed");
        }
        assert_eq!(w.removed.len(), 5);
    }

    #[test]
    fn a_message_leaving_delivery_is_read_back_only_for_a_notice() {
        let mut w = World::new(settings());
        let id = w.arrive("a@a.example", &["r1@b.example", "r2@c.example"]);
        let read = w.qm.store().reads();
        assert_eq!(read, 1, "activation reads the head record");
        // One recipient delivered, one deferred: what stays pending is
        // known without the record.
        w.settle(|r| if r.starts_with("r1") { 250 } else { 450 });
        assert_eq!(
            w.qm.store().reads(),
            read,
            "no read when it leaves delivery"
        );
        assert!(w.live(id));
        let deferred: Vec<Vec<u32>> = w
            .records(id)
            .iter()
            .filter_map(|r| match r {
                Record::Deferred { rcpts, .. } => Some(rcpts.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(deferred, vec![vec![1]]);
        // Retried: only the deferred recipient goes out; it bounces, and
        // the bounce (a notice) needs the record read back.
        w.wait(Duration::from_secs(3600));
        let asked: Vec<String> = w.router.iter().map(|q| format!("{q:?}")).collect();
        assert!(
            !asked.is_empty()
                && asked
                    .iter()
                    .all(|q| q.contains("r2@c.example") && !q.contains("r1@b.example")),
            "{asked:?}"
        );
        let read = w.qm.store().reads();
        w.settle(|_| 550);
        assert!(w.qm.store().reads() > read, "read back for the bounce");
        assert!(!w.live(id), "removed once the bounce is queued");
    }

    #[test]
    fn held_messages_wait_until_released() {
        let mut w = World::new(settings());
        let id = w.stage("a@a.example", &["r@b.example"], true);
        w.handle(Event::Committed { id, hold: true });
        assert!(w.router.is_empty(), "a held message is not delivered");
        w.handle(Event::Control {
            client: 1,
            request: 1,
            body: ipc::queuectl::Request::Release(ipc::queuectl::Selector::all()),
        });
        w.settle(|_| 250);
        assert!(!w.live(id));
        assert!(w.logged(&format!("{id}: released from hold")));
    }

    #[test]
    fn nothing_starts_while_the_journal_cannot_be_written() {
        let mut w = World::new(settings());
        w.handle(Event::JournalStalled(true));
        let id = w.arrive("a@a.example", &["r@b.example"]);
        w.wait(Duration::from_secs(10));
        assert!(w.router.is_empty());
        w.handle(Event::JournalStalled(false));
        w.settle(|_| 250);
        assert!(!w.live(id));
    }

    #[test]
    fn recovery_activates_what_is_due_and_schedules_the_rest() {
        // A journal with three messages: new, deferred until T0 - 1 s and
        // deferred until T0 + 1000 s.
        let mut store = MemStore::default();
        let mut state = Replay::default();
        let mut staging = World::new(settings());
        let ids: Vec<_> = (0..3)
            .map(|i| staging.stage("a@a.example", &[&format!("r{i}@b.example")], false))
            .collect();
        for r in staging.qm.store().records() {
            store.append(r, &mut state).unwrap();
        }
        for (id, at) in [(ids[1], T0.0 / 1000 - 1), (ids[2], T0.0 / 1000 + 1000)] {
            let rec = Record::Deferred {
                id,
                rcpts: vec![0],
                status: "4.4.1".parse().unwrap(),
                reason: "earlier".into(),
                next_attempt: at,
            };
            store.append(&rec, &mut state).unwrap();
        }
        state.finish(1);
        let mut w = World::recovered(settings(), store, state, T0);
        assert_eq!(routing(&w), 2, "the new and the due message");
        w.settle(|_| 250);
        assert!(w.live(ids[2]));
        w.run_until(T0 + Duration::from_secs(999));
        assert!(w.router.is_empty(), "not before its retry time");
        w.run_until(T0 + Duration::from_secs(1000));
        w.settle(|_| 250);
        assert!(!w.live(ids[2]));
        // Retried mail is restated at the journal head.
        assert!(w
            .records(ids[2])
            .iter()
            .any(|r| matches!(r, Record::Rewritten { .. })));
    }
}
