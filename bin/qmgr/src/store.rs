//! The queue manager's [`Store`] on disk: the journal (through the group
//! commit writer) and the spool's message files; and the logging of what
//! recovery found (worded by crates/qmgr's `recovery`).

use std::io::Read;
use std::time::Instant;

use daemon::{msg_info, msg_warn};
use mail::QueueId;
use queue::{DataRef, Journal, Lsn, Record, Replay, Spool};
use queue_manager::{Level, Store};

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
    for (level, l) in queue_manager::recovery_lines(&rec.state, &rec.report, started.elapsed()) {
        match level {
            Level::Info => msg_info!("{l}"),
            Level::Warn => msg_warn!("{l}"),
        }
    }
}
