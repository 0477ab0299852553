//! Destinations: (transport, nexthop) with the concurrency window, dead state
//! and the three class queues that share them.
//!
//! Wietse: "same-destination queues under a transport will have shared info
//! for concurrency, throttling, and rate delay". The window is the Postfix
//! 2.5 [`Window`]; `busy` counts the connections (workers) to the
//! destination, which is Postfix's `busy_refcount` when each connection
//! carries one delivery at a time. A destination that cannot take work now
//! is parked (out of the class rings) with the reason it waits for, so the
//! dispatcher never scans blocked destinations. Panics: never.

use crate::classq::ClassQueue;
use crate::entry::Class;
use crate::feedback::Window;
use crate::ids::{ConnId, HostId, TransportId};
use crate::time::Time;
use std::sync::Arc;
use std::time::Duration;

/// Why a destination is out of the class rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Park {
    /// Not parked.
    No,
    /// Its window is full and its connections' backlogs are full.
    Window,
    /// Its transport has no free worker (waits in the transport's list).
    Transport,
    /// Rate-limited until this time.
    Until(Time),
    /// A shaping policy's concurrency is taken or its mail is suspended:
    /// woken when a shaped connection closes or the limits change.
    Shaping,
}

/// Hosts by MX level in one allocation, levels separated by a sentinel id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostLevels(Box<[HostId]>);

const LEVEL_END: HostId = HostId(u32::MAX);

impl HostLevels {
    /// From hosts grouped by level, best level first.
    pub fn new(levels: Vec<Vec<HostId>>) -> Self {
        let mut v = Vec::with_capacity(levels.iter().map(|l| l.len() + 1).sum());
        for (i, l) in levels.into_iter().enumerate() {
            if i > 0 {
                v.push(LEVEL_END);
            }
            v.extend(l);
        }
        HostLevels(v.into_boxed_slice())
    }

    /// The levels, best first.
    pub fn levels(&self) -> impl Iterator<Item = &[HostId]> {
        let empty = self.0.is_empty();
        self.0.split(|h| *h == LEVEL_END).filter(move |_| !empty)
    }

    /// Every host of every level.
    pub fn all(&self) -> impl Iterator<Item = HostId> + '_ {
        self.0.iter().copied().filter(|h| *h != LEVEL_END)
    }

    /// Heap bytes (memory accounting).
    pub fn heap_bytes(&self) -> usize {
        self.0.len() * 4
    }
}

/// Dead state after the failed pseudo-cohort limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dead {
    /// When deliveries are tried again.
    pub retry_at: Time,
}

/// A destination.
#[derive(Clone, Debug)]
pub struct Destination {
    /// Its transport.
    pub transport: TransportId,
    /// Nexthop name.
    pub nexthop: Arc<str>,
    /// Hosts by MX preference level.
    pub hosts: HostLevels,
    /// Concurrency window and feedback counters.
    pub window: Window,
    /// Connections open or opening (busy workers).
    pub busy: u32,
    /// Its connections, in opening order.
    pub conns: Vec<ConnId>,
    /// One FIFO per class.
    pub queues: [ClassQueue; 3],
    /// Entries on connections, per class (for the per-destination class shares).
    pub inflight: [u32; 3],
    /// Their recipients, per class (the shares weigh entries by recipients).
    pub inflight_rcpts: [u32; 3],
    /// Whether it is in each class ring.
    pub in_ring: [bool; 3],
    /// Parking state.
    pub park: Park,
    /// The park came from shaping refusing its mail's sides: mail of
    /// another side wakes it.
    pub shaped: bool,
    /// Dead until retry.
    pub dead: Option<Dead>,
    /// Length of the next dead period (doubles between the back-off bounds).
    backoff_ms: u32,
    /// Entries alive for this destination (queued, on connections, in flight).
    pub entries: u32,
    /// Last time it had work (for garbage collection).
    pub touched: Time,
    /// What its deliveries showed recently (`sluice sim`).
    pub observed: Option<Box<crate::observed::Observed>>,
}

