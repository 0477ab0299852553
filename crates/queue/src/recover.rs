//! Start-up recovery: replay the journal, reconcile it with the files.
//!
//! `recover` replays the journal (cutting torn tails), opens a fresh
//! segment for appending, then walks the pool slots and `msg/XX/` files:
//! a file whose `envelope_offset` is 0 is a partial write and is removed (a
//! pool slot is simply free), unless a writer in another process still
//! holds its lock (reported as busy: cleanup may run while qmgr restarts);
//! a committed file whose message has a durable
//! `Removed` record, or whose queue id is live somewhere else, is freed; a
//! committed, checksum-valid file that no `Arrived` record names (a crash
//! between the file's sync and the journal commit) is adopted: an `Arrived`
//! record is appended and committed for it. A committed file with a bad
//! checksum was never acknowledged (its sync never finished) and is removed.
//! Everything done is in the `RecoveryReport`, for the caller to log.
//! Recovery needs no free space (a queue manager restarted on a full disk
//! comes up and serves the queue): whatever it cannot write now it leaves,
//! reported, for later.
//! Only live messages' own files are checked by name, not opened, so a
//! large queue recovers without reading its data. Panics on nothing.

use crate::disk::{Disk, OsDisk};
use crate::error::{Error, IoContext, Result};
use crate::journal::Journal;
use crate::msgfile::{self, try_lock, FileState, MessageFile};
use crate::pool::list_slots;
use crate::record::{DataRef, MessageHead, Record, Storage};
use crate::replay::{replay_on, Replay};
use crate::spool::{Spool, SpoolConfig};
use mail::QueueId;
use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What recovery found and did, for the log.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    /// Partial message files removed (pool slots: freed).
    pub partial: Vec<PathBuf>,
    /// Committed files with bad contents, removed or freed, and why.
    pub corrupt: Vec<(PathBuf, String)>,
    /// Files of removed or duplicate messages, removed or freed.
    pub leftovers: Vec<PathBuf>,
    /// Committed files no `Arrived` record named, now journaled as arrived.
    pub adopted: Vec<QueueId>,
    /// Live messages whose file is missing (qmgr should bounce or drop them).
    pub missing: Vec<QueueId>,
    /// Files left alone because another process is writing them.
    pub busy: Vec<PathBuf>,
    /// Files that could not be cleaned up now (left for the next
    /// recovery), and why.
    pub left: Vec<(PathBuf, String)>,
    /// The commit of adopted messages' records failed (a full disk): they
    /// stay pending in the journal for the caller's next commit.
    pub commit_failed: Option<Error>,
    /// Free pool slots after recovery.
    pub free_slots: usize,
}

/// Everything a queue manager needs to start.
#[derive(Debug)]
pub struct Recovered {
    /// The spool, pool free list rebuilt.
    pub spool: Spool,
    /// The journal, open on a fresh segment.
    pub journal: Journal,
    /// Live messages, deferred index, dead segments, torn tails.
    pub state: Replay,
    /// Files removed and adopted.
    pub report: RecoveryReport,
}

/// Recovers the spool at `root` (creating it when absent).
pub fn recover(root: &Path, cfg: SpoolConfig) -> Result<Recovered> {
    recover_on(root, cfg, Arc::new(OsDisk))
}

/// `recover`, with the journal's file operations going to `disk`.
///
/// Needs no free space: cutting torn tails, zeroing and unlinking are
/// skipped when they fail (and reported), the new segment is created by
/// the first commit, and a failed commit of adopted records leaves them
/// pending (`RecoveryReport::commit_failed`).
pub fn recover_on(root: &Path, cfg: SpoolConfig, disk: Arc<dyn Disk>) -> Result<Recovered> {
    let spool = Spool::open(root, cfg)?;
    let mut state = replay_on(&spool.journal_dir(), cfg.journal.max_record, &*disk)?;
    let mut journal = Journal::open_on(&spool.journal_dir(), cfg.journal, disk)?;
    let mut report = RecoveryReport::default();
    let mut found: HashSet<QueueId> = HashSet::new();

    reconcile_pool(&spool, &mut state, &mut journal, &mut report, &mut found)?;
    reconcile_msg(&spool, &mut state, &mut journal, &mut report, &mut found)?;

    report.missing = state
        .messages
        .iter()
        .filter(|(id, m)| m.storage != Storage::Inline && !found.contains(id))
        .map(|(id, _)| *id)
        .collect();
    report.missing.sort_unstable();
    if let Err(e) = journal.commit() {
        report.commit_failed = Some(e);
    }
    spool.checkpoint()?;
    state.finish(journal.current_segment());
    state.removed = HashSet::new();
    report.free_slots = spool.pool().free_len();
    Ok(Recovered {
        spool,
        journal,
        state,
        report,
    })
}

fn adopt(
    id: QueueId,
    mf: MessageFile,
    data: DataRef,
    state: &mut Replay,
    journal: &mut Journal,
) -> Result<()> {
    let rec = Record::Arrived(MessageHead {
        id,
        envelope: mf.envelope,
        data,
    });
    let lsn = journal.append(&rec)?;
    state.apply(lsn, &rec);
    Ok(())
}

