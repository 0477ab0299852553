//! A world for the unit tests: a queue manager on a [`MemStore`], a
//! virtual clock that jumps to the next timeout, and the requests it makes
//! of the router, the agents and cleanup, held for the test to answer.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ipc::{cleanup, delivery, queuectl, router};
use mail::{Envelope, QueueId, Recipient, Timestamp};
use queue::{DataRef, MessageHead, Record, Replay, Storage};
use sched::{SchedConfig, Time};

use crate::{Action, Event, Level, MemStore, QueueManager, Settings, Store};

/// The time the tests start at (late 2023, wall-clock milliseconds).
pub(crate) const T0: Time = Time(1_700_000_000_000);

pub(crate) struct World {
    pub(crate) qm: QueueManager<MemStore>,
    pub(crate) now: Time,
    pub(crate) log: Vec<(Level, String)>,
    pub(crate) router: VecDeque<(u64, router::Request)>,
    pub(crate) agent: VecDeque<(String, u64, delivery::Request)>,
    pub(crate) cleanup: VecDeque<(u64, Vec<cleanup::Request>)>,
    pub(crate) replies: Vec<queuectl::Response>,
    /// Answers to arrivals and transfers the test announced itself.
    pub(crate) answers: Vec<ipc::qmgr::Response>,
    pub(crate) removed: Vec<QueueId>,
    pub(crate) cleanup_dropped: usize,
    /// What the queue manager asked to save of its shaping holds, in order.
    pub(crate) saved_holds: Vec<String>,
    /// Every router and agent request ever made, with its time.
    pub(crate) history: Vec<(Time, Asked)>,
    /// Answers to verification queries: (request, answer).
    pub(crate) verified: Vec<(u64, ipc::verify::Response)>,
    /// What the queue manager asked to save of its verification cache.
    pub(crate) saved_verify: Vec<String>,
    seq: u32,
}

/// A request to the router or an agent, as the history keeps it.
#[derive(Debug, Clone)]
pub(crate) enum Asked {
    Router(router::Request),
    Agent(delivery::Request),
}

/// Settings with one transport, `smtp`, and a short run delay.
pub(crate) fn settings() -> Settings {
    Settings {
        transports: ["smtp".to_string()].into_iter().collect(),
        run_delay: Duration::from_secs(60),
        hostname: "mx.test".into(),
        origin: "test".into(),
        postmaster: "postmaster@test".into(),
        double_bounce: "double-bounce@test".into(),
        ..Settings::default()
    }
}

impl World {
    pub(crate) fn new(settings: Settings) -> World {
        Self::recovered(settings, MemStore::default(), Replay::default(), T0)
    }

    /// A world whose scheduler has `sched`'s transports (the active limit
    /// still from `settings`).
    pub(crate) fn with_sched(settings: Settings, sched: SchedConfig) -> World {
        Self::start(settings, sched, MemStore::default(), Replay::default(), T0)
    }

    /// A world taking over `state` (as recovery left it) at `now`.
    pub(crate) fn recovered(
        settings: Settings,
        store: MemStore,
        state: Replay,
        now: Time,
    ) -> World {
        Self::start(settings, SchedConfig::default(), store, state, now)
    }

    fn start(
        settings: Settings,
        sched: SchedConfig,
        store: MemStore,
        state: Replay,
        now: Time,
    ) -> World {
        let sched = SchedConfig {
            qmgr_message_active_limit: active_limit_hint(&settings),
            ..sched
        };
        Self::make(settings, sched, store, state, now)
    }

    fn make(
        settings: Settings,
        sched: SchedConfig,
        store: MemStore,
        state: Replay,
        now: Time,
    ) -> World {
        let qm = QueueManager::new(now, settings, sched, store, state).expect("valid");
        let mut w = World {
            qm,
            now,
            log: Vec::new(),
            router: VecDeque::new(),
            agent: VecDeque::new(),
            cleanup: VecDeque::new(),
            replies: Vec::new(),
            answers: Vec::new(),
            removed: Vec::new(),
            cleanup_dropped: 0,
            saved_holds: Vec::new(),
            history: Vec::new(),
            verified: Vec::new(),
            saved_verify: Vec::new(),
            seq: 0,
        };
        w.drain();
        w
    }

    /// A message from `sender` to `rcpts` (addresses), committed now.
    pub(crate) fn arrive(&mut self, sender: &str, rcpts: &[&str]) -> QueueId {
        let id = self.stage(sender, rcpts, false);
        self.handle(Event::Committed { id, hold: false });
        id
    }

    /// A message as [`World::arrive`], of tenant and job as given.
    pub(crate) fn arrive_as(
        &mut self,
        sender: &str,
        rcpts: &[&str],
        tenant: Option<&str>,
        job: Option<&str>,
    ) -> QueueId {
        let id = self.stage_as(sender, rcpts, false, tenant, job);
        self.handle(Event::Committed { id, hold: false });
        id
    }

