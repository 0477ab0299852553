//! Unit tests of the scheduler core, driven event by event.

use super::*;
use crate::config::TransportConfig;
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
fn big_senders_go_to_the_large_class_and_small_ones_are_served() {
    let mut c = cfg();
    c.transports[0].sender_class_thresholds = [2, 4];
    c.transports[0].connection_backlog_limit = 1;
    c.transports[0].destination_concurrency_limit = 1;
    c.transports[0].initial_destination_concurrency = 1;
    let mut s = Scheduler::new(c).unwrap();
    for q in 0..6 {
        add_read(&mut s, Time(0), q, "bulk@x", "d.example", 1);
    }
    let d = s.dest_id(TransportId(0), "d.example").unwrap();
    // One in flight; the rest queued where they were classified (counts
    // 1 → small, 2,3 → medium, 4,5 → large); they move to their key's
    // class (large now) when they come to the head of their queue.
    assert_eq!(s.queued(d), [1, 2, 2]);
    let a = add_read(&mut s, Time(1), 100, "small@y", "d.example", 1);
    assert!(starts(&a).is_empty());
    assert_eq!(s.queued(d), [2, 2, 2]);
    s.check_invariants().unwrap();
}

#[test]
fn class_round_robin_alternates_non_empty_classes() {
    let mut c = cfg();
    c.transports[0].sender_class_thresholds = [1, 3];
    c.transports[0] = c.transports[0].clone().without_connection_reuse();
    c.transports[0].initial_destination_concurrency = 1;
    c.transports[0].destination_concurrency_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    // Bulk first: its first entry is small (count 0), next two medium, rest large.
    let mut pending: Vec<ConnId> = Vec::new();
    for q in 0..6 {
        pending.extend(opens(&add_read(
            &mut s,
            Time(0),
            q,
            "bulk@x",
            "d.example",
            1,
        )));
    }
    for q in 10..13 {
        pending.extend(opens(&add_read(
            &mut s,
            Time(0),
            q,
            &format!("u{q}@y"),
            "d.example",
            1,
        )));
    }
    let mut served = Vec::new();
    let mut now = Time(1);
    for _ in 0..9 {
        let c = pending.pop().expect("a connection is opening");
        s.handle(now, Event::ConnectionOpened { conn: c }).unwrap();
        let st = starts(&actions(&mut s));
        let (conn, e, r) = st[0].clone();
        served.push(s.entries[e].class);
        now = Time(now.0 + 1);
        s.handle(
            now,
            Event::DeliveryDone {
                conn,
                entry: e,
                results: ok(&r),
                conn_failed: false,
            },
        )
        .unwrap();
        pending.extend(opens(&actions(&mut s)));
    }
    // Small (bulk's first), then classes alternate while several are non-empty.
    assert_eq!(served[0], Class::Small);
    assert_ne!(served[1], served[2], "round-robin over classes: {served:?}");
    let smalls = served
        .iter()
        .take(6)
        .filter(|c| **c == Class::Small)
        .count();
    assert!(smalls >= 2, "small class gets its turns early: {served:?}");
}

#[test]
fn dead_destination_defers_all_and_retries_with_doubling_backoff() {
    let mut c = cfg();
    c.transports[0].connection_backlog_limit = 1;
    c.transports[0].destination_recipient_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    let a = add_read(&mut s, Time(0), 1, "a@x", "dead.example", 20);
    assert!(!opens(&a).is_empty());
    let mut now = Time(30_000);
    let all = fail_all(&mut s, now, ConnFailure::Unreachable);
    let d = s.dest_id(TransportId(0), "dead.example").unwrap();
    let retry = s
        .dead_until(d)
        .expect("declared dead after the failed cohort");
    assert_eq!(retry, now + Duration::from_secs(300));
    assert!(all
        .iter()
        .any(|a| matches!(a, Action::Notice(Notice::DestinationDead { .. }))));
    // One journal record for the message's dead-destination deferral.
    let recs = all.iter().filter(|a| matches!(a, Action::Journal(Record::Deferred { status, .. }) if status.text == "destination is dead")).count();
    assert_eq!(recs, 1);
    assert_eq!(s.entries_in_memory(), 0, "everything deferred");
    assert!(all.contains(&Action::MessageDone {
        queue_id: QueueId(1),
        next_attempt: Some(now + Duration::from_secs(300))
    }));
    // Retry time: the window comes back at the initial concurrency.
    now = retry;
    s.handle_timeout(now);
    assert!(actions(&mut s).iter().any(|a| matches!(
        a,
        Action::Notice(Notice::DestinationRetry { window: 1.., .. })
    )));
    // Dies again: the next back-off is doubled.
    add_read(&mut s, now, 2, "a@x", "dead.example", 20);
    fail_all(&mut s, now, ConnFailure::Handshake);
    assert_eq!(s.dead_until(d), Some(now + Duration::from_secs(600)));
    s.check_invariants().unwrap();
}

