//! The transaction journal: append-only segments with group commit.
//!
//! Segments are `journal/<seq>.log`, each a 16-byte header (magic, segment
//! number) followed by framed records (see `record`). `append` encodes a
//! record into an in-memory buffer and returns its position; `commit` writes
//! the buffer and makes everything appended so far durable with one
//! `fdatasync` per touched segment, oldest first (plus one directory fsync
//! after a segment was created), so a caller that batches N records pays
//! one sync for all.
//! `prepare_commit` / `SyncTicket::run` split a commit so the sync can run on
//! another thread (see `syncer`) while appends go on.
//! With a sync thread (`Syncer`), segments are written ahead (see
//! `ahead`): the next segment is made, zeros and all, before the current
//! one is full, so a commit overwrites synced blocks and its `fdatasync`
//! need not commit a new file size. Readers take the first frame header of
//! zeros followed by zeros only as the end of a segment's records, never
//! its file size. When no segment is ready in time, the journal appends to
//! a new one as before: acceptance never waits for zeros.
//! `append_with_span` also says where a record's inline message data lies
//! in its segment, and `open_span` opens it for reading (delivery agents
//! read small messages from the journal by reference).
//!
//! Only one process (qmgr) may hold a `Journal` on a spool. A failed commit
//! (a full disk, a failed write or sync) loses nothing: the records stay in
//! memory at their positions and the next commit writes them again, from
//! the last durable byte (PostgreSQL's fsync-failure lesson: never trust
//! the page cache after a failed sync, write the data again). File
//! operations go through `disk::Disk`, where tests inject faults. Nothing
//! here panics on disk contents.

use crate::ahead::{Ahead, ReadySegment, SegmentJob, FIRST_SIZE};
use crate::disk::{Disk, DiskFile, OsDisk};
use crate::error::{corrupt, Corruption, Error, IoContext, Result};
use crate::lsn::Lsn;
use crate::record::{check_frame, encode_frame, DataSpan, Record, FRAME_HEADER};
use crate::segment::{list_segments, segment_header, segment_path, SEG_HEADER};
use crate::stats;
use std::collections::BTreeSet;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Opens the segment under the journal directory `dir` that holds `span`,
/// read-only, for an agent to read the data from: its header must name
/// that segment and the span must lie within the file. (A segment written
/// ahead is full size from the start: the span comes from qmgr, which
/// names only records it wrote.)
pub fn open_span(dir: &Path, span: &DataSpan) -> Result<File> {
    let path = segment_path(dir, span.segment);
    let file = File::open(&path).ctx("open", &path)?;
    let mut hdr = [0u8; SEG_HEADER as usize];
    file.read_exact_at(&mut hdr, 0)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => corrupt(&path, Corruption::Truncated),
            _ => Error::Io {
                op: "read",
                path: path.clone(),
                source: e,
            },
        })?;
    if hdr != segment_header(span.segment) {
        return Err(corrupt(&path, Corruption::Magic));
    }
    let size = file.metadata().ctx("fstat", &path)?.len();
    if span.offset < SEG_HEADER || span.offset as u64 + span.len as u64 > size {
        return Err(corrupt(&path, Corruption::Bounds));
    }
    Ok(file)
}

/// What one commit must sync; `run` it here or on a sync thread.
#[derive(Debug)]
pub struct SyncTicket {
    files: Vec<(Arc<dyn DiskFile>, PathBuf)>,
    dir: Option<(Arc<dyn Disk>, PathBuf)>,
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
            d.sync_dir(p).ctx("fsync", p)?;
        }
        Ok(self.end)
    }

    /// The position this ticket makes durable.
    pub fn end(&self) -> Lsn {
        self.end
    }
}

/// The part of one segment that is not yet durable.
#[derive(Debug)]
struct Tail {
    seq: u32,
    /// Created on the first write: an idle journal writes nothing.
    file: Option<Arc<dyn DiskFile>>,
    /// Offset of `bytes[0]` in the segment; everything before is durable.
    base: u32,
    /// Encoded records (and the header of a new segment) not yet durable.
    bytes: Vec<u8>,
    /// `bytes[..handed]` are written to the OS; always a frame boundary.
    handed: usize,
    /// A record that would end past this offset goes to the next segment.
    limit: u64,
    /// Written ahead: records overwrite synced zeros.
    ahead: bool,
}

impl Tail {
    fn new(seq: u32, limit: u32) -> Self {
        let mut bytes = Vec::with_capacity(64 << 10);
        bytes.extend_from_slice(&segment_header(seq));
        Self {
            seq,
            file: None,
            base: 0,
            bytes,
            handed: 0,
            limit: limit as u64,
            ahead: false,
        }
    }

