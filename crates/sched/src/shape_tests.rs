//! The scheduler under a shaping policy, driven event by event.

use crate::config::{SchedConfig, TransportConfig};
use crate::event::{
    Action, ConnFailure, Event, NewMessage, Notice, QueueId, RcptStatus, RecipientGroup, Status,
    StatusCode,
};
use crate::ids::ConnId;
use crate::sched::Scheduler;
use crate::time::Time;
use shaping::{
    Condition, Field, KeyPolicy, Pattern, Policy, Props, Rate, ReplyAction, ReplyRule, Source,
    Threshold,
};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The seed's policy: (localip, grouping) 20 by default, orange 2 at
/// 10/1; tenants counted; a pool of 127.0.0.2 and 127.0.0.3.
fn seed() -> Policy {
    Policy {
        groupings: vec![
            shaping::Grouping {
                id: "orange".into(),
                remotemx: vec![Pattern("*.mx.orange.test".into())],
                recipientdomains: vec![Pattern("orange.test".into())],
            },
            shaping::Grouping {
                id: "yahoo".into(),
                remotemx: vec![Pattern("*.yahoodns.test".into())],
                recipientdomains: vec![],
            },
        ],
        sources: vec![Source {
            id: "pool1".into(),
            localip: vec![ip("127.0.0.2"), ip("127.0.0.3")],
            tenantid: vec![],
            senderdomain: vec![],
            grouping: vec![],
        }],
        policies: vec![
            KeyPolicy {
                fields: vec![Field::TenantId],
                default: Props::default(),
                conditions: vec![],
            },
            KeyPolicy {
                fields: vec![Field::LocalIp, Field::Grouping],
                default: Props {
                    concurrency: Some(20),
                    ..Props::default()
                },
                conditions: vec![Condition {
                    when: vec![(Field::Grouping, "orange".into())],
                    then: Props {
                        concurrency: Some(2),
                        rate: Some(Rate {
                            tokens: 10,
                            per: Duration::from_secs(1),
                        }),
                        ..Props::default()
                    },
                }],
            },
        ],
        ..Policy::default()
    }
}

fn sched(p: Policy) -> Scheduler {
    let mut t = TransportConfig::new("smtp");
    t.source_pool = Some("pool1".into());
    let cfg = SchedConfig {
        transports: vec![t],
        shaping: Some(Arc::new(p)),
        ..SchedConfig::default()
    };
    Scheduler::new(cfg).unwrap()
}

/// A connection, numbered in opening order (the scheduler reuses ids).
type Serial = usize;

/// A world that answers the scheduler: connections open at once,
/// transactions finish when `finish` is called.
#[derive(Default)]
struct World {
    /// The serial of each connection id now in use.
    serial: BTreeMap<ConnId, Serial>,
    /// Source of each connection.
    source: BTreeMap<Serial, Option<IpAddr>>,
    /// Host of each connection.
    host: BTreeMap<Serial, String>,
    open: BTreeSet<Serial>,
    /// Running transactions: (conn, entry, recipients, queue id).
    running: Vec<(ConnId, crate::ids::EntryId, Vec<u32>, u64)>,
    /// Every transaction started: (time, conn, queue id).
    started: Vec<(Time, Serial, u64)>,
    /// Most connections open at once per (source, host suffix).
    peak: BTreeMap<(String, String), usize>,
    notices: Vec<Notice>,
    /// When set, every server refuses at the greeting with this reply.
    greeting: Option<mail::RemoteReply>,
}

impl World {
    fn drain(&mut self, s: &mut Scheduler, now: Time) {
        loop {
            let acts: Vec<Action> = std::iter::from_fn(|| s.poll_action()).collect();
            if acts.is_empty() {
                return;
            }
            for a in acts {
                match a {
                    Action::Open {
                        conn, host, source, ..
                    } => {
                        let n = self.source.len();
                        self.serial.insert(conn, n);
                        self.source.insert(n, source);
                        self.host.insert(n, s.host_name(host).to_string());
                        if let Some(r) = self.greeting.clone() {
                            let status =
                                Status::new(StatusCode::NO_ANSWER, r.reason(&mail::Said::Greeting));
                            let ev = Event::ConnectionFailed {
                                conn,
                                failure: ConnFailure::Handshake,
                                status,
                                remote: Some(r),
                            };
                            s.handle(now, ev).unwrap();
                            continue;
                        }
                        self.open.insert(n);
                        self.sample();
                        s.handle(now, Event::ConnectionOpened { conn }).unwrap();
                    }
                    Action::Start {
                        conn,
                        entry,
                        queue_id,
                        recipients,
                    } => {
                        self.started.push((now, self.serial[&conn], queue_id.0));
                        self.running.push((conn, entry, recipients, queue_id.0));
                    }
                    Action::Close { conn, release } => {
                        self.open.remove(&self.serial[&conn]);
                        // The agent's QUIT is done at once here.
                        if let Some(bind) = release {
                            s.handle(now, Event::SlotReleased { bind }).unwrap();
                        }
                    }
                    Action::Notice(n) => self.notices.push(n),
                    _ => {}
                }
            }
        }
    }

