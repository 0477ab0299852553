//! Message files: written once front to back, committed by one sync.
//!
//! Layout: a 64-byte header (magic, format version, `envelope_offset`,
//! queue id), the message data exactly as it goes on the wire, then at
//! `envelope_offset`: `[len u32][postcard Envelope][crc32 u32][END marker]`,
//! the crc covering the queue id, data and envelope. `envelope_offset` is written last:
//! while it is 0 the file is a partial write (or a free pool slot). Because
//! the crc covers everything, one sync after the offset write is enough: a
//! crash during it leaves either offset 0 or a bad crc, never a file that
//! passes for committed. Pool slots are reused without truncation; the END
//! marker shows where this message's contents stop and old junk begins.
//!
//! The writer holds at most one 64 KiB buffer; the reader verifies the crc
//! (one streaming pass) before handing out the envelope and the data.
//! Limits: envelopes up to 16 MiB. Nothing here panics on file contents.
//!
//! Format 2 holds the whole `Envelope`; format 1 (written before tenants
//! and jobs) holds its first layout, `mail::EnvelopeV1`, and still reads.

use crate::error::{corrupt, Corruption, Error, IoContext, Result};
use crate::stats;
use mail::{Envelope, QueueId};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// File magic.
const MAGIC: [u8; 8] = *b"SLUICEMF";
/// Format version written by this build.
pub const FORMAT_VERSION: u32 = 2;
/// The format before the envelope had a tenant and a job.
const FORMAT_V1: u32 = 1;
/// Header length; data starts here.
pub const HEADER_LEN: u64 = 64;
const OFFSET_AT: u64 = 16;
const ID_AT: usize = 24;
/// End-of-content marker after the checksum.
const END_MARKER: [u8; 8] = *b"SLUICEND";
const MAX_ENVELOPE: u32 = 16 << 20;
const BUF: usize = 64 << 10;

fn header(id: QueueId, envelope_offset: u64) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[OFFSET_AT as usize..OFFSET_AT as usize + 8].copy_from_slice(&envelope_offset.to_le_bytes());
    h[ID_AT..ID_AT + 16].copy_from_slice(&id.to_bytes());
    h
}

/// A crc state seeded with the id, so a damaged id in the header is caught.
fn id_crc(id: QueueId) -> crc32fast::Hasher {
    let mut h = crc32fast::Hasher::new();
    h.update(&id.to_bytes());
    h
}

/// What a message file's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    /// `envelope_offset` is 0: partial write, or a free pool slot.
    Uncommitted,
    /// Committed (header only checked) for this queue id.
    Committed(QueueId),
}

/// Reads only the header of `file` (cheap; no checksum).
pub fn probe(file: &File, path: &Path) -> Result<FileState> {
    let mut h = [0u8; HEADER_LEN as usize];
    match file.read_exact_at(&mut h, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(FileState::Uncommitted),
        Err(e) => {
            return Err(Error::Io {
                op: "read",
                path: path.to_path_buf(),
                source: e,
            })
        }
    }
    if h[..8] != MAGIC {
        // A fresh pool slot is all zeros; anything else is not ours.
        if h.iter().all(|&b| b == 0) {
            return Ok(FileState::Uncommitted);
        }
        return Err(corrupt(path, Corruption::Magic));
    }
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if version != FORMAT_VERSION && version != FORMAT_V1 {
        return Err(corrupt(path, Corruption::Version(version)));
    }
    let off = u64::from_le_bytes(h[16..24].try_into().unwrap_or([0; 8]));
    if off == 0 {
        return Ok(FileState::Uncommitted);
    }
    let id = QueueId::from_bytes(h[ID_AT..ID_AT + 16].try_into().unwrap_or([0xff; 16]))
        .ok_or_else(|| corrupt(path, Corruption::WrongId))?;
    Ok(FileState::Committed(id))
}

/// `bytes` decoded as one `T` with nothing left over: a format's
/// envelope never passes for another's.
fn whole<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    match postcard::take_from_bytes::<T>(bytes) {
        Ok((v, [])) => Some(v),
        _ => None,
    }
}

/// An exclusive `flock` held by the process writing (or deleting) a message file.
pub type FileLock = Flock<File>;

/// Tries to take the writer's lock on `file`; `None` when another process holds it.
pub fn try_lock(file: &File, path: &Path) -> Result<Option<FileLock>> {
    let dup = file.try_clone().ctx("dup", path)?;
    match Flock::lock(dup, FlockArg::LockExclusiveNonblock) {
        Ok(l) => Ok(Some(l)),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(Error::Io {
            op: "flock",
            path: path.to_path_buf(),
            source: e.into(),
        }),
    }
}

