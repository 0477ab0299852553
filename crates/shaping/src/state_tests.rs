use super::*;
use crate::model::{Condition, KeyPolicy, ReplyRule, Suspension};

fn rate(tokens: u32, secs: u64) -> Rate {
    Rate {
        tokens,
        per: Duration::from_secs(secs),
    }
}

/// The seed's `(localip, grouping)` policy: 20 by default, orange 2 at
/// 10/1, yahoo from 127.0.0.2 at 5; and a tenant policy at 3/1.
fn seed(algorithm: RateAlgorithm) -> Policy {
    Policy {
        algorithm,
        policies: vec![
            KeyPolicy {
                fields: vec![Field::LocalIp, Field::Grouping],
                default: Props {
                    concurrency: Some(20),
                    ..Props::default()
                },
                conditions: vec![
                    Condition {
                        when: vec![(Field::Grouping, "orange".into())],
                        then: Props {
                            concurrency: Some(2),
                            rate: Some(rate(10, 1)),
                            ..Props::default()
                        },
                    },
                    Condition {
                        when: vec![
                            (Field::LocalIp, "127.0.0.2".into()),
                            (Field::Grouping, "yahoo".into()),
                        ],
                        then: Props {
                            concurrency: Some(5),
                            ..Props::default()
                        },
                    },
                ],
            },
            KeyPolicy {
                fields: vec![Field::TenantId],
                default: Props::default(),
                conditions: vec![Condition {
                    when: vec![(Field::TenantId, "acme".into())],
                    then: Props {
                        rate: Some(rate(3, 1)),
                        ..Props::default()
                    },
                }],
            },
        ],
        ..Policy::default()
    }
}

fn binding(ip: &str, grouping: &str, tenant: &str) -> Binding {
    let mut b = Binding::default();
    b.set(Field::LocalIp, ip);
    b.set(Field::Grouping, grouping);
    b.set(Field::TenantId, tenant);
    b
}

fn shaper(p: Policy) -> Shaper {
    Shaper::new(Arc::new(p))
}

#[test]
fn a_connection_holds_a_slot_of_each_key_until_it_closes() {
    let mut s = shaper(seed(RateAlgorithm::TokenBucket));
    let a = s.bind(&binding("127.0.0.2", "orange", ""));
    let b = s.bind(&binding("127.0.0.3", "orange", ""));
    assert_eq!(s.bind(&binding("127.0.0.2", "orange", "")), a, "interned");
    for _ in 0..2 {
        assert_eq!(s.may_open(0, a), Ok(()));
        s.opened(0, a);
    }
    let Err(Block::Full(k)) = s.may_open(0, a) else {
        panic!("a third connection from one source to orange");
    };
    assert_eq!(s.connections(k), 2);
    assert!(s.has_key(a, k) && !s.has_key(b, k));
    assert_eq!(s.may_open(0, b), Ok(()), "the other source has its own 2");
    s.closed(a);
    assert_eq!(s.may_open(0, a), Ok(()));
    // A source to another grouping has the default 20.
    let c = s.bind(&binding("127.0.0.2", "other", ""));
    for _ in 0..20 {
        assert_eq!(s.may_open(0, c), Ok(()));
        s.opened(0, c);
    }
    assert!(matches!(s.may_open(0, c), Err(Block::Full(_))));
}

