//! A connection's next job: after it opens, after an assignment and after
//! each transaction, it starts the next job waiting on it, swapped for the
//! head of an under-share or smaller class's queue when the classes call
//! for it (`share_swap`), or goes idle, or closes.
//!
//! Panics: only on broken internal invariants (a stale slab id).

use crate::connection::ConnState;
use crate::entry::EntryState;
use crate::event::Action;
use crate::ids::{ConnId, EntryId};
use crate::sched::{Scheduler, Timer};
use crate::time::Time;

impl Scheduler {
    pub(crate) fn start(&mut self, now: Time, c: ConnId, e: EntryId) {
        let conn = &mut self.conns[c];
        conn.in_flight = Some(e);
        conn.txn_since = now;
        if let Some(t) = conn.idle_since.take() {
            self.transports[conn.transport.0 as usize]
                .idle
                .remove(&(t, c));
        }
        let entry = &mut self.entries[e];
        entry.state = EntryState::InFlight(c);
        let q = self.msgs[entry.message].queue_id;
        self.actions.push_back(Action::Start {
            conn: c,
            entry: e,
            queue_id: q,
            recipients: entry.recipients().to_vec(),
        });
        self.stats.transactions += 1;
    }

    /// After the opening or an assignment: start the next job, idle, or close.
    pub(crate) fn conn_next(&mut self, now: Time, c: ConnId) {
        self.conn_next_after(now, c, false);
    }

    /// Like `conn_next`; `waited` after a transaction, when the next job
    /// has waited on the connection while smaller classes may have come.
    pub(crate) fn conn_next_after(&mut self, now: Time, c: ConnId, waited: bool) {
        let conn = &self.conns[c];
        if conn.state != ConnState::Open || conn.in_flight.is_some() {
            return;
        }
        let t = conn.transport.0 as usize;
        let cfg = &self.transports[t].cfg;
        let too_old = now >= conn.opened_at + cfg.connection_reuse_time_limit;
        let used_up = conn.reuse_limit > 0 && conn.transactions >= conn.reuse_limit;
        let cache = conn.idle_limit;
        let d = conn.dest;
        if self.shaping.is_some() && self.held(now, c) {
            // Its mail was suspended (a reply rule, say): what waits on it
            // goes back to the queues, where the suspension parks it.
            let conn = &mut self.conns[c];
            conn.retiring = true;
            let mut back: Vec<EntryId> = conn.backlog.drain(..).collect();
            back.reverse();
            for e in back {
                self.requeue(e);
            }
        }
        let conn = &mut self.conns[c];
        if too_old || used_up {
            conn.retiring = true;
        }
        if let Some(e) = conn.backlog.pop_front() {
            let e = self.share_swap(c, e, waited);
            self.start(now, c, e);
        } else if conn.retiring || cache.is_zero() {
            self.close_conn(now, c);
        } else if conn.idle_since.is_none() {
            conn.idle_since = Some(now);
            let shaped = conn.bind.is_some();
            self.transports[t].idle.insert((now, c));
            self.timers.insert((now + cache, Timer::ConnIdle(c)));
            if shaped {
                // Mail waiting for a slot this connection holds may take it now.
                self.wake_shaping();
            }
        }
        self.wake_window(d);
    }

    /// Before a waiting job starts: if its class is over its share of the
    /// destination and another class with queued work is under it, or
    /// (`waited`) a smaller class has queued work (under its share or
    /// not), the job goes back to the head of its class queue and the
    /// other class's head runs instead, so connection backlogs cannot
    /// starve a class.
    fn share_swap(&mut self, c: ConnId, e: EntryId, waited: bool) -> EntryId {
        if !self.policy.shares() || self.has_tx_limits() {
            return e;
        }
        let (d, class) = (self.entries[e].dest, self.entries[e].class);
        let n = self.entries[e].recipient_count();
        let mut want = self.dests[d].share_class_excluding(class, 1, n);
        if want == class {
            // Smaller classes wait in their queues, not behind larger jobs on
            // connections (`may_wait_behind`): they still go before a job
            // that waited there. (A job just assigned was the dispatcher's
            // choice in the class round-robin.)
            if !waited {
                return e;
            }
            match self.dests[d].smaller_waiting(class) {
                Some(k) => want = k,
                None => return e,
            }
        }
        // Its head may belong to another class by now (`reclass`).
        self.settle_head(d, want);
        let Some(f) = self.dests[d].queue(want).pop_front() else {
            return e;
        };
        // Under a shaping policy the other class's head may be mail this
        // connection cannot carry (another source pool, tenant, job):
        // it waits for a connection of its own.
        if self.shaping.is_some() {
            let side = self.entry_side(f).map(|x| x.id);
            if !self.compatible(c, side) {
                self.dests[d].queue(want).push_front(f);
                return e;
            }
        }
        self.requeue(e);
        let entry = &mut self.entries[f];
        entry.state = EntryState::OnConn(c);
        let m = entry.message;
        self.msgs[m].workers += 1;
        let t = self.dests[d].transport.0 as usize;
        self.transports[t].inflight[want.idx()] += 1;
        self.dests[d].inflight[want.idx()] += 1;
        self.dests[d].inflight_rcpts[want.idx()] += self.entries[f].recipient_count();
        f
    }
}
