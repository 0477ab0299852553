//! Queue control: `sluice queue list | show | flush | hold | release |
//! delete | requeue` and the summary behind `sluice status`, `sluice top`
//! and the metrics endpoint.
//!
//! Hold, release and delete are journaled (`Held`, `Released`, `Removed`);
//! a flush and a requeue are in memory only, like Postfix's: a restart
//! returns deferred mail to its journaled schedule. A flush also makes the
//! scheduler forget host retries and dead destinations, and delivers what
//! `defer_transports` holds back. Logs each message held, released,
//! removed or requeued, and each flush.

use std::collections::BTreeMap;

use ipc::queuectl::{self, QueuedMessage, QueuedRecipient};
use mail::QueueId;
use queue::Record;
use sched::Time;

use crate::{system_time, QueueManager, Store};

/// Whether qmgr hears a client of its socket, by the peer's uid: a
/// control client (`sluice queue`, `sluice status`) is heard whoever it
/// is (the socket's own permissions say who reaches it), but only the
/// mail system (root, or qmgr's own user `me`) announces mail or asks
/// for address probes.
pub fn admits(control: bool, uid: u32, me: u32) -> bool {
    control || uid == 0 || uid == me
}

impl<S: Store> QueueManager<S> {
    /// Answers a control request.
    pub(crate) fn control(&mut self, req: queuectl::Request) -> queuectl::Response {
        match req {
            queuectl::Request::List => queuectl::Response::List(self.list()),
            queuectl::Request::Flush => {
                // Unreachable hosts and dead destinations are tried again too.
                if let Err(e) = self.deliver.sched.handle(self.now, sched::Event::Flush) {
                    self.warn(format!("scheduler: {e:?}"));
                }
                let due = self.retry.take_all();
                let n = due.len() as u64;
                self.admit_flushed(due);
                self.info(format!("flush: {n} deferred messages made due"));
                queuectl::Response::Flushed(n)
            }
            queuectl::Request::Show { id } => queuectl::Response::Shown(self.show(&id)),
            r @ (queuectl::Request::Suspend { .. }
            | queuectl::Request::Resume { .. }
            | queuectl::Request::Suspensions
            | queuectl::Request::Policy) => self.shaping_control(r),
            r @ (queuectl::Request::MoveBegin { .. }
            | queuectl::Request::MoveTake { .. }
            | queuectl::Request::MoveDone { .. }) => self.move_control(r),
            // bin/qmgr answers it when it has a link to clusterd.
            queuectl::Request::Cluster => {
                queuectl::Response::Cluster(Err("no cluster_server is set".into()))
            }
            queuectl::Request::Snapshot { from, max } => {
                queuectl::Response::Snapshot(Box::new(self.snapshot(&from, max)))
            }
            queuectl::Request::Summary { top } => queuectl::Response::Summary(Box::new(
                self.summary(self.now, top.min(1000) as usize),
            )),
            queuectl::Request::Hold(sel) => {
                let ids: Vec<QueueId> = self
                    .select(&sel)
                    .into_iter()
                    .filter(|id| !self.is_held(id))
                    .collect();
                for id in &ids {
                    self.append(Record::Held { id: *id });
                    self.figures.forget(id);
                    self.info(format!("{id}: placed on hold"));
                }
                queuectl::Response::Done(ids.len() as u64)
            }
            queuectl::Request::Release(sel) => {
                let ids: Vec<QueueId> = self
                    .select(&sel)
                    .into_iter()
                    .filter(|id| self.is_held(id))
                    .collect();
                for id in &ids {
                    self.append(Record::Released { id: *id });
                    self.info(format!("{id}: released from hold"));
                    self.admit(*id);
                }
                queuectl::Response::Done(ids.len() as u64)
            }
            queuectl::Request::Delete(sel) => {
                let ids = self.select(&sel);
                for id in &ids {
                    let storage = self.state.messages.get(id).map(|m| m.storage);
                    self.append(Record::Removed { id: *id });
                    // The operator is told it is gone: it must stay gone.
                    self.commits.urge();
                    self.forget(id);
                    self.info(format!("{id}: removed by the administrator"));
                    if let Some(storage) = storage {
                        self.remove_data(*id, storage);
                    }
                }
                self.retry.unschedule(&ids);
                queuectl::Response::Done(ids.len() as u64)
            }
            queuectl::Request::Requeue(sel) => {
                let ids: Vec<QueueId> = self
                    .select(&sel)
                    .into_iter()
                    .filter(|id| !self.is_held(id))
                    .collect();
                self.retry.unschedule(&ids);
                for id in &ids {
                    self.info(format!("{id}: requeued"));
                    self.admit(*id);
                }
                queuectl::Response::Done(ids.len() as u64)
            }
        }
    }

