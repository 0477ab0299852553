//! Length-prefixed frames and an incremental, bounded frame decoder.
//!
//! A frame is a big-endian u32 length and that many payload bytes. The
//! decoder never holds more than one maximum-size frame plus one read's
//! worth of input (its owner stops reading past that), so a peer cannot
//! make us allocate without bound: a length over [`MAX_FRAME`] is an error
//! before any payload is buffered.

use crate::IpcError;

/// The largest payload accepted: 16 MiB.
pub const MAX_FRAME: u32 = 16 << 20;

/// Prefixes a payload with its length.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    assert!(
        payload.len() <= MAX_FRAME as usize,
        "ipc: frame of {} bytes over MAX_FRAME",
        payload.len()
    );
    let mut out = Vec::with_capacity(4 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Bytes offered to one read: a small message's frames arrive in one.
const READ_CHUNK: usize = 64 * 1024;

/// Capacity kept after the buffer empties; a large frame's is released.
const KEEP: usize = 256 * 1024;

/// Accumulates bytes from a stream and yields whole frames.
///
/// The socket is read straight into the buffer and frames are decoded in
/// place ([`FrameBuf::next_payload`]), so a payload is copied once, by the
/// kernel, on its way in.
#[derive(Debug, Default)]
pub struct FrameBuf {
    /// Initialised storage; `start..end` holds what is not yet returned.
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// What one read into a [`FrameBuf`] gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Filled {
    /// Bytes read; 0 is end of file.
    pub bytes: usize,
    /// The read filled all the room it was offered: the socket may hold
    /// more. A stream read that returns less has emptied the socket.
    pub full: bool,
}

impl FrameBuf {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes room for at least `want` bytes after `end`.
    fn room(&mut self, want: usize) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > KEEP {
                self.buf = Vec::new();
            }
        }
        if self.buf.len() - self.end >= want {
            return;
        }
        if self.start > 0 {
            // Only a partial frame is left to move.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < want {
            let len = (self.end + want).max(self.buf.len() * 2);
            self.buf.resize(len, 0);
        }
    }

    /// Appends bytes read from the peer.
    pub fn push(&mut self, bytes: &[u8]) {
        self.room(bytes.len());
        self.buf[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// Reads once from `r` into the buffer.
    pub fn read_from<R: std::io::Read>(&mut self, r: &mut R) -> std::io::Result<Filled> {
        self.room(READ_CHUNK);
        let offered = self.buf.len() - self.end;
        let n = r.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(Filled {
            bytes: n,
            full: n == offered,
        })
    }

    /// Bytes buffered and not yet returned as frames.
    pub fn pending(&self) -> usize {
        self.end - self.start
    }

    /// The next whole frame's payload, borrowed from the buffer.
    pub fn next_payload(&mut self) -> Result<Option<&[u8]>, IpcError> {
        let avail = &self.buf[self.start..self.end];
        if avail.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([avail[0], avail[1], avail[2], avail[3]]);
        if len == 0 || len > MAX_FRAME {
            return Err(IpcError::BadFrame(len));
        }
        if avail.len() < 4 + len as usize {
            return Ok(None);
        }
        let at = self.start + 4;
        self.start = at + len as usize;
        Ok(Some(&self.buf[at..self.start]))
    }

    /// The next whole frame's payload, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, IpcError> {
        Ok(self.next_payload()?.map(<[u8]>::to_vec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_anywhere() {
        let mut stream = frame(b"hello");
        stream.extend(frame(b"world!"));
        for cut in 0..stream.len() {
            let mut fb = FrameBuf::new();
            fb.push(&stream[..cut]);
            let mut got = vec![];
            while let Some(f) = fb.next_frame().unwrap() {
                got.push(f);
            }
            fb.push(&stream[cut..]);
            while let Some(f) = fb.next_frame().unwrap() {
                got.push(f);
            }
            assert_eq!(
                got,
                vec![b"hello".to_vec(), b"world!".to_vec()],
                "cut at {cut}"
            );
            assert_eq!(fb.pending(), 0);
        }
    }

    #[test]
    fn reads_fill_in_place_and_say_when_the_socket_is_empty() {
        let mut stream = frame(&[1u8; 100]);
        stream.extend(frame(&vec![2u8; 3 * READ_CHUNK]));
        let mut src = std::io::Cursor::new(stream);
        let mut fb = FrameBuf::new();
        let mut got = vec![];
        loop {
            let f = fb.read_from(&mut src).unwrap();
            while let Some(p) = fb.next_payload().unwrap() {
                got.push((p[0], p.len()));
            }
            if f.bytes == 0 {
                break;
            }
        }
        assert_eq!(got, vec![(1, 100), (2, 3 * READ_CHUNK)]);
        assert_eq!(fb.pending(), 0);
        // A short read is reported as such: nothing more is waiting.
        let mut fb = FrameBuf::new();
        let f = fb
            .read_from(&mut std::io::Cursor::new(frame(b"x")))
            .unwrap();
        assert_eq!(
            f,
            Filled {
                bytes: 5,
                full: false
            }
        );
    }

    #[test]
    fn oversize_and_empty_lengths_are_errors() {
        let mut fb = FrameBuf::new();
        fb.push(&(MAX_FRAME + 1).to_be_bytes());
        assert!(matches!(fb.next_frame(), Err(IpcError::BadFrame(_))));
        let mut fb = FrameBuf::new();
        fb.push(&[0, 0, 0, 0]);
        assert!(matches!(fb.next_frame(), Err(IpcError::BadFrame(0))));
    }
}
