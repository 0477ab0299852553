//! qmgr's queue logic as a sans-IO state machine: the layer above the
//! scheduler, as quinn-proto's `Endpoint` is above its connections.
//!
//! The shell (bin/qmgr, or the simulator) feeds [`Event`]s with
//! [`QueueManager::handle`]`(now, event)` and [`QueueManager::handle_timeout`]`(now)`,
//! drains [`Action`]s with [`QueueManager::poll_action`], and calls
//! `handle_timeout` again at [`QueueManager::poll_timeout`]. Nothing here
//! reads a clock or a socket: `now` is wall-clock milliseconds (the
//! journal's time base, so retry times survive a restart), and the journal
//! is reached through the [`Store`] port, whose appends only buffer (the
//! shell runs the group commit) and whose reads are local and bounded.
//!
//! One module per concern, as Postfix's qmgr has one file per concern:
//! `active` (admission and the active queue, `qmgr_active.c`), `retry`
//! (the deferred schedule and attempt counts), `resolve` (router look-ups
//! and host lists, `qmgr_message_resolve`), `dispatch` (the scheduler and
//! the delivery agents, `qmgr_deliver.c`, with [`agentconn`]), `notices`
//! (non-delivery, delay and success notices, `qmgr_bounce`/`qmgr_defer`,
//! with [`bounce`]) and `control` (`sluice queue`); [`clients`] is what
//! the shell's one listener hears and answers in three protocols, and
//! [`links`] how its links to the router, agents and cleanup are named in
//! the log and what their loss is. `figures` keeps the
//! counters operators see, [`prometheus`] renders them for a scrape; [`journal`] what waits for the shell's group
//! commit (arrivals to answer, data to free) and a journal that cannot be
//! written: the shell says what came of each commit ([`Event::Durable`],
//! [`Event::CommitFailed`], or [`QueueManager::committed`], which also
//! says whether it was news) and asks when to commit
//! ([`QueueManager::commit_due`]); at exit [`QueueManager::closing`] says
//! what is still worth doing. [`startup`] decides and words what the
//! shell does at start, on a reload and once a minute (journal garbage).
//! `settings` reads main.cf's parameters,
//! [`recovery_lines`] words what recovery found, and [`clustershare`] is
//! this instance's part in a cluster (clusterd's news, what to tell it).
//!
//! Logs nothing itself: every log line is an [`Action::Log`]. Panics on
//! nothing the shell or a peer sends.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod active;
pub mod agentconn;
pub mod bounce;
pub mod clients;
pub mod clustershare;
mod control;
mod dispatch;
pub mod figures;
pub mod journal;
pub mod links;
mod logline;
mod moves;
mod notices;
mod probes;
pub mod prometheus;
#[cfg(test)]
mod props;
mod recovery;
mod resolve;
mod retry;
pub mod schedconf;
mod settings;
mod shapectl;
mod snapshot;
pub mod startup;
mod store;
#[cfg(test)]
mod testkit;
pub mod verify;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

pub use control::admits;
use ipc::{cleanup, delivery, qmgr, queuectl, router};
use mail::QueueId;
use queue::{Lsn, MessageHead, Record, Replay, Storage};
pub use recovery::recovery_lines;
use sched::{SchedConfig, Scheduler};
pub use settings::{verify_map_path, Settings};
pub use verify::VerifySettings;

pub use sched::Time;
pub use store::{fresh_results, DiskStore, MemStore, Store};

/// How long cleanup may leave notices unanswered before the link is
/// given up and the notices are built again later.
pub const NOTICE_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a message or recipient waits when its routing failed for a
/// reason of ours (no router, a broken answer), as Postfix's 5 minutes.
pub const ROUTE_RETRY: Duration = Duration::from_secs(300);

/// Messages activated per turn at most, so a big backlog does not stall
/// the shell's loop (the rest follow at the next timeout, which is now).
const ACTIVATE_PER_TURN: usize = 1000;

