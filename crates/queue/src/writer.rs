//! The journal's group-commit driver: the journal and, once the loop has
//! one, its sync thread.
//!
//! The journal's only writer (qmgr) appends records through it (each
//! applied to the queue state at once, as replay would) and asks it to
//! commit; it runs the group commit (one fdatasync on the sync thread, or
//! inline without one, for everything appended meanwhile) and reports what
//! came of it, durable up to a position or an error, for the caller to
//! decide on (crates/qmgr's `journal`: what waits for durability, a failed
//! commit retried every second). With a sync thread the journal's next
//! segment is written ahead on a thread of its own; a failure there (a
//! full disk) costs only the speed of appending, and is handed up once by
//! `ahead_error` for the log. Panics on nothing; does not log.

use crate::error::Result;
use crate::journal::Journal;
use crate::lsn::Lsn;
use crate::record::Record;
use crate::replay::Replay;
use crate::syncer::Syncer;

/// The journal and its sync thread.
#[derive(Debug)]
pub struct JournalWriter {
    journal: Journal,
    syncer: Option<Syncer>,
}

impl JournalWriter {
    /// Writes `journal`, committing inline until `set_syncer`.
    pub fn new(journal: Journal) -> Self {
        Self {
            journal,
            syncer: None,
        }
    }

    /// Commits on this sync thread from now on.
    pub fn set_syncer(&mut self, mut syncer: Syncer) {
        // The first segment written ahead is ready before most first commits.
        syncer.prepare_ahead(&mut self.journal);
        self.syncer = Some(syncer);
    }

    /// Commits on a sync thread of its own from now on; `notify` is
    /// called from it when a sync or a segment written ahead is done.
    pub fn spawn_syncer(&mut self, notify: impl Fn() + Send + Sync + 'static) -> Result<()> {
        self.set_syncer(Syncer::spawn(notify)?);
        Ok(())
    }

    /// Why the journal's next segment could not be written ahead, once.
    pub fn ahead_error(&mut self) -> Option<crate::Error> {
        self.syncer.as_mut()?.take_ahead_error()
    }

    /// The journal (reads, garbage collection).
    pub fn journal_mut(&mut self) -> &mut Journal {
        &mut self.journal
    }

    /// Where what is durable ends.
    pub fn durable_end(&self) -> Lsn {
        self.journal.durable()
    }

    /// Where what is appended ends.
    pub fn end(&self) -> Lsn {
        self.journal.end()
    }

    /// Reads back the record at `lsn`, durable or not.
    pub fn read_at(&self, lsn: Lsn) -> Result<Record> {
        self.journal.read_at(lsn)
    }

    /// Appends `rec` and applies it to `state`; fails only for a record
    /// that cannot be encoded (then nothing is appended).
    pub fn append(&mut self, rec: &Record, state: &mut Replay) -> Result<Lsn> {
        let lsn = self.journal.append(rec)?;
        state.apply(lsn, rec);
        Ok(lsn)
    }

    /// Starts a group commit of what was appended, unless one is running.
    /// The outcome when it is known now: durable up to where (with nothing
    /// to commit, where it already was), or the error; `None` while the
    /// sync thread works (`synced` collects it).
    pub fn commit(&mut self) -> Option<Result<Lsn>> {
        if self.in_flight() {
            return None;
        }
        if !self.journal.has_pending() {
            return Some(Ok(self.journal.durable()));
        }
        let r = match self.syncer.as_mut() {
            None => Some(self.journal.commit()),
            Some(s) => s.kick(&mut self.journal).err().map(Err),
        };
        self.lost_syncer(r)
    }

    /// Collects a finished sync (the sync thread woke the loop).
    pub fn synced(&mut self) -> Option<Result<Lsn>> {
        let r = self.syncer.as_mut()?.poll(&mut self.journal).transpose();
        self.lost_syncer(r)
    }

    /// A sync thread that died (a panic) is dropped: the commits after
    /// its failed one are made inline, which blocks the caller for each
    /// fdatasync but loses nothing and never waits for ever for a thread
    /// that is gone.
    fn lost_syncer(&mut self, r: Option<Result<Lsn>>) -> Option<Result<Lsn>> {
        if matches!(r, Some(Err(crate::Error::SyncerGone))) {
            self.syncer = None;
        }
        r
    }

    /// At exit: waits for the sync thread and makes what it can durable.
    pub fn shutdown(&mut self) -> Result<Lsn> {
        match self.syncer.as_mut() {
            Some(s) => s.wait_all(&mut self.journal),
            None => self.journal.commit(),
        }
    }

    /// Whether the sync thread is working.
    pub fn in_flight(&self) -> bool {
        self.syncer.as_ref().is_some_and(Syncer::in_flight)
    }
}

#[cfg(test)]
mod tests {
    //! The writer alone, inline and on a sync thread, on a disk that fails
    //! on demand, checked against a restart's replay. (With the queue
    //! manager's bookkeeping: crates/qmgr's tests/disk_store.rs.)
    use super::*;
    use crate::disk::{Fault, FaultyDisk};
    use crate::{recover, recover_on, MessageHead, SpoolConfig};
    use crate::{DataRef, Recovered};
    use mail::{Envelope, QueueId, Recipient};
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

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

    fn open(root: &Path, disk: &FaultyDisk, syncer: bool) -> (JournalWriter, Replay) {
        let r: Recovered =
            recover_on(root, SpoolConfig::default(), Arc::new(disk.clone())).unwrap();
        let mut w = JournalWriter::new(r.journal);
        if syncer {
            w.spawn_syncer(|| {}).unwrap();
        }
        (w, r.state)
    }

