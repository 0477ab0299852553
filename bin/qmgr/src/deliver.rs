//! qmgr's delivery side: router look-ups, the scheduler, the agents.
//!
//! A message becomes active when it arrives or its retry time comes. Each
//! pending recipient is resolved by the router (pipelined), each next hop
//! of an SMTP transport gets its host list, and then the message is handed
//! to `sched`, whose actions are carried out here: connections opened and
//! closed and transactions run through the delivery agents, deferrals and
//! bounces logged, journal records and finished messages passed back to the
//! server as [`Effect`]s (the server owns the journal).
//!
//! Logs, as Postfix's qmgr: `ID: to=<…>, relay=none, delay=…, dsn=4.x.x,
//! status=deferred (reason)` for recipients deferred without a delivery
//! attempt; the agents log the results of their own transactions.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::agentconn::{AgentConns, Wire};
use daemon::{msg_info, msg_warn, Cx};
use ipc::delivery::{self, Delivery};
use ipc::router::{self, Router};
use ipc::Link;
use mail::QueueId;
use mio::{Registry, Token};
use queue::{DataRef, MessageHead};
use sched::{
    Action, ConnFailure, EntryId, Event, NewMessage, RcptStatus, RecipientGroup, Scheduler, Time,
};

/// Something the server must do for the delivery side.
pub enum Effect {
    /// Append this record to the journal.
    Journal(Box<queue::Record>),
    /// The message left the active queue; retry at the time given (seconds), if any.
    Finished {
        /// The message.
        id: QueueId,
        /// When its deferred recipients are due.
        next_attempt: Option<u64>,
    },
}

/// Wall-clock milliseconds: the scheduler's time base, so retry and
/// expiry times survive a restart.
pub fn now_ms() -> Time {
    Time(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    )
}

enum RouterWait {
    Resolve { qid: u64, rcpt: u32 },
    Hosts { nexthop: String },
}

enum AgentWait {
    Open,
    Send {
        entry: EntryId,
        qid: u64,
        rcpts: Vec<u32>,
    },
    Close,
}

struct Route {
    transport: String,
    nexthop: String,
}

struct Hosts {
    /// When the router's answer stops being good (its TTL, at least a minute).
    expires: Time,
    /// Host names by MX preference level, best first.
    levels: Vec<Vec<String>>,
    addrs: HashMap<String, Vec<SocketAddr>>,
}

struct Active {
    id: QueueId,
    head: MessageHead,
    pending: Vec<u32>,
    routes: BTreeMap<u32, Route>,
    unresolved: usize,
    attempts: u32,
    /// Recipients handed to the scheduler, not yet read by it.
    unread: Vec<(usize, u32)>,
    groups: Vec<RecipientGroup>,
    added: bool,
    /// Activated by a flush: defer_transports do not hold it back.
    flush: bool,
}

/// The delivery machinery.
pub struct Deliver {
    sched: Scheduler,
    router: Option<Link<Router>>,
    router_path: PathBuf,
    router_wait: BTreeMap<u64, RouterWait>,
    agents: BTreeMap<String, Link<Delivery>>,
    agent_wait: BTreeMap<(String, u64), AgentWait>,
    transports: BTreeSet<String>,
    queue_root: PathBuf,
    msgs: BTreeMap<u64, Active>,
    by_id: HashMap<QueueId, u64>,
    next_qid: u64,
    hosts: HashMap<String, Hosts>,
    host_waiters: HashMap<String, Vec<u64>>,
    /// The agents' names of the scheduler's connections.
    conns: AgentConns,
    /// Recipients whose result an agent logged already.
    logged: HashSet<(u64, u32)>,
    effects: Vec<Effect>,
    /// `defer_transports`.
    defer_transports: BTreeSet<String>,
    /// Deliveries and deferred messages per destination, for operators.
    figures: crate::metrics::DestFigures,
}

impl Deliver {
    /// The scheduler and the names of the transports that have agents.
    pub fn new(sched: Scheduler, transports: BTreeSet<String>, queue_root: PathBuf) -> Self {
        Deliver {
            sched,
            router: None,
            router_path: queue_root.join("private/router"),
            router_wait: BTreeMap::new(),
            agents: BTreeMap::new(),
            agent_wait: BTreeMap::new(),
            transports,
            queue_root,
            msgs: BTreeMap::new(),
            by_id: HashMap::new(),
            next_qid: 1,
            hosts: HashMap::new(),
            host_waiters: HashMap::new(),
            conns: AgentConns::default(),
            logged: HashSet::new(),
            effects: Vec::new(),
            defer_transports: BTreeSet::new(),
            figures: crate::metrics::DestFigures::default(),
        }
    }

    /// Sets `defer_transports`: mail for these is kept until flushed.
    pub fn set_defer_transports(&mut self, names: impl IntoIterator<Item = String>) {
        self.defer_transports = names.into_iter().collect();
    }