impl Destination {
    /// A fresh destination at the initial window.
    pub fn new(
        transport: TransportId,
        nexthop: &str,
        initial: u32,
        backoff: Duration,
        now: Time,
    ) -> Self {
        let mut d = Destination {
            transport,
            nexthop: nexthop.into(),
            hosts: HostLevels::default(),
            window: Window::new(initial),
            busy: 0,
            conns: Vec::new(),
            queues: Default::default(),
            in_ring: [false; 3],
            inflight: [0; 3],
            inflight_rcpts: [0; 3],
            park: Park::No,
            shaped: false,
            dead: None,
            backoff_ms: 0,
            entries: 0,
            touched: now,
            observed: None,
        };
        d.set_backoff(backoff);
        d
    }

    /// Length of the next dead period.
    pub fn backoff(&self) -> Duration {
        Duration::from_millis(u64::from(self.backoff_ms))
    }

    /// Sets the length of the next dead period (saturating at about 49 days).
    pub fn set_backoff(&mut self, d: Duration) {
        self.backoff_ms = u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
    }

    /// Entries waiting in the class queues.
    pub fn queued(&self) -> usize {
        self.queues.iter().map(ClassQueue::len).sum()
    }

    /// The class queue of `c`.
    pub fn queue(&mut self, c: Class) -> &mut ClassQueue {
        &mut self.queues[c.idx()]
    }

    /// True when the window allows another connection.
    pub fn window_room(&self) -> bool {
        self.dead.is_none() && self.busy < self.window.concurrency
    }

    /// The class to serve instead of `c` so that every class with work gets
    /// at least its share of this destination; `c` itself when it is under
    /// its share or nobody else is.
    ///
    /// The share is window / classes with work, in entries of the mean size
    /// in flight: a class's entries in flight count by their recipients, so
    /// five 50-recipient list transactions hold as much of the destination
    /// as 250 one-recipient ones (they keep its connections 25 times as
    /// long). With entries of one size this is the share in entries.
    pub fn share_class(&self, c: Class) -> Class {
        self.share_class_excluding(c, 0, 0)
    }

    /// Like `share_class`, not counting `own` of class `c`'s entries in
    /// flight, with `own_rcpts` recipients (the entry being decided about
    /// is already on a connection).
    pub fn share_class_excluding(&self, c: Class, own: u32, own_rcpts: u32) -> Class {
        let mine = self.inflight_rcpts[c.idx()].saturating_sub(own_rcpts);
        if self.under_share(mine, own, own_rcpts) {
            return c;
        }
        Class::ALL
            .into_iter()
            .find(|k| {
                !self.queues[k.idx()].is_empty()
                    && self.under_share(self.inflight_rcpts[k.idx()], own, own_rcpts)
            })
            .unwrap_or(c)
    }

    /// A class smaller than `c` with queued entries: it goes before a
    /// waiting job of `c`, as if it had been queued on the connection ahead
    /// of it (connection backlogs are ordered by class).
    pub fn smaller_waiting(&self, c: Class) -> Option<Class> {
        Class::ALL[..c.idx()]
            .iter()
            .copied()
            .find(|&k| !self.queues[k.idx()].is_empty())
    }

    /// Whether an entry of `class` with `rcpts` recipients must leave the
    /// last free connection slot to a smaller class that may come: of the
    /// window, all but one slot are connections at work (`idle` of the
    /// destination's connections are open and idle: one of them is a free
    /// slot too), no smaller class holds a connection here, and the
    /// transactions it would join are long, with at least `long` recipients
    /// on average counting its own (0: never).
    ///
    /// A small sender that arrives while a list holds the whole window
    /// waits for the list's running transactions, 5 s for 50 recipients
    /// where its own message takes 0.2 s (docs/scheduler.md, scenario 3).
    /// The recipients are what the scheduler knows of a transaction's
    /// length before it runs; a lone bulk sender of one-recipient messages
    /// never loses a connection to the rule (its transactions are as short
    /// as a small sender's, which then waits at most one of them).
    pub fn keeps_last_slot(&self, class: Class, rcpts: u32, long: u32, idle: u32) -> bool {
        if long == 0 || class == Class::Small || self.window.concurrency < 2 {
            return false;
        }
        if self.busy.saturating_sub(idle) + 1 < self.window.concurrency {
            return false;
        }
        if self.inflight[..class.idx()].iter().any(|&n| n > 0) {
            return false;
        }
        let entries = u64::from(self.inflight.iter().sum::<u32>()) + 1;
        let total = u64::from(self.inflight_rcpts.iter().sum::<u32>()) + u64::from(rcpts);
        total >= u64::from(long) * entries
    }

