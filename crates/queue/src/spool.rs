//! The spool directory and the accept path: where a message's data goes.
//!
//! `Spool` owns `$queue_directory/{msg,pool,journal}`. A `Draft` receives
//! one message's wire-form data: it buffers up to `inline_max` bytes in
//! memory, and spills to a file beyond that (a pool slot, or a new
//! `msg/XX/<queue-id>` file in `FileMode::Simple`). `Draft::commit` writes
//! the envelope and makes file data durable (pool: one `fdatasync`; simple:
//! `fdatasync` plus a directory fsync); inline data becomes durable with the
//! journal commit of its `Arrived` record, which the caller always needs
//! before answering 250. `remove_data` frees a message's data after its
//! `Removed` record is durable; `checkpoint` makes those frees durable
//! before journal segments are deleted. `Spool` is `Sync`: drafts of many
//! sessions may run at once. Nothing here panics on disk contents.

use crate::error::{corrupt, Corruption, Error, IoContext, Result};
use crate::journal::JournalConfig;
use crate::msgfile::{self, try_lock, FileWriter, MessageFile};
use crate::pool::{create_slots, Pool, PoolConfig};
use crate::record::{DataRef, Storage};
use crate::stats;
use mail::{Envelope, QueueId};
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Where spilled (non-inline) message data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileMode {
    /// A new file per message: create, write, fdatasync, directory fsync.
    Simple,
    /// A reused preallocated pool slot: write, one fdatasync.
    Pool,
}

/// Spool configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolConfig {
    /// Journal segment and record limits.
    pub journal: JournalConfig,
    /// Pool slot sizing.
    pub pool: PoolConfig,
    /// Where data larger than `inline_max` goes.
    pub file_mode: FileMode,
    /// Messages up to this many bytes go inline in the journal; 0 disables.
    pub inline_max: usize,
}

impl Default for SpoolConfig {
    fn default() -> Self {
        Self {
            journal: JournalConfig::default(),
            pool: PoolConfig::default(),
            file_mode: FileMode::Pool,
            inline_max: 64 << 10,
        }
    }
}

/// The spool directory tree.
#[derive(Debug)]
pub struct Spool {
    root: PathBuf,
    cfg: SpoolConfig,
    pool: Mutex<Pool>,
    dirty_dirs: Mutex<BTreeSet<PathBuf>>,
    /// When this process last looked for slots another process freed.
    last_scan: Mutex<Option<std::time::Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves plain data; keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Spool {
    /// Opens (creating) the tree under `root`; no recovery (see `recover`).
    pub fn open(root: &Path, cfg: SpoolConfig) -> Result<Self> {
        let fresh = !root.join("journal").is_dir();
        for sub in ["msg", "journal", "pool"] {
            let p = root.join(sub);
            fs::create_dir_all(&p).ctx("mkdir", &p)?;
        }
        if fresh {
            sync_dir(root)?;
        }
        let pool = Pool::open(&root.join("pool"), cfg.pool)?;
        Ok(Self {
            root: root.to_path_buf(),
            cfg,
            pool: Mutex::new(pool),
            dirty_dirs: Mutex::new(BTreeSet::new()),
            last_scan: Mutex::new(None),
        })
    }

    /// The spool's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The configuration.
    pub fn config(&self) -> &SpoolConfig {
        &self.cfg
    }

    /// The journal directory.
    pub fn journal_dir(&self) -> PathBuf {
        self.root.join("journal")
    }

    /// The hashed subdirectory `msg/XX` of `id`.
    pub fn msg_dir(&self, id: QueueId) -> PathBuf {
        self.root
            .join("msg")
            .join(format!("{:02X}", id.hash_byte()))
    }

    /// The own-file path `msg/XX/<queue-id>` of `id`.
    pub fn msg_path(&self, id: QueueId) -> PathBuf {
        self.msg_dir(id).join(id.to_string())
    }

    /// Access to the pool (recovery and tests).
    pub fn pool(&self) -> MutexGuard<'_, Pool> {
        lock(&self.pool)
    }

    /// Starts receiving message `id`; no I/O until the data outgrows `inline_max`.
    pub fn draft(&self, id: QueueId) -> Draft {
        Draft {
            id,
            state: DraftState::Buffer(Vec::new()),
            reserved: 0,
        }
    }

    /// Creates `count` pool slots without holding the pool lock (e.g. from an idle timer).
    pub fn grow_pool(&self, count: u32) -> Result<()> {
        let (dir, cfg, start) = {
            let mut p = self.pool();
            (p.dir().to_path_buf(), p.config(), p.reserve(count))
        };
        let made = create_slots(&dir, cfg, start, count)?;
        self.pool().add_free(made);
        Ok(())
    }

