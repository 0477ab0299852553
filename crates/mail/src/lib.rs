//! Sluice's shared mail types: what spool, cleanup, qmgr and smtpd agree on.
//!
//! `QueueId` names a message for its whole life (sortable by arrival time,
//! printable like a Postfix long queue id); `Envelope` is the static
//! envelope written once with the message; `Recipient`, `Notify`, `Ret`,
//! `BodyType` carry the ESMTP/DSN options; `StatusCode` is an RFC 3463
//! enhanced status code and `Status` a code with its text, as delivery
//! results travel; `headers` the rules of a milter's header changes;
//! `logline` writes Postfix's per-recipient delivery line. Every type is serde-serializable: postcard on disk,
//! bincode over IPC. Nothing here reads a clock or panics on any input.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod dsn;
mod envelope;
pub mod headers;
pub mod logline;
pub mod notice;
pub mod orcpt;
mod queue_id;
mod remote;

pub use dsn::{DsnAction, Notify, ParseStatusError, Refusal, Ret, Status, StatusCode};
pub use envelope::{
    shaping_id, AsV1, BodyType, Envelope, EnvelopeV1, Recipient, Timestamp, MAX_SHAPING_ID,
};
pub use logline::orig_to;
pub use orcpt::Orcpt;
pub use queue_id::{ParseQueueIdError, QueueId, QueueIdGen};
pub use remote::{RemoteReply, Said};
