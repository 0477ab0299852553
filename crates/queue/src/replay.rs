//! Journal replay: rebuilds live messages and their recipients' state.
//!
//! Segments are read in order; within each, records are trusted up to the
//! first frame that is short, oversized, fails its crc or does not decode.
//! A segment written ahead (`ahead`) ends in zeros: a frame header of zeros
//! with nothing but zeros after it is the clean end of the records, and is
//! cut off (to give the space back; a failed cut is harmless), never
//! reported; zeros with anything else after them are a torn tail like any
//! other, as is a torn record followed by zeros (its crc fails).
//! That tail is truncated (and synced) if the disk lets it, and reported as a `TornTail`, and
//! replay goes on with the next segment: a crash can only tear the end of a
//! segment because appends never continue an old one. A segment too short
//! for its header (a crash during rotation) is deleted and reported; one
//! with a foreign header is reported and skipped. Per live message replay
//! keeps only its head position, storage and schedule (about 50 bytes; the
//! finished recipients sit in a side map for the few messages that have
//! some), and segments are streamed, so a million messages replay in bounded memory; the
//! full head record is read back with `Journal::read_at` when needed.
//! Nothing here panics on disk contents.

use crate::disk::{Disk, OsDisk};
use crate::error::{Error, IoContext, Result};
use crate::index::{DeferredIndex, SegmentRefs};
use crate::journal::Journal;
use crate::lsn::Lsn;
use crate::record::{decode_frame, FrameError, Record, Storage, FRAME_HEADER};
use crate::segment::{list_segments, segment_header, segment_path, SEG_HEADER};
use crate::stats;
use mail::{QueueId, StatusCode, Timestamp};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File};
use std::io::{BufReader, Read};
use std::path::Path;

/// One live message as replay leaves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveMessage {
    /// Position of its `Arrived` or latest `Rewritten` record.
    pub head: Lsn,
    /// Where its data is.
    pub storage: Storage,
    /// Next attempt (seconds since the epoch); 0 = never tried, due now.
    pub next_attempt: u64,
    /// On hold.
    pub held: bool,
    /// A hash of the envelope sender, lower-cased: qmgr admits messages
    /// round-robin by sender when its active queue is full.
    pub sender_key: u32,
    /// A delay warning was sent.
    pub warned: bool,
    /// Its latest `Deferred` record, for the reason `mailq` shows after a
    /// restart (records after a message's head are never garbage).
    pub last_deferred: Option<Lsn>,
}

/// The sender key of an envelope sender (FNV-1a over the lower-cased bytes).
pub fn sender_key(sender: &str) -> u32 {
    sender.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b.to_ascii_lowercase())).wrapping_mul(0x0100_0193)
    })
}

/// One line of `sluice queue list` (mailq).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// The queue id.
    pub id: QueueId,
    /// Message size in bytes.
    pub size: u64,
    /// Arrival time.
    pub arrival: Timestamp,
    /// Envelope sender ("" for the null sender).
    pub sender: String,
    /// Recipients still to deliver.
    pub recipients: Vec<String>,
    /// On hold.
    pub held: bool,
    /// Next attempt, seconds since the epoch (0 = not tried yet).
    pub next_attempt: u64,
}

/// Why the end of a segment was not trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailCause {
    /// A frame failed to check or decode.
    Frame(FrameError),
    /// The segment is shorter than its header (deleted).
    ShortHeader,
    /// The segment header is not ours (skipped, left in place).
    ForeignHeader,
}

/// A torn or corrupt tail found (and truncated) by replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// The segment.
    pub segment: u32,
    /// Where trust ended.
    pub offset: u32,
    /// Bytes dropped.
    pub dropped: u64,
    /// Why.
    pub cause: TailCause,
    /// Whether the bad bytes were cut off (a failed truncation leaves them,
    /// harmlessly: appends never continue an old segment, and the next
    /// replay stops at the same place).
    pub cut: bool,
}

/// A bounced recipient still owed a notice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounce {
    /// Index in the envelope.
    pub index: u32,
    /// Enhanced status of the failure.
    pub status: StatusCode,
    /// The reason as logged.
    pub reason: String,
    /// For a success notice rather than a failure: `Some(relayed)`.
    pub success: Option<bool>,
}

