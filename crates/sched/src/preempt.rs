//! nqmgr's preemptive job scheduler (Postfix `qmgr_job.c`), as a policy
//! to compare with the three classes in the simulator.
//!
//! Each transport keeps a list of jobs (one per message with entries on
//! it) in the order their messages were queued. The entry selected next is
//! the current job's, round-robin over its destinations ("peers"); a job
//! none of whose destinations can take a delivery is a blocker and is
//! skipped until one of those destinations unblocks, which puts the
//! current job back at the head of the list. Every entry selected earns
//! its job one delivery slot; a job that has earned enough may be
//! preempted by the candidate with the best (time since queued) / (entries)
//! that fits in the slots it can still earn: the candidate moves in front
//! of it on the list and the slots it is expected to use are taken from the
//! preempted job (the loan and the discount let it in before all of them
//! are earned; they are paid back before the next preemption). Popped from
//! its stack, a job gives its parent back the slots it did not use. Every
//! step follows `qmgr_job_entry_select`, `qmgr_job_preempt`,
//! `qmgr_job_candidate`, `qmgr_job_pop`, `qmgr_job_link` and
//! `qmgr_job_retire` (Postfix 2.x, Patrik Rak), with three differences
//! that change no decision in the scenarios: the candidate is computed each
//! time instead of cached per second, there is no extra recipient pool for
//! preempting jobs (`qmgr_message_recipient_limit` is not reached in the
//! scenarios), and a job's unselected entries are counted by looking in its
//! destinations' queues (O(queue) per look: a comparison policy, not the
//! default). Panics: never.

use crate::destination::Park;
use crate::entry::{Class, EntryState};
use crate::ids::{DestId, EntryId, MsgId, TransportId};
use crate::joblist::Job;
use crate::sched::Scheduler;
use crate::time::Time;

/// Where the selection loop got with one job.
enum Pick {
    /// An entry was placed on a connection.
    Selected,
    /// An entry was deferred at selection (its destination is dead).
    Deferred,
    /// No destination of the job takes an entry now.
    Blocked,
}

impl Scheduler {
    /// The job lists of a preemptive policy (empty otherwise).
    pub(crate) fn preemptive(&self) -> bool {
        !self.jobs.is_empty()
    }

    /// An entry of message `m` for destination `d` on transport `t` is
    /// queued (`new`: made from recipients just read; else back from a
    /// connection): qmgr_job_obtain (the job is linked again if it was
    /// retired, and is no longer a blocker). A new job's queued time is
    /// `now`, when its message was picked up, as Postfix's.
    pub(crate) fn job_entry_queued(
        &mut self,
        now: Time,
        t: TransportId,
        m: MsgId,
        d: DestId,
        new: bool,
    ) {
        let queued = now;
        let Some(jl) = self.jobs.get_mut(t.0 as usize) else {
            return;
        };
        let j = jl.jobs.entry(m).or_insert_with(|| Job {
            queued,
            level: -1,
            ..Job::default()
        });
        if new {
            j.read += 1;
        }
        if !j.peers.contains(&d) {
            j.peers.push(d);
        }
        if j.level < 0 {
            jl.link(m);
        }
        if jl.jobs[&m].blocker_tag == jl.blocker_tag {
            jl.jobs.get_mut(&m).expect("job").blocker_tag = 0;
            jl.current = jl.list.first().copied();
        }
    }

    /// Entries of `m` waiting in `d`'s queue, and the first of them.
    fn job_queued_at(&self, m: MsgId, d: DestId) -> (u32, Option<EntryId>) {
        let Some(dest) = self.dests.get(d) else {
            return (0, None);
        };
        let mut n = 0;
        let mut first = None;
        for e in dest.queues[Class::Small.idx()].iter() {
            if self.entries[e].message == m {
                n += 1;
                first = first.or(Some(e));
            }
        }
        (n, first)
    }

    /// The job's entries not selected (waiting in its destinations' queues).
    fn job_unselected(&self, t: usize, m: MsgId) -> u32 {
        self.jobs[t].jobs[&m]
            .peers
            .iter()
            .map(|&d| self.job_queued_at(m, d).0)
            .sum()
    }

    /// MAX_ENTRIES: entries read plus recipients not yet read (Postfix
    /// compares one with the other too).
    fn job_max_entries(&self, t: usize, m: MsgId) -> i64 {
        i64::from(self.jobs[t].jobs[&m].read) + i64::from(self.msgs[m].unread)
    }

    fn job_selected(&self, t: usize, m: MsgId) -> i64 {
        i64::from(self.jobs[t].jobs[&m].read) - i64::from(self.job_unselected(t, m))
    }

    /// qmgr_job_candidate: the job with the best (time since queued) /
    /// (entries) among those after `current` that need no more slots than
    /// `current` can still earn, are not blockers and have no children.
    fn job_candidate(&self, now: Time, t: usize, current: MsgId) -> Option<MsgId> {
        let jl = &self.jobs[t];
        let cost = i64::from(jl.params.cost);
        let cur = &jl.jobs[&current];
        let min_entries = i64::from(cur.read);
        let max_slots = (min_entries - self.job_selected(t, current) + cur.slots_available) / cost;
        if max_slots <= 0 {
            return None;
        }
        let (mut best, mut best_score) = (None, 0.0f64);
        let start = jl.pos(current)? + 1;
        for &m in &jl.list[start..] {
            let j = &jl.jobs[&m];
            if !j.children.is_empty() || j.blocker_tag == jl.blocker_tag {
                continue;
            }
            let max_total = self.job_max_entries(t, m);
            let max_needed = max_total - self.job_selected(t, m);
            // Postfix counts whole seconds.
            let delay = (now.since(j.queued).as_secs() + 1) as f64;
            if max_needed > 0 && max_needed <= max_slots {
                let score = delay / max_total as f64;
                if score > best_score {
                    best_score = score;
                    best = Some(m);
                }
            }
            // Younger jobs on level 0 cannot score better.
            if delay <= best_score && j.level == 0 {
                break;
            }
        }
        best
    }