/// Marks a file free/uncommitted by zeroing `envelope_offset` (no sync).
pub fn zap(file: &File, path: &Path) -> Result<()> {
    file.write_all_at(&[0u8; 8], OFFSET_AT).ctx("write", path)
}

/// Streams one message into a file; nothing is committed until `commit`.
#[derive(Debug)]
pub struct FileWriter {
    file: File,
    /// Held while writing, so recovery in another process leaves the file alone.
    _lock: FileLock,
    path: PathBuf,
    id: QueueId,
    pos: u64,
    buf: Vec<u8>,
    crc: crc32fast::Hasher,
    head: Head,
}

/// The bytes reserved at the front of the data, if any (see [`FileWriter::reserve`]).
#[derive(Debug)]
enum Head {
    None,
    /// Reserved, not written: its length and the checksum of what precedes it.
    Reserved(u64, crc32fast::Hasher),
    /// Written: the checksum up to its end, to which the rest's is joined.
    Filled(crc32fast::Hasher),
}

impl FileWriter {
    /// Starts writing message `id` at the front of `file` (new, or a reused pool slot).
    ///
    /// `lock` is this process's `try_lock` on the file, kept until commit.
    pub fn new(file: File, lock: FileLock, path: PathBuf, id: QueueId) -> Result<Self> {
        file.write_all_at(&header(id, 0), 0).ctx("write", &path)?;
        Ok(Self {
            file,
            _lock: lock,
            path,
            id,
            pos: HEADER_LEN,
            buf: Vec::with_capacity(BUF),
            crc: id_crc(id),
            head: Head::None,
        })
    }

    /// Reserves `n` bytes at the front of the data, before anything is
    /// appended, for [`FileWriter::fill`] to write before `commit`: a
    /// header that can only be made once the rest has been seen (a DKIM
    /// signature) goes first without the rest being held back. The rest's
    /// checksum is kept apart and joined to the front's at commit.
    pub fn reserve(&mut self, n: u64) {
        if self.data_len() != 0 || !matches!(self.head, Head::None) {
            panic!("queue::msgfile: reserve after data");
        }
        self.pos += n;
        let front = std::mem::replace(&mut self.crc, crc32fast::Hasher::new());
        self.head = Head::Reserved(n, front);
    }

