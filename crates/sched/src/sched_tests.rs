//! Unit tests of the scheduler core, driven event by event.

use super::*;
use crate::config::TransportConfig;
use crate::event::{ConnFailure, Notice};
use crate::limiter::{Algorithm, LimitRule, Scope};

fn cfg() -> SchedConfig {
    SchedConfig::default()
}

fn add(s: &mut Scheduler, now: Time, q: u64, sender: &str, rcpts: u32) {
    s.handle(
        now,
        Event::MessageAdded(NewMessage {
            queue_id: QueueId(q),
            sender: sender.into(),
            tenant: None,
            job: None,
            size: 1000,
            arrival: now,
            attempts: 0,
            recipients: rcpts,
        }),
    )
    .unwrap();
}

fn group(nexthop: &str, hosts: &[&[&str]], rcpts: Vec<u32>) -> RecipientGroup {
    RecipientGroup {
        domain: String::new(),
        transport: "smtp".into(),
        nexthop: nexthop.into(),
        hosts: hosts
            .iter()
            .map(|l| l.iter().map(|h| h.to_string()).collect())
            .collect(),
        recipients: rcpts,
    }
}

fn actions(s: &mut Scheduler) -> Vec<Action> {
    std::iter::from_fn(|| s.poll_action()).collect()
}

/// Adds a message and answers its read with all recipients to `nexthop`.
fn add_read(
    s: &mut Scheduler,
    now: Time,
    q: u64,
    sender: &str,
    nexthop: &str,
    rcpts: u32,
) -> Vec<Action> {
    add(s, now, q, sender, rcpts);
    let mut out = Vec::new();
    let mut reads = 0;
    loop {
        let acts = actions(s);
        let mut again = false;
        for a in acts {
            if let Action::ReadRecipients { queue_id, max } = a {
                let start = reads;
                let n = max.min(rcpts - reads);
                reads += n;
                s.handle(
                    now,
                    Event::RecipientsRead {
                        queue_id,
                        groups: vec![group(nexthop, &[&["mx1"]], (start..start + n).collect())],
                        remaining: rcpts - reads,
                    },
                )
                .unwrap();
                again = true;
            } else {
                out.push(a);
            }
        }
        if !again {
            return out;
        }
    }
}

fn opens(a: &[Action]) -> Vec<ConnId> {
    a.iter()
        .filter_map(|x| {
            if let Action::Open { conn, .. } = x {
                Some(*conn)
            } else {
                None
            }
        })
        .collect()
}

fn starts(a: &[Action]) -> Vec<(ConnId, EntryId, Vec<u32>)> {
    a.iter()
        .filter_map(|x| {
            if let Action::Start {
                conn,
                entry,
                recipients,
                ..
            } = x
            {
                Some((*conn, *entry, recipients.clone()))
            } else {
                None
            }
        })
        .collect()
}

/// Fails every connection (including those opened meanwhile) until none is left.
fn fail_all(s: &mut Scheduler, now: Time, failure: ConnFailure) -> Vec<Action> {
    let mut all = Vec::new();
    loop {
        let Some(c) = s.conns.iter().map(|(c, _)| c).next() else {
            break;
        };
        s.handle(
            now,
            Event::ConnectionFailed {
                conn: c,
                failure,
                status: Status::new(StatusCode::SYSTEM_TEMP, "failed"),
                remote: None,
            },
        )
        .unwrap();
        all.extend(actions(s));
    }
    all
}

fn ok(r: &[u32]) -> Vec<(u32, RcptStatus)> {
    r.iter().map(|&i| (i, RcptStatus::Delivered)).collect()
}

