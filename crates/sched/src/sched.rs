//! The scheduler core: event handling, entry and message lifecycle, feedback,
//! dead destinations, timers.
//!
//! `handle(now, ev)` applies one event and then runs the dispatcher
//! (`dispatch.rs`) until nothing more can be started; `handle_timeout(now)`
//! fires due timers (idle connection expiry, dead destination retry, rate
//! limit wake-ups, destdb garbage collection) and dispatches likewise.
//! Errors: events naming unknown messages, connections or entries, and
//! messages beyond `qmgr_message_active_limit`, are refused with
//! [`SchedError`] and change nothing. Panics: only on broken internal
//! invariants (a stale slab id), naming `sched::slab`.

use crate::config::{ClassKey, ConfigError, SchedConfig};
use crate::connection::{ConnState, Connection};
use crate::destdb::DestDb;
use crate::destination::{Destination, HostLevels, Park};
use crate::entry::{Class, Entry, EntryState};
use crate::event::{
    Action, Event, NewMessage, QueueId, RcptStatus, RecipientGroup, Record, Status, StatusCode,
};
use crate::ids::{ConnId, DestId, EntryId, HostId, KeyId, MsgId, TransportId};
use crate::limiter::{Limiter, LocalLimiter};
use crate::message::{Interner, Message};
use crate::policy::{Policy, ThreeClass};
use crate::rng::Rng;
use crate::shapestate::{ShapeSide, Shaping};
use crate::slab::Slab;
use crate::time::Time;
use crate::transport::Transport;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// An event the scheduler refuses.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SchedError {
    /// `qmgr_message_active_limit` reached: keep the message in the journal and retry later.
    ActiveLimit,
    /// A message with this queue id is already in memory.
    DuplicateMessage(QueueId),
    /// No message with this queue id is in memory.
    UnknownMessage(QueueId),
    /// A recipient group names a transport that is not configured.
    UnknownTransport(String),
    /// No such connection.
    UnknownConnection(ConnId),
    /// The entry is not in flight on that connection.
    UnknownEntry(EntryId),
    /// More recipients than the message had left, or than were asked for.
    TooManyRecipients(QueueId),
    /// New configuration refused.
    Config(ConfigError),
}

impl std::fmt::Display for SchedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for SchedError {}

/// Counters for reports and benchmarks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Scheduling decisions (entries placed, or deferred at selection).
    pub decisions: u64,
    /// Connections opened.
    pub connections_opened: u64,
    /// Transactions started.
    pub transactions: u64,
    /// Entries deferred.
    pub deferred_entries: u64,
    /// Entries bounced.
    pub bounced_entries: u64,
    /// Times a destination was declared dead.
    pub dead_events: u64,
    /// Entries moved to their key's new class at the head of a queue.
    pub reclassed_entries: u64,
    /// Times a destination waited for a rate or a shaping policy's limit.
    pub limited: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    ConnIdle(ConnId),
    DeadRetry(DestId),
    Unpark(DestId),
    Gc,
    /// A shaping hold ends or ramps a step.
    Shaping,
}

const GC_INTERVAL: Duration = Duration::from_secs(60);
/// Postfix's `<transport>_refill_limit` default: read more once this many slots are free.
const REFILL_LIMIT: u32 = 100;

/// The scheduler state machine.
#[derive(Debug)]
pub struct Scheduler {
    pub(crate) cfg: SchedConfig,
    pub(crate) policy: Box<dyn Policy>,
    pub(crate) limiter: Box<dyn LimiterDebug>,
    pub(crate) transports: Vec<Transport>,
    pub(crate) dests: Slab<DestId, Destination>,
    /// Per transport: nexthop → destination (the key shares the destination's string).
    dest_index: Vec<BTreeMap<Arc<str>, DestId>>,
    pub(crate) msgs: Slab<MsgId, Message>,
    msg_index: BTreeMap<QueueId, MsgId>,
    pub(crate) entries: Slab<EntryId, Entry>,
    pub(crate) conns: Slab<ConnId, Connection>,
    pub(crate) hosts: DestDb,
    pub(crate) keys: Interner,
    pub(crate) timers: BTreeSet<(Time, Timer)>,
    pub(crate) actions: VecDeque<Action>,
    pub(crate) rng: Rng,
    pub(crate) rr_transport: usize,
    pub(crate) in_core: u32,
    pub(crate) stats: Stats,
    has_tx_limits: bool,
    has_conn_limits: bool,
    gc_armed: bool,
    /// Earliest retry per message with deferred recipients; a side table
    /// because few messages have one and the message struct is per recipient.
    next_attempts: BTreeMap<MsgId, Time>,
    /// Class keys of a message for kinds other than the first transport's.
    extra_keys: BTreeMap<(MsgId, u8), KeyId>,
    /// Traffic shaping, when a policy is loaded.
    pub(crate) shaping: Option<Shaping>,
    /// Next hops another instance found dead, until when (clusterd's news).
    pub(crate) dead_news: BTreeMap<Box<str>, Time>,
    /// Hosts another instance could not reach, until when (clusterd's news).
    host_news: BTreeMap<Box<str>, Time>,
    /// Job ids, sender and entry domains for shaping.
    pub(crate) side: ShapeSide,
    /// nqmgr's job lists, one per transport, with a preemptive policy.
    pub(crate) jobs: Vec<crate::joblist::JobList>,
}

