//! Traffic-shaping scenarios: concurrency and rate adherence by policy
//! keys, and the ramp back after a reply-driven suspension.
//!
//! `shaping` sends bulk mail to three domains that one provider ("orange")
//! hosts on its MX hosts and to twenty other domains, from a pool of two
//! source addresses, under the seed's policy — (localip, grouping) at 20
//! connections, orange at 2 connections and 10 messages a second — once
//! with each rate algorithm; it reports the most connections ever open to
//! orange's hosts, orange's messages per second (mean, highest second, and
//! the share sent in the first tenth of each second, which tells a smooth
//! bucket from bursting windows) and when each part drained.
//! `shaping-ramp` has a provider ("yahoo") answer `421 4.7.0 [TS04]` for
//! ten seconds; a reply rule suspends (localip, grouping) for 60 s and then
//! ramps back by 25 % every 10 s; it reports the connections open to
//! yahoo's hosts over time. Panics: never.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use sched::{SchedConfig, ThreeClass, Time, TransportConfig};
use shaping::{
    Condition, Field, Grouping, KeyPolicy, Pattern, Policy, Props, Rate, RateAlgorithm,
    ReplyAction, ReplyRule, Source, Threshold,
};

use crate::engine::{Report, ServerModel, SimConfig, SimDest, SimMessage};
use crate::harness::{dest, f, run, Output};

fn pool() -> Source {
    Source {
        id: "pool1".into(),
        localip: ["127.0.0.2", "127.0.0.3"]
            .iter()
            .map(|a| a.parse::<IpAddr>().expect("literal"))
            .collect(),
        tenantid: vec![],
        senderdomain: vec![],
        grouping: vec![],
    }
}

fn grouping(id: &str, mx: &str) -> Grouping {
    Grouping {
        id: id.into(),
        remotemx: vec![Pattern(mx.into())],
        recipientdomains: vec![],
    }
}

fn per_grouping(conc: u32, rate: Option<Rate>, when: &str) -> KeyPolicy {
    KeyPolicy {
        fields: vec![Field::LocalIp, Field::Grouping],
        default: Props {
            concurrency: Some(20),
            ..Props::default()
        },
        conditions: vec![Condition {
            when: vec![(Field::Grouping, when.into())],
            then: Props {
                concurrency: Some(conc),
                rate,
                ..Props::default()
            },
        }],
    }
}

fn shaped_config(policy: Policy, seed: u64) -> SimConfig {
    let mut t = TransportConfig::new("smtp");
    t.source_pool = Some("pool1".into());
    let mut sc = SimConfig {
        sched: SchedConfig {
            transports: vec![t],
            shaping: Some(Arc::new(policy)),
            ..SchedConfig::default()
        },
        seed,
        record: true,
        ..SimConfig::default()
    };
    sc.sched.seed = seed;
    sc
}

/// Most connections open at once to hosts whose name ends in `suffix`.
fn peak(r: &Report, suffix: &str) -> i64 {
    let (mut now, mut most) = (0i64, 0i64);
    for (_, host, d) in &r.conn_events {
        if host.ends_with(suffix) {
            now += i64::from(*d);
            most = most.max(now);
        }
    }
    most
}

/// Connections open to `suffix`'s hosts at time `t`.
fn open_at(r: &Report, suffix: &str, t: Time) -> i64 {
    r.conn_events
        .iter()
        .filter(|(at, h, _)| *at <= t && h.ends_with(suffix))
        .map(|(_, _, d)| i64::from(*d))
        .sum()
}

