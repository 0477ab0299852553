//! The spool's error type.
//!
//! One `#[non_exhaustive]` enum for every failure of the spool: I/O (with
//! what was being done and to which path), bad on-disk contents (which are
//! reported, never panicked on), and misuse such as a record too large for
//! the configured limit.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A spool failure.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed on `path` while doing `op`.
    Io {
        /// What was being done, e.g. "fdatasync".
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A message file was never committed (`envelope_offset` is 0).
    Incomplete(PathBuf),
    /// A message file or journal record has bad contents.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: Corruption,
    },
    /// A record or envelope encodes larger than the configured limit.
    TooLarge {
        /// Encoded size in bytes.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A serialization failure (postcard) while encoding.
    Encode(postcard::Error),
    /// The journal position does not hold a record.
    NoRecord(crate::lsn::Lsn),
    /// The background sync thread is gone.
    SyncerGone,
    /// Other processes took every pool slot this one created, repeatedly.
    PoolExhausted,
    /// A file being written was removed under us (a concurrent recovery).
    Raced(PathBuf),
}

/// What is wrong with bad on-disk contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// Wrong magic number.
    Magic,
    /// A format version this build does not read.
    Version(u32),
    /// The file is shorter than its header says.
    Truncated,
    /// An offset or length points outside the file.
    Bounds,
    /// The checksum does not match.
    Checksum,
    /// The end-of-content marker is missing.
    EndMarker,
    /// The postcard payload does not decode.
    Decode,
    /// The file's queue id is not the one expected.
    WrongId,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Magic => f.write_str("bad magic number"),
            Self::Version(v) => write!(f, "unsupported format version {v}"),
            Self::Truncated => f.write_str("truncated"),
            Self::Bounds => f.write_str("offset out of bounds"),
            Self::Checksum => f.write_str("checksum mismatch"),
            Self::EndMarker => f.write_str("missing end-of-content marker"),
            Self::Decode => f.write_str("undecodable payload"),
            Self::WrongId => f.write_str("unexpected queue id"),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
            Self::Incomplete(p) => write!(f, "{}: message file not committed", p.display()),
            Self::Corrupt { path, what } => write!(f, "{}: {what}", path.display()),
            Self::TooLarge { size, limit } => write!(f, "record of {size} bytes exceeds {limit}"),
            Self::Encode(e) => write!(f, "encoding: {e}"),
            Self::NoRecord(l) => write!(f, "no journal record at {l}"),
            Self::SyncerGone => f.write_str("journal sync thread exited"),
            Self::PoolExhausted => f.write_str("no pool slot could be claimed"),
            Self::Raced(p) => write!(f, "{}: removed while being written", p.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Encode(e) => Some(e),
            _ => None,
        }
    }
}

impl Error {
    /// Whether this is "no space left on device" (the 452 4.3.1 case).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.raw_os_error() == Some(28))
    }
}

/// Shorthand for the spool's results.
pub type Result<T> = std::result::Result<T, Error>;

/// Attaches an operation and path to an `io::Result`.
pub(crate) trait IoContext<T> {
    /// Wraps the error as `Error::Io { op, path }`.
    fn ctx(self, op: &'static str, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        })
    }
}

pub(crate) fn corrupt(path: &std::path::Path, what: Corruption) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        what,
    }
}
