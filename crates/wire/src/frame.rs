//! The frame codec: a big-endian u32 length, then that many bytes of
//! postcard.
//!
//! A decoder refuses a length over its own limit before buffering the
//! payload, so a peer can make it hold at most one frame of that size plus
//! what one read brought; a payload that does not decode is an error for
//! that connection (its owner closes it). Nothing here panics on a peer's
//! bytes.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Why a frame could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// A length over the decoder's limit: (length, limit).
    TooLong(usize, usize),
    /// A payload that is not a message.
    Garbled,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLong(n, max) => write!(f, "frame of {n} bytes over {max}"),
            FrameError::Garbled => f.write_str("malformed message"),
        }
    }
}

impl std::error::Error for FrameError {}

/// A message, framed.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    // Written after a 4-byte room for the length, without a second copy.
    let mut out = postcard::to_extend(msg, vec![0u8; 4])
        .expect("wire: postcard encodes every message (plain data into a Vec)");
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

/// Bytes in, messages out.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf`.
    start: usize,
    max: usize,
}

impl Decoder {
    /// A decoder refusing frames over `max` bytes.
    pub fn new(max: usize) -> Decoder {
        Decoder {
            buf: Vec::new(),
            start: 0,
            max,
        }
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        // Consumed frames are dropped here, once per read rather than once
        // per frame: a read of a thousand small frames moves its bytes once.
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, if one is in.
    pub fn decode<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        let rest = &self.buf[self.start..];
        if rest.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > self.max {
            return Err(FrameError::TooLong(len, self.max));
        }
        if rest.len() < 4 + len {
            return Ok(None);
        }
        let msg = postcard::from_bytes(&rest[4..4 + len]).map_err(|_| FrameError::Garbled);
        self.start += 4 + len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        msg.map(Some)
    }

    /// Bytes held that are not yet a message.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Msg {
        Hello { name: String },
        Bytes(Vec<u8>),
        Beat,
    }

    #[test]
    fn messages_survive_framing_split_anywhere() {
        let msgs = vec![
            Msg::Hello {
                name: "mx1.example".into(),
            },
            Msg::Bytes(vec![0, 1, 2, 255]),
            Msg::Beat,
        ];
        let bytes: Vec<u8> = msgs.iter().flat_map(encode).collect();
        for cut in 0..bytes.len() {
            let mut d = Decoder::new(1024);
            let mut got = Vec::new();
            d.push(&bytes[..cut]);
            while let Some(m) = d.decode::<Msg>().unwrap() {
                got.push(m);
            }
            d.push(&bytes[cut..]);
            while let Some(m) = d.decode::<Msg>().unwrap() {
                got.push(m);
            }
            assert_eq!(got, msgs, "cut at {cut}");
            assert_eq!(d.pending(), 0);
        }
    }

    #[test]
    fn hostile_frames_are_errors_not_panics() {
        let mut d = Decoder::new(1024);
        d.push(&u32::MAX.to_be_bytes());
        assert_eq!(
            d.decode::<Msg>(),
            Err(FrameError::TooLong(u32::MAX as usize, 1024))
        );
        // Over the limit by one: refused before the payload is buffered.
        let mut d = Decoder::new(8);
        d.push(&9u32.to_be_bytes());
        assert_eq!(d.decode::<Msg>(), Err(FrameError::TooLong(9, 8)));
        let mut d = Decoder::new(1024);
        d.push(&[0, 0, 0, 3, 0xff, 0xff, 0xff]);
        assert_eq!(d.decode::<Msg>(), Err(FrameError::Garbled));
        let mut d = Decoder::new(1024);
        d.push(&[0, 0, 0, 0]);
        assert!(d.decode::<Msg>().is_err(), "an empty payload is no message");
    }

    #[test]
    fn a_frame_at_the_limit_is_taken() {
        let msg = Msg::Bytes(vec![7; 100]);
        let bytes = encode(&msg);
        let mut d = Decoder::new(bytes.len() - 4);
        d.push(&bytes);
        assert_eq!(d.decode::<Msg>(), Ok(Some(msg)));
    }
}
