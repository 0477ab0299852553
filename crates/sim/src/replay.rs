//! A live queue replayed (`sluice sim`): the snapshot qmgr gives
//! (`ipc::queuectl::Snapshot`) turned into the engine's workload and
//! servers, run under a scheduler configuration, and summed up as a
//! [`Forecast`].
//!
//! The model, and what it assumes:
//! - Every queued message not on hold arrives at the start (deferred ones
//!   at their next attempt), carrying the time it had waited already;
//!   messages on hold are left out and counted. Extra arrivals
//!   ([`Arrival`]) come at their offsets, spread evenly, and reach the
//!   scheduler the measured median arrival-to-scheduler time later.
//! - A recipient qmgr has routed goes to its transport and nexthop, unless
//!   the configuration replayed sends its domain elsewhere ([`Routes`]);
//!   one it has not (deferred mail is routed afresh at its retry) goes
//!   where the configuration sends its domain, else where routed
//!   recipients of its domain go, else to its domain by smtp.
//! - Each destination is one server modelled from what the scheduler
//!   counted of it: transaction time (a line through the samples' times
//!   against their recipient counts; the spread as jitter), set-up time,
//!   4xx and 5xx per recipient as probabilities, a session limit at the
//!   concurrency it refused at, unreachable while it was dead. It starts
//!   at the window it had (at the limit replayed when the running limit
//!   held it), its transactions under way finishing what they had left. Destinations without samples get [`ServerModel::default`],
//!   and the forecast lists them with what was assumed.
//! - The holds in force at the snapshot stay until their end, under a
//!   configuration with a policy file; its static suspensions hold their
//!   mail throughout. Each [`Forecast`] notes what its configuration alone
//!   made the replay assume.
//!
//! Panics: never; a snapshot that names nothing usable gives an empty run.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use ipc::queuectl::{SnapDest, Snapshot};
use sched::{SchedConfig, ThreeClass, Time};

use crate::engine::{OverLimit, Prior, ServerModel, Sim, SimConfig, SimDest, SimMessage};

/// Runs per configuration, when the queue has at most [`RUNS_UP_TO`] recipients.
pub const RUNS: u64 = 5;
/// The largest queue (in recipients) run [`RUNS`] times rather than once.
pub const RUNS_UP_TO: u64 = 200_000;

/// Mail added to the replay: `count` messages from `sender` to
/// `recipient`, the first `at` after the snapshot, spread over `over`.
#[derive(Clone, Debug, PartialEq)]
pub struct Arrival {
    /// Messages.
    pub count: u32,
    /// Their sender.
    pub sender: String,
    /// Their one recipient.
    pub recipient: String,
    /// Offset of the first from the snapshot.
    pub at: Duration,
    /// Time over which they arrive.
    pub over: Duration,
}

impl Arrival {
    /// Parses `N,SENDER,RECIPIENT[,AT[,OVER]]` (times in seconds, fractions allowed).
    pub fn parse(text: &str) -> Result<Arrival, String> {
        let f: Vec<&str> = text.split(',').map(str::trim).collect();
        let bad = || format!("--add {text:?}: expected N,SENDER,RECIPIENT[,AT[,OVER]] (seconds)");
        if !(3..=5).contains(&f.len()) {
            return Err(bad());
        }
        let secs = |s: Option<&&str>| -> Result<Duration, String> {
            match s {
                None => Ok(Duration::ZERO),
                Some(s) => s
                    .trim_start_matches('+')
                    .trim_end_matches('s')
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0 && *x < 1e9)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(bad),
            }
        };
        // A replay holds every message in memory: a million is plenty.
        let count = f[0]
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=1_000_000).contains(n))
            .ok_or_else(bad)?;
        if !f[2].contains('@') {
            return Err(bad());
        }
        Ok(Arrival {
            count,
            sender: f[1].to_string(),
            recipient: f[2].to_string(),
            at: secs(f.get(3))?,
            over: secs(f.get(4))?,
        })
    }
}