    /// Journals a message's arrival without telling the queue manager.
    pub(crate) fn stage(&mut self, sender: &str, rcpts: &[&str], hold: bool) -> QueueId {
        self.stage_as(sender, rcpts, hold, None, None)
    }

    /// [`World::stage`] with a tenant and a job.
    pub(crate) fn stage_as_pub(
        &mut self,
        sender: &str,
        rcpts: &[&str],
        hold: bool,
        tenant: Option<&str>,
        job: Option<&str>,
    ) -> QueueId {
        self.stage_as(sender, rcpts, hold, tenant, job)
    }

    fn stage_as(
        &mut self,
        sender: &str,
        rcpts: &[&str],
        hold: bool,
        tenant: Option<&str>,
        job: Option<&str>,
    ) -> QueueId {
        self.stage_with(sender, rcpts, hold, |e| {
            e.tenant = tenant.map(str::to_string);
            e.job = job.map(str::to_string);
        })
    }

    /// A message received with SMTPUTF8, as [`World::arrive`].
    pub(crate) fn arrive_smtputf8(&mut self, sender: &str, rcpts: &[&str]) -> QueueId {
        let id = self.stage_with(sender, rcpts, false, |e| e.smtputf8 = true);
        self.handle(Event::Committed { id, hold: false });
        id
    }

    /// Journals a message whose envelope `edit` changed.
    fn stage_with(
        &mut self,
        sender: &str,
        rcpts: &[&str],
        hold: bool,
        edit: impl FnOnce(&mut Envelope),
    ) -> QueueId {
        self.seq += 1;
        let id = QueueId::from_parts(self.now.0 * 1000, 1, self.seq).expect("valid");
        let mut envelope = Envelope {
            sender: sender.into(),
            recipients: rcpts.iter().map(|r| Recipient::new(*r)).collect(),
            arrival: Timestamp::from_micros(self.now.0 * 1000),
            size: 100,
            ..Envelope::default()
        };
        edit(&mut envelope);
        let head = MessageHead {
            id,
            envelope,
            data: DataRef::Inline(b"Subject: test\r\n\r\nbody\r\n".to_vec()),
        };
        let (store, state) = self.qm.parts_mut();
        store.append(&Record::Arrived(head), state).expect("append");
        if hold {
            store.append(&Record::Held { id }, state).expect("append");
        }
        id
    }

    pub(crate) fn handle(&mut self, ev: Event) {
        self.qm.handle(self.now, ev);
        self.drain();
    }

    /// Moves the clock to `t`, running every timeout on the way.
    pub(crate) fn run_until(&mut self, t: Time) {
        while let Some(at) = self.qm.poll_timeout() {
            if at > t {
                break;
            }
            self.now = self.now.max(at);
            self.qm.handle_timeout(self.now);
            self.drain();
        }
        self.now = self.now.max(t);
    }