#[test]
fn one_message_full_lifecycle() {
    let mut s = Scheduler::new(cfg()).unwrap();
    let a = add_read(&mut s, Time(0), 1, "a@x", "example.org", 1);
    let c = opens(&a);
    assert_eq!(c.len(), 1);
    s.handle(Time(10), Event::ConnectionOpened { conn: c[0] })
        .unwrap();
    let st = starts(&actions(&mut s));
    assert_eq!(st.len(), 1);
    let (conn, e, r) = st[0].clone();
    s.handle(
        Time(20),
        Event::DeliveryDone {
            conn,
            entry: e,
            results: ok(&r),
            conn_failed: false,
            remote: Vec::new(),
        },
    )
    .unwrap();
    let a = actions(&mut s);
    assert!(a.contains(&Action::Journal(Record::Delivered {
        queue_id: QueueId(1),
        recipients: vec![0]
    })));
    assert!(a.contains(&Action::MessageDone {
        queue_id: QueueId(1),
        next_attempt: None
    }));
    assert_eq!(s.messages_in_memory(), 0);
    // The connection is cached, then closed by the idle timer.
    assert_eq!(s.connections(), 1);
    let t = s.poll_timeout().unwrap();
    assert!(t <= Time(20) + Duration::from_secs(2));
    s.handle_timeout(Time(20) + Duration::from_secs(2));
    assert!(actions(&mut s).contains(&Action::Close {
        conn,
        release: None
    }));
    assert_eq!(s.connections(), 0);
    s.check_invariants().unwrap();
}

#[test]
fn entries_split_by_destination_recipient_limit_and_window_caps_connections() {
    let mut c = cfg();
    c.transports[0].destination_recipient_limit = 2;
    c.transports[0].connection_backlog_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    let a = add_read(&mut s, Time(0), 1, "list@x", "big.example", 40);
    assert_eq!(s.entries_in_memory(), 20);
    // Initial concurrency 5: five connections, no more.
    assert_eq!(opens(&a).len(), 5);
    let d = s.dest_id(TransportId(0), "big.example").unwrap();
    assert_eq!(s.dest_busy(d), Some(5));
    assert_eq!(s.window(d), Some(5));
    s.check_invariants().unwrap();
}

#[test]
fn recipient_slots_read_big_message_in_batches_without_starving_others() {
    let mut c = cfg();
    c.qmgr_message_recipient_limit = 20;
    c.qmgr_message_recipient_minimum = 3;
    c.transports[0].recipient_limit = 30;
    let mut s = Scheduler::new(c).unwrap();
    add(&mut s, Time(0), 1, "list@x", 1000);
    let first = actions(&mut s);
    assert_eq!(
        first,
        vec![Action::ReadRecipients {
            queue_id: QueueId(1),
            max: 20
        }]
    );
    s.handle(
        Time(0),
        Event::RecipientsRead {
            queue_id: QueueId(1),
            groups: vec![group("d.example", &[&["mx"]], (0..20).collect())],
            remaining: 980,
        },
    )
    .unwrap();
    // The job took the whole transport pool (30): it may read 30 + 3 - 20 = 13
    // more, which is below the refill limit, so it waits for entries to finish.
    let m = s.msg_index[&QueueId(1)];
    assert_eq!(s.next_batch(m), 13);
    assert!(!actions(&mut s)
        .iter()
        .any(|x| matches!(x, Action::ReadRecipients { .. })));
    // A second message still gets its minimum.
    add(&mut s, Time(0), 2, "b@y", 50);
    assert_eq!(
        actions(&mut s),
        vec![Action::ReadRecipients {
            queue_id: QueueId(2),
            max: 3
        }]
    );
    assert!(s.recipients_in_core() <= 20 + 30 + 3 * 2);
}

