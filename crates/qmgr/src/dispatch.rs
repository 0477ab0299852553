//! Delivery: the scheduler and the delivery agents (Postfix's `qmgr_deliver.c`).
//!
//! An activated message is resolved (`resolve`), then handed to `sched`,
//! whose actions are carried out here: connections opened and closed and
//! transactions sent to the agents as [`Action::ToAgent`], the agents'
//! answers fed back as scheduler events, deferrals and bounces journaled
//! and logged, and the message finished (`active`) when the scheduler is
//! done with it. Connection ids on the wire are [`AgentConns`]'.
//!
//! Logs, as Postfix's qmgr: `ID: to=<…>, relay=none, delay=…, dsn=4.x.x,
//! status=deferred (reason)` for recipients deferred or bounced without a
//! delivery attempt; the agents log the results of their own transactions.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use ipc::delivery;
use mail::Envelope;
use mail::QueueId;
use queue::{DataRef, DataSpan, Lsn, MessageHead};
use sched::{
    Action as SchedAction, ConnFailure, EntryId, Event as SchedEvent, NewMessage, RcptStatus,
    RecipientGroup, Scheduler, Time,
};

use crate::agentconn::{AgentConns, Wire};
use mail::{Status, StatusCode};

use crate::logline::{log_rcpt, log_rcpt_as};
use crate::{Action, QueueManager, Store, ROUTE_RETRY};
use mail::logline::Disposition;

/// What an agent request waits for.
pub(crate) enum AgentWait {
    Open,
    Send {
        entry: EntryId,
        qid: u64,
        rcpts: Vec<u32>,
    },
    /// With the shaping binding whose slots the connection holds until
    /// the agent says it closed.
    Close(Option<shaping::BindId>),
}

/// Where the router sends one recipient.
pub(crate) struct Route {
    pub(crate) transport: String,
    pub(crate) nexthop: String,
    /// The routed address's domain, kept only while a shaping policy is
    /// in force (which may count by it, or group by it).
    pub(crate) domain: String,
}

/// A message in delivery. Its inline data stays in the journal when it is
/// durable there (`data` is then a span the agents read, and the segment
/// is pinned until the message leaves delivery), so 20,000 active
/// messages do not hold up to 64 KiB each.
pub(crate) struct InDelivery {
    pub(crate) id: QueueId,
    pub(crate) envelope: Envelope,
    /// What the agents are told of the content.
    data: delivery::Data,
    /// The journal position whose segment is pinned for `data`.
    pinned: Option<Lsn>,
    pub(crate) pending: Vec<u32>,
    pub(crate) routes: BTreeMap<u32, Route>,
    pub(crate) unresolved: usize,
    /// Next hops whose host lists it waits for.
    pub(crate) hosts_awaited: usize,
    /// Next hops whose host lists could not be had, with their status and
    /// whether it is temporary: settled in one pass once none is awaited
    /// (a pass per answer is quadratic in a list's domains).
    pub(crate) host_failures: Vec<(String, Status, bool)>,
    attempts: u32,
    /// Recipients handed to the scheduler, not yet read by it.
    unread: Vec<(usize, u32)>,
    groups: Vec<RecipientGroup>,
    /// Handed to the scheduler (routing is over).
    pub(crate) added: bool,
    /// Activated by a flush: defer_transports do not hold it back.
    pub(crate) flush: bool,
    /// The earliest next attempt of recipients deferred while routing: the
    /// message's, if the scheduler never sees it.
    retry_at: Option<Time>,
    /// An address verification pseudo-message (`probes`): not journaled,
    /// its results go to the verification cache.
    pub(crate) probe: bool,
    /// Where its head record was at activation (none for probes).
    head: Option<Lsn>,
}

impl InDelivery {
    /// A pseudo-message of verification probes, routed already: one
    /// recipient per address, sent as MAIL FROM `sender`, RCPT, RSET.
    pub(crate) fn probe(id: QueueId, envelope: Envelope, routes: BTreeMap<u32, Route>) -> Self {
        InDelivery {
            id,
            pending: routes.keys().copied().collect(),
            envelope,
            data: delivery::Data::Probe,
            pinned: None,
            routes,
            unresolved: 0,
            hosts_awaited: 0,
            host_failures: Vec::new(),
            attempts: 0,
            unread: Vec::new(),
            groups: Vec::new(),
            added: false,
            flush: false,
            retry_at: None,
            probe: true,
            head: None,
        }
    }
}

