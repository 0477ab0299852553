//! The queue manager's [`Store`] on disk: the journal (through the group
//! commit writer) and the spool's message files; and the log of recovery.

use std::io::Read;
use std::time::Instant;

use daemon::{msg_info, msg_warn};
use mail::QueueId;
use queue::{DataRef, Journal, Lsn, Record, Replay, Spool};
use queue_manager::Store;

use crate::journal::Writer;

/// The journal writer and the spool.
pub struct Disk {
    /// Appends, group commit, what waits for durability.
    pub writer: Writer,
    /// Message files.
    pub spool: Spool,
}

impl Disk {
    /// Writes `journal`, reads messages from `spool`.
    pub fn new(spool: Spool, journal: Journal) -> Self {
        Disk {
            writer: Writer::new(journal),
            spool,
        }
    }
}

impl Store for Disk {
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

/// Logs what recovery found.
pub fn log_recovery(rec: &queue::Recovered, started: Instant) {
    let r = &rec.report;
    for t in &rec.state.torn {
        msg_warn!(
            "journal segment {}: {} {} bytes of torn or corrupt tail at offset {} ({:?})",
            t.segment,
            if t.cut { "cut" } else { "ignored" },
            t.dropped,
            t.offset,
            t.cause
        );
    }
    for (p, why) in &r.left {
        msg_warn!("{}: left for the next recovery: {why}", p.display());
    }
    if let Some(e) = &r.commit_failed {
        msg_warn!("journal: adopted messages not yet durable: {e}; trying again");
    }
    for p in &r.partial {
        msg_info!("removed partial message file {}", p.display());
    }
    for (p, why) in &r.corrupt {
        msg_warn!("removed corrupt message file {}: {why}", p.display());
    }
    for id in &r.adopted {
        msg_info!("{id}: adopted a committed message file that was never announced");
    }
    for id in &r.missing {
        msg_warn!("{id}: message file is missing");
    }
    msg_info!(
        "recovered {} messages ({} deferred) from {} journal records in {} ms",
        rec.state.messages.len(),
        rec.state.deferred.len(),
        rec.state.records,
        started.elapsed().as_millis()
    );
}
