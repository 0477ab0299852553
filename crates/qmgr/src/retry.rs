//! Deferred messages by retry time, and how many times each was tried.
//!
//! Times are the shell's milliseconds, never floored to seconds: a message
//! comes back at its scheduler-given next attempt or later, never before.
//! The journal keeps next attempts in whole seconds rounded up, so after a
//! restart a message is at most a second late. The attempt count is this
//! run's (the scheduler backs off by the message's age as well, which
//! survives restarts); it makes the back-off double from the first retry.

use std::collections::{BTreeSet, HashMap};

use mail::QueueId;
use sched::Time;

/// The deferred schedule.
#[derive(Debug, Default)]
pub(crate) struct Retry {
    due: BTreeSet<(Time, QueueId)>,
    /// Each scheduled message's time: one time per message.
    at: HashMap<QueueId, Time>,
    attempts: HashMap<QueueId, u32>,
}

impl Retry {
    /// Brings `id` back at `at` (instead of any time it had).
    pub(crate) fn schedule(&mut self, at: Time, id: QueueId) {
        if let Some(old) = self.at.insert(id, at) {
            self.due.remove(&(old, id));
        }
        self.due.insert((at, id));
    }

    /// Whether `id` waits for a retry time.
    pub(crate) fn is_scheduled(&self, id: &QueueId) -> bool {
        self.at.contains_key(id)
    }

    /// Builds the schedule from recovery's (time, id) order at once.
    pub(crate) fn bulk(&mut self, later: Vec<(Time, QueueId)>) {
        self.at = later.iter().map(|&(t, id)| (id, t)).collect();
        self.due = later.into_iter().collect();
    }

    /// The earliest retry time.
    pub(crate) fn next(&self) -> Option<Time> {
        self.due.first().map(|(t, _)| *t)
    }

    /// Takes the messages due at `now`, earliest first.
    pub(crate) fn pop_due(&mut self, now: Time) -> Vec<QueueId> {
        let mut out = Vec::new();
        while let Some(&(at, id)) = self.due.first() {
            if at > now {
                break;
            }
            self.due.pop_first();
            self.at.remove(&id);
            out.push(id);
        }
        out
    }

    /// Takes every deferred message (a flush).
    pub(crate) fn take_all(&mut self) -> Vec<QueueId> {
        self.at.clear();
        std::mem::take(&mut self.due)
            .into_iter()
            .map(|(_, id)| id)
            .collect()
    }

    /// Drops these messages from the schedule (deleted, or requeued now).
    pub(crate) fn unschedule(&mut self, ids: &[QueueId]) {
        for id in ids {
            if let Some(t) = self.at.remove(id) {
                self.due.remove(&(t, *id));
            }
        }
    }

    /// Attempts made at `id` since qmgr started.
    pub(crate) fn attempts(&self, id: &QueueId) -> u32 {
        self.attempts.get(id).copied().unwrap_or(0)
    }

    /// `id` left delivery with recipients still pending.
    pub(crate) fn tried(&mut self, id: QueueId) {
        *self.attempts.entry(id).or_default() += 1;
    }

    /// `id` left the queue.
    pub(crate) fn forget(&mut self, id: &QueueId) {
        self.attempts.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> QueueId {
        QueueId::from_parts(1_700_000_000_000_000, 1, n).unwrap()
    }

    #[test]
    fn due_messages_come_back_in_time_order_and_not_before() {
        let mut r = Retry::default();
        r.schedule(Time(5_500), id(1));
        r.schedule(Time(3_000), id(2));
        r.schedule(Time(5_501), id(3));
        assert_eq!(r.next(), Some(Time(3_000)));
        assert!(r.pop_due(Time(2_999)).is_empty());
        assert_eq!(r.pop_due(Time(5_500)), [id(2), id(1)]);
        // A millisecond early is early: no flooring to the second.
        assert!(r.pop_due(Time(5_500)).is_empty());
        assert_eq!(r.pop_due(Time(5_501)), [id(3)]);
        assert_eq!(r.next(), None);
    }

    #[test]
    fn a_message_has_one_retry_time() {
        let mut r = Retry::default();
        r.schedule(Time(1_000), id(1));
        r.schedule(Time(9_000), id(1));
        assert!(r.is_scheduled(&id(1)));
        assert!(
            r.pop_due(Time(1_000)).is_empty(),
            "the later time replaced the earlier"
        );
        r.unschedule(&[id(1)]);
        assert!(!r.is_scheduled(&id(1)));
        assert_eq!(r.next(), None);
    }

    #[test]
    fn attempts_count_until_the_message_goes() {
        let mut r = Retry::default();
        assert_eq!(r.attempts(&id(1)), 0);
        r.tried(id(1));
        r.tried(id(1));
        assert_eq!(r.attempts(&id(1)), 2);
        r.forget(&id(1));
        assert_eq!(r.attempts(&id(1)), 0);
    }
}