    /// mailq's view: every live message with its pending recipients.
    fn list(&mut self) -> Vec<QueuedMessage> {
        let mut out: Vec<QueuedMessage> = Vec::new();
        let mut failed = Vec::new();
        for (id, m) in &self.state.messages {
            let head = match self.store.read_at(m.head) {
                Ok(r) => r,
                Err(e) => {
                    failed.push(format!("{id}: reading its journal record: {e}"));
                    continue;
                }
            };
            let pending = self.state.pending(*id, &head);
            let h = match &head {
                Record::Arrived(h) | Record::Rewritten { head: h, .. } => h,
                _ => continue,
            };
            let reasons = self.reasons_of(id);
            out.push(QueuedMessage {
                id: id.to_string(),
                size: h.envelope.size,
                arrival: h.envelope.arrival.secs,
                sender: h.envelope.sender.clone(),
                state: state_word(m.held, m.next_attempt).into(),
                tenant: h.envelope.tenant.clone(),
                job: h.envelope.job.clone(),
                recipients: pending
                    .iter()
                    .filter_map(|i| {
                        let r = h.envelope.recipients.get(*i as usize)?;
                        Some(QueuedRecipient {
                            address: r.address.clone(),
                            // The text, as Postfix's mailq shows it.
                            reason: reasons.get(i).map(|s| s.text.clone()),
                        })
                    })
                    .collect(),
            });
        }
        for f in failed {
            self.warn(f);
        }
        out.sort_by(|a, b| (a.arrival, &a.id).cmp(&(b.arrival, &b.id)));
        out
    }

    /// Queue sizes, delivery counters and the busiest destinations, from
    /// memory: one pass over the live messages, no journal reads.
    pub fn summary(&self, now: Time, top: usize) -> queuectl::Summary {
        let now = now.0 / 1000;
        let (mut incoming, mut active, mut deferred, mut hold) = (0, 0, 0, 0);
        for (id, m) in &self.state.messages {
            if m.held {
                hold += 1;
            } else if self.is_active(id) {
                active += 1;
            } else if m.next_attempt > 0 {
                deferred += 1;
            } else {
                incoming += 1;
            }
        }
        queuectl::Summary {
            now,
            messages: self.state.messages.len() as u64,
            incoming,
            active,
            deferred,
            hold,
            active_recipients: u64::from(self.deliver.sched.recipients_in_core()),
            sent: self.totals.sent.counter(now),
            deferrals: self.totals.deferred.counter(now),
            bounced: self.totals.bounced.counter(now),
            transports: self.transport_summary(),
            destinations: self.destination_summary(now, top),
            policy_keys: self.policy_summary(top),
            holds: self.holds_summary(),
            proxies: self
                .totals
                .proxy_failures
                .iter()
                .map(|((transport, proxy), n)| queuectl::ProxySummary {
                    transport: transport.clone(),
                    proxy: proxy.to_string(),
                    failures: *n,
                })
                .collect(),
            // Filled in from the link to clusterd (`clustershare::annotate`).
            cluster: None,
        }
    }

    /// The active queue per transport and class.
    fn transport_summary(&self) -> Vec<queuectl::TransportSummary> {
        self.deliver
            .sched
            .transport_stats()
            .into_iter()
            .map(|t| queuectl::TransportSummary {
                name: t.name,
                queued: t.queued,
                inflight: t.inflight,
                connections: t.connections,
                destinations: t.destinations,
                dead: t.dead,
            })
            .collect()
    }

    /// The `top` busiest destinations: those with the most entries in the
    /// scheduler and those with the most deferred messages, by the sum of
    /// the two, dead ones first among equals.
    fn destination_summary(&self, secs: u64, top: usize) -> Vec<queuectl::DestSummary> {
        let sched = &self.deliver.sched;
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        let mut candidates: Vec<(String, String, Option<sched::DestStats>)> = sched
            .destination_stats(top)
            .into_iter()
            .map(|d| (d.transport.clone(), d.nexthop.clone(), Some(d)))
            .collect();
        for (t, n) in self.figures.most_deferred(top) {
            let st = sched.destination(&t, &n);
            candidates.push((t, n, st));
        }
        for (transport, nexthop, st) in candidates {
            if !seen.insert((transport.clone(), nexthop.clone())) {
                continue;
            }
            let fig = self.figures.get(&transport, &nexthop);
            let (queued, inflight, window, busy, dead_until) = match &st {
                Some(d) => (
                    u64::from(d.entries),
                    d.inflight.iter().map(|x| u64::from(*x)).sum(),
                    d.window,
                    d.busy,
                    d.dead_until,
                ),
                None => (0, 0, 0, 0, None),
            };
            out.push(queuectl::DestSummary {
                transport,
                destination: nexthop,
                queued,
                inflight,
                deferred: fig.map_or(0, |f| f.deferred),
                window,
                busy,
                dead: dead_until.is_some(),
                retry_at: dead_until.map(|t| t.0.div_ceil(1000)),
                sent: fig.map(|f| f.sent.counter(secs)).unwrap_or_default(),
            });
        }
        out.sort_by(|a, b| {
            (b.queued + b.deferred)
                .cmp(&(a.queued + a.deferred))
                .then(b.dead.cmp(&a.dead))
                .then_with(|| (&a.transport, &a.destination).cmp(&(&b.transport, &b.destination)))
        });
        out.truncate(top);
        out
    }

