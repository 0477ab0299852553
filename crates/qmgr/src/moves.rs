//! Moving mail between instances: both ends of `sluice queue move` as the
//! queue manager sees them.
//!
//! The sending end (queue control): `MoveBegin` journals `Moving` for the
//! selected messages, which takes them out of delivery at once (a message
//! with a delivery under way finishes that attempt first: `MoveTake`
//! answers "not yet" until it has); `MoveTake` gives a message's state —
//! pending recipients, next attempt, attempts, hold, warning, the notices
//! it owes — and where its data is; `MoveDone`, sent once the receiver
//! has acknowledged, removes it here with the log line `moved to HOST as
//! ID`. A move given up leaves the messages held; `sluice queue release`
//! returns them to delivery (journaled `Released`).
//!
//! The receiving end (transferd(8) over the arrival socket): `Import`
//! journals the message as it was at the sender — a `Rewritten` head on
//! hold with its pending recipients and next attempt, the records of the
//! notices it owes, then `Imported` with the transfer id — and answers
//! once that is durable; the message stays out of delivery until transferd
//! has recorded the transfer id in its ledger and sends `Settle`, which
//! journals `Released` (and `Held` again for a message that came on hold).
//! Until then a retried transfer finds it by its id (`Unsettled`), so a
//! message is never queued twice nor delivered before its transfer counts
//! as done.

use ipc::qmgr;
use ipc::queuectl::{self, Movable, Owed};
use mail::QueueId;
use queue::{DataRef, Lsn, Record};

use crate::{journal, Action, QueueManager, Store};

/// Most messages one `MoveBegin` takes out of delivery: a page is one loop
/// turn's work (its records, its log lines) and one answer well under the
/// frame limit.
pub const MOVE_PAGE: usize = 10_000;

impl<S: Store> QueueManager<S> {
    /// Answers `MoveBegin`, `MoveTake` and `MoveDone`.
    pub(crate) fn move_control(&mut self, req: queuectl::Request) -> queuectl::Response {
        match req {
            queuectl::Request::MoveBegin { sel, after, max } => {
                let after = match after.map(|a| a.parse::<QueueId>()) {
                    Some(Ok(a)) => Some(a),
                    // Only qmgr makes cursors: the mover says what it got.
                    Some(Err(_)) => {
                        return queuectl::Response::Shown(Err("MoveBegin: bad page cursor".into()))
                    }
                    None => None,
                };
                let max = (max as usize).clamp(1, MOVE_PAGE);
                let (ids, next) = self.select_page(&sel, after, max);
                let mut out = Vec::with_capacity(ids.len());
                for id in ids {
                    if self.state.imports.contains_key(&id) {
                        // Not settled here yet: its sender may still own it.
                        continue;
                    }
                    if !self.state.moving.contains_key(&id) {
                        let held = self.state.messages.get(&id).is_some_and(|m| m.held);
                        self.append(Record::Moving { id, held });
                        // Its attempt count goes along with it.
                        self.figures.forget(&id);
                        self.retry.unschedule(&[id]);
                        self.info(format!("{id}: held for a move"));
                    }
                    out.push(id.to_string());
                }
                queuectl::Response::Moving {
                    ids: out,
                    next: next.map(|n| n.to_string()),
                }
            }
            queuectl::Request::MoveTake { ids } => {
                queuectl::Response::Movable(ids.iter().map(|id| self.take(id)).collect())
            }
            queuectl::Request::MoveDone { moved } => {
                let mut n = 0;
                for (id, to, new_id) in moved {
                    n += u64::from(self.moved(&id, &to, &new_id));
                }
                queuectl::Response::Done(n)
            }
            _ => queuectl::Response::Done(0),
        }
    }

    /// A receiver has `id`: it goes here. False if it is not queued.
    fn moved(&mut self, id: &str, to: &str, new_id: &str) -> bool {
        let Ok(qid) = id.parse::<QueueId>() else {
            return false;
        };
        let Some(storage) = self.state.messages.get(&qid).map(|m| m.storage) else {
            return false;
        };
        if !self.state.moving.contains_key(&qid) {
            // Released meanwhile: the receiver has it all the same.
            self.warn(format!(
                "{qid}: moved to {to} as {new_id} after its move was given up"
            ));
        }
        self.info(format!("{qid}: moved to {to} as {new_id}"));
        self.append(Record::Removed { id: qid });
        // The receiver has it: a crash must not leave it here as well.
        self.commits.urge();
        self.forget(&qid);
        self.info(format!("{qid}: removed"));
        self.remove_data(qid, storage);
        true
    }