/// A limiter that can be printed (so the scheduler derives Debug).
pub trait LimiterDebug: Limiter + std::fmt::Debug {}
impl<T: Limiter + std::fmt::Debug> LimiterDebug for T {}

impl Scheduler {
    /// The window a new destination starts at: Postfix's smaller of the
    /// initial window and the limit, or the one `SchedConfig::windows`
    /// gives it (a replay's), within the limit.
    pub(crate) fn initial_window(&self, t: crate::TransportId, nexthop: &str) -> u32 {
        let cfg = &self.transports[t.0 as usize].cfg;
        let start = self
            .cfg
            .windows
            .get(&(cfg.name.clone(), nexthop.to_string()))
            .copied()
            .unwrap_or(cfg.initial_destination_concurrency);
        start.clamp(1, cfg.destination_concurrency_limit.max(1))
    }

    /// A scheduler with the three-class policy and the local limiter.
    pub fn new(cfg: SchedConfig) -> Result<Self, SchedError> {
        Self::with_policy(cfg, Box::new(ThreeClass))
    }

    /// A scheduler with another selection policy (e.g. the FIFO baseline).
    pub fn with_policy(cfg: SchedConfig, policy: Box<dyn Policy>) -> Result<Self, SchedError> {
        let limiter = Box::new(LocalLimiter::new(cfg.limits.clone()));
        Self::with_parts(cfg, policy, limiter)
    }

    /// A scheduler with a policy and a limiter (e.g. a cluster-aware one).
    pub fn with_parts(
        cfg: SchedConfig,
        policy: Box<dyn Policy>,
        limiter: Box<dyn LimiterDebug>,
    ) -> Result<Self, SchedError> {
        cfg.validate().map_err(SchedError::Config)?;
        let transports = cfg.transports.iter().cloned().map(Transport::new).collect();
        let rng = Rng::new(cfg.seed);
        let n_transports = cfg.transports.len();
        let has_tx_limits = cfg
            .limits
            .iter()
            .any(|r| r.scope == crate::limiter::Scope::Transaction);
        let has_conn_limits = cfg
            .limits
            .iter()
            .any(|r| r.scope == crate::limiter::Scope::Connect);
        let jobs = policy.preemption().map_or(Vec::new(), |p| {
            vec![crate::joblist::JobList::new(p); n_transports]
        });
        Ok(Scheduler {
            cfg,
            policy,
            limiter,
            transports,
            dests: Slab::new(),
            dest_index: vec![BTreeMap::new(); n_transports],
            msgs: Slab::new(),
            msg_index: BTreeMap::new(),
            entries: Slab::new(),
            conns: Slab::new(),
            hosts: DestDb::default(),
            keys: Interner::default(),
            timers: BTreeSet::new(),
            actions: VecDeque::new(),
            rng,
            rr_transport: 0,
            in_core: 0,
            stats: Stats::default(),
            has_tx_limits,
            has_conn_limits,
            gc_armed: false,
            next_attempts: BTreeMap::new(),
            extra_keys: BTreeMap::new(),
            shaping: None,
            dead_news: BTreeMap::new(),
            host_news: BTreeMap::new(),
            side: ShapeSide::default(),
            jobs,
        }
        .with_shaping())
    }

    fn with_shaping(mut self) -> Self {
        self.shaping = self.cfg.shaping.clone().map(Shaping::new);
        self
    }

