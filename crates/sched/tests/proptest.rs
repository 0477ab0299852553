//! Property tests: random event sequences keep the scheduler's invariants,
//! never open a connection beyond the window or the process limit, and
//! every recipient ends delivered, deferred or bounced.

use proptest::prelude::*;
use sched::*;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
enum Op {
    Add { sender: u8, dests: Vec<u8> },
    OpenOk(usize),
    OpenFail(usize, bool),
    Done(usize, u8, bool),
    PeerClose(usize),
    Tick(u32),
    Reconfig(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..4, prop::collection::vec(0u8..5, 1..8)).prop_map(|(sender, dests)| Op::Add { sender, dests }),
        3 => (0usize..8).prop_map(Op::OpenOk),
        1 => (0usize..8, any::<bool>()).prop_map(|(i, u)| Op::OpenFail(i, u)),
        4 => (0usize..8, any::<u8>(), prop::bool::weighted(0.1)).prop_map(|(i, s, f)| Op::Done(i, s, f)),
        1 => (0usize..8).prop_map(Op::PeerClose),
        1 => (1u32..400_000).prop_map(Op::Tick),
        1 => any::<u8>().prop_map(Op::Reconfig),
    ]
}

struct Driver {
    s: Scheduler,
    now: Time,
    rcpt_dest: BTreeMap<u64, Vec<u8>>,
    read: BTreeMap<u64, usize>,
    opens: Vec<ConnId>,
    live: BTreeSet<ConnId>,
    starts: Vec<(ConnId, EntryId, Vec<u32>)>,
    status: BTreeMap<(u64, u32), &'static str>,
    done: BTreeMap<u64, u32>,
    next_q: u64,
    limit: u32,
    last_open: BTreeMap<DestId, Time>,
    min_open_gap: Option<u64>,
}

impl Driver {
    fn new(cfg: SchedConfig) -> Self {
        Self::with_policy(cfg, Box::new(sched::ThreeClass))
    }

    fn with_policy(cfg: SchedConfig, policy: Box<dyn sched::Policy>) -> Self {
        let limit = cfg.transports[0].process_limit;
        Driver {
            s: Scheduler::with_policy(cfg, policy).unwrap(),
            now: Time(0),
            rcpt_dest: BTreeMap::new(),
            read: BTreeMap::new(),
            opens: vec![],
            live: BTreeSet::new(),
            starts: vec![],
            status: BTreeMap::new(),
            done: BTreeMap::new(),
            next_q: 0,
            limit,
            last_open: BTreeMap::new(),
            min_open_gap: None,
        }
    }

    fn ev(&mut self, e: Event) {
        self.s.handle(self.now, e).expect("valid event accepted");
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(a) = self.s.poll_action() {
            match a {
                Action::ReadRecipients { queue_id, max } => {
                    let dests = &self.rcpt_dest[&queue_id.0];
                    let from = self.read[&queue_id.0];
                    let to = (from + max as usize).min(dests.len());
                    let mut by: BTreeMap<u8, Vec<u32>> = BTreeMap::new();
                    for (i, d) in dests.iter().enumerate().take(to).skip(from) {
                        by.entry(*d).or_default().push(i as u32);
                    }
                    self.read.insert(queue_id.0, to);
                    let groups = by
                        .into_iter()
                        .map(|(d, recipients)| RecipientGroup {
                            domain: String::new(),
                            transport: "smtp".into(),
                            nexthop: format!("d{d}.example"),
                            hosts: vec![
                                vec![format!("a.d{d}"), format!("b.d{d}")],
                                vec!["backup".into()],
                            ],
                            recipients,
                        })
                        .collect();
                    let remaining = (dests.len() - to) as u32;
                    self.s
                        .handle(
                            self.now,
                            Event::RecipientsRead {
                                queue_id,
                                groups,
                                remaining,
                            },
                        )
                        .expect("read accepted");
                }
                Action::Open {
                    conn, destination, ..
                } => {
                    let busy = self.s.dest_busy(destination).unwrap();
                    let window = self.s.window(destination).unwrap();
                    assert!(
                        busy <= window,
                        "open beyond window: busy {busy} window {window}"
                    );
                    assert!(
                        self.s.connections() as u32 <= self.limit,
                        "beyond process limit"
                    );
                    if let (Some(gap), Some(last)) =
                        (self.min_open_gap, self.last_open.get(&destination))
                    {
                        assert!(
                            self.now.0 - last.0 >= gap,
                            "connect interval violated at {:?}",
                            self.now
                        );
                    }
                    self.last_open.insert(destination, self.now);
                    self.opens.push(conn);
                    self.live.insert(conn);
                }
                Action::Start {
                    conn,
                    entry,
                    recipients,
                    ..
                } => self.starts.push((conn, entry, recipients)),
                Action::Close { conn, .. } => {
                    self.live.remove(&conn);
                    self.opens.retain(|c| *c != conn);
                }
                Action::Defer {
                    queue_id,
                    recipients,
                    ..
                } => {
                    for r in recipients {
                        self.status.insert((queue_id.0, r), "deferred");
                    }
                }
                Action::Bounce {
                    queue_id,
                    recipients,
                    ..
                } => {
                    for r in recipients {
                        self.status.insert((queue_id.0, r), "bounced");
                    }
                }
                Action::Journal(Record::Delivered {
                    queue_id,
                    recipients,
                }) => {
                    for r in recipients {
                        self.status.insert((queue_id.0, r), "delivered");
                    }
                }
                Action::MessageDone { queue_id, .. } => {
                    *self.done.entry(queue_id.0).or_default() += 1
                }
                Action::Journal(_) | Action::Notice(_) => {}
            }
        }
    }

