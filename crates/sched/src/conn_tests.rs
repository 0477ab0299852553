//! Unit tests of connections and hosts: host choice by destdb class and MX
//! level, connect and rate limits, reuse limits, a peer's close, and
//! garbage collection of idle destinations and hosts.

use super::*;

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
                remote: Vec::new(),
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
                    remote: None,
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
                remote: Vec::new(),
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
            remote: Vec::new(),
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
fn a_dead_port_does_not_put_a_live_port_of_the_same_address_in_retry() {
    // transport_maps sends down.example to [127.0.0.1]:9 (nothing listens);
    // the relayhost is [127.0.0.1]:23501. Hosts are named as the queue
    // manager names them: address and port.
    let mut c = cfg();
    c.transports[0].host_retry_time = Duration::from_secs(60);
    let mut s = Scheduler::new(c).unwrap();
    let (dead, live) = (
        crate::host_key("127.0.0.1", 9),
        crate::host_key("127.0.0.1", 23501),
    );
    let read = |s: &mut Scheduler, q: u64, nexthop: &str, host: &str| {
        add(s, Time(0), q, "s@x", 1);
        actions(s);
        s.handle(
            Time(0),
            Event::RecipientsRead {
                queue_id: QueueId(q),
                groups: vec![group(nexthop, &[&[host]], vec![0])],
                remaining: 0,
            },
        )
        .unwrap();
        actions(s)
    };
    let a = read(&mut s, 1, "[127.0.0.1]:9", &dead);
    let refused = Status::new(
        StatusCode::NO_ANSWER,
        "connect to 127.0.0.1[127.0.0.1]:9: Connection refused",
    );
    let Some(Action::Open { conn, .. }) = a.iter().find(|x| matches!(x, Action::Open { .. }))
    else {
        panic!("no open: {a:?}")
    };
    s.handle(
        Time(0),
        Event::ConnectionFailed {
            conn: *conn,
            failure: ConnFailure::Unreachable,
            status: refused.clone(),
            remote: None,
        },
    )
    .unwrap();
    actions(&mut s);
    // Mail for the live port goes out at once.
    let a = read(&mut s, 2, "[127.0.0.1]:23501", &live);
    assert_eq!(opens(&a).len(), 1, "{a:?}");
    assert!(
        !a.iter().any(|x| matches!(x, Action::Defer { .. })),
        "{a:?}"
    );
    // More mail for the dead port waits, saying why in the words of the
    // failed connection.
    let a = read(&mut s, 3, "[127.0.0.1]:9", &dead);
    let Some(Action::Defer { status, .. }) = a.iter().find(|x| matches!(x, Action::Defer { .. }))
    else {
        panic!("no defer: {a:?}")
    };
    assert_eq!(
        status.text,
        "delivery temporarily suspended: connect to 127.0.0.1[127.0.0.1]:9: Connection refused"
    );
    assert_eq!(status.code, StatusCode::NO_ANSWER);
}