#[test]
fn local_connection_failures_defer_without_counting_against_the_destination() {
    let mut c = cfg();
    c.transports[0].connection_backlog_limit = 1;
    c.transports[0].destination_recipient_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    add_read(&mut s, Time(0), 1, "a@x", "proxied.example", 20);
    let now = Time(30_000);
    // Every egress proxy down: each connection fails on this side.
    let all = fail_all(&mut s, now, ConnFailure::Local);
    let d = s.dest_id(TransportId(0), "proxied.example").unwrap();
    assert_eq!(s.dead_until(d), None, "not declared dead");
    assert!(!all.iter().any(|a| matches!(
        a,
        Action::Notice(Notice::DestinationDead { .. } | Notice::HostRetry { .. })
    )));
    let deferred: usize = all
        .iter()
        .filter_map(|a| match a {
            Action::Defer {
                recipients, status, ..
            } if status.text == "failed" => Some(recipients.len()),
            _ => None,
        })
        .sum();
    assert_eq!(
        deferred, 20,
        "every recipient deferred with the agent's reason"
    );
    assert_eq!(s.entries_in_memory(), 0);
    s.check_invariants().unwrap();
}

#[test]
fn a_dead_destination_keeps_its_back_off_while_its_mail_waits_outside() {
    let mut c = cfg();
    c.transports[0].connection_backlog_limit = 1;
    c.transports[0].destination_recipient_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    add_read(&mut s, Time(0), 1, "a@x", "dead.example", 20);
    let mut now = Time(30_000);
    fail_all(&mut s, now, ConnFailure::Unreachable);
    let d = s.dest_id(TransportId(0), "dead.example").unwrap();
    let retry = s.dead_until(d).expect("dead");
    assert_eq!(retry, now + Duration::from_secs(300));
    // Its mail is out of the scheduler until the retry time, and comes
    // back a little after it (qmgr resolves it first); GC passes run
    // in between.
    now = retry;
    s.handle_timeout(now);
    actions(&mut s);
    for _ in 0..3 {
        now = now + Duration::from_secs(60);
        s.handle_timeout(now);
        actions(&mut s);
    }
    add_read(&mut s, now, 2, "a@x", "dead.example", 20);
    fail_all(&mut s, now, ConnFailure::Unreachable);
    let d = s.dest_id(TransportId(0), "dead.example").unwrap();
    assert_eq!(
        s.dead_until(d),
        Some(now + Duration::from_secs(600)),
        "the back-off doubled: the destination was not forgotten"
    );
    s.check_invariants().unwrap();
}

#[test]
fn success_on_a_live_connection_revives_a_dead_destination() {
    let mut c = cfg();
    c.transports[0].connection_backlog_limit = 1;
    c.transports[0].failed_cohort_limit = 0.1;
    c.transports[0].destination_recipient_limit = 1;
    // Postfix's rule: dead although a connection delivers.
    c.transports[0].dead_while_delivering = true;
    let mut s = Scheduler::new(c).unwrap();
    let a = add_read(&mut s, Time(0), 1, "a@x", "flaky.example", 2);
    let conns = opens(&a);
    assert_eq!(conns.len(), 2);
    s.handle(Time(1), Event::ConnectionOpened { conn: conns[0] })
        .unwrap();
    let (conn, e, r) = starts(&actions(&mut s))[0].clone();
    s.handle(
        Time(2),
        Event::ConnectionFailed {
            conn: conns[1],
            failure: ConnFailure::Handshake,
            status: Status::new(StatusCode::SYSTEM_TEMP, "421"),
        },
    )
    .unwrap();
    let d = s.dest_id(TransportId(0), "flaky.example").unwrap();
    assert!(s.dead_until(d).is_some());
    s.handle(
        Time(3),
        Event::DeliveryDone {
            conn,
            entry: e,
            results: ok(&r),
            conn_failed: false,
        },
    )
    .unwrap();
    assert!(actions(&mut s)
        .iter()
        .any(|a| matches!(a, Action::Notice(Notice::DestinationRevived { .. }))));
    assert_eq!(s.dead_until(d), None);
    assert!(s.window(d).unwrap() >= 1);
}

