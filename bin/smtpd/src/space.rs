//! Free space on the queue file system, checked at MAIL FROM.
//!
//! Postfix's rule (`smtpd_check_queue` and the SIZE check of
//! `smtpd_check_size`): MAIL FROM gets `452 4.3.1 Insufficient system
//! storage` while free space is at or below `queue_minfree`, while
//! `message_size_limit` is at least two thirds of the free space (so
//! `queue_minfree = 0`, Postfix's default, still keeps room for one and a
//! half messages of the largest size), or when the client's SIZE= estimate
//! does not fit in the free space above `queue_minfree`. The figure comes
//! from statvfs(2) of the queue directory, at most once a second, so a busy
//! server pays nothing per message; the decision itself is [`refusal`],
//! free of IO. A statvfs that fails is logged and refuses nothing: the
//! write errors at end of data still give 452.

use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use daemon::msg_warn;
use smtp_proto::{Reply, StatusCode};

/// How long a free-space figure is reused.
const CACHE: Duration = Duration::from_secs(1);

/// The queue directory's free space, measured at most once per [`CACHE`].
pub struct QueueSpace {
    path: PathBuf,
    last: Cell<Option<(Instant, Option<u64>)>>,
}

impl QueueSpace {
    /// Measures the file system that holds `queue_root`.
    pub fn new(queue_root: PathBuf) -> Self {
        QueueSpace {
            path: queue_root,
            last: Cell::new(None),
        }
    }

    /// Free bytes, `None` when they cannot be measured.
    fn free(&self, now: Instant) -> Option<u64> {
        if let Some((at, free)) = self.last.get() {
            if now.saturating_duration_since(at) < CACHE {
                return free;
            }
        }
        let free = match sys::fs::free_space(&self.path) {
            Ok(n) => Some(n),
            Err(e) => {
                msg_warn!("queue file system: {e}: queue_minfree not enforced");
                None
            }
        };
        self.last.set(Some((now, free)));
        free
    }

    /// The 452 for MAIL FROM when the queue has no room, as [`refusal`] decides.
    pub fn check(
        &self,
        now: Instant,
        minfree: u64,
        size_limit: u64,
        size: Option<u64>,
    ) -> Option<Reply> {
        let free = self.free(now)?;
        let r = refusal(free, minfree, size_limit, size);
        if r.is_some() {
            msg_warn!(
                "not enough free space in mail queue: {free} bytes < 1.5*message size limit \
                 or queue_minfree ({minfree})"
            );
        }
        r
    }
}

/// Postfix's decision, in bytes: `free` on the queue file system,
/// `queue_minfree`, `message_size_limit` (0: none) and the SIZE= estimate.
pub fn refusal(free: u64, minfree: u64, size_limit: u64, size: Option<u64>) -> Option<Reply> {
    let full = free <= minfree
        // limit >= free / 1.5, without floating point or overflow.
        || (size_limit > 0 && u128::from(size_limit) * 3 >= u128::from(free) * 2)
        || size.is_some_and(|s| s >= free - minfree);
    full.then(|| Reply::enhanced(452, StatusCode::SYSTEM_FULL, "Insufficient system storage"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postfix_free_space_rule() {
        const MB: u64 = 1_000_000;
        // (free, queue_minfree, message_size_limit, SIZE=, refused)
        let cases = [
            // Plenty of room.
            (1000 * MB, 0, 10 * MB, None, false),
            // queue_minfree = 0: 1.5 times the size limit must be free.
            (15 * MB + 1, 0, 10 * MB, None, false),
            (15 * MB, 0, 10 * MB, None, true),
            (10 * MB, 0, 10 * MB, None, true),
            // No size limit: only an empty file system refuses.
            (1, 0, 0, None, false),
            (0, 0, 0, None, true),
            // queue_minfree above the 1.5 times rule decides.
            (100 * MB, 100 * MB, 10 * MB, None, true),
            (101 * MB, 100 * MB, 10 * MB, None, false),
            // SIZE= must fit above queue_minfree.
            (101 * MB, 100 * MB, 10 * MB, Some(MB - 1), false),
            (101 * MB, 100 * MB, 10 * MB, Some(MB), true),
            (1000 * MB, 0, 0, Some(999 * MB), false),
            (1000 * MB, 0, 0, Some(1000 * MB), true),
            // No overflow at the extremes.
            (u64::MAX, 0, u64::MAX / 2, None, false),
            (u64::MAX, 0, u64::MAX, Some(u64::MAX), true),
        ];
        for (free, minfree, limit, size, refused) in cases {
            let r = refusal(free, minfree, limit, size);
            assert_eq!(
                r.is_some(),
                refused,
                "free={free} minfree={minfree} limit={limit} size={size:?}"
            );
            if let Some(r) = r {
                assert_eq!(r.code, 452);
                assert_eq!(r.enhanced, Some(StatusCode::SYSTEM_FULL));
                assert_eq!(r.text(), "Insufficient system storage");
            }
        }
    }
}
