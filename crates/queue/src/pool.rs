//! The pool of preallocated message files (fanf's "no file creation").
//!
//! Slots are files `pool/<n>` created in batches, filled with zeros and
//! synced once (files and directory), so that a later commit into a slot is
//! one `fdatasync` with no metadata change as long as the message fits the
//! preallocated size. A slot is free when its `envelope_offset` is 0. Files
//! are never truncated; the message file's end marker tells contents from
//! junk. The queue id is independent of the slot number.
//!
//! Several processes may share a pool (cleanups write, qmgr releases): a
//! writer claims a slot by taking its exclusive `flock` and then checking
//! the offset is 0, and holds the lock until the commit, so two writers
//! never share a slot and recovery never frees one being written. The free
//! list is a per-process list of candidates: stale entries are skipped at
//! claim time. qmgr tells writers which slots it released (e.g. in its
//! replies) and they call `mark_free`; a writer that starts up calls
//! `scan_free`. Releasing zeroes the offset without a sync; the next commit
//! into the slot, or `sync_released` before journal segments are deleted,
//! makes it durable. Panics on nothing.

use crate::error::{Error, IoContext, Result};
use crate::msgfile::{self, FileLock, FileState};
use crate::stats;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Pool sizing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Bytes of zeros written into each new slot.
    pub prealloc: u64,
    /// Slots created at once when no free slot is left.
    pub grow_by: u32,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            prealloc: 16 << 10,
            grow_by: 32,
        }
    }
}

/// A slot claimed for writing: open, locked, uncommitted.
#[derive(Debug)]
pub struct Claim {
    /// The slot number.
    pub slot: u32,
    /// The slot file, opened read-write.
    pub file: File,
    /// Its path.
    pub path: PathBuf,
    /// The writer's lock, to keep until the commit.
    pub lock: FileLock,
}

/// The slot files and this process's free candidates.
#[derive(Debug)]
pub struct Pool {
    dir: PathBuf,
    cfg: PoolConfig,
    free: Vec<u32>,
    next: u32,
    released: Vec<u32>,
}