    fn forget_conn(&mut self, c: ConnId) {
        self.live.remove(&c);
        self.opens.retain(|x| *x != c);
        self.starts.retain(|x| x.0 != c);
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Add { sender, dests } => {
                let q = self.next_q;
                self.next_q += 1;
                self.rcpt_dest.insert(q, dests.clone());
                self.read.insert(q, 0);
                let m = NewMessage {
                    queue_id: QueueId(q),
                    sender: format!("s{sender}@x"),
                    tenant: None,
                    job: None,
                    size: 100,
                    arrival: self.now,
                    attempts: 0,
                    recipients: dests.len() as u32,
                };
                self.ev(Event::MessageAdded(m));
            }
            Op::OpenOk(i) if !self.opens.is_empty() => {
                let c = self.opens.remove(i % self.opens.len());
                self.ev(Event::ConnectionOpened { conn: c });
            }
            Op::OpenFail(i, unreachable) if !self.opens.is_empty() => {
                let c = self.opens[i % self.opens.len()];
                self.forget_conn(c);
                let failure = if unreachable {
                    ConnFailure::Unreachable
                } else {
                    ConnFailure::Handshake
                };
                self.ev(Event::ConnectionFailed {
                    conn: c,
                    failure,
                    status: Status::new(StatusCode::SYSTEM_TEMP, "x"),
                    remote: None,
                });
            }
            Op::Done(i, seed, conn_failed) if !self.starts.is_empty() => {
                let (c, e, r) = self.starts.remove(i % self.starts.len());
                let results = r
                    .iter()
                    .map(|&x| {
                        let k = (u32::from(seed) + x) % 7;
                        let st = match k {
                            0 => RcptStatus::Deferred(Status::new(StatusCode::SYSTEM_TEMP, "4xx")),
                            1 => {
                                RcptStatus::Bounced(Status::new(StatusCode::known(5, 0, 0), "5xx"))
                            }
                            _ => RcptStatus::Delivered,
                        };
                        (x, st)
                    })
                    .collect();
                if conn_failed {
                    self.forget_conn(c);
                }
                self.ev(Event::DeliveryDone {
                    conn: c,
                    entry: e,
                    results,
                    conn_failed,
                    remote: Vec::new(),
                });
            }
            Op::PeerClose(i) if !self.live.is_empty() => {
                let c = *self.live.iter().nth(i % self.live.len()).unwrap();
                self.forget_conn(c);
                self.ev(Event::ConnectionClosed { conn: c });
            }
            Op::Reconfig(k) => {
                // A reload with other limits: windows clamp; connections above
                // a lowered process limit may stay, but no new one may open.
                let mut c = self.s.config().clone();
                c.transports[0].process_limit = 3 + u32::from(k % 4);
                c.transports[0].destination_concurrency_limit = 1 + u32::from(k / 4 % 4);
                self.limit = c.transports[0].process_limit;
                self.ev(Event::ConfigChanged(Box::new(c)));
            }
            Op::Tick(ms) => {
                self.now = Time(self.now.0 + u64::from(ms));
                self.s.handle_timeout(self.now);
                self.drain();
            }
            _ => {}
        }
        self.s.check_invariants().unwrap();
    }

    /// Answers everything successfully and runs timers until memory is empty.
    fn finish(&mut self) {
        for _ in 0..10_000 {
            if let Some(c) = self.opens.pop() {
                self.ev(Event::ConnectionOpened { conn: c });
            } else if let Some((c, e, r)) = self.starts.pop() {
                let results = r.iter().map(|&x| (x, RcptStatus::Delivered)).collect();
                self.ev(Event::DeliveryDone {
                    conn: c,
                    entry: e,
                    results,
                    conn_failed: false,
                    remote: Vec::new(),
                });
            } else if self.s.messages_in_memory() > 0 {
                let t = self.s.poll_timeout().expect("work left needs a timer");
                self.now = self.now.max(t);
                self.s.handle_timeout(self.now);
                self.drain();
            } else {
                break;
            }
            self.s.check_invariants().unwrap();
        }
    }
}

