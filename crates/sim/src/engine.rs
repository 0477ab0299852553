//! The discrete-event simulator: a virtual clock driving the queue manager
//! (`queue_manager::QueueManager`, the code qmgr runs, with the scheduler
//! inside it) against modelled remote servers.
//!
//! Servers have a per-transaction and per-recipient service time, a greeting
//! delay, an optional session limit with a listen(2) queue behind it
//! (queued connections are greeted when a session frees, or time out in the
//! greeting), and beyond the queue a 421, a dropped connect (connect
//! timeout) or no greeting at all,
//! per-recipient 4xx/5xx probabilities, can be dead, and can be load
//! balancers over K backends of which some fail the handshake. The engine
//! journals arrivals in a `MemStore` and tells the queue manager, which
//! admits them in turn by sender under `qmgr_message_active_limit`,
//! resolves them (the engine answers as the router, from the destinations),
//! schedules and dispatches them; the engine answers as the delivery agent
//! (`Open`, `Send`, `Close`) and as cleanup (every notice is queued). The
//! queue manager retries deferred mail at its next attempt; a run without
//! retries holds each message at its first deferral and deletes it once it
//! has left delivery (its deferred recipients are final for the run). The engine records what the
//! scenarios report: latencies per message group, deferrals, concurrency over
//! time for one destination, connections per host, dead-destination
//! notices, invariant violations and a hash of the action trace (the
//! determinism check). Everything random comes from one seeded generator.
//! Panics: never on the queue manager's output; its warnings are recorded.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ipc::{cleanup, delivery, router};
use mail::{Envelope, QueueId, Recipient, Status, StatusCode, Timestamp};
use queue::{DataRef, MessageHead, Record, Replay};
use queue_manager::{Action, Event, Level, MemStore, QueueManager, Settings, Store};
use sched::rng::Rng;
use sched::{Policy, SchedConfig, SchedError, Scheduler, Time};

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
    /// Between these times every recipient gets this 4xx reply (e.g. a
    /// provider's `421 4.7.0 [TS04]`), as the server's own words.
    pub defer_window: Option<(Time, Time, String)>,
    /// Transactions under way when the run starts (a replay of a live
    /// queue), by the time each has left: the first sessions opened take
    /// them up, greeted at once, their first transaction lasting that long.
    pub under_way: Vec<Duration>,
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
            defer_window: None,
            under_way: Vec::new(),
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

/// What a message brings from before the run, when the run replays a live
/// queue (`sluice sim`).
#[derive(Clone, Debug, Default)]
pub struct Prior {
    /// How long it had waited already: added to its delay.
    pub age: Duration,
    /// Its tenant (a scheduler class key).
    pub tenant: Option<String>,
    /// Its job (a shaping field).
    pub job: Option<String>,
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
    /// Record every transaction's start and every connection's opening and
    /// end by host ([`Report::sends`], [`Report::conn_events`]).
    pub record: bool,
    /// Per message index, what it brings from before the run (missing:
    /// nothing; it is new).
    pub prior: Vec<Prior>,
    /// Address verification queries: (time, destination index), each for
    /// a new address of that destination, answered by probes there.
    pub probes: Vec<(Time, u32)>,
    /// The verification cache's and the probes' limits.
    pub verify: queue_manager::VerifySettings,
    /// Per destination index, the domain of its recipients' addresses when
    /// not its nexthop (a replay: several domains relayed to one next hop);
    /// missing or empty: the nexthop.
    pub domains: Vec<String>,
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
            record: false,
            prior: Vec::new(),
            probes: Vec::new(),
            verify: queue_manager::VerifySettings::default(),
            domains: Vec::new(),
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
    /// With `record`: (time, host) of every transaction started.
    pub sends: Vec<(Time, String)>,
    /// With `record`: (time, host, +1 opened / -1 ended) of every connection.
    pub conn_events: Vec<(Time, String, i8)>,
    /// Messages left (queued, or still to arrive) over time: about a
    /// thousand points, for plots.
    pub drain: Vec<(Time, u64)>,
    /// Times a destination waited for a rate or a shaping policy's limit.
    pub limited: u64,
    /// Verification probes sent to servers (recipients of probe transactions).
    pub probe_rcpts: u64,
    /// The most probe recipients with servers at once.
    pub probe_inflight_max: u64,
    /// Verification queries answered with a result (not "in progress").
    pub verify_known: u64,
    /// The most addresses the verification cache held.
    pub verify_cache_max: u64,
    /// The most probes waiting or under way.
    pub verify_pending_max: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive(u32),
    /// Verification query `i` of [`SimConfig::probes`].
    Verify(u32),
    /// The agent's connection (wire id) is up; the request that opened it.
    Opened(u64, u64),
    /// It could not be set up: unreachable (true) or refused.
    Failed(u64, u64, bool),
    /// A transaction's results: connection, request, (recipient, 0/1/2).
    TxnDone(u64, u64, Vec<(u32, u8)>),
    /// Greeting timeout of a queued connection; the number tells incarnations
    /// apart.
    GreetTimeout(u64, u64, u64),
}