    fn sample(&mut self) {
        let mut now: BTreeMap<(String, String), usize> = BTreeMap::new();
        for c in &self.open {
            let src = self.source[c].map(|a| a.to_string()).unwrap_or_default();
            let host = self.host[c]
                .split_once('.')
                .map_or("", |(_, d)| d)
                .to_string();
            *now.entry((src, host)).or_default() += 1;
        }
        for (k, n) in now {
            let p = self.peak.entry(k).or_default();
            *p = (*p).max(n);
        }
    }

    /// Finishes every running transaction with `status`.
    fn finish(&mut self, s: &mut Scheduler, now: Time, status: impl Fn(u64) -> RcptStatus) {
        self.finish_said(s, now, status, None);
    }

    /// Finishes every running transaction with `status`, which the server's
    /// replies `remote` decided when given.
    fn finish_said(
        &mut self,
        s: &mut Scheduler,
        now: Time,
        status: impl Fn(u64) -> RcptStatus,
        remote: impl IntoIterator<Item = mail::RemoteReply>,
    ) {
        let remote: Vec<mail::RemoteReply> = remote.into_iter().collect();
        let running = std::mem::take(&mut self.running);
        for (conn, entry, rcpts, q) in running {
            let results = rcpts.iter().map(|&r| (r, status(q))).collect();
            s.handle(
                now,
                Event::DeliveryDone {
                    conn,
                    entry,
                    results,
                    conn_failed: false,
                    remote: remote.clone(),
                },
            )
            .unwrap();
            self.drain(s, now);
        }
    }
}

fn message(
    s: &mut Scheduler,
    w: &mut World,
    now: Time,
    q: u64,
    tenant: &str,
    domain: &str,
    mx: &str,
) {
    routed(s, w, now, q, tenant, domain, mx, "");
}

/// A message to `nexthop` (served by `mx`) whose recipient is in `own`
/// when it is not the nexthop's domain (behind a relayhost).
#[allow(clippy::too_many_arguments)]
fn routed(
    s: &mut Scheduler,
    w: &mut World,
    now: Time,
    q: u64,
    tenant: &str,
    domain: &str,
    mx: &str,
    own: &str,
) {
    s.handle(
        now,
        Event::MessageAdded(NewMessage {
            queue_id: QueueId(q),
            sender: "bulk@sender.test".into(),
            tenant: (!tenant.is_empty()).then(|| tenant.to_string()),
            job: None,
            size: 1000,
            arrival: now,
            attempts: 0,
            recipients: 1,
        }),
    )
    .unwrap();
    let read = std::iter::from_fn(|| s.poll_action())
        .find(|a| matches!(a, Action::ReadRecipients { .. }))
        .expect("a read");
    let Action::ReadRecipients { queue_id, .. } = read else {
        unreachable!()
    };
    s.handle(
        now,
        Event::RecipientsRead {
            queue_id,
            groups: vec![RecipientGroup {
                domain: own.into(),
                transport: "smtp".into(),
                nexthop: domain.into(),
                hosts: vec![vec![mx.into()]],
                recipients: vec![0],
            }],
            remaining: 0,
        },
    )
    .unwrap();
    w.drain(s, now);
}