    /// A segment written ahead. Its header is written again with the first
    /// records (the same bytes, in the same block): simpler than a tail
    /// that starts durable.
    fn written_ahead(r: ReadySegment) -> Self {
        let mut t = Self::new(r.seq, r.size);
        t.file = Some(r.file);
        t.ahead = true;
        t
    }

    /// Nothing appended and no file: can be dropped for a segment written ahead.
    fn untouched(&self) -> bool {
        self.file.is_none() && self.base == 0 && self.bytes.len() == SEG_HEADER as usize
    }

    fn end(&self) -> u32 {
        self.base + self.bytes.len() as u32
    }
}

/// The journal, open for appending.
///
/// Records not yet durable stay in memory, at the positions `append` gave
/// them, until a sync covers them: a failed write is cut back to the last
/// record boundary (`ftruncate`) and a failed sync makes every undurable
/// byte be written again, so after any failure the journal can simply be
/// committed again, and acknowledged records keep their positions.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    cfg: JournalConfig,
    disk: Arc<dyn Disk>,
    /// Segments with undurable bytes, oldest first; the last is the current one.
    tails: Vec<Tail>,
    dir_dirty: bool,
    durable: Lsn,
    segments: BTreeSet<u32>,
    /// The next segment number to hand out (appended or written ahead).
    next_seq: u32,
    /// The next segment written ahead, if any.
    ahead: Ahead,
    /// The size of the next segment to write ahead.
    ahead_size: u32,
    /// Segments below `.0` found garbage while the journal ended at `.1`:
    /// deleted once that is durable.
    doomed: Option<(u32, Lsn)>,
}

impl Journal {
    /// Opens `dir` for appending in a new segment after every existing one.
    ///
    /// Replay first (`replay::replay`): appending never continues an old
    /// segment, so a torn tail is never followed by good records. Nothing
    /// is written until the first commit with records in it.
    pub fn open(dir: &Path, cfg: JournalConfig) -> Result<Self> {
        Self::open_on(dir, cfg, Arc::new(OsDisk))
    }

    /// `open`, with the segment files' operations going to `disk`.
    pub fn open_on(dir: &Path, cfg: JournalConfig, disk: Arc<dyn Disk>) -> Result<Self> {
        if !dir.is_dir() {
            fs::create_dir_all(dir).ctx("mkdir", dir)?;
        }
        let existing = list_segments(dir)?;
        let seq = existing.last().map_or(1, |s| s.saturating_add(1));
        let mut segments: BTreeSet<u32> = existing.into_iter().collect();
        segments.insert(seq);
        let cfg = cfg.clamped();
        Ok(Self {
            dir: dir.to_path_buf(),
            cfg,
            disk,
            tails: vec![Tail::new(seq, cfg.segment_size)],
            dir_dirty: false,
            // The header alone needs no sync: nothing acknowledged is in it.
            durable: Lsn::new(seq, SEG_HEADER),
            segments,
            next_seq: seq.saturating_add(1),
            ahead: Ahead::Idle,
            ahead_size: FIRST_SIZE.min(cfg.segment_size),
            doomed: None,
        })
    }

