//! A transaction's message data, read from where qmgr says it is.
//!
//! Inline bytes come in the request; a message file (`msg/…` or a pool
//! slot) is opened read-only with its checksum checked by the queue
//! crate; a span of the journal (a small message's bytes inside its
//! `Arrived` record) is read by `pread` from `journal/<seq>.log`, whose
//! header and length are checked first. Either way the data is wire
//! format (CRLF, dot-stuffed) and is read at positions, never held whole
//! unless it came inline, so an agent's memory does not grow with the
//! message.
//!
//! The newest journal segments an agent read stay open for the next
//! spans: in a run nearly every message lies in the one or two newest, and
//! opening, checking and closing a segment per message was four of the
//! smtp agent's system calls per message. A kept file stays right: within
//! one qmgr's life segment numbers only grow and written bytes never
//! change (a segment qmgr removed still reads through the open file), and
//! [`forget_segments`] drops them all when qmgr goes, since the next one
//! may number its segments anew. The cost: an agent can hold the disk
//! space of two removed segments (`journal_segment_size` each) until it
//! reads from newer ones or exits.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ipc::delivery::Data;
use queue::DataSpan;

/// How much is read at a time by [`Content::chunks`].
pub const CHUNK: usize = 64 * 1024;

/// Why the message data cannot be opened.
#[derive(Debug)]
#[non_exhaustive]
pub enum ContentError {
    /// The message file or journal segment is missing, unreadable or corrupt.
    Spool(queue::Error),
    /// The request named a message file outside the queue directory.
    BadPath(String),
}

impl fmt::Display for ContentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContentError::Spool(e) => write!(f, "{e}"),
            ContentError::BadPath(p) => write!(f, "{p}: not a path under the queue directory"),
        }
    }
}

impl std::error::Error for ContentError {}

#[derive(Debug)]
enum Source {
    Inline(Vec<u8>),
    File(Box<queue::MessageFile>),
    Journal {
        file: Arc<File>,
        offset: u64,
        len: u64,
    },
}

/// How many journal segments stay open: the one being written and the one
/// before it, whose last messages are still being delivered.
const KEPT_SEGMENTS: usize = 2;

/// A journal segment kept open: its directory, number, file and the size
/// it had when last looked at (it grows while qmgr writes to it).
struct KeptSegment {
    dir: PathBuf,
    seq: u32,
    file: Arc<File>,
    size: u64,
}

/// The kept segments, newest last. Agents are single-threaded; the lock
/// is for tests, which read from several spools at once.
static SEGMENTS: Mutex<Vec<KeptSegment>> = Mutex::new(Vec::new());

