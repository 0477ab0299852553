//! Address verification probes, scheduled as one pseudo-message per
//! transport (fanf 2007: "assigning all verifications to a pseudo-message,
//! which would probably have specially tuned concurrency settings").
//!
//! smtpd's query ([`Event::Verify`]) is answered from the cache
//! ([`crate::verify`]) at once, or, on a miss, held until the probe's
//! result or its `wait_ms`, whichever comes first. A probe is routed by
//! the router as smtpd's recipients are (aliases mapped: the probe goes to
//! what an alias maps to, and an alias of several addresses is deliverable
//! as this system's own list); what the route decides alone (`error`,
//! `discard`, an unknown local user, a transport without an agent) is the
//! result at once. The others wait in their transport's queue, and each
//! transport has at most one pseudo-message with the scheduler: up to
//! `address_verify_concurrency_limit` probes, started at most
//! `address_verify_rate_limit` a second, sent as MAIL FROM
//! `address_verify_sender`, RCPT, RSET over the connections, host lists,
//! destdb and dead destinations real mail uses. So a flood of
//! verifications takes at most that many recipients' worth of the
//! transport, whatever its size; the rest waits (bounded by
//! `address_verify_pending_limit`), and answers unknown meanwhile.
//!
//! Probes are soft state: nothing of them is journaled, and a restart
//! forgets those under way (smtpd asks again). The cache is saved by the
//! shell ([`Action::SaveVerify`]) at most once a minute when it changed.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::Duration;

use ipc::{delivery, router, verify};
use mail::{Envelope, QueueId, Recipient, Timestamp};
use queue::Record;
use sched::Time;

use crate::dispatch::{InDelivery, Route};
use crate::verify::{Cache, VerifySettings};
use crate::{Action, QueueManager, Store};

/// How often a changed cache is saved.
pub const SAVE_INTERVAL: Duration = Duration::from_secs(60);

/// At most one warning this often about queries not probed.
const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// The node part of pseudo-messages' queue ids: no instance has it.
const PROBE_NODE: u32 = (1 << 25) - 1;

/// A query waiting for a probe's result.
struct Waiter {
    address: String,
    client: u64,
    request: u64,
    deadline: Time,
}

/// One transport's pseudo-message with the scheduler.
struct Running {
    transport: String,
    /// The addresses by recipient index.
    addresses: Vec<String>,
    /// Recipients without a result yet.
    open: HashSet<u32>,
}

/// The probes and the cache.
pub(crate) struct Probes {
    pub(crate) cache: Cache,
    waiters: Vec<Waiter>,
    /// Routed probes waiting for their transport's pseudo-message: the
    /// address asked about, its route, the address the probe names.
    queued: BTreeMap<String, VecDeque<(String, Route, String)>>,
    /// Pseudo-messages with the scheduler, by the scheduler's queue id.
    running: BTreeMap<u64, Running>,
    /// Their queue ids.
    ids: HashSet<QueueId>,
    next_seq: u32,
    /// Probes started per transport in the last second (the rate limit).
    started: BTreeMap<String, VecDeque<Time>>,
    /// When the cache is to be saved next, if it changed.
    next_save: Time,
    /// Queries not probed for the pending limit since the last warning,
    /// and when the next warning may be logged (a flood logs one a minute).
    refused: (u64, Time),
}

impl Probes {
    /// No probes, an empty cache.
    pub(crate) fn new(settings: VerifySettings) -> Self {
        Probes {
            cache: Cache::new(settings),
            waiters: Vec::new(),
            queued: BTreeMap::new(),
            running: BTreeMap::new(),
            ids: HashSet::new(),
            next_seq: 0,
            started: BTreeMap::new(),
            next_save: Time(0),
            refused: (0, Time(0)),
        }
    }

    /// Whether probes wait for routing, a pseudo-message, or a result.
    pub(crate) fn busy(&self) -> bool {
        self.cache.probing() > 0 || !self.queued.is_empty() || !self.running.is_empty()
    }

