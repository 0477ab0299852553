//! The qmgr arrival protocol: cleanup announces a committed message.
//!
//! cleanup has made the message data durable (a message file, or nothing
//! yet for data carried inline); qmgr appends the `Arrived` record to the
//! journal and answers `Committed` only after the group commit that
//! contains it, so cleanup's `Queued` (and smtpd's 250) means both the data
//! and the record are on stable storage. An `Arrived` for a queue id qmgr
//! already knows (recovery adopted the file first) is answered `Committed`.

use serde::{Deserialize, Serialize};

/// Marker type for the arrival protocol.
#[derive(Debug)]
pub enum Qmgr {}

impl crate::Protocol for Qmgr {
    const NAME: &'static str = "sluice-qmgr";
    const VERSION: u32 = 2;
    type Request = Request;
    type Response = Response;
}

/// What cleanup sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// A message whose data is durable (or inline here).
    Arrived {
        /// Queue id, envelope and where the data is.
        head: queue::MessageHead,
        /// Put it on hold (access HOLD, or `sluice queue hold` policy).
        hold: bool,
    },
}

/// qmgr's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The `Arrived` record is on stable storage.
    Committed,
    /// It could not be journaled; `disk_full` selects 452 4.3.1 over 451 4.3.0.
    Failed {
        /// Why.
        reason: String,
        /// The file system is full.
        disk_full: bool,
    },
}
