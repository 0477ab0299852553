//! Cross-structure consistency checks for tests and debugging.
//!
//! `check_invariants` recomputes the counters that the scheduler keeps
//! incrementally (recipients in core, workers per transport, entries per
//! class in flight, connections and entries per destination, workers and
//! live entries per message) and reports the first mismatch. It is O(n²) in
//! the worst case and meant for tests, not for production paths.
//! Panics: never.

use crate::entry::{Class, EntryState};
use crate::sched::Scheduler;

impl Scheduler {
    /// Checks the cross-structure counters; for tests and debugging.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut in_core = 0;
        for (_, m) in self.msgs.iter() {
            in_core += m.in_core;
        }
        if in_core != self.in_core {
            return Err(format!("in_core {} != sum {}", self.in_core, in_core));
        }
        for (i, tr) in self.transports.iter().enumerate() {
            let conns = self
                .conns
                .iter()
                .filter(|(_, c)| c.transport.0 as usize == i)
                .count() as u32;
            if conns != tr.workers {
                return Err(format!(
                    "transport {i}: workers {} != conns {}",
                    tr.workers, conns
                ));
            }
            // workers may exceed process_limit only after a reload lowered it;
            // no connection opens then (checked where Open is emitted).
            let mut infl = [0u32; 3];
            for (_, e) in self.entries.iter() {
                if self.dests[e.dest].transport.0 as usize == i && e.state != EntryState::Queued {
                    infl[e.class.idx()] += 1;
                }
            }
            if infl != tr.inflight {
                return Err(format!(
                    "transport {i}: inflight {:?} != {:?}",
                    tr.inflight, infl
                ));
            }
        }
        for (d, dest) in self.dests.iter() {
            if dest.busy as usize != dest.conns.len() {
                return Err(format!(
                    "dest {d:?}: busy {} != conns {}",
                    dest.busy,
                    dest.conns.len()
                ));
            }
            let n = self.entries.iter().filter(|(_, e)| e.dest == d).count() as u32;
            if n != dest.entries {
                return Err(format!("dest {d:?}: entries {} != {}", dest.entries, n));
            }
            let (mut infl, mut rcpts) = ([0u32; 3], [0u32; 3]);
            for (_, e) in self.entries.iter() {
                if e.dest == d && e.state != EntryState::Queued {
                    infl[e.class.idx()] += 1;
                    rcpts[e.class.idx()] += e.recipient_count();
                }
            }
            if infl != dest.inflight || rcpts != dest.inflight_rcpts {
                return Err(format!(
                    "dest {d:?}: inflight {:?} / {:?} != {infl:?} / {rcpts:?}",
                    dest.inflight, dest.inflight_rcpts
                ));
            }
            for c in Class::ALL {
                for e in dest.queues[c.idx()].iter() {
                    let Some(x) = self.entries.get(e) else {
                        return Err(format!("dest {d:?}: class {c:?} queue holds freed {e:?}"));
                    };
                    if x.dest != d || x.class != c || x.state != EntryState::Queued {
                        return Err(format!("dest {d:?}: {e:?} in the {c:?} queue is {x:?}"));
                    }
                }
            }
        }
        let queued: usize = self
            .dests
            .iter()
            .map(|(_, d)| d.queues.iter().map(|q| q.len()).sum::<usize>())
            .sum();
        let want = self
            .entries
            .iter()
            .filter(|(_, e)| e.state == EntryState::Queued)
            .count();
        if queued != want {
            return Err(format!(
                "queued entries {want} != entries in queues {queued}"
            ));
        }
        for (_, m) in self.msgs.iter() {
            let mut w = 0;
            let mut live = 0;
            for (_, e) in self.entries.iter() {
                if self.msgs.get(e.message).map(|x| x.queue_id) == Some(m.queue_id) {
                    live += 1;
                    if e.state != EntryState::Queued {
                        w += 1;
                    }
                }
            }
            if w != m.workers || live != m.live_entries {
                return Err(format!(
                    "message {:?}: workers {}/{} live {}/{}",
                    m.queue_id, m.workers, w, m.live_entries, live
                ));
            }
        }
        Ok(())
    }
}