/// The scheduler and what the agents are doing.
pub(crate) struct Deliver {
    pub(crate) sched: Scheduler,
    /// Messages in delivery, by the scheduler's queue id.
    pub(crate) msgs: BTreeMap<u64, InDelivery>,
    pub(crate) by_id: HashMap<QueueId, u64>,
    pub(crate) next_qid: u64,
    agent_wait: BTreeMap<(String, u64), AgentWait>,
    /// The agents' names of the scheduler's connections.
    conns: AgentConns,
    /// Recipients whose result an agent logged already.
    logged: HashSet<(u64, u32)>,
    /// How long new mail took to reach the scheduler (`sluice sim`).
    pub(crate) pickups: crate::snapshot::Pickups,
}

impl Deliver {
    pub(crate) fn new(sched: Scheduler) -> Self {
        Deliver {
            sched,
            msgs: BTreeMap::new(),
            by_id: HashMap::new(),
            next_qid: 1,
            agent_wait: BTreeMap::new(),
            conns: AgentConns::default(),
            logged: HashSet::new(),
            pickups: crate::snapshot::Pickups::default(),
        }
    }

    /// Messages in delivery (routing, scheduling or with an agent).
    pub(crate) fn active(&self) -> usize {
        self.msgs.len()
    }
}

impl<S: Store> QueueManager<S> {
    /// Starts delivering `pending` recipients of a message.
    pub(crate) fn activate(
        &mut self,
        head: MessageHead,
        pending: Vec<u32>,
        attempts: u32,
        flush: bool,
        span: Option<(Lsn, DataSpan)>,
        at: Lsn,
    ) {
        if self.deliver.by_id.contains_key(&head.id) {
            return;
        }
        // Tried again: no longer waiting for its destinations.
        self.figures.forget(&head.id);
        if pending.is_empty() {
            // Nothing left to deliver: removed (or its notices sent first).
            self.finished(head.id, None, None);
            return;
        }
        let MessageHead { id, envelope, data } = head;
        let (data, pinned) = match (data, span) {
            (DataRef::Inline(_), Some((lsn, span))) => {
                self.state.refs.pin(lsn);
                (delivery::Data::Journal(span), Some(lsn))
            }
            (DataRef::Inline(b), None) => (delivery::Data::Inline(b), None),
            (DataRef::File, _) => (
                delivery::Data::File(format!("msg/{:02X}/{id}", id.hash_byte())),
                None,
            ),
            (DataRef::Pool(n), _) => (delivery::Data::File(format!("pool/{n:08}")), None),
        };
        let d = &mut self.deliver;
        let qid = d.next_qid;
        d.next_qid += 1;
        let mut a = InDelivery {
            id,
            envelope,
            data,
            pinned,
            pending: pending.clone(),
            routes: BTreeMap::new(),
            unresolved: pending.len(),
            hosts_awaited: 0,
            host_failures: Vec::new(),
            attempts,
            unread: Vec::new(),
            groups: Vec::new(),
            added: false,
            flush,
            retry_at: None,
            probe: false,
            head: Some(at),
        };
        d.by_id.insert(id, qid);
        let smtputf8 = a.envelope.smtputf8;
        let mut requests = Vec::new();
        for &i in &pending {
            if let Some(r) = a.envelope.recipients.get(i as usize) {
                requests.push((i, r.address.clone()));
            } else {
                a.unresolved -= 1;
            }
        }
        d.msgs.insert(qid, a);
        for (i, address) in requests {
            self.resolve_rcpt(qid, i, address, smtputf8);
        }
        self.maybe_add(qid);
    }

    /// Defers every recipient of a message that the scheduler has not seen.
    pub(crate) fn defer_unrouted(&mut self, qid: u64, status: &Status) {
        let Some(a) = self.deliver.msgs.get(&qid) else {
            return;
        };
        if a.added {
            return;
        }
        let rcpts: Vec<u32> = a.pending.clone();
        let next = self.now + ROUTE_RETRY;
        self.defer_now(qid, &rcpts, status, next);
        self.finish(qid, Some(next));
    }

