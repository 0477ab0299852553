//! The qmgr↔agent connection life cycle as a property: a real scheduler,
//! [`AgentConns`] as qmgr uses it, and a model agent that keeps its own
//! connection table as bin/smtp does (refusing an id it still holds),
//! driven by random interleavings of open, refused open, delivery, loss
//! while opening, loss while sending, a peer closing an idle connection,
//! qmgr's own close and an agent restart. In every interleaving the
//! scheduler never hears of a connection or entry it does not know, the
//! agent never sees an id it already holds, no recipient is delivered twice,
//! and once the agent behaves every recipient is delivered.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use proptest::prelude::*;
use sched::{
    Action, ConnFailure, EntryId, Event, NewMessage, QueueId, RcptStatus, RecipientGroup, Record,
    SchedConfig, SchedError, Scheduler, Status, StatusCode, Time,
};

use super::*;

const TRANSPORT: &str = "smtp";

/// What the model agent holds for one wire id.
#[derive(Default)]
struct AgentConn {
    opened: bool,
    /// Transactions queued, oldest first: (entry, recipients).
    sends: VecDeque<(EntryId, Vec<u32>)>,
    close_asked: bool,
}

/// An answer from the agent, as the queue manager's dispatch turns it into an event.
enum Answer {
    Opened(u64),
    OpenFailed(u64, ConnFailure),
    Sent {
        wire: u64,
        entry: EntryId,
        results: Vec<(u32, RcptStatus)>,
        conn_failed: bool,
    },
    Closed(u64),
}

struct World {
    now: Time,
    sched: Scheduler,
    conns: AgentConns,
    agent: BTreeMap<u64, AgentConn>,
    /// Answers on their way to qmgr, in order.
    answers: VecDeque<Answer>,
    /// Per message: recipients not yet delivered or bounced.
    pending: BTreeMap<u64, BTreeSet<u32>>,
    /// Messages out of the scheduler's memory, to add again at that time.
    retry: BTreeMap<u64, Time>,
    delivered: BTreeMap<(u64, u32), u32>,
    attempts: BTreeMap<u64, u32>,
}

impl World {
    fn new(messages: u64, rcpts: u32) -> World {
        let mut w = World {
            now: Time(1_000),
            sched: Scheduler::new(SchedConfig::default()).unwrap(),
            conns: AgentConns::default(),
            agent: BTreeMap::new(),
            answers: VecDeque::new(),
            pending: BTreeMap::new(),
            retry: BTreeMap::new(),
            delivered: BTreeMap::new(),
            attempts: BTreeMap::new(),
        };
        for q in 1..=messages {
            w.pending.insert(q, (0..rcpts).collect());
            w.add(q);
        }
        w
    }

    fn check(&self, r: Result<(), SchedError>) {
        if let Err(e) = r {
            panic!("the scheduler was told of something it does not know: {e:?}");
        }
    }

    fn add(&mut self, q: u64) {
        let n = self.pending[&q].len() as u32;
        let attempts = *self.attempts.get(&q).unwrap_or(&0);
        let ev = Event::MessageAdded(NewMessage {
            queue_id: QueueId(q),
            sender: format!("s{}@example.org", q % 3),
            tenant: None,
            job: None,
            size: 1000,
            arrival: Time(1_000),
            attempts,
            recipients: n,
        });
        let r = self.sched.handle(self.now, ev);
        self.check(r);
        self.attempts.insert(q, attempts + 1);
    }

