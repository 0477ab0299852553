//! Memory bounds: `qmgr_message_recipient_limit` and nqmgr-style recipient
//! slot lending.
//!
//! A message's first batch may fill the in-core recipient budget up to
//! `qmgr_message_recipient_limit` (at least `qmgr_message_recipient_minimum`).
//! After that, batches come from per-transport pools of
//! `<transport>_recipient_limit` slots: a new job takes all unused slots of
//! its transport; when its message is completely read, the job keeps only as
//! many slots as it has recipients in core and hands the rest to the next job
//! with unread recipients on that transport (in enqueue order), or back to
//! the pool; it does so again as its entries finish. A message may read
//! `slots + minimum - in_core` more recipients, so a 100,000-recipient
//! message is read in batches while every other message still gets its
//! minimum. nqmgr's extra pool (`transport_extra_recipient_limit`) serves its
//! preemption, which the class scheduler does not do, so it is absent.
//! Panics: never.

use crate::ids::{MsgId, TransportId};
use crate::sched::Scheduler;
use crate::time::Time;

impl Scheduler {
    /// Size of a message's first batch.
    pub(crate) fn first_batch(&self) -> u32 {
        self.cfg
            .qmgr_message_recipient_limit
            .saturating_sub(self.in_core)
            .max(self.cfg.qmgr_message_recipient_minimum)
    }

    /// How many more recipients the message may read now.
    pub(crate) fn next_batch(&self, m: MsgId) -> u32 {
        let msg = &self.msgs[m];
        let slots: u32 = msg
            .jobs
            .iter()
            .map(|j| j.slots)
            .fold(0u32, u32::saturating_add);
        slots
            .saturating_add(self.cfg.qmgr_message_recipient_minimum)
            .saturating_sub(msg.in_core)
    }

    /// Gives `n` slots to the first job on `t` with unread recipients, else to the pool.
    pub(crate) fn give_slots(&mut self, t: TransportId, n: u32) {
        let ti = t.0 as usize;
        while let Some(&m) = self.transports[ti].unread_jobs.front() {
            let took = match self.msgs.get_mut(m) {
                Some(msg) if msg.unread > 0 => match msg.jobs.get_mut(t) {
                    Some(j) => {
                        j.slots = j.slots.saturating_add(n);
                        true
                    }
                    None => false,
                },
                _ => false,
            };
            if took {
                self.settle_message(Time::ZERO, m);
                return;
            }
            self.transports[ti].unread_jobs.pop_front();
        }
        self.transports[ti].pool = self.transports[ti].pool.saturating_add(n);
    }

    /// A completely read message keeps only the slots its in-core recipients use.
    pub(crate) fn release_excess(&mut self, _now: Time, m: MsgId) {
        let Some(msg) = self.msgs.get_mut(m) else {
            return;
        };
        if msg.unread > 0 || msg.read_pending {
            return;
        }
        let mut give = Vec::new();
        for j in msg.jobs.iter_mut() {
            if j.slots > j.in_core {
                give.push((j.transport, j.slots - j.in_core));
                j.slots = j.in_core;
            }
        }
        for (t, n) in give {
            self.give_slots(t, n);
        }
    }

    /// Approximate bytes the scheduler holds (slabs, queues, recipients, indexes).
    pub fn memory_bytes(&self) -> usize {
        let mut b = std::mem::size_of::<Self>();
        b += self.msgs.reserved_bytes()
            + self.entries.reserved_bytes()
            + self.dests.reserved_bytes();
        b += self.conns.reserved_bytes()
            + self.hosts.hosts.reserved_bytes()
            + self.keys.recs.reserved_bytes();
        for (_, m) in self.msgs.iter() {
            b += m.jobs.heap_bytes();
        }
        for (_, e) in self.entries.iter() {
            b += e.heap_bytes();
        }
        for (_, d) in self.dests.iter() {
            b += d.queues.iter().map(|q| q.reserved_bytes()).sum::<usize>();
            b += d.nexthop.len() + d.conns.capacity() * 4 + d.hosts.heap_bytes();
        }
        for t in &self.transports {
            b += t.rings.iter().map(|r| r.reserved_bytes()).sum::<usize>()
                + t.waiting.capacity() * 4;
        }
        // BTreeMap indexes: key + value + about 8 bytes of node overhead per item.
        b += self.msgs.len() * (8 + 4 + 8);
        b += self.dests.len() * (4 + 16 + 4 + 8);
        b
    }
}
