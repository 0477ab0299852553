//! Journal segments written ahead: zeros on disk before records go in.
//!
//! An `fdatasync` after an append must also commit the file's new size
//! through the file system's journal (ext4's jbd2); one after an overwrite
//! of blocks already written and synced is a pure data write, and on the
//! machines measured it costs about a third less time and CPU. So the
//! journal asks (`Journal::segment_job`) for its next segment to be made
//! ahead of time: created, its header and `size` zero bytes written (not
//! `fallocate`, whose unwritten extents still need a metadata commit when
//! first written), synced, and its directory entry synced. `SegmentJob::run`
//! does that off the event loop (the `Syncer` runs it on a thread of its
//! own) and hands back a `ReadySegment`, which `Journal::segment_ready`
//! takes in. Readers stop at the zeros: a frame header of zeros followed by
//! nothing but zeros is the end of the records (see `replay`).
//!
//! A job that fails (a full disk) removes what it created and says why;
//! the journal then appends, as it does whenever no segment is ready in
//! time, and asks again at its next segment. Nothing here panics.

use crate::disk::{Disk, DiskFile};
use crate::error::{Error, IoContext, Result};
use crate::segment::segment_header;
use crate::stats;
use std::fmt;
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How many zeros go in one write.
const CHUNK: usize = 1 << 20;

/// Zeros written between two syncs of a segment being written ahead: one
/// sync of 64 MiB fills the disk's queue, and a commit's fdatasync waited
/// behind it for tens of milliseconds (perf trace, 20–32 ms); a few MiB at
/// a time leave room for the commits in between.
const SYNC_EVERY: u64 = 4 << 20;

/// The size of the first segment written ahead: later ones double, up to
/// `JournalConfig::segment_size`, so that a quiet queue manager (and every
/// test that starts one) writes a few MiB of zeros, not 128.
pub(crate) const FIRST_SIZE: u32 = 1 << 20;

/// One segment to write ahead; `run` it on a thread of its own.
pub struct SegmentJob {
    pub(crate) seq: u32,
    pub(crate) size: u32,
    pub(crate) path: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) disk: Arc<dyn Disk>,
}

impl fmt::Debug for SegmentJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentJob")
            .field("seq", &self.seq)
            .field("size", &self.size)
            .field("path", &self.path)
            .finish()
    }
}

impl SegmentJob {
    /// The segment number it makes.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// Creates the segment, writes its header and zeros, syncs it and its
    /// directory entry. Stops early, with an error, once `cancel` is set
    /// (the journal is going away). On failure the file is removed.
    pub fn run(&self, cancel: &AtomicBool) -> Result<ReadySegment> {
        let file = self.disk.create(&self.path).ctx("create", &self.path)?;
        match self.fill(&*file, cancel) {
            Ok(()) => Ok(ReadySegment {
                seq: self.seq,
                size: self.size,
                file,
            }),
            Err(e) => {
                // Unlinking needs no space. Should it fail, the file is an
                // empty segment (header and zeros, or less) that replay
                // cuts or deletes.
                let _ = fs::remove_file(&self.path);
                Err(e)
            }
        }
    }

    fn fill(&self, file: &dyn DiskFile, cancel: &AtomicBool) -> Result<()> {
        let zeros = vec![0u8; CHUNK];
        let hdr = segment_header(self.seq);
        write_all(file, &hdr, 0, &self.path)?;
        let mut at = hdr.len() as u64;
        let end = self.size as u64;
        while at < end {
            if cancel.load(Ordering::Relaxed) {
                return Err(Error::Io {
                    op: "write ahead",
                    path: self.path.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::Interrupted,
                        "the journal closed",
                    ),
                });
            }
            // The first write ends at a chunk boundary, so the rest are aligned.
            let n = (end - at).min(CHUNK as u64 - at % CHUNK as u64) as usize;
            write_all(file, &zeros[..n], at, &self.path)?;
            at += n as u64;
            if at.is_multiple_of(SYNC_EVERY) && at < end {
                stats::count_fsync();
                file.sync_data().ctx("fdatasync", &self.path)?;
            }
        }
        stats::count_fsync();
        file.sync_data().ctx("fdatasync", &self.path)?;
        stats::count_fsync();
        self.disk.sync_dir(&self.dir).ctx("fsync", &self.dir)?;
        Ok(())
    }
}

fn write_all(
    file: &dyn DiskFile,
    mut buf: &[u8],
    mut at: u64,
    path: &std::path::Path,
) -> Result<()> {
    while !buf.is_empty() {
        match file.write_at(buf, at) {
            Ok(0) => {
                return Err(Error::Io {
                    op: "write ahead",
                    path: path.to_path_buf(),
                    source: std::io::Error::new(std::io::ErrorKind::WriteZero, "wrote nothing"),
                })
            }
            Ok(n) => {
                buf = &buf[n..];
                at += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(Error::Io {
                    op: "write ahead",
                    path: path.to_path_buf(),
                    source: e,
                })
            }
        }
    }
    Ok(())
}

/// A segment written ahead and synced, for `Journal::segment_ready`.
pub struct ReadySegment {
    pub(crate) seq: u32,
    pub(crate) size: u32,
    pub(crate) file: Arc<dyn DiskFile>,
}

impl fmt::Debug for ReadySegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadySegment")
            .field("seq", &self.seq)
            .field("size", &self.size)
            .finish()
    }
}

impl ReadySegment {
    /// Its segment number.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// Its size in bytes, header included.
    pub fn size(&self) -> u32 {
        self.size
    }
}

/// Where the journal's next segment stands.
#[derive(Debug)]
pub(crate) enum Ahead {
    /// None asked for.
    Idle,
    /// One is being written ahead (numbered when it was asked for).
    Running,
    /// Written ahead; used when the current segment is full.
    Ready(ReadySegment),
    /// The last job failed: the journal appends, and asks again at its
    /// next segment.
    Failed,
}