    /// A commit's outcome, waiting for the sync thread if it runs.
    fn commit(w: &mut JournalWriter) -> Result<Lsn> {
        if let Some(r) = w.commit() {
            return r;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            assert!(Instant::now() < deadline, "sync thread stuck");
            if let Some(r) = w.synced() {
                return r;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits until no segment is being written ahead, so that the next
    /// sync the disk sees is a commit's (a fault planted for it would
    /// otherwise hit the write-ahead thread's sync, whichever runs first).
    fn settle_ahead(w: &mut JournalWriter) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Some(s) = w.syncer.as_mut() {
            s.prepare_ahead(&mut w.journal);
            if !s.ahead_busy() {
                return;
            }
            assert!(Instant::now() < deadline, "write-ahead thread stuck");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn live(root: &Path) -> Vec<QueueId> {
        let st = recover(root, SpoolConfig::default()).unwrap().state;
        let mut v: Vec<QueueId> = st.messages.keys().copied().collect();
        v.sort();
        v
    }

    #[test]
    fn what_is_appended_is_durable_after_one_commit_and_applied_at_once() {
        for syncer in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let disk = FaultyDisk::new();
            let (mut w, mut st) = open(dir.path(), &disk, syncer);
            let before = w.durable_end();
            assert_eq!(commit(&mut w).unwrap(), before, "nothing to commit");
            let mut last = before;
            for n in 0..3 {
                last = w.append(&arrived(n), &mut st).unwrap();
            }
            assert_eq!(st.messages.len(), 3, "applied before the commit");
            assert!(w.durable_end() < w.end());
            let syncs = disk.syncs();
            let end = commit(&mut w).unwrap();
            assert!(end > last && end == w.durable_end(), "{end:?} {last:?}");
            assert!(!w.in_flight());
            if !syncer {
                // (The thread's segment written ahead is synced too.)
                assert_eq!(disk.syncs(), syncs + 1, "one sync for the group");
            }
            assert!(matches!(w.read_at(before), Ok(Record::Arrived(_))));
            drop(w);
            assert_eq!(live(dir.path()), vec![id(0), id(1), id(2)], "{syncer}");
        }
    }

    #[test]
    fn a_failed_commit_keeps_the_records_for_the_next_and_shutdown_commits() {
        for syncer in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let disk = FaultyDisk::new();
            let (mut w, mut st) = open(dir.path(), &disk, syncer);
            w.append(&arrived(1), &mut st).unwrap();
            disk.set_full(true);
            let e = commit(&mut w).unwrap_err();
            assert!(e.is_disk_full(), "{e}");
            assert!(w.durable_end() < w.end(), "nothing durable");
            disk.set_full(false);
            w.append(&arrived(2), &mut st).unwrap();
            settle_ahead(&mut w);
            disk.fail_sync(1, Fault::Io);
            assert!(commit(&mut w).is_err());
            assert_eq!(w.shutdown().unwrap(), w.end());
            assert!(!w.in_flight());
            drop(w);
            assert_eq!(live(dir.path()), vec![id(1), id(2)], "{syncer}");
        }
    }

    /// At shutdown, a sync thread that died with records handed to it
    /// leaves them to be committed inline, not lost.
    #[test]
    fn shutdown_after_the_sync_thread_died_commits_inline() {
        let dir = tempfile::tempdir().unwrap();
        let disk = FaultyDisk::new();
        let (mut w, mut st) = open(dir.path(), &disk, true);
        w.append(&arrived(1), &mut st).unwrap();
        settle_ahead(&mut w);
        disk.fail_sync(1, Fault::Panic);
        assert!(w.commit().is_none(), "started on the sync thread");
        w.append(&arrived(2), &mut st).unwrap();
        assert_eq!(w.shutdown().unwrap(), w.end());
        drop(w);
        assert_eq!(live(dir.path()), vec![id(1), id(2)]);
    }

    /// A sync thread that dies in the middle of a sync (a bug) fails that
    /// commit; the writer then commits inline, writes the records again
    /// (the dead sync may not have reached the disk) and loses none.
    #[test]
    fn a_sync_thread_that_dies_leaves_the_writer_committing_inline() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let disk = FaultyDisk::new();
        let (mut w, mut st) = open(dir.path(), &disk, false);
        let woken = Arc::new(AtomicUsize::new(0));
        let count = woken.clone();
        w.set_syncer(
            Syncer::spawn_appending(move || {
                count.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap(),
        );
        w.append(&arrived(1), &mut st).unwrap();
        disk.fail_sync(1, Fault::Panic);
        assert!(w.commit().is_none(), "started on the sync thread");
        // The loop is woken for the sync that will never succeed.
        let deadline = Instant::now() + Duration::from_secs(5);
        while woken.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the dying thread woke nobody");
            std::thread::sleep(Duration::from_millis(1));
        }
        let e = w.synced().expect("its outcome").unwrap_err();
        assert!(matches!(e, crate::Error::SyncerGone), "{e}");
        assert!(!w.in_flight(), "still waiting for a thread that is gone");
        w.append(&arrived(2), &mut st).unwrap();
        // Inline: the outcome is known at once.
        assert_eq!(w.commit().expect("committed inline").unwrap(), w.end());
        drop(w);
        assert_eq!(live(dir.path()), vec![id(1), id(2)]);
    }
}