/// The workload and world built from a snapshot, the same for every
/// configuration it is run under.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    msgs: Vec<SimMessage>,
    prior: Vec<crate::engine::Prior>,
    dests: Vec<SimDest>,
    servers: BTreeMap<String, ServerModel>,
    /// Senders by tag.
    pub senders: Vec<String>,
    /// Recipients per sender at the start (their class key's backlog).
    backlog: Vec<u64>,
    /// Where the run starts (the oldest message's age).
    t0: Time,
    /// Messages and recipients on hold, left out.
    pub held: (u64, u64),
    /// Messages and recipients replayed.
    pub queued: (u64, u64),
    /// What the model had to assume, one line each.
    pub assumptions: Vec<String>,
    /// Transports the workload uses, with recipients each.
    pub transports: BTreeMap<String, u64>,
    /// The recipient domain of each destination index's addresses.
    domains: Vec<String>,
    /// Windows at the snapshot by (transport, nexthop), live ones only.
    windows: Vec<((String, String), u32)>,
    /// The running configuration's destination concurrency limit per transport.
    limits: BTreeMap<String, u32>,
    /// Holds in force at the snapshot, their times in the run's clock.
    holds: Vec<shaping::Hold>,
    /// How long new mail takes from its arrival to the scheduler.
    pub pickup: Duration,
}

/// Where recipients go under the configuration a replay runs, beside the
/// routes qmgr gave them, by domain (the snapshot has no local parts).
#[derive(Clone, Debug, Default)]
pub struct Routes {
    /// Where a domain's recipients go when qmgr has not routed them yet:
    /// (transport, nexthop), the router's answer for the domain.
    pub unrouted: BTreeMap<String, (String, String)>,
    /// Domains the configuration routes elsewhere than qmgr did (a
    /// proposal's transport_maps or relayhost), with where.
    pub moved: BTreeMap<String, (String, String)>,
}

/// The median of some samples in ms.
fn median_ms(v: &[u32]) -> Option<Duration> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2)
        .map(|&ms| Duration::from_millis(u64::from(ms)))
}

/// A transaction time model from samples: (per transaction, per
/// recipient, jitter), or none without samples.
fn service_time(samples: &[(u32, u16)]) -> Option<(Duration, Duration, f64)> {
    if samples.is_empty() {
        return None;
    }
    let n = samples.len() as f64;
    let (mx, my) = samples.iter().fold((0.0, 0.0), |(x, y), (ms, r)| {
        (x + f64::from(*r) / n, y + f64::from(*ms) / n)
    });
    let sxx: f64 = samples
        .iter()
        .map(|(_, r)| (f64::from(*r) - mx).powi(2))
        .sum();
    let sxy: f64 = samples
        .iter()
        .map(|(ms, r)| (f64::from(*r) - mx) * (f64::from(*ms) - my))
        .sum();
    // With one recipient count only (or a negative slope) the time is all per transaction.
    let per_rcpt = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
    let mut base: Vec<f64> = samples
        .iter()
        .map(|(ms, r)| (f64::from(*ms) - per_rcpt * f64::from(*r)).max(0.0))
        .collect();
    base.sort_by(f64::total_cmp);
    let q = |p: f64| base[((base.len() - 1) as f64 * p).round() as usize];
    let med = q(0.5);
    let jitter = if med > 0.0 {
        ((q(0.9) - q(0.1)) / (2.0 * med)).clamp(0.0, 0.5)
    } else {
        0.0
    };
    Some((
        Duration::from_secs_f64(med / 1000.0),
        Duration::from_secs_f64(per_rcpt / 1000.0),
        jitter,
    ))
}

/// The server model of a destination from its counters, and whether it
/// had samples; `late` is how long after the snapshot's moment (its first
/// page) the destination's page was taken.
fn model(d: &SnapDest, late: Duration) -> (ServerModel, bool) {
    let mut m = ServerModel::default();
    let Some((per_txn, per_rcpt, jitter)) = service_time(&d.txn_ms) else {
        m.dead = d.dead_until_ms.is_some();
        return (m, false);
    };
    m.per_txn = per_txn;
    m.per_rcpt = per_rcpt;
    m.jitter = jitter;
    if !d.greeting_ms.is_empty() {
        let mut g = d.greeting_ms.clone();
        g.sort_unstable();
        m.greeting = Duration::from_millis(u64::from(g[g.len() / 2]));
    }
    let [ok, temp, perm, _] = d.replies.map(|x| x as f64);
    let all = ok + temp + perm;
    if all > 0.0 {
        m.p_defer = temp / all;
        m.p_bounce = perm / all;
    }
    // The transactions under way finish what they had left of a
    // one-recipient transaction's time (at least a millisecond). Their
    // ages are of the moment their page was taken, while delivery went
    // on: that much later than the run's start, they have that much more
    // left at it. (Uncorrected, 57 to 86 ms of a 145 ms transaction in
    // the test against real runs, tests/sluice_sim.rs: the forecast's
    // rounds came that much early, and a burst due just before one of
    // them missed it by a round.) One that started after the snapshot's
    // moment kept its connection busy until its end as well.
    let one = per_txn + per_rcpt;
    m.under_way = d
        .running_ms
        .iter()
        .map(|&age| {
            (one + late)
                .saturating_sub(Duration::from_millis(u64::from(age)))
                .max(Duration::from_millis(1))
        })
        .collect();
    if let Some(at) = d.refused_at {
        m.limit = Some(at.max(d.busy_ok).max(1));
        m.over_limit = OverLimit::Reply421;
    }
    m.dead = d.dead_until_ms.is_some();
    (m, true)
}

