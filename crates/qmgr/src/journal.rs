//! What waits for the journal's group commit: arrivals to answer, data to
//! free, and riding out a journal that cannot be written.
//!
//! The shell owns the journal's files and its sync thread; it tells
//! [`Commits`] what came of each group commit, "durable up to position P"
//! ([`Commits::durable`]) or "the commit failed" ([`Commits::failed`]),
//! and asks it whether to commit now ([`Commits::due`]). Everything else is
//! decided here, in the queue manager's virtual time:
//!
//! - an arrival is answered only once its records are durable
//!   ([`CommitEvent::Committed`]); a message's data goes only once its
//!   `Removed` record is ([`CommitEvent::Remove`]);
//! - a failed commit is never fatal (Postfix's qmgr does not die on a full
//!   disk either): the journal keeps every record it could not write, at
//!   its position, and the commit is tried again every [`RETRY`]. Meanwhile
//!   the journal is stalled: arrivals waiting for the failed commit are
//!   refused ([`CommitEvent::Refused`]; their `Arrived` record is taken
//!   back by a `Removed` one, so a client that retries does not get the
//!   message twice), new arrivals are refused at once, and delivery results
//!   wait in memory to be written when space returns. One
//!   [`CommitEvent::Stalled`] when commits start failing and one
//!   [`CommitEvent::Resumed`] when they work again: the shell logs state
//!   changes, not records.
//! - a commit is started when an arrival waits for one or an operator's
//!   change (a hold, a move) was appended; a delivery's result waits for
//!   the next of those, or [`LAZY`] at most: under load the results ride
//!   in the arrivals' commits instead of costing an fdatasync of their own.
//!
//! Panics on nothing; does not log.

use std::time::Duration;

use mail::QueueId;
use queue::{Lsn, Record, Replay, Storage};

use crate::{Action, Event, QueueManager, Store, Time};

/// How often a stalled journal is tried again.
pub const RETRY: Duration = Duration::from_secs(1);

/// How long a delivery's result may wait for a commit when no arrival
/// brings one sooner. Not waiting cost an fdatasync per delivery turn;
/// a crash in the meantime repeats the delivery, as one in flight would
/// be (Postfix never syncs delivery results at all).
pub const LAZY: Duration = Duration::from_millis(100);

/// An arrival waiting for its group commit.
#[derive(Debug)]
pub struct Ack {
    /// Durable once the journal's durable end passes this (set by
    /// [`Commits::arrive`]).
    pub end: Lsn,
    /// The client to answer, as the shell names it.
    pub client: u64,
    /// Its request id.
    pub request: u64,
    /// The message.
    pub id: QueueId,
    /// Its data, freed if the arrival is refused.
    pub storage: Storage,
    /// The log line for its arrival.
    pub summary: String,
    /// Queued on hold (not handed to delivery).
    pub hold: bool,
}

/// Why an arrival is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The journal's error.
    pub reason: String,
    /// The disk is full (452 4.3.1 rather than 451 4.3.0).
    pub disk_full: bool,
    /// Its `Arrived` record was journaled and is taken back by `Removed`:
    /// the data goes when that is durable ([`CommitEvent::Remove`]), not now.
    pub taken_back: bool,
}

/// What came of the commits, for the shell to act on and log.
#[derive(Debug)]
pub enum CommitEvent {
    /// An arrival's records are durable: answer it, hand it to delivery.
    Committed(Ack),
    /// An arrival could not be made durable: answer it with a failure.
    Refused(Ack, Refusal),
    /// A removed message's `Removed` record is durable: free its data.
    Remove(QueueId, Storage),
    /// Commits started failing (the first failure of a stall).
    Stalled(Refusal),
    /// Commits work again after failing this long.
    Resumed(Duration),
}

#[derive(Debug)]
struct Stall {
    since: Time,
    retry_at: Time,
    why: Refusal,
}

/// The arrivals and removals waiting for durability, and the stall.
#[derive(Debug, Default)]
pub struct Commits {
    /// How far the journal was last said to be durable.
    reported: Lsn,
    acks: Vec<Ack>,
    removals: Vec<(Lsn, QueueId, Storage)>,
    stall: Option<Stall>,
    events: Vec<CommitEvent>,
    /// When the oldest record no one waits for was appended, since the
    /// last commit started.
    since: Option<Time>,
    /// A record appended since the last commit started should not wait.
    urgent: bool,
    /// Where the journal ended when the last commit started: one commit
    /// on the sync thread makes one segment durable, so a commit is due
    /// again until the journal is durable this far.
    target: Lsn,
}

