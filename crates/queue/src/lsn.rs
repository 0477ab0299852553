//! Journal positions: segment number in the high 32 bits, byte offset
//! within the segment in the low 32, so positions order like the journal.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A journal position: (segment, offset), ordered.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The position `offset` bytes into segment `seg`.
    pub fn new(seg: u32, offset: u32) -> Self {
        Self(((seg as u64) << 32) | offset as u64)
    }

    /// The segment number.
    pub fn segment(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The byte offset within the segment.
    pub fn offset(self) -> u32 {
        self.0 as u32
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.segment(), self.offset())
    }
}

impl fmt::Debug for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lsn({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_parts() {
        let l = Lsn::new(7, 4096);
        assert_eq!((l.segment(), l.offset()), (7, 4096));
        assert!(Lsn::new(7, u32::MAX) < Lsn::new(8, 0));
    }
}
