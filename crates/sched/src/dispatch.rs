//! Selection and connection scheduling.
//!
//! Selection (Wietse): round-robin over transports, then over the transport's
//! non-empty classes (under-share classes first), then over the destinations
//! in the class ring, then the FIFO head. Placement (fanf): an active
//! connection of the destination whose backlog is under
//! `<transport>_connection_backlog_limit`, most recent first; otherwise, if
//! `allowed_new_worker`, an idle connection (most recently idle), or a new
//! connection when the window and the transport allow (closing another
//! destination's idle connection when the transport is full) to a host
//! chosen idle → unused (random) → closed (oldest) → retry (random) → fewest
//! connections, falling back to the next MX level when every host of a level
//! is in retry; a message that may not take a new worker rides on an active
//! connection; when no host is usable the entry is deferred. A destination
//! that can do nothing is parked with the reason, so no decision scans it.
//! Panics: never (ids come from the scheduler's own structures).

use crate::connection::ConnState;
use crate::destdb::HostClass;
use crate::destination::Park;
use crate::entry::Class;
use crate::event::{Status, StatusCode};
use crate::ids::{ConnId, DestId, EntryId, HostId, MsgId, TransportId};
use crate::limiter::{LimitKey, Scope, Verdict};
use crate::sched::Scheduler;
use crate::shapestate::Refusal;
use crate::time::Time;

/// Where a shaping refusal parks the destination.
/// Message sides tried behind a head entry that shaping refuses.
const SIDE_TRIES: usize = 8;

/// Entries looked at for them (further behind, an entry waits for the
/// destination's wake-up: a shaped connection closing, the limits or the
/// holds changing).
const SIDE_SCAN: usize = 4096;

/// Why an entry could not start: shaping, for its message side (another
/// side's entry may go), or anything else (the destination waits).
enum Refused {
    Shaping(Park),
    Other(Park),
}

/// Of two shaping parks, the one that wakes the destination first: a
/// time beats a wait for shaping to change.
fn sooner(a: Park, b: Park) -> Park {
    match (a, b) {
        (Park::Until(x), Park::Until(y)) => Park::Until(x.min(y)),
        (Park::Until(x), _) | (_, Park::Until(x)) => Park::Until(x),
        (a, _) => a,
    }
}

fn shaped(r: Refusal) -> Refused {
    Refused::Shaping(park_for(r))
}

fn park_for(r: Refusal) -> Park {
    match r {
        Refusal::Until(t) => Park::Until(t),
        Refusal::Wait => Park::Shaping,
    }
}

/// Where an entry goes.
enum Plan {
    Conn(ConnId),
    Open {
        host: HostId,
        close_idle: Option<ConnId>,
    },
    DeferNoHost(Option<Time>),
    Block(Park),
}

impl Scheduler {
    /// Dispatches until no transport can start anything.
    pub(crate) fn schedule(&mut self, now: Time) {
        let n = self.transports.len();
        let mut idle_rounds = 0;
        while idle_rounds < n {
            let t = self.rr_transport % n;
            self.rr_transport = (t + 1) % n;
            let done = if self.preemptive() {
                self.dispatch_jobs(now, TransportId(t as u32))
            } else {
                self.dispatch_one(now, TransportId(t as u32))
            };
            if done {
                idle_rounds = 0;
            } else {
                idle_rounds += 1;
            }
        }
    }

    /// Wakes destinations that wait for a worker of transport `ti`, as many
    /// as could get one.
    pub(crate) fn wake_waiting(&mut self, ti: usize) {
        let t = TransportId(ti as u32);
        let tr = &self.transports[ti];
        let mut wake = (tr.free_workers() as usize + tr.idle.len()).min(tr.waiting.len());
        while wake > 0 {
            wake -= 1;
            let Some(d) = self.transports[ti].waiting.pop_front() else {
                break;
            };
            if self
                .dests
                .get(d)
                .is_some_and(|x| x.park == Park::Transport && x.transport == t)
            {
                self.unpark(d);
            }
        }
    }