    fn is_held(&self, id: &QueueId) -> bool {
        self.state.messages.get(id).is_some_and(|m| m.held)
    }

    /// The last deferral reason of each deferred recipient: this qmgr's own,
    /// else the message's latest `Deferred` record (after a restart).
    pub(crate) fn reasons_of(&self, id: &QueueId) -> BTreeMap<u32, mail::Status> {
        // What this qmgr appended includes the latest Deferred record.
        if let Some(mine) = self.reasons.get(id) {
            return mine.clone();
        }
        let mut out = BTreeMap::new();
        if let Some(lsn) = self.state.messages.get(id).and_then(|m| m.last_deferred) {
            if let Ok(Record::Deferred {
                id: of,
                rcpts,
                status,
                reason,
                ..
            }) = self.store.read_at(lsn)
            {
                if of == *id {
                    for i in rcpts {
                        out.insert(i, mail::Status::new(status, reason.clone()));
                    }
                }
            }
        }
        out
    }

    /// The live messages a selector names, oldest first.
    pub(crate) fn select(&self, sel: &queuectl::Selector) -> Vec<QueueId> {
        self.select_page(sel, None, usize::MAX).0
    }

    /// At most `max` of the live messages a selector names after `after`,
    /// oldest first, and where the next page starts when there may be more
    /// (a move of a million messages is many loop turns, not one).
    pub(crate) fn select_page(
        &self,
        sel: &queuectl::Selector,
        after: Option<QueueId>,
        max: usize,
    ) -> (Vec<QueueId>, Option<QueueId>) {
        if !sel.is_given() || max == 0 {
            return (Vec::new(), None);
        }
        let named: Option<std::collections::HashSet<QueueId>> =
            (!sel.ids.is_empty()).then(|| sel.ids.iter().filter_map(|s| s.parse().ok()).collect());
        let domain = sel
            .domain
            .as_ref()
            .map(|d| d.trim_start_matches('@').to_ascii_lowercase());
        // Filters that need the envelope read it back from the journal.
        let needs_head =
            sel.sender.is_some() || domain.is_some() || sel.tenant.is_some() || sel.job.is_some();
        let mut cheap: Vec<QueueId> = self
            .state
            .messages
            .iter()
            .filter(|(id, m)| {
                after.is_none_or(|a| **id > a)
                    && named.as_ref().is_none_or(|n| n.contains(id))
                    && (!sel.held || m.held)
                    && (!sel.deferred || (!m.held && m.next_attempt > 0 && !self.is_active(id)))
            })
            .map(|(id, _)| *id)
            .collect();
        cheap.sort();
        // The envelope is read back only for the candidates this page scans.
        let mut scanned = 0;
        let ids: Vec<QueueId> = cheap
            .iter()
            .copied()
            .inspect(|_| scanned += 1)
            .filter(|id| {
                if !needs_head {
                    return true;
                }
                let Some((rec, h)) = self.head(id) else {
                    return false;
                };
                let e = &h.envelope;
                let same = |want: &Option<String>, have: &Option<String>| {
                    want.as_ref()
                        .is_none_or(|w| have.as_deref() == Some(w.as_str()))
                };
                sel.sender
                    .as_ref()
                    .is_none_or(|s| e.sender.eq_ignore_ascii_case(s))
                    && same(&sel.tenant, &e.tenant)
                    && same(&sel.job, &e.job)
                    && domain.as_ref().is_none_or(|want| {
                        self.state.pending(*id, &rec).iter().any(|i| {
                            e.recipients.get(*i as usize).is_some_and(|r| {
                                r.address
                                    .rsplit_once('@')
                                    .is_some_and(|(_, d)| d.eq_ignore_ascii_case(want))
                            })
                        })
                    })
            })
            .take(max)
            .collect();
        let next = (ids.len() == max && scanned < cheap.len()).then(|| cheap[scanned - 1]);
        (ids, next)
    }