fn reconcile_pool(
    spool: &Spool,
    state: &mut Replay,
    journal: &mut Journal,
    report: &mut RecoveryReport,
    found: &mut HashSet<QueueId>,
) -> Result<()> {
    let dir = spool.root().join("pool");
    for n in list_slots(&dir)? {
        let path = spool.pool().slot_path(n);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .ctx("open", &path)?;
        // Uncommitted slots are only made candidates, never written: a writer
        // in another process may be filling one right now.
        let zap = match msgfile::probe(&f, &path) {
            Ok(FileState::Uncommitted) => {
                spool.pool().mark_free(n);
                continue;
            }
            Err(Error::Corrupt { what, .. }) => {
                report.corrupt.push((path.clone(), what.to_string()));
                true
            }
            Err(e) => return Err(e),
            Ok(FileState::Committed(id)) => match state.messages.get(&id) {
                Some(m) if m.storage == Storage::Pool(n) && !found.contains(&id) => {
                    found.insert(id);
                    false
                }
                Some(_) => {
                    report.leftovers.push(path.clone());
                    true
                }
                None if state.removed.contains(&id) => {
                    report.leftovers.push(path.clone());
                    true
                }
                None => match MessageFile::verify(f.try_clone().ctx("dup", &path)?, &path) {
                    Ok(mf) => {
                        adopt(id, mf, DataRef::Pool(n), state, journal)?;
                        report.adopted.push(id);
                        found.insert(id);
                        false
                    }
                    Err(Error::Corrupt { what, .. }) => {
                        report.corrupt.push((path.clone(), what.to_string()));
                        true
                    }
                    Err(Error::Incomplete(_)) => {
                        report.partial.push(path.clone());
                        true
                    }
                    Err(e) => return Err(e),
                },
            },
        };
        if zap {
            // Committed or junk slots have no writer; the lock only guards junk being rewritten.
            if let Some(_lock) = try_lock(&f, &path)? {
                match msgfile::zap(&f, &path) {
                    Ok(()) => spool.pool().mark_free(n),
                    Err(e) => report.left.push((path.clone(), e.to_string())),
                }
            } else {
                report.busy.push(path.clone());
            }
        }
    }
    Ok(())
}

fn reconcile_msg(
    spool: &Spool,
    state: &mut Replay,
    journal: &mut Journal,
    report: &mut RecoveryReport,
    found: &mut HashSet<QueueId>,
) -> Result<()> {
    let msg = spool.root().join("msg");
    for sub in fs::read_dir(&msg).ctx("readdir", &msg)? {
        let sub = sub.ctx("readdir", &msg)?.path();
        if !sub.is_dir() {
            continue;
        }
        let mut touched = false;
        for ent in fs::read_dir(&sub).ctx("readdir", &sub)? {
            let path = ent.ctx("readdir", &sub)?.path();
            let name = path.file_name().and_then(|n| n.to_str());
            let Some(id) = name.and_then(|n| n.parse::<QueueId>().ok()) else {
                continue;
            };
            match state.messages.get(&id) {
                Some(m) if m.storage == Storage::File => {
                    found.insert(id);
                    continue;
                }
                Some(_) => report.leftovers.push(path.clone()),
                None if state.removed.contains(&id) => report.leftovers.push(path.clone()),
                None => {
                    let f = match fs::File::open(&path) {
                        Ok(f) => f,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                        Err(e) => {
                            return Err(Error::Io {
                                op: "open",
                                path,
                                source: e,
                            })
                        }
                    };
                    // A writer in another process holds the lock until its commit.
                    let Some(_lock) = try_lock(&f, &path)? else {
                        report.busy.push(path.clone());
                        continue;
                    };
                    match MessageFile::verify(f.try_clone().ctx("dup", &path)?, &path) {
                        Ok(mf) if mf.id == id => {
                            adopt(id, mf, DataRef::File, state, journal)?;
                            report.adopted.push(id);
                            found.insert(id);
                            continue;
                        }
                        Ok(_) => report
                            .corrupt
                            .push((path.clone(), "queue id differs from file name".into())),
                        Err(Error::Incomplete(_)) => report.partial.push(path.clone()),
                        Err(Error::Corrupt { what, .. }) => {
                            report.corrupt.push((path.clone(), what.to_string()))
                        }
                        Err(e) => return Err(e),
                    }
                    // Unlink while holding the lock: a writer that locks later sees the inode gone.
                    unlink(&path, &mut touched, report);
                    continue;
                }
            }
            unlink(&path, &mut touched, report);
        }
        if touched {
            crate::stats::count_fsync();
            fs::File::open(&sub)
                .and_then(|d| d.sync_all())
                .ctx("fsync", &sub)?;
        }
    }
    Ok(())
}

/// Unlinks a file recovery does not want; a failure leaves it for next time.
fn unlink(path: &Path, touched: &mut bool, report: &mut RecoveryReport) {
    match fs::remove_file(path) {
        Ok(()) => *touched = true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => report
            .left
            .push((path.to_path_buf(), format!("unlink: {e}"))),
    }
}

/// Deletes the journal segments nothing live needs any more, once the
/// records that made them so are durable; gives their numbers.
///
/// Call from an idle timer, after every `Removed` record's `remove_data` was
/// done: the frees are made durable first (`Spool::checkpoint`), so a
/// deleted `Removed` record can never let a file come back as an orphan.
pub fn collect_garbage(spool: &Spool, journal: &mut Journal, state: &Replay) -> Result<Vec<u32>> {
    let below = state.refs.delete_below(journal.current_segment());
    let oldest = journal.segments().first().copied();
    if oldest.is_none_or(|s| s >= below) {
        return Ok(Vec::new());
    }
    spool.checkpoint()?;
    journal.delete_segments_before(below)
}