impl Replay {
    /// Builds the replay from the snapshot's pages and the extra arrivals,
    /// for the running configuration `running` (its limits say which
    /// windows were held at a limit; unrouted recipients of unknown
    /// domains go to its smtp transport) and the `routes` of the
    /// configuration it is to run under.
    pub fn new(
        pages: &[Snapshot],
        extra: &[Arrival],
        running: &SchedConfig,
        routes: &Routes,
    ) -> Replay {
        let mut r = Replay::default();
        let Some(first) = pages.first() else {
            return r;
        };
        let transport = running
            .transports
            .iter()
            .find(|t| t.name == "smtp")
            .or(running.transports.first())
            .map_or("smtp", |t| t.name.as_str());
        r.limits = running
            .transports
            .iter()
            .map(|t| (t.name.clone(), t.destination_concurrency_limit))
            .collect();
        let now = first.now_ms;
        let msgs: Vec<_> = pages.iter().flat_map(|p| &p.messages).collect();
        let oldest = msgs
            .iter()
            .map(|m| now.saturating_sub(m.arrival_ms))
            .max()
            .unwrap_or(0);
        r.t0 = Time(oldest);
        // Where the routed recipients of each domain go.
        let mut by_domain: HashMap<String, (String, String)> = HashMap::new();
        for rc in msgs.iter().flat_map(|m| &m.recipients) {
            if !rc.transport.is_empty() {
                by_domain
                    .entry(rc.domain.clone())
                    .or_insert_with(|| (rc.transport.clone(), rc.nexthop.clone()));
            }
        }
        let mut dest_ix: HashMap<(String, String, String), u32> = HashMap::new();
        let mut sender_ix: HashMap<String, u32> = HashMap::new();
        let mut unrouted = 0u64;
        let mut guessed = BTreeSet::new();
        let mut moved = BTreeMap::new();
        // Where a group of a domain's recipients goes.
        let mut route = |domain: &str, routed: Option<(&str, &str)>, n: u64| -> (String, String) {
            if let Some(to) = routes.moved.get(domain) {
                *moved.entry(domain.to_string()).or_insert(0u64) += n;
                return to.clone();
            }
            if let Some((t, h)) = routed {
                return (t.to_string(), h.to_string());
            }
            if let Some(to) = routes.unrouted.get(domain).or(by_domain.get(domain)) {
                return to.clone();
            }
            guessed.insert(domain.to_string());
            (transport.to_string(), domain.to_string())
        };
        let mut add = |r: &mut Replay,
                       at: Time,
                       age: Duration,
                       m: (&str, Option<String>, Option<String>, u64),
                       rcpts: Vec<((String, String), String, u32)>| {
            let (sender, tenant, job, size) = m;
            let tag = *sender_ix.entry(sender.to_string()).or_insert_with(|| {
                r.senders.push(sender.to_string());
                r.backlog.push(0);
                r.senders.len() as u32 - 1
            });
            let mut idx = Vec::new();
            for ((t, n), domain, count) in rcpts {
                *r.transports.entry(t.clone()).or_default() += u64::from(count);
                let key = (t, n, domain);
                let d = *dest_ix.entry(key.clone()).or_insert_with(|| {
                    let (t, n, domain) = key;
                    r.dests.push(SimDest {
                        transport: t,
                        nexthop: n.clone(),
                        hosts: vec![vec![n]],
                    });
                    r.domains.push(domain);
                    r.dests.len() as u32 - 1
                });
                idx.extend(std::iter::repeat_n(d, count as usize));
            }
            r.backlog[tag as usize] += idx.len() as u64;
            r.queued.0 += 1;
            r.queued.1 += idx.len() as u64;
            r.msgs.push(SimMessage {
                at,
                sender: sender.to_string(),
                size,
                rcpts: idx,
                tag,
            });
            r.prior.push(Prior { age, tenant, job });
        };
        for m in &msgs {
            if m.held {
                r.held.0 += 1;
                r.held.1 += m.recipients.iter().map(|x| u64::from(x.count)).sum::<u64>();
                continue;
            }
            if m.recipients.is_empty() {
                continue;
            }
            let wait = if m.next_attempt > 0 && !m.active {
                (m.next_attempt * 1000).saturating_sub(now)
            } else {
                0
            };
            let rcpts = m
                .recipients
                .iter()
                .map(|rc| {
                    let routed = (!rc.transport.is_empty())
                        .then_some((rc.transport.as_str(), rc.nexthop.as_str()));
                    if routed.is_none() {
                        unrouted += u64::from(rc.count);
                    }
                    let to = route(&rc.domain, routed, u64::from(rc.count));
                    (to, rc.domain.clone(), rc.count)
                })
                .collect();
            let at = Time(r.t0.0 + wait);
            let age = Duration::from_millis(now.saturating_sub(m.arrival_ms));
            let what = (m.sender.as_str(), m.tenant.clone(), m.job.clone(), m.size);
            add(&mut r, at, age, what, rcpts);
        }
        // New mail reaches the scheduler this long after it arrives, as
        // measured; its delay counts that time.
        r.pickup = median_ms(&first.pickup_ms).unwrap_or(Duration::ZERO);
        for a in extra {
            let d = domain(&a.recipient);
            let to = route(&d, None, u64::from(a.count));
            for k in 0..a.count {
                let off = a.at + a.over.mul_f64(f64::from(k) / f64::from(a.count));
                let (at, age) = (r.t0 + off + r.pickup, r.pickup);
                let what = (a.sender.as_str(), None, None, 1024);
                add(&mut r, at, age, what, vec![(to.clone(), d.clone(), 1)]);
            }
        }
        if !extra.is_empty() {
            r.assumptions.push(if first.pickup_ms.is_empty() {
                "no arrival-to-scheduler times were measured: --add mail is assumed scheduled as it arrives".to_string()
            } else {
                format!(
                    "--add mail reaches the scheduler {} ms after it arrives (median of the last {} messages' commit, pickup and routing)",
                    r.pickup.as_millis(),
                    first.pickup_ms.len()
                )
            });
        }
        if !moved.is_empty() {
            let names: BTreeSet<String> = moved
                .iter()
                .map(|(d, n)| {
                    let (t, h) = &routes.moved[d];
                    format!("{d} ({n}) to {t}:{h}")
                })
                .collect();
            r.assumptions.push(format!(
                "routed elsewhere by this configuration (judged by domain: transport_maps entries for single addresses are not seen): {}",
                list(&names)
            ));
        }
        if unrouted > 0 {
            r.assumptions.push(format!(
                "{unrouted} recipients not routed yet (deferred mail): sent where the configuration routes their domain"
            ));
        }
        if !guessed.is_empty() {
            r.assumptions.push(format!(
                "domains with no routed mail, assumed delivered by {transport} to their own MX: {}",
                list(&guessed)
            ));
        }
        // Servers from the counters; destinations without samples assumed.
        let seen: HashMap<(&str, &str), (&SnapDest, Duration)> = pages
            .iter()
            .flat_map(|p| {
                let late = Duration::from_millis(p.now_ms.saturating_sub(now));
                p.destinations.iter().map(move |d| (d, late))
            })
            .map(|(d, late)| ((d.transport.as_str(), d.nexthop.as_str()), (d, late)))
            .collect();
        let mut unknown = BTreeSet::new();
        let mut dead = BTreeSet::new();
        for d in &r.dests {
            let (m, sampled) = match seen.get(&(d.transport.as_str(), d.nexthop.as_str())) {
                Some(&(s, late)) => model(s, late),
                None => (ServerModel::default(), false),
            };
            if !sampled {
                unknown.insert(d.nexthop.clone());
            }
            if m.dead {
                dead.insert(d.nexthop.clone());
            }
            r.servers.insert(d.nexthop.clone(), m);
        }
        for (key, (d, _)) in &seen {
            if d.window > 0 && d.dead_until_ms.is_none() {
                r.windows
                    .push(((key.0.to_string(), key.1.to_string()), d.window));
            }
        }
        r.windows.sort();
        r.assumptions.push(
            "each destination starts at its window of the snapshot with its connections to open; one held at the running configuration's limit starts at the limit replayed (its feedback was stopped by the limit only)".into(),
        );
        if !unknown.is_empty() {
            let m = ServerModel::default();
            r.assumptions.push(format!(
                "{} destinations without samples, assumed {} ms per transaction + {} ms per recipient, {} ms to connect and greet, no session limit, every recipient accepted: {}",
                unknown.len(),
                m.per_txn.as_millis(),
                m.per_rcpt.as_millis(),
                m.greeting.as_millis(),
                list(&unknown)
            ));
        }
        if !dead.is_empty() {
            r.assumptions.push(format!(
                "dead at the snapshot, assumed unreachable throughout: {}",
                list(&dead)
            ));
        }
        if r.held.0 > 0 {
            r.assumptions.push(format!(
                "{} messages ({} recipients) on hold, left out",
                r.held.0, r.held.1
            ));
        }
        // Holds in force: their ends moved to the run's clock.
        match shaping::holdfile::parse(&first.holds_saved) {
            Ok(holds) => {
                for mut h in holds {
                    h.until = h.until.map(|u| (r.t0.0 + u).saturating_sub(now));
                    r.holds.push(h);
                }
            }
            Err(e) => r
                .assumptions
                .push(format!("holds of the snapshot not replayed: {e}")),
        }
        if !first.holds.is_empty() {
            let names: BTreeSet<String> = first
                .holds
                .iter()
                .filter(|h| h.origin != "static")
                .map(|h| {
                    let left = h
                        .remaining
                        .map_or("until lifted".into(), |s| format!("{s} s left"));
                    format!("{} {} ({}, {left})", h.origin, h.when, h.action)
                })
                .collect();
            if !names.is_empty() {
                r.assumptions.push(format!(
                    "holds in force at the snapshot, replayed as they stood (an operator's stays until its end, none is lifted by hand): {}",
                    list(&names)
                ));
            }
        }
        r
    }