/// A message moved here whose transfer the sender has not settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// The sender's transfer id.
    pub transfer: String,
    /// The sending instance.
    pub from: String,
    /// It was on hold at the sender.
    pub held: bool,
    /// Delivery attempts made at the sender.
    pub attempts: u32,
}

/// The state replay rebuilds.
#[derive(Debug, Default)]
pub struct Replay {
    /// Live messages by queue id.
    pub messages: HashMap<QueueId, LiveMessage>,
    /// Recipient indices delivered or bounced since each message's head record
    /// (only messages that have some: most have none, so this stays small).
    pub done: HashMap<QueueId, Vec<u32>>,
    /// Bounced recipients of live messages whose notice is not known to be
    /// queued: index, status and reason, to build the notice again after a
    /// crash.
    pub unnotified: HashMap<QueueId, Vec<Bounce>>,
    /// Messages being moved away (`Moving`), and whether each was on
    /// hold before.
    pub moving: HashMap<QueueId, bool>,
    /// Messages moved here whose transfer is not settled yet (`Imported`,
    /// no `Released` since).
    pub imports: HashMap<QueueId, Import>,
    /// Ids with a `Removed` record still in the journal (their files may
    /// linger); filled by replay only, for recovery.
    pub removed: HashSet<QueueId>,
    /// Deferred messages by next attempt (not held, `next_attempt` > 0).
    pub deferred: DeferredIndex,
    /// Live messages never tried (or rewritten as due now), oldest first.
    pub incoming: Vec<QueueId>,
    /// Live head records per segment.
    pub refs: SegmentRefs,
    /// Segments replayed, ascending.
    pub segments: Vec<u32>,
    /// Segments with nothing live: delete them after `Spool::checkpoint`.
    pub dead_segments: Vec<u32>,
    /// Torn or corrupt tails that were cut.
    pub torn: Vec<TornTail>,
    /// Records applied.
    pub records: u64,
    /// Records naming a message replay does not know (its head was deleted).
    pub strays: u64,
    replaying: bool,
}

impl Replay {
    /// Recipients of `id` delivered or bounced since its head record.
    pub fn done(&self, id: QueueId) -> &[u32] {
        self.done.get(&id).map_or(&[], Vec::as_slice)
    }

    /// The recipients of `id` still to deliver, given its head record read back from the journal.
    pub fn pending(&self, id: QueueId, head: &Record) -> Vec<u32> {
        let all: Vec<u32> = match head {
            Record::Arrived(h) => (0..h.envelope.recipients.len() as u32).collect(),
            Record::Rewritten { remaining, .. } => remaining.clone(),
            _ => Vec::new(),
        };
        let done = self.done(id);
        all.into_iter().filter(|r| !done.contains(r)).collect()
    }