    /// Journals and logs recipients deferred before any delivery attempt.
    pub(crate) fn defer_now(&mut self, qid: u64, rcpts: &[u32], status: &Status, next: Time) {
        self.defer_logged(qid, rcpts, status, next, Disposition::of(status));
    }

    /// [`Self::defer_now`], logged with `word` (`SOFTBOUNCE` for a
    /// bounce kept by `soft_bounce`).
    fn defer_logged(
        &mut self,
        qid: u64,
        rcpts: &[u32],
        status: &Status,
        next: Time,
        word: Disposition,
    ) {
        let Some(a) = self.deliver.msgs.get_mut(&qid) else {
            return;
        };
        a.retry_at = Some(a.retry_at.map_or(next, |t| t.min(next)));
        let a = &*a;
        let mut lines = Vec::new();
        for &i in rcpts {
            lines.push(log_rcpt_as(self.now, &a.id, &a.envelope, i, status, word));
            if let Some(r) = a.routes.get(&i) {
                self.figures.deferred(a.id, &r.transport, &r.nexthop);
            }
        }
        let rec = queue::Record::Deferred {
            id: a.id,
            rcpts: rcpts.to_vec(),
            status: status.code,
            reason: status.text.clone(),
            next_attempt: crate::secs_ceil(next),
        };
        for l in lines {
            self.info(l);
        }
        self.append(rec);
    }

    /// When a message deferred now is due again, as Postfix's qmgr backs
    /// off: its age, within minimal_backoff_time .. maximal_backoff_time.
    fn backoff(&self, qid: u64) -> Time {
        let cfg = self.deliver.sched.config();
        let arrival_us = self
            .deliver
            .msgs
            .get(&qid)
            .map_or(0, |a| a.envelope.arrival.as_micros());
        let age = Duration::from_micros((self.now.0 * 1000).saturating_sub(arrival_us));
        let d = age
            .min(cfg.maximal_backoff_time)
            .max(cfg.minimal_backoff_time);
        self.now + d
    }

    /// Journals and logs recipients bounced before any delivery attempt;
    /// with `soft_bounce` they are deferred instead, as Postfix's bounce
    /// daemon does, so that a configuration under test loses no mail.
    pub(crate) fn bounce_now(&mut self, qid: u64, rcpts: &[u32], status: &Status) {
        if self.settings.soft_bounce {
            let next = self.backoff(qid);
            let word = Disposition::SoftBounce;
            return self.defer_logged(qid, rcpts, &status.softened(), next, word);
        }
        let Some(a) = self.deliver.msgs.get(&qid) else {
            return;
        };
        let lines: Vec<String> = rcpts
            .iter()
            .map(|&i| log_rcpt(self.now, &a.id, &a.envelope, i, status))
            .collect();
        let rec = queue::Record::Bounced {
            id: a.id,
            rcpts: rcpts.to_vec(),
            status: status.code,
            reason: status.text.clone(),
        };
        for l in lines {
            self.info(l);
        }
        self.append(rec);
    }

    /// The message leaves delivery; it is due again at the earliest of
    /// `next` (the scheduler's) and its recipients deferred while routing.
    pub(crate) fn finish(&mut self, qid: u64, next: Option<Time>) {
        if let Some(a) = self.deliver.msgs.remove(&qid) {
            self.deliver.by_id.remove(&a.id);
            if a.probe {
                self.deliver.logged.retain(|(q, _)| *q != qid);
                self.figures.forget(&a.id);
                return self.probes_done(qid);
            }
            if let Some(lsn) = a.pinned {
                self.state.refs.unpin(lsn);
            }
            self.deliver.logged.retain(|(q, _)| *q != qid);
            let next = match (next, a.retry_at) {
                (Some(n), Some(r)) => Some(n.min(r)),
                (n, r) => n.or(r),
            };
            let known = a.head.map(|head| crate::active::Activated {
                head,
                pending: a.pending,
                envelope: a.envelope,
            });
            self.finished(a.id, next, known);
        }
    }