#[test]
fn a_grouping_gets_two_connections_per_source_across_its_domains() {
    let mut s = sched(seed());
    let mut w = World::default();
    // Three domains hosted by orange's MX hosts, and one elsewhere.
    let mut q = 0;
    for _ in 0..40 {
        for (d, mx) in [
            ("orange.test", "a.mx.orange.test"),
            ("wanadoo.test", "b.mx.orange.test"),
            ("voila.test", "c.mx.orange.test"),
            ("other.test", "mx.other.test"),
        ] {
            q += 1;
            message(&mut s, &mut w, Time(0), q, "", d, mx);
        }
    }
    let mut t = 0;
    while w.started.len() < 160 && t < 100_000 {
        t += 50;
        w.finish(&mut s, Time(t), |_| RcptStatus::Delivered);
        s.handle_timeout(Time(t));
        w.drain(&mut s, Time(t));
    }
    assert_eq!(w.started.len(), 160, "everything delivered");
    for src in ["127.0.0.2", "127.0.0.3"] {
        let peak = w.peak[&(src.to_string(), "mx.orange.test".to_string())];
        assert_eq!(
            peak, 2,
            "two connections from {src} to orange's hosts at most"
        );
    }
    let other: usize = ["127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|s| {
            w.peak
                .get(&(s.to_string(), "other.test".into()))
                .copied()
                .unwrap_or(0)
        })
        .sum();
    assert!(
        other > 4,
        "other destinations are not held to orange's limit: {other}"
    );
    // Orange's 10/1 per source: 120 messages over two sources take about 5 s.
    let orange_last = w
        .started
        .iter()
        .filter(|(_, c, _)| w.host[c].contains("orange"))
        .map(|(t, _, _)| t.0)
        .max()
        .unwrap();
    let mut per_sec: BTreeMap<(u64, String), usize> = BTreeMap::new();
    for (t, c, _) in &w.started {
        if w.host[c].contains("orange") {
            *per_sec
                .entry((t.0 / 1000, format!("{:?}", w.source[c])))
                .or_default() += 1;
        }
    }
    assert!(
        (4_500..=6_000).contains(&orange_last),
        "{orange_last} {per_sec:?}"
    );
}

#[test]
fn a_connection_carries_only_its_own_tenants_mail() {
    let mut s = sched(seed());
    let mut w = World::default();
    let tenants = ["acme", "globex"];
    for q in 0..20u64 {
        let tenant = tenants[q as usize % 2];
        message(
            &mut s,
            &mut w,
            Time(0),
            q + 1,
            tenant,
            "other.test",
            "mx.other.test",
        );
    }
    let mut t = 0;
    while w.started.len() < 20 && t < 10_000 {
        t += 10;
        w.finish(&mut s, Time(t), |_| RcptStatus::Delivered);
    }
    assert_eq!(w.started.len(), 20);
    let mut by_conn: BTreeMap<Serial, BTreeSet<&str>> = BTreeMap::new();
    for (_, c, q) in &w.started {
        by_conn
            .entry(*c)
            .or_default()
            .insert(tenants[(*q - 1) as usize % 2]);
    }
    assert!(by_conn.values().all(|t| t.len() == 1), "{by_conn:?}");
}

#[test]
fn a_suspension_holds_its_key_and_lets_the_other_source_deliver() {
    let mut s = sched(seed());
    let mut w = World::default();
    s.handle(
        Time(0),
        Event::Suspend {
            when: vec![
                (Field::LocalIp, "127.0.0.2".into()),
                (Field::Grouping, "yahoo".into()),
            ],
            until: Some(Time(30_000)),
            tag: Some("test".into()),
        },
    )
    .unwrap();
    w.drain(&mut s, Time(0));
    assert!(matches!(w.notices[..], [Notice::Suspended { .. }]));
    for q in 1..=10 {
        message(
            &mut s,
            &mut w,
            Time(0),
            q,
            "",
            "yahoo.test",
            "mta5.am0.yahoodns.test",
        );
    }
    let mut t = 0;
    while w.started.len() < 10 && t < 10_000 {
        t += 10;
        w.finish(&mut s, Time(t), |_| RcptStatus::Delivered);
    }
    assert_eq!(w.started.len(), 10);
    assert!(
        w.source.values().all(|s| *s == Some(ip("127.0.0.3"))),
        "{:?}",
        w.source
    );

    // Both sources suspended: nothing at all until the suspension ends.
    s.handle(
        Time(t),
        Event::Suspend {
            when: vec![(Field::Grouping, "yahoo".into())],
            until: Some(Time(t + 30_000)),
            tag: None,
        },
    )
    .unwrap();
    w.drain(&mut s, Time(t));
    let before = w.started.len();
    for q in 11..=15 {
        message(
            &mut s,
            &mut w,
            Time(t),
            q,
            "",
            "yahoo.test",
            "mta5.am0.yahoodns.test",
        );
    }
    let end = t + 30_000;
    while t < end {
        t += 1000;
        s.handle_timeout(Time(t));
        w.drain(&mut s, Time(t));
        w.finish(&mut s, Time(t), |_| RcptStatus::Delivered);
        if t < end {
            assert_eq!(w.started.len(), before, "nothing during the suspension");
        }
    }
    for _ in 0..20 {
        t += 100;
        s.handle_timeout(Time(t));
        w.drain(&mut s, Time(t));
        w.finish(&mut s, Time(t), |_| RcptStatus::Delivered);
    }
    assert_eq!(w.started.len(), before + 5, "delivered once it ended");
}

/// A reply of the yahoo test host, as it sent it.
fn remote(code: u16, enhanced: Option<StatusCode>, text: &str) -> mail::RemoteReply {
    mail::RemoteReply {
        relay: "mta5.am0.yahoodns.test[127.0.0.9]:25".into(),
        code,
        enhanced,
        text: text.into(),
    }
}