    fn rescan_due(&self) -> bool {
        let mut last = lock(&self.last_scan);
        let now = std::time::Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(1)) {
            return false;
        }
        *last = Some(now);
        true
    }

    fn create_file(&self, id: QueueId) -> Result<(FileWriter, Backing)> {
        match self.cfg.file_mode {
            FileMode::Pool => {
                for _ in 0..16 {
                    let claim = self.pool().take()?;
                    if let Some(c) = claim {
                        let w = FileWriter::new(c.file, c.lock, c.path, id)?;
                        return Ok((w, Backing::Slot(c.slot)));
                    }
                    // Slots are freed by another process (qmgr, after a
                    // message is removed); look for them before growing, but
                    // at most once a second, so a pool that is all in use
                    // is not scanned for every message.
                    if self.rescan_due() && self.pool().scan_free()? > 0 {
                        continue;
                    }
                    self.grow_pool(self.cfg.pool.grow_by.max(1))?;
                }
                Err(Error::PoolExhausted)
            }
            FileMode::Simple => {
                let dir = self.msg_dir(id);
                if !dir.exists() {
                    match fs::create_dir(&dir) {
                        Ok(()) => sync_dir(&self.root.join("msg"))?,
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => {
                            return Err(Error::Io {
                                op: "mkdir",
                                path: dir,
                                source: e,
                            })
                        }
                    }
                }
                let path = self.msg_path(id);
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .ctx("create", &path)?;
                let lock = try_lock(&f, &path)?.ok_or_else(|| Error::Raced(path.clone()))?;
                // A recovery may have unlinked the empty file before we locked it.
                let same = fs::metadata(&path).map(|m| m.ino()).ok()
                    == Some(f.metadata().ctx("fstat", &path)?.ino());
                if !same {
                    return Err(Error::Raced(path));
                }
                Ok((FileWriter::new(f, lock, path, id)?, Backing::Own(dir)))
            }
        }
    }

    /// Opens a message's data for delivery (verifying file checksums).
    pub fn open_data(&self, id: QueueId, data: &DataRef) -> Result<MessageData> {
        let path = match data {
            DataRef::Inline(b) => return Ok(MessageData::Inline(io::Cursor::new(b.clone()))),
            DataRef::File => self.msg_path(id),
            DataRef::Pool(n) => self.pool().slot_path(*n),
        };
        let mf = MessageFile::open(&path)?;
        if mf.id != id {
            return Err(corrupt(&path, Corruption::WrongId));
        }
        Ok(MessageData::File(Box::new(mf), 0))
    }

    /// Frees a message's data once its `Removed` record is durable.
    pub fn remove_data(&self, id: QueueId, storage: Storage) -> Result<()> {
        match storage {
            Storage::Inline => Ok(()),
            Storage::Pool(n) => self.pool().release(n),
            Storage::File => {
                let path = self.msg_path(id);
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(Error::Io {
                            op: "unlink",
                            path,
                            source: e,
                        })
                    }
                }
                lock(&self.dirty_dirs).insert(self.msg_dir(id));
                Ok(())
            }
        }
    }

    /// Makes every `remove_data` so far durable (before deleting journal segments).
    pub fn checkpoint(&self) -> Result<()> {
        self.pool().sync_released()?;
        let dirs = std::mem::take(&mut *lock(&self.dirty_dirs));
        for d in dirs {
            sync_dir(&d)?;
        }
        Ok(())
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    stats::count_fsync();
    File::open(dir).and_then(|d| d.sync_all()).ctx("fsync", dir)
}

#[derive(Debug)]
enum Backing {
    Own(PathBuf),
    Slot(u32),
}

#[derive(Debug)]
enum DraftState {
    Buffer(Vec<u8>),
    File(Box<FileWriter>, Backing),
}

/// One message being received.
#[derive(Debug)]
pub struct Draft {
    id: QueueId,
    state: DraftState,
    /// Bytes reserved at the front and not yet filled.
    reserved: usize,
}

impl Draft {
    /// The queue id.
    pub fn id(&self) -> QueueId {
        self.id
    }

