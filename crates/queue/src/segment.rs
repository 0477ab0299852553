//! A journal segment's file: its name, the header that opens it, and the
//! listing of a journal directory's segments. The journal writes them,
//! the writer ahead makes them, and replay and the agents read them.

use crate::error::{IoContext, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// Segment header magic.
pub(crate) const SEG_MAGIC: [u8; 8] = *b"SLCJRNL1";
/// Segment header length: magic and segment number.
pub(crate) const SEG_HEADER: u32 = 16;

/// The length of a segment's header: no record's data starts before it.
pub const SEGMENT_HEADER_LEN: u32 = SEG_HEADER;

/// Path of segment `seq` under the journal directory.
pub fn segment_path(dir: &Path, seq: u32) -> PathBuf {
    dir.join(format!("{seq:010}.log"))
}

/// The segment numbers present in `dir`, ascending; other names are ignored.
pub fn list_segments(dir: &Path) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for ent in fs::read_dir(dir).ctx("readdir", dir)? {
        let ent = ent.ctx("readdir", dir)?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(num) = name.strip_suffix(".log") {
            if num.len() == 10 {
                if let Ok(n) = num.parse::<u32>() {
                    out.push(n);
                }
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The header that opens segment `seq`: magic and segment number.
pub(crate) fn segment_header(seq: u32) -> [u8; SEG_HEADER as usize] {
    let mut h = [0u8; SEG_HEADER as usize];
    h[..8].copy_from_slice(&SEG_MAGIC);
    h[8..].copy_from_slice(&(seq as u64).to_le_bytes());
    h
}
