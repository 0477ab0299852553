//! Concurrency feedback application and dead destinations.
//!
//! Applies `feedback::Window` to a destination after each delivery: positive
//! feedback after a delivery without connection or handshake failure (which
//! also revives a dead destination: "back from the almost grave", window =
//! busy or initial), negative feedback after a failed connection or
//! handshake, and, when the failed pseudo-cohorts pass the limit, declares
//! the destination dead (unless `<transport>_destination_dead_while_delivering`
//! is off and one of its connections is open and delivers: then its
//! window drops to those connections): its waiting entries are deferred (one journal record
//! per message) until a retry time that doubles from `minimal_backoff_time`
//! to `maximal_backoff_time` per consecutive death; its idle connections
//! close. Panics: never.

use crate::connection::ConnState;
use crate::destination::Dead;
use crate::event::{Action, Notice, Record, Status, StatusCode};
use crate::feedback::Change;
use crate::ids::{DestId, EntryId, MsgId};
use crate::sched::{Scheduler, Timer};
use crate::time::Time;
use std::collections::BTreeMap;

impl Scheduler {
    pub(crate) fn positive(&mut self, now: Time, d: DestId) {
        let t = self.dests[d].transport.0 as usize;
        let fb = self.transports[t].fb;
        let dest = &mut self.dests[d];
        dest.set_backoff(self.cfg.minimal_backoff_time);
        if dest.dead.is_some() {
            // A live connection succeeded: "back from the almost grave".
            let w = if dest.busy > 0 { dest.busy } else { fb.initial };
            dest.window.revive(w);
            dest.dead = None;
            self.actions
                .push_back(Action::Notice(Notice::DestinationRevived {
                    destination: d,
                }));
            self.unpark(d);
            return;
        }
        let busy = dest.busy;
        if let Change::Window(from, to) = dest.window.success(busy, &fb) {
            self.window_notice(d, from, to);
            self.wake_window(d);
        }
        let _ = now;
    }

    pub(crate) fn negative(&mut self, now: Time, d: DestId) {
        let t = self.dests[d].transport.0 as usize;
        let fb = self.transports[t].fb;
        let before = self.dests[d].window.concurrency;
        match self.dests[d].window.failure(&fb) {
            Change::Dead if !self.transports[t].cfg.dead_while_delivering => {
                // Connections that the server greeted and that deliver (a
                // transaction running or done) show it alive: it refuses
                // sessions beyond some number (421 to the rest), and that
                // many is the window. Without any, the failed pseudo-cohort
                // rule stands.
                let live = self.dests[d]
                    .conns
                    .iter()
                    .filter(|&&c| {
                        let x = &self.conns[c];
                        x.state == ConnState::Open && (x.transactions > 0 || x.in_flight.is_some())
                    })
                    .count() as u32;
                if live == 0 {
                    self.dest_dead(now, d);
                } else {
                    self.dests[d].window.revive(live);
                    self.window_notice(d, before, live);
                }
            }
            Change::Dead => self.dest_dead(now, d),
            Change::Window(from, to) => self.window_notice(d, from, to),
            Change::Same => {}
        }
    }

    fn window_notice(&mut self, d: DestId, from: u32, to: u32) {
        if self.cfg.feedback_debug {
            self.actions.push_back(Action::Notice(Notice::Window {
                destination: d,
                from,
                to,
            }));
        }
    }

    /// The destination is dead: defer its waiting entries, one journal record per message.
    fn dest_dead(&mut self, now: Time, d: DestId) {
        let dest = &mut self.dests[d];
        let retry_at = now + dest.backoff();
        dest.set_backoff((dest.backoff() * 2).min(self.cfg.maximal_backoff_time));
        self.actions
            .push_back(Action::Notice(Notice::DestinationDead {
                destination: d,
                retry_at,
            }));
        self.mark_dead(now, d, retry_at);
    }