    /// Hands a fully routed message to the scheduler.
    /// Defers or bounces, in one pass over its routes, the recipients of
    /// next hops whose host lists could not be had.
    fn settle_host_failures(&mut self, qid: u64) {
        let Some(a) = self.deliver.msgs.get_mut(&qid) else {
            return;
        };
        let failures = std::mem::take(&mut a.host_failures);
        let at: HashMap<&str, usize> = failures
            .iter()
            .enumerate()
            .map(|(i, (nexthop, _, _))| (nexthop.as_str(), i))
            .collect();
        let mut rcpts: Vec<Vec<u32>> = vec![Vec::new(); failures.len()];
        for (&i, r) in &a.routes {
            if let Some(&f) = at.get(r.nexthop.as_str()) {
                rcpts[f].push(i);
            }
        }
        for ((_, status, temporary), rcpts) in failures.iter().zip(rcpts) {
            if rcpts.is_empty() {
                continue;
            }
            if *temporary {
                self.defer_now(qid, &rcpts, status, self.now + ROUTE_RETRY);
            } else {
                self.bounce_now(qid, &rcpts, status);
            }
            if let Some(a) = self.deliver.msgs.get_mut(&qid) {
                for r in &rcpts {
                    a.routes.remove(r);
                }
            }
        }
    }

    pub(crate) fn maybe_add(&mut self, qid: u64) {
        let Some(a) = self.deliver.msgs.get(&qid) else {
            return;
        };
        if a.added || a.unresolved > 0 || a.hosts_awaited > 0 {
            return;
        }
        if !a.host_failures.is_empty() {
            self.settle_host_failures(qid);
        }
        let Some(a) = self.deliver.msgs.get(&qid) else {
            return;
        };
        let mut stale: Vec<String> = a
            .routes
            .values()
            .filter(|r| self.needs_hosts(&r.transport) && !self.fresh_hosts(&r.nexthop))
            .map(|r| r.nexthop.clone())
            .collect();
        if !stale.is_empty() {
            // A list that expired while another was awaited is asked again
            // (once for every message waiting for it), or the message
            // would wait for ever.
            stale.dedup();
            for nexthop in stale {
                self.want_hosts(&nexthop, qid);
            }
            return;
        }
        // Group recipients by (transport, nexthop), and by domain when a
        // shaping policy may count by it (behind a relayhost the nexthop
        // does not say which domain a recipient is in).
        let mut by: BTreeMap<(String, String, String), Vec<u32>> = BTreeMap::new();
        for (&i, r) in &a.routes {
            by.entry((r.transport.clone(), r.nexthop.clone(), r.domain.clone()))
                .or_default()
                .push(i);
        }
        let mut groups = Vec::new();
        let mut unread = Vec::new();
        for ((transport, nexthop, domain), rcpts) in by {
            let levels = match self.resolve.hosts.get(&nexthop) {
                Some(h) if self.needs_hosts(&transport) => h.levels.clone(),
                _ => vec![vec![nexthop.clone()]],
            };
            let g = groups.len();
            for &r in &rcpts {
                unread.push((g, r));
            }
            groups.push(RecipientGroup {
                domain,
                transport,
                nexthop,
                hosts: levels,
                recipients: Vec::new(),
            });
        }
        if unread.is_empty() {
            // Everything was bounced or deferred during routing.
            self.finish(qid, None);
            return;
        }
        let a = self.deliver.msgs.get_mut(&qid).expect("checked");
        a.groups = groups;
        a.unread = unread;
        a.added = true;
        let env = &a.envelope;
        let msg = NewMessage {
            queue_id: sched::QueueId(qid),
            sender: env.sender.clone(),
            tenant: env.tenant.clone(),
            job: env.job.clone(),
            size: env.size,
            arrival: Time(env.arrival.as_micros() / 1000),
            attempts: a.attempts,
            recipients: a.unread.len() as u32,
        };
        let id = a.id;
        if msg.attempts == 0 && !a.flush {
            self.deliver.pickups.record(msg.arrival.0, self.now.0);
        }
        if let Err(e) = self
            .deliver
            .sched
            .handle(self.now, SchedEvent::MessageAdded(msg))
        {
            // Admission takes no more than the scheduler does, so this is a
            // bug; the message waits for its next run rather than linger.
            self.warn(format!("{id}: scheduler: {e:?}; trying again later"));
            self.finish(qid, Some(self.now + std::time::Duration::from_secs(60)));
        }
    }