fn small_cfg() -> SchedConfig {
    let mut c = SchedConfig::default();
    let t = &mut c.transports[0];
    t.process_limit = 6;
    t.destination_recipient_limit = 2;
    t.initial_destination_concurrency = 2;
    t.destination_concurrency_limit = 3;
    t.host_retry_time = std::time::Duration::from_secs(30);
    t.sender_class_thresholds = [2, 5];
    c.qmgr_message_recipient_limit = 12;
    c.qmgr_message_recipient_minimum = 2;
    t.recipient_limit = 8;
    c
}

fn limited_cfg() -> SchedConfig {
    use sched::limiter::{Algorithm, Field, LimitRule, Scope};
    let mut c = small_cfg();
    c.limits = vec![
        LimitRule {
            fields: vec![Field::Destination],
            when: vec![],
            scope: Scope::Connect,
            algorithm: Algorithm::MinInterval(std::time::Duration::from_secs(5)),
        },
        LimitRule {
            fields: vec![Field::Destination],
            when: vec![],
            scope: Scope::Transaction,
            algorithm: Algorithm::TokenBucket {
                tokens: 2,
                interval: std::time::Duration::from_secs(10),
            },
        },
    ];
    c
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_invariants_and_account_for_every_recipient(ops in prop::collection::vec(op(), 1..120)) {
        let mut d = Driver::new(small_cfg());
        for o in ops {
            d.apply(o);
        }
        d.finish();
        prop_assert_eq!(d.s.messages_in_memory(), 0);
        prop_assert_eq!(d.s.recipients_in_core(), 0);
        for (q, dests) in &d.rcpt_dest {
            prop_assert_eq!(d.done.get(q).copied(), Some(1), "message {} done once", q);
            for r in 0..dests.len() as u32 {
                prop_assert!(d.status.contains_key(&(*q, r)), "recipient {}/{} has no final state", q, r);
            }
        }
    }

    #[test]
    fn nqmgr_preemption_keeps_invariants_and_accounts_for_every_recipient(ops in prop::collection::vec(op(), 1..120)) {
        let mut d = Driver::with_policy(small_cfg(), Box::new(sched::Nqmgr::default()));
        for o in ops {
            d.apply(o);
        }
        d.finish();
        prop_assert_eq!(d.s.messages_in_memory(), 0);
        for (q, dests) in &d.rcpt_dest {
            prop_assert_eq!(d.done.get(q).copied(), Some(1), "message {} done once", q);
            for r in 0..dests.len() as u32 {
                prop_assert!(d.status.contains_key(&(*q, r)), "recipient {}/{} has no final state", q, r);
            }
        }
    }

    #[test]
    fn rate_limits_hold_under_random_sequences(ops in prop::collection::vec(op(), 1..120)) {
        let mut d = Driver::new(limited_cfg());
        d.min_open_gap = Some(5_000);
        for o in ops {
            d.apply(o);
        }
        d.finish();
        prop_assert_eq!(d.s.messages_in_memory(), 0);
        for (q, dests) in &d.rcpt_dest {
            prop_assert_eq!(d.done.get(q).copied(), Some(1), "message {} done once", q);
            for r in 0..dests.len() as u32 {
                prop_assert!(d.status.contains_key(&(*q, r)), "recipient {}/{} has no final state", q, r);
            }
        }
    }

    #[test]
    fn same_events_same_actions(ops in prop::collection::vec(op(), 1..60)) {
        let run = |ops: &[Op]| {
            let mut d = Driver::new(small_cfg());
            for o in ops {
                d.apply(o.clone());
            }
            (d.status.clone(), d.done.clone(), d.s.stats().clone())
        };
        prop_assert_eq!(run(&ops), run(&ops));
    }
}