    /// Applies one event, then starts whatever can be started.
    pub fn handle(&mut self, now: Time, ev: Event) -> Result<(), SchedError> {
        match ev {
            Event::MessageAdded(m) => self.message_added(now, m)?,
            Event::RecipientsRead {
                queue_id,
                groups,
                remaining,
            } => self.recipients_read(now, queue_id, groups, remaining)?,
            Event::ConnectionOpened { conn } => {
                let c = self
                    .conns
                    .get_mut(conn)
                    .ok_or(SchedError::UnknownConnection(conn))?;
                c.state = ConnState::Open;
                let (d, since) = (c.dest, c.opened_at);
                crate::observed::Observed::of(&mut self.dests[d].observed, now)
                    .greeting(now.since(since).as_millis() as u64);
                self.conn_next(now, conn);
            }
            Event::ConnectionFailed {
                conn,
                failure,
                status,
                remote,
            } => self.connection_failed(now, conn, failure, &status, remote.as_ref())?,
            Event::ConnectionClosed { conn } => {
                if !self.conns.contains(conn) {
                    return Err(SchedError::UnknownConnection(conn));
                }
                self.drop_conn(now, conn);
            }
            Event::DeliveryDone {
                conn,
                entry,
                results,
                conn_failed,
                remote,
            } => self.delivery_done(now, conn, entry, results, conn_failed, remote)?,
            Event::AgentSlotFree { transport } => {
                // A freed agent only matters to destinations waiting for a worker,
                // and the dispatcher wakes those whenever a worker is free.
                if !self.transports.iter().any(|t| t.cfg.name == transport) {
                    return Err(SchedError::UnknownTransport(transport));
                }
            }
            Event::LimitsChanged => self.wake_all_parked(now),
            Event::Suspend { when, until, tag } => self.suspend(now, when, until, tag),
            Event::RestoreHold(hold) => {
                if let Some(sh) = self.shaping.as_mut() {
                    sh.shaper.restore(hold);
                    sh.refresh_used();
                }
                self.arm_shaping(now);
            }
            Event::Resume { id } => self.resume(now, id),
            Event::DeadElsewhere { nexthop, until } => self.dead_elsewhere(now, &nexthop, until),
            Event::HostRetryElsewhere { host, until } => {
                if until > now {
                    self.host_news.retain(|_, t| *t > now);
                    self.host_news.insert(host.as_str().into(), until);
                    self.hosts.retry_until(&host, until, now);
                }
            }
            Event::SlotReleased { bind } => {
                if let Some(sh) = self.shaping.as_mut() {
                    sh.shaper.closed(bind);
                }
                self.wake_shaping();
            }
            Event::ConfigChanged(cfg) => self.reconfigure(*cfg)?,
            Event::Flush => self.flush(now),
            Event::ConnectionLost { conn, status } => self.connection_lost(now, conn, &status)?,
        }
        self.ensure_gc(now);
        self.schedule(now);
        Ok(())
    }

    /// Fires timers due at `now`, then starts whatever can be started.
    pub fn handle_timeout(&mut self, now: Time) {
        while let Some(&(t, timer)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            match timer {
                Timer::ConnIdle(c) => self.idle_timeout(now, c),
                Timer::DeadRetry(d) => self.dead_retry(now, d),
                Timer::Unpark(d) => {
                    if self
                        .dests
                        .get(d)
                        .is_some_and(|x| matches!(x.park, Park::Until(u) if u <= now))
                    {
                        self.unpark(d);
                    }
                }
                Timer::Gc => {
                    self.gc_armed = false;
                    self.gc(now);
                }
                Timer::Shaping => self.shaping_timer(now),
            }
        }
        self.ensure_gc(now);
        self.schedule(now);
    }