    /// Another instance found `nexthop` dead until `retry_at` (clusterd's
    /// news): the destinations of that name here wait as well, without
    /// paying the connect timeouts themselves. No notice: the news is not
    /// told on again.
    pub(crate) fn dead_elsewhere(&mut self, now: Time, nexthop: &str, retry_at: Time) {
        if retry_at <= now {
            return;
        }
        // Kept for destinations made before it ends (mail that comes later).
        self.dead_news.retain(|_, t| *t > now);
        self.dead_news.insert(nexthop.into(), retry_at);
        let ds: Vec<DestId> = self
            .dests
            .iter()
            .filter(|(_, x)| &*x.nexthop == nexthop && x.dead.is_none())
            .map(|(i, _)| i)
            .collect();
        for d in ds {
            self.mark_dead(now, d, retry_at);
        }
    }

    /// Defers `victims` (out of every queue) until `retry_at` with
    /// `status`: one journal record per message, then each entry's
    /// defer action (an expired message's entries journal their bounce).
    pub(crate) fn defer_entries_until(
        &mut self,
        now: Time,
        victims: Vec<EntryId>,
        status: &Status,
        retry_at: Time,
    ) {
        let mut by_msg: BTreeMap<MsgId, Vec<u32>> = BTreeMap::new();
        for &e in &victims {
            let en = &self.entries[e];
            by_msg
                .entry(en.message)
                .or_default()
                .extend_from_slice(en.recipients());
        }
        for (m, recipients) in by_msg {
            if !self.is_expired(now, m) {
                let q = self.msgs[m].queue_id;
                self.actions.push_back(Action::Journal(Record::Deferred {
                    queue_id: q,
                    recipients,
                    status: status.clone(),
                    next_attempt: retry_at,
                }));
            }
        }
        for e in victims {
            let journal = self.is_expired(now, self.entries[e].message);
            self.defer_entry(now, e, status, Some(retry_at), journal);
        }
    }

    /// Marks `d` dead until `retry_at`; defers what waits for it.
    pub(crate) fn mark_dead(&mut self, now: Time, d: DestId, retry_at: Time) {
        self.dests[d].dead = Some(Dead { retry_at });
        self.stats.dead_events += 1;
        self.timers.insert((retry_at, Timer::DeadRetry(d)));
        let mut victims: Vec<EntryId> = Vec::new();
        for c in 0..3 {
            victims.extend(self.dests[d].queues[c].drain());
        }
        let conns = self.dests[d].conns.clone();
        for &c in &conns {
            let queued: Vec<EntryId> = self.conns[c].backlog.drain(..).collect();
            for e in queued {
                self.requeue(e);
                let class = self.entries[e].class;
                self.dests[d].queue(class).pop_front();
                victims.push(e);
            }
        }
        let dead = Status::new(StatusCode::NO_ANSWER, "destination is dead");
        self.defer_entries_until(now, victims, &dead, retry_at);
        for c in conns {
            if let Some(conn) = self.conns.get_mut(c) {
                conn.retiring = true;
                if conn.in_flight.is_none() && conn.state == ConnState::Open {
                    self.close_conn(now, c);
                }
            }
        }
    }

    /// An operator flush: host retry records go, dead destinations are retried now.
    pub(crate) fn flush(&mut self, now: Time) {
        self.hosts.forget_retries();
        let dead: Vec<DestId> = self
            .dests
            .iter()
            .filter(|(_, x)| x.dead.is_some())
            .map(|(d, _)| d)
            .collect();
        for d in dead {
            if let Some(x) = self.dests[d].dead.as_mut() {
                x.retry_at = now;
            }
            self.dead_retry(now, d);
        }
    }

    pub(crate) fn dead_retry(&mut self, now: Time, d: DestId) {
        let Some(dest) = self.dests.get_mut(d) else {
            return;
        };
        let Some(dead) = dest.dead else { return };
        if dead.retry_at > now {
            return;
        }
        let t = dest.transport.0 as usize;
        let w = if dest.busy > 0 {
            dest.busy
        } else {
            self.transports[t].fb.initial
        };
        dest.window.revive(w);
        dest.dead = None;
        self.actions
            .push_back(Action::Notice(Notice::DestinationRetry {
                destination: d,
                window: w,
            }));
        self.unpark(d);
    }
}