/// A rule suspending (localip, grouping) for 2 hours on replies matching `pattern`.
fn suspend_rule(pattern: &str, when: Vec<(Field, String)>) -> ReplyRule {
    ReplyRule {
        pattern: regex::Regex::new(pattern).unwrap(),
        threshold: Threshold::Immediate,
        fields: vec![Field::LocalIp, Field::Grouping],
        when,
        action: ReplyAction::Suspend,
        duration: Duration::from_secs(7200),
        ramp_step_percent: 25,
        ramp_interval: Duration::from_secs(60),
    }
}

#[test]
fn a_ts04_reply_suspends_that_source_for_the_grouping_only() {
    let mut p = seed();
    p.replies = vec![suspend_rule(
        r"\[TS04\]",
        vec![(Field::Grouping, "yahoo".into())],
    )];
    let mut s = sched(p);
    let mut w = World::default();
    message(
        &mut s,
        &mut w,
        Time(0),
        1,
        "",
        "yahoo.test",
        "mta5.am0.yahoodns.test",
    );
    let first = w.source.values().next().copied().flatten().unwrap();
    // The remote server answers [TS04]: Sluice's own failures would not count.
    let ts04 = remote(
        421,
        Some(StatusCode::known(4, 7, 0)),
        "[TS04] Messages from this IP temporarily deferred",
    );
    let why = Status::new(
        StatusCode::known(4, 7, 0),
        ts04.reason(&mail::Said::InReplyTo("RCPT TO".into())),
    );
    w.finish_said(
        &mut s,
        Time(100),
        |_| RcptStatus::Deferred(why.clone()),
        Some(ts04.clone()),
    );
    assert!(
        w.notices.iter().any(
            |n| matches!(n, Notice::Suspended { hold } if hold.until == Some(100 + 7_200_000))
        ),
        "{:?}",
        w.notices
    );
    for q in 2..=6 {
        message(
            &mut s,
            &mut w,
            Time(200),
            q,
            "",
            "yahoo.test",
            "mta5.am0.yahoodns.test",
        );
    }
    w.finish(&mut s, Time(300), |_| RcptStatus::Delivered);
    let later: BTreeSet<Option<IpAddr>> = w
        .started
        .iter()
        .skip(1)
        .map(|(_, c, _)| w.source[c])
        .collect();
    assert_eq!(later.len(), 1);
    assert_ne!(
        later.into_iter().next().unwrap(),
        Some(first),
        "the suspended source is skipped"
    );
    // Orange is not affected on the suspended source.
    let keys = s.shaper().unwrap().keys(400);
    let name = format!("localip={first},grouping=yahoo");
    let held = keys.iter().find(|k| k.name.to_string() == name).unwrap();
    assert_eq!(held.concurrency_now, Some(0));
    for q in 7..=10 {
        message(
            &mut s,
            &mut w,
            Time(400),
            q,
            "",
            "orange.test",
            "a.mx.orange.test",
        );
    }
    let from_first = w
        .started
        .iter()
        .filter(|(_, c, _)| w.host[c].contains("orange") && w.source[c] == Some(first))
        .count();
    assert!(from_first > 0, "orange still leaves from {first}");
}

#[test]
fn a_window_starts_at_the_smaller_of_the_initial_concurrency_and_the_limit() {
    let mut t = TransportConfig::new("smtp");
    t.destination_concurrency_limit = 2;
    let mut s = Scheduler::new(SchedConfig {
        transports: vec![t],
        ..SchedConfig::default()
    })
    .unwrap();
    let mut w = World::default();
    for q in 1..=10 {
        message(&mut s, &mut w, Time(0), q, "", "slow.test", "mx.slow.test");
    }
    assert_eq!(w.open.len(), 2, "not initial_destination_concurrency's 5");
}

#[test]
fn transactions_and_idletimeout_come_from_the_policy() {
    let mut p = seed();
    p.policies[1].default.transactions = Some(3);
    p.policies[1].default.idle_timeout = Some(Duration::from_secs(7));
    p.policies[1].default.concurrency = Some(1);
    let mut s = sched(p);
    let mut w = World::default();
    for q in 1..=8 {
        message(
            &mut s,
            &mut w,
            Time(0),
            q,
            "",
            "other.test",
            "mx.other.test",
        );
    }
    let mut t = 0;
    while w.started.len() < 8 && t < 10_000 {
        t += 10;
        w.finish(&mut s, Time(t), |_| RcptStatus::Delivered);
        s.handle_timeout(Time(t));
        w.drain(&mut s, Time(t));
    }
    t += 10;
    w.finish(&mut s, Time(t), |_| RcptStatus::Delivered);
    let mut per_conn: BTreeMap<Serial, usize> = BTreeMap::new();
    for (_, c, _) in &w.started {
        *per_conn.entry(*c).or_default() += 1;
    }
    assert_eq!(per_conn.values().copied().collect::<Vec<_>>(), [3, 3, 2]);
    assert!(!w.open.is_empty(), "the last connection is pooled");
    s.handle_timeout(Time(t + 6_000));
    w.drain(&mut s, Time(t + 6_000));
    assert!(!w.open.is_empty(), "still within the idle timeout");
    s.handle_timeout(Time(t + 7_000));
    w.drain(&mut s, Time(t + 7_000));
    assert!(w.open.is_empty(), "closed after idletimeout");
}