    /// What the server must do now.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Whether a message is being delivered now.
    pub fn is_active(&self, id: &QueueId) -> bool {
        self.by_id.contains_key(id)
    }

    /// New scheduler parameters (a reload); transports cannot be removed or renamed.
    pub fn reconfigure(&mut self, cfg: sched::SchedConfig) -> Result<(), sched::SchedError> {
        self.sched
            .handle(now_ms(), Event::ConfigChanged(Box::new(cfg)))
    }

    /// An operator flush: the scheduler forgets host retries and dead destinations.
    pub fn flush(&mut self) {
        if let Err(e) = self.sched.handle(now_ms(), Event::Flush) {
            msg_warn!("scheduler: {e:?}");
        }
    }

    /// Messages in delivery (routing, scheduling or with an agent).
    pub fn active(&self) -> usize {
        self.msgs.len()
    }

    /// A message leaves the queue or goes on hold: it waits for no destination.
    pub fn forget(&mut self, id: &QueueId) {
        self.figures.forget(id);
    }

    /// Drops figures of destinations with nothing to show.
    pub fn prune_figures(&mut self) {
        self.figures.prune(now_ms().0 / 1000);
    }

    /// Recipients of active messages in the scheduler's memory.
    pub fn active_recipients(&self) -> u64 {
        u64::from(self.sched.recipients_in_core())
    }