    /// Whether a journal record is about a pseudo-message.
    pub(crate) fn owns(&self, rec: &Record) -> bool {
        let id = match rec {
            Record::Delivered { id, .. }
            | Record::Deferred { id, .. }
            | Record::Bounced { id, .. }
            | Record::Succeeded { id, .. } => id,
            _ => return false,
        };
        !self.ids.is_empty() && self.ids.contains(id)
    }

    /// The earliest time something here is due.
    pub(crate) fn deadline(&self) -> Option<Time> {
        let w = self.waiters.iter().map(|w| w.deadline).min();
        let rate = self.cache.settings().rate_limit;
        let r = if rate == 0 {
            None
        } else {
            self.queued
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .filter_map(|(t, _)| self.started.get(t)?.front())
                .map(|t| *t + Duration::from_secs(1))
                .min()
        };
        [w, r].into_iter().flatten().min()
    }
}

/// A delivery status as the cache keeps it.
fn outcome(st: &mail::Status) -> verify::Outcome {
    if st.is_success() {
        verify::Outcome::Deliverable
    } else if st.is_permanent() {
        verify::Outcome::Undeliverable
    } else {
        verify::Outcome::Deferred
    }
}

impl<S: Store> QueueManager<S> {
    /// smtpd asks about `address`.
    pub(crate) fn verify_query(
        &mut self,
        client: u64,
        request: u64,
        address: String,
        wait_ms: u64,
    ) {
        let now = self.now;
        let l = self.probes.cache.query(now, &address);
        if l.probe {
            self.probes.cache.probe_started(&address);
            self.resolve_probe(address.clone());
        }
        if let Some(k) = l.known {
            return self.verify_answer(client, request, k.outcome, k.text);
        }
        if l.refused {
            let (n, next) = &mut self.probes.refused;
            *n += 1;
            if now >= *next {
                *next = now + WARN_INTERVAL;
                let n = std::mem::take(n);
                let under_way = self.probes.cache.probing();
                self.warn(format!(
                    "verify: {under_way} probes under way (address_verify_pending_limit): {n} address(es) not probed, the last {address}"
                ));
            }
        }
        if wait_ms == 0 || l.refused {
            return self.verify_unknown(client, request);
        }
        self.probes.waiters.push(Waiter {
            address: address.to_ascii_lowercase(),
            client,
            request,
            deadline: now + Duration::from_millis(wait_ms),
        });
    }

    fn verify_answer(&mut self, client: u64, request: u64, outcome: verify::Outcome, text: String) {
        self.actions.push_back(Action::VerifyAnswer {
            client,
            request,
            response: verify::Response::Status { outcome, text },
        });
    }

    fn verify_unknown(&mut self, client: u64, request: u64) {
        let text = "Address verification in progress".to_string();
        self.verify_answer(client, request, verify::Outcome::Unknown, text);
    }

