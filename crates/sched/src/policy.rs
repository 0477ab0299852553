//! Scheduling policies: the three-class scheduler, and nqmgr's preemption
//! and a FIFO baseline to compare it with.
//!
//! STYLE: "a policy to compare is a trait in `sched`, not a copy of the
//! program". The policy decides an entry's class and whether class shares
//! are enforced; everything else (windows, feedback, connections) is shared,
//! so a comparison isolates the selection rule. Panics: never.

use crate::entry::Class;

/// nqmgr's delivery slot parameters (Postfix `<transport>_delivery_slot_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotParams {
    /// `delivery_slot_cost` (5): entries selected per slot earned; below 2 no preemption.
    pub cost: u32,
    /// `delivery_slot_loan` (3): slots lent ahead of time.
    pub loan: u32,
    /// `delivery_slot_discount` (50): percentage of the needed slots not required up front.
    pub discount: u32,
    /// `minimum_delivery_slots` (3): a job that can never earn this many is not preempted.
    pub min_slots: u32,
}

impl Default for SlotParams {
    fn default() -> Self {
        SlotParams {
            cost: 5,
            loan: 3,
            discount: 50,
            min_slots: 3,
        }
    }
}

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
    /// (the slot is kept for small senders that come), however short its
    /// transactions; otherwise a class policy keeps it only behind long
    /// ones (`<transport>_class_slot_reserve_recipients`).
    fn reserve(&self) -> bool {
        false
    }
    /// nqmgr's preemptive job selection with these slot parameters instead
    /// of the class round-robin (`preempt`).
    fn preemption(&self) -> Option<SlotParams> {
        None
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
/// slot for a smaller class whatever the larger class's transactions are
/// (a comparison, docs/scheduler.md scenario 3: it costs a lone bulk sender
/// of one-recipient messages one connection of the window, which the
/// default's rule for long transactions does not).
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

/// nqmgr, Postfix's default queue manager: jobs in queue order, a big job
/// preempted by small ones as it earns delivery slots (`preempt`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Nqmgr(pub SlotParams);

impl Policy for Nqmgr {
    fn name(&self) -> &'static str {
        "nqmgr"
    }
    fn classify(&self, _count: u32, _thresholds: [u32; 2]) -> Class {
        Class::Small
    }
    fn shares(&self) -> bool {
        false
    }
    fn preemption(&self) -> Option<SlotParams> {
        Some(self.0)
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
