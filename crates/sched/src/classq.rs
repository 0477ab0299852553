//! Class queues: the (transport, class, destination) FIFO of entries, and the
//! per-(transport, class) round-robin ring of destinations that have work.
//!
//! A destination sits in a class ring while its FIFO for that class is
//! non-empty and it is not parked; the dispatcher pops it, takes the FIFO
//! head, and pushes it back at the tail, which gives Wietse's round-robin over
//! destinations within a class in O(1) per decision. Panics: never.

use crate::ids::{DestId, EntryId};
use std::collections::VecDeque;

/// FIFO of entries for one (transport, class, destination).
#[derive(Clone, Debug, Default)]
pub struct ClassQueue {
    fifo: VecDeque<EntryId>,
}

impl ClassQueue {
    /// Appends at the tail (new entries).
    pub fn push_back(&mut self, e: EntryId) {
        self.fifo.push_back(e);
    }

    /// Puts back at the head (entries rescheduled from a closing connection keep their turn).
    pub fn push_front(&mut self, e: EntryId) {
        self.fifo.push_front(e);
    }

    /// The entries, head first.
    pub fn iter(&self) -> impl Iterator<Item = EntryId> + '_ {
        self.fifo.iter().copied()
    }

    /// The head.
    pub fn front(&self) -> Option<EntryId> {
        self.fifo.front().copied()
    }

    /// Puts `e` back at position `at` (the tail if the queue is shorter).
    pub fn insert(&mut self, at: usize, e: EntryId) {
        self.fifo.insert(at.min(self.fifo.len()), e);
    }

    /// Removes the head.
    pub fn pop_front(&mut self) -> Option<EntryId> {
        self.fifo.pop_front()
    }

    /// Takes `e` out from wherever it waits (O(length)); whether it was there.
    pub fn remove(&mut self, e: EntryId) -> bool {
        match self.fifo.iter().position(|&x| x == e) {
            Some(i) => self.fifo.remove(i).is_some(),
            None => false,
        }
    }

    /// Takes every entry out (dead destination).
    pub fn drain(&mut self) -> Vec<EntryId> {
        self.fifo.drain(..).collect()
    }

    /// Length.
    pub fn len(&self) -> usize {
        self.fifo.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.fifo.is_empty()
    }

    /// Bytes reserved.
    pub fn reserved_bytes(&self) -> usize {
        self.fifo.capacity() * 4
    }
}

/// Round-robin ring of destinations with work in one (transport, class).
#[derive(Clone, Debug, Default)]
pub struct DestRing {
    ring: VecDeque<DestId>,
}

impl DestRing {
    /// Adds at the tail.
    pub fn push(&mut self, d: DestId) {
        self.ring.push_back(d);
    }

    /// Takes the next destination in turn.
    pub fn pop(&mut self) -> Option<DestId> {
        self.ring.pop_front()
    }

    /// True when no destination waits.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Number of destinations in the ring.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Bytes reserved.
    pub fn reserved_bytes(&self) -> usize {
        self.ring.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_order_and_requeue_at_head() {
        let mut q = ClassQueue::default();
        q.push_back(EntryId(1));
        q.push_back(EntryId(2));
        let h = q.pop_front().unwrap();
        q.push_front(h);
        assert_eq!(q.front(), Some(EntryId(1)));
        assert_eq!(q.drain(), vec![EntryId(1), EntryId(2)]);
        assert!(q.is_empty());
    }

    #[test]
    fn ring_round_robin() {
        let mut r = DestRing::default();
        for d in 0..3 {
            r.push(DestId(d));
        }
        let mut order = vec![];
        for _ in 0..6 {
            let d = r.pop().unwrap();
            order.push(d.0);
            r.push(d);
        }
        assert_eq!(order, vec![0, 1, 2, 0, 1, 2]);
    }
}