    /// `sluice queue show`: envelope, headers, and each recipient's state.
    fn show(&self, text: &str) -> Result<String, String> {
        use std::fmt::Write;
        let id: QueueId = text
            .parse()
            .map_err(|_| format!("{text}: not a queue id"))?;
        let (rec, h) = self
            .head(&id)
            .ok_or_else(|| format!("{id}: no such message in the queue"))?;
        let m = &self.state.messages[&id];
        let env = &h.envelope;
        let mut out = String::new();
        let _ = writeln!(out, "queue id: {id}");
        let _ = writeln!(out, "state: {}", state_word(m.held, m.next_attempt));
        if m.next_attempt > 0 {
            let at = system_time(Time::from_secs(m.next_attempt));
            let _ = writeln!(out, "next attempt: {}", sys::time::rfc5322_date(at));
        }
        let arrival =
            std::time::UNIX_EPOCH + std::time::Duration::from_micros(env.arrival.as_micros());
        let _ = writeln!(out, "arrival: {}", sys::time::rfc5322_date(arrival));
        let _ = writeln!(out, "size: {}", env.size);
        let _ = writeln!(out, "sender: <{}>", env.sender);
        if let Some(a) = &env.client_addr {
            let _ = writeln!(
                out,
                "client: {}[{a}] helo={}",
                env.client_name.as_deref().unwrap_or("unknown"),
                env.helo.as_deref().unwrap_or("")
            );
        }
        if let Some(t) = &env.tls {
            let _ = writeln!(out, "tls: {t}");
        }
        if let Some(e) = &env.envid {
            let _ = writeln!(out, "envid: {e}");
        }
        let pending = self.state.pending(id, &rec);
        let reasons = self.reasons_of(&id);
        out.push_str("recipients:\n");
        for (i, r) in env.recipients.iter().enumerate() {
            let i = i as u32;
            let st = if pending.contains(&i) {
                match reasons.get(&i) {
                    Some(why) => format!("deferred ({why})"),
                    None => "pending".to_string(),
                }
            } else {
                "done".to_string()
            };
            let _ = writeln!(out, "  <{}>: {st}", r.address);
        }
        out.push_str("headers:\n");
        if let Ok(buf) = self.store.read_data(id, &h.data, Some(64 * 1024)) {
            let text = String::from_utf8_lossy(&buf);
            for line in text.split("\r\n") {
                if line.is_empty() {
                    break;
                }
                out.push_str("  ");
                out.push_str(line);
                out.push('\n');
            }
        }
        Ok(out)
    }
}

