//! The discrete-event simulator: a virtual clock driving the scheduler
//! against modelled remote servers.
//!
//! Servers have a per-transaction and per-recipient service time, a greeting
//! delay, an optional session limit with a listen(2) queue behind it
//! (queued connections are greeted when a session frees, or time out in the
//! greeting), and beyond the queue a 421, a dropped connect (connect
//! timeout) or no greeting at all,
//! per-recipient 4xx/5xx probabilities, can be dead, and can be load
//! balancers over K backends of which some fail the handshake. The engine
//! feeds arrivals (holding them back while `qmgr_message_active_limit` is
//! reached), answers `ReadRecipients`, `Open`, `Start` and `Close`, retries
//! deferred mail at its next attempt when asked to, and records what the
//! scenarios report: latencies per message group, deferrals, concurrency over
//! time for one destination, connections per host, dead-destination
//! notices, invariant violations and a hash of the action trace (the
//! determinism check). Everything random comes from one seeded generator.
//! Panics: never on scheduler output; scheduler errors are recorded.

use crate::admission::Admission;
use crate::event::{
    Action, ConnFailure, Event, NewMessage, Notice, QueueId, RcptStatus, RecipientGroup, Record,
};
use crate::ids::{ConnId, EntryId};
use crate::policy::Policy;
use crate::rng::Rng;
use crate::sched::{SchedError, Scheduler};
use crate::time::Time;
use crate::SchedConfig;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::Duration;

/// What an overloaded server does with one connection too many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverLimit {
    /// Answers 421 and disconnects at once (active limiter).
    Reply421,
    /// Its listen queue is full: the connect times out.
    DropConnect,
    /// Accepts but never greets: the greeting times out.
    GreetingTimeout,
}

/// A modelled remote SMTP server (or load balancer).
#[derive(Clone, Debug)]
pub struct ServerModel {
    /// Time per transaction (MAIL, DATA, end of data).
    pub per_txn: Duration,
    /// Time per recipient.
    pub per_rcpt: Duration,
    /// Connect plus greeting time.
    pub greeting: Duration,
    /// Concurrent sessions accepted.
    pub limit: Option<u32>,
    /// What happens above the limit.
    pub over_limit: OverLimit,
    /// Probability of 4xx per recipient.
    pub p_defer: f64,
    /// Probability of 5xx per recipient.
    pub p_bounce: f64,
    /// Unreachable: every connect times out.
    pub dead: bool,
    /// Backends behind a load balancer (1 = plain server).
    pub backends: u32,
    /// Backends that fail the handshake.
    pub bad_backends: u32,
    /// Service times vary uniformly by ± this fraction (lock-step completions are an artefact).
    pub jitter: f64,
    /// Connections the kernel accepts beyond `limit` and queues until a
    /// session frees (listen(2) backlog); they are greeted late or time out
    /// in the greeting. Beyond it, `over_limit` applies.
    pub listen_backlog: u32,
}

impl Default for ServerModel {
    fn default() -> Self {
        ServerModel {
            per_txn: Duration::from_millis(100),
            per_rcpt: Duration::from_millis(100),
            greeting: Duration::from_millis(200),
            limit: None,
            over_limit: OverLimit::Reply421,
            p_defer: 0.0,
            p_bounce: 0.0,
            dead: false,
            backends: 1,
            bad_backends: 0,
            jitter: 0.1,
            listen_backlog: 0,
        }
    }
}

/// A destination of the modelled world.
#[derive(Clone, Debug)]
pub struct SimDest {
    /// Transport name.
    pub transport: String,
    /// Nexthop.
    pub nexthop: String,
    /// Host names by MX level.
    pub hosts: Vec<Vec<String>>,
}

/// A message of the workload.
#[derive(Clone, Debug)]
pub struct SimMessage {
    /// Arrival time.
    pub at: Time,
    /// Sender.
    pub sender: String,
    /// Size in bytes.
    pub size: u64,
    /// Destination index of each recipient.
    pub rcpts: Vec<u32>,
    /// Report group.
    pub tag: u32,
}