/// Whether a rule matching `pattern` holds anything once a message's
/// server answered `reply`: at the greeting, or to its recipient.
fn rule_fires(pattern: &str, reply: mail::RemoteReply, at_greeting: bool) -> bool {
    let mut p = seed();
    p.replies = vec![suspend_rule(pattern, vec![])];
    let mut s = sched(p);
    let mut w = World {
        greeting: at_greeting.then(|| reply.clone()),
        ..World::default()
    };
    message(
        &mut s,
        &mut w,
        Time(0),
        1,
        "",
        "yahoo.test",
        "mta5.am0.yahoodns.test",
    );
    let why = Status::new(
        StatusCode::of_reply(reply.code),
        reply.reason(&mail::Said::InReplyTo("RCPT TO".into())),
    );
    w.finish_said(
        &mut s,
        Time(100),
        |_| RcptStatus::Deferred(why.clone()),
        Some(reply),
    );
    let fired = w
        .notices
        .iter()
        .any(|n| matches!(n, Notice::Suspended { .. }));
    assert_eq!(fired, !s.shaper().unwrap().holds(100).is_empty());
    fired
}

#[test]
fn a_421_at_the_greeting_is_matched_by_a_reply_rule() {
    let ts01 = remote(
        421,
        Some(StatusCode::known(4, 7, 0)),
        "[TS01] Messages from this IP temporarily deferred",
    );
    assert!(rule_fires(r"\[TS01\]", ts01.clone(), true));
    assert!(rule_fires(r"^421 4\.7\.0 ", ts01, true));
    let ts03 = remote(
        554,
        Some(StatusCode::known(5, 7, 1)),
        "[TS03] All messages from x will be permanently deferred",
    );
    assert!(rule_fires(r"\[TS03\]", ts03, true));
}

#[test]
fn a_reply_without_an_enhanced_code_is_matched_as_sent() {
    let plain = remote(421, None, "too many connections from your IP");
    assert!(rule_fires(
        r"^421 too many connections",
        plain.clone(),
        false
    ));
    assert!(rule_fires(
        r"^421 too many connections",
        plain.clone(),
        true
    ));
    // No enhanced code made up for the server.
    assert!(!rule_fires(r"^421 4\.0\.0", plain, false));
}

#[test]
fn sluices_own_failures_never_match_a_reply_rule() {
    let mut p = seed();
    p.replies = vec![suspend_rule(r"TS04|timed out", vec![])];
    let mut s = sched(p);
    let mut w = World::default();
    message(
        &mut s,
        &mut w,
        Time(0),
        1,
        "",
        "yahoo.test",
        "mta5.am0.yahoodns.test",
    );
    // Sluice's own words: a timeout it ran into, with the rule's text in it.
    w.finish(&mut s, Time(100), |_| {
        RcptStatus::Deferred(Status::new(StatusCode::SYSTEM_TEMP, "conversation with mta5.am0.yahoodns.test[127.0.0.9] timed out while sending [TS04] test"))
    });
    assert!(
        !w.notices
            .iter()
            .any(|n| matches!(n, Notice::Suspended { .. })),
        "{:?}",
        w.notices
    );
    assert!(s.shaper().unwrap().holds(100).is_empty());
}