    /// Applies one record found at `lsn` (replay), or just appended (qmgr at run time).
    ///
    /// Keeps `messages`, `done`, `deferred` and `refs` current, so the same
    /// state serves replay and the running queue manager.
    pub fn apply(&mut self, lsn: Lsn, rec: &Record) {
        self.records += 1;
        match rec {
            Record::Arrived(h) => {
                let m = LiveMessage {
                    head: lsn,
                    storage: h.data.storage(),
                    next_attempt: 0,
                    held: false,
                    sender_key: sender_key(&h.envelope.sender),
                    warned: false,
                    last_deferred: None,
                };
                self.set_head(h.id, m);
            }
            Record::Rewritten {
                head,
                next_attempt,
                held,
                ..
            } => {
                let m = LiveMessage {
                    head: lsn,
                    storage: head.data.storage(),
                    next_attempt: *next_attempt,
                    held: *held,
                    sender_key: sender_key(&head.envelope.sender),
                    warned: false,
                    last_deferred: None,
                };
                self.set_head(head.id, m);
            }
            Record::Delivered { id, rcpts } => {
                if self.messages.contains_key(id) {
                    self.done.entry(*id).or_default().extend_from_slice(rcpts);
                } else {
                    self.strays += 1;
                }
            }
            Record::Bounced {
                id,
                rcpts,
                status,
                reason,
            } => {
                if self.messages.contains_key(id) {
                    self.done.entry(*id).or_default().extend_from_slice(rcpts);
                    let owed = self.unnotified.entry(*id).or_default();
                    owed.extend(rcpts.iter().map(|&index| Bounce {
                        index,
                        status: *status,
                        reason: reason.clone(),
                        success: None,
                    }));
                } else {
                    self.strays += 1;
                }
            }
            Record::Succeeded {
                id,
                rcpts,
                relayed,
                reason,
            } => {
                if self.messages.contains_key(id) {
                    let owed = self.unnotified.entry(*id).or_default();
                    owed.extend(rcpts.iter().map(|&index| Bounce {
                        index,
                        status: StatusCode::OK,
                        reason: reason.clone(),
                        success: Some(*relayed),
                    }));
                }
            }
            Record::Warned { id } => {
                if let Some(m) = self.messages.get_mut(id) {
                    m.warned = true;
                }
            }
            Record::Notified { id, rcpts } => {
                if let Some(owed) = self.unnotified.get_mut(id) {
                    owed.retain(|b| !rcpts.contains(&b.index));
                    if owed.is_empty() {
                        self.unnotified.remove(id);
                    }
                }
            }
            Record::Deferred {
                id, next_attempt, ..
            } => match self.messages.get_mut(id) {
                Some(m) => {
                    unschedule(&mut self.deferred, *id, m);
                    m.next_attempt = *next_attempt;
                    m.last_deferred = Some(lsn);
                    schedule(&mut self.deferred, *id, m);
                }
                None => self.strays += 1,
            },
            Record::Held { id } | Record::Released { id } => match self.messages.get_mut(id) {
                Some(m) => {
                    unschedule(&mut self.deferred, *id, m);
                    m.held = matches!(rec, Record::Held { .. });
                    schedule(&mut self.deferred, *id, m);
                    if !m.held {
                        self.moving.remove(id);
                        self.imports.remove(id);
                    }
                }
                None => self.strays += 1,
            },
            Record::Moving { id, held } => match self.messages.get_mut(id) {
                Some(m) => {
                    unschedule(&mut self.deferred, *id, m);
                    m.held = true;
                    self.moving.insert(*id, *held);
                }
                None => self.strays += 1,
            },
            Record::Imported {
                id,
                transfer,
                from,
                held,
                attempts,
            } => match self.messages.get_mut(id) {
                Some(m) => {
                    unschedule(&mut self.deferred, *id, m);
                    m.held = true;
                    self.imports.insert(
                        *id,
                        Import {
                            transfer: transfer.clone(),
                            from: from.clone(),
                            held: *held,
                            attempts: *attempts,
                        },
                    );
                }
                None => self.strays += 1,
            },
            Record::Removed { id } => {
                if let Some(old) = self.messages.remove(id) {
                    unschedule(&mut self.deferred, *id, &old);
                    self.refs.unpin(old.head);
                }
                self.done.remove(id);
                self.unnotified.remove(id);
                self.moving.remove(id);
                self.imports.remove(id);
                if self.replaying {
                    self.removed.insert(*id);
                }
            }
        }
    }

    fn set_head(&mut self, id: QueueId, mut m: LiveMessage) {
        // qmgr writes `Warned` again after a `Rewritten`, for when the
        // older records are gone; within one journal the flag carries over.
        // The last Deferred record does not: it may be in a segment that
        // goes now, and the retry that restated the message writes a new one.
        if let Some(o) = self.messages.get(&id) {
            m.warned |= o.warned;
        }
        self.removed.remove(&id);
        self.done.remove(&id);
        self.unnotified.remove(&id);
        self.refs.pin(m.head);
        schedule(&mut self.deferred, id, &m);
        if let Some(old) = self.messages.insert(id, m) {
            unschedule(&mut self.deferred, id, &old);
            self.refs.unpin(old.head);
        }
    }

    /// The `Rewritten` record that restates `id` at the journal head (fanf's
    /// rewrite at each retry), given its current head record; `None` if not live.
    pub fn rewritten(&self, id: QueueId, head: &Record, next_attempt: u64) -> Option<Record> {
        let m = self.messages.get(&id)?;
        let h = match head {
            Record::Arrived(h) | Record::Rewritten { head: h, .. } if h.id == id => h.clone(),
            _ => return None,
        };
        let remaining = self.pending(id, head);
        Some(Record::Rewritten {
            head: h,
            remaining,
            next_attempt,
            held: m.held,
        })
    }