    /// Moves the clock on by `d`.
    pub(crate) fn wait(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    pub(crate) fn drain(&mut self) {
        while let Some(a) = self.qm.poll_action() {
            match a {
                Action::Log(l, t) => self.log.push((l, t)),
                Action::ToRouter { request, body } => {
                    self.history.push((self.now, Asked::Router(body.clone())));
                    self.router.push_back((request, body));
                }
                Action::ToAgent {
                    transport,
                    request,
                    body,
                } => {
                    self.history.push((self.now, Asked::Agent(body.clone())));
                    self.agent.push_back((transport, request, body));
                }
                Action::ToCleanup { notice, requests } => {
                    self.cleanup.push_back((notice, requests))
                }
                Action::DropCleanup => {
                    // Nothing sent on the closed link is answered.
                    self.cleanup.clear();
                    self.cleanup_dropped += 1;
                }
                Action::Reply { body, .. } => self.replies.push(body),
                Action::Answer { response, .. } => self.answers.push(response),
                Action::DestinationDead { nexthop, .. } => self
                    .log
                    .push((Level::Warn, format!("destination {nexthop} is dead"))),
                Action::RemoveData { id, storage } => {
                    assert_eq!(storage, Storage::Inline);
                    self.removed.push(id);
                }
                Action::SaveHolds { text } => self.saved_holds.push(text),
                Action::HostRetry { .. } => {}
                Action::VerifyAnswer {
                    request, response, ..
                } => self.verified.push((request, response)),
                Action::SaveVerify { text } => self.saved_verify.push(text),
            }
        }
    }

    /// Answers every router request: an address's domain is its next hop
    /// on `smtp`, unless the table gives another route; hosts have one
    /// address each.
    pub(crate) fn route_all(&mut self, table: &[(&str, &str, &str)]) {
        while let Some((request, body)) = self.router.pop_front() {
            let response = match body {
                router::Request::ResolveQueued { address, .. }
                | router::Request::Resolve { address, .. } => {
                    let (transport, nexthop) = table
                        .iter()
                        .find(|(a, _, _)| *a == address)
                        .map(|(_, t, n)| (t.to_string(), n.to_string()))
                        .unwrap_or_else(|| {
                            let d = address.rsplit_once('@').map_or("", |(_, d)| d);
                            ("smtp".to_string(), d.to_string())
                        });
                    resolved(&address, &transport, &nexthop)
                }
                router::Request::Hosts { nexthop } => hosts(&nexthop),
                other => panic!("testkit: unexpected router request {other:?}"),
            };
            self.qm
                .handle(self.now, Event::RouterAnswer { request, response });
            self.drain();
        }
    }

    /// Answers every agent request: opens succeed, each recipient of a
    /// transaction gets `code(address)`.
    pub(crate) fn deliver_all(&mut self, code: impl Fn(&str) -> u16) {
        while let Some((transport, request, body)) = self.agent.pop_front() {
            let response = match body {
                delivery::Request::Open { conn, host, .. } => delivery::Response::Opened {
                    conn,
                    relay: format!("{host}[192.0.2.1]:25"),
                },
                delivery::Request::Send { conn, txn } => delivery::Response::Sent {
                    conn,
                    results: txn
                        .recipients
                        .iter()
                        .map(|r| {
                            let c = code(&r.address);
                            delivery::RcptResult {
                                index: r.index,
                                status: mail::Status::new(
                                    mail::StatusCode::of_reply(c),
                                    format!("{c} reply"),
                                ),
                                remote: None,
                            }
                        })
                        .collect(),
                    conn_failed: false,
                    handoff: delivery::Handoff::Relayed,
                },
                delivery::Request::Close { conn } => {
                    delivery::Response::Closed { conn, reason: None }
                }
            };
            let ev = Event::AgentAnswer {
                transport,
                request: Some(request),
                response,
            };
            self.qm.handle(self.now, ev);
            self.drain();
        }
    }

    /// Cleanup queues every notice.
    pub(crate) fn queue_notices(&mut self) -> usize {
        let mut n = 0;
        while let Some((notice, _)) = self.cleanup.pop_front() {
            n += 1;
            let response = cleanup::Response::Queued {
                queue_id: format!("NOTICE{n}"),
            };
            self.qm
                .handle(self.now, Event::CleanupAnswer { notice, response });
            self.drain();
        }
        n
    }

    /// Routes, delivers and queues notices until nothing is asked.
    pub(crate) fn settle(&mut self, code: impl Fn(&str) -> u16) {
        while !self.router.is_empty() || !self.agent.is_empty() || !self.cleanup.is_empty() {
            self.route_all(&[]);
            self.deliver_all(&code);
            self.queue_notices();
        }
    }

    /// The records of message `id` of one kind, by a name as in the journal.
    pub(crate) fn records(&self, id: QueueId) -> Vec<Record> {
        self.qm
            .store()
            .records()
            .filter(|r| record_id(r) == Some(id))
            .cloned()
            .collect()
    }

    pub(crate) fn logged(&self, needle: &str) -> bool {
        self.log.iter().any(|(_, l)| l.contains(needle))
    }

    pub(crate) fn live(&self, id: QueueId) -> bool {
        self.qm.state().messages.contains_key(&id)
    }
}

fn active_limit_hint(s: &Settings) -> u32 {
    u32::try_from(s.active_limit).unwrap_or(u32::MAX)
}

/// The message a record is about.
pub(crate) fn record_id(r: &Record) -> Option<QueueId> {
    Some(match r {
        Record::Arrived(h) | Record::Rewritten { head: h, .. } => h.id,
        Record::Delivered { id, .. }
        | Record::Deferred { id, .. }
        | Record::Bounced { id, .. }
        | Record::Held { id }
        | Record::Released { id }
        | Record::Removed { id }
        | Record::Notified { id, .. }
        | Record::Warned { id }
        | Record::Moving { id, .. }
        | Record::Imported { id, .. }
        | Record::Succeeded { id, .. } => *id,
    })
}

pub(crate) fn resolved(address: &str, transport: &str, nexthop: &str) -> router::Response {
    router::Response::Resolved {
        class: router::Class::Relay,
        routes: vec![router::Route {
            address: address.into(),
            transport: transport.into(),
            nexthop: nexthop.into(),
            // As the router reads an error transport's next hop.
            error: (transport == "error")
                .then(|| mail::Status::from_reason(nexthop, mail::StatusCode::known(5, 0, 0)).ok())
                .flatten(),
            class: router::Class::Relay,
            unknown: false,
            by_table: false,
        }],
    }
}

pub(crate) fn hosts(nexthop: &str) -> router::Response {
    router::Response::Hosts(router::HostList {
        nexthop: nexthop.into(),
        from_mx: true,
        authentic: false,
        hosts: vec![router::Host {
            name: format!("mx.{nexthop}"),
            preference: 10,
            port: 0,
            addrs: vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))],
            error: None,
            dane: Default::default(),
        }],
        ttl: 300,
    })
}