/// What happened, as the shell decoded it.
#[derive(Debug)]
pub enum Event {
    /// cleanup announces a message: it is journaled and answered by
    /// [`Action::Answer`] once durable (or refused).
    Arrived {
        /// The client, as the shell names it.
        client: u64,
        /// The request id to answer.
        request: u64,
        /// Queue id, envelope and where the data is.
        head: Box<MessageHead>,
        /// Queue it on hold.
        hold: bool,
    },
    /// The shell's group commit made the journal durable up to this
    /// position (also: there was nothing to commit).
    Durable(Lsn),
    /// The shell's group commit failed; it is tried again when
    /// [`QueueManager::commit_due`] says so.
    CommitFailed {
        /// The journal's error.
        reason: String,
        /// The file system is full.
        disk_full: bool,
    },
    /// An arrival journaled by the caller is durable (the simulator's and
    /// the tests' arrivals): it joins the queue unless held.
    Committed {
        /// The message.
        id: QueueId,
        /// It arrived on hold.
        hold: bool,
    },
    /// Journal writes fail (`true`) or work again (`false`): no delivery
    /// starts while they fail, since its results could not be kept.
    JournalStalled(bool),
    /// The router answered request `request`.
    RouterAnswer {
        /// The id of [`Action::ToRouter`].
        request: u64,
        /// Its answer.
        response: router::Response,
    },
    /// The router link failed or closed (also: it could not be connected,
    /// or a request could not be sent on it).
    RouterLost,
    /// A delivery agent answered.
    AgentAnswer {
        /// The agent's transport.
        transport: String,
        /// The id of the [`Action::ToAgent`] answered; `None` for an
        /// answer nobody asked for (a connection the agent closed).
        request: Option<u64>,
        /// Its answer.
        response: delivery::Response,
    },
    /// A delivery agent's link failed or closed, or could not be made.
    AgentLost {
        /// Its transport.
        transport: String,
    },
    /// Cleanup answered a notice's last request.
    CleanupAnswer {
        /// The notice of [`Action::ToCleanup`].
        notice: u64,
        /// Its answer.
        response: cleanup::Response,
    },
    /// The cleanup link for notices failed, closed, or could not be made.
    CleanupLost,
    /// A `sluice queue` request; answered by [`Action::Reply`].
    Control {
        /// The client, as the shell names it.
        client: u64,
        /// The request id to answer.
        request: u64,
        /// The request.
        body: queuectl::Request,
    },
    /// transferd's request on the arrival socket (an import, a
    /// settlement, the unsettled list; see the `moves` module); answered by
    /// [`Action::Answer`].
    Transfer {
        /// The client, as the shell names it.
        client: u64,
        /// The request id to answer.
        request: u64,
        /// The request.
        body: qmgr::Request,
    },
    /// smtpd asks what is known of an address (`reject_unverified_*`);
    /// answered by [`Action::VerifyAnswer`], at once or once probed.
    Verify {
        /// The client, as the shell names it.
        client: u64,
        /// The request id to answer.
        request: u64,
        /// The address.
        address: String,
        /// How long the answer may wait for a probe, in ms.
        wait_ms: u64,
    },
    /// `sluice reload`: new parameters (transports stay as they were at start).
    Reconfigure {
        /// main.cf's values.
        settings: Box<Settings>,
        /// The scheduler's.
        sched: Box<SchedConfig>,
    },
}

/// How bad a log line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `msg_info`.
    Info,
    /// `msg_warn`.
    Warn,
}

/// What the shell is to do.
#[derive(Debug)]
pub enum Action {
    /// Log a line.
    Log(Level, String),
    /// Answer cleanup's announcement of an arrival ([`Event::Arrived`]).
    Answer {
        /// The client.
        client: u64,
        /// The request id.
        request: u64,
        /// The answer.
        response: qmgr::Response,
    },
    /// Send a request to the router; its answer comes as [`Event::RouterAnswer`].
    ToRouter {
        /// The id to answer with.
        request: u64,
        /// The request.
        body: router::Request,
    },
    /// Send a request to a transport's delivery agent (connecting if need be).
    ToAgent {
        /// The transport.
        transport: String,
        /// The id to answer with; `Close` answers are not waited for.
        request: u64,
        /// The request.
        body: delivery::Request,
    },
    /// Send a notice to cleanup: Begin, Data…, End. The answer to End comes
    /// as [`Event::CleanupAnswer`].
    ToCleanup {
        /// The notice.
        notice: u64,
        /// The requests.
        requests: Vec<cleanup::Request>,
    },
    /// Close the cleanup link: nothing sent on it will be answered now.
    DropCleanup,
    /// Answer a `sluice queue` client.
    Reply {
        /// The client.
        client: u64,
        /// The request id.
        request: u64,
        /// The answer.
        body: queuectl::Response,
    },
    /// A destination stopped responding: its deliveries are suspended
    /// until `retry_at` (the shell logs it; the simulator measures it).
    DestinationDead {
        /// Its next hop.
        nexthop: String,
        /// When it is tried again.
        retry_at: Time,
    },
    /// A host could not be reached and is skipped until `retry_at` (the
    /// shell tells the cluster, if any).
    HostRetry {
        /// The host (an MX name).
        host: String,
        /// Until when.
        retry_at: Time,
    },
    /// Remove a message's data now: its `Removed` record is durable, or
    /// it was never journaled.
    RemoveData {
        /// The message.
        id: QueueId,
        /// Where its data is.
        storage: Storage,
    },
    /// Answer smtpd's [`Event::Verify`].
    VerifyAnswer {
        /// The client.
        client: u64,
        /// The request id.
        request: u64,
        /// The answer.
        response: ipc::verify::Response,
    },
    /// Save the address verification cache (`address_verify_map`), in the
    /// form [`QueueManager::load_verify_cache`] reads, replacing what was
    /// saved before; written so that a crash leaves the old or the new.
    SaveVerify {
        /// The entries, one per line.
        text: String,
    },
    /// Save the shaping holds (suspensions and back-offs) in force, in
    /// the form [`QueueManager::restore_holds`] reads, replacing what was
    /// saved before; written so that a crash leaves the old or the new.
    SaveHolds {
        /// The holds, one per line.
        text: String,
    },
}

