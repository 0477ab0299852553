//! The journal and the spool as the queue logic sees them.
//!
//! Appending only buffers (the shell's group commit makes records durable,
//! and answers arrivals once they are); reads are of the local journal and
//! message files, bounded by the record and message size limits. The
//! queue state follows every append at once, as replay would have left it.
//! [`DiskStore`] is the journal (through `queue::JournalWriter`, the group
//! commit) and the spool's message files, as qmgr runs; [`MemStore`] keeps
//! everything in memory, for tests and the simulator.

use std::cell::Cell;
use std::collections::HashMap;
use std::io::Read;

use mail::QueueId;
use queue::{DataRef, Journal, JournalWriter, Lsn, Record, Replay, Spool};

use crate::{Action, QueueManager, Time};

/// Where the queue manager keeps records and reads messages.
pub trait Store {
    /// Appends `rec` (made durable by the shell's next commit) and applies
    /// it to `state`. Fails only for a record that cannot be encoded; then
    /// nothing is appended.
    fn append(&mut self, rec: &Record, state: &mut Replay) -> Result<Lsn, String>;
    /// Reads back the record at `lsn`, durable or not.
    fn read_at(&self, lsn: Lsn) -> Result<Record, String>;
    /// Where what is durable ends: records before it are in the journal's
    /// files, where agents can read their inline data by reference.
    fn durable(&self) -> Lsn;
    /// Where what is appended ends: durable once [`Store::durable`] reaches it.
    fn end(&self) -> Lsn;
    /// Whether a commit is under way (on the journal's sync thread).
    fn committing(&self) -> bool {
        false
    }
    /// A message's content in wire form, whole or its first `limit` bytes.
    fn read_data(
        &self,
        id: QueueId,
        data: &DataRef,
        limit: Option<usize>,
    ) -> Result<Vec<u8>, String>;
}

/// The journal writer and the spool.
#[derive(Debug)]
pub struct DiskStore {
    /// Appends, group commit, what waits for durability.
    pub writer: JournalWriter,
    /// Message files.
    pub spool: Spool,
}

impl DiskStore {
    /// Writes `journal`, reads messages from `spool`.
    pub fn new(spool: Spool, journal: Journal) -> Self {
        DiskStore {
            writer: JournalWriter::new(journal),
            spool,
        }
    }
}

impl Store for DiskStore {
    fn append(&mut self, rec: &Record, state: &mut Replay) -> Result<Lsn, String> {
        self.writer.append(rec, state).map_err(|e| e.to_string())
    }

    fn read_at(&self, lsn: Lsn) -> Result<Record, String> {
        self.writer.read_at(lsn).map_err(|e| e.to_string())
    }

    fn durable(&self) -> Lsn {
        self.writer.durable_end()
    }

    fn end(&self) -> Lsn {
        self.writer.end()
    }

    fn committing(&self) -> bool {
        self.writer.in_flight()
    }

    fn read_data(
        &self,
        id: QueueId,
        data: &DataRef,
        limit: Option<usize>,
    ) -> Result<Vec<u8>, String> {
        let d = self.spool.open_data(id, data).map_err(|e| e.to_string())?;
        let mut v = Vec::new();
        let res = match limit {
            Some(n) => d.take(n as u64).read_to_end(&mut v),
            None => {
                let mut d = d;
                d.read_to_end(&mut v)
            }
        };
        res.map_err(|e| e.to_string())?;
        Ok(v)
    }
}

impl QueueManager<DiskStore> {
    /// Starts a group commit when one is due at `now` (not while a
    /// stalled journal waits for its next try); whether what came of it,
    /// if known now, was news (then the shell carries out the actions).
    pub fn commit_when_due(&mut self, now: Time) -> bool {
        if !self.commit_due(now) || self.store().committing() {
            return false;
        }
        self.started_commit();
        match self.store_mut().writer.commit() {
            Some(r) => self.committed(now, r.map_err(Into::into)),
            None => false,
        }
    }