struct ConnState {
    host: String,
    /// The request that opened it.
    open_req: u64,
    session: bool,
    waiting: bool,
    tracked: bool,
    incarnation: u64,
    /// The time left of a transaction under way at the start, which this
    /// session's first transaction takes.
    resumes: Option<Duration>,
}

/// One simulation run.
pub struct Sim {
    /// The queue manager under test, the scheduler inside it.
    pub qm: QueueManager<MemStore>,
    cfg: SimConfig,
    dests: Vec<SimDest>,
    /// Destination of each next hop.
    by_nexthop: HashMap<String, usize>,
    /// Destination of each recipient domain given in `SimConfig::domains`.
    by_domain: HashMap<String, usize>,
    servers: BTreeMap<String, ServerModel>,
    msgs: Vec<SimMessage>,
    /// Message index of each queue id.
    index: HashMap<QueueId, u32>,
    /// Messages arrived and not yet removed.
    live: BTreeSet<QueueId>,
    /// Recipients delivered or bounced, per message.
    settled: HashMap<QueueId, u32>,
    /// Messages with recipients deferred since the last look.
    deferred_now: BTreeSet<QueueId>,
    /// Messages put on hold in a run without retries.
    held: BTreeSet<QueueId>,
    /// Journal records read so far.
    seen: usize,
    queue: BinaryHeap<Reverse<(Time, u64, Ev)>>,
    seq: u64,
    now: Time,
    rng: Rng,
    conns: BTreeMap<u64, ConnState>,
    /// The transport of each agent request not yet answered.
    requests: HashMap<u64, String>,
    sessions: BTreeMap<String, u32>,
    listen_q: BTreeMap<String, VecDeque<u64>>,
    future_msgs: u64,
    tracked_now: u32,
    tracked_since: Time,
    integral: (f64, f64, f64),
    /// The server's words for a transaction it defers, by connection.
    deferrals: HashMap<u64, mail::RemoteReply>,
    /// Arrivals and removals so far (every `stride`-th is a drain point).
    changes: u64,
    /// Verification queries still to come.
    future_probes: u64,
    /// Probe recipients of each probe transaction with a server, by request.
    probing: HashMap<u64, u64>,
    /// Transactions under way at the start taken up so far, by host.
    resumed: HashMap<String, usize>,
    /// Their sum.
    inflight_probes: u64,
    /// The measurements.
    pub report: Report,
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

/// The queue id of message `i`, arrived at `at`.
fn queue_id(at: Time, i: u32) -> QueueId {
    QueueId::from_parts(at.0 * 1000, 1 + i / 0x8_0000, i % 0x8_0000).expect("in range")
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
        let settings = Settings {
            transports: cfg
                .sched
                .transports
                .iter()
                .map(|t| t.name.clone())
                .collect(),
            active_limit: cfg.sched.qmgr_message_active_limit as usize,
            lifetime: cfg.sched.maximal_queue_lifetime,
            admission_by_sender: cfg.fair_admission,
            verify: cfg.verify.clone(),
            ..Settings::default()
        };
        let qm = QueueManager::with_scheduler(
            Time::ZERO,
            settings,
            sched,
            MemStore::default(),
            Replay::default(),
        );
        let by_nexthop = dests
            .iter()
            .enumerate()
            .map(|(i, d)| (d.nexthop.clone(), i))
            .collect();
        let by_domain = cfg
            .domains
            .iter()
            .enumerate()
            .filter(|(_, d)| !d.is_empty())
            .map(|(i, d)| (d.clone(), i))
            .collect();
        let mut sim = Sim {
            qm,
            rng: Rng::new(cfg.seed),
            cfg,
            dests,
            by_nexthop,
            by_domain,
            servers,
            msgs,
            index: HashMap::new(),
            live: BTreeSet::new(),
            settled: HashMap::new(),
            deferred_now: BTreeSet::new(),
            held: BTreeSet::new(),
            seen: 0,
            queue: BinaryHeap::new(),
            seq: 0,
            now: Time::ZERO,
            conns: BTreeMap::new(),
            requests: HashMap::new(),
            sessions: BTreeMap::new(),
            listen_q: BTreeMap::new(),
            future_msgs: 0,
            tracked_now: 0,
            tracked_since: Time::ZERO,
            integral: (0.0, 0.0, 0.0),
            deferrals: HashMap::new(),
            changes: 0,
            future_probes: 0,
            probing: HashMap::new(),
            resumed: HashMap::new(),
            inflight_probes: 0,
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
        for i in 0..sim.cfg.probes.len() {
            let at = sim.cfg.probes[i].0;
            sim.future_probes += 1;
            sim.push(at, Ev::Verify(i as u32));
        }
        Ok(sim)
    }

    fn push(&mut self, at: Time, ev: Ev) {
        if matches!(ev, Ev::Arrive(_)) {
            self.future_msgs += 1;
        }
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, ev)));
    }

    fn model(&self, host: &str) -> ServerModel {
        self.servers.get(host).cloned().unwrap_or_default()
    }

    fn handle(&mut self, ev: Event) {
        self.qm.handle(self.now, ev);
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
            if self.live.is_empty()
                && self.future_msgs == 0
                && self.future_probes == 0
                && !self.qm.probing()
                && (next_ev.is_none() || self.conns.is_empty())
            {
                break;
            }
            let next_to = self.qm.poll_timeout().map(|t| t.max(self.now));
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
                self.qm.handle_timeout(next);
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
        r.decisions = self.qm.scheduler().stats().decisions;
        r.limited = self.qm.scheduler().stats().limited;
        let left = self.live.len() as u64 + self.future_msgs;
        r.drain.push((self.now, left));
        for id in &self.live {
            let i = self.index[id] as usize;
            let settled = self.settled.get(id).copied().unwrap_or(0);
            r.unfinished += (self.msgs[i].rcpts.len() as u64).saturating_sub(u64::from(settled));
        }
        self.report
    }

    /// Counts an arrival or a removal, keeping a drain point now and then.
    fn changed(&mut self) {
        let stride = (self.msgs.len() as u64 / 500).max(1);
        if self.changes.is_multiple_of(stride) {
            let left = self.live.len() as u64 + self.future_msgs;
            self.report.drain.push((self.now, left));
        }
        self.changes += 1;
    }

    /// Message `i` arrives: journaled, then committed.
    fn arrive(&mut self, i: u32) {
        let prior = self.cfg.prior.get(i as usize).cloned().unwrap_or_default();
        let m = &self.msgs[i as usize];
        let id = queue_id(m.at, i);
        let envelope = Envelope {
            sender: m.sender.clone(),
            recipients: m
                .rcpts
                .iter()
                .enumerate()
                .map(|(r, &d)| {
                    let domain = match self.cfg.domains.get(d as usize) {
                        Some(x) if !x.is_empty() => x.as_str(),
                        _ => self.dests.get(d as usize).map_or("", |x| &*x.nexthop),
                    };
                    Recipient::new(format!("m{i}r{r}@{domain}"))
                })
                .collect(),
            arrival: Timestamp::from_micros(
                m.at.0.saturating_sub(prior.age.as_millis() as u64) * 1000,
            ),
            size: m.size,
            tenant: prior.tenant,
            job: prior.job,
            ..Envelope::default()
        };
        let head = MessageHead {
            id,
            envelope,
            data: DataRef::Inline(Vec::new()),
        };
        let (store, state) = self.qm.parts_mut();
        if let Err(e) = store.append(&Record::Arrived(head), state) {
            self.report.errors.push(format!("{:?}: {e}", self.now));
            return;
        }
        self.index.insert(id, i);
        self.live.insert(id);
        self.changed();
        self.handle(Event::Committed { id, hold: false });
    }

    fn event(&mut self, ev: Ev) {
        if matches!(ev, Ev::Arrive(_)) {
            self.future_msgs -= 1;
        }
        match ev {
            Ev::Arrive(i) => self.arrive(i),
            Ev::Verify(i) => {
                self.future_probes -= 1;
                let d = self.cfg.probes[i as usize].1 as usize;
                let domain = self.dests.get(d).map_or("", |x| &*x.nexthop);
                let address = format!("v{i}@{domain}");
                self.handle(Event::Verify {
                    client: 0,
                    request: u64::from(i),
                    address,
                    wait_ms: 0,
                });
                let (cached, pending) = self.qm.verify_figures();
                let r = &mut self.report;
                r.verify_cache_max = r.verify_cache_max.max(cached as u64);
                r.verify_pending_max = r.verify_pending_max.max(pending as u64);
            }
            Ev::GreetTimeout(c, req, inc) => {
                if self
                    .conns
                    .get(&c)
                    .is_some_and(|cs| cs.waiting && cs.incarnation == inc)
                {
                    let cs = self.conns.remove(&c).expect("checked");
                    self.ended(&cs.host);
                    if let Some(q) = self.listen_q.get_mut(&cs.host) {
                        q.retain(|x| *x != c);
                    }
                    if cs.tracked {
                        self.track(-1);
                    }
                    self.report.conn_failures += 1;
                    self.answer(
                        req,
                        delivery::Response::OpenFailed {
                            conn: c,
                            failure: delivery::OpenFailure::Handshake,
                            reason: Status::new(StatusCode::known(4, 4, 2), "greeting timed out"),
                            remote: None,
                        },
                    );
                }
            }
            Ev::Opened(c, req) => {
                if self.conns.contains_key(&c) {
                    let relay = self.conns[&c].host.clone();
                    self.answer(req, delivery::Response::Opened { conn: c, relay });
                }
            }
            Ev::Failed(c, req, unreachable) => {
                if let Some(cs) = self.conns.remove(&c) {
                    self.ended(&cs.host);
                    if cs.tracked {
                        self.track(-1);
                    }
                    self.report.conn_failures += 1;
                    // Over its limit the server refuses at the greeting:
                    // a reply of its own, which the policy's rules see.
                    let remote = (!unreachable).then(|| mail::RemoteReply {
                        relay: format!("{}[192.0.2.1]", cs.host),
                        code: 421,
                        enhanced: None,
                        text: "too many connections".into(),
                    });
                    let reason = match &remote {
                        None => Status::new(StatusCode::known(4, 4, 1), "connect timed out"),
                        Some(r) => {
                            Status::new(StatusCode::known(4, 4, 2), r.reason(&mail::Said::Greeting))
                        }
                    };
                    self.answer(
                        req,
                        delivery::Response::OpenFailed {
                            conn: c,
                            failure: if unreachable {
                                delivery::OpenFailure::Unreachable
                            } else {
                                delivery::OpenFailure::Handshake
                            },
                            reason,
                            remote,
                        },
                    );
                }
            }
            Ev::TxnDone(c, req, codes) => {
                if let Some(n) = self.probing.remove(&req) {
                    self.inflight_probes -= n;
                }
                let window = self.deferrals.remove(&c);
                let relay = self
                    .conns
                    .get(&c)
                    .map_or_else(String::new, |cs| format!("{}[192.0.2.1]", cs.host));
                let results = codes
                    .into_iter()
                    .map(|(r, k)| {
                        let (code, text) = match k {
                            0 => (250, "ok"),
                            1 => (450, "try later"),
                            _ => (550, "no such user"),
                        };
                        let remote = match (k, &window) {
                            (3, Some(w)) => w.clone(),
                            _ => mail::RemoteReply {
                                relay: relay.clone(),
                                code,
                                enhanced: None,
                                text: text.into(),
                            },
                        };
                        let text = if remote.code < 300 {
                            remote.said()
                        } else {
                            remote.reason(&mail::Said::InReplyTo("RCPT TO".into()))
                        };
                        let code = remote.enhanced.unwrap_or(StatusCode::of_reply(remote.code));
                        delivery::RcptResult {
                            index: r,
                            status: Status::new(code, text),
                            remote: Some(remote),
                        }
                    })
                    .collect();
                self.answer(
                    req,
                    delivery::Response::Sent {
                        conn: c,
                        results,
                        conn_failed: false,
                        handoff: delivery::Handoff::Relayed,
                    },
                );
            }
        }
    }

    /// A connection to `host` ended (recorded with `record`).
    fn ended(&mut self, host: &str) {
        if self.cfg.record {
            self.report
                .conn_events
                .push((self.now, host.to_string(), -1));
        }
    }

    /// The agent answers request `req`.
    fn answer(&mut self, req: u64, response: delivery::Response) {
        let Some(transport) = self.requests.remove(&req) else {
            return;
        };
        self.handle(Event::AgentAnswer {
            transport,
            request: Some(req),
            response,
        });
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
            let req = cs.open_req;
            *self.sessions.entry(host.to_string()).or_default() += 1;
            self.push(self.now + m.greeting, Ev::Opened(c, req));
        }
    }
}