/// The queue manager: the queue state, the scheduler, and every decision
/// about the messages in them.
pub struct QueueManager<S: Store> {
    store: S,
    /// Live messages and their done recipients, as replay left them and
    /// as arrivals and results keep them.
    state: Replay,
    settings: Settings,
    /// The clock of the event being handled.
    now: Time,
    stalled: bool,
    /// What waits for the group commit.
    commits: journal::Commits,
    actions: VecDeque<Action>,
    next_request: u64,
    active: active::Active,
    retry: retry::Retry,
    deliver: dispatch::Deliver,
    resolve: resolve::Resolve,
    notices: notices::Notices,
    /// The last deferral reason per message and recipient (not journaled
    /// across restarts beyond the Deferred records themselves).
    reasons: HashMap<QueueId, BTreeMap<u32, mail::Status>>,
    /// Recipient results since start, for `sluice status` and metrics.
    totals: figures::Totals,
    /// Deliveries and deferred messages per destination, for operators.
    figures: figures::DestFigures,
    /// Address verification: the cache and the probes.
    probes: probes::Probes,
}

impl<S: Store> QueueManager<S> {
    /// Takes over a recovered queue: everything not held and due at `now`
    /// is activated (in id order), the rest waits for its retry time.
    pub fn new(
        now: Time,
        settings: Settings,
        sched: SchedConfig,
        store: S,
        state: Replay,
    ) -> Result<Self, sched::SchedError> {
        let sched = if settings.transports.is_empty() {
            // No delivery agents: mail is kept, nothing is sent.
            Scheduler::new(SchedConfig::default())
        } else {
            Scheduler::new(sched)
        }?;
        Ok(Self::with_scheduler(now, settings, sched, store, state))
    }

    /// As [`QueueManager::new`], around a scheduler built by the caller
    /// (another policy, for the simulator).
    pub fn with_scheduler(
        now: Time,
        settings: Settings,
        sched: Scheduler,
        store: S,
        state: Replay,
    ) -> Self {
        let mut qm = QueueManager {
            store,
            state,
            now,
            stalled: false,
            commits: journal::Commits::default(),
            actions: VecDeque::new(),
            next_request: 1,
            active: active::Active::default(),
            retry: retry::Retry::default(),
            deliver: dispatch::Deliver::new(sched),
            resolve: resolve::Resolve::default(),
            notices: notices::Notices::default(),
            reasons: HashMap::new(),
            totals: figures::Totals::default(),
            figures: figures::DestFigures::default(),
            probes: probes::Probes::new(settings.verify.clone()),
            settings,
        };
        if qm.settings.transports.is_empty() {
            qm.warn("no delivery agents (smtp, local) in master.cf: mail is queued, not delivered");
        }
        qm.recovered();
        qm.turn();
        qm
    }

    /// The scheduler, for its figures.
    pub fn scheduler(&self) -> &Scheduler {
        &self.deliver.sched
    }

