//! Which targets of a deferred recipient were already delivered.
//!
//! qmgr knows recipients, not what an alias or `.forward` expands to: when
//! one target of a recipient defers, the whole recipient is tried again.
//! So that the targets that succeeded do not get the message again, local
//! keeps them in a file of its own, `$data_directory/local/ID.INDEX` (queue
//! id, recipient index), one target a line, synced before the deferral is
//! reported; the next attempt skips them. The file goes when the recipient
//! is settled (delivered or bounced). A message that leaves the queue while
//! deferred (expired, deleted) leaves its file behind: those older than the
//! queue's lifetime are swept when a local process starts.
//!
//! A crash between a delivery and the write of this file delivers that
//! target again on the next attempt, as before: at least once, never lost.

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use daemon::msg_warn;

/// The delivered targets of one recipient.
#[derive(Debug, Default)]
pub struct Progress {
    path: Option<PathBuf>,
    done: HashSet<String>,
}

impl Progress {
    /// Nothing remembered, nothing to remember (tests, or no directory).
    pub fn none() -> Progress {
        Progress::default()
    }

    /// The record of recipient `index` of message `queue_id` under `dir`.
    pub fn load(dir: &Path, queue_id: &str, index: u32) -> Progress {
        // Queue ids are letters and digits; anything else never names a file.
        if queue_id.is_empty() || !queue_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Progress::none();
        }
        let path = dir.join(format!("{queue_id}.{index}"));
        let done = match std::fs::read_to_string(&path) {
            Ok(text) => text.lines().map(str::to_string).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashSet::new(),
            Err(e) => {
                msg_warn!("{}: {e}", path.display());
                HashSet::new()
            }
        };
        Progress {
            path: Some(path),
            done,
        }
    }

    /// Whether target `key` was delivered on an earlier attempt.
    pub fn contains(&self, key: &str) -> bool {
        self.done.contains(key)
    }

    /// Ends an attempt: with a deferral, the targets delivered in it are
    /// added to the record (synced); else the record is removed.
    pub fn finish(&mut self, deferred: bool, delivered: &[String]) {
        let Some(path) = &self.path else { return };
        if !deferred {
            if !self.done.is_empty() {
                if let Err(e) = std::fs::remove_file(path) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        msg_warn!("{}: {e}", path.display());
                    }
                }
            }
            return;
        }
        let fresh: Vec<&String> = delivered
            .iter()
            .filter(|k| !self.done.contains(*k))
            .collect();
        if fresh.is_empty() {
            return;
        }
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
            }
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .custom_flags(sys::O_NOFOLLOW)
                .open(path)?;
            let mut text = String::new();
            for k in &fresh {
                text.push_str(k);
                text.push('\n');
            }
            f.write_all(text.as_bytes())?;
            f.sync_all()
        };
        match write() {
            Ok(()) => self.done.extend(fresh.into_iter().cloned()),
            Err(e) => msg_warn!(
                "{}: {e}; delivered targets will get the message again",
                path.display()
            ),
        }
    }
}

/// Removes records older than `max_age` (their messages have left).
pub fn sweep(dir: &Path, max_age: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > max_age);
        if old {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivered_targets_are_remembered_until_the_recipient_is_settled() {
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("local");
        let mut p = Progress::load(&rec, "ABC123", 2);
        assert!(!p.contains("a"));
        p.finish(true, &["a".into(), "b\nc".replace('\n', " ")]);
        let p2 = Progress::load(&rec, "ABC123", 2);
        assert!(p2.contains("a") && p2.contains("b c"));
        assert!(!Progress::load(&rec, "ABC123", 3).contains("a"));
        let mut p3 = p2;
        p3.finish(true, &["a".into(), "d".into()]);
        assert_eq!(
            std::fs::read_to_string(rec.join("ABC123.2")).unwrap(),
            "a\nb c\nd\n"
        );
        p3.finish(false, &[]);
        assert!(!rec.join("ABC123.2").exists());
        // A hostile id is never a path.
        let mut bad = Progress::load(&rec, "../x", 0);
        bad.finish(true, &["a".into()]);
        assert!(!dir.path().join("x.0").exists());
        sweep(&rec, Duration::from_secs(3600));
        let t = crate::alias::Target::Command("a\nb".into(), crate::alias::Origin::Forward, 7);
        assert_eq!(t.key(), "command:a b");
    }
}
