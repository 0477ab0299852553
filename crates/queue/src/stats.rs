//! Process-wide counters of the spool's sync calls, for benchmarks and tests.
//!
//! Counts every `fsync`/`fdatasync` the crate issues (files and
//! directories). Relaxed atomics: a figure, not a synchronisation point.

use std::sync::atomic::{AtomicU64, Ordering};

static FSYNCS: AtomicU64 = AtomicU64::new(0);

pub(crate) fn count_fsync() {
    FSYNCS.fetch_add(1, Ordering::Relaxed);
}

/// How many fsync/fdatasync calls this process's spool has made.
pub fn fsync_count() -> u64 {
    FSYNCS.load(Ordering::Relaxed)
}