    /// A moving message's state, once nothing of it is in delivery.
    fn take(&mut self, id: &str) -> Result<Option<Box<Movable>>, String> {
        let qid: QueueId = id.parse().map_err(|e| format!("{id}: {e}"))?;
        let Some(m) = self.state.messages.get(&qid) else {
            return Err(format!("{id}: not in the queue"));
        };
        let Some(&held) = self.state.moving.get(&qid) else {
            return Err(format!("{id}: not being moved (released meanwhile?)"));
        };
        if self.is_active(&qid) || self.notices.owes(&qid) {
            return Ok(None);
        }
        let (head_lsn, next_attempt, warned) = (m.head, m.next_attempt, m.warned);
        let (rec, head) = self
            .head(&qid)
            .ok_or_else(|| format!("{id}: its journal record cannot be read"))?;
        let remaining = self.state.pending(qid, &rec);
        let data = match &head.data {
            DataRef::Inline(_) => match rec.data_span(head_lsn) {
                Some(span) => ipc::delivery::Data::Journal(span),
                None => return Err(format!("{id}: its inline data has no span")),
            },
            DataRef::File => {
                ipc::delivery::Data::File(format!("msg/{:02X}/{qid}", qid.hash_byte()))
            }
            DataRef::Pool(n) => ipc::delivery::Data::File(format!("pool/{n:08}")),
        };
        let owed = self
            .state
            .unnotified
            .get(&qid)
            .map(|v| {
                v.iter()
                    .map(|b| Owed {
                        index: b.index,
                        status: b.status,
                        reason: b.reason.clone(),
                        success: b.success,
                    })
                    .collect()
            })
            .unwrap_or_default();
        // The bytes travel by their location, not in this answer.
        let head = queue::MessageHead {
            data: match head.data {
                DataRef::Inline(_) => DataRef::Inline(Vec::new()),
                d => d,
            },
            ..head
        };
        Ok(Some(Box::new(Movable {
            head,
            remaining,
            next_attempt,
            attempts: self.retry.attempts(&qid),
            held,
            warned,
            owed,
            data,
        })))
    }

    /// transferd's requests: an import, a settlement, the unsettled list.
    pub(crate) fn transfer(&mut self, client: u64, request: u64, body: qmgr::Request) {
        let answer = |response| Action::Answer {
            client,
            request,
            response,
        };
        match body {
            qmgr::Request::Import {
                moved,
                transfer,
                from,
            } => self.import(client, request, *moved, transfer, from),
            qmgr::Request::Settle { id } => {
                if let Some(imp) = self.state.imports.get(&id).cloned() {
                    self.append(Record::Released { id });
                    if imp.held {
                        self.append(Record::Held { id });
                    } else {
                        self.schedule_settled(id);
                    }
                }
                self.actions.push_back(answer(qmgr::Response::Committed));
            }
            qmgr::Request::Unsettled => {
                let mut v: Vec<(String, QueueId)> = self
                    .state
                    .imports
                    .iter()
                    .map(|(id, i)| (i.transfer.clone(), *id))
                    .collect();
                v.sort();
                self.actions.push_back(answer(qmgr::Response::Unsettled(v)));
            }
            qmgr::Request::Arrived { head, hold } => self.arrived(client, request, head, hold),
        }
    }

    /// A settled import joins delivery at its own next attempt.
    fn schedule_settled(&mut self, id: QueueId) {
        let Some(m) = self.state.messages.get(&id) else {
            return;
        };
        let at = m.next_attempt.saturating_mul(1000);
        if at > self.now.0 {
            self.retry.schedule(sched::Time(at), id);
        } else {
            self.admit(id);
        }
    }