#[test]
fn behind_a_relayhost_the_recipient_domain_finds_the_grouping() {
    let mut s = sched(seed());
    let mut w = World::default();
    for q in 0..20 {
        let own = if q % 2 == 0 {
            "orange.test"
        } else {
            "other.test"
        };
        routed(
            &mut s,
            &mut w,
            Time(0),
            q + 1,
            "",
            "[192.0.2.25]:25",
            "[192.0.2.25]:25",
            own,
        );
    }
    // The relay's MX names say nothing; the recipient domain finds orange.
    let mut t = 0;
    while w.started.len() < 20 && t < 20_000 {
        t += 50;
        w.finish(&mut s, Time(t), |_| RcptStatus::Delivered);
        s.handle_timeout(Time(t));
        w.drain(&mut s, Time(t));
    }
    assert_eq!(w.started.len(), 20);
    let keys = s.shaper().unwrap().keys(Time(t).0);
    let names: Vec<String> = keys.iter().map(|k| k.name.to_string()).collect();
    assert!(
        names.contains(&"localip=127.0.0.2,grouping=orange".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"localip=127.0.0.2,grouping=".to_string()),
        "{names:?}"
    );
    // Each connection carried one domain's mail only: orange's and the
    // other domain's sides differ.
    let mut by_conn: BTreeMap<Serial, BTreeSet<u64>> = BTreeMap::new();
    for (_, c, q) in &w.started {
        by_conn.entry(*c).or_default().insert(q % 2);
    }
    assert!(by_conn.values().all(|p| p.len() == 1), "{by_conn:?}");
}

#[test]
fn host_names_give_the_mx_name_and_the_address() {
    use crate::hostparts::host_parts;
    assert_eq!(host_parts("mx.example"), ("mx.example", ""));
    assert_eq!(
        host_parts("mx.example[192.0.2.1]"),
        ("mx.example", "192.0.2.1")
    );
    assert_eq!(
        host_parts("mx.example[2001:db8::1]"),
        ("mx.example", "2001:db8::1")
    );
    assert_eq!(
        host_parts("[192.0.2.9]:25"),
        ("[192.0.2.9]:25", "192.0.2.9")
    );
    assert_eq!(host_parts("[relay.example]:25"), ("[relay.example]:25", ""));
}

#[test]
fn a_suspension_by_a_field_no_policy_counts_by_still_holds() {
    let mut s = sched(seed());
    let mut w = World::default();
    s.handle(
        Time(0),
        Event::Suspend {
            when: vec![(Field::RecipientDomain, "slow.test".into())],
            until: None,
            tag: None,
        },
    )
    .unwrap();
    message(&mut s, &mut w, Time(0), 1, "", "slow.test", "mx.slow.test");
    message(&mut s, &mut w, Time(0), 2, "", "fast.test", "mx.fast.test");
    w.finish(&mut s, Time(10), |_| RcptStatus::Delivered);
    let hosts: Vec<&String> = w.host.values().collect();
    assert_eq!(hosts, ["mx.fast.test"], "slow.test's mail waits");
}

#[test]
fn a_closed_connection_keeps_its_slots_until_the_agent_says_it_is_gone() {
    let mut p = seed();
    p.policies[1].default.concurrency = Some(1);
    p.policies[1].default.idle_timeout = Some(Duration::from_secs(1));
    let mut t = TransportConfig::new("smtp");
    t.source_pool = Some("solo".into());
    let mut pol = p;
    pol.sources.push(Source {
        id: "solo".into(),
        localip: vec![ip("127.0.0.2")],
        tenantid: vec![],
        senderdomain: vec![],
        grouping: vec![],
    });
    let mut s = Scheduler::new(SchedConfig {
        transports: vec![t],
        shaping: Some(Arc::new(pol)),
        ..SchedConfig::default()
    })
    .unwrap();
    let mut w = World::default();
    message(&mut s, &mut w, Time(0), 1, "", "a.test", "mx.a.test");
    w.finish(&mut s, Time(10), |_| RcptStatus::Delivered);
    // The idle connection times out: closed, but its slot is kept.
    s.handle_timeout(Time(2_000));
    let mut release = None;
    while let Some(a) = s.poll_action() {
        if let Action::Close { release: r, .. } = a {
            release = r;
        }
    }
    let bind = release.expect("a shaped close hands its binding back");
    message(&mut s, &mut w, Time(2_000), 2, "", "b.test", "mx.b.test");
    assert_eq!(
        w.open.len(),
        1,
        "b.test waits for the slot a.test's connection holds"
    );
    s.handle(Time(2_050), Event::SlotReleased { bind }).unwrap();
    w.drain(&mut s, Time(2_050));
    assert!(
        w.host.values().any(|h| h == "mx.b.test"),
        "the slot went to b.test once the close was done"
    );
}