    /// Everything that restates `id` at the journal head, so that the
    /// segments holding its older records can go: the `Rewritten` record,
    /// then the notices it still owes (one record per kind, status and
    /// reason), then `Warned` if it was warned. `None` if not live.
    pub fn restatement(
        &self,
        id: QueueId,
        head: &Record,
        next_attempt: u64,
    ) -> Option<Vec<Record>> {
        let mut out = vec![self.rewritten(id, head, next_attempt)?];
        let mut owed: BTreeMap<(Option<bool>, StatusCode, &str), Vec<u32>> = BTreeMap::new();
        for b in self.unnotified.get(&id).into_iter().flatten() {
            owed.entry((b.success, b.status, b.reason.as_str()))
                .or_default()
                .push(b.index);
        }
        for ((success, status, reason), rcpts) in owed {
            let reason = reason.to_string();
            out.push(match success {
                None => Record::Bounced {
                    id,
                    rcpts,
                    status,
                    reason,
                },
                Some(relayed) => Record::Succeeded {
                    id,
                    rcpts,
                    relayed,
                    reason,
                },
            });
        }
        if self.messages.get(&id).is_some_and(|m| m.warned) {
            out.push(Record::Warned { id });
        }
        Some(out)
    }

    /// The mailq view of the live queue, oldest first (reads each head record back).
    pub fn list(&self, journal: &Journal) -> Result<Vec<QueueEntry>> {
        let mut ids: Vec<QueueId> = self.messages.keys().copied().collect();
        ids.sort_unstable();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let m = &self.messages[&id];
            let head = journal.read_at(m.head)?;
            let (Record::Arrived(h) | Record::Rewritten { head: h, .. }) = &head else {
                return Err(Error::NoRecord(m.head));
            };
            let pending = self.pending(id, &head);
            let rcpts = &h.envelope.recipients;
            out.push(QueueEntry {
                id,
                size: h.envelope.size,
                arrival: h.envelope.arrival,
                sender: h.envelope.sender.clone(),
                recipients: pending
                    .iter()
                    .filter_map(|&i| rcpts.get(i as usize))
                    .map(|r| r.address.clone())
                    .collect(),
                held: m.held,
                next_attempt: m.next_attempt,
            });
        }
        Ok(out)
    }

    /// Lists the messages due now and the dead segments, once every record is applied.
    ///
    /// Ends replay proper: `removed` stops growing (a running qmgr does not need it).
    pub fn finish(&mut self, current: u32) {
        self.replaying = false;
        self.incoming = self
            .messages
            .iter()
            .filter(|(_, m)| !m.held && m.next_attempt == 0)
            .map(|(&id, _)| id)
            .collect();
        self.incoming.sort_unstable();
        let below = self.refs.delete_below(current);
        self.dead_segments = self
            .segments
            .iter()
            .copied()
            .filter(|&s| s < below)
            .collect();
    }
}

fn schedule(ix: &mut DeferredIndex, id: QueueId, m: &LiveMessage) {
    if !m.held && m.next_attempt > 0 {
        ix.insert(m.next_attempt, id, m.head);
    }
}

fn unschedule(ix: &mut DeferredIndex, id: QueueId, m: &LiveMessage) {
    if !m.held && m.next_attempt > 0 {
        ix.remove(m.next_attempt, id);
    }
}

/// Replays every segment in `dir`, truncating torn tails.
///
/// `current` is the segment appends will go to next (for dead-segment
/// accounting); pass `u32::MAX` when unknown.
pub fn replay(dir: &Path, max_record: u32) -> Result<Replay> {
    replay_on(dir, max_record, &OsDisk)
}

/// `replay`, truncating torn tails through `disk`.
pub fn replay_on(dir: &Path, max_record: u32, disk: &dyn Disk) -> Result<Replay> {
    let mut st = Replay {
        replaying: true,
        ..Replay::default()
    };
    fs::create_dir_all(dir).ctx("mkdir", dir)?;
    let segs = list_segments(dir)?;
    for &seq in &segs {
        replay_segment(dir, seq, max_record, disk, &mut st)?;
    }
    let next = segs.last().map_or(1, |s| s.saturating_add(1));
    st.finish(next);
    Ok(st)
}