    /// Takes one event.
    pub fn handle(&mut self, now: Time, ev: Event) {
        self.now = now;
        match ev {
            Event::Arrived {
                client,
                request,
                head,
                hold,
            } => self.arrived(client, request, *head, hold),
            Event::Transfer {
                client,
                request,
                body,
            } => self.transfer(client, request, body),
            Event::Durable(end) => self.commits.durable(end, now),
            Event::CommitFailed { reason, disk_full } => {
                self.commits
                    .failed(&mut self.store, &mut self.state, reason, disk_full, now)
            }
            Event::Committed { id, hold } => {
                if !hold {
                    self.admit(id);
                }
            }
            Event::JournalStalled(s) => self.stalled = s,
            Event::RouterAnswer { request, response } => self.router_answer(request, response),
            Event::RouterLost => self.router_lost(),
            Event::AgentAnswer {
                transport,
                request,
                response,
            } => self.agent_answer(&transport, request, response),
            Event::AgentLost { transport } => self.agent_lost(&transport),
            Event::CleanupAnswer { notice, response } => self.cleanup_answer(notice, response),
            Event::CleanupLost => self.cleanup_lost(),
            Event::Control {
                client,
                request,
                body,
            } => {
                let body = self.control(body);
                self.actions.push_back(Action::Reply {
                    client,
                    request,
                    body,
                });
            }
            Event::Verify {
                client,
                request,
                address,
                wait_ms,
            } => self.verify_query(client, request, address, wait_ms),
            Event::Reconfigure { settings, sched } => self.reconfigure(*settings, *sched),
        }
        self.turn();
    }

    /// Runs what is due at `now`: scheduler timers, retries, notices that
    /// cleanup left unanswered too long.
    pub fn handle_timeout(&mut self, now: Time) {
        self.now = now;
        self.deliver.sched.handle_timeout(now);
        self.notices_timeout();
        self.probes_timeout();
        self.turn();
    }

    /// The next thing for the shell to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When `handle_timeout` is due next.
    pub fn poll_timeout(&self) -> Option<Time> {
        let mut t = self.deliver.sched.poll_timeout();
        let mut at = |x: Time| t = Some(t.map_or(x, |y| y.min(x)));
        if let Some(r) = self.retry.next() {
            at(r);
        }
        if let Some(n) = self.notices.deadline() {
            at(n);
        }
        if let Some(r) = self.commits.next_deadline() {
            // (A store always durable, the simulator's, is never committed;
            // while a commit runs, its end wakes the shell anyway.)
            let waiting = self.store.durable() < self.store.end() && !self.store.committing();
            if waiting || self.commits.stalled().is_some() {
                at(r);
            }
        }
        if let Some(p) = self.probes.deadline() {
            at(p);
        }
        if self.active.waiting() && self.room() {
            at(self.now);
        }
        t
    }

    /// The queue state (for the shell's journal writer and garbage collection).
    pub fn state(&self) -> &Replay {
        &self.state
    }

    /// The store and the queue state (the simulator and the tests journal
    /// arrivals themselves; the shell's garbage collection).
    pub fn parts_mut(&mut self) -> (&mut S, &mut Replay) {
        (&mut self.store, &mut self.state)
    }

    /// The store, for the shell's group commit.
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Whether the shell should start a group commit at `now`: when an
    /// arrival or an operator's change waits for one, or delivery results
    /// have waited [`journal::LAZY`]; while commits fail, when the next
    /// try is due.
    pub fn commit_due(&self, now: Time) -> bool {
        self.commits.due(now)
    }

    /// The shell starts a group commit of everything appended so far.
    pub fn started_commit(&mut self) {
        self.commits.started(self.store.end());
    }

