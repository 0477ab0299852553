//! The message being delivered, read from where qmgr says it is and never
//! held whole.
//!
//! The data is an [`agent::Content`]: inline bytes, a message file, or a
//! span of the journal, read [`CHUNK`] bytes at a time for each target it
//! is written to (mbox, Maildir, file, command, forwarded copy), so
//! local's memory does not grow with the message: a 50 MB message costs
//! what a 50 KB one does. Only the start of the header section is kept (at
//! most [`HEAD_LIMIT`] bytes), for the `Delivered-To:` loop check and for
//! notices that carry the headers alone.

use std::io::{self, Write};
use std::path::Path;

use agent::{Content, ContentError};
use ipc::delivery::Data;

use crate::content::Unwire;

/// How much of the message is read at a time.
pub const CHUNK: usize = 64 * 1024;

/// How much of the start of a message is kept for its header section.
/// Far more than any header section cleanup lets through
/// (`header_size_limit` is per header, 100 KiB by default); a longer one
/// is looked at only this far.
pub const HEAD_LIMIT: usize = 1024 * 1024;

/// Why content could not be copied to where it was going.
#[derive(Debug)]
pub enum CopyError {
    /// The message could not be read from the spool.
    Read(io::Error),
    /// Where it was being written refused it.
    Write(io::Error),
}

/// A message's content, wire format (CRLF, dot-stuffed).
#[derive(Debug)]
pub struct Message {
    content: Content,
    /// The start of the message: its header section and the empty line
    /// after it, or at most [`HEAD_LIMIT`] bytes.
    head: Vec<u8>,
}

impl Message {
    /// A message held in memory (tests).
    #[cfg(test)]
    pub fn inline(bytes: Vec<u8>) -> Message {
        let end = head_end(&bytes).unwrap_or(bytes.len()).min(HEAD_LIMIT);
        let head = bytes[..end].to_vec();
        Message {
            content: Content::inline(bytes),
            head,
        }
    }

    /// The message a request names, under `queue_root`; its header section
    /// is read at once.
    pub fn open(data: &Data, queue_root: &Path) -> Result<Message, String> {
        let content = Content::open(data, queue_root).map_err(|e: ContentError| e.to_string())?;
        let mut m = Message {
            content,
            head: Vec::new(),
        };
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = m
                .content
                .read_at(&mut buf, m.head.len() as u64)
                .map_err(|e| e.to_string())?;
            m.head.extend_from_slice(&buf[..n]);
            // Searched from the start each time: the empty line may straddle
            // two reads, and this is at most 16 reads of a megabyte.
            if let Some(end) = head_end(&m.head) {
                m.head.truncate(end);
                break;
            }
            if n == 0 || m.head.len() >= HEAD_LIMIT {
                m.head.truncate(HEAD_LIMIT);
                break;
            }
        }
        m.head.shrink_to_fit();
        Ok(m)
    }

    /// The start of the message: the header section and the empty line
    /// that ends it (as much of it as fits in [`HEAD_LIMIT`]).
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// Whether the message is empty or its last bytes are a CRLF.
    pub fn ends_with_crlf(&self) -> io::Result<bool> {
        let len = self.len();
        if len == 0 {
            return Ok(true);
        }
        let mut last = [0u8; 2];
        let start = len.saturating_sub(2);
        let n = self
            .content
            .read_at(&mut last[..(len - start) as usize], start)?;
        Ok(last[..n] == *b"\r\n")
    }

    /// The size in bytes.
    pub fn len(&self) -> u64 {
        self.content.len()
    }

    /// Hands the content, wire format, to `each` a chunk at a time.
    pub fn chunks<E>(
        &self,
        each: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), Result<io::Error, E>> {
        self.content.chunks(each)
    }

    /// Writes the content in mailbox form (LF, unstuffed; mboxrd-quoted
    /// when `quote`) to `w`, a chunk at a time.
    pub fn write_unwired(&self, quote: bool, w: &mut dyn Write) -> Result<(), CopyError> {
        let mut unwire = Unwire::new(quote);
        let mut out = Vec::with_capacity(CHUNK + CHUNK / 8);
        self.chunks(|chunk| {
            out.clear();
            unwire.feed(chunk, &mut out);
            w.write_all(&out)
        })
        .map_err(|e| match e {
            Ok(read) => CopyError::Read(read),
            Err(write) => CopyError::Write(write),
        })?;
        out.clear();
        unwire.finish(&mut out);
        w.write_all(&out).map_err(CopyError::Write)
    }
}

/// Where the header section of `wire` ends: just after the empty line
/// (`\r\n\r\n`, or a `\r\n` first), if it is there.
fn head_end(wire: &[u8]) -> Option<usize> {
    if wire.starts_with(b"\r\n") {
        return Some(2);
    }
    wire.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message file in a spool made for the test, with `data` as content.
    fn file_message(dir: &Path, data: &[u8]) -> Message {
        let env = mail::Envelope {
            sender: "a@example.org".into(),
            recipients: vec![mail::Recipient::new("b@example.org")],
            ..mail::Envelope::default()
        };
        let path = dir.join("m");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        let id = mail::QueueId::from_parts(5, 6, 7).unwrap();
        let lock = queue::try_lock(&f, &path).unwrap().unwrap();
        let mut w = queue::FileWriter::new(f, lock, path, id).unwrap();
        for piece in data.chunks(1000) {
            w.append(piece).unwrap();
        }
        w.commit(&env).unwrap();
        Message::open(&Data::File("m".into()), dir).unwrap()
    }

    #[test]
    fn the_head_is_the_header_section_wherever_reads_end() {
        let dir = tempfile::tempdir().unwrap();
        // The empty line straddles the first two reads of the file.
        let mut big = b"Subject: x\r\n".to_vec();
        big.resize(CHUNK - 2, b'a');
        big.extend_from_slice(b"\r\n\r\nbody\r\n");
        let m = file_message(dir.path(), &big);
        assert_eq!(m.head(), &big[..CHUNK + 2]);
        assert_eq!(m.len(), big.len() as u64);
        assert!(m.ends_with_crlf().unwrap());
        let mut out = Vec::new();
        m.write_unwired(false, &mut out).unwrap();
        assert_eq!(out, crate::content::plain(&big));

        let m = Message::inline(b"\r\nbody".to_vec());
        assert_eq!(m.head(), b"\r\n");
        assert!(!m.ends_with_crlf().unwrap());
        let m = Message::inline(b"A: b\r\nC: d\r\n".to_vec());
        assert_eq!(m.head(), b"A: b\r\nC: d\r\n");
    }

    #[test]
    fn a_header_section_without_end_is_kept_only_so_far() {
        let dir = tempfile::tempdir().unwrap();
        let mut endless = Vec::new();
        while endless.len() < 2 * HEAD_LIMIT {
            endless.extend_from_slice(b"X-Long: 0123456789abcdef0123456789abcdef\r\n");
        }
        let m = file_message(dir.path(), &endless);
        assert_eq!(m.head(), &endless[..HEAD_LIMIT]);
        let mut n = 0u64;
        m.chunks(|c| {
            assert!(c.len() <= CHUNK);
            n += c.len() as u64;
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(n, endless.len() as u64);
    }
}