    /// An agent answered.
    pub(crate) fn agent_answer(
        &mut self,
        transport: &str,
        request: Option<u64>,
        resp: delivery::Response,
    ) {
        if let delivery::Response::ProxyFailed { proxy, .. } = resp {
            // The agent tries its next proxy: nothing for the scheduler.
            *self
                .totals
                .proxy_failures
                .entry((transport.to_string(), proxy))
                .or_default() += 1;
            return;
        }
        let wait =
            request.and_then(|r| self.deliver.agent_wait.remove(&(transport.to_string(), r)));
        if let Some(AgentWait::Close(release)) = wait {
            // The agent closed it (its answer to our Close): the remote
            // server no longer counts it against the policy.
            if let Some(bind) = release {
                self.sched_event(SchedEvent::SlotReleased { bind });
            }
            return;
        }
        // An answer about a connection the scheduler has forgotten: what
        // it carried is back in the scheduler's queues already.
        let Some(conn) = self.deliver.conns.resolve(transport, resp.conn()) else {
            if let delivery::Response::Sent { results, .. } = &resp {
                if results.iter().any(|r| !r.status.is_transient()) {
                    self.warn(format!(
                        "delivery agent {transport}: results for connection {} that was closed; the recipients will be tried again",
                        resp.conn()
                    ));
                }
            }
            return;
        };
        let ev = match (wait, resp) {
            (Some(AgentWait::Open), delivery::Response::Opened { .. }) => {
                SchedEvent::ConnectionOpened { conn }
            }
            (
                Some(AgentWait::Open),
                delivery::Response::OpenFailed {
                    failure,
                    reason,
                    remote,
                    ..
                },
            ) => SchedEvent::ConnectionFailed {
                conn,
                failure: match failure {
                    delivery::OpenFailure::Unreachable => ConnFailure::Unreachable,
                    delivery::OpenFailure::Handshake => ConnFailure::Handshake,
                    delivery::OpenFailure::Local => ConnFailure::Local,
                },
                status: reason,
                remote,
            },
            (
                Some(AgentWait::Send { entry, qid, rcpts }),
                delivery::Response::Sent {
                    results,
                    conn_failed,
                    handoff,
                    ..
                },
            ) => {
                self.probe_results(qid, &results);
                self.owe_success(qid, &results, handoff);
                let mut out = Vec::new();
                let mut remote: Vec<mail::RemoteReply> = Vec::new();
                for r in results {
                    self.deliver.logged.insert((qid, r.index));
                    // A refusal the server sent, once however many
                    // recipients it refused (a refused MAIL FROM is each one's).
                    if let Some(rr) = r.remote.filter(|_| !r.status.is_success()) {
                        if !remote.contains(&rr) {
                            remote.push(rr);
                        }
                    }
                    let st = if r.status.is_success() {
                        RcptStatus::Delivered
                    } else if r.status.is_permanent() && self.settings.soft_bounce {
                        RcptStatus::Deferred(r.status.softened())
                    } else if r.status.is_permanent() {
                        RcptStatus::Bounced(r.status)
                    } else {
                        RcptStatus::Deferred(r.status)
                    };
                    out.push((r.index, st));
                }
                // A recipient the agent did not report is deferred, never lost.
                for i in rcpts {
                    if !out.iter().any(|(x, _)| *x == i) {
                        out.push((
                            i,
                            RcptStatus::Deferred(Status::new(
                                StatusCode::SYSTEM_TEMP,
                                "no result from the delivery agent",
                            )),
                        ));
                    }
                }
                SchedEvent::DeliveryDone {
                    conn,
                    entry,
                    results: out,
                    conn_failed,
                    remote,
                }
            }
            (_, delivery::Response::Closed { .. }) => SchedEvent::ConnectionClosed { conn },
            (_, other) => {
                self.warn(format!(
                    "delivery agent {transport}: unexpected answer {other:?}"
                ));
                return;
            }
        };
        self.sched_event(ev);
    }