    /// The class its sender's backlog at the start puts each sender in,
    /// under `thresholds` (0 small, 1 medium, 2 large).
    fn class_of(&self, tag: usize, thresholds: [u32; 2]) -> usize {
        let n = self.backlog[tag];
        if n < u64::from(thresholds[0]) {
            0
        } else if n < u64::from(thresholds[1]) {
            1
        } else {
            2
        }
    }

    /// Runs it under `sched` for at most `duration`, several times with
    /// different seeds when the queue is small enough ([`RUNS`] up to
    /// [`RUNS_UP_TO`] recipients): one run's jitter draws put connections
    /// in or out of step, and a few 0.1 s slots more or less move a
    /// median by a tenth. Each figure is the median of the runs'; the
    /// plot, the dead destinations and the errors are the run with the
    /// median drain time's.
    pub fn run(&self, sched: SchedConfig, duration: Duration) -> Result<Forecast, String> {
        let n = if self.queued.1 <= RUNS_UP_TO { RUNS } else { 1 };
        let mut runs = (1..=n)
            .map(|seed| self.run_once(sched.clone(), duration, seed))
            .collect::<Result<Vec<_>, _>>()?;
        if runs.len() == 1 {
            return Ok(runs.remove(0));
        }
        let med = |f: &dyn Fn(&Forecast) -> f64| {
            let mut v: Vec<f64> = runs.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let drain_key = |f: &Forecast| f.drain_secs.unwrap_or(f64::INFINITY);
        let d = med(&drain_key);
        let mid = runs.iter().position(|f| drain_key(f) == d).unwrap_or(0);
        let mut out = runs[mid].clone();
        out.per_minute = med(&|f| f.per_minute);
        out.delivered = med(&|f| f.delivered as f64) as u64;
        out.deferrals = med(&|f| f.deferrals as f64) as u64;
        out.bounces = med(&|f| f.bounces as f64) as u64;
        out.limited = med(&|f| f.limited as f64) as u64;
        out.unfinished = med(&|f| f.unfinished as f64) as u64;
        let group = |list: &dyn Fn(&Forecast) -> &Vec<Delays>, name: &str| {
            let find = |f: &Forecast| list(f).iter().find(|x| x.name == name).cloned();
            let all: Vec<Delays> = runs.iter().filter_map(find).collect();
            let m = |g: &dyn Fn(&Delays) -> f64| {
                let mut v: Vec<f64> = all.iter().map(g).collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            Delays {
                name: name.to_string(),
                messages: m(&|x| x.messages as f64) as u64,
                p50: m(&|x| x.p50),
                p99: m(&|x| x.p99),
                last: all
                    .iter()
                    .all(|x| x.last.is_some())
                    .then(|| m(&|x| x.last.unwrap_or(0.0))),
            }
        };
        let classes: Vec<Delays> = out
            .classes
            .iter()
            .map(|c| group(&|f| &f.classes, &c.name))
            .collect();
        let senders: Vec<Delays> = out
            .senders
            .iter()
            .map(|c| group(&|f| &f.senders, &c.name))
            .collect();
        out.classes = classes;
        out.senders = senders;
        Ok(out)
    }

    fn run_once(
        &self,
        mut sched: SchedConfig,
        duration: Duration,
        seed: u64,
    ) -> Result<Forecast, String> {
        sched.seed = seed;
        for t in self.transports.keys() {
            if !sched.transports.iter().any(|x| &x.name == t) {
                return Err(format!(
                    "transport {t} of queued mail is not a delivery service of master.cf"
                ));
            }
        }
        let thresholds = sched
            .transports
            .first()
            .map_or([10, 1000], |t| t.sender_class_thresholds);
        let mut servers = self.servers.clone();
        let mut rng = sched::rng::Rng::new(seed);
        for ((t, n), w) in &self.windows {
            let Some(tc) = sched.transports.iter().find(|x| &x.name == t) else {
                continue;
            };
            let at_limit = self.limits.get(t).is_some_and(|l| w >= l);
            let start = if at_limit {
                tc.destination_concurrency_limit
            } else {
                *w
            };
            sched.windows.insert((t.clone(), n.clone()), start);
            // A configuration that changes the window takes effect when it
            // is loaded, a moment the snapshot does not know: where its
            // connections are in their transactions then is drawn for each
            // seed (a point of a one-recipient transaction, uniformly),
            // the new connections' with the old ones', rather than taken
            // from the snapshot. Replayed as of the snapshot, a burst met
            // the rounds where the running configuration had them, a
            // transaction early or late against a run at the new limit.
            if start != *w {
                if let Some(m) = servers.get_mut(n) {
                    if !m.under_way.is_empty() {
                        let one = (m.per_txn + m.per_rcpt).as_secs_f64();
                        m.under_way = (0..start)
                            .map(|_| {
                                Duration::from_secs_f64(one * rng.unit())
                                    .max(Duration::from_millis(1))
                            })
                            .collect();
                    }
                }
            }
        }
        let mut notes = Vec::new();
        let shaped = sched.shaping.clone();
        if let Some(p) = &shaped {
            for s in &p.suspensions {
                let when: Vec<String> = s.when.iter().map(|(f, v)| format!("{f}={v}")).collect();
                notes.push(format!(
                    "the policy file's suspension of {} holds its mail throughout",
                    when.join(",")
                ));
            }
            if !p.replies.is_empty() {
                notes.push(
                    "reply rules trigger only on the replies modelled (4xx and 5xx by the mix seen, without the servers' words)".into(),
                );
            }
        } else if !self.holds.is_empty() {
            notes.push("no policy file: the holds in force at the snapshot do not apply".into());
        }
        let cfg = SimConfig {
            sched,
            seed,
            retry_deferred: true,
            end: self.t0 + duration,
            prior: self.prior.clone(),
            domains: self.domains.clone(),
            ..SimConfig::default()
        };
        let mut sim = Sim::new(
            cfg,
            Box::new(ThreeClass),
            self.dests.clone(),
            servers,
            self.msgs.clone(),
        )
        .map_err(|e| format!("scheduler configuration: {e:?}"))?;
        if shaped.is_some() && !self.holds.is_empty() {
            sim.qm
                .restore_holds(self.t0, &shaping::holdfile::format(&self.holds))
                .map_err(|e| format!("holds of the snapshot: {e}"))?;
        }
        let rep = sim.run();
        let secs = |t: Time| t.0.saturating_sub(self.t0.0) as f64 / 1000.0;
        let drained = rep.unfinished == 0 && rep.end <= self.t0 + duration;
        let span = if drained {
            secs(rep.end)
        } else {
            duration.as_secs_f64()
        };
        let mut per_class: [Vec<f64>; 3] = Default::default();
        let mut senders = Vec::new();
        for (tag, lat) in &rep.latency {
            let c = self.class_of(*tag as usize, thresholds);
            per_class[c].extend(lat);
            let last = rep.delivered_by_tag.get(tag).map(|(_, t)| secs(*t));
            senders.push(Delays::of(
                self.senders[*tag as usize].clone(),
                lat.clone(),
                last,
            ));
        }
        senders.sort_by(|a, b| b.messages.cmp(&a.messages).then(a.name.cmp(&b.name)));
        let dead: BTreeSet<String> = rep.dead.iter().map(|(_, n, _)| n.clone()).collect();
        Ok(Forecast {
            drain_secs: drained.then_some(span),
            delivered: rep.delivered,
            per_minute: if span > 0.0 {
                rep.delivered as f64 * 60.0 / span
            } else {
                0.0
            },
            deferrals: rep.deferred,
            bounces: rep.bounced,
            dead: dead.into_iter().collect(),
            limited: rep.limited,
            unfinished: rep.unfinished,
            classes: per_class
                .into_iter()
                .zip(["small", "medium", "large"])
                .map(|(v, n)| Delays::of(n.to_string(), v, None))
                .collect(),
            senders,
            drain: rep
                .drain
                .iter()
                .filter(|(t, _)| *t >= self.t0)
                .map(|(t, n)| (secs(*t), *n))
                .collect(),
            errors: rep.errors,
            notes,
        })
    }
}

/// A recipient's domain, lower-cased.
fn domain(address: &str) -> String {
    address
        .rsplit_once('@')
        .map_or("", |(_, d)| d)
        .to_ascii_lowercase()
}

/// The first ten of a set, and how many more.
fn list(s: &BTreeSet<String>) -> String {
    let mut out: Vec<&str> = s.iter().take(10).map(String::as_str).collect();
    let more = s.len().saturating_sub(10);
    let tail = format!("and {more} more");
    if more > 0 {
        out.push(&tail);
    }
    out.join(", ")
}

/// Delays of a group of messages (seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct Delays {
    /// The sender, or the class.
    pub name: String,
    /// Messages done.
    pub messages: u64,
    /// Median delay.
    pub p50: f64,
    /// 99th percentile delay.
    pub p99: f64,
    /// Its last delivery, seconds after the start (senders only).
    pub last: Option<f64>,
}

impl Delays {
    fn of(name: String, mut v: Vec<f64>, last: Option<f64>) -> Delays {
        v.sort_by(f64::total_cmp);
        let q = |p: f64| {
            if v.is_empty() {
                0.0
            } else {
                v[((v.len() - 1) as f64 * p).round() as usize]
            }
        };
        Delays {
            name,
            messages: v.len() as u64,
            p50: q(0.5),
            p99: q(0.99),
            last,
        }
    }
}

/// What one configuration would do with the queue.
#[derive(Clone, Debug, PartialEq)]
pub struct Forecast {
    /// Seconds until the queue is empty, if it empties within the run.
    pub drain_secs: Option<f64>,
    /// Recipients delivered.
    pub delivered: u64,
    /// Deliveries per minute over the drain (or the whole run).
    pub per_minute: f64,
    /// Recipient deferrals.
    pub deferrals: u64,
    /// Recipients bounced.
    pub bounces: u64,
    /// Destinations declared dead.
    pub dead: Vec<String>,
    /// Times a destination waited for a rate or policy limit.
    pub limited: u64,
    /// Recipients not final at the end.
    pub unfinished: u64,
    /// Delays per class (small, medium, large) of the sender's backlog at the start.
    pub classes: Vec<Delays>,
    /// Delays per sender, most messages first.
    pub senders: Vec<Delays>,
    /// (seconds, messages left) over the run, for the plot.
    pub drain: Vec<(f64, u64)>,
    /// The scheduler's errors (none expected).
    pub errors: Vec<String>,
    /// What this configuration's replay assumed beside the replay's own.
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::queuectl::{SnapMessage, SnapRcpt};
    use sched::TransportConfig;