/// Simulation settings.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Scheduler configuration.
    pub sched: SchedConfig,
    /// Seed of the world's randomness.
    pub seed: u64,
    /// Connect timeout (Postfix `smtp_connect_timeout`, 30s).
    pub connect_timeout: Duration,
    /// Greeting timeout (Postfix `smtp_helo_timeout`, 300s).
    pub greeting_timeout: Duration,
    /// Retry deferred mail at its next attempt.
    pub retry_deferred: bool,
    /// Stop at this time.
    pub end: Time,
    /// Destination whose concurrency is tracked.
    pub track: Option<String>,
    /// Messages held back by `qmgr_message_active_limit` are admitted in
    /// turn by sender, as qmgr does (false: FIFO).
    pub fair_admission: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            sched: SchedConfig::default(),
            seed: 1,
            connect_timeout: Duration::from_secs(30),
            greeting_timeout: Duration::from_secs(300),
            retry_deferred: false,
            end: Time::from_secs(86400 * 30),
            track: None,
            fair_admission: true,
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Recipients delivered.
    pub delivered: u64,
    /// Recipient deferrals.
    pub deferred: u64,
    /// Recipients bounced.
    pub bounced: u64,
    /// Recipients injected (first attempts).
    pub injected: u64,
    /// Deliveries that ended in a connection or handshake failure.
    pub conn_failures: u64,
    /// Connections opened.
    pub connections: u64,
    /// Transactions.
    pub transactions: u64,
    /// Time-weighted mean connections to the tracked destination.
    pub conc_avg: f64,
    /// Its standard deviation.
    pub conc_std: f64,
    /// Its maximum.
    pub conc_max: u32,
    /// Maximum window of the tracked destination.
    pub window_max: u32,
    /// Connections opened beyond the window or the process limit (must be 0).
    pub violations: u64,
    /// Scheduler errors (must be empty).
    pub errors: Vec<String>,
    /// Dead notices: (time, nexthop, retry_at).
    pub dead: Vec<(Time, String, Time)>,
    /// Message completion delays in seconds by group (all recipients final).
    pub latency: BTreeMap<u32, Vec<f64>>,
    /// Delivered recipients by group and time of the group's last delivery.
    pub delivered_by_tag: BTreeMap<u32, (u64, Time)>,
    /// Connections per host.
    pub host_conns: BTreeMap<String, u64>,
    /// Recipients not final at the end (delivered, bounced or, without retries, deferred).
    pub unfinished: u64,
    /// Time of the last event.
    pub end: Time,
    /// FNV-1a hash of the action trace.
    pub trace: u64,
    /// Scheduling decisions.
    pub decisions: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive(u32),
    Retry(u32),
    Opened(ConnId),
    Failed(ConnId, bool),
    TxnDone(ConnId, EntryId, Vec<(u32, u8)>),
    /// Greeting timeout of a queued connection; the number tells incarnations
    /// apart, as the scheduler reuses connection ids.
    GreetTimeout(ConnId, u64),
}

struct MsgState {
    unread: VecDeque<u32>,
    deferred: Vec<u32>,
    open: u32,
    attempts: u32,
}

struct ConnState {
    host: String,
    session: bool,
    waiting: bool,
    tracked: bool,
    incarnation: u64,
}