    fn import(
        &mut self,
        client: u64,
        request: u64,
        moved: Movable,
        transfer: String,
        from: String,
    ) {
        let id = moved.head.id;
        let refuse = |reason: String| Action::Answer {
            client,
            request,
            response: qmgr::Response::Failed {
                reason,
                disk_full: false,
            },
        };
        if self.state.messages.contains_key(&id) {
            self.actions.push_back(refuse(format!(
                "{id}: a message with this queue id is queued already"
            )));
            return;
        }
        let n = moved.head.envelope.recipients.len() as u32;
        if moved
            .remaining
            .iter()
            .chain(moved.owed.iter().map(|o| &o.index))
            .any(|&i| i >= n)
        {
            self.actions.push_back(refuse(format!(
                "{id}: a recipient index beyond the envelope"
            )));
            return;
        }
        let mut records = vec![Record::Rewritten {
            head: moved.head.clone(),
            remaining: moved.remaining.clone(),
            next_attempt: moved.next_attempt,
            held: true,
        }];
        // The notices it owes: the recipients are done, the notice is not.
        for o in &moved.owed {
            let status = o.status;
            records.push(match o.success {
                None => Record::Bounced {
                    id,
                    rcpts: vec![o.index],
                    status,
                    reason: o.reason.clone(),
                },
                Some(_) => Record::Delivered {
                    id,
                    rcpts: vec![o.index],
                },
            });
            if let Some(relayed) = o.success {
                records.push(Record::Succeeded {
                    id,
                    rcpts: vec![o.index],
                    relayed,
                    reason: o.reason.clone(),
                });
            }
        }
        if moved.warned {
            records.push(Record::Warned { id });
        }
        records.push(Record::Imported {
            id,
            transfer: transfer.clone(),
            from: from.clone(),
            held: moved.held,
            attempts: moved.attempts,
        });
        let storage = moved.head.data.storage();
        let ack = journal::Ack {
            end: Lsn::default(),
            client,
            request,
            id,
            storage,
            summary: format!(
                "{id}: queued from a move, nrcpt={} (held until the transfer is settled)",
                moved.remaining.len()
            ),
            hold: true,
        };
        match self
            .commits
            .arrive_all(&mut self.store, &mut self.state, ack, &records)
        {
            Ok(()) => {
                for _ in 0..moved.attempts {
                    self.retry.tried(id);
                }
            }
            Err(r) => {
                self.actions.push_back(Action::Answer {
                    client,
                    request,
                    response: qmgr::Response::Failed {
                        reason: r.reason,
                        disk_full: r.disk_full,
                    },
                });
                if !r.taken_back {
                    self.actions.push_back(Action::RemoveData { id, storage });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ipc::qmgr;
    use ipc::queuectl::{Movable, Request, Response, Selector};
    use mail::{Envelope, QueueId, Recipient, Timestamp};
    use queue::{DataRef, MessageHead};

    use crate::testkit::{settings, World};
    use crate::Event;

    fn ask(w: &mut World, body: Request) -> Response {
        w.handle(Event::Control {
            client: 1,
            request: 1,
            body,
        });
        w.replies.pop().expect("a reply")
    }

    fn begin(after: Option<String>, max: u32) -> Request {
        Request::MoveBegin {
            sel: Selector::all(),
            after,
            max,
        }
    }

    #[test]
    fn a_large_move_is_taken_a_page_at_a_time_in_id_order() {
        let mut w = World::new(settings());
        let mut all: Vec<String> = (0..7)
            .map(|i| {
                w.arrive("a@a.example", &[&format!("r{i}@b.example")])
                    .to_string()
            })
            .collect();
        all.sort();
        let mut got = Vec::new();
        let mut after = None;
        let mut pages = 0;
        loop {
            let Response::Moving { ids, next } = ask(&mut w, begin(after.take(), 3)) else {
                panic!()
            };
            assert!(ids.len() <= 3);
            pages += 1;
            got.extend(ids);
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(got, all);
        assert_eq!(pages, 3);
        // Asked again, a page names the messages moving already too.
        let Response::Moving { ids, next: None } = ask(&mut w, begin(None, 10)) else {
            panic!()
        };
        assert_eq!(ids, all);
        let Response::Shown(Err(e)) = ask(&mut w, begin(Some("junk".into()), 10)) else {
            panic!()
        };
        assert!(e.contains("cursor"), "{e}");
    }

    fn take(w: &mut World, id: QueueId) -> Result<Option<Box<Movable>>, String> {
        let Response::Movable(mut v) = ask(
            w,
            Request::MoveTake {
                ids: vec![id.to_string()],
            },
        ) else {
            panic!()
        };
        v.pop().unwrap()
    }

    #[test]
    fn a_moving_message_leaves_delivery_at_once_and_goes_once_the_receiver_has_it() {
        let mut w = World::new(settings());
        let id = w.arrive("a@a.example", &["r@b.example", "s@b.example"]);
        w.route_all(&[]);
        w.deliver_all(|rcpt| if rcpt.starts_with('r') { 250 } else { 450 });
        let Response::Moving { ids, next: None } = ask(&mut w, begin(None, 10_000)) else {
            panic!()
        };
        assert_eq!(ids, [id.to_string()]);
        // Its retry time passes: it is not tried here any more.
        w.wait(Duration::from_secs(3600));
        let tried = w
            .agent
            .iter()
            .any(|(_, _, r)| !matches!(r, ipc::delivery::Request::Close { .. }));
        assert!(w.router.is_empty() && !tried, "{:?}", w.agent);
        let m = take(&mut w, id).unwrap().unwrap();
        assert_eq!(m.remaining, [1], "only the undelivered recipient");
        assert!(m.next_attempt > 0 && !m.held && m.attempts == 1);
        assert!(matches!(m.data, ipc::delivery::Data::Journal(_)));
        ask(
            &mut w,
            Request::MoveDone {
                moved: vec![(id.to_string(), "b.test".into(), "X".into())],
            },
        );
        assert!(!w.live(id));
        assert!(w.logged(&format!("{id}: moved to b.test as X")));
        assert_eq!(w.removed, [id]);
    }

    #[test]
    fn a_move_given_up_is_released_to_delivery() {
        let mut w = World::new(settings());
        let id = w.stage("a@a.example", &["r@b.example"], true);
        w.handle(Event::Committed { id, hold: true });
        ask(&mut w, begin(None, 10_000));
        let m = take(&mut w, id).unwrap().unwrap();
        assert!(m.held, "held before the move: held at the receiver");
        ask(&mut w, Request::Release(Selector::all()));
        let e = take(&mut w, id).unwrap_err();
        assert!(e.contains("not being moved"), "{e}");
        w.settle(|_| 250);
        assert!(!w.live(id), "delivered here after all");
    }

    fn import(w: &mut World, n: u32, next_attempt: u64, held: bool) -> QueueId {
        let id = QueueId::from_parts(w.now.0 * 1000, 7, n).unwrap();
        let envelope = Envelope {
            sender: "a@a.example".into(),
            recipients: vec![
                Recipient::new("done@b.example"),
                Recipient::new("r@b.example"),
            ],
            arrival: Timestamp::from_micros(1_000_000),
            size: 24,
            ..Envelope::default()
        };
        let moved = Movable {
            head: MessageHead {
                id,
                envelope,
                data: DataRef::Inline(b"Subject: test\r\n\r\nbody\r\n".to_vec()),
            },
            remaining: vec![1],
            next_attempt,
            attempts: 4,
            held,
            warned: false,
            owed: Vec::new(),
            data: ipc::delivery::Data::Inline(Vec::new()),
        };
        w.handle(Event::Transfer {
            client: 9,
            request: u64::from(n),
            body: qmgr::Request::Import {
                moved: Box::new(moved),
                transfer: format!("a.test/{n}"),
                from: "a.test".into(),
            },
        });
        id
    }

    #[test]
    fn an_import_waits_for_its_settlement_then_for_its_own_retry_time() {
        let mut w = World::new(settings());
        let later = w.now.0 / 1000 + 100;
        let id = import(&mut w, 1, later, false);
        assert_eq!(w.answers.pop(), Some(qmgr::Response::Committed));
        w.handle(Event::Transfer {
            client: 9,
            request: 2,
            body: qmgr::Request::Unsettled,
        });
        assert_eq!(
            w.answers.pop(),
            Some(qmgr::Response::Unsettled(vec![("a.test/1".into(), id)]))
        );
        w.wait(Duration::from_secs(200));
        assert!(w.router.is_empty(), "not delivered before it is settled");
        w.handle(Event::Transfer {
            client: 9,
            request: 3,
            body: qmgr::Request::Settle { id },
        });
        assert!(w.qm.state().imports.is_empty());
        // Its retry time had passed meanwhile: it goes now, and only the
        // recipient still to deliver.
        let asked: Vec<String> = w.router.iter().map(|(_, r)| format!("{r:?}")).collect();
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(asked[0].contains("r@b.example"));
        w.settle(|_| 250);
        assert!(!w.live(id));
    }

    #[test]
    fn a_settled_import_keeps_a_future_retry_time_and_its_hold() {
        let mut w = World::new(settings());
        let later = w.now.0 / 1000 + 600;
        let id = import(&mut w, 1, later, false);
        let held = import(&mut w, 2, 0, true);
        for id in [id, held] {
            w.handle(Event::Transfer {
                client: 9,
                request: 5,
                body: qmgr::Request::Settle { id },
            });
        }
        w.wait(Duration::from_secs(599));
        assert!(w.router.is_empty(), "nothing before the retry time");
        w.wait(Duration::from_secs(2));
        assert_eq!(w.router.len(), 1);
        w.settle(|_| 250);
        assert!(!w.live(id) && w.live(held), "the held one stays held");
        assert!(w.qm.state().messages[&held].held);
    }
}