/// The `shaping` scenario.
pub fn shaping(quick: bool, seed: u64) -> Output {
    let mut out = Output::new(
        "shaping",
        &[
            "algorithm",
            "orange_peak_conns",
            "orange_msgs_per_s",
            "orange_max_second",
            "first_tenth_pct",
            "orange_drain_s",
            "others_drain_s",
        ],
    );
    let (per_domain, others) = if quick { (200, 20) } else { (1_000, 20) };
    let mut dests: Vec<SimDest> = ["orange.sim", "wanadoo.sim", "voila.sim"]
        .iter()
        .enumerate()
        .map(|(i, d)| dest(d, vec![vec![format!("in{i}.mx.orange.sim")]]))
        .collect();
    for i in 0..others {
        dests.push(dest(
            &format!("o{i}.sim"),
            vec![vec![format!("mx.o{i}.sim")]],
        ));
    }
    let mut msgs = Vec::new();
    for (d, _) in dests.iter().enumerate() {
        let n = if d < 3 {
            per_domain
        } else {
            per_domain * 3 / others
        };
        for k in 0..n {
            msgs.push(SimMessage {
                at: Time(0),
                sender: format!("bulk{}@sender.sim", k % 7),
                size: 4000,
                rcpts: vec![d as u32],
                tag: u32::from(d >= 3),
            });
        }
    }
    let fast = ServerModel {
        per_txn: Duration::from_millis(50),
        per_rcpt: Duration::from_millis(10),
        ..ServerModel::default()
    };
    let servers: BTreeMap<String, ServerModel> = dests
        .iter()
        .flat_map(|d| d.hosts.iter().flatten().cloned())
        .map(|h| (h, fast.clone()))
        .collect();
    for (name, algorithm) in [
        ("tokenbucket", RateAlgorithm::TokenBucket),
        ("fixedwindow", RateAlgorithm::FixedWindow),
    ] {
        let policy = Policy {
            algorithm,
            groupings: vec![grouping("orange", "*.mx.orange.sim")],
            sources: vec![pool()],
            policies: vec![per_grouping(
                2,
                Some(Rate {
                    tokens: 10,
                    per: Duration::from_secs(1),
                }),
                "orange",
            )],
            ..Policy::default()
        };
        let r = run(
            shaped_config(policy, seed),
            Box::new(ThreeClass),
            dests.clone(),
            servers.clone(),
            msgs.clone(),
        );
        out.check(name, &r);
        let orange: Vec<Time> = r
            .sends
            .iter()
            .filter(|(_, h)| h.ends_with(".mx.orange.sim"))
            .map(|(t, _)| *t)
            .collect();
        let last = orange.last().copied().unwrap_or(Time::ZERO);
        let mut seconds: BTreeMap<u64, u64> = BTreeMap::new();
        for t in &orange {
            *seconds.entry(t.0 / 1000).or_default() += 1;
        }
        // Whole seconds after the first (the full buckets' burst) and
        // before the last (a partial second).
        let steady: Vec<u64> = seconds
            .iter()
            .filter(|(s, _)| **s >= 1 && **s < last.0 / 1000)
            .map(|(_, n)| *n)
            .collect();
        let mean = steady.iter().sum::<u64>() as f64 / steady.len().max(1) as f64;
        let max_second = steady.iter().copied().max().unwrap_or(0);
        let first_tenth = orange.iter().filter(|t| t.0 % 1000 < 100).count() as f64;
        let first_tenth_pct = 100.0 * first_tenth / orange.len().max(1) as f64;
        let others_end = r.delivered_by_tag.get(&1).map_or(Time::ZERO, |x| x.1);
        let p = peak(&r, ".mx.orange.sim");
        out.row(vec![
            name.into(),
            p.to_string(),
            f(mean),
            max_second.to_string(),
            f(first_tenth_pct),
            f(last.as_secs_f64()),
            f(others_end.as_secs_f64()),
        ]);
        out.fig(&format!("{name}_orange_peak_connections"), p as f64);
        out.fig(&format!("{name}_orange_msgs_per_s"), mean);
        out.fig(&format!("{name}_orange_max_second"), max_second as f64);
        out.fig(&format!("{name}_first_tenth_pct"), first_tenth_pct);
        out.fig(&format!("{name}_orange_drain_s"), last.as_secs_f64());
        out.fig(&format!("{name}_others_drain_s"), others_end.as_secs_f64());
        out.fig(&format!("{name}_orange_sent"), orange.len() as f64);
    }
    out
}

