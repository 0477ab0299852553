//! What a replay takes from the snapshot and the configuration beside the
//! queue itself: holds in force, a proposed policy file's suspensions, a
//! proposal's routes, the time new mail takes to reach the scheduler.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ipc::queuectl::{HoldView, SnapDest, SnapMessage, SnapRcpt, Snapshot};
use sched::{SchedConfig, TransportConfig};

use crate::replay::{Arrival, Forecast, Replay, Routes};

const NOW: u64 = 1_000_000_000;

/// `n` queued messages to each of `domains`, each its own next hop, whose
/// counters show 0.1 s transactions.
fn snapshot(n: u32, domains: &[&str]) -> Snapshot {
    let mut messages = Vec::new();
    for d in domains {
        for i in 0..n {
            messages.push(SnapMessage {
                id: format!("{d}{i}"),
                arrival_ms: NOW - 1000,
                sender: format!("bulk@{d}"),
                size: 2048,
                active: true,
                recipients: vec![SnapRcpt {
                    domain: d.to_string(),
                    transport: "smtp".into(),
                    nexthop: d.to_string(),
                    count: 1,
                }],
                ..SnapMessage::default()
            });
        }
    }
    Snapshot {
        now_ms: NOW,
        messages,
        destinations: domains
            .iter()
            .map(|d| SnapDest {
                transport: "smtp".into(),
                nexthop: d.to_string(),
                window: 5,
                txn_ms: vec![(100, 1); 32],
                greeting_ms: vec![5; 4],
                replies: [32, 0, 0, 0],
                ..SnapDest::default()
            })
            .collect(),
        ..Snapshot::default()
    }
}

fn sched(limit: u32, policy: Option<&str>) -> SchedConfig {
    let mut t = TransportConfig::new("smtp");
    t.destination_concurrency_limit = limit;
    SchedConfig {
        transports: vec![t],
        shaping: policy.map(|p| Arc::new(shaping::Policy::parse("policy.yaml", p).unwrap())),
        ..SchedConfig::default()
    }
}

fn last(f: &Forecast, sender: &str) -> Option<f64> {
    f.senders.iter().find(|s| s.name == sender)?.last
}

const POLICY: &str = "policies:\n  - fields: [recipientdomain]\n    default: { concurrency: 20 }\n";

#[test]
fn a_suspension_in_force_at_the_snapshot_holds_its_mail_until_its_end() {
    let mut snap = snapshot(50, &["a.example", "b.example"]);
    // An operator's suspension of a.example with 20 s left.
    snap.holds_saved = format!(
        "1\toperator\t{}\trecipientdomain=a.example\t-\t-\tmaintenance\n",
        NOW + 20_000
    );
    snap.holds = vec![HoldView {
        id: 1,
        origin: "operator".into(),
        when: "recipientdomain=a.example".into(),
        remaining: Some(20),
        action: "suspend".into(),
        ramping: false,
        tag: "maintenance".into(),
    }];
    let running = sched(5, Some(POLICY));
    let r = Replay::new(&[snap], &[], &running, &Routes::default());
    assert!(
        r.assumptions
            .iter()
            .any(|a| a.contains("operator recipientdomain=a.example")),
        "{:?}",
        r.assumptions
    );
    let f = r.run(running, Duration::from_secs(600)).unwrap();
    assert!(f.errors.is_empty(), "{:?}", f.errors);
    let (a, b) = (
        last(&f, "bulk@a.example").unwrap(),
        last(&f, "bulk@b.example").unwrap(),
    );
    assert!(a >= 20.0, "a.example waits for the end of its hold: {a}");
    assert!(b < 5.0, "b.example is not held: {b}");
    // Without a policy file there is nothing to hold by, and that is said.
    let plain = sched(5, None);
    let mut snap = snapshot(50, &["a.example"]);
    snap.holds_saved = format!(
        "1\toperator\t{}\trecipientdomain=a.example\t-\t-\t\n",
        NOW + 20_000
    );
    let r = Replay::new(&[snap], &[], &plain, &Routes::default());
    let f = r.run(plain, Duration::from_secs(600)).unwrap();
    assert!(last(&f, "bulk@a.example").unwrap() < 5.0);
    assert!(
        f.notes.iter().any(|n| n.contains("no policy file")),
        "{:?}",
        f.notes
    );
}

#[test]
fn a_proposed_policy_files_suspension_holds_its_mail_and_is_said() {
    let snap = snapshot(20, &["a.example", "b.example"]);
    let running = sched(5, Some(POLICY));
    let proposed = sched(
        5,
        Some(&format!(
            "{POLICY}suspensions:\n  - if: {{ recipientdomain: b.example }}\n    tag: complaint\n"
        )),
    );
    let r = Replay::new(&[snap], &[], &running, &Routes::default());
    let now = r.run(running, Duration::from_secs(600)).unwrap();
    let then = r.run(proposed, Duration::from_secs(600)).unwrap();
    assert_eq!(now.unfinished, 0);
    assert!(now.drain_secs.is_some());
    assert_eq!(then.unfinished, 20, "b.example's mail waits: {then:?}");
    assert!(then.drain_secs.is_none());
    assert!(last(&then, "bulk@a.example").is_some());
    assert!(
        then.notes
            .iter()
            .any(|n| n.contains("suspension of recipientdomain=b.example")),
        "{:?}",
        then.notes
    );
}

