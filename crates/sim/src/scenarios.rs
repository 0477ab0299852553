//! The six scenarios of issue 5, each in a full and a `--quick` size.
//!
//! Each returns an [`Output`]: a table for people, flat figures for `--json`
//! and CSV rows. Sizes and server models are set here and documented in
//! `docs/scheduler.md`. Panics: never; a scheduler error ends up in the
//! figures as `errors` and fails the tests.

use super::engine::{OverLimit, Report, ServerModel, SimConfig, SimDest, SimMessage};
use sched::rng::Rng;
use sched::{
    FeedbackFn, Fifo, Nqmgr, SchedConfig, ThreeClass, ThreeClassFixed, ThreeClassReserve, Time,
    TransportConfig,
};
use std::collections::BTreeMap;
use std::time::Duration;

use crate::harness::{dest, f, run};
pub use crate::harness::{percentile, Output};

fn cfg_with(t: TransportConfig) -> SchedConfig {
    SchedConfig {
        transports: vec![t],
        ..SchedConfig::default()
    }
}

/// Scenario names.
pub const NAMES: [&str; 11] = [
    "limiter",
    "fairness",
    "mailing-list",
    "dead",
    "lb-noise",
    "reuse",
    "burst",
    "shaping",
    "shaping-ramp",
    "dead-live",
    "verify-flood",
];

/// Runs a scenario by name.
pub fn run_scenario(name: &str, quick: bool, seed: u64) -> Option<Output> {
    Some(match name {
        "limiter" => limiter(quick, seed),
        "fairness" => fairness(quick, seed),
        "mailing-list" => mailing_list(quick, seed),
        "dead" => dead(quick, seed),
        "lb-noise" => lb_noise(quick, seed),
        "reuse" => reuse(quick, seed),
        "burst" => burst(quick, seed),
        "shaping" => crate::shaping::shaping(quick, seed),
        "shaping-ramp" => crate::shaping::ramp(quick, seed),
        "dead-live" => crate::deadlive::dead_live(quick, seed),
        "verify-flood" => crate::verify::flood(quick, seed),
        _ => return None,
    })
}

const FEEDBACKS: [(&str, FeedbackFn); 3] = [
    ("1/N", FeedbackFn::PerConcurrency(1.0)),
    ("1/sqrt(N)", FeedbackFn::PerSqrtConcurrency(1.0)),
    ("1", FeedbackFn::Constant(1.0)),
];