    /// Whether the transactions in flight here are long (at least `long`
    /// recipients on average; 0: never): then a smaller class's first
    /// queued entry may have a slot kept for it (`keeps_last_slot`).
    pub fn long_in_flight(&self, long: u32) -> bool {
        let entries = u64::from(self.inflight.iter().sum::<u32>());
        long > 0
            && entries > 0
            && u64::from(self.inflight_rcpts.iter().sum::<u32>()) >= u64::from(long) * entries
    }

    /// Whether a class holding `held` recipients in flight is under its
    /// share: held < share x mean recipients per entry in flight, not
    /// counting one entry (`own`, `own_rcpts`) being decided about.
    fn under_share(&self, held: u32, own: u32, own_rcpts: u32) -> bool {
        let active = (0..3)
            .filter(|&x| !self.queues[x].is_empty() || self.inflight[x] > 0)
            .count() as u32;
        let share = u64::from((self.window.concurrency / active.max(1)).max(1));
        let entries = u64::from(self.inflight.iter().sum::<u32>().saturating_sub(own));
        let rcpts = u64::from(
            self.inflight_rcpts
                .iter()
                .sum::<u32>()
                .saturating_sub(own_rcpts),
        );
        entries == 0 || u64::from(held) * entries < share * rcpts
    }