impl Commits {
    /// Why commits fail, while they do.
    pub fn stalled(&self) -> Option<&Refusal> {
        self.stall.as_ref().map(|s| &s.why)
    }

    /// Whether the shell should start a commit at `now`: when an arrival
    /// waits for one or a record should not wait, or [`LAZY`] after a
    /// delivery's result was appended; while stalled, when the next try
    /// is due.
    pub fn due(&self, now: Time) -> bool {
        match &self.stall {
            Some(s) => now >= s.retry_at,
            None => {
                !self.acks.is_empty()
                    || self.urgent
                    || self.target > self.reported
                    || self.lazy_due().is_some_and(|t| now >= t)
            }
        }
    }

    fn lazy_due(&self) -> Option<Time> {
        self.since.map(|t| t + LAZY)
    }

    /// A record was appended at `now`: committed with the next arrival,
    /// or within [`LAZY`]; at once if `urgent`.
    pub fn appended(&mut self, now: Time, urgent: bool) {
        self.since.get_or_insert(now);
        self.urgent |= urgent;
    }

    /// What was appended until now must not wait for a commit.
    pub fn urge(&mut self) {
        self.urgent = true;
    }

    /// The shell started a commit of everything appended so far, up to `end`.
    pub fn started(&mut self, end: Lsn) {
        self.since = None;
        self.urgent = false;
        self.target = self.target.max(end);
    }

    /// Whether a commit that ended at `end` is news: the journal is
    /// durable further than last said, or commits failed until now.
    pub fn is_news(&self, end: Lsn) -> bool {
        end > self.reported || self.stall.is_some()
    }

    /// When a stalled journal is to be tried again, or results appended
    /// are to be committed though nothing else asked for a commit.
    pub fn next_deadline(&self) -> Option<Time> {
        match &self.stall {
            Some(s) => Some(s.retry_at),
            None => self.lazy_due(),
        }
    }

    /// Journals an arrival (`arrived`, then `Held` for `ack.hold`); it is
    /// answered by a `Committed` or `Refused` event. Refused at once while
    /// stalled: then nothing is appended and the caller frees the data.
    pub fn arrive<S: Store>(
        &mut self,
        store: &mut S,
        state: &mut Replay,
        mut ack: Ack,
        arrived: &Record,
    ) -> Result<(), Refusal> {
        if let Some(s) = &self.stall {
            return Err(s.why.clone());
        }
        // Appends only buffer: they fail for a record that cannot be
        // encoded, never for the disk.
        let refusal = |reason: String, taken_back| Refusal {
            reason,
            disk_full: false,
            taken_back,
        };
        store
            .append(arrived, state)
            .map_err(|e| refusal(e, false))?;
        if ack.hold {
            let held = Record::Held { id: ack.id };
            if let Err(e) = store.append(&held, state) {
                // Arrived is in the journal already: take it back, and let
                // the data go only once that is durable.
                self.take_back(store, state, ack.id, ack.storage);
                return Err(refusal(e, true));
            }
        }
        ack.end = store.end();
        self.acks.push(ack);
        Ok(())
    }

    /// Journals an arrival made of several records (an import: its head,
    /// the notices it owes, `Imported`), answered as [`Commits::arrive`]'s;
    /// a record that fails to append takes the ones before back.
    pub fn arrive_all<S: Store>(
        &mut self,
        store: &mut S,
        state: &mut Replay,
        mut ack: Ack,
        records: &[Record],
    ) -> Result<(), Refusal> {
        if let Some(s) = &self.stall {
            return Err(s.why.clone());
        }
        for (i, rec) in records.iter().enumerate() {
            if let Err(e) = store.append(rec, state) {
                if i > 0 {
                    self.take_back(store, state, ack.id, ack.storage);
                }
                return Err(Refusal {
                    reason: e,
                    disk_full: false,
                    taken_back: i > 0,
                });
            }
        }
        ack.end = store.end();
        self.acks.push(ack);
        Ok(())
    }

    /// Frees a message's data once everything appended before `end` (its
    /// `Removed` record) is durable.
    pub fn remove_later(&mut self, end: Lsn, id: QueueId, storage: Storage) {
        self.removals.push((end, id, storage));
    }