/// Closes every kept journal segment (qmgr went; the next may reuse numbers).
pub fn forget_segments() {
    SEGMENTS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The open segment of the journal in `dir` that holds `span`: a kept one
/// when the span lies within what it is known to hold (looked at again if
/// it has grown), else opened and checked by `queue::open_span`.
fn segment_for(dir: &Path, span: &DataSpan) -> Result<Arc<File>, queue::Error> {
    let mut kept = SEGMENTS.lock().unwrap_or_else(|e| e.into_inner());
    let end = span.offset as u64 + span.len as u64;
    if let Some(i) = kept
        .iter()
        .position(|k| k.seq == span.segment && k.dir == dir)
    {
        let k = &mut kept[i];
        // The segment header is checked when opened; a span inside it
        // would be corrupt, and open_span below says so.
        let header = queue::SEGMENT_HEADER_LEN as u64;
        if (span.offset as u64) >= header {
            if end > k.size {
                if let Ok(m) = k.file.metadata() {
                    k.size = m.len();
                }
            }
            if end <= k.size {
                return Ok(k.file.clone());
            }
        }
        kept.remove(i);
    }
    let file = Arc::new(queue::open_span(dir, span)?);
    let size = file.metadata().map(|m| m.len()).unwrap_or(end);
    if kept.len() >= KEPT_SEGMENTS {
        // Least recently opened first: spans arrive in journal order.
        kept.remove(0);
    }
    kept.push(KeptSegment {
        dir: dir.to_path_buf(),
        seq: span.segment,
        file: file.clone(),
        size,
    });
    Ok(file)
}

/// How much of a message is read for [`Content::header_is_8bit`]
/// (Postfix's header_size_limit).
pub const HEADER_SCAN: usize = 102_400;

/// The message data of one transaction.
#[derive(Debug)]
pub struct Content {
    source: Source,
}

impl Content {
    /// Bytes held in memory (inline data, and tests).
    pub fn inline(bytes: Vec<u8>) -> Content {
        Content {
            source: Source::Inline(bytes),
        }
    }

    /// Opens what `data` names, under the queue directory `queue_root`.
    pub fn open(data: &Data, queue_root: &Path) -> Result<Content, ContentError> {
        let source = match data {
            Data::Inline(b) => Source::Inline(b.clone()),
            // A probe sends no content.
            Data::Probe => Source::Inline(Vec::new()),
            Data::File(rel) => {
                // qmgr names files it made; anything else is not read.
                let p = Path::new(rel);
                if p.is_absolute() || p.components().any(|c| c.as_os_str() == "..") {
                    return Err(ContentError::BadPath(rel.clone()));
                }
                let f =
                    queue::MessageFile::open(&queue_root.join(p)).map_err(ContentError::Spool)?;
                Source::File(Box::new(f))
            }
            Data::Journal(span) => {
                let file =
                    segment_for(&queue_root.join("journal"), span).map_err(ContentError::Spool)?;
                Source::Journal {
                    file,
                    offset: span.offset as u64,
                    len: span.len as u64,
                }
            }
        };
        Ok(Content { source })
    }

    /// The size in bytes.
    pub fn len(&self) -> u64 {
        match &self.source {
            Source::Inline(b) => b.len() as u64,
            Source::File(f) => f.data_len(),
            Source::Journal { len, .. } => *len,
        }
    }

    /// Whether there are no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads from byte `pos` into `buf`; 0 at the end.
    pub fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        match &self.source {
            Source::Inline(b) => {
                let from = (pos.min(b.len() as u64)) as usize;
                let n = buf.len().min(b.len() - from);
                buf[..n].copy_from_slice(&b[from..from + n]);
                Ok(n)
            }
            Source::File(f) => f.read_data_at(buf, pos),
            Source::Journal { file, offset, len } => {
                let left = len.saturating_sub(pos);
                let want = (buf.len() as u64).min(left) as usize;
                if want == 0 {
                    return Ok(0);
                }
                // A segment never shrinks while it is live; a short read
                // means it was cut under us, which is an error, not an end.
                file.read_exact_at(&mut buf[..want], offset + pos)?;
                Ok(want)
            }
        }
    }

    /// Whether the header section (up to its empty line, at most
    /// [`HEADER_SCAN`] bytes) holds bytes beyond ASCII: UTF-8 headers that
    /// need SMTPUTF8 of the next hop (Postfix's SMTPUTF8_FLAG_HEADER).
    pub fn header_is_8bit(&self) -> io::Result<bool> {
        let mut buf = vec![0u8; HEADER_SCAN.min(self.len() as usize)];
        let mut got = 0;
        while got < buf.len() {
            match self.read_at(&mut buf[got..], got as u64)? {
                0 => break,
                n => got += n,
            }
        }
        let head = &buf[..got];
        let end = head
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(head.len(), |i| i + 2);
        Ok(!head[..end].is_ascii())
    }

    /// Hands the content to `each` a chunk at a time (inline data at once).
    pub fn chunks<E>(
        &self,
        mut each: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), Result<io::Error, E>> {
        if let Source::Inline(b) = &self.source {
            return each(b).map_err(Err);
        }
        let mut buf = vec![0u8; CHUNK];
        let mut at = 0u64;
        loop {
            let n = self.read_at(&mut buf, at).map_err(Ok)?;
            if n == 0 {
                return Ok(());
            }
            at += n as u64;
            each(&buf[..n]).map_err(Err)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mail::{Envelope, QueueId, Recipient};
    use queue::{DataRef, DataSpan, Journal, JournalConfig, MessageHead, Record};

    fn all(c: &Content) -> Vec<u8> {
        let mut out = Vec::new();
        c.chunks(|b| {
            out.extend_from_slice(b);
            Ok::<(), ()>(())
        })
        .unwrap();
        out
    }

    #[test]
    fn only_the_header_section_decides_whether_headers_are_8bit() {
        let c = |b: &[u8]| Content::inline(b.to_vec()).header_is_8bit().unwrap();
        assert!(!c(b"Subject: hi\r\n\r\ncaf\xc3\xa9\r\n"), "8-bit body only");
        assert!(c(b"Subject: caf\xc3\xa9\r\n\r\nbody\r\n"));
        assert!(c(b"Subject: hi\r\nFrom: j\xc3\xb6@x\r\n"), "no body at all");
        assert!(!c(b""));
    }

    /// The agent reads what qmgr journaled, from the segment files the
    /// queue crate wrote, by the spans the journal gave.
    #[test]
    fn journal_spans_read_back_the_inline_data() {
        let root = tempfile::tempdir().unwrap();
        let mut j = Journal::open(
            &root.path().join("journal"),
            JournalConfig {
                segment_size: 8192,
                max_record: 1 << 20,
            },
        )
        .unwrap();
        let mut want = Vec::new();
        for n in 0..12u32 {
            let data: Vec<u8> = format!("Subject: {n}\r\n\r\n")
                .bytes()
                .chain((0..n * 300).map(|i| b'a' + (i % 26) as u8))
                .collect();
            let rec = Record::Arrived(MessageHead {
                id: QueueId::from_parts(1_700_000_000_000_000 + n as u64, 1, n).unwrap(),
                envelope: Envelope {
                    sender: "a@example.org".into(),
                    recipients: vec![Recipient::new("b@example.net")],
                    ..Envelope::default()
                },
                data: DataRef::Inline(data.clone()),
            });
            let (_, span) = j.append_with_span(&rec).unwrap();
            want.push((span.unwrap(), data));
        }
        j.commit().unwrap();
        assert!(want.first().unwrap().0.segment < want.last().unwrap().0.segment);
        for (span, data) in &want {
            let c = Content::open(&Data::Journal(*span), root.path()).unwrap();
            assert_eq!(c.len(), data.len() as u64);
            assert_eq!(&all(&c), data);
            // Reads at any position stop at the data's end, not the record's.
            let mut buf = [0u8; 64];
            let tail = data.len().saturating_sub(10) as u64;
            let n = c.read_at(&mut buf, tail).unwrap();
            assert_eq!(&buf[..n], &data[tail as usize..]);
            assert_eq!(c.read_at(&mut buf, data.len() as u64).unwrap(), 0);
        }
        // A segment that is gone (qmgr removed it) is an error, not an empty message.
        let (span, _) = want[0];
        std::fs::remove_file(queue::segment_path(
            &root.path().join("journal"),
            span.segment,
        ))
        .unwrap();
        let e = Content::open(&Data::Journal(span), root.path()).unwrap_err();
        assert!(e.to_string().contains(".log"), "{e}");
    }

    fn arrived(n: u32, data: &[u8]) -> Record {
        Record::Arrived(MessageHead {
            id: QueueId::from_parts(1_700_000_000_000_000 + n as u64, 1, n).unwrap(),
            envelope: Envelope {
                sender: "a@example.org".into(),
                recipients: vec![Recipient::new("b@example.net")],
                ..Envelope::default()
            },
            data: DataRef::Inline(data.to_vec()),
        })
    }

    /// A segment kept open from one span serves the spans written to it
    /// later (it has grown since), and once qmgr is gone a segment of the
    /// same number written anew is read from the new file, not the kept one.
    #[test]
    fn kept_segments_follow_growth_and_a_new_journal() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("journal");
        let cfg = JournalConfig {
            segment_size: 1 << 20,
            max_record: 1 << 20,
        };
        let mut j = Journal::open(&dir, cfg).unwrap();
        let (_, first) = j.append_with_span(&arrived(1, b"first\r\n")).unwrap();
        j.commit().unwrap();
        let c = Content::open(&Data::Journal(first.unwrap()), root.path()).unwrap();
        assert_eq!(all(&c), b"first\r\n");
        let (_, second) = j.append_with_span(&arrived(2, b"second\r\n")).unwrap();
        j.commit().unwrap();
        let second = second.unwrap();
        assert_eq!(second.segment, first.unwrap().segment);
        let c = Content::open(&Data::Journal(second), root.path()).unwrap();
        assert_eq!(all(&c), b"second\r\n");
        // Beyond what the segment holds: an error, not bytes past its end.
        let past = DataSpan {
            offset: second.offset + 4096,
            ..second
        };
        assert!(Content::open(&Data::Journal(past), root.path()).is_err());

        drop(j);
        std::fs::remove_dir_all(&dir).unwrap();
        let mut j = Journal::open(&dir, cfg).unwrap();
        let (_, again) = j.append_with_span(&arrived(3, b"SECOND\r\n")).unwrap();
        j.commit().unwrap();
        let again = again.unwrap();
        assert_eq!(
            (again.segment, again.offset),
            (second.segment, first.unwrap().offset)
        );
        forget_segments();
        let c = Content::open(&Data::Journal(again), root.path()).unwrap();
        assert_eq!(all(&c), b"SECOND\r\n");
    }

    #[test]
    fn files_outside_the_queue_are_refused() {
        let root = tempfile::tempdir().unwrap();
        for bad in ["/etc/passwd", "../x", "msg/../../x"] {
            let e = Content::open(&Data::File(bad.into()), root.path()).unwrap_err();
            assert!(matches!(e, ContentError::BadPath(_)), "{bad}");
        }
        let c = Content::inline(b"abc".to_vec());
        let mut buf = [0u8; 2];
        assert_eq!(c.read_at(&mut buf, 1).unwrap(), 2);
        assert_eq!(&buf, b"bc");
        assert_eq!(c.read_at(&mut buf, 9).unwrap(), 0);
    }
}
