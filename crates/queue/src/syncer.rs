//! Real group commit: journal syncs on a dedicated thread.
//!
//! The event loop keeps appending records while one `fdatasync` runs on the
//! sync thread; everything appended meanwhile goes into the next sync. The
//! loop calls `kick` after appending, and `poll` when woken by the `notify`
//! callback (e.g. a mio `Waker`); `poll` gives the new durable position so
//! the loop can acknowledge every record below it. At most one sync is in
//! flight. A failed write (from `kick`) or sync (from `poll`) is returned
//! and loses nothing: the records stay pending in the journal, to be
//! written again by the next `kick`. Panics on nothing; the thread exits
//! when the `Syncer` is dropped.

use crate::error::{Error, Result};
use crate::journal::{Journal, SyncTicket};
use crate::record::Lsn;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;

/// The sync thread and the one sync it may be running.
#[derive(Debug)]
pub struct Syncer {
    tx: Option<Sender<SyncTicket>>,
    rx: Receiver<Result<Lsn>>,
    handle: Option<JoinHandle<()>>,
    in_flight: bool,
}

impl Syncer {
    /// Starts the thread; `notify` is called after each sync completes.
    pub fn spawn(notify: impl Fn() + Send + 'static) -> Result<Self> {
        let (tx, trx) = channel::<SyncTicket>();
        let (rtx, rx) = channel();
        let handle = std::thread::Builder::new()
            .name("journal-sync".into())
            .spawn(move || {
                for t in trx {
                    if rtx.send(t.run()).is_err() {
                        break;
                    }
                    notify();
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
        })
    }

    /// Whether a sync is running.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Starts a sync of everything appended, unless one is running; true if started.
    pub fn kick(&mut self, journal: &mut Journal) -> Result<bool> {
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
        if !self.in_flight {
            return Ok(None);
        }
        match self.rx.try_recv() {
            Ok(res) => self.finished(res, journal).map(Some),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(Error::SyncerGone),
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

    /// Blocks until everything appended so far is durable (shutdown, tests).
    pub fn wait_all(&mut self, journal: &mut Journal) -> Result<Lsn> {
        loop {
            if !self.in_flight && !self.kick(journal)? {
                return Ok(journal.durable());
            }
            let res = self.rx.recv().map_err(|_| Error::SyncerGone)?;
            self.finished(res, journal)?;
            self.kick(journal)?;
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