    /// Feeds the scheduler an event, through the connection names.
    fn sched_event(&mut self, ev: SchedEvent) {
        let d = &mut self.deliver;
        if let Err(e) = d.conns.handle(&mut d.sched, self.now, ev) {
            self.warn(format!("scheduler: {e:?}"));
        }
    }

    /// RFC 3461: delivered recipients that asked NOTIFY=SUCCESS get a report
    /// from us when delivery was final here or the next hop could not take
    /// the request on; the journal keeps it owed until the notice is queued.
    fn owe_success(
        &mut self,
        qid: u64,
        results: &[delivery::RcptResult],
        handoff: delivery::Handoff,
    ) {
        if handoff == delivery::Handoff::RelayedWithDsn {
            return;
        }
        let Some(a) = self.deliver.msgs.get(&qid) else {
            return;
        };
        // One record per distinct reply, so each recipient's report quotes its own.
        let mut by_text: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for r in results {
            let wants = a
                .envelope
                .recipients
                .get(r.index as usize)
                .is_some_and(|x| x.notify.wants_success());
            if r.status.is_success() && wants {
                // The record keeps text only: a server's reply is worded so
                // that the notice gives its Remote-MTA, Diagnostic-Code and
                // enhanced code back (Postfix's "delivery via relay: reply").
                let text = match &r.remote {
                    Some(remote) => remote.reason(&mail::Said::Accepted),
                    None => r.status.text.clone(),
                };
                by_text.entry(text).or_default().push(r.index);
            }
        }
        let recs: Vec<queue::Record> = by_text
            .into_iter()
            .map(|(reason, rcpts)| queue::Record::Succeeded {
                id: a.id,
                rcpts,
                relayed: handoff == delivery::Handoff::Relayed,
                reason,
            })
            .collect();
        for r in recs {
            self.append(r);
        }
    }

    /// An agent's link is gone. The agent's failure is not the
    /// destination's: no feedback. What a connection had in flight is
    /// deferred (it may have gone), the rest goes back to its queue.
    pub(crate) fn agent_lost(&mut self, transport: &str) {
        self.actions
            .retain(|a| !matches!(a, Action::ToAgent { transport: t, .. } if t == transport));
        // Connections it was closing are gone with it.
        let released: Vec<shaping::BindId> = self
            .deliver
            .agent_wait
            .iter()
            .filter_map(|((t, _), w)| match w {
                AgentWait::Close(Some(b)) if t == transport => Some(*b),
                _ => None,
            })
            .collect();
        self.deliver.agent_wait.retain(|(t, _), _| t != transport);
        for bind in released {
            self.sched_event(SchedEvent::SlotReleased { bind });
        }
        for conn in self.deliver.conns.of_transport(transport) {
            self.sched_event(SchedEvent::ConnectionLost {
                conn,
                status: Status::new(
                    StatusCode::SYSTEM_TEMP,
                    format!("delivery agent {transport} died"),
                ),
            });
        }
    }

    fn send_agent(&mut self, transport: String, body: delivery::Request, wait: AgentWait) {
        let request = self.request_id();
        self.deliver
            .agent_wait
            .insert((transport.clone(), request), wait);
        self.actions.push_back(Action::ToAgent {
            transport,
            request,
            body,
        });
    }

