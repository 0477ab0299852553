//! The transaction journal: append-only segments with group commit.
//!
//! Segments are `journal/<seq>.log`, each a 16-byte header (magic, segment
//! number) followed by framed records (see `record`). `append` encodes a
//! record into an in-memory buffer and returns its position; `commit` writes
//! the buffer and makes everything appended so far durable with one
//! `fdatasync` per touched segment (plus one directory fsync after a segment
//! was created), so a caller that batches N records pays one sync for all.
//! `prepare_commit` / `SyncTicket::run` split a commit so the sync can run on
//! another thread (see `syncer`) while appends go on.
//!
//! Only one process (qmgr) may hold a `Journal` on a spool. After a failed
//! commit the journal's state on disk is unknown: drop it and recover (the
//! fsync-failure rule of PostgreSQL). Nothing here panics on disk contents.

use crate::error::{corrupt, Corruption, Error, IoContext, Result};
use crate::record::{check_frame, encode_frame, Lsn, Record, FRAME_HEADER};
use crate::stats;
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Segment header magic.
pub(crate) const SEG_MAGIC: [u8; 8] = *b"SLCJRNL1";
/// Segment header length: magic and segment number.
pub(crate) const SEG_HEADER: u32 = 16;

/// Journal sizing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalConfig {
    /// A segment is closed once a record would take it past this many bytes.
    pub segment_size: u32,
    /// Largest encoded record accepted (inline data plus envelope).
    pub max_record: u32,
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self {
            segment_size: 64 << 20,
            max_record: 4 << 20,
        }
    }
}

impl JournalConfig {
    /// The limits with `segment_size` kept where offsets fit in an `Lsn`.
    fn clamped(self) -> Self {
        let max_record = self.max_record.clamp(64, 1 << 30);
        let segment_size = self.segment_size.clamp(4096, u32::MAX - max_record - 64);
        Self {
            segment_size,
            max_record,
        }
    }
}

/// Path of segment `seq` under the journal directory.
pub fn segment_path(dir: &Path, seq: u32) -> PathBuf {
    dir.join(format!("{seq:010}.log"))
}

