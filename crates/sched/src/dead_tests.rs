//! Unit tests of dead destinations and their back-off and revival, local
//! and lost-agent failures, message back-off, expiry and the operator's
//! flush.

use super::*;

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
    let first = opens(&add_read(&mut s, Time(0), 1, "a@x", "proxied.example", 20)).len();
    let now = Time(30_000);
    // Every egress proxy down: each connection fails on this side.
    let all = fail_all(&mut s, now, ConnFailure::Local);
    assert_eq!(
        opens(&all).len(),
        0,
        "no new connection after a local failure: the transport is throttled"
    );
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
    // Each failed connection's own entry, then the rest of the message
    // in one record, not one per entry.
    let records = all
        .iter()
        .filter(|a| matches!(a, Action::Journal(Record::Deferred { .. })))
        .count();
    assert!(records <= first + 1, "{records} deferral records");
    let retry = now + Duration::from_secs(60);
    assert!(all.contains(&Action::MessageDone {
        queue_id: QueueId(1),
        next_attempt: Some(retry)
    }));
    assert_eq!(s.entries_in_memory(), 0);
    assert!(first >= 2, "{first} connections were tried at first");
    // New mail for it within transport_retry_time waits; then one try.
    let later = add_read(
        &mut s,
        now + Duration::from_secs(10),
        2,
        "a@x",
        "proxied.example",
        1,
    );
    assert!(opens(&later).is_empty(), "throttled: {later:?}");
    s.handle_timeout(retry);
    assert_eq!(opens(&actions(&mut s)).len(), 1, "tried again after 60 s");
    s.check_invariants().unwrap();
}

#[test]
fn a_local_failure_beside_a_delivering_connection_keeps_its_mail_queued() {
    let mut c = cfg();
    c.transports[0].connection_backlog_limit = 1;
    c.transports[0].destination_recipient_limit = 1;
    let mut s = Scheduler::new(c).unwrap();
    let conns = opens(&add_read(&mut s, Time(0), 1, "a@x", "proxied.example", 20));
    assert!(conns.len() >= 2);
    let now = Time(1_000);
    // One connection came up through a proxy that answers; the next one
    // found none.
    s.handle(now, Event::ConnectionOpened { conn: conns[0] })
        .unwrap();
    actions(&mut s);
    s.handle(
        now,
        Event::ConnectionFailed {
            conn: conns[1],
            failure: ConnFailure::Local,
            status: Status::new(StatusCode::SYSTEM_TEMP, "no egress proxy answered"),
            remote: None,
        },
    )
    .unwrap();
    let after = actions(&mut s);
    let deferred = after
        .iter()
        .filter(|a| matches!(a, Action::Defer { .. }))
        .count();
    assert_eq!(
        deferred, 1,
        "only the failed connection's own entry: {after:?}"
    );
    assert!(
        s.entries_in_memory() > 10,
        "the rest waits for the open connection"
    );
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
            remote: None,
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
            remote: Vec::new(),
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
            remote: None,
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
            remote: Vec::new(),
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
            remote: None,
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
