//! Queue ids: unique, sortable by arrival time, printable.
//!
//! A `QueueId` is (arrival time in microseconds, node, sequence). The node
//! tells apart the processes that generate ids at once (a pid, or a slot
//! number); the sequence tells apart ids one process makes in the same
//! microsecond. The text form is 21 characters of Crockford base 32
//! (11 for the time, 5 for the node, 5 for the sequence), fixed width and in
//! ASCII order, so sorting the strings sorts by arrival like Postfix's long
//! queue ids. Limits: time < 2^55 µs (year 3111), node and sequence < 2^25.
//! The generator takes the time as an argument: nothing here reads a clock.
//! Nothing here panics.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Crockford base 32: digits then letters without I, L, O, U, in ASCII order.
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const TIME_CHARS: usize = 11;
const PART_CHARS: usize = 5;
/// Length of the text form.
pub const QUEUE_ID_LEN: usize = TIME_CHARS + 2 * PART_CHARS;
const TIME_LIMIT: u64 = 1 << (5 * TIME_CHARS);
const PART_LIMIT: u32 = 1 << (5 * PART_CHARS);

/// A message's queue id; orders by arrival time, then node, then sequence.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QueueId {
    micros: u64,
    node: u32,
    seq: u32,
}

/// Why a string is not a queue id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseQueueIdError {
    /// The string is not exactly 21 characters long.
    Length(usize),
    /// A character outside the base-32 alphabet, at this byte index.
    Character(usize),
}

impl fmt::Display for ParseQueueIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length(n) => write!(f, "queue id must be {QUEUE_ID_LEN} characters, not {n}"),
            Self::Character(i) => write!(f, "bad character at index {i} of queue id"),
        }
    }
}

impl std::error::Error for ParseQueueIdError {}

impl QueueId {
    /// Builds an id from its parts; `None` when a part is out of range.
    pub fn from_parts(micros: u64, node: u32, seq: u32) -> Option<Self> {
        (micros < TIME_LIMIT && node < PART_LIMIT && seq < PART_LIMIT).then_some(Self {
            micros,
            node,
            seq,
        })
    }

    /// Arrival time in microseconds since the epoch.
    pub fn micros(&self) -> u64 {
        self.micros
    }

    /// The node (process) part.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// The per-node sequence part.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// The 16-byte big-endian binary form (sorts like the id).
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.micros.to_be_bytes());
        b[8..12].copy_from_slice(&self.node.to_be_bytes());
        b[12..].copy_from_slice(&self.seq.to_be_bytes());
        b
    }

    /// Parses the binary form; `None` when a part is out of range.
    pub fn from_bytes(b: [u8; 16]) -> Option<Self> {
        let micros = u64::from_be_bytes(b[..8].try_into().ok()?);
        let node = u32::from_be_bytes(b[8..12].try_into().ok()?);
        let seq = u32::from_be_bytes(b[12..].try_into().ok()?);
        Self::from_parts(micros, node, seq)
    }

    /// A small hash (0..=255) for spreading files over subdirectories.
    pub fn hash_byte(&self) -> u8 {
        // Mix all parts so ids of one microsecond and one node still spread.
        let x =
            self.micros ^ (self.seq as u64).rotate_left(17) ^ (self.node as u64).rotate_left(40);
        let x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (x >> 56) as u8
    }
}

fn encode(mut v: u64, out: &mut [u8]) {
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(v & 31) as usize];
        v >>= 5;
    }
}

fn decode(s: &[u8], base: usize) -> Result<u64, ParseQueueIdError> {
    let mut v = 0u64;
    for (i, &c) in s.iter().enumerate() {
        let d = match c.to_ascii_uppercase() {
            c @ b'0'..=b'9' => c - b'0',
            c => ALPHABET
                .iter()
                .position(|&a| a == c)
                .ok_or(ParseQueueIdError::Character(base + i))? as u8,
        };
        v = (v << 5) | d as u64;
    }
    Ok(v)
}

impl fmt::Display for QueueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; QUEUE_ID_LEN];
        encode(self.micros, &mut buf[..TIME_CHARS]);
        encode(
            self.node as u64,
            &mut buf[TIME_CHARS..TIME_CHARS + PART_CHARS],
        );
        encode(self.seq as u64, &mut buf[TIME_CHARS + PART_CHARS..]);
        // The alphabet is ASCII, so this cannot fail; fall back rather than panic.
        f.write_str(std::str::from_utf8(&buf).unwrap_or("?"))
    }
}