    /// The sync thread woke the loop: whether the sync it finished was
    /// news, and why the journal's next segment could not be written
    /// ahead, worded for the log.
    pub fn synced(&mut self, now: Time) -> (bool, Option<String>) {
        let news = match self.store_mut().writer.synced() {
            Some(r) => self.committed(now, r.map_err(Into::into)),
            None => false,
        };
        let ahead =
            self.store_mut().writer.ahead_error().map(|e| {
                format!("journal: writing the next segment ahead: {e}; appending meanwhile")
            });
        (news, ahead)
    }

    /// At exit: waits for the sync thread, makes what it can durable, and
    /// gives what is still worth doing ([`QueueManager::closing`]).
    pub fn close_journal(&mut self, now: Time) -> Vec<Action> {
        let r = self.store_mut().writer.shutdown().map_err(Into::into);
        self.closing(now, r)
    }
}

/// A store in memory: every record appended, and message files by id.
#[derive(Debug, Default)]
pub struct MemStore {
    records: Vec<Record>,
    at: HashMap<Lsn, usize>,
    files: HashMap<QueueId, Vec<u8>>,
    next: u32,
    /// Records read back, for tests of what costs a journal read.
    reads: Cell<usize>,
}

impl MemStore {
    /// Keeps the content of a message whose data is not inline.
    pub fn put_file(&mut self, id: QueueId, bytes: Vec<u8>) {
        self.files.insert(id, bytes);
    }

    /// Every record appended, in order.
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.records.iter()
    }

    /// How many records were read back so far.
    pub fn reads(&self) -> usize {
        self.reads.get()
    }

    /// The records appended after the first `n`.
    pub fn records_since(&self, n: usize) -> &[Record] {
        self.records.get(n..).unwrap_or(&[])
    }
}

impl Store for MemStore {
    fn append(&mut self, rec: &Record, state: &mut Replay) -> Result<Lsn, String> {
        self.next += 1;
        let lsn = Lsn::new(1, self.next);
        self.at.insert(lsn, self.records.len());
        self.records.push(rec.clone());
        state.apply(lsn, rec);
        Ok(lsn)
    }

    fn read_at(&self, lsn: Lsn) -> Result<Record, String> {
        self.reads.set(self.reads.get() + 1);
        self.at
            .get(&lsn)
            .map(|&i| self.records[i].clone())
            .ok_or_else(|| format!("no record at offset {}", lsn.0))
    }

    /// Everything is durable in memory.
    fn durable(&self) -> Lsn {
        Lsn::new(u32::MAX, u32::MAX)
    }

    fn end(&self) -> Lsn {
        Lsn::new(1, self.next + 1)
    }

    fn read_data(
        &self,
        id: QueueId,
        data: &DataRef,
        limit: Option<usize>,
    ) -> Result<Vec<u8>, String> {
        let all = match data {
            DataRef::Inline(b) => b,
            _ => self
                .files
                .get(&id)
                .ok_or_else(|| format!("{id}: no message file"))?,
        };
        let n = limit.map_or(all.len(), |l| l.min(all.len()));
        Ok(all[..n].to_vec())
    }
}

/// The records that report new results: a retried message is restated
/// (`Rewritten`, then the bounces, successes and warning it still owes a
/// notice for), and those restated records are skipped.
pub fn fresh_results<'a>(
    recs: impl IntoIterator<Item = &'a Record>,
) -> impl Iterator<Item = &'a Record> {
    let mut restating = None;
    recs.into_iter().filter(move |r| {
        match r {
            Record::Rewritten { head, .. } => restating = Some(head.id),
            Record::Bounced { id, .. } | Record::Succeeded { id, .. } | Record::Warned { id }
                if restating == Some(*id) => {}
            _ => restating = None,
        }
        restating.is_none()
    })
}