#[test]
fn a_destination_dead_elsewhere_waits_here_without_being_told_on() {
    let mut s = sched(seed());
    let mut w = World::default();
    message(&mut s, &mut w, Time(0), 1, "", "down.test", "mx.down.test");
    w.finish(&mut s, Time(10), |_| RcptStatus::Delivered);
    let opens = w.source.len();
    s.handle(
        Time(20),
        Event::DeadElsewhere {
            nexthop: "down.test".into(),
            until: Time(60_000),
        },
    )
    .unwrap();
    let acts: Vec<Action> = std::iter::from_fn(|| s.poll_action()).collect();
    assert!(
        !acts
            .iter()
            .any(|a| matches!(a, Action::Notice(Notice::DestinationDead { .. }))),
        "news from another instance is not told on: {acts:?}"
    );
    // New mail for it is deferred until then, without a connection.
    s.handle(
        Time(30),
        Event::MessageAdded(NewMessage {
            queue_id: QueueId(2),
            sender: "a@b.test".into(),
            tenant: None,
            job: None,
            size: 100,
            arrival: Time(30),
            attempts: 0,
            recipients: 1,
        }),
    )
    .unwrap();
    let _ = std::iter::from_fn(|| s.poll_action()).count();
    s.handle(
        Time(30),
        Event::RecipientsRead {
            queue_id: QueueId(2),
            groups: vec![RecipientGroup {
                domain: String::new(),
                transport: "smtp".into(),
                nexthop: "down.test".into(),
                hosts: vec![vec!["mx.down.test".into()]],
                recipients: vec![0],
            }],
            remaining: 0,
        },
    )
    .unwrap();
    let acts: Vec<Action> = std::iter::from_fn(|| s.poll_action()).collect();
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::Defer { next_attempt, status, .. }
            if *next_attempt == Time(60_000) && status.text.contains("dead"))),
        "{acts:?}"
    );
    assert!(!acts.iter().any(|a| matches!(a, Action::Open { .. })));
    assert_eq!(w.source.len(), opens);
    // Another name is not affected; a destination made later for the
    // dead name (here, through another transport's view) waits too.
    message(&mut s, &mut w, Time(40), 3, "", "up.test", "mx.up.test");
    s.handle(
        Time(50),
        Event::DeadElsewhere {
            nexthop: "later.test".into(),
            until: Time(90_000),
        },
    )
    .unwrap();
    let before = w.source.len();
    message(
        &mut s,
        &mut w,
        Time(60),
        4,
        "",
        "later.test",
        "mx.later.test",
    );
    assert_eq!(
        w.source.len(),
        before,
        "no connection to a next hop dead elsewhere"
    );
    assert!(w.host.values().any(|h| h == "mx.up.test"));
}

#[test]
fn a_host_another_instance_could_not_reach_is_skipped_here() {
    let mut s = sched(seed());
    let mut w = World::default();
    s.handle(
        Time(0),
        Event::HostRetryElsewhere {
            host: "mx.down.test".into(),
            until: Time(30_000),
        },
    )
    .unwrap();
    message(&mut s, &mut w, Time(10), 1, "", "down.test", "mx.down.test");
    assert!(
        w.host.is_empty(),
        "no connection to a host in retry elsewhere"
    );
    message(&mut s, &mut w, Time(10), 2, "", "up.test", "mx.up.test");
    assert_eq!(w.host.values().collect::<Vec<_>>(), ["mx.up.test"]);
}

#[test]
fn a_class_share_swap_never_puts_mail_of_another_pool_on_a_connection() {
    // Two pools chosen by sender domain; concurrency only (no rates), so
    // the class share swap is on.
    let pool = |id: &str, addr: &str, domain: &str| Source {
        id: id.into(),
        localip: vec![ip(addr)],
        tenantid: vec![],
        senderdomain: vec![domain.into()],
        grouping: vec![],
    };
    let pol = Policy {
        sources: vec![
            pool("a", "127.0.0.2", "a.test"),
            pool("b", "127.0.0.3", "b.test"),
        ],
        policies: vec![KeyPolicy {
            fields: vec![Field::LocalIp],
            default: Props {
                concurrency: Some(20),
                ..Props::default()
            },
            conditions: vec![],
        }],
        ..Policy::default()
    };
    let mut s = Scheduler::new(SchedConfig {
        transports: vec![TransportConfig::new("smtp")],
        shaping: Some(Arc::new(pol)),
        ..SchedConfig::default()
    })
    .unwrap();
    let mut w = World::default();
    let mut sender_of = BTreeMap::new();
    let now = Time(0);
    // A big sender of pool a fills its connections' backlogs (its class
    // grows past the small one); then a small sender of pool b.
    for q in 1..=43u64 {
        let sender = if q <= 40 {
            "big@a.test"
        } else {
            "small@b.test"
        };
        sender_of.insert(q, sender);
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
                recipients: 1,
            }),
        )
        .unwrap();
        let read = std::iter::from_fn(|| s.poll_action())
            .find(|a| matches!(a, Action::ReadRecipients { .. }))
            .expect("a read");
        let Action::ReadRecipients { queue_id, .. } = read else {
            unreachable!()
        };
        s.handle(
            now,
            Event::RecipientsRead {
                queue_id,
                groups: vec![RecipientGroup {
                    domain: "remote.test".into(),
                    transport: "smtp".into(),
                    nexthop: "[192.0.2.25]:25".into(),
                    hosts: vec![vec!["192.0.2.25".into()]],
                    recipients: vec![0],
                }],
                remaining: 0,
            },
        )
        .unwrap();
        w.drain(&mut s, now);
    }
    for i in 1..=60 {
        w.finish(&mut s, Time(i * 10), |_| RcptStatus::Delivered);
    }
    let done: BTreeSet<u64> = w.started.iter().map(|(_, _, q)| *q).collect();
    assert_eq!(done.len(), 43, "every message started");
    for (_, serial, q) in &w.started {
        let want = if sender_of[q].ends_with("@a.test") {
            "127.0.0.2"
        } else {
            "127.0.0.3"
        };
        let got = w.source[serial].map(|a| a.to_string()).unwrap_or_default();
        assert_eq!(got, want, "message {q} from {}", sender_of[q]);
    }
    s.check_invariants().unwrap();
}