    /// fanf's allowed_new_worker for the message.
    fn allowed_new_worker(&self, m: MsgId, free_workers: u32) -> bool {
        let w = self.msgs[m].workers;
        w < self.cfg.max_message_concurrency
            || w < self.cfg.scale_max_concurrency.saturating_mul(free_workers)
    }

    /// One decision on transport `t`; false when nothing could be started.
    fn dispatch_one(&mut self, now: Time, t: TransportId) -> bool {
        let ti = t.0 as usize;
        self.wake_waiting(ti);
        let (order, k) = self.transports[ti].class_order(self.policy.shares());
        for &class in &order[..k] {
            let c = class.idx();
            while let Some(d) = self.transports[ti].rings[c].pop() {
                let Some(dest) = self.dests.get_mut(d) else {
                    continue;
                };
                if dest.transport != t || !dest.in_ring[c] {
                    continue;
                }
                dest.in_ring[c] = false;
                if dest.park != Park::No {
                    continue;
                }
                let moved = self.settle_head(d, class);
                if self.dests[d].queues[c].is_empty() {
                    if moved {
                        // Its entries went to other classes: the class
                        // order changed, so the next decision starts over.
                        return true;
                    }
                    continue;
                }
                // Each class gets at least its share of the destination's
                // window: serve an under-share class here if this one is over.
                let mut serve = if self.policy.shares() {
                    self.dests[d].share_class(class)
                } else {
                    class
                };
                if serve != class {
                    self.settle_head(d, serve);
                    if self.dests[d].queues[serve.idx()].is_empty() {
                        serve = class;
                    }
                }
                match self.try_dispatch(now, t, d, serve) {
                    Ok(()) => {
                        self.ensure_ring(d, class);
                        self.ensure_ring(d, serve);
                        self.transports[ti].class_cursor = (c + 1) % 3;
                        self.stats.decisions += 1;
                        return true;
                    }
                    Err(p) => self.park(d, p),
                }
            }
        }
        false
    }

