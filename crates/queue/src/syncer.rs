//! Real group commit: journal syncs on a dedicated thread.
//!
//! The event loop keeps appending records while one `fdatasync` runs on the
//! sync thread; everything appended meanwhile goes into the next sync. The
//! loop calls `kick` after appending, and `poll` when woken by the `notify`
//! callback (e.g. a mio `Waker`); `poll` gives the new durable position so
//! the loop can acknowledge every record below it. At most one sync is in
//! flight. A failed write (from `kick`) or sync (from `poll`) is returned
//! and loses nothing: the records stay pending in the journal, to be
//! written again by the next `kick`.
//!
//! A second thread writes the journal's next segment ahead (`ahead`): the
//! loop hands it the journal's `segment_job` from `kick` and `poll` (and
//! `prepare_ahead`, at start), and `poll` gives the journal what came of
//! it; a failure is kept for `take_ahead_error` (the caller logs it) and
//! the journal appends meanwhile. The zeros never wait in line with a
//! commit. Panics on nothing; the threads exit when the `Syncer` is
//! dropped (a segment being written ahead is abandoned and removed).

use crate::ahead::{ReadySegment, SegmentJob};
use crate::error::{Error, Result};
use crate::journal::{Journal, SyncTicket};
use crate::lsn::Lsn;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The sync thread and the one sync it may be running.
#[derive(Debug)]
pub struct Syncer {
    tx: Option<Sender<SyncTicket>>,
    rx: Receiver<Result<Lsn>>,
    handle: Option<JoinHandle<()>>,
    in_flight: bool,
    ahead: Option<AheadThread>,
    ahead_error: Option<Error>,
}

/// The thread that writes segments ahead, and whether it is busy.
#[derive(Debug)]
struct AheadThread {
    tx: Option<Sender<SegmentJob>>,
    rx: Receiver<Result<ReadySegment>>,
    handle: Option<JoinHandle<()>>,
    cancel: Arc<AtomicBool>,
    busy: bool,
}

impl Syncer {
    /// Starts the threads; `notify` is called after each sync completes
    /// and each segment written ahead is done.
    pub fn spawn(notify: impl Fn() + Send + Sync + 'static) -> Result<Self> {
        let notify = Arc::new(notify);
        let mut s = Self::spawn_appending({
            let n = notify.clone();
            move || n()
        })?;
        let (tx, jrx) = channel::<SegmentJob>();
        let (rtx, rx) = channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = cancel.clone();
        let handle = std::thread::Builder::new()
            .name("journal-ahead".into())
            .spawn(move || {
                for job in jrx {
                    if rtx.send(job.run(&stop)).is_err() {
                        break;
                    }
                    notify();
                }
            })
            .map_err(|e| Error::Io {
                op: "spawn write-ahead thread",
                path: PathBuf::new(),
                source: e,
            })?;
        s.ahead = Some(AheadThread {
            tx: Some(tx),
            rx,
            handle: Some(handle),
            cancel,
            busy: false,
        });
        Ok(s)
    }

