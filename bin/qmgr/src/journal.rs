//! qmgr's journal writer: appends, group commit, and riding out a full disk.
//!
//! Every record qmgr appends goes through `Writer`, which applies it to the
//! in-memory queue state at once and makes it durable by group commit (on
//! the sync thread when there is one). An arrival is answered only once its
//! `Arrived` record is durable (`Event::Committed`).
//!
//! A failed write or sync is never fatal (Postfix's qmgr does not die on a
//! full disk either): the journal keeps every record it could not write,
//! at its position, and the writer tries again every `RETRY`. While it
//! fails the writer is stalled: arrivals waiting for the failed commit are
//! refused (`Event::Refused`; their `Arrived` record is taken back by a
//! `Removed` one, so a client that retries does not get the message
//! twice), new arrivals are refused at once, and delivery results wait in
//! memory to be written when space returns. One `Stalled` event when
//! writes start failing and one `Resumed` when they work again: the shell
//! logs state changes, not records. A removed message's data goes only
//! once its `Removed` record is durable (`Event::Remove`). Panics on
//! nothing; does not log.

use std::time::{Duration, Instant};

use daemon::ipcserver::ClientId;
use mail::QueueId;
use queue::{Journal, Lsn, Record, Replay, Storage, Syncer};

/// How often a stalled journal is tried again.
pub const RETRY: Duration = Duration::from_secs(1);

/// An arrival waiting for its group commit.
#[derive(Debug)]
pub struct Ack {
    /// Durable once the journal's durable end passes this.
    pub end: Lsn,
    /// The cleanup connection to answer.
    pub client: ClientId,
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
    /// the data goes when that is durable (`Event::Remove`), not now.
    pub taken_back: bool,
}

/// What the writer did, for the shell to act on and log.
#[derive(Debug)]
pub enum Event {
    /// An arrival's records are durable: answer it, hand it to delivery.
    Committed(Ack),
    /// An arrival could not be made durable: answer it with a failure.
    Refused(Ack, Refusal),
    /// A removed message's `Removed` record is durable: free its data.
    Remove(QueueId, Storage),
    /// Journal writes started failing (the first failure of a stall).
    Stalled(Refusal),
    /// Journal writes work again after failing this long.
    Resumed(Duration),
}

#[derive(Debug)]
struct Stall {
    since: Instant,
    retry_at: Instant,
    why: Refusal,
}

/// The journal, its sync thread, and what waits for durability.
#[derive(Debug)]
pub struct Writer {
    journal: Journal,
    syncer: Option<Syncer>,
    acks: Vec<Ack>,
    removals: Vec<(Lsn, QueueId, Storage)>,
    stall: Option<Stall>,
    events: Vec<Event>,
}

impl Writer {
    /// Writes `journal`, committing inline until `set_syncer`.
    pub fn new(journal: Journal) -> Self {
        Self {
            journal,
            syncer: None,
            acks: Vec::new(),
            removals: Vec::new(),
            stall: None,
            events: Vec::new(),
        }
    }

    /// Commits on this sync thread from now on.
    pub fn set_syncer(&mut self, syncer: Syncer) {
        self.syncer = Some(syncer);
    }

    /// The journal (reads, garbage collection).
    pub fn journal_mut(&mut self) -> &mut Journal {
        &mut self.journal
    }

    /// Where what is durable ends.
    pub fn durable_end(&self) -> Lsn {
        self.journal.durable()
    }

    /// Reads back the record at `lsn`, durable or not.
    pub fn read_at(&self, lsn: Lsn) -> queue::Result<Record> {
        self.journal.read_at(lsn)
    }

    /// Why writes fail, while they do.
    #[cfg(test)]
    pub fn stalled(&self) -> Option<&Refusal> {
        self.stall.as_ref().map(|s| &s.why)
    }

    /// Appends `rec` and applies it to `state`; fails only for a record
    /// that cannot be encoded (then nothing is appended).
    pub fn append(&mut self, rec: &Record, state: &mut Replay) -> queue::Result<Lsn> {
        let lsn = self.journal.append(rec)?;
        state.apply(lsn, rec);
        Ok(lsn)
    }