#[test]
fn a_token_bucket_spaces_transactions_evenly_after_its_burst() {
    let mut s = shaper(seed(RateAlgorithm::TokenBucket));
    let a = s.bind(&binding("127.0.0.2", "orange", ""));
    let mut sent = Vec::new();
    let mut t = 0;
    while t < 60_000 {
        match s.may_send(t, a) {
            Ok(()) => sent.push(t),
            Err(Block::Until(at)) => {
                assert!(at > t, "a retry time in the future");
                t = at;
                continue;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    // The full bucket's 10, then one every 100 ms.
    assert_eq!(sent.len(), 10 + 600 - 1);
    assert!(sent[..10].iter().all(|&x| x == 0));
    let gaps: Vec<u64> = sent[10..].windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|&g| g == 100), "{gaps:?}");
}

#[test]
fn a_fixed_window_bursts_at_each_window_start() {
    let mut s = shaper(seed(RateAlgorithm::FixedWindow));
    let a = s.bind(&binding("127.0.0.2", "orange", ""));
    let mut sent = Vec::new();
    let mut t = 0;
    while t < 5_000 {
        match s.may_send(t, a) {
            Ok(()) => sent.push(t),
            Err(Block::Until(at)) => t = at,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(sent.len(), 50);
    for w in 0..5 {
        assert_eq!(sent.iter().filter(|&&x| x == w * 1000).count(), 10);
    }
}

#[test]
fn a_transaction_takes_a_token_of_every_rate_or_none() {
    let mut s = shaper(seed(RateAlgorithm::TokenBucket));
    // acme's 3/1 and orange's 10/1 both apply.
    let a = s.bind(&binding("127.0.0.2", "orange", "acme"));
    let b = s.bind(&binding("127.0.0.3", "orange", ""));
    for _ in 0..3 {
        assert_eq!(s.may_send(0, a), Ok(()));
    }
    assert!(matches!(s.may_send(0, a), Err(Block::Until(334))));
    // The refusal took no orange token from 127.0.0.2: its 7 remain.
    let c = s.bind(&binding("127.0.0.2", "orange", "other"));
    for _ in 0..7 {
        assert_eq!(s.may_send(0, c), Ok(()));
    }
    assert!(s.may_send(0, c).is_err());
    assert_eq!(s.may_send(0, b), Ok(()), "another source's bucket");
}

#[test]
fn connect_interval_and_per_connection_limits() {
    let mut p = seed(RateAlgorithm::TokenBucket);
    p.policies[0].conditions[0].then.connect_interval = Some(Duration::from_millis(500));
    p.policies[0].conditions[0].then.transactions = Some(7);
    p.policies[0].conditions[0].then.idle_timeout = Some(Duration::from_secs(5));
    p.policies[1].default.transactions = Some(3);
    let mut s = shaper(p);
    let a = s.bind(&binding("127.0.0.2", "orange", ""));
    s.opened(1000, a);
    assert_eq!(s.may_open(1200, a), Err(Block::Until(1500)));
    assert_eq!(s.may_open(1500, a), Ok(()));
    assert_eq!(
        s.connection_limits(a),
        (Some(3), Some(Duration::from_secs(5))),
        "the smallest of the keys'"
    );
}

#[test]
fn an_operator_suspension_holds_matching_mail_until_it_ends_or_is_lifted() {
    let mut s = shaper(seed(RateAlgorithm::TokenBucket));
    let y = s.bind(&binding("127.0.0.2", "yahoo", ""));
    let y3 = s.bind(&binding("127.0.0.3", "yahoo", ""));
    let id = s.suspend(
        vec![
            (Field::LocalIp, "127.0.0.2".into()),
            (Field::Grouping, "yahoo".into()),
        ],
        Some(30_000),
        Some("maintenance".into()),
    );
    assert_eq!(s.may_open(0, y), Err(Block::Until(30_000)));
    assert_eq!(s.may_send(0, y), Err(Block::Until(30_000)));
    assert_eq!(
        s.may_open(0, y3),
        Ok(()),
        "the other source is not suspended"
    );
    assert_eq!(s.next_change(0), Some(30_000));
    // It ends at the configured limits at once: no ramp for an operator's.
    assert_eq!(s.may_open(30_000, y), Ok(()));
    for _ in 0..5 {
        s.opened(30_000, y);
    }
    assert!(matches!(s.may_open(30_000, y), Err(Block::Full(_))));
    let forever = s.suspend(vec![(Field::Grouping, "yahoo".into())], None, None);
    assert_eq!(s.may_open(40_000, y3), Err(Block::Suspended));
    assert!(s.resume(forever));
    assert!(!s.resume(forever));
    assert_eq!(s.may_open(40_000, y3), Ok(()));
    assert!(
        s.holds(40_000).iter().all(|h| h.id != id),
        "expired hold dropped"
    );
}

fn ts04(action: ReplyAction, threshold: Threshold) -> ReplyRule {
    ReplyRule {
        pattern: regex::Regex::new(r"\[TS04\]").unwrap(),
        threshold,
        fields: vec![Field::LocalIp, Field::Grouping],
        when: vec![(Field::Grouping, "yahoo".into())],
        action,
        duration: Duration::from_secs(7200),
        ramp_step_percent: 25,
        ramp_interval: Duration::from_secs(60),
    }
}

#[test]
fn a_ts04_reply_suspends_the_source_and_grouping_then_ramps_back() {
    let mut p = seed(RateAlgorithm::TokenBucket);
    p.replies = vec![ts04(ReplyAction::Suspend, Threshold::Immediate)];
    let mut s = shaper(p);
    let y = s.bind(&binding("127.0.0.2", "yahoo", ""));
    let y3 = s.bind(&binding("127.0.0.3", "yahoo", ""));
    let o = s.bind(&binding("127.0.0.2", "orange", ""));
    assert!(
        s.reply(0, o, "421 4.7.0 [TS04] go away").is_empty(),
        "not yahoo"
    );
    assert!(s.reply(0, y, "421 4.7.0 try later").is_empty(), "no [TS04]");
    let t = s.reply(1000, y, "421 4.7.0 [TS04] Messages from 127.0.0.2 deferred");
    assert_eq!(t.len(), 1);
    let hold_end = 1000 + 7_200_000;
    assert_eq!(s.may_open(2000, y), Err(Block::Until(hold_end)));
    assert_eq!(s.may_open(2000, y3), Ok(()), "other sources unaffected");
    assert_eq!(s.may_open(2000, o), Ok(()), "other groupings unaffected");
    // Ramp: 25 % of 5 (2 connections), then 50 % (3), 75 % (4), 100 %.
    let allowed = |s: &mut Shaper, now: Ms| {
        let mut n = 0;
        while s.may_open(now, y).is_ok() {
            s.opened(now, y);
            n += 1;
        }
        for _ in 0..n {
            s.closed(y);
        }
        n
    };
    assert_eq!(allowed(&mut s, hold_end), 2);
    assert_eq!(s.next_change(hold_end), Some(hold_end + 60_000));
    assert_eq!(allowed(&mut s, hold_end + 60_000), 3);
    assert_eq!(allowed(&mut s, hold_end + 120_000), 4);
    assert_eq!(allowed(&mut s, hold_end + 180_000), 5);
    assert_eq!(s.next_change(hold_end + 180_000), None);
    assert!(s.holds(hold_end + 180_000).is_empty());
}

#[test]
fn a_backoff_rule_fires_at_its_threshold_and_lowers_the_limits() {
    let mut p = seed(RateAlgorithm::TokenBucket);
    p.replies = vec![ts04(
        ReplyAction::Backoff(Props {
            concurrency: Some(1),
            rate: Some(rate(1, 10)),
            ..Props::default()
        }),
        Threshold::Count {
            n: 3,
            per: Duration::from_secs(60),
        },
    )];
    let mut s = shaper(p);
    let y = s.bind(&binding("127.0.0.2", "yahoo", ""));
    assert!(s.reply(0, y, "[TS04]").is_empty());
    assert!(
        s.reply(70_000, y, "[TS04]").is_empty(),
        "the first fell out"
    );
    assert!(s.reply(80_000, y, "[TS04]").is_empty());
    assert_eq!(s.reply(90_000, y, "[TS04]").len(), 1);
    s.opened(90_000, y);
    assert!(
        matches!(s.may_open(90_000, y), Err(Block::Full(_))),
        "concurrency 1"
    );
    assert_eq!(s.may_send(90_000, y), Ok(()));
    assert_eq!(s.may_send(90_000, y), Err(Block::Until(100_000)), "1/10");
}

#[test]
fn reload_keeps_buckets_connections_and_holds_of_keys_that_remain() {
    let mut s = shaper(seed(RateAlgorithm::TokenBucket));
    let a = s.bind(&binding("127.0.0.2", "orange", ""));
    s.opened(0, a);
    for _ in 0..10 {
        s.may_send(0, a).unwrap();
    }
    let id = s.suspend(vec![(Field::Grouping, "yahoo".into())], Some(50_000), None);
    let mut p = seed(RateAlgorithm::TokenBucket);
    p.policies[0].conditions[0].then.rate = Some(rate(20, 1));
    p.policies[0].conditions[0].then.concurrency = Some(1);
    p.suspensions = vec![Suspension {
        when: vec![(Field::TenantId, "spammy".into())],
        tag: None,
    }];
    s.reload(Arc::new(p));
    assert!(
        matches!(s.may_open(0, a), Err(Block::Full(_))),
        "the connection still counts"
    );
    // The emptied bucket was kept: at 20/1 one token comes after 50 ms.
    assert_eq!(s.may_send(0, a), Err(Block::Until(50)));
    assert!(s.holds(0).iter().any(|h| h.id == id));
    let sp = s.bind(&binding("127.0.0.3", "other", "spammy"));
    assert_eq!(
        s.may_open(0, sp),
        Err(Block::Suspended),
        "static suspension"
    );
    let st = s
        .holds(0)
        .iter()
        .find(|h| h.origin == Origin::Static)
        .unwrap()
        .id;
    assert!(
        !s.resume(st),
        "a static suspension stays while the file has it"
    );
}

#[test]
fn gc_forgets_bindings_and_keys_nobody_uses() {
    let mut s = shaper(seed(RateAlgorithm::TokenBucket));
    let a = s.bind(&binding("127.0.0.2", "orange", ""));
    let b = s.bind(&binding("127.0.0.3", "orange", ""));
    s.opened(0, a);
    s.may_send(0, b).unwrap();
    assert_eq!(s.key_count(), 2);
    assert_eq!(s.gc(0, |_| false), 1, "b has no connection");
    assert_eq!(s.key_count(), 2, "b's bucket is not full yet");
    assert_eq!(s.gc(1000, |_| false), 0);
    assert_eq!(s.key_count(), 1);
    assert_eq!(
        s.binding(a).map(|b| b.get(Field::LocalIp)),
        Some("127.0.0.2")
    );
    s.closed(a);
    s.gc(1000, |_| false);
    assert_eq!(s.key_count(), 0);
    let views = s.keys(1000);
    assert!(views.is_empty());
}

#[test]
fn reports_show_configured_and_current_limits() {
    let mut s = shaper(seed(RateAlgorithm::TokenBucket));
    let y = s.bind(&binding("127.0.0.2", "yahoo", ""));
    s.opened(0, y);
    s.suspend(vec![(Field::Grouping, "yahoo".into())], Some(10_000), None);
    let v = s.keys(0);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].name.to_string(), "localip=127.0.0.2,grouping=yahoo");
    assert_eq!(v[0].props.concurrency, Some(5));
    assert_eq!(v[0].concurrency_now, Some(0), "suspended");
    assert_eq!(v[0].connections, 1);
    assert_eq!(s.keys(10_000)[0].concurrency_now, Some(5));
}

/// A share that grants `slots` of every shared key and half of every rate,
/// and records what it is told.
#[derive(Debug, Default)]
struct FakeShare {
    slots: u32,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Share for FakeShare {
    fn concurrency(&self, _key: &KeyName, cluster: u32) -> u32 {
        self.slots.min(cluster)
    }
    fn rate(&self, _key: &KeyName, cluster: Rate) -> Rate {
        Rate {
            tokens: (cluster.tokens / 2).max(1),
            per: cluster.per,
        }
    }
    fn want(&mut self, key: &KeyName, held: u32, cluster: u32) {
        self.log
            .lock()
            .unwrap()
            .push(format!("want {key} {held} of {cluster}"));
    }
    fn opened(&mut self, key: &KeyName) {
        self.log.lock().unwrap().push(format!("opened {key}"));
    }
    fn closed(&mut self, key: &KeyName) {
        self.log.lock().unwrap().push(format!("closed {key}"));
    }
    fn sent(&mut self, key: &KeyName, cluster: Rate) {
        self.log
            .lock()
            .unwrap()
            .push(format!("took {key} of {}", cluster.tokens));
    }
    fn starved(&self, key: &KeyName, cluster: Rate) {
        self.log
            .lock()
            .unwrap()
            .push(format!("starved {key} of {}", cluster.tokens));
    }
}

#[test]
fn a_share_grants_the_slots_and_divides_the_rates_of_shared_keys_only() {
    let mut p = seed(RateAlgorithm::TokenBucket);
    // cluster: false on yahoo from 127.0.0.2: its 5 stay this instance's.
    p.policies[0].conditions[1].then.local = crate::props::prop_bit::CONCURRENCY;
    let mut s = shaper(p);
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    s.set_share(Some(Box::new(FakeShare {
        slots: 1,
        log: log.clone(),
    })));
    let o = s.bind(&binding("127.0.0.2", "orange", ""));
    assert_eq!(s.may_open(0, o), Ok(()));
    s.opened(0, o);
    assert!(
        matches!(s.may_open(0, o), Err(Block::Full(_))),
        "one slot granted of 2"
    );
    assert_eq!(
        log.lock().unwrap().clone(),
        [
            "opened localip=127.0.0.2,grouping=orange",
            "want localip=127.0.0.2,grouping=orange 1 of 2"
        ]
    );
    s.closed(o);
    assert_eq!(
        log.lock().unwrap().last().unwrap(),
        "closed localip=127.0.0.2,grouping=orange"
    );
    // Half of orange's 10/1: five at once, then one each 200 ms.
    for _ in 0..5 {
        assert_eq!(s.may_send(0, o), Ok(()));
    }
    assert_eq!(s.may_send(0, o), Err(Block::Until(200)));
    // The share heard each token taken and the refusal, with the
    // cluster's rate: the backlog the coordinator divides by.
    let log_now = log.lock().unwrap().clone();
    let tail: Vec<&str> = log_now[log_now.len() - 6..]
        .iter()
        .map(|s| s.as_str())
        .collect();
    assert_eq!(
        tail,
        [
            "took localip=127.0.0.2,grouping=orange of 10",
            "took localip=127.0.0.2,grouping=orange of 10",
            "took localip=127.0.0.2,grouping=orange of 10",
            "took localip=127.0.0.2,grouping=orange of 10",
            "took localip=127.0.0.2,grouping=orange of 10",
            "starved localip=127.0.0.2,grouping=orange of 10",
        ]
    );
    // The cluster: false clause is not shared; nor is the tenant policy's
    // concurrency (its fields lack localip and grouping).
    let y = s.bind(&binding("127.0.0.2", "yahoo", ""));
    for _ in 0..5 {
        assert_eq!(s.may_open(0, y), Ok(()));
        s.opened(0, y);
    }
    let views = s.keys(0);
    let orange = views
        .iter()
        .find(|k| k.name.to_string().ends_with("orange"))
        .unwrap();
    assert_eq!(orange.local_concurrency, Some(1));
    assert_eq!(orange.local_rate.map(|r| r.tokens), Some(5));
    let yahoo = views
        .iter()
        .find(|k| k.name.to_string().ends_with("yahoo"))
        .unwrap();
    assert_eq!(yahoo.local_concurrency, None, "cluster: false");
}

#[test]
fn the_refusals_of_one_transaction_count_once_for_a_rule() {
    let mut p = seed(RateAlgorithm::TokenBucket);
    p.replies = vec![ts04(
        ReplyAction::Backoff(Props {
            concurrency: Some(1),
            ..Props::default()
        }),
        Threshold::Count {
            n: 3,
            per: Duration::from_secs(60),
        },
    )];
    let mut s = shaper(p);
    let y = s.bind(&binding("127.0.0.2", "yahoo", ""));
    // One message to three recipients, each refused with its own text.
    let one = [
        "421 4.7.0 [TS04] <a@y.example> deferred",
        "421 4.7.0 [TS04] <b@y.example> deferred",
        "421 4.7.0 [TS04] <c@y.example> deferred",
    ];
    assert!(
        s.replies(10_000, y, &one).is_empty(),
        "one transaction, one hit"
    );
    assert!(s
        .replies(11_000, y, &["250 ok", "550 5.1.1 no such user"])
        .is_empty());
    assert!(s.replies(12_000, y, &one[..1]).is_empty());
    assert_eq!(
        s.replies(13_000, y, &one[1..]).len(),
        1,
        "the third transaction"
    );
}
