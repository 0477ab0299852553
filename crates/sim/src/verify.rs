//! Address verification under a flood (issue 21): 5,000 verification
//! queries for distinct addresses of one destination while 2,000 real
//! messages go there, against the same 2,000 messages alone.
//!
//! Probes travel as one pseudo-message per transport of at most
//! `address_verify_concurrency_limit` recipients, so however many
//! addresses are asked about, they take at most that many recipients'
//! worth of the destination's connections: real mail's throughput (its
//! messages over the time of its last delivery) should stay within 10 %
//! of its figure without the flood, every probe should run, and the cache
//! and the probes waiting stay within their limits. Panics: never.

use std::collections::BTreeMap;
use std::time::Duration;

use super::engine::{Report, ServerModel, SimConfig, SimMessage};
use crate::harness::{dest, f, run, Output};
use sched::{ThreeClass, Time, TransportConfig};

/// Real mail's messages per second: delivered over the time of its last delivery.
fn throughput(r: &Report) -> f64 {
    match r.delivered_by_tag.get(&0) {
        Some((n, last)) if last.0 > 0 => *n as f64 / last.as_secs_f64(),
        _ => 0.0,
    }
}

/// The flood scenario.
pub fn flood(quick: bool, seed: u64) -> Output {
    let mut out = Output::new(
        "verify-flood",
        &[
            "run",
            "real_msgs",
            "msgs_per_s",
            "ratio",
            "probes_sent",
            "probes_max_inflight",
            "cache_max",
            "pending_max",
            "end_s",
        ],
    );
    let (nm, np) = if quick {
        (2_000, 5_000)
    } else {
        (20_000, 50_000)
    };
    let msgs: Vec<SimMessage> = (0..nm)
        .map(|i| SimMessage {
            // About 1,000 messages a second, as smtp-source injects them.
            at: Time(i as u64),
            sender: format!("s{}@example.org", i % 50),
            size: 4000,
            rcpts: vec![0],
            tag: 0,
        })
        .collect();
    // The flood arrives at the same pace, during the real mail.
    let probes: Vec<(Time, u32)> = (0..np).map(|i| (Time(i as u64 * 2 / 5), 0)).collect();
    let mut t = TransportConfig::new("smtp");
    t.destination_concurrency_limit = 20;
    let mut sc = SimConfig {
        sched: sched::SchedConfig {
            transports: vec![t],
            ..sched::SchedConfig::default()
        },
        seed,
        ..SimConfig::default()
    };
    sc.sched.seed = seed;
    sc.verify.pending_limit = np;
    let d = || vec![dest("big.example", vec![vec!["mx.big.example".into()]])];
    let servers = || {
        let model = ServerModel {
            per_txn: Duration::from_millis(100),
            per_rcpt: Duration::from_millis(20),
            greeting: Duration::from_millis(50),
            ..ServerModel::default()
        };
        BTreeMap::from([("mx.big.example".to_string(), model)])
    };
    let alone = run(
        sc.clone(),
        Box::new(ThreeClass),
        d(),
        servers(),
        msgs.clone(),
    );
    let flooded = {
        let mut c = sc.clone();
        c.probes = probes.clone();
        run(c, Box::new(ThreeClass), d(), servers(), msgs.clone())
    };
    // The same flood with small limits: memory stays bounded, probes beyond
    // the pending limit are refused rather than queued.
    let bounded = {
        let mut c = sc;
        c.probes = probes;
        c.verify.pending_limit = 200;
        c.verify.cache_limit = 1_000;
        run(c, Box::new(ThreeClass), d(), servers(), msgs)
    };
    let base = throughput(&alone);
    for (label, r) in [
        ("alone", &alone),
        ("flood", &flooded),
        ("flood-bounded", &bounded),
    ] {
        out.check(label, r);
        let tp = throughput(r);
        let ratio = if base > 0.0 { tp / base } else { 0.0 };
        out.row(vec![
            label.into(),
            r.delivered_by_tag.get(&0).map_or(0, |x| x.0).to_string(),
            f(tp),
            f(ratio),
            r.probe_rcpts.to_string(),
            r.probe_inflight_max.to_string(),
            r.verify_cache_max.to_string(),
            r.verify_pending_max.to_string(),
            f(r.end.as_secs_f64()),
        ]);
        let key = label.replace('-', "_");
        out.fig(&format!("{key}_msgs_per_s"), tp);
        out.fig(&format!("{key}_ratio"), ratio);
        out.fig(&format!("{key}_delivered"), r.delivered as f64);
        out.fig(&format!("{key}_probes_sent"), r.probe_rcpts as f64);
        out.fig(
            &format!("{key}_probes_max_inflight"),
            r.probe_inflight_max as f64,
        );
        out.fig(&format!("{key}_cache_max"), r.verify_cache_max as f64);
        out.fig(&format!("{key}_pending_max"), r.verify_pending_max as f64);
    }
    out.fig("real_messages", nm as f64);
    out.fig("verify_queries", np as f64);
    out
}