    /// A probe's result (or `None`: it could not run), to the cache and
    /// to the queries waiting for it.
    fn probe_result(&mut self, address: &str, found: Option<(verify::Outcome, String)>) {
        let found = found.map(|(o, t)| (o, crate::verify::clip(t)));
        self.probes.cache.result(self.now, address, found.clone());
        let key = address.to_ascii_lowercase();
        let (done, rest): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut self.probes.waiters)
            .into_iter()
            .partition(|w| w.address == key);
        self.probes.waiters = rest;
        for w in done {
            match &found {
                Some((o, t)) => self.verify_answer(w.client, w.request, *o, t.clone()),
                None => self.verify_unknown(w.client, w.request),
            }
        }
    }

    /// A probe could not be routed or run: nothing learnt.
    pub(crate) fn probe_failed(&mut self, address: &str) {
        self.probe_result(address, None);
    }

    /// The router said where a probe goes.
    pub(crate) fn probe_routed(&mut self, address: String, resp: router::Response) {
        use verify::Outcome::{Deferred, Deliverable, Undeliverable};
        let r = match resp {
            router::Response::Resolved { mut routes, .. } if routes.len() == 1 => routes.remove(0),
            // An alias of several addresses: a list this system keeps,
            // not one mailbox to probe.
            router::Response::Resolved { routes, .. } if routes.len() > 1 => {
                let text = format!("2.0.0 alias of {} addresses", routes.len());
                return self.probe_result(&address, Some((Deliverable, text)));
            }
            router::Response::Failed { status } => {
                let o = if status.is_permanent() {
                    Undeliverable
                } else {
                    Deferred
                };
                return self.probe_result(&address, Some((o, status.to_string())));
            }
            _ => return self.probe_failed(&address),
        };
        let t = r.transport.as_str();
        let found = if let Some(status) = &r.error {
            Some((Undeliverable, status.to_string()))
        } else if t == "error" {
            Some((Undeliverable, r.nexthop.clone()))
        } else if t == "discard" {
            Some((Deliverable, "2.0.0 discarded".to_string()))
        } else if r.unknown {
            Some((
                Undeliverable,
                "5.1.1 User unknown in local recipient table".to_string(),
            ))
        } else if !self.settings.transports.contains(t) {
            Some((Deferred, format!("4.3.0 mail transport unavailable ({t})")))
        } else if !self.needs_hosts(t) {
            // The local agent's recipients are the router's tables' to know.
            Some((Deliverable, format!("2.0.0 deliverable via {t}")))
        } else {
            None
        };
        if found.is_some() {
            return self.probe_result(&address, found);
        }
        let domain = match self.deliver.sched.config().shaping {
            Some(_) => r
                .address
                .rsplit_once('@')
                .map_or(String::new(), |(_, d)| d.to_ascii_lowercase()),
            None => String::new(),
        };
        let route = Route {
            transport: t.to_string(),
            nexthop: r.nexthop.clone(),
            domain,
        };
        self.probes
            .queued
            .entry(route.transport.clone())
            .or_default()
            .push_back((address, route, r.address));
    }

    /// Starts a pseudo-message for every transport that has probes
    /// waiting and none running, as the limits allow.
    pub(crate) fn pump_probes(&mut self) {
        if self.stalled {
            return;
        }
        let now = self.now;
        let limit = self.probes.cache.settings().concurrency_limit.max(1);
        let rate = self.probes.cache.settings().rate_limit as usize;
        let busy: HashSet<String> = self
            .probes
            .running
            .values()
            .map(|r| r.transport.clone())
            .collect();
        let ready: Vec<String> = self
            .probes
            .queued
            .iter()
            .filter(|(t, q)| !q.is_empty() && !busy.contains(*t))
            .map(|(t, _)| t.clone())
            .collect();
        for t in ready {
            let started = self.probes.started.entry(t.clone()).or_default();
            while started
                .front()
                .is_some_and(|s| now.since(*s) >= Duration::from_secs(1))
            {
                started.pop_front();
            }
            let room = if rate == 0 {
                limit
            } else {
                limit.min(rate.saturating_sub(started.len()))
            };
            if room == 0 {
                continue;
            }
            let q = self.probes.queued.get_mut(&t).expect("listed");
            let batch: Vec<(String, Route, String)> = q.drain(..room.min(q.len())).collect();
            if rate > 0 {
                let started = self.probes.started.get_mut(&t).expect("made");
                started.extend(std::iter::repeat_n(now, batch.len()));
            }
            self.start_probe_message(t, batch);
        }
        self.probes.queued.retain(|_, q| !q.is_empty());
    }

    fn start_probe_message(&mut self, transport: String, batch: Vec<(String, Route, String)>) {
        let seq = self.probes.next_seq;
        self.probes.next_seq = (seq + 1) % (1 << 25);
        let micros = self.now.0.saturating_mul(1000);
        let Some(id) = QueueId::from_parts(micros, PROBE_NODE, seq) else {
            for (a, _, _) in batch {
                self.probe_failed(&a);
            }
            return;
        };
        let mut routes = BTreeMap::new();
        let mut recipients = Vec::new();
        let mut addresses = Vec::new();
        for (i, (address, route, rcpt)) in batch.into_iter().enumerate() {
            routes.insert(i as u32, route);
            recipients.push(Recipient::new(rcpt));
            addresses.push(address);
        }
        let envelope = Envelope {
            sender: self.probes.cache.settings().sender.clone(),
            recipients,
            arrival: Timestamp::from_micros(micros),
            smtputf8: addresses.iter().any(|a| !a.is_ascii()),
            ..Envelope::default()
        };
        let d = &mut self.deliver;
        let qid = d.next_qid;
        d.next_qid += 1;
        let open = (0..addresses.len() as u32).collect();
        d.msgs.insert(qid, InDelivery::probe(id, envelope, routes));
        d.by_id.insert(id, qid);
        self.probes.ids.insert(id);
        self.probes.running.insert(
            qid,
            Running {
                transport,
                addresses,
                open,
            },
        );
        self.maybe_add(qid);
    }

    /// The agent's results for a pseudo-message's recipients, with the
    /// server's words.
    pub(crate) fn probe_results(&mut self, qid: u64, results: &[delivery::RcptResult]) {
        let Some(run) = self.probes.running.get_mut(&qid) else {
            return;
        };
        let mut done = Vec::new();
        for r in results {
            // A deferral made up for a broken connection waits for the
            // scheduler, which may try again.
            if !r.status.is_transient() && run.open.remove(&r.index) {
                if let Some(a) = run.addresses.get(r.index as usize) {
                    done.push((a.clone(), outcome(&r.status), r.status.text.clone()));
                }
            }
        }
        for (a, o, t) in done {
            self.probe_result(&a, Some((o, t)));
        }
    }

    /// A result the queue logic would have journaled for a pseudo-message.
    pub(crate) fn probe_record(&mut self, rec: Record) {
        use verify::Outcome::{Deferred, Deliverable, Undeliverable};
        let Some(qid) = (match &rec {
            Record::Delivered { id, .. }
            | Record::Deferred { id, .. }
            | Record::Bounced { id, .. } => self.deliver.by_id.get(id).copied(),
            _ => None,
        }) else {
            return;
        };
        let (rcpts, o, text) = match rec {
            Record::Delivered { rcpts, .. } => (rcpts, Deliverable, "250 2.0.0 Ok".to_string()),
            Record::Deferred { rcpts, reason, .. } => (rcpts, Deferred, reason),
            Record::Bounced { rcpts, reason, .. } => (rcpts, Undeliverable, reason),
            _ => return,
        };
        let Some(run) = self.probes.running.get_mut(&qid) else {
            return;
        };
        let mut done = Vec::new();
        for i in rcpts {
            if run.open.remove(&i) {
                if let Some(a) = run.addresses.get(i as usize) {
                    done.push(a.clone());
                }
            }
        }
        for a in done {
            self.probe_result(&a, Some((o, text.clone())));
        }
    }

    /// The scheduler is done with a pseudo-message: its transport may
    /// start the next.
    pub(crate) fn probes_done(&mut self, qid: u64) {
        let Some(run) = self.probes.running.remove(&qid) else {
            return;
        };
        self.probes
            .ids
            .retain(|id| self.deliver.by_id.contains_key(id));
        let mut open: Vec<u32> = run.open.into_iter().collect();
        open.sort_unstable();
        for i in open {
            if let Some(a) = run.addresses.get(i as usize) {
                self.probe_failed(a);
            }
        }
    }

    /// Queries whose wait is over are answered unknown; the cache is
    /// saved when due.
    pub(crate) fn probes_timeout(&mut self) {
        let now = self.now;
        let (late, rest): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut self.probes.waiters)
            .into_iter()
            .partition(|w| w.deadline <= now);
        self.probes.waiters = rest;
        for w in late {
            self.verify_unknown(w.client, w.request);
        }
        if now >= self.probes.next_save {
            self.probes.next_save = now + SAVE_INTERVAL;
            self.probes.cache.prune(now);
            if let Some(text) = self.probes.cache.take_save() {
                self.actions.push_back(Action::SaveVerify { text });
            }
        }
    }

    /// Loads the saved cache; the lines that did not parse.
    pub fn load_verify_cache(&mut self, text: &str) -> usize {
        let now = self.now;
        self.probes.next_save = now + SAVE_INTERVAL;
        self.probes.cache.load(now, text)
    }

    /// The cache as it is now, for a save at shutdown.
    pub fn verify_cache_save(&mut self) -> Option<String> {
        self.probes.cache.take_save()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{settings, World};
    use crate::Event;
    use ipc::verify::{Outcome, Response};

    fn world(limit: usize, rate: u32) -> World {
        let mut s = settings();
        s.verify.concurrency_limit = limit;
        s.verify.rate_limit = rate;
        s.verify.sender = "double-bounce@test".into();
        World::new(s)
    }

    fn ask(w: &mut World, request: u64, address: &str, wait_ms: u64) {
        w.handle(Event::Verify {
            client: 1,
            request,
            address: address.into(),
            wait_ms,
        });
    }

    fn answer(w: &World, request: u64) -> Option<(Outcome, String)> {
        w.verified
            .iter()
            .rev()
            .find(|(r, _)| *r == request)
            .map(|(_, a)| {
                let Response::Status { outcome, text } = a;
                (*outcome, text.clone())
            })
    }

    /// Per address: 250 for known@, 550 for unknown@, 451 for the rest.
    fn code(a: &str) -> u16 {
        if a.starts_with("known") {
            250
        } else if a.starts_with("unknown") {
            550
        } else {
            451
        }
    }

    #[test]
    fn a_probe_runs_as_mail_from_the_verify_sender_without_content_and_is_not_journaled() {
        let mut w = world(10, 0);
        ask(&mut w, 1, "known@example.test", 6000);
        ask(&mut w, 2, "unknown@example.test", 6000);
        ask(&mut w, 3, "later@example.test", 0);
        assert_eq!(answer(&w, 3).unwrap().0, Outcome::Unknown);
        assert!(answer(&w, 1).is_none(), "held for the probe");
        w.settle(code);
        let sends: Vec<delivery::Transaction> = w
            .history
            .iter()
            .filter_map(|(_, a)| match a {
                crate::testkit::Asked::Agent(delivery::Request::Send { txn, .. }) => {
                    Some((**txn).clone())
                }
                _ => None,
            })
            .collect();
        // The first probe routed went at once; the two routed while it ran
        // followed in the transport's next pseudo-message.
        let sizes: Vec<usize> = sends.iter().map(|t| t.recipients.len()).collect();
        assert_eq!(sizes, [1, 2]);
        for t in &sends {
            assert_eq!(t.sender, "double-bounce@test");
            assert_eq!(t.data, delivery::Data::Probe);
        }
        assert_eq!(answer(&w, 1).unwrap().0, Outcome::Deliverable);
        let (o, t) = answer(&w, 2).unwrap();
        assert_eq!((o, t.as_str()), (Outcome::Undeliverable, "550 reply"));
        assert_eq!(w.qm.store().records().count(), 0, "nothing journaled");
        // Now cached: answered at once, with no probe.
        let asked = w.history.len();
        ask(&mut w, 4, "unknown@example.test", 6000);
        assert_eq!(answer(&w, 4).unwrap().0, Outcome::Undeliverable);
        ask(&mut w, 5, "later@example.test", 0);
        assert_eq!(answer(&w, 5).unwrap().0, Outcome::Deferred);
        assert_eq!(w.history.len(), asked);
    }

    #[test]
    fn an_alias_is_verified_by_what_it_maps_to() {
        let mut w = world(10, 0);
        // "unknown…" as given would be refused; it maps to a known mailbox.
        ask(&mut w, 1, "unknown-alias@example.test", 6000);
        let (request, body) = w.router.pop_front().unwrap();
        assert!(
            matches!(body, router::Request::Resolve { .. }),
            "mapped as smtpd's recipients are: {body:?}"
        );
        let response = crate::testkit::resolved("known-box@example.test", "smtp", "example.test");
        w.handle(Event::RouterAnswer { request, response });
        w.settle(code);
        let rcpts: Vec<String> = w
            .history
            .iter()
            .filter_map(|(_, a)| match a {
                crate::testkit::Asked::Agent(delivery::Request::Send { txn, .. }) => Some(
                    txn.recipients
                        .iter()
                        .map(|r| r.address.clone())
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(
            rcpts,
            ["known-box@example.test"],
            "the probe names the mapped address"
        );
        assert_eq!(answer(&w, 1).unwrap().0, Outcome::Deliverable);
        // An alias of several addresses is a list this system keeps.
        ask(&mut w, 2, "team@example.test", 6000);
        let (request, _) = w.router.pop_front().unwrap();
        let mut response = crate::testkit::resolved("a@example.test", "smtp", "example.test");
        if let router::Response::Resolved { routes, .. } = &mut response {
            let mut b = routes[0].clone();
            b.address = "b@example.test".into();
            routes.push(b);
        }
        w.handle(Event::RouterAnswer { request, response });
        assert_eq!(answer(&w, 2).unwrap().0, Outcome::Deliverable);
    }

    #[test]
    fn a_query_waits_no_longer_than_it_may() {
        let mut w = world(10, 0);
        ask(&mut w, 1, "known@example.test", 3000);
        w.wait(Duration::from_millis(2999));
        assert!(answer(&w, 1).is_none());
        w.wait(Duration::from_millis(1));
        assert_eq!(answer(&w, 1).unwrap().0, Outcome::Unknown);
        // The probe goes on; its result is cached for the next query.
        w.settle(code);
        ask(&mut w, 2, "known@example.test", 3000);
        assert_eq!(answer(&w, 2).unwrap().0, Outcome::Deliverable);
    }

    #[test]
    fn a_flood_of_probes_is_one_bounded_pseudo_message_at_a_time_beside_real_mail() {
        let mut w = world(10, 0);
        for i in 0..25u64 {
            ask(&mut w, i, &format!("known{i}@example.test"), 0);
        }
        let real = w.arrive("sender@test", &["known-mail@example.test"]);
        w.settle(code);
        // Probes go in pseudo-messages of at most the limit, one after another.
        let sizes: Vec<usize> = w
            .history
            .iter()
            .filter_map(|(_, a)| match a {
                crate::testkit::Asked::Agent(delivery::Request::Send { txn, .. })
                    if txn.data == delivery::Data::Probe =>
                {
                    Some(txn.recipients.len())
                }
                _ => None,
            })
            .collect();
        assert_eq!(sizes, [1, 10, 10, 4]);
        assert!(!w.live(real), "the real message was delivered");
        for i in 0..25u64 {
            let a = format!("known{i}@example.test");
            ask(&mut w, 100 + i, &a, 0);
            assert_eq!(answer(&w, 100 + i).unwrap().0, Outcome::Deliverable, "{a}");
        }
    }

    #[test]
    fn the_rate_limit_spreads_pseudo_messages_over_seconds() {
        let mut w = world(10, 4);
        for i in 0..10u64 {
            ask(&mut w, i, &format!("known{i}@example.test"), 0);
        }
        let t0 = w.now;
        w.settle(code);
        let mut starts = Vec::new();
        for _ in 0..5 {
            w.wait(Duration::from_millis(500));
            w.settle(code);
        }
        for (t, a) in &w.history {
            if let crate::testkit::Asked::Agent(delivery::Request::Send { txn, .. }) = a {
                starts.push((t.since(t0).as_millis() / 1000, txn.recipients.len()));
            }
        }
        // Four a second: the first routed alone, then the three routed meanwhile.
        assert_eq!(starts, [(0, 1), (0, 3), (1, 4), (2, 2)]);
    }

    #[test]
    fn routes_decide_some_probes_without_a_connection() {
        let mut w = world(10, 0);
        ask(&mut w, 1, "gone@example.test", 1000);
        ask(&mut w, 2, "box@local.test", 1000);
        w.route_all(&[
            ("gone@example.test", "error", "5.1.1 user has moved"),
            ("box@local.test", "lmtp", "local.test"),
        ]);
        let (o, t) = answer(&w, 1).unwrap();
        assert_eq!(
            (o, t.as_str()),
            (Outcome::Undeliverable, "5.1.1 user has moved")
        );
        // No agent for lmtp here: unknown until it has one.
        assert_eq!(answer(&w, 2).unwrap().0, Outcome::Deferred);
        assert!(w.agent.is_empty());
    }

    #[test]
    fn a_next_hop_without_servers_answers_its_probes_and_the_transport_goes_on() {
        let mut w = world(10, 0);
        ask(&mut w, 1, "a@nowhere.test", 1000);
        // Routed: the pseudo-message waits for the next hop's servers.
        let (request, _) = w.router.pop_front().unwrap();
        let response = crate::testkit::resolved("a@nowhere.test", "smtp", "nowhere.test");
        w.handle(Event::RouterAnswer { request, response });
        ask(&mut w, 2, "b@nowhere.test", 1000);
        let mut hosts = None;
        while let Some((request, body)) = w.router.pop_front() {
            match body {
                router::Request::Hosts { .. } => hosts = Some(request),
                router::Request::Resolve { address, .. } => {
                    let response = crate::testkit::resolved(&address, "smtp", "nowhere.test");
                    w.handle(Event::RouterAnswer { request, response });
                }
                other => panic!("{other:?}"),
            }
        }
        let response = router::Response::Failed {
            status: mail::Status::new(
                mail::StatusCode::known(5, 4, 4),
                "Host or domain name not found",
            ),
        };
        w.handle(Event::RouterAnswer {
            request: hosts.expect("hosts asked"),
            response,
        });
        let (o, t) = answer(&w, 1).unwrap();
        assert_eq!(
            (o, t.as_str()),
            (Outcome::Undeliverable, "Host or domain name not found")
        );
        // The second probe was queued behind the first pseudo-message and
        // runs now; nothing was journaled.
        // (Its host list is asked again: the failure was not kept.)
        w.settle(|_| 250);
        assert_eq!(answer(&w, 2).unwrap().0, Outcome::Deliverable);
        assert_eq!(w.qm.store().records().count(), 0);
    }

    #[test]
    fn queries_past_the_pending_limit_are_not_probed_and_warned_about_once_a_minute() {
        let mut s = settings();
        s.verify.pending_limit = 2;
        let mut w = World::new(s);
        for i in 0..5u64 {
            ask(&mut w, i, &format!("known{i}@example.test"), 0);
        }
        let probes = |w: &World| {
            w.history
                .iter()
                .filter(|(_, a)| {
                    matches!(
                        a,
                        crate::testkit::Asked::Router(router::Request::Resolve { .. })
                    )
                })
                .count()
        };
        assert_eq!(probes(&w), 2);
        let warned = |w: &World| {
            w.log
                .iter()
                .filter(|(_, l)| l.contains("not probed"))
                .count()
        };
        assert_eq!(warned(&w), 1);
        w.wait(WARN_INTERVAL);
        ask(&mut w, 9, "known9@example.test", 0);
        assert_eq!(warned(&w), 2);
        assert!(w.logged(
            "verify: 2 probes under way (address_verify_pending_limit): \
             3 address(es) not probed, the last known9@example.test"
        ));
    }

    #[test]
    fn the_cache_is_saved_when_it_changed_and_loads_back() {
        let mut w = world(10, 0);
        ask(&mut w, 1, "known@example.test", 0);
        w.settle(code);
        w.wait(SAVE_INTERVAL);
        let saved = w.saved_verify.last().expect("saved").clone();
        assert!(
            saved.starts_with("known@example.test\tdeliverable\t"),
            "{saved}"
        );
        let mut v = world(10, 0);
        assert_eq!(v.qm.load_verify_cache(&saved), 0);
        ask(&mut v, 1, "known@example.test", 0);
        assert_eq!(answer(&v, 1).unwrap().0, Outcome::Deliverable);
    }
}
