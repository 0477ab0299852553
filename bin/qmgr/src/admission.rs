//! Admission to the active queue: round-robin by sender.
//!
//! qmgr keeps at most `qmgr_message_active_limit` messages in delivery.
//! The rest wait here, and the scheduler's classes cannot see them; a FIFO
//! would let one sender's 100,000 messages hold every active slot while a
//! small sender's message waits behind all of them. So waiting messages are
//! kept per sender (by `queue::sender_key`) and admitted one sender at a
//! time, in turn: when a slot frees, the next sender in the ring gets it.
//! Within a sender, FIFO. A message queued twice (say, requeued while it
//! waits) is admitted once: the caller skips ids already active.
//! Panics: never.

use mail::QueueId;
use std::collections::{BTreeMap, VecDeque};

/// Messages waiting for the active queue, by sender key.
#[derive(Debug, Default)]
pub struct Admission {
    by_sender: BTreeMap<u32, VecDeque<QueueId>>,
    /// Senders with waiting messages, in turn order.
    ring: VecDeque<u32>,
    len: usize,
}

impl Admission {
    /// Adds a message at the tail of its sender's line.
    pub fn push(&mut self, id: QueueId, sender: u32) {
        let line = self.by_sender.entry(sender).or_default();
        if line.is_empty() {
            self.ring.push_back(sender);
        }
        line.push_back(id);
        self.len += 1;
    }

    /// The next message: the head of the next sender's line.
    pub fn pop(&mut self) -> Option<QueueId> {
        let sender = self.ring.pop_front()?;
        let line = self.by_sender.get_mut(&sender)?;
        let id = line.pop_front();
        if line.is_empty() {
            self.by_sender.remove(&sender);
        } else {
            self.ring.push_back(sender);
        }
        self.len -= usize::from(id.is_some());
        id
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets everything (no delivery agents configured).
    pub fn clear(&mut self) {
        self.by_sender.clear();
        self.ring.clear();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> QueueId {
        QueueId::from_parts(1_000_000 + n, 1, 0).expect("a valid id")
    }

    #[test]
    fn senders_take_turns_and_each_line_is_fifo() {
        let mut a = Admission::default();
        for n in 0..5 {
            a.push(id(n), 1);
        }
        a.push(id(100), 2);
        a.push(id(101), 2);
        a.push(id(200), 3);
        assert!(!a.is_empty());
        let order: Vec<QueueId> = std::iter::from_fn(|| a.pop()).collect();
        let want = [0, 100, 200, 1, 101, 2, 3, 4].map(id);
        assert_eq!(order, want);
        assert!(a.is_empty());
    }

    #[test]
    fn a_sender_that_comes_back_joins_the_tail_of_the_ring() {
        let mut a = Admission::default();
        a.push(id(1), 1);
        a.push(id(2), 2);
        assert_eq!(a.pop(), Some(id(1)));
        a.push(id(3), 1);
        a.push(id(4), 3);
        assert_eq!(a.pop(), Some(id(2)));
        assert_eq!(a.pop(), Some(id(3)));
        assert_eq!(a.pop(), Some(id(4)));
        assert_eq!(a.pop(), None);
        a.push(id(5), 9);
        a.clear();
        assert!(a.is_empty());
        assert_eq!(a.pop(), None);
    }
}