    /// Whether commits are failing (a commit with nothing to write, which
    /// ends the stall, is worth reporting then).
    pub fn commit_stalled(&self) -> bool {
        self.commits.stalled().is_some()
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Drops figures of destinations with nothing to show.
    pub fn prune_figures(&mut self, now: Time) {
        self.figures.prune(now.0 / 1000);
    }

    /// Whether address verification probes wait or run.
    pub fn probing(&self) -> bool {
        self.probes.busy()
    }

    /// Addresses in the verification cache, and probes waiting or under way.
    pub fn verify_figures(&self) -> (usize, usize) {
        (self.probes.cache.len(), self.probes.cache.probing())
    }

    /// Whether message `id` is with delivery now.
    pub fn is_active(&self, id: &QueueId) -> bool {
        self.deliver.by_id.contains_key(id)
    }

    /// What every handled event ends with: the scheduler's actions carried
    /// out, waiting messages activated as room allows, notices sent.
    fn turn(&mut self) {
        self.settle_commits();
        self.run_sched();
        self.activate_waiting();
        self.pump_probes();
        self.run_sched();
        self.send_notices();
        // Removals made in this turn, when the store is durable at once.
        self.settle_commits();
    }

    fn reconfigure(&mut self, settings: Settings, sched: SchedConfig) {
        let limit = settings.active_limit;
        match self
            .deliver
            .sched
            .handle(self.now, sched::Event::ConfigChanged(Box::new(sched)))
        {
            // qmgr's admission and the scheduler must agree on the limit.
            Ok(()) => self.settings.active_limit = limit,
            Err(e) => self.warn(format!(
                "reload: scheduler: {e}; those changes need a restart (sluice stop; sluice start)"
            )),
        }
        self.probes.cache.reconfigure(settings.verify.clone());
        // Every field named, so that a new setting is either applied here
        // or said to need a restart (soft_bounce and notify_classes once
        // stayed as they were until a restart: mail bounced under a
        // soft_bounce the postmaster had turned on).
        let Settings {
            transports: _,          // the scheduler's transports: a restart
            active_limit: _,        // set above, once the scheduler agreed
            admission_by_sender: _, // the simulator's switch, not main.cf's
            defer_transports,
            run_delay,
            delay_warning,
            lifetime,
            hostname,
            origin,
            postmaster,
            double_bounce,
            notify_postmaster_of_bounces,
            bounce_copy_to,
            delay_copy_to,
            bounce_size_limit,
            verify,
            soft_bounce,
        } = settings;
        let s = &mut self.settings;
        s.defer_transports = defer_transports;
        s.run_delay = run_delay;
        s.delay_warning = delay_warning;
        s.lifetime = lifetime;
        s.hostname = hostname;
        s.origin = origin;
        s.postmaster = postmaster;
        s.double_bounce = double_bounce;
        s.notify_postmaster_of_bounces = notify_postmaster_of_bounces;
        s.bounce_copy_to = bounce_copy_to;
        s.delay_copy_to = delay_copy_to;
        s.bounce_size_limit = bounce_size_limit;
        s.verify = verify;
        s.soft_bounce = soft_bounce;
    }

    /// Journals an arrival announced by cleanup; it is answered once durable.
    pub(crate) fn arrived(&mut self, client: u64, request: u64, head: MessageHead, hold: bool) {
        let id = head.id;
        let answer = |response| Action::Answer {
            client,
            request,
            response,
        };
        if self.state.messages.contains_key(&id) {
            // Recovery adopted it first; it is queued already.
            self.actions.push_back(answer(qmgr::Response::Committed));
            return;
        }
        let summary = format!(
            "{id}: from=<{}>, size={}, nrcpt={} (queue {})",
            head.envelope.sender,
            head.envelope.size,
            head.envelope.recipients.len(),
            if hold { "hold" } else { "active" }
        );
        let storage = head.data.storage();
        let ack = journal::Ack {
            end: Lsn::default(),
            client,
            request,
            id,
            storage,
            summary,
            hold,
        };
        let rec = Record::Arrived(head);
        if let Err(r) = self
            .commits
            .arrive(&mut self.store, &mut self.state, ack, &rec)
        {
            self.actions.push_back(answer(qmgr::Response::Failed {
                reason: r.reason,
                disk_full: r.disk_full,
            }));
            if !r.taken_back {
                // Never journaled: nothing can bring it back.
                self.actions.push_back(Action::RemoveData { id, storage });
            }
        }
    }

    /// What the commits decided: arrivals answered (and queued), data
    /// freed, the journal's state changes logged. What is durable in the
    /// store (all of it, in memory) is settled without waiting for an event.
    fn settle_commits(&mut self) {
        self.commits.release(self.store.durable());
        for ev in self.commits.take_events() {
            match ev {
                journal::CommitEvent::Committed(a) => {
                    self.info(a.summary);
                    self.actions.push_back(Action::Answer {
                        client: a.client,
                        request: a.request,
                        response: qmgr::Response::Committed,
                    });
                    if !a.hold {
                        self.admit(a.id);
                    }
                }
                journal::CommitEvent::Refused(a, r) => self.actions.push_back(Action::Answer {
                    client: a.client,
                    request: a.request,
                    response: qmgr::Response::Failed {
                        reason: r.reason,
                        disk_full: r.disk_full,
                    },
                }),
                journal::CommitEvent::Remove(id, storage) => {
                    self.actions.push_back(Action::RemoveData { id, storage })
                }
                journal::CommitEvent::Stalled(r) => {
                    self.warn(format!(
                        "journal: {}; mail is refused and delivery paused, results kept in memory, until it can be written (trying every {} s)",
                        r.reason,
                        journal::RETRY.as_secs()
                    ));
                    self.stalled = true;
                }
                journal::CommitEvent::Resumed(d) => {
                    self.info(format!(
                        "journal: writable again after {:.1} s; accepting mail",
                        d.as_secs_f64()
                    ));
                    self.stalled = false;
                }
            }
        }
    }

    /// Frees a message's data once its `Removed` record, appended just
    /// now, is durable.
    fn remove_data(&mut self, id: QueueId, storage: Storage) {
        self.commits.remove_later(self.store.end(), id, storage);
    }

    /// A fresh request id for a link.
    fn request_id(&mut self) -> u64 {
        let r = self.next_request;
        self.next_request += 1;
        r
    }

    fn info(&mut self, text: impl Into<String>) {
        self.actions
            .push_back(Action::Log(Level::Info, text.into()));
    }

    fn warn(&mut self, text: impl Into<String>) {
        self.actions
            .push_back(Action::Log(Level::Warn, text.into()));
    }

    /// The head record (envelope and data) of a live message.
    fn head(&self, id: &QueueId) -> Option<(Record, queue::MessageHead)> {
        let m = self.state.messages.get(id)?;
        let rec = self.store.read_at(m.head).ok()?;
        let h = match &rec {
            Record::Arrived(h) | Record::Rewritten { head: h, .. } => h.clone(),
            _ => return None,
        };
        Some((rec, h))
    }

    /// Appends a record and applies it to the queue state, counting results.
    fn append(&mut self, rec: Record) {
        if self.probes.owns(&rec) {
            // A probe's result is soft state: the cache's, not the journal's.
            return self.probe_record(rec);
        }
        match &rec {
            // The last reason is what mailq shows under a deferred recipient.
            Record::Deferred {
                id,
                rcpts,
                status,
                reason,
                ..
            } if self.state.messages.contains_key(id) => {
                let r = self.reasons.entry(*id).or_default();
                for i in rcpts {
                    r.insert(*i, mail::Status::new(*status, reason.clone()));
                }
            }
            Record::Removed { id } => {
                self.reasons.remove(id);
            }
            _ => {}
        }
        // Every recipient result passes here once, whoever decided it.
        let now = self.now.0 / 1000;
        match &rec {
            Record::Delivered { rcpts, .. } => self.totals.sent.add(now, rcpts.len() as u64),
            Record::Deferred { rcpts, .. } => self.totals.deferred.add(now, rcpts.len() as u64),
            Record::Bounced { rcpts, .. } => self.totals.bounced.add(now, rcpts.len() as u64),
            _ => {}
        }
        self.write(rec);
    }

    /// Appends a record without counting it as a result (a restatement).
    ///
    /// Appending needs no disk (the writer keeps what it cannot write
    /// yet); it fails only for a record too large to encode, which is then
    /// not kept: the delivery it reports is done again later.
    fn write(&mut self, rec: Record) {
        // A delivery's results and what follows from them can wait for the
        // next commit; what an operator or another instance asked for
        // cannot (a Removed record for them is urged by its caller).
        let urgent = !matches!(
            rec,
            Record::Delivered { .. }
                | Record::Deferred { .. }
                | Record::Bounced { .. }
                | Record::Succeeded { .. }
                | Record::Rewritten { .. }
                | Record::Notified { .. }
                | Record::Warned { .. }
                | Record::Removed { .. }
        );
        self.commits.appended(self.now, urgent);
        if let Err(e) = self.store.append(&rec, &mut self.state) {
            self.warn(format!("journal: {e}; record not kept"));
        }
    }

    /// Removes a message with nothing left to do; its data goes once the
    /// Removed record is durable.
    fn remove_message(&mut self, id: QueueId) {
        let Some(m) = self.state.messages.get(&id) else {
            return;
        };
        let storage = m.storage;
        self.append(Record::Removed { id });
        self.forget(&id);
        self.info(format!("{id}: removed"));
        self.remove_data(id, storage);
    }

    /// A message leaves the queue or goes on hold.
    fn forget(&mut self, id: &QueueId) {
        self.figures.forget(id);
        self.retry.forget(id);
    }
}

/// Seconds since the epoch at or after `t`: the journal's next-attempt
/// unit, rounded up so a retry is never early.
fn secs_ceil(t: Time) -> u64 {
    t.0.div_ceil(1000)
}

/// `t` as a wall-clock time, for dates in notices and `sluice queue show`.
fn system_time(t: Time) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(t.0)
}