    /// Writes the reserved bytes; `bytes` must be exactly as long.
    pub fn fill(&mut self, bytes: &[u8]) -> Result<()> {
        let Head::Reserved(n, front) = &mut self.head else {
            panic!("queue::msgfile: fill without a reserve");
        };
        if bytes.len() as u64 != *n {
            panic!("queue::msgfile: fill of {} bytes into {n}", bytes.len());
        }
        self.file
            .write_all_at(bytes, HEADER_LEN)
            .ctx("write", &self.path)?;
        let mut front = std::mem::replace(front, crc32fast::Hasher::new());
        front.update(bytes);
        self.head = Head::Filled(front);
        Ok(())
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Data bytes appended so far.
    pub fn data_len(&self) -> u64 {
        self.pos - HEADER_LEN + self.buf.len() as u64
    }

    /// Appends wire-form data; memory stays bounded by one buffer.
    pub fn append(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let room = BUF - self.buf.len();
            let n = room.min(bytes.len());
            self.buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.buf.len() == BUF {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.file
                .write_all_at(&self.buf, self.pos)
                .ctx("write", &self.path)?;
            self.crc.update(&self.buf);
            self.pos += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes the envelope, checksum, end marker and `envelope_offset`, then `fdatasync`s.
    ///
    /// The caller syncs the directory when the file was newly created.
    pub fn commit(mut self, env: &Envelope) -> Result<(File, PathBuf)> {
        self.flush()?;
        match std::mem::replace(&mut self.head, Head::None) {
            Head::None => {}
            Head::Reserved(..) => panic!("queue::msgfile: commit with an unfilled reserve"),
            Head::Filled(mut front) => {
                front.combine(&self.crc);
                self.crc = front;
            }
        }
        let env_bytes = postcard::to_allocvec(env).map_err(Error::Encode)?;
        if env_bytes.len() > MAX_ENVELOPE as usize {
            return Err(Error::TooLarge {
                size: env_bytes.len() as u64,
                limit: MAX_ENVELOPE as u64,
            });
        }
        self.crc.update(&env_bytes);
        let crc = self.crc.clone().finalize();
        let env_off = self.pos;
        let mut tail = Vec::with_capacity(env_bytes.len() + 16);
        tail.extend_from_slice(&(env_bytes.len() as u32).to_le_bytes());
        tail.extend_from_slice(&env_bytes);
        tail.extend_from_slice(&crc.to_le_bytes());
        tail.extend_from_slice(&END_MARKER);
        self.file
            .write_all_at(&tail, env_off)
            .ctx("write", &self.path)?;
        self.file
            .write_all_at(&env_off.to_le_bytes(), OFFSET_AT)
            .ctx("write", &self.path)?;
        stats::count_fsync();
        self.file.sync_data().ctx("fdatasync", &self.path)?;
        Ok((self.file, self.path))
    }

    /// The queue id being written.
    pub fn id(&self) -> QueueId {
        self.id
    }
}

/// A committed message file, checksum verified.
#[derive(Debug)]
pub struct MessageFile {
    /// The queue id in the header.
    pub id: QueueId,
    /// The static envelope.
    pub envelope: Envelope,
    file: File,
    data_len: u64,
}

impl MessageFile {
    /// Opens and verifies the message file at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).ctx("open", path)?;
        Self::verify(file, path)
    }

    /// Verifies an open message file.
    pub fn verify(file: File, path: &Path) -> Result<Self> {
        let id = match probe(&file, path)? {
            FileState::Uncommitted => return Err(Error::Incomplete(path.to_path_buf())),
            FileState::Committed(id) => id,
        };
        let mut h = [0u8; 16];
        file.read_exact_at(&mut h, 8).ctx("read", path)?;
        let version = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let env_off = u64::from_le_bytes(h[8..16].try_into().unwrap_or([0; 8]));
        let mut lenb = [0u8; 4];
        read_exact_or(&file, &mut lenb, env_off, path)?;
        let env_len = u32::from_le_bytes(lenb);
        if env_off < HEADER_LEN || env_len > MAX_ENVELOPE {
            return Err(corrupt(path, Corruption::Bounds));
        }
        let mut tail = vec![0u8; env_len as usize + 12];
        read_exact_or(&file, &mut tail, env_off + 4, path)?;
        let (env_bytes, rest) = tail.split_at(env_len as usize);
        let stored_crc = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        if rest[4..12] != END_MARKER {
            return Err(corrupt(path, Corruption::EndMarker));
        }
        let mut crc = id_crc(id);
        let mut chunk = vec![0u8; BUF];
        let mut at = HEADER_LEN;
        while at < env_off {
            let n = ((env_off - at) as usize).min(BUF);
            read_exact_or(&file, &mut chunk[..n], at, path)?;
            crc.update(&chunk[..n]);
            at += n as u64;
        }
        crc.update(env_bytes);
        if crc.finalize() != stored_crc {
            return Err(corrupt(path, Corruption::Checksum));
        }
        let envelope = if version == FORMAT_V1 {
            whole::<mail::EnvelopeV1>(env_bytes).map(Envelope::from)
        } else {
            whole::<Envelope>(env_bytes)
        }
        .ok_or_else(|| corrupt(path, Corruption::Decode))?;
        Ok(Self {
            id,
            envelope,
            file,
            data_len: env_off - HEADER_LEN,
        })
    }

    /// Length of the data in bytes.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// Reads data bytes at `pos` within the data section; 0 at its end.
    pub fn read_data_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let n = (self.data_len.saturating_sub(pos) as usize).min(buf.len());
        if n == 0 {
            return Ok(0);
        }
        self.file.read_at(&mut buf[..n], HEADER_LEN + pos)
    }

    /// A reader over the wire-form data.
    pub fn data(&self) -> DataReader<'_> {
        DataReader {
            file: &self.file,
            pos: HEADER_LEN,
            end: HEADER_LEN + self.data_len,
        }
    }
}

fn read_exact_or(file: &File, buf: &mut [u8], at: u64, path: &Path) -> Result<()> {
    file.read_exact_at(buf, at).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => corrupt(path, Corruption::Truncated),
        _ => Error::Io {
            op: "read",
            path: path.to_path_buf(),
            source: e,
        },
    })
}