/// One simulation run.
pub struct Sim {
    /// The scheduler under test.
    pub sched: Scheduler,
    cfg: SimConfig,
    dests: Vec<SimDest>,
    servers: BTreeMap<String, ServerModel>,
    msgs: Vec<SimMessage>,
    state: BTreeMap<u32, MsgState>,
    /// Held back by the active limit: qmgr's admission, the same code.
    incoming: Admission<String, u32>,
    queue: BinaryHeap<Reverse<(Time, u64, Ev)>>,
    seq: u64,
    now: Time,
    rng: Rng,
    conns: BTreeMap<ConnId, ConnState>,
    sessions: BTreeMap<String, u32>,
    listen_q: BTreeMap<String, VecDeque<ConnId>>,
    future_msgs: u64,
    tracked_now: u32,
    tracked_since: Time,
    integral: (f64, f64, f64),
    /// The measurements.
    pub report: Report,
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

impl Sim {
    /// A run of `msgs` over `dests` served by `servers` (hosts without a model get the default).
    pub fn new(
        cfg: SimConfig,
        policy: Box<dyn Policy>,
        dests: Vec<SimDest>,
        servers: BTreeMap<String, ServerModel>,
        msgs: Vec<SimMessage>,
    ) -> Result<Self, SchedError> {
        let sched = Scheduler::with_policy(cfg.sched.clone(), policy)?;
        let mut sim = Sim {
            sched,
            rng: Rng::new(cfg.seed),
            cfg,
            dests,
            servers,
            msgs,
            state: BTreeMap::new(),
            incoming: Admission::default(),
            queue: BinaryHeap::new(),
            seq: 0,
            now: Time::ZERO,
            conns: BTreeMap::new(),
            sessions: BTreeMap::new(),
            listen_q: BTreeMap::new(),
            future_msgs: 0,
            tracked_now: 0,
            tracked_since: Time::ZERO,
            integral: (0.0, 0.0, 0.0),
            report: Report {
                trace: 0xcbf2_9ce4_8422_2325,
                ..Report::default()
            },
        };
        for i in 0..sim.msgs.len() {
            let at = sim.msgs[i].at;
            sim.report.injected += sim.msgs[i].rcpts.len() as u64;
            sim.push(at, Ev::Arrive(i as u32));
        }
        Ok(sim)
    }