    /// Starts the sync thread only: segments are appended, never written
    /// ahead (as before write-ahead; benchmarks compare the two).
    pub fn spawn_appending(notify: impl Fn() + Send + 'static) -> Result<Self> {
        let (tx, trx) = channel::<SyncTicket>();
        let (rtx, rx) = channel();
        let handle = std::thread::Builder::new()
            .name("journal-sync".into())
            .spawn(move || {
                for t in trx {
                    // A panic (a bug) ends the thread, but its failure is
                    // still sent and the loop woken: nothing else would
                    // tell it that the sync it waits for is never coming.
                    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.run()));
                    let died = res.is_err();
                    if rtx.send(res.unwrap_or(Err(Error::SyncerGone))).is_err() {
                        break;
                    }
                    notify();
                    if died {
                        break;
                    }
                }
            })
            .map_err(|e| Error::Io {
                op: "spawn sync thread",
                path: PathBuf::new(),
                source: e,
            })?;
        Ok(Self {
            tx: Some(tx),
            rx,
            handle: Some(handle),
            in_flight: false,
            ahead: None,
            ahead_error: None,
        })
    }

    /// Takes in a segment written ahead (or its failure), and starts the
    /// next one when the journal wants it. Non-blocking; `kick` and `poll`
    /// call it, and a caller may at start.
    pub fn prepare_ahead(&mut self, journal: &mut Journal) {
        let Some(a) = self.ahead.as_mut() else {
            return;
        };
        if a.busy {
            match a.rx.try_recv() {
                Ok(res) => {
                    a.busy = false;
                    if let Err(e) = journal.segment_ready(res) {
                        self.ahead_error = Some(e);
                    }
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    // The thread is gone: append from now on.
                    self.ahead = None;
                    let _ = journal.segment_ready(Err(Error::SyncerGone));
                    self.ahead_error = Some(Error::SyncerGone);
                    return;
                }
            }
        }
        if let Some(job) = journal.segment_job() {
            let sent = a.tx.as_ref().map(|tx| tx.send(job));
            match sent {
                Some(Ok(())) => a.busy = true,
                _ => {
                    let _ = journal.segment_ready(Err(Error::SyncerGone));
                    self.ahead = None;
                }
            }
        }
    }

    /// Whether a segment is being written ahead.
    pub fn ahead_busy(&self) -> bool {
        self.ahead.as_ref().is_some_and(|a| a.busy)
    }

    /// Why the last segment could not be written ahead, once (for the log).
    pub fn take_ahead_error(&mut self) -> Option<Error> {
        self.ahead_error.take()
    }

    /// Whether a sync is running.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Starts a sync of everything appended, unless one is running; true if started.
    pub fn kick(&mut self, journal: &mut Journal) -> Result<bool> {
        self.prepare_ahead(journal);
        if self.in_flight || !journal.has_pending() {
            return Ok(false);
        }
        let Some(ticket) = journal.prepare_commit()? else {
            return Ok(false);
        };
        self.tx
            .as_ref()
            .ok_or(Error::SyncerGone)?
            .send(ticket)
            .map_err(|_| Error::SyncerGone)?;
        self.in_flight = true;
        Ok(true)
    }

    /// Collects a finished sync (non-blocking); gives the new durable end.
    ///
    /// Call `kick` after it for what was appended meanwhile.
    pub fn poll(&mut self, journal: &mut Journal) -> Result<Option<Lsn>> {
        self.prepare_ahead(journal);
        if !self.in_flight {
            return Ok(None);
        }
        match self.rx.try_recv() {
            Ok(res) => self.finished(res, journal).map(Some),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => {
                // The thread died (a panic) in the middle of a sync: no
                // sync runs any more, and what it was given may not be
                // on disk, so it is written again by the next commit.
                self.in_flight = false;
                journal.sync_failed();
                Err(Error::SyncerGone)
            }
        }
    }

    fn finished(&mut self, res: Result<Lsn>, journal: &mut Journal) -> Result<Lsn> {
        self.in_flight = false;
        match res {
            Ok(end) => {
                journal.mark_durable(end);
                Ok(journal.durable())
            }
            Err(e) => {
                journal.sync_failed();
                Err(e)
            }
        }
    }

    /// Blocks until everything appended so far is durable (shutdown, tests);
    /// with the sync thread gone, commits what is left inline.
    pub fn wait_all(&mut self, journal: &mut Journal) -> Result<Lsn> {
        loop {
            let kicked = match self.in_flight {
                true => Ok(true),
                false => self.kick(journal),
            };
            match kicked {
                Ok(false) => return Ok(journal.durable()),
                Ok(true) => {}
                Err(Error::SyncerGone) => return journal.commit(),
                Err(e) => return Err(e),
            }
            let res = self.rx.recv().unwrap_or(Err(Error::SyncerGone));
            match self.finished(res, journal) {
                Ok(_) => {}
                Err(Error::SyncerGone) => return journal.commit(),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        if let Some(a) = self.ahead.as_mut() {
            a.cancel.store(true, Ordering::Relaxed);
            a.tx.take();
            if let Some(h) = a.handle.take() {
                let _ = h.join();
            }
        }
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