    /// The directory of the segments.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn cur(&self) -> &Tail {
        self.tails
            .last()
            .expect("journal: the current segment always has a tail")
    }

    fn cur_mut(&mut self) -> &mut Tail {
        self.tails
            .last_mut()
            .expect("journal: the current segment always has a tail")
    }

    /// The current (appending) segment number.
    pub fn current_segment(&self) -> u32 {
        self.cur().seq
    }

    /// The position after the last appended record.
    pub fn end(&self) -> Lsn {
        let t = self.cur();
        Lsn::new(t.seq, t.end())
    }

    /// Everything before this position is durable.
    pub fn durable(&self) -> Lsn {
        self.durable
    }

    /// Whether records were appended that are not yet durable.
    pub fn has_pending(&self) -> bool {
        self.end() > self.durable || self.dir_dirty
    }

    /// Bytes appended and not yet durable (kept in memory until they are).
    pub fn pending_bytes(&self) -> usize {
        self.tails.iter().map(|t| t.bytes.len()).sum()
    }

    /// Buffers `rec`; gives its position. Durable once `commit` returns a larger `Lsn`.
    ///
    /// No I/O: fails only for a record that cannot be encoded within
    /// `max_record`, and then appends nothing.
    pub fn append(&mut self, rec: &Record) -> Result<Lsn> {
        let max = self.cfg.max_record;
        let t = self.cur_mut();
        let before = t.bytes.len();
        encode_frame(rec, max, &mut t.bytes)?;
        let frame_len = (t.bytes.len() - before) as u64;
        let start = t.base as u64 + before as u64;
        if start + frame_len > t.limit && start > SEG_HEADER as u64 {
            let frame = t.bytes.split_off(before);
            // Closed here; its sync waits for the next commit.
            let mut n = match std::mem::replace(&mut self.ahead, Ahead::Idle) {
                Ahead::Ready(r) => Tail::written_ahead(r),
                other => {
                    let Some(next) = self.take_seq() else {
                        self.ahead = other;
                        return Err(Error::TooLarge {
                            size: u32::MAX as u64 + 1,
                            limit: u32::MAX as u64,
                        });
                    };
                    // Not ready in time: append, and keep the one being
                    // written (it will be numbered below this one, and
                    // left empty). After a failure, ask again now.
                    if let Ahead::Running = other {
                        self.ahead = other;
                    }
                    Tail::new(next, self.cfg.segment_size)
                }
            };
            let seq = n.seq;
            n.bytes.extend_from_slice(&frame);
            self.tails.push(n);
            self.segments.insert(seq);
            return Ok(Lsn::new(seq, SEG_HEADER));
        }
        Ok(Lsn::new(t.seq, start as u32))
    }

    fn take_seq(&mut self) -> Option<u32> {
        let seq = self.next_seq;
        self.next_seq = seq.checked_add(1)?;
        Some(seq)
    }

    /// The next segment to write ahead, when one is due: none is ready or
    /// being written, and the current segment is a quarter full (or was
    /// appended). Run it off the event loop, then give the outcome to
    /// `segment_ready`.
    pub fn segment_job(&mut self) -> Option<SegmentJob> {
        if !self.segment_job_due() {
            return None;
        }
        let seq = self.take_seq()?;
        self.ahead = Ahead::Running;
        Some(SegmentJob {
            seq,
            size: self.ahead_size,
            path: segment_path(&self.dir, seq),
            dir: self.dir.clone(),
            disk: self.disk.clone(),
        })
    }

    /// Whether `segment_job` would give a job now.
    pub fn segment_job_due(&self) -> bool {
        let t = self.cur();
        matches!(self.ahead, Ahead::Idle) && (!t.ahead || t.end() as u64 >= t.limit / 4)
    }

    /// Takes in a segment written ahead, or the error that stopped it
    /// (given back, for the log: the journal appends meanwhile).
    ///
    /// A current segment that was appended is closed at once for it (and
    /// dropped if nothing was appended to it yet); one written ahead fills
    /// up first. A segment finished after the journal had to move past its
    /// number stays empty, for `delete_segments_before`.
    pub fn segment_ready(&mut self, res: Result<ReadySegment>) -> Result<()> {
        let r = match res {
            Ok(r) => r,
            Err(e) => {
                self.ahead = Ahead::Failed;
                return Err(e);
            }
        };
        self.ahead = Ahead::Idle;
        self.segments.insert(r.seq);
        if r.seq < self.cur().seq {
            return Ok(());
        }
        self.ahead_size = self.ahead_size.saturating_mul(2).min(self.cfg.segment_size);
        if self.cur().ahead {
            self.ahead = Ahead::Ready(r);
            return Ok(());
        }
        if self.cur().untouched() {
            let old = self.tails.pop().expect("journal: a current tail");
            self.segments.remove(&old.seq);
        }
        self.tails.push(Tail::written_ahead(r));
        Ok(())
    }

    /// Whether the current segment was written ahead (tests, benchmarks).
    pub fn writing_ahead(&self) -> bool {
        self.cur().ahead
    }

    /// [`Journal::append`], and where the record's inline message data
    /// will lie in its segment (`None` for a record without): what an
    /// agent is given to read the message by reference.
    pub fn append_with_span(&mut self, rec: &Record) -> Result<(Lsn, Option<DataSpan>)> {
        let lsn = self.append(rec)?;
        Ok((lsn, rec.data_span(lsn)))
    }

    /// The oldest segment with bytes not yet durable.
    fn oldest_undurable(&self) -> Option<usize> {
        let durable = self.durable;
        self.tails
            .iter()
            .position(|t| Lsn::new(t.seq, t.end()) > durable)
    }

    /// Hands the buffered bytes of tail `i` to the OS (no sync).
    ///
    /// On failure the segment is cut back to the last record boundary
    /// written, so what is on disk is always whole records of this journal
    /// followed by nothing, and the same bytes are written again next time.
    fn write_out(&mut self, i: usize) -> Result<()> {
        let t = &mut self.tails[i];
        if t.handed == t.bytes.len() {
            return Ok(());
        }
        let path = segment_path(&self.dir, t.seq);
        let file = match &t.file {
            Some(f) => f.clone(),
            None => {
                let f = self.disk.create(&path).ctx("create", &path)?;
                t.file = Some(f.clone());
                self.dir_dirty = true;
                f
            }
        };
        let mut at = t.handed;
        while at < t.bytes.len() {
            match file.write_at(&t.bytes[at..], t.base as u64 + at as u64) {
                Ok(0) => {
                    let e = std::io::Error::new(std::io::ErrorKind::WriteZero, "wrote nothing");
                    return Err(cut_back(&*file, t, &path, e));
                }
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(cut_back(&*file, t, &path, e)),
            }
        }
        t.handed = at;
        Ok(())
    }

    /// Writes what is buffered and gives what must be synced; `None` when all is durable.
    ///
    /// One segment per ticket, oldest first: a later segment's records are
    /// not written before an earlier one's are durable, so after a crash
    /// (even one after a failed sync lost data) replay finds a prefix of
    /// what was appended, never records after a gap. After an error
    /// nothing is lost: commit again later.
    pub fn prepare_commit(&mut self) -> Result<Option<SyncTicket>> {
        let Some(i) = self.oldest_undurable() else {
            if !std::mem::take(&mut self.dir_dirty) {
                return Ok(None);
            }
            return Ok(Some(SyncTicket {
                files: Vec::new(),
                dir: Some((self.disk.clone(), self.dir.clone())),
                end: self.durable,
            }));
        };
        self.write_out(i)?;
        let t = &self.tails[i];
        let file = t.file.clone().expect("journal: write_out created the file");
        let files = vec![(file, segment_path(&self.dir, t.seq))];
        let end = Lsn::new(t.seq, t.end());
        let dir =
            std::mem::take(&mut self.dir_dirty).then(|| (self.disk.clone(), self.dir.clone()));
        Ok(Some(SyncTicket { files, dir, end }))
    }

    /// Records that a ticket's sync succeeded: its bytes leave memory.
    pub fn mark_durable(&mut self, end: Lsn) {
        if end < self.durable {
            return;
        }
        self.durable = end;
        let last = self.tails.len() - 1;
        let mut i = 0;
        self.tails.retain(|t| {
            i += 1;
            i - 1 == last || t.seq >= end.segment()
        });
        for t in &mut self.tails {
            if t.seq == end.segment() && end.offset() > t.base {
                let n = ((end.offset() - t.base) as usize).min(t.bytes.len());
                t.bytes.drain(..n);
                t.base += n as u32;
                t.handed = t.handed.saturating_sub(n);
            }
        }
    }

    /// Records that a ticket's sync failed: its bytes may not be on disk
    /// (a failed `fdatasync` can drop dirty pages), so every undurable byte
    /// is written again, and the directory synced again, at the next commit.
    pub fn sync_failed(&mut self) {
        for t in &mut self.tails {
            t.handed = 0;
        }
        if self.tails.iter().any(|t| t.file.is_some()) {
            self.dir_dirty = true;
        }
    }

    /// Makes every appended record durable; gives the durable end.
    ///
    /// After an error the records are still pending: commit again later.
    pub fn commit(&mut self) -> Result<Lsn> {
        while let Some(t) = self.prepare_commit()? {
            match t.run() {
                Ok(end) => self.mark_durable(end),
                Err(e) => {
                    self.sync_failed();
                    return Err(e);
                }
            }
        }
        Ok(self.durable)
    }

    /// Reads back the record at `lsn` (e.g. a deferred message's head record).
    pub fn read_at(&self, lsn: Lsn) -> Result<Record> {
        let (seg, off) = (lsn.segment(), lsn.offset());
        let tail = self.tails.iter().find(|t| t.seq == seg);
        if let Some(t) = tail.filter(|t| off >= t.base) {
            let start = (off - t.base) as usize;
            let bytes = t.bytes.get(start..).ok_or(Error::NoRecord(lsn))?;
            return decode_at(bytes, self.cfg.max_record, &self.dir, lsn);
        }
        let path = segment_path(&self.dir, seg);
        let file = match tail.and_then(|t| t.file.as_ref()) {
            Some(f) => Segment::Kept(f.as_ref()),
            None => Segment::Opened(File::open(&path).ctx("open", &path)?),
        };
        // One read takes the frame's header and, for a small message's
        // record (most of them), the whole frame: a second read only for
        // what lies beyond. The first read goes to the stack: a heap buffer
        // of this size per activation cost qmgr an allocation that also
        // made malloc consolidate its free lists.
        let mut first = [0u8; READ_AHEAD];
        let got = loop {
            match file.read_some_at(&mut first, off as u64) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r.map_err(|_| Error::NoRecord(lsn))?,
            }
        };
        if got < FRAME_HEADER {
            return Err(Error::NoRecord(lsn));
        }
        let len = u32::from_le_bytes([first[0], first[1], first[2], first[3]]);
        if first[..FRAME_HEADER].iter().all(|&b| b == 0) {
            // The zeros of a segment written ahead: past its records.
            return Err(Error::NoRecord(lsn));
        }
        if len == 0 || len > self.cfg.max_record {
            return Err(corrupt(&path, Corruption::Bounds));
        }
        let whole = FRAME_HEADER + len as usize;
        if whole <= got {
            return decode_at(&first[..whole], self.cfg.max_record, &path, lsn);
        }
        let mut frame = vec![0u8; whole];
        frame[..got].copy_from_slice(&first[..got]);
        file.read_exact_some_at(&mut frame[got..], off as u64 + got as u64)
            .map_err(|_| Error::NoRecord(lsn))?;
        decode_at(&frame, self.cfg.max_record, &path, lsn)
    }

    /// Segment numbers on disk, ascending (the current one included).
    pub fn segments(&self) -> Vec<u32> {
        self.segments.iter().copied().collect()
    }

    /// Deletes every closed segment numbered below `seq`, or below what an
    /// earlier call gave once the records appended before it are durable;
    /// gives the deleted numbers.
    ///
    /// Call `Spool::checkpoint` first, so no removal they record can be undone.
    pub fn delete_segments_before(&mut self, seq: u32) -> Result<Vec<u32>> {
        // What made a segment garbage may not be durable yet: a retried
        // message restated at the head, a Removed record. Deleting the
        // segment before would lose the message, or bring its data back
        // as a new arrival, in a crash; so what is found garbage now goes
        // once everything appended until now is durable (at once if it is).
        let seq = if self.durable >= self.end() {
            self.doomed = None;
            seq
        } else {
            match self.doomed {
                Some((ripe, at)) if self.durable >= at => {
                    self.doomed = Some((seq, self.end()));
                    ripe.min(seq)
                }
                Some(_) => 0,
                None => {
                    self.doomed = Some((seq, self.end()));
                    0
                }
            }
        };
        let oldest_tail = self.tails.first().map_or(u32::MAX, |t| t.seq);
        // A segment with undurable bytes is never garbage.
        let seq = seq.min(oldest_tail);
        let doomed: Vec<u32> = self.segments.iter().copied().filter(|&s| s < seq).collect();
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
            self.disk.sync_dir(&self.dir).ctx("fsync", &self.dir)?;
        }
        Ok(doomed)
    }
}