#[test]
fn expired_mail_bounces_instead_of_deferring() {
    let mut c = cfg();
    c.maximal_queue_lifetime = Duration::from_secs(10);
    let mut s = Scheduler::new(c).unwrap();
    let a = add_read(&mut s, Time(0), 1, "a@x", "d.example", 1);
    let conn = opens(&a)[0];
    s.handle(
        Time(20_000),
        Event::ConnectionFailed {
            conn,
            failure: ConnFailure::Unreachable,
            status: Status::new(StatusCode::SYSTEM_TEMP, "timeout"),
        },
    )
    .unwrap();
    let a = actions(&mut s);
    assert!(a.iter().any(|x| matches!(x, Action::Bounce { .. })));
    assert!(!a.iter().any(|x| matches!(x, Action::Defer { .. })));
}

#[test]
fn message_backoff_doubles_per_attempt_and_is_capped() {
    let mut s = Scheduler::new(cfg()).unwrap();
    for (attempts, want) in [
        (0u32, 300u64),
        (1, 600),
        (2, 1200),
        (3, 2400),
        (4, 4000),
        (9, 4000),
    ] {
        let q = 100 + u64::from(attempts);
        s.handle(
            Time(0),
            Event::MessageAdded(NewMessage {
                queue_id: QueueId(q),
                sender: "a@x".into(),
                tenant: None,
                job: None,
                size: 1,
                arrival: Time(0),
                attempts,
                recipients: 1,
            }),
        )
        .unwrap();
        let m = s.msg_index[&QueueId(q)];
        assert_eq!(
            s.backoff(Time(0), m),
            Time::from_secs(want),
            "attempts {attempts}"
        );
    }
}

