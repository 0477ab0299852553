//! Sluice's spool: message files, the pool, the journal, recovery.
//!
//! Storage follows fanf's spool design (DESIGN.md section 2): each message's
//! data is written once, with its static envelope, into a message file (its
//! own `msg/XX/<queue-id>` or a reused preallocated `pool/<n>` slot) or,
//! when small, inline into the journal; a global append-only journal of
//! framed records drives the queue and is group-committed (one `fdatasync`
//! acknowledges every record appended since the last). Recovery replays the
//! journal, cuts torn tails, and reconciles it with the files.
//!
//! Typical use: cleanup opens the tree with `Spool::open` and
//! `pool().scan_free()`, then per message `Spool::draft`, `Draft::append`,
//! `Draft::commit`; qmgr, the journal's only writer, calls `recover` at
//! start, then appends `Record::Arrived` (and every later state change),
//! applies it to the `Replay` state it got from `recover`, and commits
//! (directly, or through a `Syncer` thread; `JournalWriter` drives both)
//! before cleanup may answer 250.
//! After a `Removed` record is durable qmgr calls `Spool::remove_data` and,
//! from an idle timer, `collect_garbage`. Nothing in this crate panics on disk
//! contents; errors are `Error`.
//!
//! ```
//! use mail::{Envelope, QueueIdGen, Recipient};
//! use queue::{recover, MessageHead, Record, SpoolConfig};
//!
//! # fn main() -> Result<(), queue::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! // qmgr at start: replay, reconcile files, open a fresh journal segment.
//! let mut q = recover(dir.path(), SpoolConfig::default())?;
//! assert!(q.state.torn.is_empty() && q.report.adopted.is_empty());
//!
//! // cleanup: stream the data, then commit it with the envelope.
//! let id = QueueIdGen::new(std::process::id()).next(1_700_000_000_000_000);
//! let mut draft = q.spool.draft(id);
//! draft.append(&q.spool, b"Subject: hi\r\n\r\nhello\r\n")?;
//! let env = Envelope {
//!     sender: "a@example.org".into(),
//!     recipients: vec![Recipient::new("b@example.net")],
//!     size: draft.len(),
//!     ..Envelope::default()
//! };
//! let data = draft.commit(&q.spool, &env)?;
//!
//! // qmgr: journal it; the commit (one fdatasync for the whole batch) is the 250.
//! let rec = Record::Arrived(MessageHead { id, envelope: env, data });
//! let lsn = q.journal.append(&rec)?;
//! let durable = q.journal.commit()?;
//! assert!(lsn < durable);
//! q.state.apply(lsn, &rec);
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod ahead;
pub mod disk;
mod error;
mod index;
mod journal;
mod lsn;
mod msgfile;
mod pool;
mod record;
mod recover;
mod replay;
mod segment;
mod spool;
pub mod statefile;
mod stats;
mod syncer;
mod writer;

pub use ahead::{ReadySegment, SegmentJob};
pub use error::{Corruption, Error, Result};
pub use index::{DeferredIndex, SegmentRefs};
pub use journal::{open_span, Journal, JournalConfig, SyncTicket};
pub use lsn::Lsn;
pub use msgfile::{
    probe, try_lock, DataReader, FileLock, FileState, FileWriter, MessageFile, FORMAT_VERSION,
    HEADER_LEN,
};
pub use pool::{Claim, Pool, PoolConfig};
pub use record::{
    byte_string, decode_frame, encode_frame, DataRef, DataSpan, FrameError, MessageHead, Record,
    Storage,
};
pub use recover::{collect_garbage, recover, recover_on, Recovered, RecoveryReport};
pub use replay::{
    replay, replay_on, sender_key, Bounce, Import, LiveMessage, QueueEntry, Replay, TailCause,
    TornTail,
};
pub use segment::{list_segments, segment_path, SEGMENT_HEADER_LEN};
pub use spool::{Draft, FileMode, MessageData, Spool, SpoolConfig};
pub use stats::fsync_count;
pub use syncer::Syncer;
pub use writer::JournalWriter;