    /// Carries out what the scheduler decided.
    pub(crate) fn run_sched(&mut self) {
        while let Some(a) = self.deliver.sched.poll_action() {
            match a {
                SchedAction::ReadRecipients { queue_id, max } => {
                    let qid = queue_id.0;
                    let Some(m) = self.deliver.msgs.get_mut(&qid) else {
                        continue;
                    };
                    let take = (max as usize).min(m.unread.len());
                    let batch: Vec<(usize, u32)> = m.unread.drain(..take).collect();
                    let mut groups: Vec<RecipientGroup> = m
                        .groups
                        .iter()
                        .map(|g| RecipientGroup {
                            recipients: Vec::new(),
                            ..g.clone()
                        })
                        .collect();
                    for (g, r) in batch {
                        groups[g].recipients.push(r);
                    }
                    groups.retain(|g| !g.recipients.is_empty());
                    let remaining = m.unread.len() as u32;
                    let ev = SchedEvent::RecipientsRead {
                        queue_id,
                        groups,
                        remaining,
                    };
                    if let Err(e) = self.deliver.sched.handle(self.now, ev) {
                        self.warn(format!("scheduler: {e:?}"));
                    }
                }
                SchedAction::Open {
                    conn,
                    transport,
                    destination,
                    host,
                    source,
                } => {
                    let s = &self.deliver.sched;
                    let tname = s.transport_name(transport).to_string();
                    let nexthop = s.nexthop(destination).unwrap_or("").to_string();
                    let hname = s.host_name(host).to_string();
                    let known = self.resolve.hosts.get(&nexthop);
                    let addrs = known
                        .and_then(|h| h.addrs.get(&hname))
                        .cloned()
                        .unwrap_or_default();
                    let dane = known
                        .and_then(|h| h.dane.get(&hname))
                        .cloned()
                        .unwrap_or_default();
                    let wire = self.deliver.conns.open(conn, &tname);
                    // One address of a host is scheduled as `name[address]`
                    // (shaping's remoteip); the agent gets the name back,
                    // for its logs and for TLS.
                    let host = sched::host_parts(&hname).0.to_string();
                    let body = delivery::Request::Open {
                        conn: wire,
                        host,
                        nexthop,
                        addrs,
                        source,
                        dane,
                    };
                    self.send_agent(tname, body, AgentWait::Open);
                }
                SchedAction::Start {
                    conn,
                    entry,
                    queue_id,
                    recipients,
                } => {
                    let qid = queue_id.0;
                    let Some(Wire {
                        transport: tname,
                        id: wire,
                    }) = self.deliver.conns.wire(conn).cloned()
                    else {
                        continue;
                    };
                    let Some(m) = self.deliver.msgs.get(&qid) else {
                        continue;
                    };
                    let txn = transaction(m, &recipients);
                    let body = delivery::Request::Send {
                        conn: wire,
                        txn: Box::new(txn),
                    };
                    let wait = AgentWait::Send {
                        entry,
                        qid,
                        rcpts: recipients,
                    };
                    self.send_agent(tname, body, wait);
                }
                SchedAction::Close { conn, release } => {
                    if let Some(Wire {
                        transport: tname,
                        id: wire,
                    }) = self.deliver.conns.forget(conn)
                    {
                        let body = delivery::Request::Close { conn: wire };
                        self.send_agent(tname, body, AgentWait::Close(release));
                    } else if let Some(bind) = release {
                        self.sched_event(SchedEvent::SlotReleased { bind });
                    }
                }
                SchedAction::Defer {
                    queue_id,
                    recipients,
                    status,
                    next_attempt: _,
                } => self.log_unlogged(queue_id.0, recipients, &status),
                SchedAction::Bounce {
                    queue_id,
                    recipients,
                    status,
                } => self.log_unlogged(queue_id.0, recipients, &status),
                SchedAction::Journal(rec) => self.journal_result(rec),
                SchedAction::MessageDone {
                    queue_id,
                    next_attempt,
                } => self.finish(queue_id.0, next_attempt),
                SchedAction::Notice(n) => self.sched_notice(n),
            }
        }
    }

    /// Logs the recipients of a deferral or bounce that no agent logged.
    fn log_unlogged(&mut self, qid: u64, rcpts: Vec<u32>, status: &Status) {
        let Some(m) = self.deliver.msgs.get(&qid) else {
            return;
        };
        let mut lines = Vec::new();
        for i in rcpts {
            if !self.deliver.logged.remove(&(qid, i)) {
                lines.push(log_rcpt(self.now, &m.id, &m.envelope, i, status));
            }
        }
        for l in lines {
            self.info(l);
        }
    }