    /// The next action for the shell, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When `handle_timeout` should be called next.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.timers.first().map(|(t, _)| *t)
    }

    // ----- accessors -----

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The configuration in force.
    pub fn config(&self) -> &SchedConfig {
        &self.cfg
    }

    /// Messages in memory.
    pub fn messages_in_memory(&self) -> usize {
        self.msgs.len()
    }

    /// Recipients in memory.
    pub fn recipients_in_core(&self) -> u32 {
        self.in_core
    }

    /// Entries in memory.
    pub fn entries_in_memory(&self) -> usize {
        self.entries.len()
    }

    /// Connections open or opening.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Transport id by name.
    pub fn transport_id(&self, name: &str) -> Option<TransportId> {
        self.transports
            .iter()
            .position(|t| t.cfg.name == name)
            .map(|i| TransportId(i as u32))
    }

    /// Destination id by transport and nexthop.
    pub fn dest_id(&self, t: TransportId, nexthop: &str) -> Option<DestId> {
        self.dest_index
            .get(t.0 as usize)
            .and_then(|m| m.get(nexthop))
            .copied()
    }

    /// Nexthop of a destination.
    pub fn nexthop(&self, d: DestId) -> Option<&str> {
        self.dests.get(d).map(|x| &*x.nexthop)
    }

    /// Concurrency window of a destination (0 while dead).
    pub fn window(&self, d: DestId) -> Option<u32> {
        self.dests.get(d).map(|x| x.window.concurrency)
    }

    /// Connections to a destination.
    pub fn dest_busy(&self, d: DestId) -> Option<u32> {
        self.dests.get(d).map(|x| x.busy)
    }

    /// Retry time if the destination is dead.
    pub fn dead_until(&self, d: DestId) -> Option<Time> {
        self.dests.get(d).and_then(|x| x.dead.map(|z| z.retry_at))
    }

    /// Host name.
    pub fn host_name(&self, h: HostId) -> &str {
        self.hosts.name(h)
    }

    /// Transport name.
    pub fn transport_name(&self, t: TransportId) -> &str {
        &self.transports[t.0 as usize].cfg.name
    }

    // ----- messages and entries -----

    fn message_added(&mut self, now: Time, m: NewMessage) -> Result<(), SchedError> {
        if self.msg_index.contains_key(&m.queue_id) {
            return Err(SchedError::DuplicateMessage(m.queue_id));
        }
        if self.msgs.len() >= self.cfg.qmgr_message_active_limit as usize {
            return Err(SchedError::ActiveLimit);
        }
        // The message's transports are not known yet: intern its key for
        // every class key kind in use (the first transport's kind inline, the
        // others, rare, in a side table). Keys are prefixed by kind so that a
        // tenant cannot collide with a domain.
        let mut kinds: Vec<ClassKey> = Vec::new();
        for t in &self.transports {
            if !kinds.contains(&t.cfg.scheduler_class_key) {
                kinds.push(t.cfg.scheduler_class_key);
            }
        }
        let text = |k: ClassKey| match k {
            ClassKey::Sender | ClassKey::Size => format!("s:{}", m.sender),
            ClassKey::SenderDomain => {
                format!("d:{}", m.sender.rsplit_once('@').map_or("", |(_, d)| d))
            }
            ClassKey::Tenant => format!("t:{}", m.tenant.as_deref().unwrap_or("")),
        };
        let key = self.keys.acquire(&text(kinds[0]));
        let extra: Vec<(ClassKey, String)> = kinds[1..].iter().map(|&k| (k, text(k))).collect();
        let tenant = m.tenant.as_deref().map(|t| self.keys.acquire(t));
        let id = self.msgs.insert(Message::new(
            m.queue_id,
            key,
            tenant,
            m.size,
            m.arrival,
            m.attempts,
            m.recipients,
        ));
        self.msg_index.insert(m.queue_id, id);
        if let Some(j) = m.job.as_deref().filter(|j| !j.is_empty()) {
            let k = self.keys.acquire(j);
            self.side.jobs.insert(id, k);
        }
        if self.shaping.is_some() {
            let domain = m.sender.rsplit_once('@').map_or("", |(_, d)| d);
            let k = self.keys.acquire(&domain.to_ascii_lowercase());
            self.side.sender_domains.insert(id, k);
        }
        for (k, t) in extra {
            let kid = self.keys.acquire(&t);
            self.extra_keys.insert((id, k as u8), kid);
        }
        if m.recipients > 0 {
            let max = self.first_batch().min(m.recipients);
            self.msgs[id].read_pending = true;
            self.actions.push_back(Action::ReadRecipients {
                queue_id: m.queue_id,
                max,
            });
        }
        self.settle_message(now, id);
        Ok(())
    }

    fn recipients_read(
        &mut self,
        now: Time,
        q: QueueId,
        groups: Vec<RecipientGroup>,
        remaining: u32,
    ) -> Result<(), SchedError> {
        let m = *self
            .msg_index
            .get(&q)
            .ok_or(SchedError::UnknownMessage(q))?;
        let mut tids = Vec::with_capacity(groups.len());
        for g in &groups {
            tids.push(
                self.transport_id(&g.transport)
                    .ok_or_else(|| SchedError::UnknownTransport(g.transport.clone()))?,
            );
        }
        let n: u32 = groups.iter().map(|g| g.recipients.len() as u32).sum();
        let msg = &mut self.msgs[m];
        if n.saturating_add(remaining) > msg.unread {
            return Err(SchedError::TooManyRecipients(q));
        }
        // read_pending stays set while the batch is processed, so an entry
        // deferred or bounced at once cannot let the message go half-read.
        msg.unread = remaining;
        // All entries of one batch arrive together: classify them all by the
        // count the key will have, so a list message's first entries do not
        // take the small senders' class (see docs/scheduler.md).
        let batch: u32 = groups
            .iter()
            .zip(&tids)
            .map(|(g, t)| {
                let lim = self.transports[t.0 as usize]
                    .cfg
                    .destination_recipient_limit as usize;
                g.recipients.len().div_ceil(lim) as u32
            })
            .sum();
        let mut extra = batch.saturating_sub(1);
        for (g, t) in groups.into_iter().zip(tids) {
            if g.recipients.is_empty() {
                continue;
            }
            let d = self.find_dest(now, t, &g.nexthop, &g.hosts);
            let tr = &mut self.transports[t.0 as usize];
            let msg = &mut self.msgs[m];
            let had = msg.jobs.iter().any(|j| j.transport == t);
            // nqmgr: a new job takes all unused slots of its transport's pool.
            msg.job(t, || std::mem::take(&mut tr.pool)).in_core += g.recipients.len() as u32;
            if !had && msg.unread > 0 {
                tr.unread_jobs.push_back(m);
            }
            msg.in_core += g.recipients.len() as u32;
            self.in_core += g.recipients.len() as u32;
            let limit = tr.cfg.destination_recipient_limit as usize;
            let own_domain = (!g.domain.is_empty()
                && !g.domain.eq_ignore_ascii_case(&self.dests[d].nexthop))
            .then_some(g.domain.as_str());
            for chunk in g.recipients.chunks(limit) {
                self.create_entry(now, m, d, chunk, extra, own_domain);
                extra = extra.saturating_sub(1);
            }
        }
        self.msgs[m].read_pending = false;
        if self.msgs[m].unread == 0 {
            self.release_excess(now, m);
        }
        self.settle_message(now, m);
        Ok(())
    }

    fn find_dest(
        &mut self,
        now: Time,
        t: TransportId,
        nexthop: &str,
        hosts: &[Vec<String>],
    ) -> DestId {
        let d = match self.dest_index[t.0 as usize].get(nexthop) {
            Some(&d) => d,
            None => {
                let d = self.dests.insert(Destination::new(
                    t,
                    nexthop,
                    self.initial_window(t, nexthop),
                    self.cfg.minimal_backoff_time,
                    now,
                ));
                let key = self.dests[d].nexthop.clone();
                self.dest_index[t.0 as usize].insert(key, d);
                if let Some(&until) = self.dead_news.get(nexthop).filter(|&&u| u > now) {
                    self.mark_dead(now, d, until);
                }
                d
            }
        };
        let same = {
            let dest = &self.dests[d];
            dest.hosts.levels().count() == hosts.len()
                && dest.hosts.levels().zip(hosts).all(|(a, b)| {
                    a.len() == b.len() && a.iter().zip(b).all(|(h, n)| self.hosts.name(*h) == n)
                })
        };
        if !same {
            // The resolver's latest answer wins; destdb keeps the host records.
            let old = std::mem::take(&mut self.dests[d].hosts);
            for h in old.all() {
                self.hosts.release(h);
            }
            let new: Vec<Vec<HostId>> = hosts
                .iter()
                .map(|lvl| lvl.iter().map(|n| self.hosts.acquire(n)).collect())
                .collect();
            // A host another instance could not reach is skipped here too.
            for n in hosts.iter().flatten() {
                if let Some(&until) = self.host_news.get(n.as_str()).filter(|&&u| u > now) {
                    self.hosts.retry_until(n, until, now);
                }
            }
            self.dests[d].hosts = HostLevels::new(new);
            // A grouping found by MX names may have changed with them.
            self.shaping_hosts_changed(d);
        }
        self.dests[d].touched = now;
        d
    }

    fn create_entry(
        &mut self,
        now: Time,
        m: MsgId,
        d: DestId,
        rcpts: &[u32],
        batch_rest: u32,
        domain: Option<&str>,
    ) {
        let msg = &self.msgs[m];
        let tr = &self.transports[self.dests[d].transport.0 as usize];
        let key = self.class_key(m, d);
        let class = if tr.cfg.scheduler_class_key == ClassKey::Size {
            self.policy
                .classify(msg.size_kib, tr.cfg.sender_class_thresholds)
        } else {
            let count = self.keys.recs[key].entries.saturating_add(batch_rest);
            self.key_class_on_add(key, d, count)
        };
        self.keys.recs[key].entries += 1;
        let e = self.entries.insert(Entry::new(m, d, class, rcpts));
        if let Some(domain) = domain {
            let k = self.keys.acquire(&domain.to_ascii_lowercase());
            self.side.domains.insert(e, k);
        }
        self.msgs[m].live_entries += 1;
        let dest = &mut self.dests[d];
        dest.entries += 1;
        if self.is_expired(now, m) {
            self.bounce_entry(e, Status::new(StatusCode::EXPIRED, mail::notice::EXPIRED));
            return;
        }
        // The retry timer may not have fired yet at the very retry time.
        self.dead_retry(now, d);
        if let Some(dead) = self.dests[d].dead {
            let why = Status::new(StatusCode::NO_ANSWER, "destination is dead");
            self.defer_entry(now, e, &why, Some(dead.retry_at), true);
            return;
        }
        let head = self.dests[d].queues[class.idx()].front();
        self.dests[d].queue(class).push_back(e);
        // Parked because shaping refused what it had: mail of another side
        // (another recipient domain, tenant) may go now.
        let parked = matches!(self.dests[d].park, Park::Shaping | Park::Until(_));
        if parked && self.dests[d].shaped {
            let side = |s: &mut Self, e| s.entry_side(e).map(|x| x.id);
            if head.is_none_or(|h| side(self, h) != side(self, e)) {
                self.unpark(d);
            }
        }
        let first = head.is_none();
        if self.preemptive() {
            let t = self.dests[d].transport;
            self.job_entry_queued(now, t, m, d, true);
        }
        let long = self.reserve_recipients(self.dests[d].transport);
        if first
            && self.dests[d].park == Park::Window
            && (self.policy.reserve() || self.dests[d].long_in_flight(long))
        {
            // The slot a larger class may not take may be this class's.
            self.unpark(d);
        }
        self.ensure_ring(d, class);
    }

    pub(crate) fn is_expired(&self, now: Time, m: MsgId) -> bool {
        now >= self.msgs[m].arrival + self.cfg.maximal_queue_lifetime
    }

    /// Back-off for a message, as Postfix's qmgr: its age, so the time
    /// between attempts doubles whatever restarts happen (the shell need not
    /// count attempts), and at least minimal_backoff_time doubled per
    /// attempt the caller reports; within minimal_backoff_time ..
    /// maximal_backoff_time.
    pub(crate) fn backoff(&self, now: Time, m: MsgId) -> Time {
        let min = self.cfg.minimal_backoff_time;
        let k = self.msgs[m].attempts.min(30);
        let by_attempts = min.saturating_mul(1u32 << k);
        let age = now.since(self.msgs[m].arrival);
        let d = by_attempts
            .max(age)
            .min(self.cfg.maximal_backoff_time)
            .max(min);
        now + d
    }

    /// Removes an entry that is no longer queued or on a connection.
    fn remove_entry(&mut self, now: Time, e: EntryId) -> Entry {
        let entry = self.entries.remove(e);
        if let Some(k) = self.side.domains.remove(&e) {
            self.keys.release(k);
        }
        let n = entry.recipient_count();
        let t = self.dests[entry.dest].transport;
        if matches!(entry.state, EntryState::OnConn(_) | EntryState::InFlight(_)) {
            self.msgs[entry.message].workers -= 1;
            self.transports[t.0 as usize].inflight[entry.class.idx()] -= 1;
            self.dests[entry.dest].inflight[entry.class.idx()] -= 1;
            self.dests[entry.dest].inflight_rcpts[entry.class.idx()] -= n;
        }
        let msg = &mut self.msgs[entry.message];
        msg.live_entries -= 1;
        msg.in_core -= n;
        if let Some(j) = msg.jobs.iter_mut().find(|j| j.transport == t) {
            j.in_core -= n;
        }
        self.in_core -= n;
        let key = self.class_key(entry.message, entry.dest);
        self.keys.recs[key].entries -= 1;
        if self.keyed_classes(entry.dest) {
            self.key_class_on_remove(key, entry.dest);
        }
        let dest = &mut self.dests[entry.dest];
        dest.entries -= 1;
        dest.touched = now;
        self.release_excess(now, entry.message);
        entry
    }

    /// Defers a detached entry (or bounces it when the message is too old).
    pub(crate) fn defer_entry(
        &mut self,
        now: Time,
        e: EntryId,
        status: &Status,
        next: Option<Time>,
        journal: bool,
    ) {
        let m = self.entries[e].message;
        if self.is_expired(now, m) {
            self.bounce_entry(e, expired(status));
            return;
        }
        let next = next.unwrap_or_else(|| self.backoff(now, m));
        self.defer_until(m, next);
        let entry = self.remove_entry(now, e);
        let q = self.msgs[m].queue_id;
        let recipients = entry.recipients().to_vec();
        if journal {
            self.actions.push_back(Action::Journal(Record::Deferred {
                queue_id: q,
                recipients: recipients.clone(),
                status: status.clone(),
                next_attempt: next,
            }));
        }
        self.actions.push_back(Action::Defer {
            queue_id: q,
            recipients,
            status: status.clone(),
            next_attempt: next,
        });
        self.stats.deferred_entries += 1;
        self.settle_message(now, m);
    }

    fn bounce_entry(&mut self, e: EntryId, status: Status) {
        let m = self.entries[e].message;
        let entry = self.remove_entry(Time::ZERO, e);
        let q = self.msgs[m].queue_id;
        let recipients = entry.recipients().to_vec();
        self.actions.push_back(Action::Journal(Record::Bounced {
            queue_id: q,
            recipients: recipients.clone(),
            status: status.clone(),
        }));
        self.actions.push_back(Action::Bounce {
            queue_id: q,
            recipients,
            status,
        });
        self.stats.bounced_entries += 1;
        self.settle_message(Time::ZERO, m);
    }

    /// The class key of message `m` under destination `d`'s transport's kind.
    pub(crate) fn class_key(&self, m: MsgId, d: DestId) -> KeyId {
        let kind = self.transports[self.dests[d].transport.0 as usize]
            .cfg
            .scheduler_class_key;
        self.extra_keys
            .get(&(m, kind as u8))
            .copied()
            .unwrap_or(self.msgs[m].key)
    }

    /// Records a deferral's retry time for the message, keeping the earliest.
    fn defer_until(&mut self, m: MsgId, t: Time) {
        let e = self.next_attempts.entry(m).or_insert(t);
        *e = (*e).min(t);
    }

    /// Reads more recipients when slots allow, or lets a finished message go.
    pub(crate) fn settle_message(&mut self, _now: Time, m: MsgId) {
        let Some(msg) = self.msgs.get(m) else { return };
        if msg.read_pending {
            return;
        }
        if msg.live_entries == 0 && msg.unread == 0 {
            let msg = self.msgs.remove(m);
            for jl in &mut self.jobs {
                jl.free(m);
            }
            self.msg_index.remove(&msg.queue_id);
            for k in [
                self.side.jobs.remove(&m),
                self.side.sender_domains.remove(&m),
            ]
            .into_iter()
            .flatten()
            {
                self.keys.release(k);
            }
            for j in msg.jobs.iter() {
                if j.slots > 0 {
                    self.give_slots(j.transport, j.slots);
                }
            }
            self.keys.release(msg.key);
            for k in 0..4u8 {
                if let Some(kid) = self.extra_keys.remove(&(m, k)) {
                    self.keys.release(kid);
                }
            }
            if let Some(t) = msg.tenant() {
                self.keys.release(t);
            }
            self.actions.push_back(Action::MessageDone {
                queue_id: msg.queue_id,
                next_attempt: self.next_attempts.remove(&m),
            });
            return;
        }
        if msg.unread > 0 {
            let batch = self.next_batch(m).min(msg.unread);
            if batch > 0 && (msg.live_entries == 0 || batch >= REFILL_LIMIT.min(msg.unread)) {
                let q = msg.queue_id;
                self.msgs[m].read_pending = true;
                self.actions.push_back(Action::ReadRecipients {
                    queue_id: q,
                    max: batch,
                });
            }
        }
    }

    // ----- connections -----

    fn delivery_done(
        &mut self,
        now: Time,
        c: ConnId,
        e: EntryId,
        results: Vec<(u32, RcptStatus)>,
        conn_failed: bool,
        remote: Vec<mail::RemoteReply>,
    ) -> Result<(), SchedError> {
        let conn = self
            .conns
            .get_mut(c)
            .ok_or(SchedError::UnknownConnection(c))?;
        if conn.in_flight != Some(e) {
            return Err(SchedError::UnknownEntry(e));
        }
        conn.in_flight = None;
        conn.transactions += 1;
        let (d, h, since) = (conn.dest, conn.host, conn.txn_since);
        let m = self.entries[e].message;
        let q = self.msgs[m].queue_id;
        let mut delivered = Vec::new();
        let mut deferred = Vec::new();
        let mut bounced = Vec::new();
        let mut defer_status: Option<Status> = None;
        let mut bounce_status: Option<Status> = None;
        for &r in self.entries[e].recipients() {
            match results.iter().find(|(i, _)| *i == r).map(|(_, s)| s) {
                Some(RcptStatus::Delivered) => delivered.push(r),
                Some(RcptStatus::Bounced(why)) => {
                    bounce_status = Some(why.clone());
                    bounced.push(r);
                }
                Some(RcptStatus::Deferred(why)) => {
                    defer_status = Some(why.clone());
                    deferred.push(r);
                }
                None => {
                    defer_status = Some(Status::new(
                        StatusCode::SYSTEM_TEMP,
                        "no result from delivery agent",
                    ));
                    deferred.push(r);
                }
            }
        }
        let busy = self.dests[d].busy;
        let replies = [delivered.len(), deferred.len(), bounced.len()].map(|n| n as u64);
        crate::observed::Observed::of(&mut self.dests[d].observed, now).transaction(
            now.since(since).as_millis() as u64,
            self.entries[e].recipients().len(),
            replies,
            busy,
        );
        if self.shaping.is_some() {
            self.shaping_reply(now, c, &remote);
        }
        if !delivered.is_empty() {
            self.actions.push_back(Action::Journal(Record::Delivered {
                queue_id: q,
                recipients: delivered,
            }));
        }
        let too_old = self.is_expired(now, m);
        if let (Some(why), true) = (&defer_status, too_old) {
            bounce_status = Some(expired(why));
            bounced.append(&mut deferred);
        }
        if let (Some(status), false) = (bounce_status, bounced.is_empty()) {
            self.actions.push_back(Action::Journal(Record::Bounced {
                queue_id: q,
                recipients: bounced.clone(),
                status: status.clone(),
            }));
            self.actions.push_back(Action::Bounce {
                queue_id: q,
                recipients: bounced,
                status,
            });
            self.stats.bounced_entries += 1;
        }
        if let (Some(status), false) = (defer_status, deferred.is_empty()) {
            let next = self.backoff(now, m);
            self.defer_until(m, next);
            self.actions.push_back(Action::Journal(Record::Deferred {
                queue_id: q,
                recipients: deferred.clone(),
                status: status.clone(),
                next_attempt: next,
            }));
            self.actions.push_back(Action::Defer {
                queue_id: q,
                recipients: deferred,
                status,
                next_attempt: next,
            });
            self.stats.deferred_entries += 1;
        }
        self.remove_entry(now, e);
        self.settle_message(now, m);
        if conn_failed {
            self.drop_conn(now, c);
            self.negative(now, d);
        } else {
            self.hosts.worked(h);
            self.positive(now, d);
            if self.conns.contains(c) {
                self.conn_next_after(now, c, true);
            }
        }
        Ok(())
    }

    // ----- parking and rings -----

    /// Puts a destination in its class ring if it has work there and is not parked.
    pub(crate) fn ensure_ring(&mut self, d: DestId, c: Class) {
        if self.preemptive() {
            // nqmgr selects by job, not by class ring.
            return;
        }
        let dest = &mut self.dests[d];
        if !dest.in_ring[c.idx()] && dest.park == Park::No && !dest.queues[c.idx()].is_empty() {
            dest.in_ring[c.idx()] = true;
            self.transports[dest.transport.0 as usize].rings[c.idx()].push(d);
        }
    }

    pub(crate) fn park(&mut self, d: DestId, p: Park) {
        if matches!(p, Park::Until(_) | Park::Shaping) {
            self.stats.limited += 1;
        }
        let dest = &mut self.dests[d];
        dest.park = p;
        match p {
            Park::Transport => self.transports[dest.transport.0 as usize]
                .waiting
                .push_back(d),
            Park::Until(t) => {
                self.timers.insert((t, Timer::Unpark(d)));
            }
            Park::Shaping => self.park_shaping(d),
            Park::Window | Park::No => {}
        }
    }

    pub(crate) fn unpark(&mut self, d: DestId) {
        let Some(dest) = self.dests.get_mut(d) else {
            return;
        };
        dest.park = Park::No;
        let t = dest.transport.0 as usize;
        for c in Class::ALL {
            self.ensure_ring(d, c);
        }
        if let Some(jl) = self.jobs.get_mut(t) {
            jl.unblocked(d);
        }
    }

    /// Room appeared at the destination (window grew, a connection has
    /// backlog room or closed): a destination waiting for its window, or for
    /// a worker, may now use its own connection.
    pub(crate) fn wake_window(&mut self, d: DestId) {
        if self
            .dests
            .get(d)
            .is_some_and(|x| matches!(x.park, Park::Window | Park::Transport))
        {
            self.unpark(d);
        }
    }

    // ----- housekeeping -----

    fn ensure_gc(&mut self, now: Time) {
        if !self.gc_armed && (!self.dests.is_empty() || !self.hosts.is_empty()) {
            self.gc_armed = true;
            self.timers.insert((now + GC_INTERVAL, Timer::Gc));
        }
    }

    fn gc(&mut self, now: Time) {
        self.hosts.gc(now, self.cfg.destdb_record_lifetime);
        self.limiter.forget_idle(now);
        let (min, max) = (self.cfg.minimal_backoff_time, self.cfg.maximal_backoff_time);
        let idle: Vec<DestId> = self
            .dests
            .iter()
            .filter(|(_, x)| {
                // A destination that died recently keeps its back-off while
                // its mail waits outside the scheduler for the retry: its
                // messages come back just after it revives, and forgetting
                // it then would start the back-off again at the minimum.
                let keep = if x.backoff() > min { max } else { GC_INTERVAL };
                x.is_idle()
                    && x.park == Park::No
                    && x.in_ring == [false; 3]
                    && x.touched + keep <= now
            })
            .map(|(i, _)| i)
            .collect();
        for d in idle {
            let dest = self.dests.remove(d);
            self.dest_index[dest.transport.0 as usize].remove(&*dest.nexthop);
            for h in dest.hosts.all() {
                self.hosts.release(h);
            }
        }
        // After the destinations went: shaping caches keyed by their ids
        // must not outlive them (ids are reused).
        self.shaping_gc(now);
    }

    fn reconfigure(&mut self, cfg: SchedConfig) -> Result<(), SchedError> {
        cfg.validate().map_err(SchedError::Config)?;
        if cfg.transports.len() < self.transports.len()
            || self
                .transports
                .iter()
                .zip(&cfg.transports)
                .any(|(a, b)| a.cfg.name != b.name)
        {
            // Transport ids are indexes; removing or renaming needs a restart.
            return Err(SchedError::Config(ConfigError::OutOfRange(
                "master.cf transports".into(),
            )));
        }
        for (i, tc) in cfg.transports.iter().enumerate() {
            if let Some(tr) = self.transports.get_mut(i) {
                let used = tr.cfg.recipient_limit.saturating_sub(tr.pool);
                tr.pool = tc.recipient_limit.saturating_sub(used);
                tr.cfg = tc.clone();
                tr.fb = crate::feedback::FeedbackParams::from_transport(tc);
            } else {
                self.transports.push(Transport::new(tc.clone()));
                if let Some(p) = self.policy.preemption() {
                    self.jobs.push(crate::joblist::JobList::new(p));
                }
                self.dest_index.push(BTreeMap::new());
            }
        }
        let ids: Vec<DestId> = self.dests.iter().map(|(i, _)| i).collect();
        for d in ids {
            let limit = self.transports[self.dests[d].transport.0 as usize]
                .cfg
                .destination_concurrency_limit;
            let w = &mut self.dests[d].window;
            if w.concurrency > limit {
                w.concurrency = limit;
            }
            self.unpark(d);
        }
        self.has_tx_limits = cfg
            .limits
            .iter()
            .any(|r| r.scope == crate::limiter::Scope::Transaction);
        self.has_conn_limits = cfg
            .limits
            .iter()
            .any(|r| r.scope == crate::limiter::Scope::Connect);
        if cfg.limits != self.cfg.limits {
            self.limiter = Box::new(LocalLimiter::new(cfg.limits.clone()));
        }
        match (&cfg.shaping, self.shaping.as_mut()) {
            (Some(p), Some(sh)) => sh.reload(Arc::clone(p)),
            (Some(p), None) => self.shaping = Some(Shaping::new(Arc::clone(p))),
            (None, _) => self.shaping = None,
        }
        self.cfg = cfg;
        self.wake_all_parked(Time::ZERO);
        Ok(())
    }

    pub(crate) fn has_tx_limits(&self) -> bool {
        self.has_tx_limits
    }

    pub(crate) fn has_conn_limits(&self) -> bool {
        self.has_conn_limits
    }
}

#[cfg(test)]
#[path = "sched_tests.rs"]
mod tests;

/// What a deferral becomes when the message has outlived
/// `maximal_queue_lifetime`: 5.4.7 (delivery time expired), the last
/// attempt's status and text behind the reason.
fn expired(last: &Status) -> Status {
    Status::new(
        StatusCode::EXPIRED,
        format!("{}: {last}", mail::notice::EXPIRED),
    )
}
