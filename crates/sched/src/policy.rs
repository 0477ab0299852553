//! Scheduling policies: the three-class scheduler and a FIFO baseline.
//!
//! STYLE: "a policy to compare is a trait in `sched`, not a copy of the
//! program". The policy decides an entry's class and whether class shares
//! are enforced; everything else (windows, feedback, connections) is shared,
//! so a comparison isolates the selection rule. Panics: never.

use crate::entry::Class;

/// How entries are put into classes.
pub trait Policy: std::fmt::Debug {
    /// Name for reports.
    fn name(&self) -> &'static str;
    /// Class of a new entry whose key already has `count` entries in memory.
    fn classify(&self, count: u32, thresholds: [u32; 2]) -> Class;
    /// Whether under-share classes are served first.
    fn shares(&self) -> bool;
    /// Whether a key's queued entries follow its class as its count changes
    /// (see `reclass`); otherwise an entry keeps the class it was queued in.
    fn reclass(&self) -> bool {
        true
    }
    /// Whether a medium or large class may not take a destination's last
    /// free connection slot while no smaller class holds a connection there
    /// (the slot is kept for small senders that come).
    fn reserve(&self) -> bool {
        false
    }
}

/// Wietse's three-class scheduler (the default).
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreeClass;

impl Policy for ThreeClass {
    fn name(&self) -> &'static str {
        "three-class"
    }
    fn classify(&self, count: u32, thresholds: [u32; 2]) -> Class {
        Class::from_count(count, thresholds)
    }
    fn shares(&self) -> bool {
        true
    }
}

/// Wietse's rule as written: an entry keeps the class it was queued in
/// (the comparison for `reclass`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreeClassFixed;

impl Policy for ThreeClassFixed {
    fn name(&self) -> &'static str {
        "three-class-fixed"
    }
    fn classify(&self, count: u32, thresholds: [u32; 2]) -> Class {
        Class::from_count(count, thresholds)
    }
    fn shares(&self) -> bool {
        true
    }
    fn reclass(&self) -> bool {
        false
    }
}

/// The three-class scheduler that keeps a destination's last connection
/// slot for a smaller class (a comparison, docs/scheduler.md scenario 3: it
/// halves the small senders' wait behind a list, and costs a lone large
/// sender one connection of the window).
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreeClassReserve;

impl Policy for ThreeClassReserve {
    fn name(&self) -> &'static str {
        "three-class-reserve"
    }
    fn classify(&self, count: u32, thresholds: [u32; 2]) -> Class {
        Class::from_count(count, thresholds)
    }
    fn shares(&self) -> bool {
        true
    }
    fn reserve(&self) -> bool {
        true
    }
}

/// The old queue manager (oqmgr): one FIFO per destination, round-robin destinations.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fifo;

impl Policy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn classify(&self, _count: u32, _thresholds: [u32; 2]) -> Class {
        Class::Small
    }
    fn shares(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_classify() {
        assert_eq!(ThreeClass.classify(5000, [10, 1000]), Class::Large);
        assert_eq!(Fifo.classify(5000, [10, 1000]), Class::Small);
        assert!(ThreeClass.shares() && !Fifo.shares());
        assert_ne!(ThreeClass.name(), Fifo.name());
    }
}
