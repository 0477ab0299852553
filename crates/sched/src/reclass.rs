//! Sender classes: a class key's queued entries follow the class of its
//! current count.
//!
//! Wietse classifies a delivery request when it is queued, by how many
//! requests its sender already has in memory. Fixed at queueing, that puts
//! a small sender's 11th message behind a bulk sender's 11th to 1000th in
//! the medium class, in FIFO order: measured with real sinks, ×127 of the
//! idle delay (docs/benchmarks.md, "Fairness in real life"). His text also
//! calls the classes "one class for small senders, one class for medium
//! senders, one class for large senders", so here the class belongs to the
//! key: when a key's count crosses a threshold, its queued entries move to
//! the new class queue, at the tail (the move is like queueing them anew).
//! A bulk sender's whole backlog is then large-class, and a 20-message
//! burst is medium-class behind nothing but other medium senders.
//!
//! Up at once, down with hysteresis: a key drops to a lower class only when
//! twice its count is below that class's bound, so a key hovering at a
//! threshold does not move its backlog back and forth with every message.
//! Entries on connections keep their class, because the in-flight counts
//! are per class; one that comes back to a queue takes the key's class.
//! Moves wait for a point between dispatch decisions (`reclass_pending`),
//! because a decision holds the position of a class queue's head.
//! Keys of kind `size` are not sender classes and never move; the
//! `ThreeClassFixed` policy keeps Wietse's rule as written, for comparison.
//! Panics: never.

use crate::config::ClassKey;
use crate::entry::{Class, EntryState};
use crate::ids::{DestId, EntryId, KeyId};
use crate::sched::Scheduler;
use std::collections::BTreeSet;

impl Scheduler {
    /// Whether entries of destination `d`'s transport are classed by sender key.
    pub(crate) fn keyed_classes(&self, d: DestId) -> bool {
        self.policy.reclass()
            && self.transports[self.dests[d].transport.0 as usize]
                .cfg
                .scheduler_class_key
                != ClassKey::Size
    }

    /// The class for a new entry of key `k` that sees `count` entries of its
    /// key (the batch included); raises the key's class when the count does.
    pub(crate) fn key_class_on_add(&mut self, k: KeyId, d: DestId, count: u32) -> Class {
        let thresholds = self.transports[self.dests[d].transport.0 as usize]
            .cfg
            .sender_class_thresholds;
        let want = self.policy.classify(count, thresholds);
        if !self.policy.reclass() {
            return want;
        }
        let rec = &mut self.keys.recs[k];
        if want > rec.class {
            rec.class = want;
            self.reclass.push(k);
        }
        rec.class
    }

    /// Records a new entry of key `k`; compacts the member list when stale ids dominate.
    pub(crate) fn key_member_added(&mut self, k: KeyId, e: EntryId) {
        if !self.policy.reclass() {
            return;
        }
        let rec = &mut self.keys.recs[k];
        rec.members.push(e);
        if rec.members.len() > 2 * rec.entries as usize + 32 {
            self.reclass.push(k);
        }
    }

    /// After an entry of key `k` (under destination `d`) left memory: lowers
    /// the key's class when twice its count is below the lower class's bound.
    pub(crate) fn key_class_on_remove(&mut self, k: KeyId, d: DestId) {
        let thresholds = self.transports[self.dests[d].transport.0 as usize]
            .cfg
            .sender_class_thresholds;
        let rec = &self.keys.recs[k];
        let down = self
            .policy
            .classify(rec.entries.saturating_mul(2), thresholds);
        if down < rec.class {
            self.keys.recs[k].class = down;
            self.reclass.push(k);
        }
    }

    /// The class an entry coming back to its queue takes: its key's, or its own for size keys.
    pub(crate) fn requeue_class(&self, e: EntryId) -> Class {
        let entry = &self.entries[e];
        if !self.keyed_classes(entry.dest) {
            return entry.class;
        }
        let k = self.class_key(entry.message, entry.dest);
        self.keys.recs.get(k).map_or(entry.class, |r| r.class)
    }

    /// Moves the queued entries of keys whose class changed, and compacts
    /// their member lists. Called only between dispatch decisions.
    pub(crate) fn reclass_pending(&mut self) {
        while let Some(k) = self.reclass.pop() {
            let Some(rec) = self.keys.recs.get_mut(k) else {
                continue;
            };
            let class = rec.class;
            let members = std::mem::take(&mut rec.members);
            let mut seen = BTreeSet::new();
            let mut keep = Vec::with_capacity(members.len().min(2 * rec.entries as usize + 1));
            let mut moved = Vec::new();
            for e in members {
                let Some(entry) = self.entries.get(e) else {
                    continue;
                };
                // A reused slot may now hold another key's entry, or the same
                // key's entry twice.
                if self.class_key(entry.message, entry.dest) != k || !seen.insert(e) {
                    continue;
                }
                keep.push(e);
                if entry.state == EntryState::Queued
                    && entry.class != class
                    && self.keyed_classes(entry.dest)
                {
                    moved.push(e);
                }
            }
            self.keys.recs[k].members = keep;
            if moved.is_empty() {
                continue;
            }
            let gone: BTreeSet<EntryId> = moved.iter().copied().collect();
            let queues: BTreeSet<(DestId, Class)> = moved
                .iter()
                .map(|&e| (self.entries[e].dest, self.entries[e].class))
                .collect();
            for (d, c) in queues {
                self.dests[d].queue(c).retain(|e| !gone.contains(e));
            }
            for e in moved {
                let d = self.entries[e].dest;
                self.entries[e].class = class;
                self.dests[d].queue(class).push_back(e);
                self.ensure_ring(d, class);
            }
            self.stats.reclassed_keys += 1;
        }
    }
}