#[test]
fn deferred_recipient_gets_message_backoff() {
    let mut s = Scheduler::new(cfg()).unwrap();
    let a = add_read(&mut s, Time(0), 1, "a@x", "d.example", 2);
    s.handle(Time(1), Event::ConnectionOpened { conn: opens(&a)[0] })
        .unwrap();
    let (conn, e, _) = starts(&actions(&mut s))[0].clone();
    let results = vec![
        (0, RcptStatus::Delivered),
        (
            1,
            RcptStatus::Deferred(Status::new(StatusCode::SYSTEM_TEMP, "450 later")),
        ),
    ];
    s.handle(
        Time(2),
        Event::DeliveryDone {
            conn,
            entry: e,
            results,
            conn_failed: false,
        },
    )
    .unwrap();
    let a = actions(&mut s);
    assert!(a.contains(&Action::MessageDone {
        queue_id: QueueId(1),
        next_attempt: Some(Time(2) + Duration::from_secs(300))
    }));
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
fn hosts_unused_then_closed_oldest_then_secondary_mx_then_defer() {
    let mut c = cfg();
    c.transports[0] = TransportConfig::new("smtp").without_connection_reuse();
    c.transports[0].host_retry_time = Duration::from_secs(60);
    c.transports[0].initial_destination_concurrency = 1;
    c.transports[0].failed_cohort_limit = 100.0;
    let mut s = Scheduler::new(c).unwrap();
    let hosts: &[&[&str]] = &[&["a", "b"], &["backup"]];
    let mut now = Time(0);
    let mut used = Vec::new();
    for q in 0..2 {
        add(&mut s, now, q, "s@x", 1);
        actions(&mut s);
        s.handle(
            now,
            Event::RecipientsRead {
                queue_id: QueueId(q),
                groups: vec![group("mx.example", hosts, vec![0])],
                remaining: 0,
            },
        )
        .unwrap();
        let a = actions(&mut s);
        let Some(Action::Open { conn, host, .. }) =
            a.iter().find(|x| matches!(x, Action::Open { .. })).cloned()
        else {
            panic!("no open: {a:?}")
        };
        used.push(s.host_name(host).to_string());
        s.handle(now, Event::ConnectionOpened { conn }).unwrap();
        let (conn, e, r) = starts(&actions(&mut s))[0].clone();
        now = Time(now.0 + 10);
        s.handle(
            now,
            Event::DeliveryDone {
                conn,
                entry: e,
                results: ok(&r),
                conn_failed: false,
            },
        )
        .unwrap();
        actions(&mut s);
    }
    // Unused hosts first, so both primaries get used before any repeats.
    used.sort();
    assert_eq!(used, vec!["a", "b"]);
    // Both primaries fail: the same delivery moves on to the other
    // primary, then the secondary MX (as Postfix's smtp client tries the
    // next MX in one delivery); with nothing left it is deferred.
    add(&mut s, now, 10, "s@x", 1);
    actions(&mut s);
    s.handle(
        now,
        Event::RecipientsRead {
            queue_id: QueueId(10),
            groups: vec![group("mx.example", hosts, vec![0])],
            remaining: 0,
        },
    )
    .unwrap();
    let mut a = actions(&mut s);
    let mut seen = Vec::new();
    for _ in 0..5 {
        if let Some(Action::Open { conn, host, .. }) =
            a.iter().find(|x| matches!(x, Action::Open { .. })).cloned()
        {
            seen.push(s.host_name(host).to_string());
            s.handle(
                now,
                Event::ConnectionFailed {
                    conn,
                    failure: ConnFailure::Unreachable,
                    status: Status::new(StatusCode::SYSTEM_TEMP, "refused"),
                },
            )
            .unwrap();
            a = actions(&mut s);
        } else {
            assert!(a.iter().any(|x| matches!(x, Action::Defer { .. })), "{a:?}");
            seen.push("defer".into());
            break;
        }
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
    let mut primaries = seen[..2].to_vec();
    primaries.sort();
    assert_eq!(primaries, ["a", "b"], "{seen:?}");
    assert_eq!(seen[2], "backup", "{seen:?}");
    assert_eq!(seen[3], "defer", "{seen:?}");
}

#[test]
fn connect_interval_limit_parks_the_destination() {
    let mut c = cfg();
    c.transports[0].connection_backlog_limit = 1;
    c.limits = vec![LimitRule {
        fields: vec![crate::limiter::Field::Destination],
        when: vec![],
        scope: Scope::Connect,
        algorithm: Algorithm::MinInterval(Duration::from_secs(10)),
    }];
    let mut s = Scheduler::new(c).unwrap();
    let mut a = Vec::new();
    for q in 1..=3 {
        a.extend(add_read(&mut s, Time(0), q, "a@x", "slow.example", 1));
    }
    // One connect per 10 s; the second entry rides the opening connection, the third waits.
    assert_eq!(opens(&a).len(), 1);
    assert_eq!(s.entries_in_memory(), 3);
    assert_eq!(s.poll_timeout(), Some(Time(10_000)));
    s.handle_timeout(Time(10_000));
    assert_eq!(opens(&actions(&mut s)).len(), 1);
}

#[test]
fn reuse_count_limit_closes_after_n_transactions() {
    let mut c = cfg();
    c.transports[0].connection_reuse_count_limit = 2;
    c.transports[0].initial_destination_concurrency = 1;
    c.transports[0].destination_concurrency_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    let a = add_read(&mut s, Time(0), 1, "a@x", "d.example", 1);
    let conn = opens(&a)[0];
    add_read(&mut s, Time(0), 2, "a@x", "d.example", 1);
    add_read(&mut s, Time(0), 3, "a@x", "d.example", 1);
    s.handle(Time(1), Event::ConnectionOpened { conn }).unwrap();
    let mut closes = 0;
    let mut now = Time(2);
    let mut next = starts(&actions(&mut s));
    while let Some((c, e, r)) = next.pop() {
        s.handle(
            now,
            Event::DeliveryDone {
                conn: c,
                entry: e,
                results: ok(&r),
                conn_failed: false,
            },
        )
        .unwrap();
        let a = actions(&mut s);
        closes += a
            .iter()
            .filter(|x| matches!(x, Action::Close { .. }))
            .count();
        next.extend(starts(&a));
        for o in opens(&a) {
            s.handle(now, Event::ConnectionOpened { conn: o }).unwrap();
            next.extend(starts(&actions(&mut s)));
        }
        now = Time(now.0 + 1);
    }
    assert_eq!(closes, 1, "closed after its second transaction");
    assert_eq!(s.stats().connections_opened, 2);
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
fn peer_close_reschedules_queued_entries() {
    let mut c = cfg();
    c.transports[0].initial_destination_concurrency = 1;
    c.transports[0].destination_concurrency_limit = 1;
    c.transports[0].connection_backlog_limit = 3;
    let mut s = Scheduler::new(c).unwrap();
    let a = add_read(&mut s, Time(0), 1, "a@x", "d.example", 1);
    let conn = opens(&a)[0];
    s.handle(Time(1), Event::ConnectionOpened { conn }).unwrap();
    add_read(&mut s, Time(1), 2, "a@x", "d.example", 1);
    assert_eq!(
        s.conn_jobs(conn).len(),
        2,
        "second entry queued on the active connection"
    );
    s.handle(Time(2), Event::ConnectionClosed { conn }).unwrap();
    let a = actions(&mut s);
    assert_eq!(
        opens(&a).len(),
        1,
        "entries rescheduled onto a new connection"
    );
    assert_eq!(s.entries_in_memory(), 2);
    s.check_invariants().unwrap();
}

#[test]
fn share_swap_lets_an_under_share_class_jump_a_waiting_job() {
    let mut c = cfg();
    c.transports[0].sender_class_thresholds = [1, 1000];
    c.transports[0].initial_destination_concurrency = 2;
    c.transports[0].destination_concurrency_limit = 2;
    c.transports[0].connection_backlog_limit = 2;
    let mut s = Scheduler::new(c).unwrap();
    // Bulk: first entry small (count 0), the rest medium; two connections.
    let mut opened = Vec::new();
    for q in 0..6 {
        opened.extend(opens(&add_read(
            &mut s,
            Time(0),
            q,
            "bulk@x",
            "d.example",
            1,
        )));
    }
    assert_eq!(opened.len(), 2);
    let mut started = Vec::new();
    for &c in &opened {
        s.handle(Time(1), Event::ConnectionOpened { conn: c })
            .unwrap();
        started.extend(starts(&actions(&mut s)));
    }
    // Finish the bulk's small-class entry first; its connection takes more bulk.
    let k = started
        .iter()
        .position(|x| s.entries[x.1].class == Class::Small)
        .unwrap();
    let (conn, e, r) = started.remove(k);
    s.handle(
        Time(2),
        Event::DeliveryDone {
            conn,
            entry: e,
            results: ok(&r),
            conn_failed: false,
        },
    )
    .unwrap();
    started.extend(starts(&actions(&mut s)));
    // A small sender arrives while every connection has a medium job waiting.
    add_read(&mut s, Time(2), 100, "small@y", "d.example", 1);
    let d = s.dest_id(TransportId(0), "d.example").unwrap();
    assert_eq!(
        s.queued(d)[0],
        1,
        "the small entry waits: window and backlogs are full"
    );
    // Finish a bulk transaction: the small entry runs next, not the waiting bulk one.
    let (conn, e, r) = started.pop().unwrap();
    s.handle(
        Time(3),
        Event::DeliveryDone {
            conn,
            entry: e,
            results: ok(&r),
            conn_failed: false,
        },
    )
    .unwrap();
    let next = starts(&actions(&mut s));
    assert_eq!(next.len(), 1);
    assert_eq!(
        s.entries[next[0].1].class,
        Class::Small,
        "queued: {:?}",
        s.queued(d)
    );
    s.check_invariants().unwrap();
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

#[test]
fn idle_destinations_and_hosts_are_garbage_collected() {
    let mut s = Scheduler::new(cfg()).unwrap();
    let a = add_read(&mut s, Time(0), 1, "a@x", "gone.example", 1);
    let conn = opens(&a)[0];
    s.handle(Time(1), Event::ConnectionOpened { conn }).unwrap();
    let (c, e, r) = starts(&actions(&mut s))[0].clone();
    s.handle(
        Time(2),
        Event::DeliveryDone {
            conn: c,
            entry: e,
            results: ok(&r),
            conn_failed: false,
        },
    )
    .unwrap();
    assert!(s.dest_id(TransportId(0), "gone.example").is_some());
    // Idle close after 2 s, then GC passes; the host record outlives its last close by destdb_record_lifetime.
    let mut now = Time(2);
    while let Some(t) = s.poll_timeout() {
        if t > Time::from_secs(2 * 3600) {
            break;
        }
        now = t;
        s.handle_timeout(now);
        actions(&mut s);
    }
    assert!(now >= Time::from_secs(3600));
    assert_eq!(s.dest_id(TransportId(0), "gone.example"), None);
    assert!(s.hosts.is_empty(), "host record dropped after its lifetime");
}

#[test]
fn limits_changed_wakes_rate_limited_destinations() {
    let mut c = cfg();
    c.limits = vec![LimitRule {
        fields: vec![crate::limiter::Field::Destination],
        when: vec![],
        scope: Scope::Transaction,
        algorithm: Algorithm::FixedWindow {
            tokens: 1,
            interval: Duration::from_secs(3600),
        },
    }];
    let mut s = Scheduler::new(c).unwrap();
    let first = add_read(&mut s, Time(0), 1, "a@x", "d.example", 1);
    assert_eq!(opens(&first).len(), 1);
    let second = add_read(&mut s, Time(0), 2, "a@x", "d.example", 1);
    assert!(
        opens(&second).is_empty() && starts(&second).is_empty(),
        "second transaction waits for the window"
    );
    assert_eq!(
        s.poll_timeout(),
        Some(Time::from_secs(60)),
        "GC first; the wake-up is at the window end"
    );
    // A new configuration without limits (e.g. a cluster grant) frees it at once.
    let mut none = cfg();
    none.limits.clear();
    s.handle(Time(5), Event::ConfigChanged(Box::new(none)))
        .unwrap();
    s.handle(Time(5), Event::LimitsChanged).unwrap();
    assert_eq!(s.entries_in_memory(), 2);
    let d = s.dest_id(TransportId(0), "d.example").unwrap();
    assert_eq!(s.queued(d), [0, 0, 0], "both entries placed");
}

#[test]
fn entries_arriving_at_the_retry_time_are_not_deferred_again() {
    let mut c = cfg();
    c.transports[0].failed_cohort_limit = 0.0;
    let mut s = Scheduler::new(c).unwrap();
    let a = add_read(&mut s, Time(0), 1, "a@x", "d.example", 1);
    s.handle(
        Time(10),
        Event::ConnectionFailed {
            conn: opens(&a)[0],
            failure: ConnFailure::Unreachable,
            status: Status::new(StatusCode::SYSTEM_TEMP, "x"),
        },
    )
    .unwrap();
    let d = s.dest_id(TransportId(0), "d.example").unwrap();
    let retry = s.dead_until(d).unwrap();
    actions(&mut s);
    // The caller re-adds the message exactly at the retry time, before the timer fires.
    let a = add_read(&mut s, retry, 1, "a@x", "d.example", 1);
    assert_eq!(opens(&a).len(), 1, "tried again, not deferred: {a:?}");
    assert_eq!(s.dead_until(d), None);
}

#[test]
fn class_key_kind_is_per_transport() {
    let mut c = cfg();
    c.transports[0].sender_class_thresholds = [2, 1000];
    c.transports[0].initial_destination_concurrency = 1;
    c.transports[0].destination_concurrency_limit = 1;
    let mut relay = TransportConfig::new("relay");
    relay.scheduler_class_key = crate::config::ClassKey::SenderDomain;
    relay.sender_class_thresholds = [2, 1000];
    relay.initial_destination_concurrency = 1;
    relay.destination_concurrency_limit = 1;
    c.transports.push(relay);
    let mut s = Scheduler::new(c).unwrap();
    // Four senders of one domain, one message each, to both transports.
    for q in 0..4u64 {
        add(&mut s, Time(0), q, &format!("u{q}@big.example"), 2);
        actions(&mut s);
        let groups = vec![
            group("a.example", &[&["mx.a"]], vec![0]),
            RecipientGroup {
                domain: String::new(),
                transport: "relay".into(),
                ..group("b.example", &[&["mx.b"]], vec![1])
            },
        ];
        s.handle(
            Time(0),
            Event::RecipientsRead {
                queue_id: QueueId(q),
                groups,
                remaining: 0,
            },
        )
        .unwrap();
        actions(&mut s);
    }
    let a = s.dest_id(TransportId(0), "a.example").unwrap();
    let b = s.dest_id(TransportId(1), "b.example").unwrap();
    // smtp keys by sender: every sender has one entry, all small (one is in flight).
    assert_eq!(s.queued(a), [3, 0, 0]);
    // relay keys by domain: the third and fourth entries of big.example are medium.
    assert_eq!(s.queued(b), [1, 2, 0]);
    s.check_invariants().unwrap();
}

/// Opens connections as asked and delivers whatever starts.
#[derive(Default)]
struct Driver {
    pending: Vec<ConnId>,
    ready: Vec<(ConnId, EntryId, Vec<u32>)>,
}

impl Driver {
    fn take(&mut self, a: &[Action]) {
        self.pending.extend(opens(a));
        self.ready.extend(starts(a));
    }

    /// Runs until `n` entries are delivered; their messages and classes, in order.
    fn run(&mut self, s: &mut Scheduler, now: &mut Time, n: usize) -> Vec<(QueueId, Class)> {
        let mut served = Vec::new();
        while served.len() < n {
            if let Some((conn, e, r)) = self.ready.pop() {
                let x = &s.entries[e];
                served.push((s.msgs[x.message].queue_id, x.class));
                *now = Time(now.0 + 1);
                let done = Event::DeliveryDone {
                    conn,
                    entry: e,
                    results: ok(&r),
                    conn_failed: false,
                };
                s.handle(*now, done).unwrap();
            } else if let Some(c) = self.pending.pop() {
                s.handle(*now, Event::ConnectionOpened { conn: c }).unwrap();
            } else {
                panic!("nothing runs after {served:?}");
            }
            s.check_invariants().unwrap();
            let a = actions(s);
            self.take(&a);
        }
        served
    }
}

#[test]
fn a_burst_behind_a_bulk_backlog_is_not_queued_behind_it() {
    // Wietse's rule fixed at queueing would put the burst's third to sixth
    // messages behind the bulk sender's medium entries (its third to ninth).
    let mut c = cfg();
    c.transports[0].sender_class_thresholds = [2, 10];
    c.transports[0].initial_destination_concurrency = 1;
    c.transports[0].destination_concurrency_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    let mut first = Vec::new();
    for q in 0..40 {
        first.extend(add_read(&mut s, Time(0), q, "bulk@x", "d.example", 1));
    }
    for q in 100..106 {
        first.extend(add_read(&mut s, Time(0), q, "burst@y", "d.example", 1));
    }
    let (mut now, mut drv) = (Time(1), Driver::default());
    drv.take(&first);
    let served = drv.run(&mut s, &mut now, 14);
    // Served as what their senders are now: the burst medium, the bulk large.
    for (q, c) in &served[1..] {
        let want = if q.0 >= 100 {
            Class::Medium
        } else {
            Class::Large
        };
        assert_eq!(*c, want, "{served:?}");
    }
    assert!(s.stats().reclassed_entries > 0);
    let burst: Vec<usize> = served
        .iter()
        .enumerate()
        .filter(|(_, (q, _))| q.0 >= 100)
        .map(|(i, _)| i)
        .collect();
    // Medium and large alternate: the burst is done within its first dozen turns.
    assert_eq!(burst.len(), 6, "{served:?}");
    assert!(*burst.last().unwrap() <= 12, "{served:?}");
}

#[test]
fn a_sender_goes_down_a_class_only_below_half_the_bound() {
    let mut c = cfg();
    c.transports[0].sender_class_thresholds = [6, 1000];
    c.transports[0].connection_backlog_limit = 1;
    c.transports[0].initial_destination_concurrency = 1;
    c.transports[0].destination_concurrency_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    let mut first = Vec::new();
    for q in 0..8 {
        first.extend(add_read(&mut s, Time(0), q, "a@x", "d.example", 1));
    }
    let (mut now, mut drv) = (Time(1), Driver::default());
    drv.take(&first);
    let served: Vec<Class> = drv
        .run(&mut s, &mut now, 8)
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    // The first started while a@x was small. From the seventh message on
    // a@x is medium; it starts its second to sixth entries as medium while
    // 7 to 3 are in memory (2 × 3 is not below 6), then small at 2.
    use Class::{Medium as M, Small as S};
    assert_eq!(served, [S, M, M, M, M, M, S, S]);
}

#[test]
fn a_flush_retries_dead_destinations_and_skipped_hosts_now() {
    // A dead destination: new mail is deferred as dead until the flush.
    let mut c = cfg();
    c.transports[0].connection_backlog_limit = 1;
    c.transports[0].destination_recipient_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    add_read(&mut s, Time(0), 1, "a@x", "dead.example", 20);
    let now = Time(30_000);
    fail_all(&mut s, now, ConnFailure::Unreachable);
    let d = s.dest_id(TransportId(0), "dead.example").unwrap();
    assert!(s.dead_until(d).is_some());
    let b = add_read(&mut s, now, 2, "b@x", "dead.example", 1);
    assert!(opens(&b).is_empty(), "{b:?}");
    s.handle(now, Event::Flush).unwrap();
    actions(&mut s);
    assert_eq!(s.dead_until(d), None);
    let c = add_read(&mut s, now, 3, "c@x", "dead.example", 1);
    assert_eq!(opens(&c).len(), 1, "tried at once: {c:?}");
    s.check_invariants().unwrap();

    // A host skipped after a failure (host_retry_time): tried again at the flush.
    let mut c = cfg();
    c.transports[0].host_retry_time = Duration::from_secs(600);
    let mut s = Scheduler::new(c).unwrap();
    add_read(&mut s, Time(0), 1, "a@x", "skip.example", 1);
    fail_all(&mut s, Time(1), ConnFailure::Unreachable);
    let b = add_read(&mut s, Time(2), 2, "b@x", "skip.example", 1);
    assert!(opens(&b).is_empty(), "skipped: {b:?}");
    s.handle(Time(3), Event::Flush).unwrap();
    actions(&mut s);
    let c = add_read(&mut s, Time(3), 3, "c@x", "skip.example", 1);
    assert_eq!(opens(&c).len(), 1, "host retry forgotten: {c:?}");
}

#[test]
fn a_lost_agent_defers_its_transactions_without_feedback() {
    let mut c = cfg();
    c.transports[0].destination_recipient_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    let a = add_read(&mut s, Time(0), 1, "a@x", "d.example", 10);
    assert!(!opens(&a).is_empty());
    let d = s.dest_id(TransportId(0), "d.example").unwrap();
    let w0 = s.window(d);
    let deferred = |acts: &[Action]| {
        acts.iter()
            .filter(|a| matches!(a, Action::Journal(Record::Deferred { status, .. }) if status.text.contains("agent")))
            .count()
    };
    // Rounds of every connection's agent going away, half of them before
    // the connection opened: each loss defers one entry (never a loop that
    // reopens at once), and none counts against the destination, although
    // that many connection failures would kill it.
    let mut lost = 0;
    let mut journaled = 0;
    for round in 0..4u64 {
        let now = Time(1 + round);
        let open: Vec<ConnId> = s.conns.iter().map(|(c, _)| c).collect();
        for (i, c) in open.into_iter().enumerate() {
            if i % 2 == 0 {
                s.handle(now, Event::ConnectionOpened { conn: c }).unwrap();
                journaled += deferred(&actions(&mut s));
            }
            let status = Status::new(StatusCode::SYSTEM_TEMP, "delivery agent smtp died");
            s.handle(now, Event::ConnectionLost { conn: c, status })
                .unwrap();
            lost += 1;
            journaled += deferred(&actions(&mut s));
        }
        s.check_invariants().unwrap();
    }
    assert!(lost >= 4, "{lost} connections lost");
    assert!(
        journaled >= 1,
        "deferred with the reason: {journaled} of {lost}"
    );
    assert_eq!(
        s.stats().deferred_entries,
        lost,
        "one entry deferred per loss"
    );
    assert_eq!(s.dead_until(d), None, "not the destination's fault");
    assert_eq!(s.window(d), w0, "no negative feedback");
}

#[test]
fn backoff_is_the_messages_age_as_in_postfix() {
    // The shell reports no attempt count: the age alone doubles the wait.
    let mut c = cfg();
    c.minimal_backoff_time = Duration::from_secs(10);
    c.maximal_backoff_time = Duration::from_secs(300);
    let mut s = Scheduler::new(c).unwrap();
    add(&mut s, Time(0), 1, "a@x", 1);
    actions(&mut s);
    let m = s.msg_index[&QueueId(1)];
    assert_eq!(
        s.backoff(Time(1_000), m),
        Time(11_000),
        "young: the minimum"
    );
    assert_eq!(
        s.backoff(Time(40_000), m),
        Time(80_000),
        "40 s old: 40 s more"
    );
    assert_eq!(s.backoff(Time(1_000_000), m), Time(1_300_000), "capped");
}

#[path = "fair_tests.rs"]
mod fair;