    /// Starts the head entry of `d`'s `class` queue, or, when shaping
    /// refuses it for what its message side is (a suspended recipient
    /// domain, a tenant's spent rate), the first entry of a side that may
    /// go: behind a shared relay one domain's held mail must not hold up
    /// the others' (held entries keep their place and order). This class's
    /// queue first, then the others' (the destination parks as a whole);
    /// entries of a side already refused are passed over at the cost of a
    /// look-up; at most [`SIDE_TRIES`] sides are tried, among the first
    /// [`SIDE_SCAN`] entries of each queue. Refused throughout, it parks
    /// until the earliest time a side may go, else until shaping changes.
    /// Not with nqmgr's preemption (it asks for one job's entry) nor with
    /// the `sched::limiter` rules (each try would spend their tokens).
    pub(crate) fn try_dispatch(
        &mut self,
        now: Time,
        t: TransportId,
        d: DestId,
        class: Class,
    ) -> Result<(), Park> {
        let Some(head) = self.dests[d].queues[class.idx()].front() else {
            return Ok(());
        };
        self.dests[d].shaped = false;
        let first = match self.try_head(now, t, d, class) {
            Ok(()) => return Ok(()),
            Err(Refused::Other(p)) => return Err(p),
            Err(Refused::Shaping(p)) => p,
        };
        self.dests[d].shaped = true;
        let side = self.entry_side(head).map(|s| s.id);
        let scan = !self.preemptive() && !self.has_tx_limits() && !self.has_conn_limits();
        let (Some(side), true) = (side, scan) else {
            return Err(first);
        };
        let mut blocked = vec![side];
        let mut park = first;
        let others = Class::ALL.into_iter().filter(|&c| c != class);
        'classes: for c in std::iter::once(class).chain(others) {
            let queued: Vec<EntryId> = self.dests[d].queues[c.idx()]
                .iter()
                .take(SIDE_SCAN)
                .collect();
            for (at, e) in queued.into_iter().enumerate() {
                if blocked.len() > SIDE_TRIES {
                    break 'classes;
                }
                let Some(side) = self.entry_side(e).map(|s| s.id) else {
                    continue;
                };
                if blocked.contains(&side) {
                    continue;
                }
                // Tried at the head of its queue, put back in its place if refused.
                let q = self.dests[d].queue(c);
                q.remove(e);
                q.push_front(e);
                match self.try_head(now, t, d, c) {
                    Ok(()) => {
                        self.dests[d].shaped = false;
                        self.ensure_ring(d, c);
                        return Ok(());
                    }
                    Err(r) => {
                        let q = self.dests[d].queue(c);
                        if q.front() == Some(e) {
                            q.pop_front();
                            q.insert(at, e);
                        }
                        match r {
                            Refused::Shaping(p) => {
                                blocked.push(side);
                                park = sooner(park, p);
                            }
                            Refused::Other(p) => {
                                self.dests[d].shaped = false;
                                return Err(p);
                            }
                        }
                    }
                }
            }
        }
        Err(park)
    }

    /// [`Scheduler::try_dispatch`] for the queue's head entry.
    fn try_head(
        &mut self,
        now: Time,
        t: TransportId,
        d: DestId,
        class: Class,
    ) -> Result<(), Refused> {
        let Some(e) = self.dests[d].queues[class.idx()].front() else {
            return Ok(());
        };
        self.dead_retry(now, d);
        if let Some(dead) = self.dests[d].dead {
            self.dests[d].queue(class).pop_front();
            let why = Status::new(StatusCode::NO_ANSWER, "destination is dead");
            self.defer_entry(now, e, &why, Some(dead.retry_at), true);
            return Ok(());
        }
        let m = self.entries[e].message;
        let side = self.entry_side(e);
        let sid = side.as_ref().map(|s| s.id);
        let plan = self.plan(now, t, d, e, sid, class);
        if let Plan::Block(p) = plan {
            return Err(Refused::Other(p));
        }
        if let Plan::DeferNoHost(until) = plan {
            self.dests[d].queue(class).pop_front();
            let why = self.suspended_reason(d);
            self.defer_entry(now, e, &why, until, true);
            return Ok(());
        }
        if self.has_tx_limits() {
            let host = match plan {
                Plan::Conn(c) => Some(self.conns[c].host),
                Plan::Open { host, .. } => Some(host),
                _ => None,
            };
            if let Verdict::RetryAt(at) = self.acquire(now, Scope::Transaction, d, host, m) {
                return Err(Refused::Other(Park::Until(at)));
            }
        }
        match plan {
            Plan::Conn(c) => {
                self.may_send(now, self.conns[c].bind).map_err(shaped)?;
                self.dests[d].queue(class).pop_front();
                self.assign(now, e, c);
            }
            Plan::Open { host, close_idle } => {
                let mut wait = None;
                if self.has_conn_limits() {
                    if let Verdict::RetryAt(at) =
                        self.acquire(now, Scope::Connect, d, Some(host), m)
                    {
                        wait = Some(Refused::Other(Park::Until(at)));
                    }
                }
                let mut chosen = (None, None);
                if wait.is_none() {
                    match self.choose_source(now, e, host, side.as_deref()) {
                        Ok(c) => chosen = c,
                        Err(r) => wait = Some(shaped(r)),
                    }
                }
                if let Some(p) = wait {
                    // May not connect yet: ride an active connection if there is one.
                    return match self.ride(d, sid) {
                        Some(c) => {
                            self.may_send(now, self.conns[c].bind).map_err(shaped)?;
                            self.dests[d].queue(class).pop_front();
                            self.assign(now, e, c);
                            Ok(())
                        }
                        None => Err(p),
                    };
                }
                let (source, bind) = chosen;
                self.may_send(now, bind).map_err(shaped)?;
                if let Some(ic) = close_idle {
                    self.close_conn(now, ic);
                }
                self.dests[d].queue(class).pop_front();
                let c = self.new_conn(now, d, host, source, bind, sid.unwrap_or(0));
                self.assign(now, e, c);
            }
            Plan::DeferNoHost(_) | Plan::Block(_) => unreachable!("handled above"),
        }
        Ok(())
    }

    fn acquire(
        &mut self,
        now: Time,
        scope: Scope,
        d: DestId,
        h: Option<HostId>,
        m: MsgId,
    ) -> Verdict {
        let dest = &self.dests[d];
        let tr = &self.transports[dest.transport.0 as usize];
        let key = LimitKey {
            destination: &dest.nexthop,
            host: h.map(|h| self.hosts.name(h)),
            source: tr.cfg.bind_address.as_deref(),
            tenant: self.msgs[m].tenant().map(|k| self.keys.name(k)),
        };
        self.limiter.acquire(now, scope, &key)
    }

    /// The mean recipients per transaction from which a larger class leaves
    /// a destination's last connection slot to a smaller one
    /// (`Destination::keeps_last_slot`): any length with a reserving
    /// policy, the transport's setting with classes, never without.
    pub(crate) fn reserve_recipients(&self, t: TransportId) -> u32 {
        if self.policy.reserve() {
            1
        } else if self.policy.shares() {
            self.transports[t.0 as usize]
                .cfg
                .class_slot_reserve_recipients
        } else {
            0
        }
    }

    /// Whether an entry of `class` may wait in connection `c`'s backlog:
    /// not behind a job of a larger class, and, below the large class, not
    /// behind another waiting job. A list's 50-recipient transaction takes
    /// 25 times a one-recipient message's time, and a small sender queued
    /// behind it waited for it (docs/scheduler.md, scenario 3); it waits in
    /// its class queue instead, where the next connection to free up
    /// serves it. A waiting job is hidden from the other connections and
    /// counts in its class's share: a burst stacked five deep on the few
    /// connections that ran its first messages went one a round there,
    /// while the other connections, its queue empty and its class over its
    /// share, went back to the bulk (docs/scheduler.md, "A burst stacked
    /// on a few connections"). One waiting job per connection starts
    /// within one transaction, as the queue's head would.
    fn may_wait_behind(&self, c: ConnId, class: Class) -> bool {
        if !self.policy.shares() {
            return true;
        }
        let x = &self.conns[c];
        if class < Class::Large && !x.backlog.is_empty() {
            return false;
        }
        x.in_flight
            .iter()
            .chain(x.backlog.iter())
            .all(|&e| self.entries[e].class <= class)
    }

    /// fanf's free ride: the first active connection with fewer jobs than the
    /// newest, else the first; bounded at twice the backlog threshold so a
    /// ride cannot move a whole queue onto connections.
    fn ride(&self, d: DestId, side: Option<u32>) -> Option<ConnId> {
        let cfg = &self.transports[self.dests[d].transport.0 as usize].cfg;
        let cap = cfg.connection_backlog_limit.saturating_mul(2);
        let active: Vec<ConnId> = self.dests[d]
            .conns
            .iter()
            .copied()
            .filter(|&c| {
                let x = &self.conns[c];
                x.jobs() > 0
                    && x.jobs() < cap
                    && x.may_ride(x.reuse_limit)
                    && self.compatible(c, side)
            })
            .collect();
        let newest = *active.last()?;
        let nj = self.conns[newest].jobs();
        active
            .iter()
            .copied()
            .find(|&c| self.conns[c].jobs() < nj)
            .or(Some(active[0]))
    }

    fn plan(
        &mut self,
        now: Time,
        t: TransportId,
        d: DestId,
        e: EntryId,
        side: Option<u32>,
        class: Class,
    ) -> Plan {
        let (m, rcpts) = (self.entries[e].message, self.entries[e].recipient_count());
        let tr = &self.transports[t.0 as usize];
        let backlog = tr.cfg.connection_backlog_limit;
        let free = tr.free_workers();
        let dest = &self.dests[d];
        // Connections whose shaping rates have no token now are passed
        // over; if that leaves nothing, the destination waits for the token.
        let mut wait: Option<Time> = None;
        // 1. An active connection under the backlog threshold, most recent first.
        // Connections still opening are not active yet: piling entries on a
        // host that may be dead would serialise the connect timeouts.
        for &c in dest.conns.iter().rev() {
            let conn = &self.conns[c];
            if conn.state == ConnState::Open
                && conn.jobs() > 0
                && conn.may_take(backlog, conn.reuse_limit)
                && self.may_wait_behind(c, class)
                && self.compatible(c, side)
                && self.sendable(now, c, &mut wait)
            {
                return Plan::Conn(c);
            }
        }
        // A larger class behind long transactions may not take the last
        // free slot of the window (a new connection, or the one idle
        // connection) while no smaller class holds a connection: it is kept
        // for one that comes. (The test without idle connections holds
        // whenever the one with them does: they are counted only then.)
        let long = self.reserve_recipients(t);
        let reserved = dest.keeps_last_slot(class, rcpts, long, 0) && {
            let idle = dest
                .conns
                .iter()
                .filter(|&&c| self.conns[c].state == ConnState::Open && self.conns[c].jobs() == 0)
                .count() as u32;
            dest.keeps_last_slot(class, rcpts, long, idle)
        };
        if self.allowed_new_worker(m, free) {
            // 2. The most recently idle connection.
            let idle = dest
                .conns
                .iter()
                .copied()
                .filter(|&c| {
                    let x = &self.conns[c];
                    x.state == ConnState::Open
                        && x.jobs() == 0
                        && x.may_take(backlog, x.reuse_limit)
                        && self.compatible(c, side)
                        && self.sendable(now, c, &mut wait)
                })
                .max_by_key(|&c| (self.conns[c].idle_since, c));
            if let (Some(c), false) = (idle, reserved) {
                return Plan::Conn(c);
            }
            // 3. A new connection, if the window and a worker allow. Choice:
            // a destination whose connections are all still opening (it may
            // be dead: each attempt can hold a worker for the connect
            // timeout) gets no second one while other destinations wait for
            // workers; a first success lifts this.
            let unproven = !dest.conns.is_empty()
                && dest
                    .conns
                    .iter()
                    .all(|&c| self.conns[c].state != ConnState::Open);
            if unproven && (free == 0 || !tr.waiting.is_empty()) {
                return Plan::Block(Park::Transport);
            }
            if dest.window_room() && !reserved {
                let close_idle = if free > 0 {
                    Some(None)
                } else if tr.workers == tr.cfg.process_limit {
                    // Worker needed elsewhere: the oldest idle connection goes.
                    tr.idle.first().map(|&(_, c)| Some(c))
                } else {
                    // Above a lowered limit after a reload: only shrink.
                    None
                };
                if let Some(close_idle) = close_idle {
                    return match self.choose_host(now, d) {
                        Ok(host) => Plan::Open { host, close_idle },
                        Err(until) => Plan::DeferNoHost(until),
                    };
                }
            }
        }
        if let Some(at) = wait {
            return Plan::Block(Park::Until(at));
        }
        let allowed = self.allowed_new_worker(m, free);
        // 4. A message that may not take a new worker rides on an active
        // connection (fanf's free ride for big envelopes). Entries that only
        // lack window or worker room wait in their class queue instead, where
        // the class round-robin still orders them (see docs/scheduler.md).
        if !allowed {
            if let Some(c) = self.ride(d, side) {
                return Plan::Conn(c);
            }
            return Plan::Block(Park::Transport);
        }
        let dest = &self.dests[d];
        if dest.busy >= dest.window.concurrency {
            Plan::Block(Park::Window)
        } else {
            Plan::Block(Park::Transport)
        }
    }

    /// Why mail for `d` waits while every host of it is in retry: as
    /// Postfix says it, "delivery temporarily suspended: " and the error of
    /// the latest failed connection (or, on news from another instance, the
    /// host that failed there).
    fn suspended_reason(&self, d: DestId) -> Status {
        let latest = self.dests[d]
            .hosts
            .levels()
            .flatten()
            .map(|&h| &self.hosts.hosts[h])
            .filter(|r| r.retry_at.is_some())
            .max_by_key(|r| (r.last_error.is_some(), r.retry_at));
        match latest {
            Some(r) => match &r.last_error {
                Some(why) => Status::new(
                    // Deferred mail keeps a temporary code whatever the peer said.
                    if why.code.class() == 4 {
                        why.code
                    } else {
                        StatusCode::NO_ANSWER
                    },
                    format!("delivery temporarily suspended: {}", why.text),
                ),
                None => Status::new(
                    StatusCode::NO_ANSWER,
                    format!(
                        "delivery temporarily suspended: host {} did not answer recently",
                        crate::host_parts(&r.name).0
                    ),
                ),
            },
            None => Status::new(
                StatusCode::NO_ANSWER,
                "delivery temporarily suspended: no host answered recently",
            ),
        }
    }

    /// Host for a new connection: unused (random) → closed (oldest) → retry
    /// (random) → fewest connections, level by level; Err(earliest retry) if none.
    fn choose_host(&mut self, now: Time, d: DestId) -> Result<HostId, Option<Time>> {
        let mut earliest: Option<Time> = None;
        let levels: Vec<Vec<HostId>> = self.dests[d]
            .hosts
            .levels()
            .map(<[HostId]>::to_vec)
            .collect();
        for level in &levels {
            let mut unused = Vec::new();
            let mut closed: Option<(Time, HostId)> = None;
            let mut retry = Vec::new();
            let mut active: Vec<(u32, HostId)> = Vec::new();
            for &h in level {
                match self.hosts.classify(h, now) {
                    HostClass::Unused => unused.push(h),
                    HostClass::Closed(at) => {
                        if closed.is_none_or(|(t, _)| at < t) {
                            closed = Some((at, h));
                        }
                    }
                    HostClass::Retry => retry.push(h),
                    HostClass::Active(n) => active.push((n, h)),
                    HostClass::Skip => {
                        let r = self.hosts.hosts[h].retry_at;
                        earliest = match (earliest, r) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                    }
                }
            }
            if !unused.is_empty() {
                return Ok(unused[self.rng.below(unused.len() as u64) as usize]);
            }
            if let Some((_, h)) = closed {
                return Ok(h);
            }
            if !retry.is_empty() {
                return Ok(retry[self.rng.below(retry.len() as u64) as usize]);
            }
            if let Some(min) = active.iter().map(|(n, _)| *n).min() {
                let fewest: Vec<HostId> = active
                    .iter()
                    .filter(|(n, _)| *n == min)
                    .map(|(_, h)| *h)
                    .collect();
                return Ok(fewest[self.rng.below(fewest.len() as u64) as usize]);
            }
        }
        Err(earliest)
    }

    /// Entries of a destination in each class (tests, reports).
    pub fn queued(&self, d: DestId) -> [usize; 3] {
        self.dests.get(d).map_or([0; 3], |x| {
            [x.queues[0].len(), x.queues[1].len(), x.queues[2].len()]
        })
    }

    /// Entry ids queued on a connection (tests).
    pub fn conn_jobs(&self, c: ConnId) -> Vec<EntryId> {
        self.conns.get(c).map_or(Vec::new(), |x| {
            x.in_flight
                .into_iter()
                .chain(x.backlog.iter().copied())
                .collect()
        })
    }
}