    fn rcpt(a: &str, routed: bool) -> SnapRcpt {
        SnapRcpt {
            domain: a.rsplit_once('@').unwrap().1.into(),
            count: 1,
            transport: if routed { "smtp".into() } else { String::new() },
            nexthop: if routed {
                "sink.example".into()
            } else {
                String::new()
            },
        }
    }

    fn snapshot(bulk: u32) -> Snapshot {
        let now = 1_000_000_000;
        let mut messages: Vec<SnapMessage> = (0..bulk)
            .map(|i| SnapMessage {
                id: format!("m{i}"),
                arrival_ms: now - 2000,
                sender: "bulk@example.com".into(),
                size: 2048,
                active: true,
                recipients: vec![rcpt(&format!("b{i}@sink.example"), true)],
                ..SnapMessage::default()
            })
            .collect();
        messages.push(SnapMessage {
            id: "held".into(),
            arrival_ms: now - 1000,
            sender: "x@example.com".into(),
            held: true,
            recipients: vec![rcpt("h@sink.example", false)],
            ..SnapMessage::default()
        });
        messages.push(SnapMessage {
            id: "later".into(),
            arrival_ms: now - 60_000,
            sender: "late@example.com".into(),
            next_attempt: now / 1000 + 30,
            recipients: vec![
                rcpt("l@sink.example", false),
                rcpt("o@other.example", false),
            ],
            ..SnapMessage::default()
        });
        Snapshot {
            now_ms: now,
            messages,
            destinations: vec![SnapDest {
                transport: "smtp".into(),
                nexthop: "sink.example".into(),
                txn_ms: vec![(100, 1); 20],
                greeting_ms: vec![5; 4],
                replies: [20, 0, 0, 0],
                ..SnapDest::default()
            }],
            ..Snapshot::default()
        }
    }