/// The segment numbers present in `dir`, ascending; other names are ignored.
pub fn list_segments(dir: &Path) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for ent in fs::read_dir(dir).ctx("readdir", dir)? {
        let ent = ent.ctx("readdir", dir)?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(num) = name.strip_suffix(".log") {
            if num.len() == 10 {
                if let Ok(n) = num.parse::<u32>() {
                    out.push(n);
                }
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// What one commit must sync; `run` it here or on a sync thread.
#[derive(Debug)]
pub struct SyncTicket {
    files: Vec<(Arc<File>, PathBuf)>,
    dir: Option<(File, PathBuf)>,
    end: Lsn,
}

impl SyncTicket {
    /// Syncs the files (and the directory); gives the position now durable.
    pub fn run(&self) -> Result<Lsn> {
        for (f, p) in &self.files {
            stats::count_fsync();
            f.sync_data().ctx("fdatasync", p)?;
        }
        if let Some((d, p)) = &self.dir {
            stats::count_fsync();
            d.sync_all().ctx("fsync", p)?;
        }
        Ok(self.end)
    }

    /// The position this ticket makes durable.
    pub fn end(&self) -> Lsn {
        self.end
    }
}

/// The journal, open for appending.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    cfg: JournalConfig,
    seq: u32,
    file: Arc<File>,
    /// Bytes of the current segment already handed to the OS.
    written: u32,
    /// Encoded records not yet written, starting at offset `written`.
    buf: Vec<u8>,
    /// Closed segments written but not yet synced.
    unsynced: Vec<(Arc<File>, PathBuf)>,
    dir_dirty: bool,
    durable: Lsn,
    segments: BTreeSet<u32>,
}

impl Journal {
    /// Opens `dir` for appending in a new segment after every existing one.
    ///
    /// Replay first (`replay::replay`): appending never continues an old
    /// segment, so a torn tail is never followed by good records.
    pub fn open(dir: &Path, cfg: JournalConfig) -> Result<Self> {
        fs::create_dir_all(dir).ctx("mkdir", dir)?;
        let existing = list_segments(dir)?;
        let seq = existing.last().map_or(1, |s| s.saturating_add(1));
        let mut j = Self {
            dir: dir.to_path_buf(),
            cfg: cfg.clamped(),
            seq,
            file: Arc::new(create_segment(dir, seq)?),
            written: 0,
            buf: Vec::with_capacity(64 << 10),
            unsynced: Vec::new(),
            dir_dirty: true,
            durable: Lsn::new(seq, 0),
            segments: existing.into_iter().collect(),
        };
        j.segments.insert(seq);
        j.buf.extend_from_slice(&segment_header(seq));
        // Written now so an idle restart leaves a valid empty segment, not a torn one.
        j.write_out()?;
        Ok(j)
    }

    /// The directory of the segments.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The current (appending) segment number.
    pub fn current_segment(&self) -> u32 {
        self.seq
    }

    /// The position after the last appended record.
    pub fn end(&self) -> Lsn {
        Lsn::new(self.seq, self.written + self.buf.len() as u32)
    }

    /// Everything before this position is durable.
    pub fn durable(&self) -> Lsn {
        self.durable
    }

    /// Whether records were appended since the last sync was prepared.
    pub fn has_pending(&self) -> bool {
        !self.buf.is_empty() || !self.unsynced.is_empty() || self.end() > self.durable
    }

    /// Buffers `rec`; gives its position. Durable once `commit` returns a larger `Lsn`.
    pub fn append(&mut self, rec: &Record) -> Result<Lsn> {
        let before = self.buf.len();
        encode_frame(rec, self.cfg.max_record, &mut self.buf)?;
        let frame_len = (self.buf.len() - before) as u64;
        let start = self.written as u64 + before as u64;
        if start + frame_len > self.cfg.segment_size as u64 && start > SEG_HEADER as u64 {
            let frame = self.buf.split_off(before);
            self.rotate()?;
            let at = self.end();
            self.buf.extend_from_slice(&frame);
            return Ok(at);
        }
        Ok(Lsn::new(self.seq, start as u32))
    }

    /// Closes the current segment and starts the next; its sync waits for the commit.
    fn rotate(&mut self) -> Result<()> {
        self.write_out()?;
        let next = self.seq.checked_add(1).ok_or(Error::TooLarge {
            size: u32::MAX as u64 + 1,
            limit: u32::MAX as u64,
        })?;
        let file = Arc::new(create_segment(&self.dir, next)?);
        let old = std::mem::replace(&mut self.file, file);
        self.unsynced.push((old, segment_path(&self.dir, self.seq)));
        self.seq = next;
        self.segments.insert(next);
        self.written = 0;
        self.dir_dirty = true;
        self.buf.extend_from_slice(&segment_header(next));
        Ok(())
    }

    /// Hands buffered bytes to the OS (no sync).
    fn write_out(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let path = segment_path(&self.dir, self.seq);
        self.file
            .write_all_at(&self.buf, self.written as u64)
            .ctx("write", &path)?;
        self.written += self.buf.len() as u32;
        self.buf.clear();
        Ok(())
    }

    /// Writes what is buffered and gives what must be synced; `None` when all is durable.
    pub fn prepare_commit(&mut self) -> Result<Option<SyncTicket>> {
        self.write_out()?;
        let end = self.end();
        if end == self.durable && self.unsynced.is_empty() && !self.dir_dirty {
            return Ok(None);
        }
        let mut files = std::mem::take(&mut self.unsynced);
        files.push((self.file.clone(), segment_path(&self.dir, self.seq)));
        let dir = if std::mem::take(&mut self.dir_dirty) {
            Some((
                File::open(&self.dir).ctx("open", &self.dir)?,
                self.dir.clone(),
            ))
        } else {
            None
        };
        Ok(Some(SyncTicket { files, dir, end }))
    }

    /// Records that a ticket's sync succeeded.
    pub fn mark_durable(&mut self, end: Lsn) {
        self.durable = self.durable.max(end);
    }

    /// Makes every appended record durable; gives the durable end.
    pub fn commit(&mut self) -> Result<Lsn> {
        if let Some(t) = self.prepare_commit()? {
            let end = t.run()?;
            self.mark_durable(end);
        }
        Ok(self.durable)
    }

    /// Reads back the record at `lsn` (e.g. a deferred message's head record).
    pub fn read_at(&self, lsn: Lsn) -> Result<Record> {
        let (seg, off) = (lsn.segment(), lsn.offset());
        if seg == self.seq && off >= self.written {
            let start = (off - self.written) as usize;
            let bytes = self.buf.get(start..).ok_or(Error::NoRecord(lsn))?;
            return decode_at(bytes, self.cfg.max_record, &self.dir, lsn);
        }
        let path = segment_path(&self.dir, seg);
        let opened;
        let file = if seg == self.seq {
            &*self.file
        } else {
            opened = File::open(&path).ctx("open", &path)?;
            &opened
        };
        let mut hdr = [0u8; FRAME_HEADER];
        file.read_exact_at(&mut hdr, off as u64)
            .map_err(|_| Error::NoRecord(lsn))?;
        let len = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        if len == 0 || len > self.cfg.max_record {
            return Err(corrupt(&path, Corruption::Bounds));
        }
        let mut frame = vec![0u8; FRAME_HEADER + len as usize];
        file.read_exact_at(&mut frame, off as u64)
            .map_err(|_| Error::NoRecord(lsn))?;
        decode_at(&frame, self.cfg.max_record, &path, lsn)
    }

    /// Segment numbers on disk, ascending (the current one included).
    pub fn segments(&self) -> Vec<u32> {
        self.segments.iter().copied().collect()
    }

    /// Deletes every closed segment numbered below `seq`; gives the deleted numbers.
    ///
    /// Call `Spool::checkpoint` first, so no removal they record can be undone.
    pub fn delete_segments_before(&mut self, seq: u32) -> Result<Vec<u32>> {
        let doomed: Vec<u32> = self
            .segments
            .iter()
            .copied()
            .filter(|&s| s < seq && s != self.seq)
            .collect();
        for &s in &doomed {
            let p = segment_path(&self.dir, s);
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(Error::Io {
                        op: "unlink",
                        path: p,
                        source: e,
                    })
                }
            }
            self.segments.remove(&s);
        }
        if !doomed.is_empty() {
            stats::count_fsync();
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .ctx("fsync", &self.dir)?;
        }
        Ok(doomed)
    }
}

fn decode_at(bytes: &[u8], max: u32, path: &Path, lsn: Lsn) -> Result<Record> {
    let (payload, _) = check_frame(bytes, max).map_err(|_| Error::NoRecord(lsn))?;
    postcard::from_bytes(payload).map_err(|_| corrupt(path, Corruption::Decode))
}

pub(crate) fn segment_header(seq: u32) -> [u8; SEG_HEADER as usize] {
    let mut h = [0u8; SEG_HEADER as usize];
    h[..8].copy_from_slice(&SEG_MAGIC);
    h[8..].copy_from_slice(&(seq as u64).to_le_bytes());
    h
}

fn create_segment(dir: &Path, seq: u32) -> Result<File> {
    let path = segment_path(dir, seq);
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .ctx("create", &path)
}