fn replay_segment(
    dir: &Path,
    seq: u32,
    max_record: u32,
    disk: &dyn Disk,
    st: &mut Replay,
) -> Result<()> {
    let path = segment_path(dir, seq);
    let file = File::open(&path).ctx("open", &path)?;
    let len = file.metadata().ctx("fstat", &path)?.len();
    // Streamed, one frame in memory at a time: replay memory is the live state only.
    let mut rd = BufReader::with_capacity(256 << 10, file);
    let mut hdr = [0u8; SEG_HEADER as usize];
    if len < SEG_HEADER as u64 || rd.read_exact(&mut hdr).is_err() {
        // Unlinking needs no space; should it fail, the next replay finds it again.
        let cut = fs::remove_file(&path).is_ok();
        st.torn.push(TornTail {
            segment: seq,
            offset: 0,
            dropped: len,
            cause: TailCause::ShortHeader,
            cut,
        });
        return Ok(());
    }
    if hdr != segment_header(seq) {
        st.torn.push(TornTail {
            segment: seq,
            offset: 0,
            dropped: len,
            cause: TailCause::ForeignHeader,
            cut: false,
        });
        return Ok(());
    }
    st.segments.push(seq);
    let mut off = SEG_HEADER as u64;
    let mut frame = Vec::new();
    while off < len {
        let res = read_frame(&mut rd, len - off, max_record, &mut frame)
            .and_then(|whole| whole.then(|| decode_frame(&frame, max_record)).transpose());
        match res {
            Ok(Some((rec, n))) => {
                st.apply(Lsn::new(seq, off as u32), &rec);
                off += n as u64;
            }
            Ok(None) => {
                // The zeros written ahead: the end. Cut, if the disk lets us.
                let _ = disk.open(&path).and_then(|f| {
                    f.set_len(off)?;
                    stats::count_fsync();
                    f.sync_data()
                });
                break;
            }
            Err(e) => {
                // Recovery must not need to write: a tail that cannot be
                // cut now (read-only or failing disk) is left, and ignored.
                let cut = disk
                    .open(&path)
                    .and_then(|f| {
                        f.set_len(off)?;
                        stats::count_fsync();
                        f.sync_data()
                    })
                    .is_ok();
                st.torn.push(TornTail {
                    segment: seq,
                    offset: off as u32,
                    dropped: len - off,
                    cause: TailCause::Frame(e),
                    cut,
                });
                break;
            }
        }
    }
    Ok(())
}

/// Reads one whole frame (header and payload) into `buf`, given `left`
/// bytes remain in the file; false when the rest of the file is zeros
/// (the end of a segment written ahead).
fn read_frame(
    rd: &mut impl Read,
    left: u64,
    max: u32,
    buf: &mut Vec<u8>,
) -> std::result::Result<bool, FrameError> {
    let head = left.min(FRAME_HEADER as u64) as usize;
    buf.resize(head, 0);
    rd.read_exact(buf).map_err(|_| FrameError::Short)?;
    if buf.iter().all(|&b| b == 0) {
        if zeros_only(rd, left - head as u64) {
            return Ok(false);
        }
        return Err(if head < FRAME_HEADER {
            FrameError::Short
        } else {
            FrameError::Length(0)
        });
    }
    if head < FRAME_HEADER {
        return Err(FrameError::Short);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if len == 0 || len > max {
        return Err(FrameError::Length(len));
    }
    if left < (FRAME_HEADER as u64) + len as u64 {
        return Err(FrameError::Short);
    }
    buf.resize(FRAME_HEADER + len as usize, 0);
    rd.read_exact(&mut buf[FRAME_HEADER..])
        .map_err(|_| FrameError::Short)?;
    Ok(true)
}

/// Whether the next `left` bytes are all zeros (false on a read error).
fn zeros_only(rd: &mut impl Read, mut left: u64) -> bool {
    let mut chunk = vec![0u8; 64 << 10];
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        if rd.read_exact(&mut chunk[..n]).is_err() || chunk[..n].iter().any(|&b| b != 0) {
            return false;
        }
        left -= n as u64;
    }
    true
}