    fn sched(limit: u32) -> SchedConfig {
        let mut t = TransportConfig::new("smtp");
        t.destination_concurrency_limit = limit;
        t.initial_destination_concurrency = 5;
        SchedConfig {
            transports: vec![t],
            ..SchedConfig::default()
        }
    }

    #[test]
    fn arrivals_parse_and_bad_ones_are_refused_with_the_form() {
        let a = Arrival::parse("20,small@example.org,s@example.net,+1.5,0.5s").unwrap();
        assert_eq!(a.count, 20);
        assert_eq!(a.at, Duration::from_millis(1500));
        assert_eq!(a.over, Duration::from_millis(500));
        let e = Arrival::parse("x,a,b").unwrap_err();
        assert!(e.contains("N,SENDER,RECIPIENT"), "{e}");
        assert!(
            Arrival::parse("1,a@b,c").is_err(),
            "a recipient needs a domain"
        );
    }

    #[test]
    fn a_sampled_sink_drains_at_window_over_transaction_time_and_the_rest_is_assumed() {
        let replay = Replay::new(
            &[snapshot(500)],
            &[Arrival::parse("10,small@example.org,s@sink.example,1").unwrap()],
            &sched(5),
            &Routes::default(),
        );
        assert_eq!(replay.held, (1, 1));
        assert_eq!(replay.queued.0, 500 + 1 + 10);
        let text = replay.assumptions.join("\n");
        assert!(text.contains("2 recipients not routed yet"), "{text}");
        assert!(text.contains("other.example"), "{text}");
        assert!(text.contains("on hold, left out"), "{text}");
        let five = replay.run(sched(5), Duration::from_secs(3600)).unwrap();
        let ten = replay.run(sched(10), Duration::from_secs(3600)).unwrap();
        assert!(five.errors.is_empty() && ten.errors.is_empty());
        let d5 = five.drain_secs.expect("drained");
        let d10 = ten.drain_secs.expect("drained");
        // 500 transactions of 0.1 s on 5 (10) connections, and the deferred
        // message due at +30 s last.
        let bulk = |f: &Forecast| {
            f.senders
                .iter()
                .find(|s| s.name == "bulk@example.com")
                .and_then(|s| s.last)
                .unwrap()
        };
        assert!((9.0..12.0).contains(&bulk(&five)), "{five:?}");
        assert!((4.5..6.5).contains(&bulk(&ten)), "{ten:?}");
        assert!(
            d5 >= 30.0 && d10 >= 30.0,
            "the deferred message waits for its retry"
        );
        let small = five
            .senders
            .iter()
            .find(|s| s.name == "small@example.org")
            .unwrap();
        assert_eq!(small.messages, 10);
        assert!(small.p50 < 1.0, "small mail overtakes the bulk: {small:?}");
        let bulk_p50 = five.senders[0].p50;
        assert!(
            bulk_p50 > 2.0,
            "the bulk's delay includes its 2 s in the queue"
        );
        assert_eq!(five.delivered, 500 + 2 + 10);
        assert!(five.drain.first().unwrap().1 >= 500);
        assert_eq!(five.drain.last().unwrap().1, 0);
        // 500 and 10 recipients are medium backlogs under 10, 1000.
        assert_eq!(five.classes[1].messages, 510, "{:?}", five.classes);
        assert_eq!(five.classes[0].messages, 1, "the deferred one");
    }

    #[test]
    fn a_transport_the_proposed_master_cf_lacks_is_named() {
        let replay = Replay::new(&[snapshot(3)], &[], &sched(5), &Routes::default());
        let mut s = sched(5);
        s.transports[0].name = "relay".into();
        let e = replay.run(s, Duration::from_secs(60)).unwrap_err();
        assert!(e.contains("transport smtp"), "{e}");
    }

    #[test]
    fn the_server_model_follows_the_samples() {
        let d = SnapDest {
            txn_ms: vec![(150, 1), (250, 2), (350, 3), (150, 1)],
            replies: [6, 2, 2, 0],
            refused_at: Some(3),
            busy_ok: 2,
            ..SnapDest::default()
        };
        let (m, sampled) = model(&d, Duration::ZERO);
        assert!(sampled);
        assert_eq!(m.per_rcpt, Duration::from_millis(100));
        assert_eq!(m.per_txn, Duration::from_millis(50));
        assert!((m.p_defer - 0.2).abs() < 1e-9 && (m.p_bounce - 0.2).abs() < 1e-9);
        assert_eq!(m.limit, Some(3));
        let (_, sampled) = model(&SnapDest::default(), Duration::ZERO);
        assert!(!sampled);
    }
}
