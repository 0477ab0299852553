use std::time::Duration;

use queue::Record;
use sched::Time;

use crate::testkit::{settings, World, T0};
use crate::Event;

/// The next attempts journaled for a message, in order.
fn next_attempts(w: &World, id: mail::QueueId) -> Vec<u64> {
    w.records(id)
        .iter()
        .filter_map(|r| match r {
            Record::Deferred { next_attempt, .. } => Some(*next_attempt),
            _ => None,
        })
        .collect()
}

#[test]
fn a_delivered_message_is_journaled_and_removed() {
    let mut w = World::new(settings());
    let id = w.arrive("a@a.example", &["r1@b.example", "r2@c.example"]);
    w.settle(|_| 250);
    let recs = w.records(id);
    let delivered: Vec<u32> = recs
        .iter()
        .flat_map(|r| match r {
            Record::Delivered { rcpts, .. } => rcpts.clone(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(delivered.len(), 2);
    assert!(matches!(recs.last(), Some(Record::Removed { .. })));
    assert_eq!(w.removed, [id]);
    assert!(w.logged(&format!("{id}: removed")));
}

#[test]
fn inline_data_goes_to_the_agent_by_reference_and_its_segment_is_kept_meanwhile() {
    let mut w = World::new(settings());
    let id = w.arrive("a@a.example", &["r@b.example"]);
    let head = match w.records(id).first() {
        Some(Record::Arrived(h)) => h.clone(),
        other => panic!("{other:?}"),
    };
    let queue::DataRef::Inline(bytes) = &head.data else {
        panic!("inline");
    };
    w.route_all(&[]);
    // Open, then the transaction.
    w.deliver_all(|_| 450);
    let sends: Vec<_> = w
        .history
        .iter()
        .filter_map(|(_, a)| match a {
            crate::testkit::Asked::Agent(ipc::delivery::Request::Send { txn, .. }) => {
                Some(txn.data.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(sends.len(), 1);
    let ipc::delivery::Data::Journal(span) = &sends[0] else {
        panic!("a journal span, got {:?}", sends[0]);
    };
    assert_eq!(span.len as usize, bytes.len());
    // Deferred and out of delivery: only its live head pins the journal.
    let pinned_live = w.qm.state().refs.delete_below(u32::MAX);
    let at = next_attempts(&w, id)[0];
    w.run_until(Time(at * 1000));
    w.route_all(&[]);
    // In delivery again, restated at the head: the span is the head's
    // as read, and its segment stays pinned until the message is done.
    assert!(w.qm.is_active(&id));
    w.deliver_all(|_| 250);
    assert!(!w.live(id));
    assert_eq!(
        w.qm.state().refs.delete_below(u32::MAX),
        u32::MAX,
        "nothing pinned once the message is gone (was {pinned_live})"
    );
}

#[test]
fn back_off_doubles_from_one_retry_to_the_next() {
    let mut w = World::new(settings());
    let id = w.arrive("a@a.example", &["r@b.example"]);
    w.settle(|_| 450);
    let first = next_attempts(&w, id);
    assert_eq!(first.len(), 1);
    // minimal_backoff_time (300 s) after the attempt, never earlier.
    assert!(first[0] * 1000 >= T0.0 + 300_000, "{first:?}");
    w.run_until(Time(first[0] * 1000 - 1));
    assert!(w.router.is_empty(), "not before its next attempt");
    w.run_until(Time(first[0] * 1000));
    w.settle(|_| 450);
    let both = next_attempts(&w, id);
    assert_eq!(both.len(), 2);
    // The second wait is twice the first: the attempt count reaches
    // the scheduler (it was always 0, so every wait was the minimum).
    let (wait1, wait2) = (first[0] * 1000 - T0.0, both[1] * 1000 - first[0] * 1000);
    assert!(wait2 >= 2 * wait1 - 1000, "waits {wait1} then {wait2} ms");
}

#[test]
fn a_lost_agent_defers_what_it_had_and_nothing_is_lost() {
    let mut w = World::new(settings());
    let id = w.arrive("a@a.example", &["r@b.example"]);
    w.route_all(&[]);
    // The agent opens the connection, then dies holding the transaction.
    let (t, request, body) = w.agent.pop_front().unwrap();
    let ipc::delivery::Request::Open { conn, .. } = body else {
        panic!("an open first, got {body:?}");
    };
    w.handle(Event::AgentAnswer {
        transport: t.clone(),
        request: Some(request),
        response: ipc::delivery::Response::Opened {
            conn,
            relay: "mx".into(),
        },
    });
    assert!(matches!(
        w.agent.front(),
        Some((_, _, ipc::delivery::Request::Send { .. }))
    ));
    w.agent.clear();
    w.handle(Event::AgentLost { transport: t });
    w.settle(|_| 250);
    assert!(w.live(id), "deferred, not lost");
    assert!(w
        .records(id)
        .iter()
        .any(|r| matches!(r, Record::Deferred { reason, .. } if reason.contains("died"))));
    let at = next_attempts(&w, id)[0];
    w.run_until(Time(at * 1000));
    w.settle(|_| 250);
    assert!(!w.live(id), "delivered on the next attempt");
}

#[test]
fn an_answer_for_a_forgotten_connection_delivers_nothing() {
    let mut w = World::new(settings());
    let id = w.arrive("a@a.example", &["r@b.example"]);
    w.route_all(&[]);
    w.deliver_all(|_| 250);
    assert!(!w.live(id));
    let before = w.qm.store().records().count();
    // A late answer about connection 1 after it was closed.
    w.handle(Event::AgentAnswer {
        transport: "smtp".into(),
        request: None,
        response: ipc::delivery::Response::Sent {
            conn: 1,
            results: vec![ipc::delivery::RcptResult {
                index: 0,
                status: mail::Status::new(mail::StatusCode::known(2, 0, 0), "ok"),
                remote: None,
            }],
            conn_failed: false,
            handoff: ipc::delivery::Handoff::Relayed,
        },
    });
    assert_eq!(w.qm.store().records().count(), before);
    w.wait(Duration::from_secs(1));
}

/// Messages to one destination whose first connection is not open
/// yet: one entry is set aside for it, the others wait in their class
/// queues.
fn queued_by_tenant(messages: &[(&str, Option<&str>)]) -> [usize; 3] {
    let mut sched = sched::SchedConfig::default();
    let t = &mut sched.transports[0];
    t.scheduler_class_key = sched::ClassKey::Tenant;
    t.sender_class_thresholds = [2, 1000];
    t.initial_destination_concurrency = 1;
    t.destination_concurrency_limit = 1;
    let mut w = World::with_sched(settings(), sched);
    for (sender, tenant) in messages {
        w.arrive_as(sender, &["r@d.example"], *tenant, Some("job-1"));
    }
    w.route_all(&[]);
    let s = w.qm.scheduler();
    let d = s.dest_id(sched::TransportId(0), "d.example").expect("dest");
    s.queued(d)
}

#[test]
fn scheduler_class_key_tenant_keys_classes_on_the_envelope_tenant() {
    // One sender, four tenants: four keys, each with one (small) entry.
    let one_sender: Vec<_> = ["t0", "t1", "t2", "t3"]
        .iter()
        .map(|t| ("a@x.example", Some(*t)))
        .collect();
    assert_eq!(queued_by_tenant(&one_sender), [3, 0, 0]);
    // Without tenants they share the empty tenant's key: the third and
    // fourth entries are past its small threshold.
    let none: Vec<_> = (0..4).map(|_| ("a@x.example", None)).collect();
    assert_eq!(queued_by_tenant(&none), [1, 2, 0]);
    // Four senders, one tenant: one key, as if one sender.
    let one_tenant: Vec<_> = ["a@x.example", "b@y.example", "c@z.example", "d@w.example"]
        .iter()
        .map(|s| (*s, Some("acme")))
        .collect();
    assert_eq!(queued_by_tenant(&one_tenant), [1, 2, 0]);
}
