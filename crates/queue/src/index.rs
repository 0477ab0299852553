//! Compact in-memory indexes rebuilt by replay: deferred messages by next
//! attempt, and which journal segments live messages still pin.
//!
//! `DeferredIndex` maps (next attempt, queue id) to the message's head
//! record position: about 50 bytes a message, so a million deferred
//! messages cost some 50 MB. `SegmentRefs` counts live head records per
//! segment; every segment below the oldest pinned one is garbage (records of
//! a message always follow its head record, so deleting a prefix of the
//! journal never loses state of a live message). Nothing here panics.

use crate::lsn::Lsn;
use mail::QueueId;
use std::collections::BTreeMap;

/// Deferred messages ordered by next attempt time.
#[derive(Debug, Default, Clone)]
pub struct DeferredIndex {
    map: BTreeMap<(u64, QueueId), Lsn>,
}

impl DeferredIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `id` (head record at `head`) for `at` (seconds since the epoch).
    pub fn insert(&mut self, at: u64, id: QueueId, head: Lsn) {
        self.map.insert((at, id), head);
    }

    /// Unschedules `id` that was inserted for `at`; gives its head position.
    pub fn remove(&mut self, at: u64, id: QueueId) -> Option<Lsn> {
        self.map.remove(&(at, id))
    }

    /// The earliest scheduled time, for the event loop's timer.
    pub fn next_due(&self) -> Option<u64> {
        self.map.keys().next().map(|k| k.0)
    }

    /// Takes the earliest message due at or before `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<(u64, QueueId, Lsn)> {
        let (&(at, id), _) = self.map.iter().next().filter(|(k, _)| k.0 <= now)?;
        self.map.remove(&(at, id)).map(|lsn| (at, id, lsn))
    }

    /// Number of deferred messages.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is deferred.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// All entries in due order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, QueueId, Lsn)> + '_ {
        self.map.iter().map(|(&(at, id), &l)| (at, id, l))
    }
}

/// Live head records per journal segment.
#[derive(Debug, Default, Clone)]
pub struct SegmentRefs {
    counts: BTreeMap<u32, u32>,
}

impl SegmentRefs {
    /// No pins.
    pub fn new() -> Self {
        Self::default()
    }

    /// A live message's head record is at `lsn`.
    pub fn pin(&mut self, lsn: Lsn) {
        *self.counts.entry(lsn.segment()).or_insert(0) += 1;
    }

    /// The head record at `lsn` is no longer live (rewritten or removed).
    pub fn unpin(&mut self, lsn: Lsn) {
        if let Some(c) = self.counts.get_mut(&lsn.segment()) {
            *c -= 1;
            if *c == 0 {
                self.counts.remove(&lsn.segment());
            }
        }
    }

    /// The oldest segment holding a live head record.
    pub fn oldest(&self) -> Option<u32> {
        self.counts.keys().next().copied()
    }

    /// Segments below this one may be deleted (given the current segment).
    pub fn delete_below(&self, current: u32) -> u32 {
        self.oldest().map_or(current, |o| o.min(current))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> QueueId {
        QueueId::from_parts(1000, 0, n).unwrap()
    }

    #[test]
    fn deferred_order_and_due() {
        let mut d = DeferredIndex::new();
        d.insert(30, id(1), Lsn::new(1, 16));
        d.insert(10, id(2), Lsn::new(1, 99));
        d.insert(10, id(0), Lsn::new(2, 16));
        assert_eq!(d.next_due(), Some(10));
        assert_eq!(d.pop_due(9), None);
        assert_eq!(d.pop_due(10).map(|e| e.1), Some(id(0)));
        assert_eq!(d.pop_due(10).map(|e| e.1), Some(id(2)));
        assert_eq!(d.pop_due(29), None);
        assert_eq!(d.remove(30, id(1)), Some(Lsn::new(1, 16)));
        assert!(d.is_empty());
    }

    #[test]
    fn segment_refs() {
        let mut r = SegmentRefs::new();
        assert_eq!(r.delete_below(5), 5);
        r.pin(Lsn::new(2, 16));
        r.pin(Lsn::new(2, 40));
        r.pin(Lsn::new(4, 16));
        assert_eq!(r.delete_below(5), 2);
        r.unpin(Lsn::new(2, 16));
        assert_eq!(r.oldest(), Some(2));
        r.unpin(Lsn::new(2, 40));
        assert_eq!(r.delete_below(5), 4);
    }
}