    /// True when nothing refers to it and it may be forgotten.
    pub fn is_idle(&self) -> bool {
        self.entries == 0 && self.conns.is_empty() && self.dead.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_room_and_idle() {
        let mut d = Destination::new(
            TransportId(0),
            "example.org",
            2,
            Duration::from_secs(300),
            Time(0),
        );
        assert!(d.window_room());
        d.busy = 2;
        assert!(!d.window_room());
        d.busy = 0;
        d.dead = Some(Dead { retry_at: Time(10) });
        assert!(!d.window_room(), "dead destinations take no connections");
        assert!(!d.is_idle(), "dead state is kept");
        d.dead = None;
        assert!(d.is_idle());
        assert_eq!(d.queued(), 0);
    }

    #[test]
    fn host_levels_round_trip() {
        let h = HostLevels::new(vec![vec![HostId(1), HostId(2)], vec![HostId(3)]]);
        let levels: Vec<&[HostId]> = h.levels().collect();
        assert_eq!(levels, vec![&[HostId(1), HostId(2)][..], &[HostId(3)][..]]);
        assert_eq!(
            h.all().collect::<Vec<_>>(),
            vec![HostId(1), HostId(2), HostId(3)]
        );
        assert_eq!(HostLevels::default().levels().count(), 0);
        let mut d = Destination::new(TransportId(0), "x", 1, Duration::from_secs(300), Time(0));
        assert_eq!(d.backoff(), Duration::from_secs(300));
        d.set_backoff(Duration::from_secs(4000));
        assert_eq!(d.backoff(), Duration::from_secs(4000));
    }

    #[test]
    fn share_class_prefers_under_share_classes() {
        let mut d = Destination::new(
            TransportId(0),
            "example.org",
            20,
            Duration::from_secs(300),
            Time(0),
        );
        d.queues[0].push_back(crate::ids::EntryId(1));
        d.queues[1].push_back(crate::ids::EntryId(2));
        // One recipient per entry: the share is in entries.
        d.inflight = [1, 15, 0];
        d.inflight_rcpts = d.inflight;
        // share = 20 / 2 = 10: Medium is over it, Small under.
        assert_eq!(d.share_class(Class::Medium), Class::Small);
        assert_eq!(d.share_class(Class::Small), Class::Small);
        d.inflight = [10, 9, 0];
        d.inflight_rcpts = d.inflight;
        assert_eq!(d.share_class(Class::Medium), Class::Medium);
        d.queues[0].pop_front();
        d.inflight = [0, 19, 0];
        d.inflight_rcpts = d.inflight;
        assert_eq!(
            d.share_class(Class::Medium),
            Class::Medium,
            "nobody else has work"
        );
    }

    #[test]
    fn shares_weigh_entries_by_recipients() {
        let mut d = Destination::new(
            TransportId(0),
            "lists.example",
            9,
            Duration::from_secs(300),
            Time(0),
        );
        d.queues[0].push_back(crate::ids::EntryId(1));
        d.queues[2].push_back(crate::ids::EntryId(2));
        // Five 50-recipient list entries and four one-recipient ones in
        // flight: by entries the small class is at its share (9 / 2 = 4),
        // by recipients it holds 4 of 254 and stays under it.
        d.inflight = [4, 0, 5];
        d.inflight_rcpts = [4, 0, 250];
        assert_eq!(d.share_class(Class::Large), Class::Small);
        assert_eq!(d.share_class(Class::Small), Class::Small);
        // The list with nothing in flight is under its share again.
        d.inflight = [9, 0, 0];
        d.inflight_rcpts = [9, 0, 0];
        assert_eq!(d.share_class(Class::Small), Class::Large);
        // Not counting the entry being decided about.
        d.inflight = [4, 0, 1];
        d.inflight_rcpts = [4, 0, 50];
        assert_eq!(d.share_class_excluding(Class::Large, 1, 50), Class::Large);
    }

    #[test]
    fn last_slot_kept_only_behind_long_transactions() {
        let mut d = Destination::new(
            TransportId(0),
            "lists.example",
            5,
            Duration::from_secs(300),
            Time(0),
        );
        // A list holds four of five connections with 50 recipients each:
        // its fifth entry leaves the last one to a smaller class.
        d.busy = 4;
        d.inflight = [0, 0, 4];
        d.inflight_rcpts = [0, 0, 200];
        assert!(d.keeps_last_slot(Class::Large, 50, 10, 0));
        assert!(
            d.keeps_last_slot(Class::Medium, 1, 10, 0),
            "a medium entry joins the list's long ones"
        );
        // Small entries, a rule turned off, and a window with room for more
        // than one connection take it.
        assert!(!d.keeps_last_slot(Class::Small, 1, 10, 0));
        assert!(!d.keeps_last_slot(Class::Large, 50, 0, 0));
        d.busy = 3;
        assert!(!d.keeps_last_slot(Class::Large, 50, 10, 0));
        // A lone bulk sender of one-recipient messages keeps its whole window.
        d.busy = 4;
        d.inflight_rcpts = [0, 0, 4];
        assert!(!d.keeps_last_slot(Class::Large, 1, 10, 0));
        // Two recipients a transaction are short (scenario 1's deliveries).
        d.inflight_rcpts = [0, 0, 8];
        assert!(!d.keeps_last_slot(Class::Large, 2, 10, 0));
        // Once a smaller class holds a connection, nothing is kept for it.
        d.inflight = [1, 0, 3];
        d.inflight_rcpts = [1, 0, 150];
        assert!(!d.keeps_last_slot(Class::Large, 50, 10, 0));
        // The unconditional reservation (threshold 1) holds for any length.
        d.inflight = [0, 0, 4];
        d.inflight_rcpts = [0, 0, 4];
        assert!(d.keeps_last_slot(Class::Large, 1, 1, 0));
        // Five connections, one of them idle: the idle one is the last slot.
        d.busy = 5;
        d.inflight = [0, 0, 4];
        d.inflight_rcpts = [0, 0, 200];
        assert!(d.keeps_last_slot(Class::Large, 50, 10, 1));
        assert!(d.long_in_flight(10) && !d.long_in_flight(60) && !d.long_in_flight(0));
        d.inflight_rcpts = [0, 0, 4];
        assert!(!d.long_in_flight(10));
        // A window of one is never reserved.
        let one = Destination::new(TransportId(0), "x", 1, Duration::from_secs(300), Time(0));
        assert!(!one.keeps_last_slot(Class::Large, 50, 10, 0));
    }
}