    /// Performs the scheduler's actions as qmgr does.
    fn run_actions(&mut self) {
        while let Some(a) = self.sched.poll_action() {
            match a {
                Action::ReadRecipients { queue_id, max } => {
                    let rcpts: Vec<u32> = self.pending[&queue_id.0]
                        .iter()
                        .copied()
                        .take(max as usize)
                        .collect();
                    let remaining = self.pending[&queue_id.0].len() as u32 - rcpts.len() as u32;
                    let ev = Event::RecipientsRead {
                        queue_id,
                        groups: vec![RecipientGroup {
                            domain: String::new(),
                            transport: TRANSPORT.into(),
                            nexthop: "example.com".into(),
                            hosts: vec![vec!["mx1".into(), "mx2".into()]],
                            recipients: rcpts,
                        }],
                        remaining,
                    };
                    let r = self.sched.handle(self.now, ev);
                    self.check(r);
                }
                Action::Open { conn, .. } => {
                    let wire = self.conns.open(conn, TRANSPORT);
                    assert!(
                        !self.agent.contains_key(&wire),
                        "the agent already holds connection {wire}"
                    );
                    self.agent.insert(wire, AgentConn::default());
                }
                Action::Start {
                    conn,
                    entry,
                    recipients,
                    ..
                } => {
                    // A start on a connection that a later event in the
                    // same batch ended (its entry is queued again) is
                    // skipped, as dispatch skips it.
                    let Some(wire) = self.conns.wire(conn).map(|w| w.id) else {
                        continue;
                    };
                    match self.agent.get_mut(&wire) {
                        Some(c) => c.sends.push_back((entry, recipients)),
                        // Closed by the peer, its Closed still on the way:
                        // the agent answers as bin/smtp does.
                        None => self.answers.push_back(Answer::Sent {
                            wire,
                            entry,
                            results: deferred(&recipients),
                            conn_failed: true,
                        }),
                    }
                }
                Action::Close { conn, .. } => {
                    if let Some(w) = self.conns.forget(conn) {
                        if let Some(c) = self.agent.get_mut(&w.id) {
                            c.close_asked = true;
                        }
                    }
                }
                Action::Journal(Record::Delivered {
                    queue_id,
                    recipients,
                }) => {
                    for r in recipients {
                        *self.delivered.entry((queue_id.0, r)).or_default() += 1;
                        self.pending.get_mut(&queue_id.0).unwrap().remove(&r);
                    }
                }
                Action::Journal(Record::Bounced {
                    queue_id,
                    recipients,
                    ..
                }) => {
                    for r in recipients {
                        self.pending.get_mut(&queue_id.0).unwrap().remove(&r);
                    }
                }
                Action::MessageDone {
                    queue_id,
                    next_attempt: Some(t),
                } if !self.pending[&queue_id.0].is_empty() => {
                    self.retry.insert(queue_id.0, t);
                }
                _ => {}
            }
        }
    }

    /// Hands qmgr the agent's next answer, as dispatch's agent_answer does.
    fn deliver_answer(&mut self) -> bool {
        let Some(a) = self.answers.pop_front() else {
            return false;
        };
        let (wire, ev) = match a {
            Answer::Opened(w) => (w, None),
            Answer::OpenFailed(w, failure) => (w, Some(failure)),
            Answer::Sent {
                wire,
                entry,
                results,
                conn_failed,
            } => {
                if let Some(conn) = self.conns.resolve(TRANSPORT, wire) {
                    let ev = Event::DeliveryDone {
                        conn,
                        entry,
                        results,
                        conn_failed,
                        remote: Vec::new(),
                    };
                    let r = self.conns.handle(&mut self.sched, self.now, ev);
                    self.check(r);
                }
                return true;
            }
            Answer::Closed(w) => {
                if let Some(conn) = self.conns.resolve(TRANSPORT, w) {
                    let r = self.conns.handle(
                        &mut self.sched,
                        self.now,
                        Event::ConnectionClosed { conn },
                    );
                    self.check(r);
                }
                return true;
            }
        };
        if let Some(conn) = self.conns.resolve(TRANSPORT, wire) {
            let ev = match ev {
                None => Event::ConnectionOpened { conn },
                Some(failure) => Event::ConnectionFailed {
                    conn,
                    failure,
                    status: Status::new(StatusCode::NO_ANSWER, "refused"),
                    remote: None,
                },
            };
            let r = self.conns.handle(&mut self.sched, self.now, ev);
            self.check(r);
        }
        true
    }

