//! Benchmark workload: 100,000 destinations and 1,000,000 queued recipients.
//!
//! `load` fills a scheduler with single-recipient messages (the worst case
//! for memory per recipient) spread over the destinations; `drain` then
//! answers every `Open` and `Start` at once so that only the scheduler's own
//! work is measured. The caller times `drain` (the library reads no clock).
//! Panics: never.

use sched::{
    Action, Event, NewMessage, QueueId, RcptStatus, RecipientGroup, SchedConfig, Scheduler, Time,
    TransportConfig,
};
use std::collections::VecDeque;

/// A scheduler configured for the benchmark.
pub fn scheduler(recipients: u32) -> Scheduler {
    let mut t = TransportConfig::new("smtp");
    t.process_limit = 1000;
    t.recipient_limit = recipients;
    let cfg = SchedConfig {
        transports: vec![t],
        qmgr_message_active_limit: recipients,
        qmgr_message_recipient_limit: recipients,
        ..SchedConfig::default()
    };
    Scheduler::new(cfg).expect("bench config is valid")
}

/// The destinations' names and host lists (built before memory is measured).
pub struct Inputs {
    names: Vec<String>,
    hosts: Vec<Vec<Vec<String>>>,
}

/// Builds the inputs for `dests` destinations.
pub fn inputs(dests: u32) -> Inputs {
    Inputs {
        names: (0..dests).map(|d| format!("d{d}.example")).collect(),
        hosts: (0..dests)
            .map(|d| vec![vec![format!("mx.d{d}.example")]])
            .collect(),
    }
}

/// Adds `recipients` single-recipient messages over the destinations;
/// returns the `Open` and `Start` actions still to answer.
pub fn load(s: &mut Scheduler, inp: &Inputs, recipients: u32) -> Vec<Action> {
    let (names, hosts) = (&inp.names, &inp.hosts);
    let dests = names.len() as u32;
    let mut keep = Vec::new();
    for i in 0..recipients {
        let q = QueueId(u64::from(i));
        let m = NewMessage {
            queue_id: q,
            sender: format!("s{}@example.org", i % 1000),
            tenant: None,
            job: None,
            size: 2000,
            arrival: Time::ZERO,
            attempts: 0,
            recipients: 1,
        };
        let _ = s.handle(Time::ZERO, Event::MessageAdded(m));
        let d = (i % dests) as usize;
        let g = RecipientGroup {
            domain: String::new(),
            transport: "smtp".into(),
            nexthop: names[d].clone(),
            hosts: hosts[d].clone(),
            recipients: vec![0],
        };
        let _ = s.handle(
            Time::ZERO,
            Event::RecipientsRead {
                queue_id: q,
                groups: vec![g],
                remaining: 0,
            },
        );
        // Opens and starts are answered in `drain`; keep only those.
        while let Some(a) = s.poll_action() {
            if matches!(a, Action::Open { .. } | Action::Start { .. }) {
                keep.push(a);
            }
        }
    }
    keep
}

/// Answers `pending` and everything that follows until nothing is queued;
/// returns the number of events handled.
pub fn drain(s: &mut Scheduler, pending: Vec<Action>) -> u64 {
    let mut work: VecDeque<Action> = pending.into();
    let mut now = Time(1);
    let mut events = 0;
    loop {
        while let Some(a) = s.poll_action() {
            work.push_back(a);
        }
        let Some(a) = work.pop_front() else {
            match s.poll_timeout() {
                Some(t) if s.entries_in_memory() > 0 => {
                    now = now.max(t);
                    s.handle_timeout(now);
                    continue;
                }
                _ => break,
            }
        };
        let ev = match a {
            Action::Open { conn, .. } => Event::ConnectionOpened { conn },
            Action::Start {
                conn,
                entry,
                recipients,
                ..
            } => Event::DeliveryDone {
                conn,
                entry,
                results: recipients
                    .into_iter()
                    .map(|r| (r, RcptStatus::Delivered))
                    .collect(),
                conn_failed: false,
                remote: Vec::new(),
            },
            _ => continue,
        };
        events += 1;
        now = Time(now.0 + 1);
        let _ = s.handle(now, ev);
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bench_drains_everything() {
        let mut s = scheduler(2_000);
        let pending = load(&mut s, &inputs(100), 2_000);
        assert!(!pending.is_empty());
        let events = drain(&mut s, pending);
        assert!(events >= 2_000, "a start and a done per recipient at least");
        assert_eq!(s.entries_in_memory(), 0);
        assert_eq!(s.messages_in_memory(), 0);
        assert!(s.stats().decisions >= 2_000);
    }
}