impl Pool {
    /// Opens (creating) `dir`; no slot is a candidate until `mark_free`, `scan_free` or `grow`.
    pub fn open(dir: &Path, cfg: PoolConfig) -> Result<Self> {
        fs::create_dir_all(dir).ctx("mkdir", dir)?;
        let slots = list_slots(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            cfg,
            free: Vec::new(),
            next: slots.last().map_or(0, |s| s + 1),
            released: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> PoolConfig {
        self.cfg
    }

    /// The pool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of slot `n`.
    pub fn slot_path(&self, n: u32) -> PathBuf {
        slot_path(&self.dir, n)
    }

    /// Makes slot `n` a candidate (recovery found it free, or qmgr released it).
    pub fn mark_free(&mut self, n: u32) {
        self.free.push(n);
    }

    /// Makes every uncommitted slot a candidate (a writer starting up); gives how many.
    pub fn scan_free(&mut self) -> Result<usize> {
        self.free.clear();
        for n in list_slots(&self.dir)?.into_iter().rev() {
            let path = self.slot_path(n);
            let f = File::open(&path).ctx("open", &path)?;
            if matches!(msgfile::probe(&f, &path), Ok(FileState::Uncommitted)) {
                self.free.push(n);
            }
        }
        Ok(self.free.len())
    }

    /// Free candidates now (some may be taken by another process).
    pub fn free_len(&self) -> usize {
        self.free.len()
    }

    /// Slots created so far (highest number + 1).
    pub fn total(&self) -> u32 {
        self.next
    }

    /// Claims a free candidate; `None` when there is none (then grow).
    pub fn take(&mut self) -> Result<Option<Claim>> {
        while let Some(n) = self.free.pop() {
            if let Some(c) = claim(&self.dir, n)? {
                return Ok(Some(c));
            }
        }
        Ok(None)
    }

    /// Reserves `count` slot numbers for `create_slots` (done without the pool lock).
    pub fn reserve(&mut self, count: u32) -> u32 {
        let start = self.next;
        self.next = self.next.saturating_add(count);
        start
    }

    /// Creates `count` slots now and makes them candidates.
    pub fn grow(&mut self, count: u32) -> Result<()> {
        let start = self.reserve(count);
        let made = create_slots(&self.dir, self.cfg, start, count)?;
        self.add_free(made);
        Ok(())
    }

    /// Adds new slots from `create_slots` as candidates.
    pub fn add_free(&mut self, mut made: Vec<u32>) {
        // Lowest numbers last, so they are taken first: keeps the hot set small.
        made.reverse();
        self.free.extend(made);
    }

    /// Frees slot `n` once its message's `Removed` record is durable (no sync).
    pub fn release(&mut self, n: u32) -> Result<()> {
        let path = self.slot_path(n);
        let f = OpenOptions::new()
            .write(true)
            .open(&path)
            .ctx("open", &path)?;
        msgfile::zap(&f, &path)?;
        self.released.push(n);
        self.free.push(n);
        Ok(())
    }

    /// Slots released since the last `sync_released` (to tell writers).
    pub fn released(&self) -> &[u32] {
        &self.released
    }

    /// Makes the zeroing of released slots durable (before deleting journal segments).
    pub fn sync_released(&mut self) -> Result<()> {
        for n in std::mem::take(&mut self.released) {
            let path = self.slot_path(n);
            let f = File::open(&path).ctx("open", &path)?;
            stats::count_fsync();
            f.sync_data().ctx("fdatasync", &path)?;
        }
        Ok(())
    }
}

/// Locks slot `n` and checks it is uncommitted; `None` when busy, taken or gone.
pub fn claim(dir: &Path, n: u32) -> Result<Option<Claim>> {
    let path = slot_path(dir, n);
    let file = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Io {
                op: "open",
                path,
                source: e,
            })
        }
    };
    let Some(lock) = msgfile::try_lock(&file, &path)? else {
        return Ok(None);
    };
    match msgfile::probe(&file, &path) {
        Ok(FileState::Uncommitted) => Ok(Some(Claim {
            slot: n,
            file,
            path,
            lock,
        })),
        // Committed by another writer, or junk: not free.
        Ok(FileState::Committed(_)) | Err(Error::Corrupt { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates slots `start..start+count` (skipping numbers that exist), synced; gives those made.
pub fn create_slots(dir: &Path, cfg: PoolConfig, start: u32, count: u32) -> Result<Vec<u32>> {
    let zeros = vec![0u8; (cfg.prealloc.min(64 << 10) as usize).max(1)];
    let mut made = Vec::with_capacity(count as usize);
    for n in start..start.saturating_add(count) {
        let path = slot_path(dir, n);
        let f = match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(f) => f,
            // Another process grew the pool with the same numbers.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(Error::Io {
                    op: "create",
                    path,
                    source: e,
                })
            }
        };
        let mut at = 0;
        while at < cfg.prealloc {
            let k = (cfg.prealloc - at).min(zeros.len() as u64) as usize;
            f.write_all_at(&zeros[..k], at).ctx("write", &path)?;
            at += k as u64;
        }
        stats::count_fsync();
        f.sync_all().ctx("fsync", &path)?;
        made.push(n);
    }
    // The new names must be durable before a commit into them can be trusted.
    stats::count_fsync();
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx("fsync", dir)?;
    Ok(made)
}

/// The path of slot `n` in `dir`.
pub fn slot_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{n:08}"))
}

/// Slot numbers present in `dir`, ascending; other names are ignored.
pub fn list_slots(dir: &Path) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for ent in fs::read_dir(dir).ctx("readdir", dir)? {
        let ent = ent.ctx("readdir", dir)?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.len() == 8 && name.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = name.parse() {
                out.push(n);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_exclusive_between_pools() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = PoolConfig {
            prealloc: 4096,
            grow_by: 2,
        };
        let mut a = Pool::open(dir.path(), cfg).unwrap();
        a.grow(2).unwrap();
        assert_eq!(a.total(), 2);
        // A second process sees the same two free slots.
        let mut b = Pool::open(dir.path(), cfg).unwrap();
        assert_eq!(b.scan_free().unwrap(), 2);
        let c1 = a.take().unwrap().unwrap();
        let c2 = b.take().unwrap().unwrap();
        assert_ne!(c1.slot, c2.slot);
        assert!(a.take().unwrap().is_none(), "b holds the other slot");
        assert_eq!(std::fs::metadata(&c1.path).unwrap().len(), 4096);
        // Growth by two processes with overlapping numbers skips existing files.
        let made = create_slots(dir.path(), cfg, 1, 3).unwrap();
        assert_eq!(made, vec![2, 3]);
    }
}
