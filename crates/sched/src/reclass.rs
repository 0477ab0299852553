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
//!
//! The moves are lazy: an entry stays in the queue it was put in until it
//! comes to the head, and the dispatcher then moves it to its key's class
//! instead of serving it (`settle_head`). That costs no memory per entry
//! (a list of each key's entries would cost more than the 200-byte budget
//! per queued recipient allows) and O(1) per entry moved; a queue whose
//! head is current is served as before. Entries on connections keep their
//! class (in-flight counts are per class); one that comes back to a queue
//! takes its key's class. Keys of kind `size` are not sender classes and
//! never move; the `ThreeClassFixed` policy keeps Wietse's rule as written,
//! for comparison. Panics: never.

use crate::config::ClassKey;
use crate::entry::Class;
use crate::ids::{DestId, EntryId, KeyId};
use crate::sched::Scheduler;

impl Scheduler {
    /// Whether entries of destination `d`'s transport follow their key's class.
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
        rec.class = rec.class.max(want);
        rec.class
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
        }
    }

    /// The class entry `e` belongs in now: its key's, or its own for size keys.
    pub(crate) fn current_class(&self, e: EntryId) -> Class {
        let entry = &self.entries[e];
        if !self.keyed_classes(entry.dest) {
            return entry.class;
        }
        let k = self.class_key(entry.message, entry.dest);
        self.keys.recs.get(k).map_or(entry.class, |r| r.class)
    }

    /// Moves the entries at the head of `d`'s `class` queue whose key changed
    /// class to the tail of their class queue; the head is then current.
    /// Whether any moved.
    pub(crate) fn settle_head(&mut self, d: DestId, class: Class) -> bool {
        let mut moved = false;
        while let Some(e) = self.dests[d].queues[class.idx()].front() {
            let want = self.current_class(e);
            if want == class {
                break;
            }
            moved = true;
            self.dests[d].queue(class).pop_front();
            self.entries[e].class = want;
            self.dests[d].queue(want).push_back(e);
            self.ensure_ring(d, want);
            self.stats.reclassed_entries += 1;
        }
        moved
    }
}