    /// The active queue per transport and class.
    pub fn transport_summary(&self) -> Vec<ipc::queuectl::TransportSummary> {
        self.sched
            .transport_stats()
            .into_iter()
            .map(|t| ipc::queuectl::TransportSummary {
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
    pub fn destination_summary(&self, top: usize) -> Vec<ipc::queuectl::DestSummary> {
        let now = now_ms();
        let secs = now.0 / 1000;
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        let mut candidates: Vec<(String, String, Option<sched::DestStats>)> = self
            .sched
            .destination_stats(top)
            .into_iter()
            .map(|d| (d.transport.clone(), d.nexthop.clone(), Some(d)))
            .collect();
        for (t, n) in self.figures.most_deferred(top) {
            let st = self.sched.destination(&t, &n);
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
            out.push(ipc::queuectl::DestSummary {
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

    /// When `handle_timeout` should run next.
    pub fn next_timeout(&self) -> Option<Time> {
        self.sched.poll_timeout()
    }

    /// Whether `token` belongs to one of our links.
    pub fn owns(&self, token: Token) -> bool {
        self.router.as_ref().is_some_and(|r| r.token() == token)
            || self.agents.values().any(|a| a.token() == token)
    }

    /// Starts delivering `pending` recipients of a message.
    pub fn activate(
        &mut self,
        cx: &mut Cx<'_>,
        head: MessageHead,
        pending: Vec<u32>,
        attempts: u32,
        flush: bool,
    ) {
        if self.by_id.contains_key(&head.id) {
            return;
        }
        // Tried again: no longer waiting for its destinations.
        self.figures.forget(&head.id);
        if pending.is_empty() {
            // Nothing left to deliver: let the server remove it.
            self.effects.push(Effect::Finished {
                id: head.id,
                next_attempt: None,
            });
            return;
        }
        let qid = self.next_qid;
        self.next_qid += 1;
        let id = head.id;
        let mut a = Active {
            id,
            head,
            pending: pending.clone(),
            routes: BTreeMap::new(),
            unresolved: pending.len(),
            attempts,
            unread: Vec::new(),
            groups: Vec::new(),
            added: false,
            flush,
        };
        self.by_id.insert(id, qid);
        let smtputf8 = a.head.envelope.smtputf8;
        let mut requests = Vec::new();
        for &i in &pending {
            if let Some(r) = a.head.envelope.recipients.get(i as usize) {
                requests.push((i, r.address.clone()));
            } else {
                a.unresolved -= 1;
            }
        }
        self.msgs.insert(qid, a);
        if self.ensure_router(cx).is_err() {
            self.defer_unrouted(qid, "4.3.0 address resolver unavailable");
            return;
        }
        for (i, address) in requests {
            match self
                .router
                .as_mut()
                .map(|r| r.send(&router::Request::ResolveQueued { address, smtputf8 }))
            {
                Some(Ok(req)) => {
                    self.router_wait
                        .insert(req, RouterWait::Resolve { qid, rcpt: i });
                }
                _ => {
                    self.router_broken(cx.registry);
                    return;
                }
            }
        }
        self.maybe_add(qid);
    }

    fn ensure_router(&mut self, cx: &mut Cx<'_>) -> Result<(), ()> {
        if self.router.is_some() {
            return Ok(());
        }
        let t = cx.token();
        match Link::<Router>::connect(&self.router_path, cx.registry, t) {
            Ok(l) => {
                self.router = Some(l);
                Ok(())
            }
            Err(e) => {
                msg_warn!("connect to router {}: {e}", self.router_path.display());
                Err(())
            }
        }
    }

    fn router_broken(&mut self, registry: &Registry) {
        if let Some(mut r) = self.router.take() {
            r.deregister(registry);
        }
        // Every message not yet handed to the scheduler waits on the router
        // (for a resolution or a host list, asked or about to be): defer
        // them all, so each gets a retry time instead of waiting forever.
        self.router_wait.clear();
        self.host_waiters.clear();
        let waiting: Vec<u64> = self
            .msgs
            .iter()
            .filter(|(_, a)| !a.added)
            .map(|(q, _)| *q)
            .collect();
        for q in waiting {
            self.defer_unrouted(q, "4.3.0 address resolver unavailable");
        }
    }

    /// Defers every recipient of a message that the scheduler has not seen.
    fn defer_unrouted(&mut self, qid: u64, reason: &str) {
        let Some(a) = self.msgs.get(&qid) else { return };
        if a.added {
            return;
        }
        let rcpts: Vec<u32> = a.pending.clone();
        let next = (now_ms().0 / 1000) + 300;
        self.defer_now(qid, &rcpts, reason, next);
        self.finish(qid, Some(next));
    }

    fn defer_now(&mut self, qid: u64, rcpts: &[u32], reason: &str, next_secs: u64) {
        let Some(a) = self.msgs.get(&qid) else { return };
        let (status, text) = split_status(reason, "4.3.0");
        for &i in rcpts {
            log_rcpt(a, i, "none", &status, "deferred", &text);
            if let Some(r) = a.routes.get(&i) {
                self.figures.deferred(a.id, &r.transport, &r.nexthop);
            }
        }
        self.effects
            .push(Effect::Journal(Box::new(queue::Record::Deferred {
                id: a.id,
                rcpts: rcpts.to_vec(),
                status: status
                    .parse()
                    .unwrap_or_else(|_| mail::StatusCode::new(4, 3, 0).expect("valid")),
                reason: text,
                next_attempt: next_secs,
            })));
    }

    fn bounce_now(&mut self, qid: u64, rcpts: &[u32], reason: &str) {
        let Some(a) = self.msgs.get(&qid) else { return };
        let (status, text) = split_status(reason, "5.0.0");
        for &i in rcpts {
            log_rcpt(a, i, "none", &status, "bounced", &text);
        }
        self.effects
            .push(Effect::Journal(Box::new(queue::Record::Bounced {
                id: a.id,
                rcpts: rcpts.to_vec(),
                status: status
                    .parse()
                    .unwrap_or_else(|_| mail::StatusCode::new(5, 0, 0).expect("valid")),
                reason: text,
            })));
    }

    fn finish(&mut self, qid: u64, next: Option<u64>) {
        if let Some(a) = self.msgs.remove(&qid) {
            self.by_id.remove(&a.id);
            self.logged.retain(|(q, _)| *q != qid);
            self.effects.push(Effect::Finished {
                id: a.id,
                next_attempt: next,
            });
        }
    }

    /// Hands a fully routed message to the scheduler.
    fn maybe_add(&mut self, qid: u64) {
        let Some(a) = self.msgs.get(&qid) else { return };
        if a.added || a.unresolved > 0 {
            return;
        }
        let waiting = a
            .routes
            .values()
            .any(|r| self.needs_hosts(&r.transport) && !self.fresh_hosts(&r.nexthop));
        if waiting {
            return;
        }
        // Group recipients by (transport, nexthop).
        let mut by: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
        for (&i, r) in &a.routes {
            by.entry((r.transport.clone(), r.nexthop.clone()))
                .or_default()
                .push(i);
        }
        let mut groups = Vec::new();
        let mut unread = Vec::new();
        for ((transport, nexthop), rcpts) in by {
            let levels = match self.hosts.get(&nexthop) {
                Some(h) if self.needs_hosts(&transport) => h.levels.clone(),
                _ => vec![vec![nexthop.clone()]],
            };
            let g = groups.len();
            for &r in &rcpts {
                unread.push((g, r));
            }
            groups.push(RecipientGroup {
                transport,
                nexthop,
                hosts: levels,
                recipients: Vec::new(),
            });
        }
        let a = self.msgs.get_mut(&qid).expect("checked");
        if unread.is_empty() {
            // Everything was bounced or deferred during routing.
            let next = None;
            self.finish(qid, next);
            return;
        }
        a.groups = groups;
        a.unread = unread;
        a.added = true;
        let env = &a.head.envelope;
        let msg = NewMessage {
            queue_id: sched::QueueId(qid),
            sender: env.sender.clone(),
            tenant: None,
            size: env.size,
            arrival: Time(env.arrival.as_micros() / 1000),
            attempts: a.attempts,
            recipients: a.unread.len() as u32,
        };
        if let Err(e) = self.sched.handle(now_ms(), Event::MessageAdded(msg)) {
            // The server admits no more than the scheduler takes, so this is
            // a bug; the message waits for its next run rather than linger.
            msg_warn!("{}: scheduler: {e:?}; trying again later", a.id);
            self.finish(qid, Some(now_ms().0 / 1000 + 60));
        }
    }

    /// Whether a current host list for the next hop is at hand.
    fn fresh_hosts(&self, nexthop: &str) -> bool {
        self.hosts
            .get(nexthop)
            .is_some_and(|h| h.expires > now_ms())
    }

    fn needs_hosts(&self, transport: &str) -> bool {
        // Transports run by the smtp agent need the next hop's servers.
        self.transports.contains(transport) && transport != "local"
    }

    /// A socket of ours is ready.
    pub fn ready(&mut self, cx: &mut Cx<'_>, token: Token) {
        if self.router.as_ref().is_some_and(|r| r.token() == token) {
            let answers = match self.router.as_mut().map(|r| r.ready()) {
                Some(Ok(a)) => a,
                Some(Err(e)) => {
                    msg_warn!("router: {e}");
                    self.router_broken(cx.registry);
                    self.run_actions(cx);
                    return;
                }
                None => return,
            };
            for (id, resp) in answers {
                if let Some(w) = self.router_wait.remove(&id) {
                    self.router_answer(cx, w, resp);
                }
            }
            if self.router.as_ref().is_some_and(|r| r.is_closed()) {
                self.router_broken(cx.registry);
            }
        } else if let Some(name) = self
            .agents
            .iter()
            .find(|(_, l)| l.token() == token)
            .map(|(n, _)| n.clone())
        {
            let answers = match self.agents.get_mut(&name).map(|l| l.ready()) {
                Some(Ok(a)) => a,
                Some(Err(e)) => {
                    msg_warn!("delivery agent {name}: {e}");
                    self.agent_broken(cx.registry, &name);
                    self.run_actions(cx);
                    return;
                }
                None => return,
            };
            for (id, resp) in answers {
                self.agent_answer(&name, id, resp);
            }
            if self.agents.get(&name).is_some_and(|l| l.is_closed()) {
                self.agent_broken(cx.registry, &name);
            }
        }
        self.run_actions(cx);
    }

    fn router_answer(&mut self, cx: &mut Cx<'_>, w: RouterWait, resp: router::Response) {
        match w {
            RouterWait::Resolve { qid, rcpt } => {
                let Some(a) = self.msgs.get_mut(&qid) else {
                    return;
                };
                a.unresolved = a.unresolved.saturating_sub(1);
                match resp {
                    router::Response::Resolved { routes, .. } if routes.len() == 1 => {
                        let r = &routes[0];
                        match r.transport.as_str() {
                            "error" => self.bounce_now(qid, &[rcpt], &r.nexthop),
                            "discard" => {
                                if let Some(a) = self.msgs.get(&qid) {
                                    log_rcpt(a, rcpt, "none", "2.0.0", "sent", "discarded");
                                    self.effects.push(Effect::Journal(Box::new(
                                        queue::Record::Delivered {
                                            id: a.id,
                                            rcpts: vec![rcpt],
                                        },
                                    )));
                                }
                            }
                            t if self.defer_transports.contains(t)
                                && !self.msgs.get(&qid).is_some_and(|a| a.flush) =>
                            {
                                // Postfix's defer_transports: kept until flushed.
                                let next = now_ms().0 / 1000 + 300;
                                if let Some(a) = self.msgs.get(&qid) {
                                    self.figures.deferred(a.id, t, &r.nexthop);
                                }
                                self.defer_now(
                                    qid,
                                    &[rcpt],
                                    &format!("4.3.2 deferred transport ({t})"),
                                    next,
                                );
                            }
                            t if !self.transports.contains(t) => {
                                let next = now_ms().0 / 1000 + 300;
                                if let Some(a) = self.msgs.get(&qid) {
                                    self.figures.deferred(a.id, t, &r.nexthop);
                                }
                                self.defer_now(
                                    qid,
                                    &[rcpt],
                                    &format!("4.3.0 mail transport unavailable ({t})"),
                                    next,
                                );
                            }
                            t => {
                                let route = Route {
                                    transport: t.to_string(),
                                    nexthop: r.nexthop.clone(),
                                };
                                let need = self.needs_hosts(t) && !self.fresh_hosts(&r.nexthop);
                                let nexthop = r.nexthop.clone();
                                if let Some(a) = self.msgs.get_mut(&qid) {
                                    a.routes.insert(rcpt, route);
                                }
                                if need {
                                    self.want_hosts(cx, &nexthop, qid);
                                }
                            }
                        }
                    }
                    router::Response::Resolved { .. } => {
                        // ResolveQueued maps nothing, so one route: a router
                        // answering otherwise is broken; try again later.
                        let next = now_ms().0 / 1000 + 300;
                        self.defer_now(qid, &[rcpt], "4.3.0 the address resolver answered several routes for a queued recipient", next);
                    }
                    router::Response::Failed {
                        temporary: true,
                        text,
                    } => {
                        let next = now_ms().0 / 1000 + 300;
                        self.defer_now(qid, &[rcpt], &text, next);
                    }
                    router::Response::Failed {
                        temporary: false,
                        text,
                    } => self.bounce_now(qid, &[rcpt], &text),
                    other => msg_warn!("router: unexpected answer {other:?}"),
                }
                self.maybe_add(qid);
            }
            RouterWait::Hosts { nexthop } => {
                let waiters = self.host_waiters.remove(&nexthop).unwrap_or_default();
                match resp {
                    router::Response::Hosts(list)
                        if list.hosts.iter().any(|h| !h.addrs.is_empty()) =>
                    {
                        // Old entries go when they expire, so the cache
                        // follows the destinations in use.
                        let now = now_ms();
                        self.hosts.retain(|_, h| h.expires > now);
                        self.hosts.insert(nexthop.clone(), hosts_of(&list, now));
                        for q in waiters {
                            self.maybe_add(q);
                        }
                    }
                    other => {
                        let (temporary, text) = match other {
                            router::Response::Failed { temporary, text } => (temporary, text),
                            router::Response::Hosts(l) => {
                                let why = l.hosts.iter().find_map(|h| h.error.clone());
                                match why {
                                    Some((temp, t)) => (temp, t),
                                    None => (true, format!("4.4.3 Host or domain name not found. Name service error for name={nexthop}")),
                                }
                            }
                            o => (true, format!("4.3.0 unexpected router answer {o:?}")),
                        };
                        for q in waiters {
                            let rcpts: Vec<u32> = self
                                .msgs
                                .get(&q)
                                .map(|a| {
                                    a.routes
                                        .iter()
                                        .filter(|(_, r)| r.nexthop == nexthop)
                                        .map(|(i, _)| *i)
                                        .collect()
                                })
                                .unwrap_or_default();
                            if temporary {
                                self.defer_now(q, &rcpts, &text, now_ms().0 / 1000 + 300);
                            } else {
                                self.bounce_now(q, &rcpts, &text);
                            }
                            if let Some(a) = self.msgs.get_mut(&q) {
                                for r in &rcpts {
                                    a.routes.remove(r);
                                }
                            }
                            self.maybe_add(q);
                        }
                    }
                }
            }
        }
    }

    fn want_hosts(&mut self, cx: &mut Cx<'_>, nexthop: &str, qid: u64) {
        let waiters = self.host_waiters.entry(nexthop.to_string()).or_default();
        let first = waiters.is_empty();
        if !waiters.contains(&qid) {
            waiters.push(qid);
        }
        if !first {
            return;
        }
        if self.ensure_router(cx).is_err() {
            self.router_broken(cx.registry);
            return;
        }
        match self.router.as_mut().map(|r| {
            r.send(&router::Request::Hosts {
                nexthop: nexthop.to_string(),
            })
        }) {
            Some(Ok(id)) => {
                self.router_wait.insert(
                    id,
                    RouterWait::Hosts {
                        nexthop: nexthop.to_string(),
                    },
                );
            }
            _ => self.router_broken(cx.registry),
        }
    }

    fn agent_answer(&mut self, transport: &str, id: u64, resp: delivery::Response) {
        let now = now_ms();
        let wait = self.agent_wait.remove(&(transport.to_string(), id));
        if matches!(wait, Some(AgentWait::Close)) {
            return;
        }
        // An answer about a connection the scheduler has forgotten: what
        // it carried is back in the scheduler's queues already.
        let Some(conn) = self.conns.resolve(transport, resp.conn()) else {
            if let delivery::Response::Sent { results, .. } = &resp {
                if results.iter().any(|r| !r.status.is_transient()) {
                    msg_warn!(
                        "delivery agent {transport}: results for connection {} that was closed; the recipients will be tried again",
                        resp.conn()
                    );
                }
            }
            return;
        };
        let ev = match (wait, resp) {
            (Some(AgentWait::Open), delivery::Response::Opened { .. }) => {
                Event::ConnectionOpened { conn }
            }
            (
                Some(AgentWait::Open),
                delivery::Response::OpenFailed {
                    handshake, reason, ..
                },
            ) => Event::ConnectionFailed {
                conn,
                failure: if handshake {
                    ConnFailure::Handshake
                } else {
                    ConnFailure::Unreachable
                },
                // The scheduler's reasons are still "code text" strings.
                reason: reason.to_string(),
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
                self.owe_success(qid, &results, handoff);
                let mut out = Vec::new();
                for r in results {
                    self.logged.insert((qid, r.index));
                    let st = if r.status.is_success() {
                        RcptStatus::Delivered
                    } else if r.status.is_permanent() {
                        RcptStatus::Bounced(r.status.to_string())
                    } else {
                        RcptStatus::Deferred(r.status.to_string())
                    };
                    out.push((r.index, st));
                }
                // A recipient the agent did not report is deferred, never lost.
                for i in rcpts {
                    if !out.iter().any(|(x, _)| *x == i) {
                        out.push((
                            i,
                            RcptStatus::Deferred("4.3.0 no result from the delivery agent".into()),
                        ));
                    }
                }
                Event::DeliveryDone {
                    conn,
                    entry,
                    results: out,
                    conn_failed,
                }
            }
            (_, delivery::Response::Closed { .. }) => Event::ConnectionClosed { conn },
            (_, other) => {
                msg_warn!("delivery agent {transport}: unexpected answer {other:?}");
                return;
            }
        };
        if let Err(e) = self.conns.handle(&mut self.sched, now, ev) {
            msg_warn!("scheduler: {e:?}");
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
        let Some(a) = self.msgs.get(&qid) else { return };
        // One record per distinct reply, so each recipient's report quotes its own.
        let mut by_text: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for r in results {
            let wants = a
                .head
                .envelope
                .recipients
                .get(r.index as usize)
                .is_some_and(|x| x.notify.wants_success());
            if r.status.is_success() && wants {
                by_text
                    .entry(r.status.text.as_str())
                    .or_default()
                    .push(r.index);
            }
        }
        for (text, rcpts) in by_text {
            self.effects
                .push(Effect::Journal(Box::new(queue::Record::Succeeded {
                    id: a.id,
                    rcpts,
                    relayed: handoff == delivery::Handoff::Relayed,
                    reason: text.to_string(),
                })));
        }
    }

    fn agent_broken(&mut self, registry: &Registry, transport: &str) {
        if let Some(mut l) = self.agents.remove(transport) {
            l.deregister(registry);
        }
        self.agent_wait.retain(|(t, _), _| t != transport);
        // The agent's failure is not the destination's: no feedback. What
        // a connection had in flight is deferred (it may have gone), the
        // rest goes back to its queue.
        let now = now_ms();
        for conn in self.conns.of_transport(transport) {
            let ev = Event::ConnectionLost {
                conn,
                reason: format!("4.3.0 delivery agent {transport} died"),
            };
            let _ = self.conns.handle(&mut self.sched, now, ev);
        }
    }

    fn agent(&mut self, cx: &mut Cx<'_>, transport: &str) -> Option<&mut Link<Delivery>> {
        if !self.agents.contains_key(transport) {
            let path = self.queue_root.join("private").join(transport);
            let t = cx.token();
            match Link::<Delivery>::connect(&path, cx.registry, t) {
                Ok(l) => {
                    self.agents.insert(transport.to_string(), l);
                }
                Err(e) => {
                    msg_warn!("connect to delivery agent {}: {e}", path.display());
                    return None;
                }
            }
        }
        self.agents.get_mut(transport)
    }

    /// Runs due scheduler timers.
    pub fn timeout(&mut self, cx: &mut Cx<'_>) {
        self.sched.handle_timeout(now_ms());
        self.run_actions(cx);
    }

    /// Carries out what the scheduler decided.
    pub fn run_actions(&mut self, cx: &mut Cx<'_>) {
        while let Some(a) = self.sched.poll_action() {
            match a {
                Action::ReadRecipients { queue_id, max } => {
                    let qid = queue_id.0;
                    let Some(m) = self.msgs.get_mut(&qid) else {
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
                    let ev = Event::RecipientsRead {
                        queue_id,
                        groups,
                        remaining,
                    };
                    if let Err(e) = self.sched.handle(now_ms(), ev) {
                        msg_warn!("scheduler: {e:?}");
                    }
                }
                Action::Open {
                    conn,
                    transport,
                    destination,
                    host,
                } => {
                    let tname = self.sched.transport_name(transport).to_string();
                    let nexthop = self.sched.nexthop(destination).unwrap_or("").to_string();
                    let hname = self.sched.host_name(host).to_string();
                    let addrs = self
                        .hosts
                        .get(&nexthop)
                        .and_then(|h| h.addrs.get(&hname))
                        .cloned()
                        .unwrap_or_default();
                    let wire = self.conns.open(conn, &tname);
                    let sent = self.agent(cx, &tname).map(|l| {
                        l.send(&delivery::Request::Open {
                            conn: wire,
                            host: hname.clone(),
                            nexthop: nexthop.clone(),
                            addrs,
                        })
                    });
                    match sent {
                        Some(Ok(id)) => {
                            self.agent_wait.insert((tname, id), AgentWait::Open);
                        }
                        other => {
                            // The agent's failure, not the destination's.
                            let _ = self.conns.handle(
                                &mut self.sched,
                                now_ms(),
                                Event::ConnectionLost {
                                    conn,
                                    reason: format!("4.3.0 delivery agent {tname} is unavailable"),
                                },
                            );
                            if matches!(other, Some(Err(_))) {
                                // A dead link: drop it (and fail what waits on
                                // it) so the next use connects afresh.
                                self.agent_broken(cx.registry, &tname);
                            }
                        }
                    }
                }
                Action::Start {
                    conn,
                    entry,
                    queue_id,
                    recipients,
                } => {
                    let qid = queue_id.0;
                    let Some(Wire {
                        transport: tname,
                        id: wire,
                    }) = self.conns.wire(conn).cloned()
                    else {
                        continue;
                    };
                    let Some(m) = self.msgs.get(&qid) else {
                        continue;
                    };
                    let txn = transaction(m, &recipients, &self.queue_root);
                    let sent = self.agent(cx, &tname).map(|l| {
                        l.send(&delivery::Request::Send {
                            conn: wire,
                            txn: Box::new(txn),
                        })
                    });
                    match sent {
                        Some(Ok(id)) => {
                            self.agent_wait.insert(
                                (tname, id),
                                AgentWait::Send {
                                    entry,
                                    qid,
                                    rcpts: recipients,
                                },
                            );
                        }
                        other => {
                            let _ = self.conns.handle(
                                &mut self.sched,
                                now_ms(),
                                Event::ConnectionLost {
                                    conn,
                                    reason: format!("4.3.0 delivery agent {tname} is unavailable"),
                                },
                            );
                            if matches!(other, Some(Err(_))) {
                                self.agent_broken(cx.registry, &tname);
                            }
                        }
                    }
                }
                Action::Close { conn } => {
                    if let Some(Wire {
                        transport: tname,
                        id: wire,
                    }) = self.conns.forget(conn)
                    {
                        if let Some(Ok(id)) = self
                            .agents
                            .get_mut(&tname)
                            .map(|l| l.send(&delivery::Request::Close { conn: wire }))
                        {
                            self.agent_wait.insert((tname, id), AgentWait::Close);
                        }
                    }
                }
                Action::Defer {
                    queue_id,
                    recipients,
                    reason,
                    next_attempt: _,
                } => {
                    let qid = queue_id.0;
                    if let Some(m) = self.msgs.get(&qid) {
                        let (status, text) = split_status(&reason, "4.4.1");
                        for i in recipients {
                            if !self.logged.remove(&(qid, i)) {
                                log_rcpt(m, i, "none", &status, "deferred", &text);
                            }
                        }
                    }
                }
                Action::Bounce {
                    queue_id,
                    recipients,
                    reason,
                } => {
                    let qid = queue_id.0;
                    if let Some(m) = self.msgs.get(&qid) {
                        let (status, text) = split_status(&reason, "5.4.1");
                        for i in recipients {
                            if !self.logged.remove(&(qid, i)) {
                                log_rcpt(m, i, "none", &status, "bounced", &text);
                            }
                        }
                    }
                }
                Action::Journal(rec) => {
                    let Some(m) = self.msgs.get(&journal_qid(&rec)) else {
                        continue;
                    };
                    let id = m.id;
                    match &rec {
                        // A record is one entry's, so one destination's:
                        // one figure update per destination, not per recipient.
                        sched::Record::Delivered { recipients, .. } => {
                            let now = now_ms().0 / 1000;
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
                            reason,
                            next_attempt,
                            ..
                        } => {
                            let (status, text) = split_status(&reason, "4.4.1");
                            queue::Record::Deferred {
                                id,
                                rcpts: recipients,
                                status: status.parse().unwrap_or_else(|_| {
                                    mail::StatusCode::new(4, 4, 1).expect("valid")
                                }),
                                reason: text,
                                next_attempt: next_attempt.0.div_ceil(1000),
                            }
                        }
                        sched::Record::Bounced {
                            recipients, reason, ..
                        } => {
                            let (status, text) = split_status(&reason, "5.4.1");
                            queue::Record::Bounced {
                                id,
                                rcpts: recipients,
                                status: status.parse().unwrap_or_else(|_| {
                                    mail::StatusCode::new(5, 4, 1).expect("valid")
                                }),
                                reason: text,
                            }
                        }
                    };
                    self.effects.push(Effect::Journal(Box::new(r)));
                }
                Action::MessageDone {
                    queue_id,
                    next_attempt,
                } => {
                    self.finish(queue_id.0, next_attempt.map(|t| t.0.div_ceil(1000)));
                }
                Action::Notice(n) => self.notice(n),
            }
        }
    }

    fn notice(&self, n: sched::Notice) {
        match n {
            sched::Notice::DestinationDead {
                destination,
                retry_at,
            } => {
                let nexthop = self.sched.nexthop(destination).unwrap_or("?");
                let secs = retry_at.0.saturating_sub(now_ms().0) / 1000;
                msg_warn!(
                    "destination {nexthop} is not responding: deliveries suspended for {secs}s"
                );
            }
            sched::Notice::DestinationRevived { destination } => {
                msg_info!(
                    "destination {} is responding again",
                    self.sched.nexthop(destination).unwrap_or("?")
                );
            }
            sched::Notice::DestinationRetry {
                destination,
                window,
            } => {
                msg_info!(
                    "destination {}: trying again with concurrency {window}",
                    self.sched.nexthop(destination).unwrap_or("?")
                );
            }
            sched::Notice::Window {
                destination,
                from,
                to,
            } => {
                msg_info!(
                    "destination {}: concurrency window {from} -> {to}",
                    self.sched.nexthop(destination).unwrap_or("?")
                );
            }
            sched::Notice::HostRetry { .. } => {}
        }
    }
}

fn journal_qid(r: &sched::Record) -> u64 {
    match r {
        sched::Record::Delivered { queue_id, .. }
        | sched::Record::Deferred { queue_id, .. }
        | sched::Record::Bounced { queue_id, .. } => queue_id.0,
    }
}

fn hosts_of(list: &router::HostList, now: Time) -> Hosts {
    let mut levels: Vec<(u16, Vec<String>)> = Vec::new();
    let mut addrs = HashMap::new();
    for h in &list.hosts {
        if h.addrs.is_empty() {
            continue;
        }
        // Port 0 from the router means "the service's own": SMTP.
        let port = if h.port == 0 { 25 } else { h.port };
        addrs.insert(
            h.name.clone(),
            h.addrs
                .iter()
                .map(|ip| SocketAddr::new(*ip, port))
                .collect(),
        );
        match levels.iter_mut().find(|(p, _)| *p == h.preference) {
            Some((_, v)) => v.push(h.name.clone()),
            None => levels.push((h.preference, vec![h.name.clone()])),
        }
    }
    levels.sort_by_key(|(p, _)| *p);
    Hosts {
        expires: Time(now.0 + u64::from(list.ttl.max(60)) * 1000),
        levels: levels.into_iter().map(|(_, v)| v).collect(),
        addrs,
    }
}

fn transaction(m: &Active, recipients: &[u32], root: &std::path::Path) -> delivery::Transaction {
    let env = &m.head.envelope;
    let data = match &m.head.data {
        DataRef::Inline(b) => delivery::Data::Inline(b.clone()),
        DataRef::File => delivery::Data::File(format!("msg/{:02X}/{}", m.id.hash_byte(), m.id)),
        DataRef::Pool(n) => delivery::Data::File(format!("pool/{n:08}")),
    };
    let _ = root;
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
fn by_route<'a>(m: &'a Active, recipients: &[u32]) -> BTreeMap<(&'a str, &'a str), u64> {
    let mut out = BTreeMap::new();
    for i in recipients {
        if let Some(r) = m.routes.get(i) {
            *out.entry((r.transport.as_str(), r.nexthop.as_str()))
                .or_default() += 1;
        }
    }
    out
}

/// Splits "4.4.1 text" into the status code and the text, with a default code.
fn split_status(reason: &str, default: &str) -> (String, String) {
    let mut it = reason.splitn(2, ' ');
    let first = it.next().unwrap_or("");
    let looks = first.split('.').count() == 3
        && first
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if looks {
        (first.to_string(), it.next().unwrap_or("").to_string())
    } else {
        (default.to_string(), reason.to_string())
    }
}

fn log_rcpt(m: &Active, i: u32, relay: &str, status: &str, word: &str, text: &str) {
    use mail::logline::{Delays, DeliveryLine, Disposition};
    let rcpt = m.head.envelope.recipients.get(i as usize);
    let to = rcpt.map(|r| r.address.as_str()).unwrap_or("");
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    let age = now_us.saturating_sub(m.head.envelope.arrival.as_micros());
    let zero = std::time::Duration::ZERO;
    let (disposition, class) = match word {
        "bounced" => (Disposition::Bounced, 500),
        "sent" => (Disposition::Sent, 200),
        _ => (Disposition::Deferred, 400),
    };
    let code = status
        .parse()
        .unwrap_or_else(|_| mail::StatusCode::of_reply(class));
    let status = mail::Status::new(code, text);
    let line = DeliveryLine {
        queue_id: &m.id.to_string(),
        to,
        orig_to: mail::orig_to(to, rcpt.and_then(|r| r.orcpt.as_deref())),
        relay,
        conn_use: 0,
        delays: Delays::of_age(std::time::Duration::from_micros(age), zero, zero, zero),
        resolution: mail::logline::DEFAULT_RESOLUTION,
        status: &status,
        disposition,
    };
    msg_info!("{line}");
}