    fn push(&mut self, at: Time, ev: Ev) {
        if matches!(ev, Ev::Arrive(_) | Ev::Retry(_)) {
            self.future_msgs += 1;
        }
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, ev)));
    }

    fn model(&self, host: &str) -> ServerModel {
        self.servers.get(host).cloned().unwrap_or_default()
    }

    fn handle(&mut self, ev: Event) {
        if let Err(e) = self.sched.handle(self.now, ev) {
            if e != SchedError::ActiveLimit {
                self.report.errors.push(format!("{:?}: {e}", self.now));
            }
        }
    }

    fn track(&mut self, delta: i32) {
        let dt = self.now.0.saturating_sub(self.tracked_since.0) as f64;
        let n = f64::from(self.tracked_now);
        self.integral.0 += dt;
        self.integral.1 += n * dt;
        self.integral.2 += n * n * dt;
        self.tracked_since = self.now;
        self.tracked_now = (self.tracked_now as i32 + delta).max(0) as u32;
        self.report.conc_max = self.report.conc_max.max(self.tracked_now);
    }

    /// Runs to the end and returns the report.
    pub fn run(mut self) -> Report {
        loop {
            self.drain();
            let next_ev = self.queue.peek().map(|Reverse((t, _, _))| *t);
            // Only timers left and no mail: the run is over (GC would tick forever).
            // Stale timers (a greeting timeout of a connection served since)
            // must not stretch the run either.
            if self.state.is_empty()
                && self.incoming.is_empty()
                && self.future_msgs == 0
                && (next_ev.is_none() || self.conns.is_empty())
            {
                break;
            }
            let next_to = self.sched.poll_timeout();
            let next = match (next_ev, next_to) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            if next > self.cfg.end {
                break;
            }
            self.now = next;
            if next_ev == Some(next) {
                let Reverse((_, _, ev)) = self.queue.pop().expect("peeked");
                self.event(ev);
            } else {
                self.sched.handle_timeout(next);
            }
        }
        self.track(0);
        let r = &mut self.report;
        if self.integral.0 > 0.0 {
            r.conc_avg = self.integral.1 / self.integral.0;
            r.conc_std = (self.integral.2 / self.integral.0 - r.conc_avg * r.conc_avg)
                .max(0.0)
                .sqrt();
        }
        r.end = self.now;
        r.decisions = self.sched.stats().decisions;
        r.unfinished += self
            .state
            .values()
            .map(|s| (s.unread.len() + s.deferred.len()) as u64 + u64::from(s.open))
            .sum::<u64>();
        r.unfinished += self
            .incoming
            .iter()
            .map(|&i| self.msgs[i as usize].rcpts.len() as u64)
            .sum::<u64>();
        self.report
    }

    fn add_message(&mut self, i: u32) {
        let st = &self.state[&i];
        let m = &self.msgs[i as usize];
        let nm = NewMessage {
            queue_id: QueueId(u64::from(i)),
            sender: m.sender.clone(),
            tenant: None,
            size: m.size,
            arrival: m.at,
            attempts: st.attempts,
            recipients: st.unread.len() as u32,
        };
        match self.sched.handle(self.now, Event::MessageAdded(nm)) {
            Ok(()) => {}
            Err(SchedError::ActiveLimit) => self.hold_back(i),
            Err(e) => self.report.errors.push(format!("{:?}: {e}", self.now)),
        }
    }

    fn admit(&mut self) {
        while !self.incoming.is_empty() {
            if self.sched.messages_in_memory() >= self.cfg.sched.qmgr_message_active_limit as usize
            {
                break;
            }
            if let Some(i) = self.incoming.pop() {
                self.add_message(i);
            }
        }
    }

    /// Queues message `i` for admission, in its sender's line (or one line for FIFO).
    fn hold_back(&mut self, i: u32) {
        let line = if self.cfg.fair_admission {
            self.msgs[i as usize].sender.clone()
        } else {
            String::new()
        };
        self.incoming.push(i, line);
    }

    fn event(&mut self, ev: Ev) {
        if matches!(ev, Ev::Arrive(_) | Ev::Retry(_)) {
            self.future_msgs -= 1;
        }
        match ev {
            Ev::Arrive(i) => {
                let n = self.msgs[i as usize].rcpts.len() as u32;
                self.state.insert(
                    i,
                    MsgState {
                        unread: (0..n).collect(),
                        deferred: Vec::new(),
                        open: n,
                        attempts: 0,
                    },
                );
                if self.incoming.is_empty() {
                    self.add_message(i);
                } else {
                    self.hold_back(i);
                }
            }
            Ev::Retry(i) => {
                if let Some(st) = self.state.get_mut(&i) {
                    st.unread = std::mem::take(&mut st.deferred).into();
                    st.attempts += 1;
                    if self.incoming.is_empty() {
                        self.add_message(i);
                    } else {
                        self.hold_back(i);
                    }
                }
            }
            Ev::GreetTimeout(c, inc) => {
                if self
                    .conns
                    .get(&c)
                    .is_some_and(|cs| cs.waiting && cs.incarnation == inc)
                {
                    let cs = self.conns.remove(&c).expect("checked");
                    if let Some(q) = self.listen_q.get_mut(&cs.host) {
                        q.retain(|x| *x != c);
                    }
                    if cs.tracked {
                        self.track(-1);
                    }
                    self.report.conn_failures += 1;
                    self.handle(Event::ConnectionFailed {
                        conn: c,
                        failure: ConnFailure::Handshake,
                        reason: "greeting timed out".into(),
                    });
                }
            }
            Ev::Opened(c) => {
                if self.conns.contains_key(&c) {
                    self.handle(Event::ConnectionOpened { conn: c });
                }
            }
            Ev::Failed(c, unreachable) => {
                if let Some(cs) = self.conns.remove(&c) {
                    if cs.tracked {
                        self.track(-1);
                    }
                    self.report.conn_failures += 1;
                    let failure = if unreachable {
                        ConnFailure::Unreachable
                    } else {
                        ConnFailure::Handshake
                    };
                    let reason = if unreachable {
                        "connect timed out"
                    } else {
                        "421 too many connections"
                    };
                    self.handle(Event::ConnectionFailed {
                        conn: c,
                        failure,
                        reason: reason.into(),
                    });
                }
            }
            Ev::TxnDone(c, e, codes) => {
                let results = codes
                    .into_iter()
                    .map(|(r, k)| {
                        let s = match k {
                            0 => RcptStatus::Delivered,
                            1 => RcptStatus::Deferred("450 try later".into()),
                            _ => RcptStatus::Bounced("550 no such user".into()),
                        };
                        (r, s)
                    })
                    .collect();
                self.handle(Event::DeliveryDone {
                    conn: c,
                    entry: e,
                    results,
                    conn_failed: false,
                });
            }
        }
        self.admit();
    }

    /// A session ended: connections waiting in the listen queue get it.
    fn serve_waiting(&mut self, host: &str) {
        let m = self.model(host);
        while self.sessions.get(host).copied().unwrap_or(0) < m.limit.unwrap_or(u32::MAX) {
            let Some(c) = self.listen_q.get_mut(host).and_then(VecDeque::pop_front) else {
                break;
            };
            let Some(cs) = self.conns.get_mut(&c) else {
                continue;
            };
            if !cs.waiting {
                continue;
            }
            cs.waiting = false;
            cs.session = true;
            *self.sessions.entry(host.to_string()).or_default() += 1;
            self.push(self.now + m.greeting, Ev::Opened(c));
        }
    }

    fn drain(&mut self) {
        while let Some(a) = self.sched.poll_action() {
            fnv(
                &mut self.report.trace,
                format!("{}{a:?}", self.now.0).as_bytes(),
            );
            self.action(a);
        }
    }

    fn final_rcpts(&mut self, q: QueueId, n: u32) {
        let i = q.0 as u32;
        let Some(st) = self.state.get_mut(&i) else {
            return;
        };
        if n == 0 {
            return;
        }
        st.open = st.open.saturating_sub(n);
        if st.open == 0 && st.unread.is_empty() {
            let m = &self.msgs[i as usize];
            let delay = self.now.since(m.at).as_secs_f64();
            self.report.latency.entry(m.tag).or_default().push(delay);
        }
    }

    fn action(&mut self, a: Action) {
        match a {
            Action::ReadRecipients { queue_id, max } => {
                let i = queue_id.0 as u32;
                let Some(st) = self.state.get_mut(&i) else {
                    return;
                };
                let mut by_dest: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
                for _ in 0..max {
                    let Some(r) = st.unread.pop_front() else {
                        break;
                    };
                    by_dest
                        .entry(self.msgs[i as usize].rcpts[r as usize])
                        .or_default()
                        .push(r);
                }
                let remaining = st.unread.len() as u32;
                let groups = by_dest
                    .into_iter()
                    .map(|(d, recipients)| {
                        let sd = &self.dests[d as usize];
                        RecipientGroup {
                            transport: sd.transport.clone(),
                            nexthop: sd.nexthop.clone(),
                            hosts: sd.hosts.clone(),
                            recipients,
                        }
                    })
                    .collect();
                self.handle(Event::RecipientsRead {
                    queue_id,
                    groups,
                    remaining,
                });
            }
            Action::Open {
                conn,
                transport,
                destination,
                host,
            } => {
                let name = self.sched.host_name(host).to_string();
                *self.report.host_conns.entry(name.clone()).or_default() += 1;
                self.report.connections += 1;
                let busy = self.sched.dest_busy(destination).unwrap_or(0);
                let window = self.sched.window(destination).unwrap_or(0);
                let tr = self.sched.transport_name(transport).to_string();
                let limit = self
                    .cfg
                    .sched
                    .transports
                    .iter()
                    .find(|t| t.name == tr)
                    .map_or(u32::MAX, |t| t.process_limit);
                if busy > window
                    || self.sched.connections() as u32
                        > limit * self.cfg.sched.transports.len() as u32
                {
                    self.report.violations += 1;
                }
                let tracked = self.cfg.track.as_deref() == self.sched.nexthop(destination);
                if tracked {
                    self.report.window_max = self.report.window_max.max(window);
                    self.track(1);
                }
                let m = self.model(&name);
                let active = self.sessions.get(&name).copied().unwrap_or(0);
                let mut session = false;
                let mut waiting = false;
                let queued = self.listen_q.get(&name).map_or(0, VecDeque::len) as u32;
                let (at, ev) = if m.dead {
                    (self.now + self.cfg.connect_timeout, Ev::Failed(conn, true))
                } else if m.limit.is_some_and(|l| active >= l) && queued < m.listen_backlog {
                    waiting = true;
                    self.listen_q
                        .entry(name.clone())
                        .or_default()
                        .push_back(conn);
                    (
                        self.now + self.cfg.greeting_timeout,
                        Ev::GreetTimeout(conn, self.seq + 1),
                    )
                } else if m.limit.is_some_and(|l| active >= l) {
                    match m.over_limit {
                        OverLimit::Reply421 => (
                            self.now + Duration::from_millis(50),
                            Ev::Failed(conn, false),
                        ),
                        OverLimit::DropConnect => {
                            (self.now + self.cfg.connect_timeout, Ev::Failed(conn, true))
                        }
                        OverLimit::GreetingTimeout => (
                            self.now + self.cfg.greeting_timeout,
                            Ev::Failed(conn, false),
                        ),
                    }
                } else if m.bad_backends > 0
                    && self.rng.below(u64::from(m.backends.max(1))) < u64::from(m.bad_backends)
                {
                    (self.now + m.greeting, Ev::Failed(conn, false))
                } else {
                    session = true;
                    *self.sessions.entry(name.clone()).or_default() += 1;
                    let g = m
                        .greeting
                        .mul_f64(1.0 - m.jitter + 2.0 * m.jitter * self.rng.unit());
                    (self.now + g, Ev::Opened(conn))
                };
                self.conns.insert(
                    conn,
                    ConnState {
                        host: name,
                        session,
                        waiting,
                        tracked,
                        incarnation: self.seq + 1,
                    },
                );
                self.push(at, ev);
            }
            Action::Start {
                conn,
                entry,
                recipients,
                ..
            } => {
                self.report.transactions += 1;
                let Some(cs) = self.conns.get(&conn) else {
                    return;
                };
                let m = self.model(&cs.host);
                let base = m.per_txn + m.per_rcpt * recipients.len() as u32;
                let dur = base.mul_f64(1.0 - m.jitter + 2.0 * m.jitter * self.rng.unit());
                let codes = recipients
                    .iter()
                    .map(|&r| {
                        let k = if self.rng.chance(m.p_bounce) {
                            2
                        } else if self.rng.chance(m.p_defer) {
                            1
                        } else {
                            0
                        };
                        (r, k)
                    })
                    .collect();
                self.push(self.now + dur, Ev::TxnDone(conn, entry, codes));
            }
            Action::Close { conn } => {
                if let Some(cs) = self.conns.remove(&conn) {
                    if cs.session {
                        if let Some(n) = self.sessions.get_mut(&cs.host) {
                            *n -= 1;
                        }
                        self.serve_waiting(&cs.host);
                    }
                    if cs.tracked {
                        self.track(-1);
                    }
                }
            }
            Action::Defer {
                queue_id,
                recipients,
                ..
            } => {
                self.report.deferred += recipients.len() as u64;
                if let Some(st) = self.state.get_mut(&(queue_id.0 as u32)) {
                    st.deferred.extend_from_slice(&recipients);
                }
            }
            Action::Bounce {
                queue_id,
                recipients,
                ..
            } => {
                self.report.bounced += recipients.len() as u64;
                self.final_rcpts(queue_id, recipients.len() as u32);
            }
            Action::Journal(Record::Delivered {
                queue_id,
                recipients,
            }) => {
                self.report.delivered += recipients.len() as u64;
                let tag = self.msgs[queue_id.0 as usize].tag;
                let e = self
                    .report
                    .delivered_by_tag
                    .entry(tag)
                    .or_insert((0, Time::ZERO));
                e.0 += recipients.len() as u64;
                e.1 = self.now;
                self.final_rcpts(queue_id, recipients.len() as u32);
            }
            Action::Journal(_) => {}
            Action::MessageDone {
                queue_id,
                next_attempt,
            } => {
                let i = queue_id.0 as u32;
                let Some(st) = self.state.get_mut(&i) else {
                    return;
                };
                match next_attempt {
                    Some(t) if self.cfg.retry_deferred && !st.deferred.is_empty() => {
                        self.push(t, Ev::Retry(i))
                    }
                    _ => {
                        // No retry in this run: deferred recipients are final for it.
                        let n = st.deferred.len() as u32;
                        st.deferred.clear();
                        self.final_rcpts(queue_id, n);
                        if self.state.get(&i).is_some_and(|s| s.open == 0) {
                            self.state.remove(&i);
                        }
                    }
                }
                if self
                    .state
                    .get(&i)
                    .is_some_and(|s| s.open == 0 && s.deferred.is_empty())
                {
                    self.state.remove(&i);
                }
            }
            Action::Notice(Notice::DestinationDead {
                destination,
                retry_at,
            }) => {
                let name = self.sched.nexthop(destination).unwrap_or("").to_string();
                self.report.dead.push((self.now, name, retry_at));
            }
            Action::Notice(_) => {}
        }
    }
}