/// How mailq names a message's state.
fn state_word(held: bool, next_attempt: u64) -> &'static str {
    if held {
        "hold"
    } else if next_attempt > 0 {
        "deferred"
    } else {
        "active"
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_mail_system_announces_mail_but_anyone_asks_about_the_queue() {
        let me = 107;
        assert!(super::admits(false, 0, me), "root");
        assert!(super::admits(false, me, me), "mail_owner");
        assert!(!super::admits(false, 1000, me), "a user announcing mail");
        assert!(
            super::admits(true, 1000, me),
            "a user asking about the queue"
        );
    }

    use ipc::queuectl::{Request, Response, Selector};
    use queue::Record;

    use crate::testkit::{settings, World};
    use crate::Event;

    fn ask(w: &mut World, body: Request) -> Response {
        w.handle(Event::Control {
            client: 7,
            request: 1,
            body,
        });
        w.replies.pop().expect("an answer")
    }

    #[test]
    fn list_and_show_give_each_recipients_state_and_last_reason() {
        let mut w = World::new(settings());
        let id = w.arrive("alice@a.example", &["r1@b.example", "r2@c.example"]);
        w.route_all(&[]);
        w.deliver_all(|a| if a.starts_with("r1") { 250 } else { 450 });
        let Response::List(l) = ask(&mut w, Request::List) else {
            panic!("a list");
        };
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].id, id.to_string());
        assert_eq!(l[0].state, "deferred");
        assert_eq!(l[0].recipients.len(), 1, "only the pending one");
        assert_eq!(l[0].recipients[0].address, "r2@c.example");
        // mailq's reason is the text alone, as Postfix's.
        assert_eq!(l[0].recipients[0].reason.as_deref(), Some("450 reply"));
        let Response::Shown(Ok(text)) = ask(&mut w, Request::Show { id: id.to_string() }) else {
            panic!("shown");
        };
        assert!(text.contains("<r1@b.example>: done"), "{text}");
        assert!(
            text.contains("<r2@c.example>: deferred (4.0.0 450 reply)"),
            "{text}"
        );
        assert!(text.contains("  Subject: test"), "{text}");
        let Response::Shown(Err(e)) = ask(&mut w, Request::Show { id: "nope".into() }) else {
            panic!("refused");
        };
        assert_eq!(e, "nope: not a queue id");
    }

    #[test]
    fn hold_keeps_a_deferred_message_from_its_retry_and_delete_removes_it() {
        let mut w = World::new(settings());
        let id = w.arrive("alice@a.example", &["r@b.example"]);
        w.settle(|_| 450);
        let sel = || Selector::ids(vec![id.to_string()]);
        assert_eq!(ask(&mut w, Request::Hold(sel())), Response::Done(1));
        assert_eq!(
            ask(&mut w, Request::Hold(sel())),
            Response::Done(0),
            "held already"
        );
        assert!(w.qm.commit_due(w.now), "an operator's hold does not wait");
        w.wait(std::time::Duration::from_secs(3600));
        assert!(w.router.is_empty(), "a held message is not retried");
        w.qm.started_commit();
        assert_eq!(
            ask(&mut w, Request::Delete(Selector::all())),
            Response::Done(1)
        );
        // Its Removed record is a delivery's kind, but the operator was told.
        assert!(w.qm.commit_due(w.now), "a delete does not wait");
        assert!(!w.live(id));
        assert_eq!(w.removed, [id]);
        assert!(matches!(w.records(id).last(), Some(Record::Removed { .. })));
    }

    #[test]
    fn requeue_and_flush_make_deferred_mail_due_now() {
        let mut w = World::new(settings());
        let a = w.arrive("alice@a.example", &["r@b.example"]);
        let b = w.arrive("bob@a.example", &["r@c.example"]);
        w.settle(|_| 450);
        let sel = Selector::domain("@B.example");
        assert_eq!(ask(&mut w, Request::Requeue(sel)), Response::Done(1));
        assert_eq!(w.router.len(), 1, "only the message for b.example");
        w.settle(|_| 250);
        assert!(!w.live(a) && w.live(b));
        assert_eq!(ask(&mut w, Request::Flush), Response::Flushed(1));
        w.settle(|_| 250);
        assert!(!w.live(b));
        assert!(w.logged("flush: 1 deferred messages made due"));
    }

    #[test]
    fn filters_combine_and_an_empty_selection_is_nothing() {
        let mut w = World::new(settings());
        let t1_deferred = w.arrive_as("a@a.example", &["r@b.example"], Some("t1"), Some("j1"));
        w.route_all(&[]);
        w.deliver_all(|_| 450);
        let t1_new = w.stage_as_pub(
            "a@a.example",
            &["r@c.example"],
            true,
            Some("t1"),
            Some("j2"),
        );
        let t2 = w.stage_as_pub("a@a.example", &["r@b.example"], true, Some("t2"), None);
        let sel = |f: &dyn Fn(&mut Selector)| {
            let mut s = Selector::default();
            f(&mut s);
            s
        };
        let held_t1 = sel(&|s| {
            s.held = true;
            s.tenant = Some("t1".into());
        });
        assert_eq!(w.qm.select(&held_t1), [t1_new]);
        let deferred = sel(&|s| s.deferred = true);
        assert_eq!(w.qm.select(&deferred), [t1_deferred]);
        let job = sel(&|s| s.job = Some("j1".into()));
        assert_eq!(w.qm.select(&job), [t1_deferred]);
        let b_held = sel(&|s| {
            s.domain = Some("b.example".into());
            s.held = true;
        });
        assert_eq!(w.qm.select(&b_held), [t2]);
        assert!(
            w.qm.select(&Selector::default()).is_empty(),
            "nothing named, nothing chosen"
        );
        assert_eq!(w.qm.select(&Selector::all()).len(), 3);
    }

    #[test]
    fn the_summary_counts_messages_by_state_and_results() {
        let mut w = World::new(settings());
        w.arrive("alice@a.example", &["r@b.example"]);
        let held = w.stage("bob@a.example", &["r@c.example"], true);
        w.handle(Event::Committed {
            id: held,
            hold: true,
        });
        w.settle(|_| 450);
        let Response::Summary(s) = ask(&mut w, Request::Summary { top: 5 }) else {
            panic!("a summary");
        };
        assert_eq!((s.messages, s.deferred, s.hold), (2, 1, 1));
        assert_eq!(s.deferrals.total, 1);
        assert_eq!(s.destinations[0].destination, "b.example");
        assert_eq!(s.destinations[0].deferred, 1);
    }
}
