//! A timer heap with cancellation.
//!
//! Timers are a binary heap of (deadline, sequence); cancelling removes the
//! payload and leaves a tombstone that is skipped when it reaches the top, so
//! both operations are O(log n). Equal deadlines fire in the order they were
//! set, which keeps runs deterministic.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Instant;

/// Identifies a timer for cancellation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId(u64);

/// Timers carrying payloads of type `T`.
#[derive(Debug)]
pub struct Timers<T> {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    live: BTreeMap<u64, T>,
    next: u64,
}

impl<T> Default for Timers<T> {
    fn default() -> Self {
        Timers {
            heap: BinaryHeap::new(),
            live: BTreeMap::new(),
            next: 0,
        }
    }
}

impl<T> Timers<T> {
    /// An empty heap.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a timer that fires at `at`.
    pub fn set(&mut self, at: Instant, payload: T) -> TimerId {
        let id = self.next;
        self.next += 1;
        self.heap.push(Reverse((at, id)));
        self.live.insert(id, payload);
        TimerId(id)
    }

    /// Cancels a timer; returns its payload if it had not fired yet.
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        self.live.remove(&id.0)
    }

    /// The earliest live deadline.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, id))) = self.heap.peek().copied() {
            if self.live.contains_key(&id) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Removes and returns the payload of one timer due at `now`, earliest first.
    pub fn pop_expired(&mut self, now: Instant) -> Option<T> {
        while let Some(Reverse((at, id))) = self.heap.peek().copied() {
            if at > now {
                return None;
            }
            self.heap.pop();
            if let Some(p) = self.live.remove(&id) {
                return Some(p);
            }
        }
        None
    }

    /// Number of live timers.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// True when no timer is set.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fires_in_order_and_skips_cancelled() {
        let t0 = Instant::now();
        let mut t = Timers::new();
        t.set(t0 + Duration::from_secs(3), "c");
        let b = t.set(t0 + Duration::from_secs(2), "b");
        t.set(t0 + Duration::from_secs(1), "a");
        t.set(t0 + Duration::from_secs(1), "a2");
        assert_eq!(t.cancel(b), Some("b"));
        assert_eq!(t.next_deadline(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(t.pop_expired(t0), None);
        let now = t0 + Duration::from_secs(5);
        let mut got = vec![];
        while let Some(p) = t.pop_expired(now) {
            got.push(p);
        }
        assert_eq!(got, ["a", "a2", "c"]);
        assert!(t.is_empty());
        assert_eq!(t.next_deadline(), None);
    }
}
