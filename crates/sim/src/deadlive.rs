//! Scenario `dead-live`: a server that takes two sessions and answers 421
//! to the rest, with and without Postfix's rule that declares it dead
//! while its two sessions deliver (`<transport>_destination_dead_while_delivering`).
//!
//! Postfix's failed pseudo-cohort rule counts the 421s of the connections
//! beyond the server's limit; when they come between two successes of the
//! live sessions, the destination is declared dead and all its mail waits
//! for `minimal_backoff_time` and more, while the server was delivering.
//! The figures compare both settings and a really dead server (no session
//! ever opens), which both settings must still declare dead. Panics: never.

use super::engine::{OverLimit, Report, ServerModel, SimConfig, SimMessage};
use crate::harness::{dest, f, run, Output};
use sched::{SchedConfig, ThreeClass, Time, TransportConfig};
use std::collections::BTreeMap;
use std::time::Duration;

/// Runs the scenario.
pub fn dead_live(quick: bool, seed: u64) -> Output {
    let mut out = Output::new(
        "dead-live",
        &[
            "server",
            "dead_while_delivering",
            "delivered",
            "drain_s",
            "msgs_per_s",
            "bounced",
            "dead_events",
            "conn_failures",
            "deferrals",
            "avg_conc",
        ],
    );
    let n = if quick { 500 } else { 2_000 };
    let msgs: Vec<SimMessage> = (0..n)
        .map(|i| SimMessage {
            at: Time::ZERO,
            sender: format!("s{}@example.org", i % 20),
            size: 4000,
            rcpts: vec![0],
            tag: 0,
        })
        .collect();
    let d = || {
        vec![dest(
            "limited.example",
            vec![vec!["mx.limited.example".into()]],
        )]
    };
    for (label, dead_server) in [("2 sessions, 421 beyond", false), ("dead", true)] {
        for rule in [true, false] {
            let mut t = TransportConfig::new("smtp");
            t.dead_while_delivering = rule;
            let mut sc = SimConfig {
                sched: SchedConfig {
                    transports: vec![t],
                    ..SchedConfig::default()
                },
                seed,
                retry_deferred: true,
                track: Some("limited.example".into()),
                ..SimConfig::default()
            };
            sc.sched.seed = seed;
            sc.sched.maximal_queue_lifetime = Duration::from_secs(3600);
            sc.end = Time::from_secs(3 * 3600);
            // The server answers the greeting: 220 to two sessions, 421
            // to the rest, as fast.
            let server = ServerModel {
                greeting: Duration::from_millis(50),
                limit: Some(2),
                over_limit: OverLimit::Reply421,
                dead: dead_server,
                ..ServerModel::default()
            };
            let servers = BTreeMap::from([("mx.limited.example".to_string(), server)]);
            let r = run(sc, Box::new(ThreeClass), d(), servers, msgs.clone());
            let key = format!(
                "{}_{}",
                if dead_server { "dead" } else { "limited" },
                if rule { "postfix" } else { "live" }
            );
            row(&mut out, label, rule, &r);
            figures(&mut out, &key, &r);
            if !dead_server {
                out.check(&key, &r);
            } else {
                // A dead server's mail bounces at the lifetime, none is delivered.
                for e in &r.errors {
                    out.problems.push(format!("{key}: {e}"));
                }
            }
        }
    }
    out
}

fn drain(r: &Report) -> f64 {
    r.delivered_by_tag
        .get(&0)
        .map_or(f64::NAN, |x| x.1.as_secs_f64())
}

fn row(out: &mut Output, label: &str, rule: bool, r: &Report) {
    let delivered = r.delivered_by_tag.get(&0).map_or(0, |x| x.0);
    let t = drain(r);
    out.row(vec![
        label.into(),
        if rule { "yes (Postfix)" } else { "no" }.into(),
        delivered.to_string(),
        f(t),
        f(delivered as f64 / t.max(1e-9)),
        r.bounced.to_string(),
        r.dead.len().to_string(),
        r.conn_failures.to_string(),
        r.deferred.to_string(),
        f(r.conc_avg),
    ]);
}

fn figures(out: &mut Output, key: &str, r: &Report) {
    let delivered = r.delivered_by_tag.get(&0).map_or(0, |x| x.0);
    out.fig(&format!("{key}_delivered"), delivered as f64);
    out.fig(&format!("{key}_drain_s"), drain(r));
    out.fig(&format!("{key}_bounced"), r.bounced as f64);
    out.fig(&format!("{key}_dead_events"), r.dead.len() as f64);
    out.fig(
        &format!("{key}_first_dead_s"),
        r.dead.first().map_or(f64::NAN, |d| d.0.as_secs_f64()),
    );
    out.fig(&format!("{key}_conn_failures"), r.conn_failures as f64);
    out.fig(&format!("{key}_deferrals"), r.deferred as f64);
}