/// The `shaping-ramp` scenario.
pub fn ramp(quick: bool, seed: u64) -> Output {
    let mut out = Output::new("shaping-ramp", &["t_s", "yahoo_conns", "other_conns"]);
    let n = if quick { 3_000 } else { 10_000 };
    let dests = vec![
        dest("yahoo.sim", vec![vec!["mta5.am0.yahoodns.sim".into()]]),
        dest("other.sim", vec![vec!["mx.other.sim".into()]]),
    ];
    let msgs: Vec<SimMessage> = (0..n)
        .map(|i| SimMessage {
            at: Time(u64::from(i) * 20),
            sender: "bulk@sender.sim".into(),
            size: 4000,
            rcpts: vec![i % 2],
            tag: i % 2,
        })
        .collect();
    let slow = ServerModel {
        per_txn: Duration::from_millis(400),
        per_rcpt: Duration::from_millis(100),
        ..ServerModel::default()
    };
    let mut servers = BTreeMap::new();
    servers.insert(
        "mta5.am0.yahoodns.sim".to_string(),
        ServerModel {
            defer_window: Some((
                Time::from_secs(20),
                Time::from_secs(30),
                "421 4.7.0 [TS04] Messages from 127.0.0.2 temporarily deferred".into(),
            )),
            ..slow.clone()
        },
    );
    servers.insert("mx.other.sim".to_string(), slow);
    let policy = Policy {
        groupings: vec![grouping("yahoo", "*.yahoodns.sim")],
        sources: vec![Source {
            localip: vec!["127.0.0.2".parse().expect("literal")],
            ..pool()
        }],
        policies: vec![per_grouping(8, None, "yahoo")],
        replies: vec![ReplyRule {
            pattern: regex::Regex::new(r"\[TS04\]").expect("literal"),
            threshold: Threshold::Immediate,
            fields: vec![Field::LocalIp, Field::Grouping],
            when: vec![(Field::Grouping, "yahoo".into())],
            action: ReplyAction::Suspend,
            duration: Duration::from_secs(60),
            ramp_step_percent: 25,
            ramp_interval: Duration::from_secs(10),
        }],
        ..Policy::default()
    };
    let mut sc = shaped_config(policy, seed);
    sc.retry_deferred = true;
    let r = run(sc, Box::new(ThreeClass), dests, servers, msgs);
    out.check("shaping-ramp", &r);
    let first_ts04 = r
        .sends
        .iter()
        .find(|(t, h)| h.contains("yahoo") && *t >= Time::from_secs(20))
        .map_or(Time::ZERO, |(t, _)| *t);
    for s in (0..=140).step_by(5) {
        let t = Time::from_secs(s);
        out.row(vec![
            s.to_string(),
            open_at(&r, ".yahoodns.sim", t).to_string(),
            open_at(&r, "mx.other.sim", t).to_string(),
        ]);
    }
    // The most connections open in each phase, from the first [TS04] on.
    let most = |from: u64, to: u64| {
        let mut now = open_at(&r, ".yahoodns.sim", Time(from));
        let mut m = now;
        for (at, h, d) in &r.conn_events {
            if at.0 > from && at.0 < to && h.ends_with(".yahoodns.sim") {
                now += i64::from(*d);
                m = m.max(now);
            }
        }
        m
    };
    let t0 = first_ts04.0;
    let held = t0 + 60_000;
    out.fig("suspended_at_s", first_ts04.as_secs_f64());
    out.fig("before_peak", most(10_000, 20_000) as f64);
    out.fig("during_suspension_peak", most(t0 + 2_000, held) as f64);
    for (k, step) in [(1, "25"), (2, "50"), (3, "75"), (4, "100")] {
        let from = held + (k - 1) * 10_000;
        out.fig(
            &format!("ramp_{step}pct_peak"),
            most(from, from + 10_000) as f64,
        );
    }
    let other_sent = r
        .sends
        .iter()
        .filter(|(t, h)| h == "mx.other.sim" && t.0 > t0 && t.0 < held)
        .count();
    out.fig("other_sent_during_suspension", other_sent as f64);
    out
}
