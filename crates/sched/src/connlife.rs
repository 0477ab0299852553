//! Connection lifecycle: a new connection and the entries assigned to it,
//! idle expiry, closing, a connection that fails to open or whose agent
//! is lost, and the entries they put back at the head of their queues.
//!
//! Panics: only on broken internal invariants (a stale slab id).

use crate::connection::Connection;
use crate::destdb::HostClass;
use crate::destination::Park;
use crate::entry::{Class, EntryState};
use crate::event::{Action, ConnFailure, Notice, Status};
use crate::ids::{ConnId, DestId, EntryId, HostId};
use crate::sched::{SchedError, Scheduler};
use crate::time::Time;

impl Scheduler {
    pub(crate) fn idle_timeout(&mut self, now: Time, c: ConnId) {
        let Some(conn) = self.conns.get(c) else {
            return;
        };
        let cache = conn.idle_limit;
        if let Some(since) = conn.idle_since {
            if since + cache <= now {
                self.close_conn(now, c);
            }
        }
    }

    /// Closes a connection by our decision.
    pub(crate) fn close_conn(&mut self, now: Time, c: ConnId) {
        // A shaped connection keeps its slots until it is really closed.
        let release = self.conns[c].bind.filter(|_| self.shaping.is_some());
        self.actions.push_back(Action::Close { conn: c, release });
        if release.is_some() {
            self.conns[c].bind = None;
        }
        self.drop_conn(now, c);
    }

    /// Forgets a connection; jobs still queued on it are rescheduled.
    pub(crate) fn drop_conn(&mut self, now: Time, c: ConnId) {
        let conn = self.conns.remove(c);
        let t = conn.transport.0 as usize;
        if let Some(since) = conn.idle_since {
            self.transports[t].idle.remove(&(since, c));
        }
        self.transports[t].workers -= 1;
        self.hosts.closed(conn.host, now);
        if let (Some(sh), Some(b)) = (self.shaping.as_mut(), conn.bind) {
            sh.shaper.closed(b);
            self.wake_shaping();
        }
        let dest = &mut self.dests[conn.dest];
        dest.busy -= 1;
        dest.conns.retain(|x| *x != c);
        let mut back: Vec<EntryId> = conn.in_flight.into_iter().chain(conn.backlog).collect();
        // Put them back at the head of their queues, keeping their order.
        back.reverse();
        for e in back {
            self.requeue(e);
        }
        self.wake_window(conn.dest);
    }

    /// Takes an entry off its connection and puts it back at the head of its class queue.
    pub(crate) fn requeue(&mut self, e: EntryId) {
        let entry = &mut self.entries[e];
        entry.state = EntryState::Queued;
        let (m, d, class) = (entry.message, entry.dest, entry.class);
        self.msgs[m].workers -= 1;
        let t = self.dests[d].transport.0 as usize;
        self.transports[t].inflight[class.idx()] -= 1;
        self.dests[d].inflight[class.idx()] -= 1;
        self.dests[d].inflight_rcpts[class.idx()] -= self.entries[e].recipient_count();
        // Its key may have changed class while it was on the connection.
        let class = self.current_class(e);
        self.entries[e].class = class;
        self.dests[d].queue(class).push_front(e);
        self.ensure_ring(d, class);
        if self.preemptive() {
            // qmgr_entry_unselect; the job is linked again if it was
            // retired. (It exists: its entry does; the time is its own.)
            let t = self.dests[d].transport;
            self.job_entry_queued(Time::ZERO, t, m, d, false);
        }
    }

    pub(crate) fn connection_failed(
        &mut self,
        now: Time,
        c: ConnId,
        failure: ConnFailure,
        status: &Status,
        remote: Option<&mail::RemoteReply>,
    ) -> Result<(), SchedError> {
        let conn = self.conns.get(c).ok_or(SchedError::UnknownConnection(c))?;
        let (d, h, t) = (conn.dest, conn.host, conn.transport.0 as usize);
        let busy = self.dests[d].busy;
        // A local failure (no source address, no egress proxy) says nothing
        // of the destination: sluice sim must not model it as refusing.
        if failure != ConnFailure::Local {
            crate::observed::Observed::of(&mut self.dests[d].observed, now).failed(
                now,
                failure == ConnFailure::Handshake,
                busy,
            );
        }
        // The delivery that opened the connection failed (Postfix defers it);
        // the others that were queued on the connection are rescheduled.
        if let (ConnFailure::Handshake, Some(r)) = (failure, remote) {
            self.shaping_reply(now, c, std::slice::from_ref(r));
        }
        let first = self.take_first(c);
        if failure == ConnFailure::Unreachable {
            let retry = self.transports[t].cfg.host_retry_time;
            if let Some(until) = self.hosts.failed(h, now, retry, status) {
                self.actions
                    .push_back(Action::Notice(Notice::HostRetry { host: h, until }));
            }
        }
        // Postfix's smtp client tries the next MX host within the same
        // delivery; here each connection is one host, so a delivery whose
        // host was unreachable stays queued while another of the
        // destination's hosts may still be tried (the failed one is skipped
        // for host_retry_time). Only when none is left is it deferred.
        let other = failure == ConnFailure::Unreachable
            && !self.transports[t].cfg.host_retry_time.is_zero()
            && self.dests[d]
                .hosts
                .levels()
                .flatten()
                .any(|&o| o != h && !matches!(self.hosts.classify(o, now), HostClass::Skip));
        if let (Some(e), true) = (first, other) {
            // Another host may still take it: back at the head of its queue.
            let class = self.entries[e].class;
            self.dests[d].queue(class).push_front(e);
            self.ensure_ring(d, class);
            if self.preemptive() {
                let (t, m) = (self.dests[d].transport, self.entries[e].message);
                self.job_entry_queued(now, t, m, d, false);
            }
        }
        self.drop_conn(now, c);
        if let Some(e) = first {
            if !other {
                self.defer_entry(now, e, status, None, true);
            }
        }
        if failure == ConnFailure::Local {
            self.throttle_local(now, d, status);
        } else {
            self.negative(now, d);
        }
        Ok(())
    }