impl fmt::Debug for QueueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QueueId({self})")
    }
}

impl FromStr for QueueId {
    type Err = ParseQueueIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let b = s.as_bytes();
        if b.len() != QUEUE_ID_LEN {
            return Err(ParseQueueIdError::Length(b.len()));
        }
        let micros = decode(&b[..TIME_CHARS], 0)?;
        let node = decode(&b[TIME_CHARS..TIME_CHARS + PART_CHARS], TIME_CHARS)? as u32;
        let seq = decode(&b[TIME_CHARS + PART_CHARS..], TIME_CHARS + PART_CHARS)? as u32;
        Ok(Self { micros, node, seq })
    }
}

/// Makes strictly increasing queue ids for one node; the caller gives the time.
#[derive(Debug, Clone)]
pub struct QueueIdGen {
    node: u32,
    last_micros: u64,
    seq: u32,
}

impl QueueIdGen {
    /// A generator for `node` (reduced modulo 2^25, e.g. a pid).
    pub fn new(node: u32) -> Self {
        Self {
            node: node % PART_LIMIT,
            last_micros: 0,
            seq: 0,
        }
    }

    /// The next id at time `now_micros`; never repeats even if the clock steps back.
    pub fn next(&mut self, now_micros: u64) -> QueueId {
        let now = now_micros.min(TIME_LIMIT - 1);
        if now > self.last_micros {
            self.last_micros = now;
            self.seq = 0;
        } else if self.seq + 1 < PART_LIMIT {
            self.seq += 1;
        } else {
            // 2^25 ids in one microsecond: borrow the next microsecond.
            self.last_micros = (self.last_micros + 1).min(TIME_LIMIT - 1);
            self.seq = 0;
        }
        QueueId {
            micros: self.last_micros,
            node: self.node,
            seq: self.seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn text_round_trip_and_width() {
        let id = QueueId::from_parts(1_700_000_000_123_456, 4242, 7).unwrap();
        let s = id.to_string();
        assert_eq!(s.len(), QUEUE_ID_LEN);
        assert_eq!(s.parse::<QueueId>().unwrap(), id);
        assert_eq!(s.to_lowercase().parse::<QueueId>().unwrap(), id);
    }

    #[test]
    fn bad_strings() {
        assert_eq!("".parse::<QueueId>(), Err(ParseQueueIdError::Length(0)));
        let mut s = QueueId::from_parts(1, 2, 3).unwrap().to_string();
        s.replace_range(3..4, "U");
        assert_eq!(s.parse::<QueueId>(), Err(ParseQueueIdError::Character(3)));
        assert!("é".repeat(QUEUE_ID_LEN / 2).parse::<QueueId>().is_err());
    }

    #[test]
    fn generator_is_strictly_increasing_even_backwards() {
        let mut g = QueueIdGen::new(99);
        let a = g.next(1000);
        let b = g.next(1000);
        let c = g.next(500);
        let d = g.next(2000);
        assert!(a < b && b < c && c < d);
        assert!(a.to_string() < b.to_string() && c.to_string() < d.to_string());
    }

    #[test]
    fn out_of_range_parts() {
        assert!(QueueId::from_parts(TIME_LIMIT, 0, 0).is_none());
        assert!(QueueId::from_parts(0, PART_LIMIT, 0).is_none());
        assert!(QueueId::from_bytes([0xff; 16]).is_none());
    }

    proptest! {
        #[test]
        fn order_of_text_is_order_of_ids(a in 0..TIME_LIMIT, b in 0..TIME_LIMIT,
                                         n in 0..PART_LIMIT, s in 0..PART_LIMIT) {
            let x = QueueId::from_parts(a, n, s).unwrap();
            let y = QueueId::from_parts(b, s, n).unwrap();
            prop_assert_eq!(x.cmp(&y), x.to_string().cmp(&y.to_string()));
            prop_assert_eq!(QueueId::from_bytes(x.to_bytes()), Some(x));
            prop_assert_eq!(x.to_string().parse::<QueueId>().unwrap(), x);
        }
    }
}