/// `Read` over a message file's data section.
#[derive(Debug)]
pub struct DataReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for DataReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = ((self.end - self.pos) as usize).min(buf.len());
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read_at(&mut buf[..n], self.pos)?;
        if got == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.pos += got as u64;
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mail::Recipient;
    use std::fs::OpenOptions;

    fn env() -> Envelope {
        Envelope {
            sender: "s@example.org".into(),
            recipients: vec![Recipient::new("r@example.net")],
            size: 5,
            ..Envelope::default()
        }
    }

    fn write(dir: &Path, data: &[&[u8]]) -> PathBuf {
        let p = dir.join("m");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        let id = QueueId::from_parts(5, 6, 7).unwrap();
        let lock = try_lock(&f, &p).unwrap().unwrap();
        let mut w = FileWriter::new(f, lock, p.clone(), id).unwrap();
        for d in data {
            w.append(d).unwrap();
        }
        w.commit(&env()).unwrap();
        p
    }

    #[test]
    fn round_trip_streaming_large() {
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let p = write(dir.path(), &[b"head\r\n", &big, b".\r\n"]);
        let m = MessageFile::open(&p).unwrap();
        assert_eq!(m.envelope, env());
        let mut got = Vec::new();
        m.data().read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), 6 + big.len() + 3);
        assert_eq!(&got[6..6 + big.len()], &big[..]);
    }

    #[test]
    fn every_corruption_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), &[b"Subject: x\r\n\r\nbody\r\n"]);
        let good = std::fs::read(&p).unwrap();
        for i in 0..good.len() {
            for bit in [0u8, 3, 7] {
                let mut b = good.clone();
                b[i] ^= 1 << bit;
                std::fs::write(&p, &b).unwrap();
                // Reserved header bytes are not covered; all else must be caught.
                let reserved = (12..16).contains(&i) || (40..64).contains(&i);
                let r = MessageFile::open(&p);
                if !reserved {
                    assert!(r.is_err(), "flip byte {i} bit {bit} passed");
                }
            }
        }
        for cut in 0..good.len() {
            std::fs::write(&p, &good[..cut]).unwrap();
            assert!(MessageFile::open(&p).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn lock_is_exclusive_across_open_file_descriptions() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l");
        let a = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        let b = File::open(&p).unwrap();
        let held = try_lock(&a, &p).unwrap().unwrap();
        assert!(try_lock(&b, &p).unwrap().is_none());
        drop(held);
        assert!(try_lock(&b, &p).unwrap().is_some());
    }

    /// A file as the build before tenants wrote it: format 1, the
    /// envelope in its first layout.
    fn write_v1(dir: &Path, data: &[u8], env: &Envelope) -> PathBuf {
        let p = dir.join("v1");
        let id = QueueId::from_parts(5, 6, 8).unwrap();
        let env_bytes = postcard::to_allocvec(&mail::AsV1(env)).unwrap();
        let off = HEADER_LEN + data.len() as u64;
        let mut h = header(id, off);
        h[8..12].copy_from_slice(&FORMAT_V1.to_le_bytes());
        let mut crc = id_crc(id);
        crc.update(data);
        crc.update(&env_bytes);
        let mut f = h.to_vec();
        f.extend_from_slice(data);
        f.extend_from_slice(&(env_bytes.len() as u32).to_le_bytes());
        f.extend_from_slice(&env_bytes);
        f.extend_from_slice(&crc.finalize().to_le_bytes());
        f.extend_from_slice(&END_MARKER);
        std::fs::write(&p, f).unwrap();
        p
    }

    #[test]
    fn format_1_files_still_read_and_tenants_round_trip_in_format_2() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = env();
        e.auth = Some("alice".into());
        let p = write_v1(dir.path(), b"Subject: old\r\n\r\nbody\r\n", &e);
        let m = MessageFile::open(&p).unwrap();
        assert_eq!(m.envelope, e);
        assert_eq!(m.envelope.tenant, None);
        let mut got = Vec::new();
        m.data().read_to_end(&mut got).unwrap();
        assert_eq!(got, b"Subject: old\r\n\r\nbody\r\n");

        // A format-2 envelope under a format-1 header is refused, not
        // read with its tail cut off.
        let mut bytes = std::fs::read(write(dir.path(), &[b"x\r\n"])).unwrap();
        bytes[8..12].copy_from_slice(&FORMAT_V1.to_le_bytes());
        let forged = dir.path().join("forged");
        std::fs::write(&forged, &bytes).unwrap();
        assert!(MessageFile::open(&forged).is_err());

        let p = dir.path().join("t");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        let lock = try_lock(&f, &p).unwrap().unwrap();
        let mut w =
            FileWriter::new(f, lock, p.clone(), QueueId::from_parts(5, 6, 9).unwrap()).unwrap();
        w.append(b"x\r\n").unwrap();
        let mut e = env();
        e.tenant = Some("acme".into());
        e.job = Some("job-7".into());
        w.commit(&e).unwrap();
        let m = MessageFile::open(&p).unwrap();
        assert_eq!(m.envelope.tenant.as_deref(), Some("acme"));
        assert_eq!(m.envelope.job.as_deref(), Some("job-7"));
    }

    #[test]
    fn zap_makes_it_uncommitted() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), &[b"x\r\n"]);
        let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
        assert!(matches!(probe(&f, &p).unwrap(), FileState::Committed(_)));
        zap(&f, &p).unwrap();
        assert_eq!(probe(&f, &p).unwrap(), FileState::Uncommitted);
        assert!(matches!(MessageFile::open(&p), Err(Error::Incomplete(_))));
    }
}
