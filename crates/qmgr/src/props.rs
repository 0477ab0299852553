//! The queue manager as a property: random interleavings of arrivals,
//! router, agent and cleanup answers (good, temporary and permanent
//! failures), lost links, flushes and the clock moving on. After every
//! step: no recipient is delivered twice or sent to an agent once done, a
//! message leaves the queue only with every recipient delivered or bounced,
//! and a deferred message is not tried again before its next attempt. In
//! the end, with every peer behaving, every accepted recipient is delivered
//! or bounced and the queue is empty.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ipc::{cleanup, delivery, router};
use mail::QueueId;
use proptest::prelude::*;
use queue::Record;
use sched::Time;

use crate::testkit::{hosts, record_id, resolved, settings, Asked, World};
use crate::Event;

#[derive(Debug, Clone)]
enum Op {
    Arrive {
        rcpts: u8,
        sender: u8,
    },
    /// Answer the oldest router request: 0 fine, 1 temporary, 2 permanent failure.
    Router(u8),
    RouterLost,
    /// Answer the oldest agent request: 0 success, 1 4xx, 2 5xx, 3 connection failure.
    Agent(u8),
    AgentLost,
    /// Answer the oldest notice: 0 queued, 1 deferred, 2 refused.
    Cleanup(u8),
    CleanupLost,
    Flush,
    Wait(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u8..4, 0u8..3).prop_map(|(rcpts, sender)| Op::Arrive { rcpts, sender }),
        6 => (0u8..3).prop_map(Op::Router),
        1 => Just(Op::RouterLost),
        8 => (0u8..4).prop_map(Op::Agent),
        1 => Just(Op::AgentLost),
        3 => (0u8..3).prop_map(Op::Cleanup),
        1 => Just(Op::CleanupLost),
        1 => Just(Op::Flush),
        3 => (1u32..900_000).prop_map(Op::Wait),
    ]
}

/// What the test knows beyond the queue manager.
#[derive(Default)]
struct Model {
    /// Recipients of every accepted message, by address.
    accepted: BTreeMap<QueueId, Vec<String>>,
    /// Message of each (unique) recipient address.
    owner: BTreeMap<String, QueueId>,
    /// Per message: not to be tried before this (from its last pass's
    /// `Deferred` records), until a flush.
    not_before: BTreeMap<QueueId, Time>,
    /// Per message in delivery: the earliest next attempt journaled for
    /// it since it was activated.
    deferred: BTreeMap<QueueId, u64>,
    /// Records already looked at.
    seen: usize,
    done: BTreeSet<(QueueId, u32)>,
}

impl Model {
    /// Reads the new journal records; checks nothing is delivered twice.
    fn read_journal(&mut self, w: &World) {
        let recs: Vec<Record> = w.qm.store().records().skip(self.seen).cloned().collect();
        self.seen += recs.len();
        for r in crate::fresh_results(&recs) {
            match r {
                Record::Delivered { id, rcpts } | Record::Bounced { id, rcpts, .. } => {
                    for i in rcpts {
                        assert!(
                            self.done.insert((*id, *i)),
                            "{id} recipient {i} settled twice"
                        );
                    }
                }
                Record::Deferred {
                    id, next_attempt, ..
                } => {
                    let e = self.deferred.entry(*id).or_insert(*next_attempt);
                    *e = (*e).min(*next_attempt);
                }
                _ => {}
            }
        }
        // A message's recipients are tried together, at the earliest of
        // their next attempts. The journal rounds up to the second: the
        // retry may be up to 999 ms before the journaled time, never
        // before that.
        let left: Vec<QueueId> = self
            .deferred
            .keys()
            .filter(|id| !w.qm.is_active(id))
            .copied()
            .collect();
        for id in left {
            let secs = self.deferred.remove(&id).expect("listed");
            self.not_before
                .insert(id, Time((secs * 1000).saturating_sub(999)));
        }
    }

    /// A message is being tried (its recipient is being resolved) now.
    fn tried(&mut self, address: &str, now: Time) {
        let Some(id) = self.owner.get(address) else {
            return;
        };
        if let Some(t) = self.not_before.remove(id) {
            assert!(now >= t, "{id} tried at {now:?}, before {t:?}");
        }
    }

    /// No recipient leaves the queue unsettled.
    fn check_removed(&self, w: &World) {
        for (id, rcpts) in &self.accepted {
            if w.live(*id) {
                continue;
            }
            for i in 0..rcpts.len() as u32 {
                assert!(
                    self.done.contains(&(*id, i)),
                    "{id} removed with recipient {i} neither delivered nor bounced"
                );
            }
        }
    }
}