#[test]
fn a_proposal_routing_a_domain_elsewhere_moves_its_recipients_there() {
    let snap = snapshot(100, &["a.example", "b.example"]);
    let running = sched(5, None);
    let moved = Routes {
        unrouted: BTreeMap::new(),
        moved: [(
            "b.example".to_string(),
            ("smtp".to_string(), "[new.example]".to_string()),
        )]
        .into(),
    };
    let now = Replay::new(
        std::slice::from_ref(&snap),
        &[],
        &running,
        &Routes::default(),
    );
    let then = Replay::new(&[snap], &[], &running, &moved);
    let text = then.assumptions.join("\n");
    assert!(
        text.contains("b.example (100) to smtp:[new.example]"),
        "{text}"
    );
    assert!(
        text.contains("without samples") && text.contains("[new.example]"),
        "the new next hop has no samples: {text}"
    );
    let f_now = now.run(running.clone(), Duration::from_secs(600)).unwrap();
    let f_then = then.run(running, Duration::from_secs(600)).unwrap();
    // 100 transactions of 0.1 s on 5 connections each; b.example's at
    // the new next hop at the assumed 0.2 s.
    let (b_now, b_then) = (
        last(&f_now, "bulk@b.example").unwrap(),
        last(&f_then, "bulk@b.example").unwrap(),
    );
    assert!((1.8..2.6).contains(&b_now), "{b_now}");
    assert!((3.6..5.0).contains(&b_then), "{b_then}");
    let a = last(&f_then, "bulk@a.example").unwrap();
    assert!((1.8..2.6).contains(&a), "a.example goes where it went: {a}");
}

#[test]
fn new_mail_is_scheduled_as_long_after_its_arrival_as_measured() {
    let mut snap = snapshot(1, &["a.example"]);
    let running = sched(5, None);
    let add = [Arrival::parse("5,small@x.example,s@a.example,1,0").unwrap()];
    let at_once = Replay::new(
        std::slice::from_ref(&snap),
        &add,
        &running,
        &Routes::default(),
    );
    snap.pickup_ms = vec![300; 20];
    let measured = Replay::new(&[snap], &add, &running, &Routes::default());
    assert_eq!(measured.pickup, Duration::from_millis(300));
    assert!(
        measured.assumptions.iter().any(|a| a.contains("300 ms")),
        "{:?}",
        measured.assumptions
    );
    let p50 = |r: &Replay| {
        let f = r.run(running.clone(), Duration::from_secs(60)).unwrap();
        f.senders
            .iter()
            .find(|s| s.name == "small@x.example")
            .unwrap()
            .p50
    };
    let (a, b) = (p50(&at_once), p50(&measured));
    assert!((b - a - 0.3).abs() < 0.05, "{a} then {b}");
}

#[test]
fn transactions_under_way_at_the_snapshot_finish_what_they_had_left() {
    let running = sched(5, None);
    let last_of = |snap: Snapshot| {
        let r = Replay::new(&[snap], &[], &running, &Routes::default());
        let f = r.run(running.clone(), Duration::from_secs(60)).unwrap();
        last(&f, "bulk@a.example").unwrap()
    };
    let cold = last_of(snapshot(5, &["a.example"]));
    let mut snap = snapshot(5, &["a.example"]);
    // Five transactions of 0.1 s had run 0.09 s.
    snap.destinations[0].running_ms = vec![90; 5];
    let warm = last_of(snap);
    assert!(cold > 0.1, "opened, greeted, then 0.1 s: {cold}");
    assert!(warm < 0.02, "0.01 s left of each: {warm}");
}

#[test]
fn transactions_under_way_are_aged_from_the_moment_of_their_own_page() {
    let running = sched(5, None);
    let last_of = |pages: &[Snapshot]| {
        let r = Replay::new(pages, &[], &running, &Routes::default());
        let f = r.run(running.clone(), Duration::from_secs(60)).unwrap();
        last(&f, "bulk@a.example").unwrap()
    };
    // Five transactions of 0.1 s had run 0.09 s when the destinations'
    // page was taken, 0.05 s after the messages' page (the snapshot's
    // moment): at that moment they had 0.06 s left, not 0.01 s.
    let mut snap = snapshot(5, &["a.example"]);
    let mut dests = Snapshot {
        now_ms: NOW + 50,
        destinations: std::mem::take(&mut snap.destinations),
        ..Snapshot::default()
    };
    dests.destinations[0].running_ms = vec![90; 5];
    let at = last_of(&[snap, dests]);
    assert!((0.055..0.07).contains(&at), "0.06 s left of each: {at}");
}

#[test]
fn under_another_limit_the_running_transactions_phase_is_drawn_not_replayed() {
    // Five transactions of 0.1 s under way at the limit of 5, all about to
    // end or all just begun. Replayed at 5 they end where they were; a
    // configuration at 10 takes effect when it is loaded, so where its
    // connections are in their transactions then is drawn (the same
    // draws for both snapshots), and the two forecasts are one.
    let running = sched(5, None);
    let forecast = |age: u32, limit: u32| {
        let mut snap = snapshot(200, &["a.example"]);
        snap.destinations[0].running_ms = vec![age; 5];
        let add = [Arrival::parse("30,small@x.example,s@a.example,0.02,0.03").unwrap()];
        let r = Replay::new(&[snap], &add, &running, &Routes::default());
        let f = r.run(sched(limit, None), Duration::from_secs(60)).unwrap();
        let small = f.senders.iter().find(|s| s.name == "small@x.example");
        (small.unwrap().p50, last(&f, "bulk@a.example").unwrap())
    };
    let (ending, begun) = (forecast(99, 5), forecast(1, 5));
    assert!(
        begun.0 > ending.0 + 0.05,
        "at the running limit the phase is the snapshot's: {ending:?} {begun:?}"
    );
    assert_eq!(forecast(99, 10), forecast(1, 10));
}