#[test]
fn refused_events_change_nothing() {
    let mut c = cfg();
    c.qmgr_message_active_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    add(&mut s, Time(0), 1, "a@x", 1);
    let dup = s.handle(
        Time(0),
        Event::MessageAdded(NewMessage {
            queue_id: QueueId(1),
            sender: "a".into(),
            tenant: None,
            job: None,
            size: 1,
            arrival: Time(0),
            attempts: 0,
            recipients: 1,
        }),
    );
    assert_eq!(dup, Err(SchedError::DuplicateMessage(QueueId(1))));
    let full = s.handle(
        Time(0),
        Event::MessageAdded(NewMessage {
            queue_id: QueueId(2),
            sender: "a".into(),
            tenant: None,
            job: None,
            size: 1,
            arrival: Time(0),
            attempts: 0,
            recipients: 1,
        }),
    );
    assert_eq!(full, Err(SchedError::ActiveLimit));
    assert_eq!(
        s.handle(Time(0), Event::ConnectionOpened { conn: ConnId(9) }),
        Err(SchedError::UnknownConnection(ConnId(9)))
    );
    let bad = s.handle(
        Time(0),
        Event::RecipientsRead {
            queue_id: QueueId(1),
            groups: vec![RecipientGroup {
                domain: String::new(),
                transport: "nope".into(),
                ..group("d", &[], vec![0])
            }],
            remaining: 0,
        },
    );
    assert_eq!(bad, Err(SchedError::UnknownTransport("nope".into())));
    let many = s.handle(
        Time(0),
        Event::RecipientsRead {
            queue_id: QueueId(1),
            groups: vec![group("d", &[&["h"]], vec![0, 1])],
            remaining: 0,
        },
    );
    assert_eq!(many, Err(SchedError::TooManyRecipients(QueueId(1))));
    assert_eq!(
        s.handle(
            Time(0),
            Event::AgentSlotFree {
                transport: "x".into()
            }
        ),
        Err(SchedError::UnknownTransport("x".into()))
    );
    s.check_invariants().unwrap();
}

#[test]
fn config_change_clamps_windows_and_checks_transports() {
    let mut s = Scheduler::new(cfg()).unwrap();
    add_read(&mut s, Time(0), 1, "a@x", "d.example", 1);
    let d = s.dest_id(TransportId(0), "d.example").unwrap();
    let mut c = cfg();
    c.transports[0].destination_concurrency_limit = 2;
    s.handle(Time(1), Event::ConfigChanged(Box::new(c)))
        .unwrap();
    assert_eq!(s.window(d), Some(2));
    let renamed = SchedConfig {
        transports: vec![TransportConfig::new("relay")],
        ..cfg()
    };
    assert!(matches!(
        s.handle(Time(1), Event::ConfigChanged(Box::new(renamed))),
        Err(SchedError::Config(_))
    ));
}

#[test]
fn fifo_policy_keeps_arrival_order() {
    let mut c = cfg();
    c.transports[0].initial_destination_concurrency = 1;
    c.transports[0].destination_concurrency_limit = 1;
    c.transports[0].connection_backlog_limit = 1;
    let mut s = Scheduler::with_policy(c, Box::new(crate::policy::Fifo)).unwrap();
    let conn = opens(&add_read(&mut s, Time(0), 0, "bulk@x", "d.example", 1))[0];
    for q in 1..15 {
        add_read(&mut s, Time(0), q, "bulk@x", "d.example", 1);
    }
    add_read(&mut s, Time(0), 99, "small@y", "d.example", 1);
    s.handle(Time(1), Event::ConnectionOpened { conn }).unwrap();
    let mut order = Vec::new();
    let mut now = Time(2);
    let mut next = starts(&actions(&mut s));
    while let Some((c, e, r)) = next.pop() {
        order.push(s.msgs[s.entries[e].message].queue_id.0);
        s.handle(
            now,
            Event::DeliveryDone {
                conn: c,
                entry: e,
                results: ok(&r),
                conn_failed: false,
                remote: Vec::new(),
            },
        )
        .unwrap();
        next.extend(starts(&actions(&mut s)));
        now = Time(now.0 + 1);
    }
    assert_eq!(
        order,
        (0..15).chain([99]).collect::<Vec<_>>(),
        "oqmgr: strict FIFO per destination"
    );
}

#[path = "class_tests.rs"]
mod classes;
#[path = "conn_tests.rs"]
mod conns;
#[path = "dead_tests.rs"]
mod dead;
#[path = "fair_tests.rs"]
mod fair;
