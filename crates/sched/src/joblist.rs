//! nqmgr's job lists (Postfix `qmgr_job.c`): one per transport, the jobs
//! of its messages in the order they were queued, with their delivery
//! slots and preemption stacks. How the scheduler walks and preempts them
//! is `preempt`.

use crate::ids::{DestId, MsgId};
use crate::policy::SlotParams;
use crate::time::Time;
use std::collections::BTreeMap;

/// One message's job on one transport.
#[derive(Clone, Debug, Default)]
pub(crate) struct Job {
    /// When its message was queued (Postfix `queued_time`).
    pub(crate) queued: Time,
    /// Delivery slots earned and not yet used by preempting jobs (may be negative after a loan).
    pub(crate) slots_available: i64,
    /// Slots used (the difference to the expected count while on a stack).
    pub(crate) slots_used: i64,
    /// Entries made for this transport (`read_entries`).
    pub(crate) read: u32,
    /// The job it preempted.
    pub(crate) parent: Option<MsgId>,
    /// Jobs that preempted it.
    pub(crate) children: Vec<MsgId>,
    /// -1 off the list, 0 on it, > 0 on a preemption stack.
    pub(crate) level: i32,
    /// Equal to the transport's tag while it is a blocker.
    pub(crate) blocker_tag: u64,
    /// Destinations it has entries for, in round-robin order.
    pub(crate) peers: Vec<DestId>,
    /// Next peer in the round-robin.
    pub(crate) cursor: usize,
}

/// The jobs of one transport.
#[derive(Clone, Debug)]
pub(crate) struct JobList {
    /// The transport's delivery slot parameters.
    pub(crate) params: SlotParams,
    /// Every job of the transport, on the list or not.
    pub(crate) jobs: BTreeMap<MsgId, Job>,
    /// The scheduler's job list.
    pub(crate) list: Vec<MsgId>,
    /// The job whose entries are selected next.
    pub(crate) current: Option<MsgId>,
    /// Bumped when a blocker unblocks: jobs and destinations marked with
    /// an older tag are blockers no more.
    pub(crate) blocker_tag: u64,
    /// Destinations marked as blocking a job, with the tag they were marked with.
    pub(crate) dest_tags: BTreeMap<DestId, u64>,
    /// Preemptions done (reports).
    pub(crate) preemptions: u64,
}

impl JobList {
    /// An empty list with the transport's slot parameters.
    pub(crate) fn new(params: SlotParams) -> Self {
        JobList {
            params,
            jobs: BTreeMap::new(),
            list: Vec::new(),
            current: None,
            // Postfix starts the tag at 1, so new jobs (tag 0) are not blockers.
            blocker_tag: 1,
            dest_tags: BTreeMap::new(),
            preemptions: 0,
        }
    }

    /// Where job `m` is on the list.
    pub(crate) fn pos(&self, m: MsgId) -> Option<usize> {
        self.list.iter().position(|&x| x == m)
    }

    /// qmgr_job_link: inserts the job after the last level-0 job queued no
    /// later than it; it becomes current if that passed the current job.
    pub(crate) fn link(&mut self, m: MsgId) {
        let queued = self.jobs[&m].queued;
        let mut current = self.current;
        let mut at = 0;
        for i in (0..self.list.len()).rev() {
            let p = &self.jobs[&self.list[i]];
            if p.parent.is_none() && queued >= p.queued {
                at = i + 1;
                break;
            }
            if current == Some(self.list[i]) {
                current = None;
            }
        }
        self.list.insert(at, m);
        self.jobs.get_mut(&m).expect("job").level = 0;
        if current.is_none() {
            self.current = Some(m);
        }
    }

    /// qmgr_job_parent_gone: `parent` (or nobody) adopts `m`'s children.
    pub(crate) fn parent_gone(&mut self, m: MsgId, parent: Option<MsgId>) {
        let children = std::mem::take(&mut self.jobs.get_mut(&m).expect("job").children);
        for c in children {
            if let Some(p) = parent {
                self.jobs.get_mut(&p).expect("job").children.push(c);
            }
            if let Some(j) = self.jobs.get_mut(&c) {
                j.parent = parent;
            }
        }
    }

    /// qmgr_job_unlink.
    pub(crate) fn unlink(&mut self, m: MsgId) {
        self.parent_gone(m, None);
        if let Some(i) = self.pos(m) {
            if self.current == Some(m) {
                self.current = self.list.get(i + 1).copied();
            }
            self.list.remove(i);
        }
        self.jobs.get_mut(&m).expect("job").level = -1;
    }

    /// qmgr_job_pop: off its preemption stack, giving its parent back the
    /// slots it was expected to use and did not.
    pub(crate) fn pop(&mut self, m: MsgId) {
        let cost = i64::from(self.params.cost);
        let (parent, level, used) = {
            let j = &self.jobs[&m];
            (j.parent, j.level, j.slots_used)
        };
        if let Some(p) = parent {
            if let Some(pj) = self.jobs.get_mut(&p) {
                if level == pj.level + 1 {
                    pj.slots_available -= used * cost;
                }
                pj.children.retain(|&c| c != m);
            }
            self.jobs.get_mut(&m).expect("job").parent = None;
        }
        self.parent_gone(m, parent);
        self.jobs.get_mut(&m).expect("job").level = 0;
    }

    /// qmgr_job_retire: off the lists while its selected entries finish.
    pub(crate) fn retire(&mut self, m: MsgId) {
        if self.jobs[&m].level > 0 {
            self.pop(m);
        }
        self.unlink(m);
    }

    /// A job's message left: qmgr_job_free.
    pub(crate) fn free(&mut self, m: MsgId) {
        let Some(level) = self.jobs.get(&m).map(|j| j.level) else {
            return;
        };
        if level > 0 {
            self.pop(m);
        }
        if level >= 0 {
            self.unlink(m);
        }
        self.jobs.remove(&m);
    }

    /// A destination unblocked: if it was blocking a job, every blocker is
    /// reconsidered from the head of the list (qmgr_entry_done).
    pub(crate) fn unblocked(&mut self, d: DestId) {
        if self.dest_tags.get(&d) == Some(&self.blocker_tag) {
            self.dest_tags.remove(&d);
            self.blocker_tag += 1;
            self.current = self.list.first().copied();
        }
    }
}