    /// Journals a result the scheduler decided, and counts it per destination.
    fn journal_result(&mut self, rec: sched::Record) {
        let qid = match &rec {
            sched::Record::Delivered { queue_id, .. }
            | sched::Record::Deferred { queue_id, .. }
            | sched::Record::Bounced { queue_id, .. } => queue_id.0,
        };
        let Some(m) = self.deliver.msgs.get(&qid) else {
            return;
        };
        let id = m.id;
        match &rec {
            // Probes are not mail: no figures (append gives their
            // results to the cache).
            _ if m.probe => {}
            // A record is one entry's, so one destination's: one figure
            // update per destination, not per recipient.
            sched::Record::Delivered { recipients, .. } => {
                let now = self.now.0 / 1000;
                for ((t, n), k) in by_route(m, recipients) {
                    self.figures.delivered(now, t, n, k);
                }
            }
            sched::Record::Deferred { recipients, .. } => {
                for ((t, n), _) in by_route(m, recipients) {
                    self.figures.deferred(id, t, n);
                }
            }
            sched::Record::Bounced { .. } => {}
        }
        let r = match rec {
            sched::Record::Delivered { recipients, .. } => queue::Record::Delivered {
                id,
                rcpts: recipients,
            },
            sched::Record::Deferred {
                recipients,
                status,
                next_attempt,
                ..
            } => queue::Record::Deferred {
                id,
                rcpts: recipients,
                status: status.code,
                reason: status.text,
                next_attempt: crate::secs_ceil(next_attempt),
            },
            sched::Record::Bounced {
                recipients, status, ..
            } => queue::Record::Bounced {
                id,
                rcpts: recipients,
                status: status.code,
                reason: status.text,
            },
        };
        self.append(r);
    }

    /// Logs what the scheduler noticed about destinations.
    fn sched_notice(&mut self, n: sched::Notice) {
        let s = &self.deliver.sched;
        let line = match n {
            sched::Notice::DestinationDead {
                destination,
                retry_at,
            } => {
                let nexthop = s.nexthop(destination).unwrap_or("?").to_string();
                let secs = retry_at.0.saturating_sub(self.now.0) / 1000;
                self.warn(format!(
                    "destination {nexthop} is not responding: deliveries suspended for {secs}s"
                ));
                self.actions
                    .push_back(Action::DestinationDead { nexthop, retry_at });
                return;
            }
            sched::Notice::DestinationRevived { destination } => format!(
                "destination {} is responding again",
                s.nexthop(destination).unwrap_or("?")
            ),
            sched::Notice::DestinationRetry {
                destination,
                window,
            } => format!(
                "destination {}: trying again with concurrency {window}",
                s.nexthop(destination).unwrap_or("?")
            ),
            sched::Notice::Window {
                destination,
                from,
                to,
            } => format!(
                "destination {}: concurrency window {from} -> {to}",
                s.nexthop(destination).unwrap_or("?")
            ),
            sched::Notice::HostRetry { host, until } => {
                let host = s.host_name(host).to_string();
                self.actions.push_back(Action::HostRetry {
                    host,
                    retry_at: until,
                });
                return;
            }
            sched::Notice::Suspended { hold } => {
                self.hold_placed(&hold);
                return;
            }
            sched::Notice::Resumed { id } => {
                self.hold_lifted(id);
                return;
            }
        };
        self.info(line);
    }
}

/// The agent's transaction for `recipients` of a message.
fn transaction(m: &InDelivery, recipients: &[u32]) -> delivery::Transaction {
    let env = &m.envelope;
    let data = m.data.clone();
    delivery::Transaction {
        queue_id: m.id.to_string(),
        sender: env.sender.clone(),
        ret: env.ret,
        envid: env.envid.clone(),
        body: env.body_type,
        smtputf8: env.smtputf8,
        size: env.size,
        arrival_us: env.arrival.as_micros(),
        recipients: recipients
            .iter()
            .filter_map(|&i| {
                let r = env.recipients.get(i as usize)?;
                Some(delivery::TxnRecipient {
                    index: i,
                    address: r.address.clone(),
                    notify: r.notify,
                    orcpt: r.orcpt.clone(),
                })
            })
            .collect(),
        data,
    }
}

/// How many of `recipients` go to each (transport, next hop).
fn by_route<'a>(m: &'a InDelivery, recipients: &[u32]) -> BTreeMap<(&'a str, &'a str), u64> {
    let mut out = BTreeMap::new();
    for i in recipients {
        if let Some(r) = m.routes.get(i) {
            *out.entry((r.transport.as_str(), r.nexthop.as_str()))
                .or_default() += 1;
        }
    }
    out
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
