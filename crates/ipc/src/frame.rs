//! Length-prefixed frames and an incremental, bounded frame decoder.
//!
//! A frame is a big-endian u32 length and that many payload bytes. The
//! decoder never holds more than one maximum-size frame plus one read's
//! worth of input, so a peer cannot make us allocate without bound: a length
//! over [`MAX_FRAME`] is an error before any payload is buffered.

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

/// Accumulates bytes from a stream and yields whole frames.
#[derive(Debug, Default)]
pub struct FrameBuf {
    buf: Vec<u8>,
    start: usize,
}

impl FrameBuf {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes read from the peer.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered and not yet returned as frames.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next whole frame's payload, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, IpcError> {
        let avail = &self.buf[self.start..];
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
        let payload = avail[4..4 + len as usize].to_vec();
        self.start += 4 + len as usize;
        // Compact once the consumed prefix dominates, so a long-lived
        // connection does not keep every byte it ever received.
        if self.start > 64 * 1024 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        Ok(Some(payload))
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
    fn oversize_and_empty_lengths_are_errors() {
        let mut fb = FrameBuf::new();
        fb.push(&(MAX_FRAME + 1).to_be_bytes());
        assert!(matches!(fb.next_frame(), Err(IpcError::BadFrame(_))));
        let mut fb = FrameBuf::new();
        fb.push(&[0, 0, 0, 0]);
        assert!(matches!(fb.next_frame(), Err(IpcError::BadFrame(0))));
    }
}