impl Sim {
    /// Carries out the queue manager's actions (answering at once as the
    /// router and as cleanup), reads what it journaled, and in a run without
    /// retries gives up messages with deferred recipients.
    fn drain(&mut self) {
        loop {
            while let Some(a) = self.qm.poll_action() {
                fnv(
                    &mut self.report.trace,
                    format!("{}{a:?}", self.now.0).as_bytes(),
                );
                self.action(a);
            }
            self.read_journal();
            if self.cfg.retry_deferred || !self.give_up_deferred() {
                break;
            }
        }
    }

    /// Counts the results journaled since the last look.
    fn read_journal(&mut self) {
        let recs: Vec<Record> = self.qm.store().records_since(self.seen).to_vec();
        self.seen += recs.len();
        for r in queue_manager::fresh_results(&recs) {
            match r {
                Record::Delivered { id, rcpts } => {
                    let n = rcpts.len() as u64;
                    self.report.delivered += n;
                    *self.settled.entry(*id).or_default() += n as u32;
                    if let Some(&i) = self.index.get(id) {
                        let tag = self.msgs[i as usize].tag;
                        let e = self
                            .report
                            .delivered_by_tag
                            .entry(tag)
                            .or_insert((0, Time::ZERO));
                        e.0 += n;
                        e.1 = self.now;
                    }
                }
                Record::Bounced { id, rcpts, .. } => {
                    self.report.bounced += rcpts.len() as u64;
                    *self.settled.entry(*id).or_default() += rcpts.len() as u32;
                }
                Record::Deferred { id, rcpts, .. } => {
                    self.report.deferred += rcpts.len() as u64;
                    self.deferred_now.insert(*id);
                }
                _ => {}
            }
        }
    }