/// README figures (deferred %, average concurrency) by feedback, then caching.
type ReadmeRows = [[(f64, f64); 2]; 3];
/// A limiter experiment: label, server behaviour, initial concurrency, recipients, README rows.
type Variant = (&'static str, OverLimit, u32, u32, ReadmeRows);

/// 1. SCHED_README's concurrency-limited server experiments.
pub fn limiter(quick: bool, seed: u64) -> Output {
    let mut out = Output::new(
        "limiter",
        &[
            "server",
            "feedback",
            "caching",
            "recipients",
            "deferred_pct",
            "avg_conc",
            "stddev",
            "failures",
            "readme_deferred_pct",
            "readme_avg",
        ],
    );
    // (label, behaviour, initial concurrency, recipients full/quick, README rows by feedback and caching)
    let variants: [Variant; 3] = [
        (
            "connect-timeout",
            OverLimit::DropConnect,
            20,
            2000,
            [
                [(9.9, 19.4), (10.3, 19.4)],
                [(10.4, 19.6), (10.6, 19.6)],
                [(10.1, 19.5), (10.8, 19.3)],
            ],
        ),
        (
            "greeting-timeout",
            OverLimit::GreetingTimeout,
            20,
            20000,
            [
                [(1.16, 19.8), (1.36, 19.8)],
                [(1.21, 19.9), (1.36, 20.0)],
                [(1.18, 20.0), (1.39, 20.0)],
            ],
        ),
        (
            "421",
            OverLimit::Reply421,
            5,
            2000,
            [
                [(16.5, 5.17), (16.5, 5.17)],
                [(24.5, 5.28), (24.3, 5.28)],
                [(49.7, 5.63), (49.7, 5.68)],
            ],
        ),
    ];
    for (label, over, initial, n_full, readme) in variants {
        for (fi, (fname, fb)) in FEEDBACKS.iter().enumerate() {
            for (ci, caching) in [false, true].into_iter().enumerate() {
                let n = if quick {
                    (n_full / 2).min(2000)
                } else {
                    n_full
                };
                let mut t = TransportConfig::new("smtp");
                if !caching {
                    t = t.without_connection_reuse();
                }
                t.connection_backlog_limit = 1;
                t.destination_recipient_limit = 2;
                t.destination_concurrency_limit = 20;
                t.initial_destination_concurrency = initial;
                t.positive_feedback = *fb;
                t.negative_feedback = *fb;
                let mut sc = SimConfig {
                    sched: cfg_with(t),
                    seed,
                    track: Some("limited.example".into()),
                    ..SimConfig::default()
                };
                sc.sched.seed = seed;
                // The README's servers: the process limit (5) is also the
                // listen(2) backlog, which FreeBSD honours (full queue: the
                // connect times out) and Linux stretches (connections wait for
                // the greeting); the 421 limiter rejects at once.
                let listen_backlog = match over {
                    OverLimit::DropConnect => 5,
                    OverLimit::GreetingTimeout => 1000,
                    OverLimit::Reply421 => 0,
                };
                let server = ServerModel {
                    per_txn: Duration::ZERO,
                    per_rcpt: Duration::from_secs(1),
                    greeting: Duration::from_millis(10),
                    limit: Some(5),
                    over_limit: over,
                    listen_backlog,
                    ..ServerModel::default()
                };
                let servers = BTreeMap::from([("mx.limited.example".to_string(), server)]);
                let d = vec![dest(
                    "limited.example",
                    vec![vec!["mx.limited.example".into()]],
                )];
                let m = vec![SimMessage {
                    at: Time::ZERO,
                    sender: "list@example.org".into(),
                    size: 1000,
                    rcpts: vec![0; n as usize],
                    tag: 0,
                }];
                let r = run(sc, Box::new(ThreeClass), d, servers, m);
                let pct = 100.0 * r.deferred as f64 / r.injected.max(1) as f64;
                let key = format!(
                    "{label}_{fname}_{}",
                    if caching { "cache" } else { "nocache" }
                );
                out.check(&key, &r);
                let (rd, ra) = readme[fi][ci];
                out.row(vec![
                    label.into(),
                    fname.to_string(),
                    if caching { "yes" } else { "no" }.into(),
                    n.to_string(),
                    f(pct),
                    f(r.conc_avg),
                    f(r.conc_std),
                    r.conn_failures.to_string(),
                    f(rd),
                    f(ra),
                ]);
                out.fig(&format!("{key}_deferred_pct"), pct);
                out.fig(&format!("{key}_avg_concurrency"), r.conc_avg);
                out.fig(&format!("{key}_stddev"), r.conc_std);
                out.fig(&format!("{key}_window_max"), f64::from(r.window_max));
                if label == "421" && fi == 0 && ci == 0 {
                    out.fig("deferred_pct", pct);
                    out.fig("avg_concurrency", r.conc_avg);
                }
            }
        }
    }
    out
}

fn latency_row(
    out: &mut Output,
    label: &str,
    r: &Report,
    tag: u32,
    idle: &[f64],
) -> (f64, f64, f64) {
    let v = r.latency.get(&tag).cloned().unwrap_or_default();
    let (p50, p99, max) = (
        percentile(&v, 50.0),
        percentile(&v, 99.0),
        percentile(&v, 100.0),
    );
    let (i50, i99) = (percentile(idle, 50.0), percentile(idle, 99.0));
    out.row(vec![
        label.into(),
        v.len().to_string(),
        f(p50),
        f(p99),
        f(max),
        f(p50 / i50),
        f(p99 / i99),
        f(r.end.as_secs_f64()),
    ]);
    (p50 / i50, p99 / i99, max)
}

/// 2. Wietse's fairness case: one bulk sender, then ten small senders.
pub fn fairness(quick: bool, seed: u64) -> Output {
    let mut out = Output::new(
        "fairness",
        &[
            "run",
            "small_msgs",
            "p50_s",
            "p99_s",
            "max_s",
            "p50_ratio",
            "p99_ratio",
            "end_s",
        ],
    );
    let bulk = if quick { 5_000 } else { 100_000 };
    let small_at = Time::from_secs(if quick { 5 } else { 60 });
    let mk = |with_bulk: bool| {
        let mut m = Vec::new();
        if with_bulk {
            for _ in 0..bulk {
                m.push(SimMessage {
                    at: Time::ZERO,
                    sender: "bulk@big.example".into(),
                    size: 5000,
                    rcpts: vec![0],
                    tag: 0,
                });
            }
        }
        for s in 0..10 {
            for _ in 0..10 {
                m.push(SimMessage {
                    at: small_at,
                    sender: format!("user{s}@small.example"),
                    size: 5000,
                    rcpts: vec![0],
                    tag: 1,
                });
            }
        }
        m
    };
    let mut t = TransportConfig::new("smtp");
    t.destination_concurrency_limit = 20;
    let mut sc = SimConfig {
        sched: cfg_with(t),
        seed,
        track: Some("busy.example".into()),
        ..SimConfig::default()
    };
    // Everything is in memory so that classes see the whole backlog (see docs).
    sc.sched.qmgr_message_active_limit = 200_000;
    sc.sched.seed = seed;
    let d = || vec![dest("busy.example", vec![vec!["mx.busy.example".into()]])];
    let servers = BTreeMap::new;
    let idle = run(sc.clone(), Box::new(ThreeClass), d(), servers(), mk(false));
    let three = run(sc.clone(), Box::new(ThreeClass), d(), servers(), mk(true));
    // With the default active limit most of the bulk waits for admission,
    // outside the classes: in turn by sender (qmgr) or FIFO.
    let mut lim = sc.clone();
    // (quick: a limit that the smaller bulk also overflows)
    lim.sched.qmgr_message_active_limit = if quick {
        1_000
    } else {
        SchedConfig::default().qmgr_message_active_limit
    };
    let turns = run(lim.clone(), Box::new(ThreeClass), d(), servers(), mk(true));
    lim.fair_admission = false;
    let fifo_adm = run(lim, Box::new(ThreeClass), d(), servers(), mk(true));
    let fifo = run(sc, Box::new(Fifo), d(), servers(), mk(true));
    let idle_lat = idle.latency.get(&1).cloned().unwrap_or_default();
    latency_row(&mut out, "idle", &idle, 1, &idle_lat);
    let (p50, p99, max) = latency_row(&mut out, "three-class", &three, 1, &idle_lat);
    let (a50, a99, _) = latency_row(
        &mut out,
        "active limit, admitted in turn",
        &turns,
        1,
        &idle_lat,
    );
    let (_, b99, _) = latency_row(
        &mut out,
        "active limit, admitted FIFO",
        &fifo_adm,
        1,
        &idle_lat,
    );
    let (f50, f99, fmax) = latency_row(&mut out, "fifo", &fifo, 1, &idle_lat);
    for (l, r) in [
        ("idle", &idle),
        ("three-class", &three),
        ("limit-turns", &turns),
        ("limit-fifo", &fifo_adm),
        ("fifo", &fifo),
    ] {
        out.check(l, r);
    }
    out.fig("limited_small_p50_ratio", a50);
    out.fig("limited_small_p99_ratio", a99);
    out.fig("limited_fifo_admission_small_p99_ratio", b99);
    out.fig("small_p50_ratio", p50);
    out.fig("small_p99_ratio", p99);
    out.fig("small_max_s", max);
    out.fig("fifo_small_p50_ratio", f50);
    out.fig("fifo_small_p99_ratio", f99);
    out.fig("fifo_small_max_s", fmax);
    out.fig("idle_small_p99_s", percentile(&idle_lat, 99.0));
    out.fig("bulk_messages", f64::from(bulk));
    out
}

/// 2b. The real-life fairness case (issue 7, `scripts/bench fairness`): one
/// bulk sender's 2,000 single-recipient messages, then one sender's burst of
/// 20, to a destination that takes 0.1 s per message at concurrency 5; with
/// the default thresholds, classes that follow the sender's count
/// (`reclass`) against classes fixed at queueing and FIFO.
pub fn burst(quick: bool, seed: u64) -> Output {
    let mut out = Output::new(
        "burst",
        &[
            "run",
            "small_msgs",
            "p50_s",
            "p99_s",
            "max_s",
            "p50_ratio",
            "p99_ratio",
            "end_s",
        ],
    );
    // Fast enough to run in full even when quick: a smaller bulk would put
    // both senders in the medium class, which is another experiment.
    let _ = quick;
    let bulk = 2_000;
    let mk = |with_bulk: bool| {
        let mut m = Vec::new();
        if with_bulk {
            for i in 0..bulk {
                m.push(SimMessage {
                    // smtp-source injects about 1,000 messages a second.
                    at: Time(i as u64),
                    sender: "bulk@big.example".into(),
                    size: 2000,
                    rcpts: vec![0],
                    tag: 0,
                });
            }
        }
        for i in 0..20u64 {
            m.push(SimMessage {
                at: Time(bulk as u64 + 1_000 + i / 5),
                sender: "small@small.example".into(),
                size: 2000,
                rcpts: vec![0],
                tag: 1,
            });
        }
        m
    };
    let mut t = TransportConfig::new("smtp");
    t.initial_destination_concurrency = 5;
    t.destination_concurrency_limit = 5;
    let mut sc = SimConfig {
        sched: cfg_with(t),
        seed,
        track: Some("sink.example".into()),
        ..SimConfig::default()
    };
    sc.sched.seed = seed;
    let d = || vec![dest("sink.example", vec![vec!["mx.sink.example".into()]])];
    let servers = || {
        let model = ServerModel {
            per_txn: Duration::from_millis(100),
            per_rcpt: Duration::ZERO,
            greeting: Duration::from_millis(1),
            ..ServerModel::default()
        };
        BTreeMap::from([("mx.sink.example".to_string(), model)])
    };
    let idle = run(sc.clone(), Box::new(ThreeClass), d(), servers(), mk(false));
    let three = run(sc.clone(), Box::new(ThreeClass), d(), servers(), mk(true));
    let fixed = run(
        sc.clone(),
        Box::new(ThreeClassFixed),
        d(),
        servers(),
        mk(true),
    );
    let fifo = run(sc, Box::new(Fifo), d(), servers(), mk(true));
    let idle_lat = idle.latency.get(&1).cloned().unwrap_or_default();
    latency_row(&mut out, "idle", &idle, 1, &idle_lat);
    let (p50, p99, _) = latency_row(&mut out, "three-class", &three, 1, &idle_lat);
    let (x50, x99, _) = latency_row(&mut out, "three-class-fixed", &fixed, 1, &idle_lat);
    let (f50, f99, _) = latency_row(&mut out, "fifo", &fifo, 1, &idle_lat);
    for (l, r) in [
        ("idle", &idle),
        ("three-class", &three),
        ("three-class-fixed", &fixed),
        ("fifo", &fifo),
    ] {
        out.check(l, r);
    }
    out.fig("small_p50_ratio", p50);
    out.fig("small_p99_ratio", p99);
    out.fig("fixed_small_p50_ratio", x50);
    out.fig("fixed_small_p99_ratio", x99);
    out.fig("fifo_small_p50_ratio", f50);
    out.fig("fifo_small_p99_ratio", f99);
    out
}

/// 3. A big mailing-list message followed by one-recipient messages.
pub fn mailing_list(quick: bool, seed: u64) -> Output {
    let mut out = Output::new(
        "mailing-list",
        &[
            "run",
            "small_msgs",
            "p50_s",
            "p99_s",
            "max_s",
            "p50_ratio",
            "p99_ratio",
            "end_s",
        ],
    );
    // Fast enough to run in full even when quick: a smaller list ends its
    // first transactions as soon and leaves the bound untested.
    let _ = quick;
    let (list_n, small_n) = (10_000, 100);
    let mk = |with_list: bool| {
        let mut m = Vec::new();
        if with_list {
            m.push(SimMessage {
                at: Time::ZERO,
                sender: "list@lists.example".into(),
                size: 20_000,
                rcpts: vec![0; list_n],
                tag: 0,
            });
        }
        for s in 0..small_n {
            m.push(SimMessage {
                at: Time::from_secs(1),
                sender: format!("u{s}@example.net"),
                size: 5000,
                rcpts: vec![0],
                tag: 1,
            });
        }
        m
    };
    let t = TransportConfig::new("smtp");
    let mut sc = SimConfig {
        sched: cfg_with(t),
        seed,
        track: Some("list.example".into()),
        ..SimConfig::default()
    };
    sc.sched.seed = seed;
    let d = || vec![dest("list.example", vec![vec!["mx.list.example".into()]])];
    let idle = run(
        sc.clone(),
        Box::new(ThreeClass),
        d(),
        BTreeMap::new(),
        mk(false),
    );
    let three = run(
        sc.clone(),
        Box::new(ThreeClass),
        d(),
        BTreeMap::new(),
        mk(true),
    );
    let fifo = run(sc.clone(), Box::new(Fifo), d(), BTreeMap::new(), mk(true));
    // The same without pipelining backlog: entries wait in their class queue
    // until a connection is free, as in Postfix.
    let mut sc1 = sc.clone();
    sc1.sched.transports[0].connection_backlog_limit = 1;
    let three1 = run(
        sc1.clone(),
        Box::new(ThreeClass),
        d(),
        BTreeMap::new(),
        mk(true),
    );
    let fifo1 = run(sc1, Box::new(Fifo), d(), BTreeMap::new(), mk(true));
    // main.cf's default backlog (5), and the policies compared with the
    // default: one that keeps the last connection slot for a smaller
    // class, and nqmgr's preemption.
    let mut sc5 = sc.clone();
    sc5.sched.transports[0].connection_backlog_limit = 5;
    let three5 = run(sc5, Box::new(ThreeClass), d(), BTreeMap::new(), mk(true));
    // The default without its reservation behind long transactions
    // (`class_slot_reserve_recipients = 0`).
    let mut sc0 = sc.clone();
    sc0.sched.transports[0].class_slot_reserve_recipients = 0;
    let three0 = run(sc0, Box::new(ThreeClass), d(), BTreeMap::new(), mk(true));
    let reserve = run(
        sc.clone(),
        Box::new(ThreeClassReserve),
        d(),
        BTreeMap::new(),
        mk(true),
    );
    let reserve_idle = run(
        sc.clone(),
        Box::new(ThreeClassReserve),
        d(),
        BTreeMap::new(),
        mk(false),
    );
    let nq = run(
        sc.clone(),
        Box::new(Nqmgr::default()),
        d(),
        BTreeMap::new(),
        mk(true),
    );
    let mut sc1 = sc.clone();
    sc1.sched.transports[0].connection_backlog_limit = 1;
    let nq1 = run(
        sc1,
        Box::new(Nqmgr::default()),
        d(),
        BTreeMap::new(),
        mk(true),
    );
    let idle_lat = idle.latency.get(&1).cloned().unwrap_or_default();
    latency_row(&mut out, "idle", &idle, 1, &idle_lat);
    let (p50, p99, _) = latency_row(&mut out, "three-class", &three, 1, &idle_lat);
    let (f50, f99, _) = latency_row(&mut out, "fifo", &fifo, 1, &idle_lat);
    let (b50, b99, _) = latency_row(&mut out, "three-class backlog=1", &three1, 1, &idle_lat);
    let (g50, g99, _) = latency_row(&mut out, "fifo backlog=1", &fifo1, 1, &idle_lat);
    let (c50, c99, _) = latency_row(&mut out, "three-class backlog=5", &three5, 1, &idle_lat);
    let (z50, z99, _) = latency_row(
        &mut out,
        "three-class no-slot-reserve",
        &three0,
        1,
        &idle_lat,
    );
    let (r50, r99, _) = latency_row(&mut out, "three-class-reserve", &reserve, 1, &idle_lat);
    latency_row(
        &mut out,
        "three-class-reserve idle",
        &reserve_idle,
        1,
        &idle_lat,
    );
    let (n50, n99, _) = latency_row(&mut out, "nqmgr", &nq, 1, &idle_lat);
    let (m50, m99, _) = latency_row(&mut out, "nqmgr backlog=1", &nq1, 1, &idle_lat);
    for (l, r) in [
        ("idle", &idle),
        ("three-class", &three),
        ("fifo", &fifo),
        ("three-class-b1", &three1),
        ("fifo-b1", &fifo1),
        ("three-class-b5", &three5),
        ("three-class-no-slot-reserve", &three0),
        ("three-class-reserve", &reserve),
        ("three-class-reserve-idle", &reserve_idle),
        ("nqmgr", &nq),
        ("nqmgr-b1", &nq1),
    ] {
        out.check(l, r);
    }
    out.fig("backlog1_small_p50_ratio", b50);
    out.fig("backlog1_small_p99_ratio", b99);
    out.fig("backlog1_fifo_small_p50_ratio", g50);
    out.fig("backlog1_fifo_small_p99_ratio", g99);
    out.fig("backlog5_small_p50_ratio", c50);
    out.fig("backlog5_small_p99_ratio", c99);
    out.fig("no_slot_reserve_small_p50_ratio", z50);
    out.fig("no_slot_reserve_small_p99_ratio", z99);
    out.fig("reserve_small_p50_ratio", r50);
    out.fig("reserve_small_p99_ratio", r99);
    out.fig("nqmgr_small_p50_ratio", n50);
    out.fig("nqmgr_small_p99_ratio", n99);
    out.fig("nqmgr_backlog1_small_p50_ratio", m50);
    out.fig("nqmgr_backlog1_small_p99_ratio", m99);
    let list_done = |r: &Report| {
        r.latency
            .get(&0)
            .and_then(|v| v.first().copied())
            .unwrap_or(f64::NAN)
    };
    out.fig("backlog5_list_done_s", list_done(&three5));
    out.fig("no_slot_reserve_list_done_s", list_done(&three0));
    out.fig("reserve_list_done_s", list_done(&reserve));
    out.fig("nqmgr_list_done_s", list_done(&nq));
    out.fig("nqmgr_backlog1_list_done_s", list_done(&nq1));
    out.fig("small_p50_ratio", p50);
    out.fig("small_p99_ratio", p99);
    out.fig("fifo_small_p50_ratio", f50);
    out.fig("fifo_small_p99_ratio", f99);
    out.fig("list_done_s", list_done(&three));
    out.fig("fifo_list_done_s", list_done(&fifo));
    out
}

/// 4. One dead destination among many.
pub fn dead(quick: bool, seed: u64) -> Output {
    let mut out = Output::new(
        "dead",
        &[
            "run",
            "live_delivered",
            "live_last_s",
            "live_msgs_per_s",
            "dead_events",
            "first_dead_s",
            "bounced",
            "deferrals",
        ],
    );
    let (nd, nm) = if quick { (20, 2_000) } else { (100, 20_000) };
    let mut rng = Rng::new(seed ^ 0xdead);
    let msgs: Vec<SimMessage> = (0..nm)
        .map(|i| {
            let d = rng.below(nd as u64) as u32;
            SimMessage {
                at: Time::ZERO,
                sender: format!("s{}@example.org", i % 50),
                size: 4000,
                rcpts: vec![d],
                tag: u32::from(d == 0),
            }
        })
        .collect();
    let dests: Vec<SimDest> = (0..nd)
        .map(|i| {
            dest(
                &format!("d{i}.example"),
                vec![vec![format!("mx.d{i}.example")]],
            )
        })
        .collect();
    let mut sc = SimConfig {
        sched: SchedConfig::default(),
        seed,
        retry_deferred: true,
        track: Some("d0.example".into()),
        ..SimConfig::default()
    };
    sc.sched.seed = seed;
    sc.sched.maximal_queue_lifetime = Duration::from_secs(if quick { 3 * 3600 } else { 5 * 3600 });
    sc.end = Time::from_secs(if quick { 4 * 3600 } else { 6 * 3600 });
    let mut servers = BTreeMap::new();
    let baseline = run(
        sc.clone(),
        Box::new(ThreeClass),
        dests.clone(),
        servers.clone(),
        msgs.clone(),
    );
    servers.insert(
        "mx.d0.example".to_string(),
        ServerModel {
            dead: true,
            ..ServerModel::default()
        },
    );
    let with_dead = run(sc, Box::new(ThreeClass), dests, servers, msgs);
    let live = |r: &Report| {
        let (n, t) = r
            .delivered_by_tag
            .get(&0)
            .copied()
            .unwrap_or((0, Time::ZERO));
        (n, t.as_secs_f64(), n as f64 / t.as_secs_f64().max(1e-9))
    };
    for (label, r) in [("without dead", &baseline), ("with dead", &with_dead)] {
        let (n, t, rate) = live(r);
        let first = r.dead.first().map_or(f64::NAN, |d| d.0.as_secs_f64());
        out.row(vec![
            label.into(),
            n.to_string(),
            f(t),
            f(rate),
            r.dead.len().to_string(),
            f(first),
            r.bounced.to_string(),
            r.deferred.to_string(),
        ]);
        out.check(label, r);
    }
    let ratio = live(&with_dead).2 / live(&baseline).2;
    out.fig("live_throughput_ratio", ratio);
    out.fig("dead_events", with_dead.dead.len() as f64);
    out.fig(
        "first_dead_s",
        with_dead
            .dead
            .first()
            .map_or(f64::NAN, |d| d.0.as_secs_f64()),
    );
    for (i, (at, _, retry)) in with_dead.dead.iter().enumerate().take(6) {
        out.fig(&format!("backoff_{i}_s"), retry.since(*at).as_secs_f64());
    }
    out.fig("dead_dest_bounced", with_dead.bounced as f64);
    out.fig(
        "dead_dest_delivered",
        with_dead
            .delivered_by_tag
            .get(&1)
            .map_or(0.0, |x| x.0 as f64),
    );
    out
}

/// 5. Load balancer with one of four servers failing the handshake.
pub fn lb_noise(quick: bool, seed: u64) -> Output {
    let mut out = Output::new(
        "lb-noise",
        &[
            "feedback",
            "avg_conc",
            "stddev",
            "window_max",
            "deferred_pct",
            "dead_events",
        ],
    );
    let n = if quick { 2_000 } else { 20_000 };
    let fbs: [(&str, FeedbackFn, FeedbackFn); 4] = [
        (
            "1/N",
            FeedbackFn::PerConcurrency(1.0),
            FeedbackFn::PerConcurrency(1.0),
        ),
        (
            "1/sqrt(N)",
            FeedbackFn::PerSqrtConcurrency(1.0),
            FeedbackFn::PerSqrtConcurrency(1.0),
        ),
        (
            "1/4",
            FeedbackFn::Constant(0.25),
            FeedbackFn::Constant(0.25),
        ),
        ("1", FeedbackFn::Constant(1.0), FeedbackFn::Constant(1.0)),
    ];
    for (name, pos, neg) in fbs {
        let mut t = TransportConfig::new("smtp").without_connection_reuse();
        t.positive_feedback = pos;
        t.negative_feedback = neg;
        let mut sc = SimConfig {
            sched: cfg_with(t),
            seed,
            track: Some("lb.example".into()),
            ..SimConfig::default()
        };
        sc.sched.seed = seed;
        let server = ServerModel {
            backends: 4,
            bad_backends: 1,
            ..ServerModel::default()
        };
        let servers = BTreeMap::from([("vip.lb.example".to_string(), server)]);
        let d = vec![dest("lb.example", vec![vec!["vip.lb.example".into()]])];
        let m = (0..n)
            .map(|i| SimMessage {
                at: Time::ZERO,
                sender: format!("s{}@example.org", i % 100),
                size: 3000,
                rcpts: vec![0],
                tag: 0,
            })
            .collect();
        let r = run(sc, Box::new(ThreeClass), d, servers, m);
        let pct = 100.0 * r.deferred as f64 / r.injected.max(1) as f64;
        out.row(vec![
            name.into(),
            f(r.conc_avg),
            f(r.conc_std),
            r.window_max.to_string(),
            f(pct),
            r.dead.len().to_string(),
        ]);
        out.check(name, &r);
        let k = name.replace('/', "_").replace(['(', ')'], "");
        out.fig(&format!("{k}_avg_concurrency"), r.conc_avg);
        out.fig(&format!("{k}_window_max"), f64::from(r.window_max));
        out.fig(&format!("{k}_deferred_pct"), pct);
    }
    out
}

/// 6. Connection reuse: many messages to many destinations with two MX hosts each.
pub fn reuse(quick: bool, seed: u64) -> Output {
    let mut out = Output::new(
        "reuse",
        &[
            "messages",
            "destinations",
            "connections",
            "msgs_per_conn",
            "both_hosts_pct",
            "host_balance",
            "end_s",
        ],
    );
    let (nd, nm, span) = if quick {
        (100, 10_000, 10.0)
    } else {
        (1_000, 100_000, 100.0)
    };
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut at = 0.0;
    let msgs: Vec<SimMessage> = (0..nm)
        .map(|i| {
            at += rng.exp(span / nm as f64);
            let d = rng.below(nd as u64) as u32;
            SimMessage {
                at: Time((at * 1000.0) as u64),
                sender: format!("s{}@example.org", i % 500),
                size: 4000,
                rcpts: vec![d],
                tag: 0,
            }
        })
        .collect();
    let dests: Vec<SimDest> = (0..nd)
        .map(|i| {
            dest(
                &format!("r{i}.example"),
                vec![vec![
                    format!("mx1.r{i}.example"),
                    format!("mx2.r{i}.example"),
                ]],
            )
        })
        .collect();
    let mut sc = SimConfig {
        sched: SchedConfig::default(),
        seed,
        ..SimConfig::default()
    };
    sc.sched.seed = seed;
    let r = run(sc, Box::new(ThreeClass), dests, BTreeMap::new(), msgs);
    out.check("reuse", &r);
    let mut both = 0;
    let mut balance = 0.0;
    for i in 0..nd {
        let a = r
            .host_conns
            .get(&format!("mx1.r{i}.example"))
            .copied()
            .unwrap_or(0) as f64;
        let b = r
            .host_conns
            .get(&format!("mx2.r{i}.example"))
            .copied()
            .unwrap_or(0) as f64;
        if a > 0.0 && b > 0.0 {
            both += 1;
        }
        if a + b > 0.0 {
            balance += a.min(b) / a.max(b);
        }
    }
    let mpc = r.transactions as f64 / r.connections.max(1) as f64;
    let both_pct = 100.0 * f64::from(both) / nd as f64;
    let bal = balance / nd as f64;
    out.row(vec![
        nm.to_string(),
        nd.to_string(),
        r.connections.to_string(),
        f(mpc),
        f(both_pct),
        f(bal),
        f(r.end.as_secs_f64()),
    ]);
    out.fig("msgs_per_connection", mpc);
    out.fig("connections", r.connections as f64);
    out.fig("both_hosts_pct", both_pct);
    out.fig("host_balance", bal);
    out
}