/// Cuts a segment back to its last good length after a failed write.
fn cut_back(file: &dyn DiskFile, t: &Tail, path: &Path, e: std::io::Error) -> Error {
    // Shrinking needs no space. Should it fail too, the bytes past the cut
    // are a prefix of these same records, which replay cuts as a torn tail
    // and the next write overwrites.
    let _ = file.set_len(t.base as u64 + t.handed as u64);
    Error::Io {
        op: "write",
        path: path.to_path_buf(),
        source: e,
    }
}

/// How much `Journal::read_at` reads at first: the frame of a message of
/// a few KiB inline, whole.
const READ_AHEAD: usize = 8 * 1024;

/// A segment read by `Journal::read_at`: one of the journal's open files,
/// or one opened for this read.
enum Segment<'a> {
    Kept(&'a dyn DiskFile),
    Opened(File),
}

impl Segment<'_> {
    fn read_some_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        match self {
            Segment::Kept(f) => f.read_at(buf, offset),
            Segment::Opened(f) => FileExt::read_at(f, buf, offset),
        }
    }

    fn read_exact_some_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match self {
            Segment::Kept(f) => f.read_exact_at(buf, offset),
            Segment::Opened(f) => FileExt::read_exact_at(f, buf, offset),
        }
    }
}

fn decode_at(bytes: &[u8], max: u32, path: &Path, lsn: Lsn) -> Result<Record> {
    let (payload, _) = check_frame(bytes, max).map_err(|_| Error::NoRecord(lsn))?;
    postcard::from_bytes(payload).map_err(|_| corrupt(path, Corruption::Decode))
}
