//! Entries: up to `<transport>_destination_recipient_limit` recipients of one
//! message for one destination, and the scheduling class they were queued in.
//!
//! Recipients are stored inline when there is one (most mail), boxed
//! otherwise, to keep the per-recipient memory small. Panics: never.

use crate::ids::{ConnId, DestId, MsgId};

/// Scheduling class (Wietse): by how many entries the class key already has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Fewer than the first threshold.
    Small = 0,
    /// Fewer than the second threshold.
    Medium = 1,
    /// The rest.
    Large = 2,
}

impl Class {
    /// All classes, in round-robin order.
    pub const ALL: [Class; 3] = [Class::Small, Class::Medium, Class::Large];

    /// Class from a count and the `<transport>_sender_class_thresholds`.
    pub fn from_count(n: u32, thresholds: [u32; 2]) -> Class {
        if n < thresholds[0] {
            Class::Small
        } else if n < thresholds[1] {
            Class::Medium
        } else {
            Class::Large
        }
    }

    /// Index 0..3.
    pub fn idx(self) -> usize {
        self as usize
    }
}

/// Where an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// In its class queue.
    Queued,
    /// In a connection's backlog.
    OnConn(ConnId),
    /// Its transaction is running on the connection.
    InFlight(ConnId),
}

/// A delivery request.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Its message.
    pub message: MsgId,
    /// Its destination.
    pub dest: DestId,
    /// The class it was queued in.
    pub class: Class,
    /// Where it is.
    pub state: EntryState,
    /// The recipient when there is only one.
    single: u32,
    /// All recipients when there are several (a thin pointer keeps the entry at 32 bytes).
    // A boxed Vec is a thin pointer (8 bytes) where a Vec is 24: this is
    // per queued recipient, and the rare extra allocation is worth it.
    #[allow(clippy::box_collection)]
    many: Option<Box<Vec<u32>>>,
}

impl Entry {
    /// A queued entry for `rcpts` (non-empty).
    pub fn new(message: MsgId, dest: DestId, class: Class, rcpts: &[u32]) -> Self {
        let (single, many) = if rcpts.len() == 1 {
            (rcpts[0], None)
        } else {
            (0, Some(Box::new(rcpts.to_vec())))
        };
        Entry {
            message,
            dest,
            class,
            state: EntryState::Queued,
            single,
            many,
        }
    }

    /// Recipient indexes.
    pub fn recipients(&self) -> &[u32] {
        match &self.many {
            Some(v) => v,
            None => std::slice::from_ref(&self.single),
        }
    }

    /// Number of recipients.
    pub fn recipient_count(&self) -> u32 {
        self.recipients().len() as u32
    }

    /// Heap bytes (memory accounting).
    pub fn heap_bytes(&self) -> usize {
        self.many.as_ref().map_or(0, |v| 24 + v.capacity() * 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_thresholds_table() {
        let t = [10, 1000];
        for (n, c) in [
            (0, Class::Small),
            (9, Class::Small),
            (10, Class::Medium),
            (999, Class::Medium),
            (1000, Class::Large),
            (u32::MAX, Class::Large),
        ] {
            assert_eq!(Class::from_count(n, t), c, "n={n}");
        }
    }

    #[test]
    fn recipients_inline_single() {
        let e = Entry::new(MsgId(0), DestId(0), Class::Small, &[7]);
        assert_eq!(e.recipients(), &[7]);
        assert_eq!(e.heap_bytes(), 0);
        let m = Entry::new(MsgId(0), DestId(0), Class::Small, &[1, 2, 3]);
        assert_eq!(m.recipients(), &[1, 2, 3]);
        assert_eq!(m.recipient_count(), 3);
        assert!(std::mem::size_of::<Entry>() <= 32, "entry stays small");
    }
}