    /// Appends `Removed` for an arrival that is not to be; its data goes
    /// once that is durable.
    fn take_back<S: Store>(&mut self, store: &mut S, state: &mut Replay, id: QueueId, st: Storage) {
        // A Removed record always encodes. (Rare: committed at once.)
        let _ = store.append(&Record::Removed { id }, state);
        self.urgent = true;
        self.remove_later(store.end(), id, st);
    }

    /// A commit made the journal durable up to `end` (or there was
    /// nothing to commit): a stall is over, and what waited for `end` is
    /// answered or freed.
    pub fn durable(&mut self, end: Lsn, now: Time) {
        self.reported = self.reported.max(end);
        if let Some(s) = self.stall.take() {
            let d = Duration::from_millis(now.0.saturating_sub(s.since.0));
            self.events.push(CommitEvent::Resumed(d));
        }
        self.release(end);
    }

    /// What waited for the journal to be durable up to `end` is answered
    /// or freed.
    pub fn release(&mut self, end: Lsn) {
        if self.acks.first().is_some_and(|a| a.end <= end) {
            let (done, waiting): (Vec<Ack>, Vec<Ack>) = std::mem::take(&mut self.acks)
                .into_iter()
                .partition(|a| a.end <= end);
            self.acks = waiting;
            self.events
                .extend(done.into_iter().map(CommitEvent::Committed));
        }
        if self.removals.iter().any(|(l, _, _)| *l <= end) {
            let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.removals)
                .into_iter()
                .partition(|(l, _, _)| *l <= end);
            self.removals = keep;
            self.events.extend(
                gone.into_iter()
                    .map(|(_, id, st)| CommitEvent::Remove(id, st)),
            );
        }
    }

    /// A commit failed: the journal is stalled, tried again after
    /// [`RETRY`], and the arrivals waiting for it are refused now (cleanup
    /// is not kept waiting on a disk that may stay full) and taken back.
    pub fn failed<S: Store>(
        &mut self,
        store: &mut S,
        state: &mut Replay,
        reason: String,
        disk_full: bool,
        now: Time,
    ) {
        let why = Refusal {
            reason,
            disk_full,
            taken_back: false,
        };
        let since = match &self.stall {
            Some(s) => s.since,
            None => {
                self.events.push(CommitEvent::Stalled(why.clone()));
                now
            }
        };
        self.stall = Some(Stall {
            since,
            retry_at: Time(now.0 + RETRY.as_millis() as u64),
            why: why.clone(),
        });
        for a in std::mem::take(&mut self.acks) {
            self.take_back(store, state, a.id, a.storage);
            let why = Refusal {
                taken_back: true,
                ..why.clone()
            };
            self.events.push(CommitEvent::Refused(a, why));
        }
    }

    /// What happened since the last call.
    pub fn take_events(&mut self) -> Vec<CommitEvent> {
        std::mem::take(&mut self.events)
    }
}

/// Why the shell's group commit failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitFailure {
    /// The journal's error.
    pub reason: String,
    /// The file system is full.
    pub disk_full: bool,
}

impl From<queue::Error> for CommitFailure {
    fn from(e: queue::Error) -> Self {
        CommitFailure {
            reason: e.to_string(),
            disk_full: e.is_disk_full(),
        }
    }
}

impl From<CommitFailure> for Event {
    fn from(f: CommitFailure) -> Self {
        Event::CommitFailed {
            reason: f.reason,
            disk_full: f.disk_full,
        }
    }
}

impl<S: Store> QueueManager<S> {
    /// What came of the shell's group commit: durable up to `end` (with
    /// nothing to commit, where it already was), or failed. False when
    /// that is no news (durable no further than already said, and no
    /// stall to end): no turn is taken and the shell commits no more now.
    pub fn committed(&mut self, now: Time, outcome: Result<Lsn, CommitFailure>) -> bool {
        let ev = match outcome {
            Ok(end) if !self.commits.is_news(end) => return false,
            Ok(end) => Event::Durable(end),
            Err(f) => f.into(),
        };
        self.handle(now, ev);
        true
    }

