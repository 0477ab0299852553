//! A journal segment of arbitrary bytes → recovery: must never panic or
//! loop, and must leave a journal that a second recovery finds whole.
//!
//! The first byte picks the layout: raw bytes after a valid segment header
//! (torn and corrupt frames), the same with the header fuzzed too, or the
//! rest split into payloads that are framed with a correct length and crc
//! (so the postcard decoder and `Replay::apply` see arbitrary records).
//! Every read-back path (`Replay::list`, `Journal::read_at`) runs on what
//! replay kept.
#![no_main]

use libfuzzer_sys::fuzz_target;
use queue::{recover, segment_path, SpoolConfig, TailCause};
use std::path::PathBuf;

fn segment(data: &[u8]) -> Vec<u8> {
    let (mode, rest) = match data.split_first() {
        Some((m, r)) => (*m, r),
        None => return Vec::new(),
    };
    let mut seg = Vec::new();
    match mode % 3 {
        0 => {
            seg.extend_from_slice(b"SLCJRNL1");
            seg.extend_from_slice(&1u64.to_le_bytes());
            seg.extend_from_slice(rest);
        }
        1 => seg.extend_from_slice(rest),
        _ => {
            seg.extend_from_slice(b"SLCJRNL1");
            seg.extend_from_slice(&1u64.to_le_bytes());
            // Payloads separated by a length byte; the last may be left raw (torn).
            let mut rest = rest;
            while let Some((&n, r)) = rest.split_first() {
                let n = usize::from(n).min(r.len());
                let (payload, r) = r.split_at(n);
                rest = r;
                if payload.is_empty() {
                    seg.extend_from_slice(r);
                    break;
                }
                seg.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                seg.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
                seg.extend_from_slice(payload);
            }
        }
    }
    seg
}

fn root() -> PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("sluice-fuzz-journal-{}", std::process::id()))
}

fuzz_target!(|data: &[u8]| {
    let root = root();
    let _ = std::fs::remove_dir_all(&root);
    let journal = root.join("journal");
    std::fs::create_dir_all(&journal).expect("fuzz: mkdir");
    std::fs::write(segment_path(&journal, 1), segment(data)).expect("fuzz: write segment");
    let cfg = SpoolConfig::default();
    let Ok(mut first) = recover(&root, cfg) else {
        let _ = std::fs::remove_dir_all(&root);
        return;
    };
    let listed = first.state.list(&first.journal);
    if let Ok(entries) = &listed {
        assert!(entries.len() <= first.state.messages.len());
    }
    for m in first.state.messages.values() {
        let _ = first.journal.read_at(m.head);
    }
    let _ = first.journal.commit();
    let live: Vec<_> = {
        let mut v: Vec<_> = first.state.messages.keys().copied().collect();
        v.sort_unstable();
        v
    };
    drop(first);
    // What the first recovery cut is gone: the second finds every frame whole
    // and the same live messages.
    let second = recover(&root, cfg).expect("fuzz: second recovery of a recovered spool");
    assert!(
        !second
            .state
            .torn
            .iter()
            .any(|t| matches!(t.cause, TailCause::Frame(_))),
        "torn frame after recovery: {:?}",
        second.state.torn
    );
    let mut again: Vec<_> = second.state.messages.keys().copied().collect();
    again.sort_unstable();
    assert_eq!(live, again);
    drop(second);
    let _ = std::fs::remove_dir_all(&root);
});