    /// qmgr_job_preempt: the job whose entry is selected next.
    fn job_preempt(&mut self, now: Time, t: usize, current: MsgId) -> MsgId {
        let p = self.jobs[t].params;
        let (cost, loan) = (i64::from(p.cost), i64::from(p.loan));
        let avail = self.jobs[t].jobs[&current].slots_available;
        if avail <= 0 || self.job_max_entries(t, current) < i64::from(p.min_slots) * cost {
            return current;
        }
        let Some(m) = self.job_candidate(now, t, current) else {
            return current;
        };
        let expected = self.job_max_entries(t, m) - self.job_selected(t, m);
        let loan_factor = f64::from(100u32.saturating_sub(p.discount));
        if ((avail / cost + loan) as f64) < expected as f64 * loan_factor / 100.0 {
            return current;
        }
        let jl = &mut self.jobs[t];
        if jl.jobs[&m].level > 0 {
            jl.pop(m);
        }
        if let Some(i) = jl.pos(m) {
            jl.list.remove(i);
        }
        let at = jl.pos(current).unwrap_or(0);
        jl.list.insert(at, m);
        let level = jl.jobs[&current].level + 1;
        let j = jl.jobs.get_mut(&m).expect("job");
        j.parent = Some(current);
        j.level = level;
        j.slots_used = -expected;
        let c = jl.jobs.get_mut(&current).expect("job");
        c.children.push(m);
        c.slots_available -= expected * cost;
        jl.current = Some(m);
        jl.preemptions += 1;
        m
    }

    /// qmgr_job_peer_select and the entry's placement: the job's next
    /// destination (round-robin) that takes its entry.
    fn job_peer_select(&mut self, now: Time, t: TransportId, m: MsgId) -> Pick {
        let ti = t.0 as usize;
        let peers = self.jobs[ti].jobs[&m].peers.clone();
        let n = peers.len();
        let start = self.jobs[ti].jobs[&m].cursor;
        for k in 0..n {
            let i = (start + k) % n;
            let d = peers[i];
            let (_, Some(e)) = self.job_queued_at(m, d) else {
                continue;
            };
            if self.dests[d].park != Park::No {
                continue;
            }
            // The job's entry is the one served, wherever it waits.
            let q = &mut self.dests[d].queues[Class::Small.idx()];
            q.remove(e);
            q.push_front(e);
            match self.try_dispatch(now, t, d, Class::Small) {
                Ok(()) => {
                    if let Some(j) = self.jobs[ti].jobs.get_mut(&m) {
                        j.cursor = (i + 1) % n;
                    }
                    // A deferral at selection (dead destination) earns nothing.
                    if self
                        .entries
                        .get(e)
                        .is_some_and(|x| x.state != EntryState::Queued)
                    {
                        return Pick::Selected;
                    }
                    return Pick::Deferred;
                }
                Err(p) => self.park(d, p),
            }
        }
        Pick::Blocked
    }

    /// qmgr_job_entry_select: one decision on transport `t`; false when
    /// nothing could be started.
    pub(crate) fn dispatch_jobs(&mut self, now: Time, t: TransportId) -> bool {
        let ti = t.0 as usize;
        self.wake_waiting(ti);
        let Some(mut m) = self.jobs[ti]
            .current
            .or(self.jobs[ti].list.first().copied())
        else {
            return false;
        };
        if self.jobs[ti].params.cost >= 2 {
            m = self.job_preempt(now, ti, m);
        }
        let mut i = self.jobs[ti].pos(m).unwrap_or(0);
        while i < self.jobs[ti].list.len() {
            let m = self.jobs[ti].list[i];
            let tag = self.jobs[ti].blocker_tag;
            if self.jobs[ti].jobs[&m].blocker_tag == tag {
                i += 1;
                continue;
            }
            let picked = self.job_peer_select(now, t, m);
            // The message may have left (its last entry deferred at selection).
            if !self.jobs[ti].jobs.contains_key(&m) {
                return true;
            }
            let left = self.job_unselected(ti, m) > 0;
            match picked {
                Pick::Deferred => {
                    if !left && self.msgs[m].unread == 0 {
                        self.jobs[ti].retire(m);
                    }
                    self.stats.decisions += 1;
                    return true;
                }
                Pick::Selected => {
                    let jl = &mut self.jobs[ti];
                    let j = jl.jobs.get_mut(&m).expect("job");
                    // qmgr_job_count_slots.
                    j.slots_available += 1;
                    j.slots_used += 1;
                    jl.current = Some(m);
                    if !left && self.msgs[m].unread == 0 {
                        self.jobs[ti].retire(m);
                    }
                    self.stats.decisions += 1;
                    return true;
                }
                Pick::Blocked if left => {
                    let jl = &mut self.jobs[ti];
                    jl.jobs.get_mut(&m).expect("job").blocker_tag = tag;
                    let peers = jl.jobs[&m].peers.clone();
                    for d in peers {
                        if self.job_queued_at(m, d).0 > 0 {
                            self.jobs[ti].dest_tags.insert(d, tag);
                        }
                    }
                    i += 1;
                }
                // A stalled job: retired until it has entries again.
                Pick::Blocked => self.jobs[ti].retire(m),
            }
        }
        self.jobs[ti].current = None;
        false
    }

    /// Preemptions done on every transport.
    pub fn preemptions(&self) -> u64 {
        self.jobs.iter().map(|j| j.preemptions).sum()
    }
}