#[test]
fn a_suspended_domain_behind_a_shared_relay_does_not_hold_up_the_others() {
    // Behind one relayhost the destination's queue mixes domains: the
    // suspended one's mail at its head must not keep the others waiting,
    // whether the suspension has an end or not.
    for until in [None, Some(Time(3_600_000))] {
        suspended_domain_behind_a_shared_relay(until);
    }
}

fn suspended_domain_behind_a_shared_relay(until: Option<Time>) {
    let mut s = sched(seed());
    let mut w = World::default();
    s.handle(
        Time(0),
        Event::Suspend {
            when: vec![(Field::RecipientDomain, "held.test".into())],
            until,
            tag: None,
        },
    )
    .unwrap();
    let relay = "[192.0.2.25]:25";
    for q in 1..=10 {
        routed(&mut s, &mut w, Time(0), q, "", relay, relay, "held.test");
    }
    for q in 11..=20 {
        routed(&mut s, &mut w, Time(0), q, "", relay, relay, "free.test");
    }
    let mut t = 0;
    while t < 5_000 {
        t += 50;
        w.finish(&mut s, Time(t), |_| RcptStatus::Delivered);
        s.handle_timeout(Time(t));
        w.drain(&mut s, Time(t));
    }
    let mut went: Vec<u64> = w.started.iter().map(|x| x.2).collect();
    went.sort();
    assert_eq!(
        went,
        (11..=20).collect::<Vec<_>>(),
        "free.test's mail went (suspension until {until:?})"
    );
    s.check_invariants().unwrap();
    // Lifted, the held mail goes too.
    let id = s.shaper().unwrap().holds(Time(t).0)[0].id;
    s.handle(Time(t), Event::Resume { id }).unwrap();
    w.drain(&mut s, Time(t));
    while t < 10_000 {
        t += 50;
        w.finish(&mut s, Time(t), |_| RcptStatus::Delivered);
        s.handle_timeout(Time(t));
        w.drain(&mut s, Time(t));
    }
    assert_eq!(w.started.len(), 20);
}

#[test]
fn the_refusals_of_one_transaction_count_once_toward_a_threshold() {
    let mut p = seed();
    let mut rule = suspend_rule(r"\[TS04\]", vec![(Field::Grouping, "yahoo".into())]);
    rule.threshold = Threshold::Count {
        n: 2,
        per: Duration::from_secs(60),
    };
    p.replies = vec![rule];
    let mut s = sched(p);
    let mut w = World::default();
    let yahoo = |s: &mut Scheduler, w: &mut World, t: u64, q: u64| {
        message(s, w, Time(t), q, "", "yahoo.test", "mta5.am0.yahoodns.test");
    };
    // The server names each refused recipient in its text.
    let each = |who: &str| {
        remote(
            421,
            Some(StatusCode::known(4, 7, 0)),
            &format!("[TS04] <{who}@yahoo.test> deferred"),
        )
    };
    let why = Status::new(StatusCode::known(4, 7, 0), "deferred");
    let suspended = |w: &World| {
        w.notices
            .iter()
            .any(|n| matches!(n, Notice::Suspended { .. }))
    };
    yahoo(&mut s, &mut w, 1000, 1);
    w.finish_said(
        &mut s,
        Time(1100),
        |_| RcptStatus::Deferred(why.clone()),
        [each("a"), each("b"), each("c")],
    );
    assert!(
        !suspended(&w),
        "one transaction counts once: {:?}",
        w.notices
    );
    yahoo(&mut s, &mut w, 1200, 2);
    w.finish_said(
        &mut s,
        Time(1300),
        |_| RcptStatus::Deferred(why.clone()),
        [each("d")],
    );
    assert!(suspended(&w), "the second transaction: {:?}", w.notices);
}
