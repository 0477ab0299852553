//! Admission to the active queue: round-robin by sender.
//!
//! qmgr keeps at most `qmgr_message_active_limit` messages in delivery.
//! The rest wait here, and the classes cannot see them; a FIFO would let
//! one sender's 100,000 messages hold every active place while a small
//! sender's message waits behind all of them. So waiting messages are kept
//! per sender key and admitted one sender at a time, in turn: when a place
//! frees, the next sender in the ring gets it. Within a sender, FIFO. A
//! message pushed again while it waits (requeued, released, flushed) keeps
//! its place and is admitted once. The queue manager (crates/qmgr) uses
//! this, in qmgr and in the simulator.
//! Panics: never.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Messages `M` waiting for the active queue, by sender key `K`.
#[derive(Debug)]
pub struct Admission<K, M> {
    by_sender: BTreeMap<K, VecDeque<M>>,
    /// Senders with waiting messages, in turn order.
    ring: VecDeque<K>,
    waiting: BTreeSet<M>,
}

impl<K, M> Default for Admission<K, M> {
    fn default() -> Self {
        Admission {
            by_sender: BTreeMap::new(),
            ring: VecDeque::new(),
            waiting: BTreeSet::new(),
        }
    }
}

impl<K: Ord + Clone, M: Ord + Copy> Admission<K, M> {
    /// Adds a message at the tail of its sender's line, unless it waits already.
    pub fn push(&mut self, m: M, sender: K) {
        if !self.waiting.insert(m) {
            return;
        }
        let line = self.by_sender.entry(sender.clone()).or_default();
        if line.is_empty() {
            self.ring.push_back(sender);
        }
        line.push_back(m);
    }

    /// The next message: the head of the next sender's line.
    pub fn pop(&mut self) -> Option<M> {
        let sender = self.ring.pop_front()?;
        let line = self.by_sender.get_mut(&sender)?;
        let m = line.pop_front();
        if line.is_empty() {
            self.by_sender.remove(&sender);
        } else {
            self.ring.push_back(sender);
        }
        if let Some(m) = m {
            self.waiting.remove(&m);
        }
        m
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The waiting messages, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &M> {
        self.waiting.iter()
    }

    /// Forgets everything (no delivery agents configured).
    pub fn clear(&mut self) {
        self.by_sender.clear();
        self.ring.clear();
        self.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn senders_take_turns_and_each_line_is_fifo() {
        let mut a = Admission::default();
        for n in 0..5 {
            a.push(n, 1);
        }
        a.push(100, 2);
        a.push(101, 2);
        a.push(200, 3);
        assert_eq!(a.len(), 8);
        let order: Vec<u32> = std::iter::from_fn(|| a.pop()).collect();
        assert_eq!(order, [0, 100, 200, 1, 101, 2, 3, 4]);
        assert!(a.is_empty());
    }

    #[test]
    fn a_sender_that_comes_back_joins_the_tail_and_duplicates_wait_once() {
        let mut a = Admission::default();
        a.push(1, 1);
        a.push(2, 2);
        a.push(1, 1);
        assert_eq!(a.len(), 2, "pushed twice, waits once");
        assert_eq!(a.pop(), Some(1));
        a.push(3, 1);
        a.push(4, 3);
        assert_eq!(a.pop(), Some(2));
        assert_eq!(a.pop(), Some(3));
        assert_eq!(a.pop(), Some(4));
        assert_eq!(a.pop(), None);
        a.push(5, 9);
        a.clear();
        assert!(a.is_empty());
        assert_eq!(a.pop(), None);
    }
}