    /// Journals an arrival (`Arrived`, and `Held` for `ack.hold`); it is
    /// answered by a `Committed` or `Refused` event. Refused at once while
    /// stalled: then nothing is appended and the caller frees the data.
    pub fn arrive(
        &mut self,
        mut ack: Ack,
        arrived: &Record,
        state: &mut Replay,
    ) -> Result<(), Refusal> {
        if let Some(s) = &self.stall {
            return Err(s.why.clone());
        }
        let refusal = |e: &queue::Error, taken_back| Refusal {
            reason: e.to_string(),
            disk_full: e.is_disk_full(),
            taken_back,
        };
        self.append(arrived, state)
            .map_err(|e| refusal(&e, false))?;
        if ack.hold {
            let held = Record::Held { id: ack.id };
            if let Err(e) = self.append(&held, state) {
                // Arrived is in the journal already: take it back, and let
                // the data go only once that is durable.
                self.take_back(ack.id, ack.storage, state);
                return Err(refusal(&e, true));
            }
        }
        ack.end = self.journal.end();
        self.acks.push(ack);
        Ok(())
    }

    /// Appends `Removed` for an arrival that is not to be; its data goes once that is durable.
    fn take_back(&mut self, id: QueueId, storage: Storage, state: &mut Replay) {
        // A Removed record always encodes.
        let _ = self.append(&Record::Removed { id }, state);
        self.remove_later(id, storage);
    }

    /// Frees a message's data once everything appended so far (its
    /// `Removed` record) is durable.
    pub fn remove_later(&mut self, id: QueueId, storage: Storage) {
        self.removals.push((self.journal.end(), id, storage));
    }

    /// Starts a group commit of what was appended, unless one is running,
    /// or writes are failing and the next try is not due.
    pub fn commit(&mut self, now: Instant, state: &mut Replay) {
        if self.stall.as_ref().is_some_and(|s| now < s.retry_at) {
            return;
        }
        if !self.journal.has_pending() {
            if self.stall.is_some() && !self.syncer.as_ref().is_some_and(Syncer::in_flight) {
                self.resume(now);
            }
            return;
        }
        let res = match self.syncer.as_mut() {
            None => self.journal.commit().map(Some),
            Some(s) => s.kick(&mut self.journal).map(|_| None),
        };
        match res {
            Ok(Some(end)) => self.durable(end, now),
            Ok(None) => {}
            Err(e) => self.failed(&e, now, state),
        }
    }

    /// Collects a finished sync (the sync thread woke the loop).
    pub fn synced(&mut self, now: Instant, state: &mut Replay) {
        let Some(s) = self.syncer.as_mut() else {
            return;
        };
        match s.poll(&mut self.journal) {
            Ok(Some(end)) => self.durable(end, now),
            Ok(None) => {}
            Err(e) => self.failed(&e, now, state),
        }
    }