    /// Data bytes appended so far.
    pub fn len(&self) -> u64 {
        match &self.state {
            DraftState::Buffer(b) => b.len() as u64,
            DraftState::File(w, _) => w.data_len(),
        }
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends wire-form data (CRLF, dot-stuffed, as given).
    pub fn append(&mut self, spool: &Spool, bytes: &[u8]) -> Result<()> {
        if let DraftState::Buffer(b) = &mut self.state {
            if b.len() + bytes.len() <= spool.cfg.inline_max {
                b.extend_from_slice(bytes);
                return Ok(());
            }
            self.spill(spool)?;
        }
        match &mut self.state {
            DraftState::File(w, _) => w.append(bytes),
            DraftState::Buffer(_) => unreachable!("queue::spool: spill left a buffer"),
        }
    }

    /// Reserves `n` bytes at the front of an empty draft, written later
    /// by [`Draft::fill`] (which must come before `commit`); the content
    /// appended meanwhile follows them.
    pub fn reserve(&mut self, spool: &Spool, n: usize) -> Result<()> {
        if !self.is_empty() || self.reserved != 0 {
            panic!("queue::spool: reserve on a draft with data");
        }
        self.reserved = n;
        match &mut self.state {
            DraftState::Buffer(b) if n <= spool.cfg.inline_max => b.resize(n, 0),
            DraftState::Buffer(_) => {
                self.spill(spool)?;
            }
            DraftState::File(w, _) => w.reserve(n as u64),
        }
        Ok(())
    }

    /// Writes the bytes [`Draft::reserve`] kept room for; exactly as many.
    pub fn fill(&mut self, bytes: &[u8]) -> Result<()> {
        let n = std::mem::take(&mut self.reserved);
        if bytes.len() != n {
            panic!("queue::spool: fill of {} bytes into {n}", bytes.len());
        }
        match &mut self.state {
            DraftState::Buffer(b) => {
                b[..n].copy_from_slice(bytes);
                Ok(())
            }
            DraftState::File(w, _) => w.fill(bytes),
        }
    }

    fn spill(&mut self, spool: &Spool) -> Result<()> {
        if let DraftState::Buffer(b) = &self.state {
            let (mut w, backing) = spool.create_file(self.id)?;
            if self.reserved > 0 {
                w.reserve(self.reserved as u64);
                w.append(&b[self.reserved.min(b.len())..])?;
            } else {
                w.append(b)?;
            }
            self.state = DraftState::File(Box::new(w), backing);
        }
        Ok(())
    }

    /// Makes the data durable (files) and says where it is, for the `Arrived` record.
    ///
    /// Inline data is durable only once the `Arrived` record is committed.
    pub fn commit(mut self, spool: &Spool, env: &Envelope) -> Result<DataRef> {
        if spool.cfg.inline_max == 0 {
            self.spill(spool)?;
        }
        match self.state {
            DraftState::Buffer(b) => Ok(DataRef::Inline(b)),
            DraftState::File(w, backing) => {
                let path = w.path().to_path_buf();
                if let Err(e) = w.commit(env) {
                    // Never acknowledged: free the slot or file (best effort; recovery
                    // would otherwise find it and, at worst, deliver it once).
                    match backing {
                        Backing::Slot(n) => {
                            let f = OpenOptions::new().write(true).open(&path).ok();
                            if f.is_some_and(|f| msgfile::zap(&f, &path).is_ok()) {
                                spool.pool().mark_free(n);
                            }
                        }
                        Backing::Own(_) => {
                            let _ = fs::remove_file(&path);
                        }
                    }
                    return Err(e);
                }
                match backing {
                    Backing::Slot(n) => Ok(DataRef::Pool(n)),
                    Backing::Own(dir) => {
                        sync_dir(&dir)?;
                        Ok(DataRef::File)
                    }
                }
            }
        }
    }

    /// Gives up the message: frees its slot or deletes its file.
    pub fn abort(self, spool: &Spool) -> Result<()> {
        match self.state {
            DraftState::Buffer(_) => Ok(()),
            // The header was written with offset 0, so the slot already reads as free.
            DraftState::File(w, Backing::Slot(n)) => {
                drop(w); // unlock before another writer may claim it
                spool.pool().mark_free(n);
                Ok(())
            }
            DraftState::File(w, Backing::Own(_)) => {
                let p = w.path().to_path_buf();
                fs::remove_file(&p).ctx("unlink", &p)
            }
        }
    }
}

/// A message's data opened for delivery.
#[derive(Debug)]
pub enum MessageData {
    /// In a message file (own or pool slot); the u64 is the read position.
    File(Box<MessageFile>, u64),
    /// Inline bytes from the journal.
    Inline(io::Cursor<Vec<u8>>),
}

impl MessageData {
    /// Length of the data in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Self::File(m, _) => m.data_len(),
            Self::Inline(c) => c.get_ref().len() as u64,
        }
    }

    /// Whether the data is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Read for MessageData {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Inline(c) => c.read(buf),
            Self::File(m, pos) => {
                let n = m.read_data_at(buf, *pos)?;
                *pos += n as u64;
                Ok(n)
            }
        }
    }
}