    /// Without retries, deferred recipients are final: a message with some
    /// is put on hold at once (it is not tried again, even when its next
    /// attempt is already due as it leaves delivery) and deleted once it
    /// has left delivery. Whether anything was done.
    fn give_up_deferred(&mut self) -> bool {
        let (mut hold, mut gone) = (Vec::new(), Vec::new());
        let mut keep = BTreeSet::new();
        for id in std::mem::take(&mut self.deferred_now) {
            if !self.live.contains(&id) {
                continue;
            }
            if self.held.insert(id) {
                hold.push(id.to_string());
            }
            if self.qm.is_active(&id) {
                keep.insert(id);
            } else {
                gone.push(id.to_string());
            }
        }
        self.deferred_now = keep;
        let acted = !hold.is_empty() || !gone.is_empty();
        for (ids, delete) in [(hold, false), (gone, true)] {
            if ids.is_empty() {
                continue;
            }
            let sel = ipc::queuectl::Selector {
                ids,
                ..Default::default()
            };
            let body = if delete {
                ipc::queuectl::Request::Delete(sel)
            } else {
                ipc::queuectl::Request::Hold(sel)
            };
            self.handle(Event::Control {
                client: 0,
                request: 0,
                body,
            });
        }
        acted
    }

    fn action(&mut self, a: Action) {
        match a {
            Action::Log(Level::Warn, text) if text.contains("scheduler") => {
                self.report.errors.push(format!("{:?}: {text}", self.now));
            }
            Action::Log(..)
            | Action::Reply { .. }
            | Action::Answer { .. }
            | Action::DropCleanup
            | Action::SaveHolds { .. }
            | Action::SaveVerify { .. }
            | Action::HostRetry { .. } => {}
            Action::VerifyAnswer { response, .. } => {
                let ipc::verify::Response::Status { outcome, .. } = response;
                if outcome != ipc::verify::Outcome::Unknown {
                    self.report.verify_known += 1;
                }
            }
            Action::ToRouter { request, body } => {
                let response = self.route(body);
                self.handle(Event::RouterAnswer { request, response });
            }
            Action::ToCleanup { notice, .. } => self.handle(Event::CleanupAnswer {
                notice,
                response: cleanup::Response::Queued {
                    queue_id: "NOTICE".into(),
                },
            }),
            Action::DestinationDead { nexthop, retry_at } => {
                self.report.dead.push((self.now, nexthop, retry_at));
            }
            Action::RemoveData { id, .. } => {
                if self.live.remove(&id) {
                    self.changed();
                    if let Some(&i) = self.index.get(&id) {
                        let m = &self.msgs[i as usize];
                        let age = self
                            .cfg
                            .prior
                            .get(i as usize)
                            .map_or(Duration::ZERO, |p| p.age);
                        let delay = (self.now.since(m.at) + age).as_secs_f64();
                        self.report.latency.entry(m.tag).or_default().push(delay);
                    }
                }
            }
            Action::ToAgent {
                transport,
                request,
                body,
            } => {
                self.requests.insert(request, transport.clone());
                match body {
                    delivery::Request::Open {
                        conn,
                        host,
                        nexthop,
                        ..
                    } => self.open(&transport, conn, request, host, &nexthop),
                    delivery::Request::Send { conn, txn } => {
                        self.report.transactions += 1;
                        let Some(cs) = self.conns.get(&conn) else {
                            return;
                        };
                        let m = self.model(&cs.host);
                        if self.cfg.record {
                            self.report.sends.push((self.now, cs.host.clone()));
                        }
                        let deferring = m
                            .defer_window
                            .as_ref()
                            .filter(|(a, b, _)| (*a..*b).contains(&self.now))
                            .map(|(_, _, said)| {
                                // The server's own words, typed as the smtp agent reports them.
                                let relay = format!("{}[192.0.2.1]", cs.host);
                                mail::RemoteReply::parse(&relay, said).unwrap_or(
                                    mail::RemoteReply {
                                        relay,
                                        code: 421,
                                        enhanced: None,
                                        text: said.clone(),
                                    },
                                )
                            });
                        let n = txn.recipients.len() as u32;
                        let base = m.per_txn + m.per_rcpt * n;
                        let mut dur =
                            base.mul_f64(1.0 - m.jitter + 2.0 * m.jitter * self.rng.unit());
                        if let Some(left) = self.conns.get_mut(&conn).and_then(|c| c.resumes.take())
                        {
                            dur = left;
                        }
                        let codes = txn
                            .recipients
                            .iter()
                            .map(|r| {
                                let k = if deferring.is_some() {
                                    3
                                } else if self.rng.chance(m.p_bounce) {
                                    2
                                } else if self.rng.chance(m.p_defer) {
                                    1
                                } else {
                                    0
                                };
                                (r.index, k)
                            })
                            .collect();
                        if let Some(text) = deferring {
                            self.deferrals.insert(conn, text);
                        }
                        if txn.data == delivery::Data::Probe {
                            self.report.probe_rcpts += u64::from(n);
                            self.probing.insert(request, u64::from(n));
                            self.inflight_probes += u64::from(n);
                            self.report.probe_inflight_max =
                                self.report.probe_inflight_max.max(self.inflight_probes);
                        }
                        self.push(self.now + dur, Ev::TxnDone(conn, request, codes));
                    }
                    delivery::Request::Close { conn } => {
                        if let Some(cs) = self.conns.remove(&conn) {
                            self.ended(&cs.host);
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
                        let reason = None;
                        self.answer(request, delivery::Response::Closed { conn, reason });
                    }
                }
            }
        }
    }

    /// The router's answer, from the destinations.
    fn route(&self, body: router::Request) -> router::Response {
        match body {
            router::Request::ResolveQueued { address, .. }
            | router::Request::Resolve { address, .. } => {
                let d = address
                    .rsplit_once('@')
                    .and_then(|(_, d)| self.by_domain.get(d).or(self.by_nexthop.get(d)))
                    .and_then(|&d| self.dests.get(d));
                let Some(d) = d else {
                    return router::Response::Failed {
                        status: mail::Status::new(
                            mail::StatusCode::known(5, 1, 2),
                            format!("no destination for {address}"),
                        ),
                    };
                };
                router::Response::Resolved {
                    class: router::Class::Relay,
                    routes: vec![router::Route {
                        address,
                        transport: d.transport.clone(),
                        nexthop: d.nexthop.clone(),
                        error: None,
                        class: router::Class::Relay,
                        unknown: false,
                        by_table: false,
                    }],
                }
            }
            router::Request::Hosts { nexthop } => {
                let Some(d) = self.by_nexthop.get(&nexthop).map(|&i| &self.dests[i]) else {
                    return router::Response::Failed {
                        status: mail::Status::new(
                            mail::StatusCode::known(5, 4, 4),
                            format!("no hosts for {nexthop}"),
                        ),
                    };
                };
                let mut hosts = Vec::new();
                for (level, names) in d.hosts.iter().enumerate() {
                    for name in names {
                        hosts.push(router::Host {
                            name: name.clone(),
                            preference: level as u16 * 10,
                            port: 0,
                            // Addresses are not modelled: servers are by name.
                            addrs: vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))],
                            error: None,
                            dane: Default::default(),
                        });
                    }
                }
                router::Response::Hosts(router::HostList {
                    nexthop,
                    from_mx: true,
                    hosts,
                    // The world does not change: one answer per run.
                    ttl: u32::MAX / 1000,
                    authentic: false,
                })
            }
            other => router::Response::Failed {
                status: mail::Status::new(
                    mail::StatusCode::known(5, 3, 0),
                    format!("not modelled: {other:?}"),
                ),
            },
        }
    }

    /// The agent opens connection `conn` to `name` for `nexthop`.
    fn open(&mut self, transport: &str, conn: u64, req: u64, name: String, nexthop: &str) {
        *self.report.host_conns.entry(name.clone()).or_default() += 1;
        if self.cfg.record {
            self.report.conn_events.push((self.now, name.clone(), 1));
        }
        self.report.connections += 1;
        let s = self.qm.scheduler();
        let (busy, window) = s
            .destination(transport, nexthop)
            .map_or((0, 0), |d| (d.busy, d.window));
        let limit = self
            .cfg
            .sched
            .transports
            .iter()
            .find(|t| t.name == transport)
            .map_or(u32::MAX, |t| t.process_limit);
        if busy > window
            || s.connections() as u32 > limit.saturating_mul(self.cfg.sched.transports.len() as u32)
        {
            self.report.violations += 1;
        }
        let tracked = self.cfg.track.as_deref() == Some(nexthop);
        if tracked {
            self.report.window_max = self.report.window_max.max(window);
            self.track(1);
        }
        let m = self.model(&name);
        let active = self.sessions.get(&name).copied().unwrap_or(0);
        let mut session = false;
        let mut waiting = false;
        let mut resumes = None;
        let queued = self.listen_q.get(&name).map_or(0, VecDeque::len) as u32;
        let (at, ev) = if m.dead {
            (
                self.now + self.cfg.connect_timeout,
                Ev::Failed(conn, req, true),
            )
        } else if m.limit.is_some_and(|l| active >= l) && queued < m.listen_backlog {
            waiting = true;
            self.listen_q
                .entry(name.clone())
                .or_default()
                .push_back(conn);
            (
                self.now + self.cfg.greeting_timeout,
                Ev::GreetTimeout(conn, req, self.seq + 1),
            )
        } else if m.limit.is_some_and(|l| active >= l) {
            match m.over_limit {
                OverLimit::Reply421 => (
                    self.now + Duration::from_millis(50),
                    Ev::Failed(conn, req, false),
                ),
                OverLimit::DropConnect => (
                    self.now + self.cfg.connect_timeout,
                    Ev::Failed(conn, req, true),
                ),
                OverLimit::GreetingTimeout => (
                    self.now + self.cfg.greeting_timeout,
                    Ev::Failed(conn, req, false),
                ),
            }
        } else if m.bad_backends > 0
            && self.rng.below(u64::from(m.backends.max(1))) < u64::from(m.bad_backends)
        {
            (self.now + m.greeting, Ev::Failed(conn, req, false))
        } else {
            session = true;
            *self.sessions.entry(name.clone()).or_default() += 1;
            let taken = self.resumed.entry(name.clone()).or_default();
            resumes = m.under_way.get(*taken).copied();
            let g = if resumes.is_some() {
                *taken += 1;
                Duration::ZERO
            } else {
                m.greeting
                    .mul_f64(1.0 - m.jitter + 2.0 * m.jitter * self.rng.unit())
            };
            (self.now + g, Ev::Opened(conn, req))
        };
        self.conns.insert(
            conn,
            ConnState {
                host: name,
                open_req: req,
                session,
                waiting,
                tracked,
                incarnation: self.seq + 1,
                resumes,
            },
        );
        self.push(at, ev);
    }
}