    /// After the transport's own side failed (no egress proxy answered,
    /// no source address could be bound), the destination opens no
    /// connection for `transport_retry_time`, as Postfix throttles a
    /// failing transport: otherwise every queued message costs another
    /// attempt through every proxy. With no connection of its own left,
    /// what it has queued is deferred until then; with connections still
    /// delivering (through a proxy that is up), they keep taking it.
    fn throttle_local(&mut self, now: Time, d: DestId, status: &Status) {
        let t = self.dests[d].transport.0 as usize;
        let retry = self.transports[t].cfg.transport_retry_time;
        if retry.is_zero() {
            return;
        }
        let until = now + retry;
        if self.dests[d].conns.is_empty() {
            let mut victims = Vec::new();
            for class in Class::ALL {
                victims.extend(self.dests[d].queue(class).drain());
            }
            self.defer_entries_until(now, victims, status, until);
        }
        // Rings drop a parked destination as they come to it.
        if !matches!(self.dests[d].park, Park::Until(u) if u >= until) {
            self.park(d, Park::Until(until));
        }
    }

    pub(crate) fn connection_lost(
        &mut self,
        now: Time,
        c: ConnId,
        status: &Status,
    ) -> Result<(), SchedError> {
        if !self.conns.contains(c) {
            return Err(SchedError::UnknownConnection(c));
        }
        // What was running may or may not have been delivered: deferred (at
        // least once), as is the first entry of a connection still opening,
        // so that an agent failing every time cannot loop; what waited
        // behind it goes back to its queue.
        let first = self.take_first(c);
        self.drop_conn(now, c);
        if let Some(e) = first {
            self.defer_entry(now, e, status, None, true);
        }
        Ok(())
    }

    /// Takes a failing connection's first entry (its transaction, or the one
    /// it was opened for) off it, out of every queue and in-flight count.
    fn take_first(&mut self, c: ConnId) -> Option<EntryId> {
        let conn = &mut self.conns[c];
        let e = conn.in_flight.take().or_else(|| conn.backlog.pop_front())?;
        // requeue() settles the worker and in-flight counts; the entry then
        // leaves the queue head it was put at.
        self.requeue(e);
        self.dests[self.entries[e].dest]
            .queue(self.entries[e].class)
            .pop_front();
        Some(e)
    }

    /// Opens a connection record (the caller emits nothing else), bound
    /// to a shaping binding when a policy is loaded.
    pub(crate) fn new_conn(
        &mut self,
        now: Time,
        d: DestId,
        h: HostId,
        source: Option<std::net::IpAddr>,
        bind: Option<shaping::BindId>,
        side: u32,
    ) -> ConnId {
        let t = self.dests[d].transport;
        let mut conn = Connection::new(t, d, h, now);
        let cfg = &self.transports[t.0 as usize].cfg;
        conn.reuse_limit = cfg.connection_reuse_count_limit;
        conn.idle_limit = cfg.connection_cache_time_limit;
        conn.bind = bind;
        conn.side = side;
        if let (Some(sh), Some(b)) = (self.shaping.as_mut(), bind) {
            // A policy's own pooling settings are the more specific.
            let (transactions, idle) = sh.shaper.connection_limits(b);
            if let Some(n) = transactions {
                conn.reuse_limit = n;
            }
            if let Some(i) = idle {
                conn.idle_limit = i;
            }
            sh.shaper.opened(now.0, b);
        }
        let c = self.conns.insert(conn);
        let dest = &mut self.dests[d];
        dest.conns.push(c);
        dest.busy += 1;
        self.transports[t.0 as usize].workers += 1;
        self.hosts.opened(h);
        self.stats.connections_opened += 1;
        self.actions.push_back(Action::Open {
            conn: c,
            transport: t,
            destination: d,
            host: h,
            source,
        });
        c
    }

    /// Puts a queued entry (already popped from its queue) on a connection.
    pub(crate) fn assign(&mut self, now: Time, e: EntryId, c: ConnId) {
        let entry = &mut self.entries[e];
        entry.state = EntryState::OnConn(c);
        let (m, d, class) = (entry.message, entry.dest, entry.class);
        self.msgs[m].workers += 1;
        let t = self.dests[d].transport.0 as usize;
        self.transports[t].inflight[class.idx()] += 1;
        self.dests[d].inflight[class.idx()] += 1;
        self.dests[d].inflight_rcpts[class.idx()] += self.entries[e].recipient_count();
        // Waiting jobs are ordered by class (smaller classes first, FIFO
        // within a class), so a connection's backlog does not undo the class
        // round-robin: a small sender's entry waits behind at most the
        // running transaction, not behind a list's queued ones.
        let pos = if self.policy.shares() {
            let entries = &self.entries;
            self.conns[c]
                .backlog
                .iter()
                .position(|x| entries[*x].class > class)
                .unwrap_or(self.conns[c].backlog.len())
        } else {
            self.conns[c].backlog.len()
        };
        self.conns[c].backlog.insert(pos, e);
        self.conn_next(now, c);
    }
}