    fn durable(&mut self, end: Lsn, now: Instant) {
        self.resume(now);
        let (done, waiting): (Vec<Ack>, Vec<Ack>) = std::mem::take(&mut self.acks)
            .into_iter()
            .partition(|a| a.end <= end);
        self.acks = waiting;
        self.events.extend(done.into_iter().map(Event::Committed));
        let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.removals)
            .into_iter()
            .partition(|(l, _, _)| *l <= end);
        self.removals = keep;
        self.events
            .extend(gone.into_iter().map(|(_, id, st)| Event::Remove(id, st)));
    }

    fn resume(&mut self, now: Instant) {
        if let Some(s) = self.stall.take() {
            self.events
                .push(Event::Resumed(now.duration_since(s.since)));
        }
    }

    fn failed(&mut self, e: &queue::Error, now: Instant, state: &mut Replay) {
        let why = Refusal {
            reason: e.to_string(),
            disk_full: e.is_disk_full(),
            taken_back: false,
        };
        let since = match &self.stall {
            Some(s) => s.since,
            None => {
                self.events.push(Event::Stalled(why.clone()));
                now
            }
        };
        self.stall = Some(Stall {
            since,
            retry_at: now + RETRY,
            why: why.clone(),
        });
        // Cleanup is not kept waiting on a disk that may stay full: the
        // arrivals of the failed commit are refused now and taken back.
        for a in std::mem::take(&mut self.acks) {
            self.take_back(a.id, a.storage, state);
            let why = Refusal {
                taken_back: true,
                ..why.clone()
            };
            self.events.push(Event::Refused(a, why));
        }
    }

    /// When a stalled journal is to be tried again.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.stall.as_ref().map(|s| s.retry_at)
    }

    /// What happened since the last call.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// At exit: waits for the sync thread and makes what it can durable.
    pub fn shutdown(&mut self, now: Instant, state: &mut Replay) {
        let res = match self.syncer.as_mut() {
            Some(s) => s.wait_all(&mut self.journal),
            None => self.journal.commit(),
        };
        match res {
            Ok(end) => self.durable(end, now),
            Err(e) => self.failed(&e, now, state),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mail::{Envelope, Recipient};
    use queue::disk::{Fault, FaultyDisk};
    use queue::{DataRef, MessageHead, SpoolConfig};
    use std::path::Path;
    use std::sync::Arc;

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
            data: DataRef::Inline(format!("Subject: {n}\r\n\r\nhi\r\n").into_bytes()),
        })
    }

    fn ack(n: u32, hold: bool) -> Ack {
        Ack {
            end: Lsn::default(),
            client: ClientId::from_number(7),
            request: n as u64,
            id: id(n),
            storage: Storage::Inline,
            summary: format!("{}: arrived", id(n)),
            hold,
        }
    }

    struct Qmgr {
        w: Writer,
        state: Replay,
        disk: FaultyDisk,
        now: Instant,
    }

    impl Qmgr {
        fn start(root: &Path, syncer: bool) -> Self {
            let disk = FaultyDisk::new();
            let r =
                queue::recover_on(root, SpoolConfig::default(), Arc::new(disk.clone())).unwrap();
            let mut w = Writer::new(r.journal);
            if syncer {
                w.set_syncer(Syncer::spawn(|| {}).unwrap());
            }
            Qmgr {
                w,
                state: r.state,
                disk,
                now: Instant::now(),
            }
        }

        /// One loop turn: commit, wait for the sync thread if it runs, collect.
        fn turn(&mut self) -> Vec<Event> {
            self.w.commit(self.now, &mut self.state);
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.w.syncer.as_ref().is_some_and(Syncer::in_flight) {
                assert!(Instant::now() < deadline, "sync thread stuck");
                std::thread::sleep(Duration::from_millis(1));
                self.w.synced(self.now, &mut self.state);
            }
            self.w.take_events()
        }

        fn later(&mut self) {
            self.now += RETRY;
        }
    }

    fn committed(ev: &[Event]) -> Vec<QueueId> {
        ev.iter()
            .filter_map(|e| match e {
                Event::Committed(a) => Some(a.id),
                _ => None,
            })
            .collect()
    }

    fn refused(ev: &[Event]) -> Vec<QueueId> {
        ev.iter()
            .filter_map(|e| match e {
                Event::Refused(a, _) => Some(a.id),
                _ => None,
            })
            .collect()
    }

    fn replayed(root: &Path) -> Replay {
        queue::recover(root, SpoolConfig::default()).unwrap().state
    }

    #[test]
    fn a_full_disk_refuses_arrivals_keeps_results_and_resumes_on_its_own() {
        for syncer in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let mut q = Qmgr::start(dir.path(), syncer);
            q.w.arrive(ack(1, false), &arrived(1), &mut q.state)
                .unwrap();
            assert_eq!(committed(&q.turn()), vec![id(1)]);

            q.disk.set_full(true);
            q.w.arrive(ack(2, false), &arrived(2), &mut q.state)
                .unwrap();
            // A delivery result made while the disk fills.
            q.w.append(
                &Record::Delivered {
                    id: id(1),
                    rcpts: vec![0],
                },
                &mut q.state,
            )
            .unwrap();
            let ev = q.turn();
            assert_eq!(refused(&ev), vec![id(2)], "{ev:?}");
            let stalls = ev
                .iter()
                .filter(|e| matches!(e, Event::Stalled(r) if r.disk_full))
                .count();
            assert_eq!(stalls, 1, "{ev:?}");
            assert!(!q.state.messages.contains_key(&id(2)), "taken back");
            // Stalled: arrivals refused at once, no retry before it is due,
            // and each retry that fails says nothing new.
            let r =
                q.w.arrive(ack(3, false), &arrived(3), &mut q.state)
                    .unwrap_err();
            assert!(r.disk_full);
            let writes = q.disk.writes();
            assert!(q.turn().is_empty());
            assert_eq!(q.disk.writes(), writes, "no retry before RETRY");
            assert!(q.w.next_deadline().is_some());
            for _ in 0..3 {
                q.later();
                assert!(q.turn().is_empty());
            }
            assert!(q.disk.writes() > writes, "retried");

            // Space returns: the next retry resumes, nothing restarted.
            q.disk.set_full(false);
            q.later();
            let ev = q.turn();
            assert!(
                ev.iter()
                    .any(|e| matches!(e, Event::Resumed(d) if *d >= RETRY * 3)),
                "{ev:?}"
            );
            assert!(q.w.stalled().is_none() && q.w.next_deadline().is_none());
            q.w.arrive(ack(4, false), &arrived(4), &mut q.state)
                .unwrap();
            assert_eq!(committed(&q.turn()), vec![id(4)]);
            q.w.shutdown(q.now, &mut q.state);
            drop(q);

            // After a restart: the acknowledged messages, the result kept
            // in memory during the stall, and no refused one.
            let st = replayed(dir.path());
            let mut live: Vec<QueueId> = st.messages.keys().copied().collect();
            live.sort();
            assert_eq!(live, vec![id(1), id(4)], "syncer {syncer}");
            assert_eq!(st.done(id(1)), &[0]);
        }
    }

    #[test]
    fn a_held_arrival_whose_commit_fails_is_removed_and_its_data_freed_after() {
        let dir = tempfile::tempdir().unwrap();
        let mut q = Qmgr::start(dir.path(), false);
        // A held arrival in a pool slot: Arrived and Held are written, the
        // sync fails and loses them.
        let mut a = ack(1, true);
        a.storage = Storage::Pool(3);
        q.w.arrive(a, &arrived(1), &mut q.state).unwrap();
        assert!(q.state.messages[&id(1)].held);
        q.disk.fail_sync(1, Fault::Io);
        let ev = q.turn();
        assert_eq!(refused(&ev), vec![id(1)]);
        // The slot is not freed before the Removed record is durable: a
        // crash could still replay Arrived and Held without it.
        assert!(!ev.iter().any(|e| matches!(e, Event::Remove(..))), "{ev:?}");
        assert!(!q.state.messages.contains_key(&id(1)));
        q.later();
        let ev = q.turn();
        assert!(
            ev.iter()
                .any(|e| matches!(e, Event::Remove(i, Storage::Pool(3)) if *i == id(1))),
            "{ev:?}"
        );
        assert!(ev.iter().any(|e| matches!(e, Event::Resumed(_))));
        drop(q);
        let st = replayed(dir.path());
        assert!(st.messages.is_empty(), "{:?}", st.messages.keys());
    }

    #[test]
    fn a_short_write_then_no_space_loses_no_acknowledged_arrival() {
        let dir = tempfile::tempdir().unwrap();
        let mut q = Qmgr::start(dir.path(), true);
        let mut acked = Vec::new();
        for n in 0..40 {
            q.w.arrive(ack(n, n % 5 == 0), &arrived(n), &mut q.state)
                .ok();
            if n % 7 == 3 {
                q.disk.fail_write(1, Fault::Short(11));
                q.disk.fail_write(2, Fault::NoSpace);
            }
            let ev = q.turn();
            acked.extend(committed(&ev));
            for r in refused(&ev) {
                assert!(!acked.contains(&r));
            }
            if q.w.stalled().is_some() {
                q.later();
            }
        }
        q.w.shutdown(q.now, &mut q.state);
        acked.extend(committed(&q.w.take_events()));
        assert!(acked.len() >= 20, "{} acknowledged", acked.len());
        drop(q);
        let st = replayed(dir.path());
        acked.sort();
        let mut live: Vec<QueueId> = st.messages.keys().copied().collect();
        live.sort();
        assert_eq!(live, acked, "exactly the acknowledged arrivals are queued");
        assert!(st.torn.is_empty(), "{:?}", st.torn);
    }
}