fn step(w: &mut World, m: &mut Model, op: Op, n: &mut u32) {
    match op {
        Op::Arrive { rcpts, sender } => {
            *n += 1;
            let addrs: Vec<String> = (0..rcpts)
                .map(|i| format!("r{n}x{i}@d{}.example", (*n + u32::from(i)) % 3))
                .collect();
            let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
            let id = w.arrive(&format!("s{sender}@a.example"), &refs);
            for a in &addrs {
                m.owner.insert(a.clone(), id);
            }
            m.accepted.insert(id, addrs);
        }
        Op::Router(how) => {
            let Some((request, body)) = w.router.pop_front() else {
                return;
            };
            let response = match (body, how) {
                (router::Request::ResolveQueued { address, .. }, 0) => {
                    let d = address.rsplit_once('@').map_or("", |(_, d)| d).to_string();
                    resolved(&address, "smtp", &d)
                }
                (router::Request::Hosts { nexthop }, 0) => hosts(&nexthop),
                (_, how) => router::Response::Failed {
                    status: mail::Status::new(
                        mail::StatusCode::known(if how == 1 { 4 } else { 5 }, 4, 4),
                        "no",
                    ),
                },
            };
            w.handle(Event::RouterAnswer { request, response });
        }
        Op::RouterLost => {
            w.router.clear();
            w.handle(Event::RouterLost);
        }
        Op::Agent(how) => {
            let Some((transport, request, body)) = w.agent.pop_front() else {
                return;
            };
            let response = agent_answer(body, how);
            w.handle(Event::AgentAnswer {
                transport,
                request: Some(request),
                response,
            });
        }
        Op::AgentLost => {
            w.agent.clear();
            w.handle(Event::AgentLost {
                transport: "smtp".into(),
            });
        }
        Op::Cleanup(how) => {
            let Some((notice, _)) = w.cleanup.pop_front() else {
                return;
            };
            let response = match how {
                0 => cleanup::Response::Queued {
                    queue_id: "N".into(),
                },
                how => cleanup::Response::Failed {
                    reply: if how == 1 {
                        mail::Refusal::new(451, mail::StatusCode::SYSTEM_TEMP, "no")
                    } else {
                        mail::Refusal::new(550, mail::StatusCode::known(5, 3, 0), "no")
                    },
                },
            };
            w.handle(Event::CleanupAnswer { notice, response });
        }
        Op::CleanupLost => {
            w.cleanup.clear();
            w.handle(Event::CleanupLost);
        }
        Op::Flush => {
            m.not_before.clear();
            w.handle(Event::Control {
                client: 1,
                request: 1,
                body: ipc::queuectl::Request::Flush,
            });
        }
        Op::Wait(ms) => w.wait(Duration::from_millis(u64::from(ms))),
    }
}

/// The agent's answer to `body`, as `how` says.
fn agent_answer(body: delivery::Request, how: u8) -> delivery::Response {
    match body {
        delivery::Request::Open { conn, .. } if how == 3 => delivery::Response::OpenFailed {
            conn,
            failure: delivery::OpenFailure::Unreachable,
            reason: mail::Status::new(mail::StatusCode::known(4, 4, 1), "connect: refused"),
            remote: None,
        },
        delivery::Request::Open { conn, .. } => delivery::Response::Opened {
            conn,
            relay: "mx".into(),
        },
        delivery::Request::Send { conn, txn } => {
            let code = [250, 450, 550, 421][usize::from(how)];
            delivery::Response::Sent {
                conn,
                results: txn
                    .recipients
                    .iter()
                    .map(|r| delivery::RcptResult {
                        index: r.index,
                        status: mail::Status::new(mail::StatusCode::of_reply(code), "reply"),
                        remote: None,
                    })
                    .collect(),
                conn_failed: how == 3,
                handoff: delivery::Handoff::Relayed,
            }
        }
        delivery::Request::Close { conn } => delivery::Response::Closed { conn, reason: None },
    }
}

/// Checks what the queue manager asked of the peers since the last look.
fn check_requests(w: &World, m: &mut Model, looked: &mut usize) {
    for (at, asked) in w.history.iter().skip(*looked) {
        match asked {
            Asked::Router(router::Request::ResolveQueued { address, .. }) => m.tried(address, *at),
            Asked::Agent(delivery::Request::Send { txn, .. }) => {
                let id: QueueId = txn.queue_id.parse().expect("queue id");
                for r in &txn.recipients {
                    assert!(
                        !m.done.contains(&(id, r.index)),
                        "{id} recipient {} sent again once settled",
                        r.index
                    );
                }
            }
            _ => {}
        }
    }
    *looked = w.history.len();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_recipient_ends_delivered_bounced_or_queued(ops in proptest::collection::vec(op(), 1..120)) {
        let mut w = World::new(settings());
        let mut m = Model::default();
        let mut n = 0;
        let mut looked = 0;
        for op in ops {
            step(&mut w, &mut m, op, &mut n);
            m.read_journal(&w);
            check_requests(&w, &mut m, &mut looked);
            m.check_removed(&w);
        }
        // Every peer behaves from now on: everything ends.
        for _ in 0..200 {
            w.settle(|_| 250);
            m.read_journal(&w);
            if m.accepted.keys().all(|id| !w.live(*id)) {
                break;
            }
            w.wait(Duration::from_secs(600));
        }
        m.read_journal(&w);
        m.check_removed(&w);
        for id in m.accepted.keys() {
            prop_assert!(!w.live(*id), "{} still queued with every peer behaving", id);
        }
        prop_assert!(w.qm.store().records().all(|r| record_id(r).is_some()));
    }
}