    /// One step of the model agent on the connection picked by `pick`.
    fn agent_step(&mut self, pick: usize, what: u8, behave: bool) {
        let wires: Vec<u64> = self.agent.keys().copied().collect();
        if wires.is_empty() {
            return;
        }
        let wire = wires[pick % wires.len()];
        let c = self.agent.get_mut(&wire).unwrap();
        let what = if behave { 0 } else { what % 6 };
        if !c.opened {
            match what {
                1 => {
                    // Unreachable: the open fails, its queue with it.
                    self.fail(wire, Some(ConnFailure::Unreachable));
                }
                2 => self.fail(wire, Some(ConnFailure::Handshake)),
                _ => {
                    c.opened = true;
                    self.answers.push_back(Answer::Opened(wire));
                }
            }
            return;
        }
        match (c.sends.front().cloned(), what) {
            (Some(_), 3) => self.fail(wire, None),
            (Some((entry, rcpts)), _) => {
                c.sends.pop_front();
                // 5 is a mixed reply: one recipient deferred.
                let results = rcpts
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let st = if what == 5 && i == 0 {
                            RcptStatus::Deferred(Status::new(StatusCode::known(4, 2, 0), "later"))
                        } else {
                            RcptStatus::Delivered
                        };
                        (*r, st)
                    })
                    .collect();
                self.answers.push_back(Answer::Sent {
                    wire,
                    entry,
                    results,
                    conn_failed: false,
                });
            }
            (None, _) if c.close_asked => {
                self.agent.remove(&wire);
                self.answers.push_back(Answer::Closed(wire));
            }
            // The peer ends an idle connection.
            (None, 4) => {
                self.agent.remove(&wire);
                self.answers.push_back(Answer::Closed(wire));
            }
            (None, _) => {}
        }
    }

    /// The connection breaks as bin/smtp's `fail` reports it.
    fn fail(&mut self, wire: u64, open_failure: Option<ConnFailure>) {
        let c = self.agent.remove(&wire).unwrap();
        if let Some(f) = open_failure {
            self.answers.push_back(Answer::OpenFailed(wire, f));
        }
        for (entry, rcpts) in c.sends {
            self.answers.push_back(Answer::Sent {
                wire,
                entry,
                results: deferred(&rcpts),
                conn_failed: true,
            });
        }
        if c.opened {
            self.answers.push_back(Answer::Closed(wire));
        }
    }

    /// The agent dies: qmgr hears of it as dispatch's agent_lost does.
    fn agent_restart(&mut self) {
        self.agent.clear();
        self.answers.clear();
        for conn in self.conns.of_transport(TRANSPORT) {
            let ev = Event::ConnectionLost {
                conn,
                status: Status::new(StatusCode::SYSTEM_TEMP, "delivery agent smtp died"),
            };
            let r = self.conns.handle(&mut self.sched, self.now, ev);
            self.check(r);
        }
    }

    fn tick(&mut self, ms: u64) {
        self.now = Time(self.now.0 + ms);
        if self.sched.poll_timeout().is_some_and(|t| t <= self.now) {
            self.sched.handle_timeout(self.now);
        }
        let due: Vec<u64> = self
            .retry
            .iter()
            .filter(|(_, t)| **t <= self.now)
            .map(|(q, _)| *q)
            .collect();
        for q in due {
            self.retry.remove(&q);
            self.add(q);
        }
    }

    /// The next time anything is due, for the run to the end.
    fn next_due(&self) -> Option<Time> {
        let retry = self.retry.values().min().copied();
        match (self.sched.poll_timeout(), retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

fn deferred(rcpts: &[u32]) -> Vec<(u32, RcptStatus)> {
    rcpts
        .iter()
        .map(|r| {
            (
                *r,
                RcptStatus::Deferred(Status::new(StatusCode::CONNECTION_LOST, "lost connection")),
            )
        })
        .collect()
}

fn run(steps: &[(u8, u8, u8)], messages: u64, rcpts: u32) {
    let mut w = World::new(messages, rcpts);
    w.run_actions();
    for &(kind, pick, what) in steps {
        match kind % 8 {
            0..=3 => w.agent_step(pick as usize, what, false),
            4 | 5 => {
                w.deliver_answer();
            }
            6 => w.tick(u64::from(what) * 50),
            _ if what % 16 == 0 => w.agent_restart(),
            _ => w.tick(10),
        }
        w.run_actions();
    }
    // The agent behaves from now on: everything must get through.
    for _ in 0..100_000 {
        if w.pending.values().all(|p| p.is_empty()) {
            break;
        }
        if w.deliver_answer() {
        } else if !w.agent.is_empty()
            && w.agent
                .values()
                .any(|c| !c.opened || !c.sends.is_empty() || c.close_asked)
        {
            for pick in 0..w.agent.len() {
                w.agent_step(pick, 0, true);
            }
        } else if let Some(t) = w.next_due() {
            let ms = t.0.saturating_sub(w.now.0).max(1);
            w.tick(ms);
        } else {
            w.tick(1_000);
        }
        w.run_actions();
    }
    for ((q, r), n) in &w.delivered {
        assert_eq!(*n, 1, "message {q} recipient {r} delivered {n} times");
    }
    let left: Vec<(u64, usize)> = w
        .pending
        .iter()
        .filter(|(_, p)| !p.is_empty())
        .map(|(q, p)| (*q, p.len()))
        .collect();
    assert!(left.is_empty(), "recipients never delivered: {left:?}");
    assert_eq!(w.delivered.len() as u64, messages * u64::from(rcpts));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn connection_ids_stay_consistent_between_qmgr_and_agent(
        steps in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 0..400),
        messages in 1u64..12,
        rcpts in 1u32..4,
    ) {
        run(&steps, messages, rcpts);
    }
}
