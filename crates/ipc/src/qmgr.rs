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
    const VERSION: u32 = 4;
    type Request = Request;
    type Response = Response;
}

/// What cleanup sends (and transferd).
// `Arrived` is the hot path and the others rare: not boxed, to save an
// allocation per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// A message whose data is durable (or inline here).
    Arrived {
        /// Queue id, envelope and where the data is.
        head: queue::MessageHead,
        /// Put it on hold (access HOLD, or `sluice queue hold` policy).
        hold: bool,
    },
    /// transferd(8) received a message moved from another instance; its
    /// data is durable (or inline here). It is journaled on hold, out of
    /// delivery until `Settle`; answered `Committed` once durable.
    Import {
        /// The message as the sender had it, under the receiver's queue id.
        moved: Box<crate::queuectl::Movable>,
        /// The sender's transfer id.
        transfer: String,
        /// The sending instance.
        from: String,
    },
    /// The transfer of this imported message is settled: it joins
    /// delivery (or stays on hold if it came so). Answered `Committed`.
    Settle {
        /// Its queue id.
        id: mail::QueueId,
    },
    /// The imported messages not settled yet, with their transfer ids.
    Unsettled,
}

/// Bytes of an `Arrived` request's encoding after its inline data (the
/// `hold` flag): cleanup writes the data from its own buffer, spliced in
/// there ([`crate::Endpoint::queue_spliced`]), not copied into the frame.
pub const ARRIVED_AFTER_DATA: usize = 1;

/// qmgr's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The `Arrived` record is on stable storage.
    Committed,
    /// The answer to `Unsettled`: (transfer id, queue id) pairs.
    Unsettled(Vec<(String, mail::QueueId)>),
    /// It could not be journaled; `disk_full` selects 452 4.3.1 over 451 4.3.0.
    Failed {
        /// Why.
        reason: String,
        /// The file system is full.
        disk_full: bool,
    },
}