    /// Leaving, after the shell's last commit (`outcome`): the actions
    /// still worth carrying out, in order (answers to arrivals, data to
    /// remove, holds and the verification cache to save, log lines), the
    /// cache's last results included. What would start work (requests to
    /// the router, the agents, cleanup, clients' other answers) is left:
    /// the next process recovers it from the journal.
    pub fn closing(&mut self, now: Time, outcome: Result<Lsn, CommitFailure>) -> Vec<Action> {
        let ev = match outcome {
            Ok(end) => Event::Durable(end),
            Err(f) => f.into(),
        };
        self.handle(now, ev);
        let mut out: Vec<Action> = std::iter::from_fn(|| self.poll_action())
            .filter(|a| {
                matches!(
                    a,
                    Action::Answer { .. }
                        | Action::RemoveData { .. }
                        | Action::SaveHolds { .. }
                        | Action::SaveVerify { .. }
                        | Action::Log(..)
                )
            })
            .collect();
        if let Some(text) = self.verify_cache_save() {
            out.push(Action::SaveVerify { text });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemStore;
    use mail::{Envelope, Recipient};
    use queue::{DataRef, MessageHead};

    fn id(n: u32) -> QueueId {
        QueueId::from_parts(1_700_000_000_000_000 + n as u64, 1, n).unwrap()
    }

    fn arrived(n: u32) -> Record {
        Record::Arrived(MessageHead {
            id: id(n),
            envelope: Envelope {
                sender: format!("s{n}@example.org"),
                recipients: vec![Recipient::new(format!("r{n}@example.net"))],
                ..Envelope::default()
            },
            data: DataRef::Inline(b"Subject: t\r\n\r\nhi\r\n".to_vec()),
        })
    }

    fn ack(n: u32, hold: bool, storage: Storage) -> Ack {
        Ack {
            end: Lsn::default(),
            client: 7,
            request: n as u64,
            id: id(n),
            storage,
            summary: format!("{}: arrived", id(n)),
            hold,
        }
    }

    /// A journal in memory whose commits the test decides: `end` is what
    /// has been appended, `durable` what the test last said was committed.
    struct World {
        c: Commits,
        store: MemStore,
        state: Replay,
        now: Time,
    }

    impl World {
        fn new() -> Self {
            World {
                c: Commits::default(),
                store: MemStore::default(),
                state: Replay::default(),
                now: Time(1_700_000_000_000),
            }
        }

        fn arrive(&mut self, n: u32, hold: bool) -> Result<(), Refusal> {
            self.c.arrive(
                &mut self.store,
                &mut self.state,
                ack(n, hold, Storage::Pool(n)),
                &arrived(n),
            )
        }

        /// The commit of everything appended so far succeeded.
        fn commit_ok(&mut self) -> Vec<CommitEvent> {
            self.c.durable(self.store.end(), self.now);
            self.c.take_events()
        }

        fn commit_fails(&mut self, disk_full: bool) -> Vec<CommitEvent> {
            self.c.failed(
                &mut self.store,
                &mut self.state,
                "No space left on device".into(),
                disk_full,
                self.now,
            );
            self.c.take_events()
        }

        fn at(&mut self, ms: u64) {
            self.now = Time(self.now.0 + ms);
        }
    }

    fn committed(ev: &[CommitEvent]) -> Vec<QueueId> {
        ev.iter()
            .filter_map(|e| match e {
                CommitEvent::Committed(a) => Some(a.id),
                _ => None,
            })
            .collect()
    }

    fn refused(ev: &[CommitEvent]) -> Vec<QueueId> {
        ev.iter()
            .filter_map(|e| match e {
                CommitEvent::Refused(a, _) => Some(a.id),
                _ => None,
            })
            .collect()
    }

    fn removed(ev: &[CommitEvent]) -> Vec<(QueueId, Storage)> {
        ev.iter()
            .filter_map(|e| match e {
                CommitEvent::Remove(i, s) => Some((*i, *s)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_arrival_is_answered_only_once_its_records_are_durable() {
        let mut w = World::new();
        w.arrive(1, false).unwrap();
        let first = w.store.end();
        w.arrive(2, true).unwrap();
        // A commit that covers the first arrival only.
        w.c.durable(first, w.now);
        assert_eq!(committed(&w.c.take_events()), vec![id(1)]);
        // Nothing more is durable: nothing more is answered.
        w.c.durable(first, w.now);
        assert!(w.c.take_events().is_empty());
        // The held arrival's Held record is part of what must be durable.
        assert_eq!(committed(&w.commit_ok()), vec![id(2)]);
        assert!(w.state.messages[&id(2)].held);
    }

    #[test]
    fn a_failed_commit_refuses_its_arrivals_takes_them_back_and_retries_every_second() {
        let mut w = World::new();
        w.arrive(1, false).unwrap();
        assert_eq!(committed(&w.commit_ok()), vec![id(1)]);
        w.arrive(2, true).unwrap();
        let ev = w.commit_fails(true);
        assert_eq!(refused(&ev), vec![id(2)], "{ev:?}");
        assert!(
            matches!(&ev[0], CommitEvent::Stalled(r) if r.disk_full),
            "{ev:?}"
        );
        assert!(
            ev.iter()
                .all(|e| !matches!(e, CommitEvent::Refused(_, r) if !r.taken_back)),
            "{ev:?}"
        );
        // Taken back at once in the queue state, its data kept until the
        // Removed record is durable (a crash could replay Arrived without it).
        assert!(!w.state.messages.contains_key(&id(2)));
        assert!(removed(&ev).is_empty(), "{ev:?}");
        assert!(matches!(w.store.records().last(), Some(Record::Removed { id: i }) if *i == id(2)));

        // Stalled: new arrivals refused at once, nothing appended for them.
        let n = w.store.records().count();
        let r = w.arrive(3, false).unwrap_err();
        assert!(r.disk_full && !r.taken_back);
        assert_eq!(w.store.records().count(), n);
        // No commit before the second is up; each retry that fails says
        // nothing new and waits a second more.
        let t0 = w.now;
        assert_eq!(w.c.next_deadline(), Some(Time(t0.0 + 1000)));
        w.at(999);
        assert!(!w.c.due(w.now));
        w.at(1);
        assert!(w.c.due(w.now));
        for _ in 0..3 {
            assert!(w.commit_fails(true).is_empty());
            assert!(!w.c.due(w.now));
            w.at(1000);
            assert!(w.c.due(w.now));
        }
        // Space returns: the retry succeeds, the stall is over, its length
        // told once, and the taken-back arrival's data goes.
        let ev = w.commit_ok();
        assert!(
            ev.iter()
                .any(|e| matches!(e, CommitEvent::Resumed(d) if *d == Duration::from_secs(4))),
            "{ev:?}"
        );
        assert_eq!(removed(&ev), vec![(id(2), Storage::Pool(2))]);
        assert!(w.c.stalled().is_none() && w.c.next_deadline().is_none());
        w.arrive(4, false).unwrap();
        assert_eq!(committed(&w.commit_ok()), vec![id(4)]);
    }

    #[test]
    fn nothing_is_acknowledged_before_it_is_durable_whatever_the_commits_do() {
        // A seeded walk over arrivals, commits that cover part of what was
        // appended, failures and retries: every arrival is answered exactly
        // once, Committed only when a commit covered it, and refused ones
        // are not in the queue.
        let mut w = World::new();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut answered = std::collections::BTreeMap::new();
        let mut waiting: Vec<(QueueId, Lsn)> = Vec::new();
        for n in 0..400u32 {
            match next() % 10 {
                0..=4 => match w.arrive(n, n % 3 == 0) {
                    Ok(()) => waiting.push((id(n), w.store.end())),
                    Err(_) => {
                        answered.insert(id(n), false);
                    }
                },
                5..=7 if w.c.due(w.now) => {
                    // A commit of part of what is appended.
                    let upto = waiting
                        .get((next() % (waiting.len() as u64 + 1)) as usize)
                        .map_or(w.store.end(), |(_, l)| *l);
                    w.c.durable(upto, w.now);
                    for e in w.c.take_events() {
                        if let CommitEvent::Committed(a) = e {
                            assert!(a.end <= upto, "{} answered before durable", a.id);
                            assert!(answered.insert(a.id, true).is_none());
                            waiting.retain(|(i, _)| *i != a.id);
                        }
                    }
                }
                8 if w.c.due(w.now) => {
                    for e in w.commit_fails(next() % 2 == 0) {
                        if let CommitEvent::Refused(a, _) = e {
                            assert!(answered.insert(a.id, false).is_none());
                            waiting.retain(|(i, _)| *i != a.id);
                        }
                    }
                }
                _ => w.at(400),
            }
        }
        w.at(1000);
        for e in w.commit_ok() {
            if let CommitEvent::Committed(a) = e {
                assert!(answered.insert(a.id, true).is_none());
            }
        }
        for (i, ok) in &answered {
            assert_eq!(w.state.messages.contains_key(i), *ok, "{i}");
        }
        let ok = answered.values().filter(|ok| **ok).count();
        let refused = answered.len() - ok;
        assert!(ok > 50 && refused > 10, "{ok} committed, {refused} refused");
    }

    #[test]
    fn a_result_waits_for_an_arrivals_commit_or_lazy_at_most() {
        let mut w = World::new();
        assert!(!w.c.due(w.now), "nothing appended");
        // A delivery's result: no commit of its own before LAZY.
        w.c.appended(w.now, false);
        assert!(!w.c.due(w.now));
        assert_eq!(w.c.next_deadline(), Some(w.now + LAZY));
        assert!(!w.c.due(Time(w.now.0 + LAZY.as_millis() as u64 - 1)));
        assert!(w.c.due(w.now + LAZY));
        // An operator's change does not wait.
        w.c.started(w.store.end());
        assert_eq!(w.c.next_deadline(), None, "all in the commit started");
        w.c.appended(w.now, true);
        assert!(w.c.due(w.now));
        w.c.started(w.store.end());
        // An arrival brings the commit at once, and results ride in it.
        w.c.appended(w.now, false);
        w.arrive(1, false).unwrap();
        assert!(w.c.due(w.now));
        w.c.started(w.store.end());
        assert_eq!(w.c.next_deadline(), None);
        // A stall's retry is the deadline, whatever waits.
        w.c.appended(w.now, false);
        w.commit_fails(true);
        assert_eq!(w.c.next_deadline(), Some(w.now + RETRY));
        assert!(!w.c.due(w.now + LAZY));
    }
}

#[cfg(test)]
mod outcome_tests {
    //! What the shell says of its commits, and leaving, in virtual time.
    use super::*;
    use crate::testkit::{settings, World};
    use crate::Level;
    use mail::{Envelope, Recipient};
    use queue::{DataRef, MessageHead};

    fn full() -> CommitFailure {
        CommitFailure {
            reason: "No space left on device".into(),
            disk_full: true,
        }
    }

    #[test]
    fn a_commit_is_news_once_and_again_when_it_ends_a_stall() {
        let mut w = World::new(settings());
        let t = w.now;
        assert!(w.qm.committed(t, Ok(Lsn::new(1, 10))));
        assert!(!w.qm.committed(t, Ok(Lsn::new(1, 10))), "nothing new");
        assert!(!w.qm.committed(t, Ok(Lsn::new(1, 5))), "behind");
        assert!(w.qm.committed(t, Err(full())));
        w.drain();
        assert!(w.logged("journal: No space left on device; mail is refused"));
        assert!(!w.qm.commit_due(t), "retried after a second, not now");
        let later = Time(t.0 + RETRY.as_millis() as u64);
        assert!(w.qm.commit_due(later));
        assert!(
            w.qm.committed(later, Ok(Lsn::new(1, 10))),
            "no further, but it ends the stall"
        );
        w.drain();
        assert!(w.logged("journal: writable again after 1.0 s"));
        assert!(!w.qm.committed(later, Ok(Lsn::new(1, 10))));
    }

    #[test]
    fn leaving_answers_arrivals_and_starts_no_work() {
        let mut w = World::new(settings());
        let id = QueueId::from_parts(w.now.0 * 1000, 1, 1).unwrap();
        let head = MessageHead {
            id,
            envelope: Envelope {
                sender: "a@a.example".into(),
                recipients: vec![Recipient::new("b@b.example")],
                ..Envelope::default()
            },
            data: DataRef::Inline(b"Subject: t\r\n\r\nhi\r\n".to_vec()),
        };
        // Arrived, not drained: the answer and its routing are owed.
        w.qm.handle(
            w.now,
            Event::Arrived {
                client: 7,
                request: 3,
                head: Box::new(head),
                hold: false,
            },
        );
        let end = w.qm.store().end();
        let out = w.qm.closing(w.now, Ok(end));
        assert!(
            out.iter().any(
                |a| matches!(a, Action::Answer { client: 7, request: 3, response }
                if *response == ipc::qmgr::Response::Committed)
            ),
            "{out:?}"
        );
        assert!(out.iter().any(
            |a| matches!(a, Action::Log(Level::Info, l) if l.starts_with(&format!("{id}: from=<a@a.example>")))
        ));
        assert!(
            !out.iter().any(|a| matches!(
                a,
                Action::ToRouter { .. } | Action::ToAgent { .. } | Action::ToCleanup { .. }
            )),
            "{out:?}"
        );
        assert!(w.qm.poll_action().is_none(), "nothing left behind");
    }
}
