//! Mailbox writers: mbox with fcntl and dot locking, and Maildir.
//!
//! mbox: take `<mbox>.lock` (created with O_EXCL; a lock older than five
//! minutes is stale and removed), open the mailbox for append (never
//! through a symbolic link, only a regular file with one link owned by the
//! writer), take an fcntl lock, check `mailbox_size_limit`, append, fsync,
//! and on a write error truncate back to the old size so a reader never
//! sees half a message. Maildir: write `tmp/<unique>`, fsync, rename to
//! `new/<unique>`. Errors are returned as a [`Failure`] the caller maps to
//! a per-recipient result; nothing here logs or panics.

use mail::StatusCode;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::message::CopyError;

/// Why a delivery did not happen, as a recipient result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Enhanced status code: class 4 deferred, 5 bounced.
    pub status: StatusCode,
    /// The reason.
    pub text: String,
}

impl Failure {
    /// A temporary failure.
    pub fn defer(status: StatusCode, text: impl Into<String>) -> Failure {
        debug_assert!(!status.is_permanent(), "local: defer with {status}");
        Failure {
            status,
            text: text.into(),
        }
    }

    /// A permanent failure.
    pub fn bounce(status: StatusCode, text: impl Into<String>) -> Failure {
        debug_assert!(status.is_permanent(), "local: bounce with {status}");
        Failure {
            status,
            text: text.into(),
        }
    }

    /// Whether the failure is permanent.
    pub fn is_permanent(&self) -> bool {
        self.status.is_permanent()
    }

    /// The status qmgr gets.
    pub fn to_status(&self) -> mail::Status {
        mail::Status::new(self.status, self.text.clone())
    }
}

/// How long a dotlock may sit before it is considered stale.
const STALE_LOCK: Duration = Duration::from_secs(300);
/// How often and how long to retry a busy dotlock.
const LOCK_TRIES: u32 = 50;
const LOCK_PAUSE: Duration = Duration::from_millis(100);

/// A `<mbox>.lock` file, removed when dropped.
pub struct DotLock {
    path: PathBuf,
}

impl DotLock {
    /// Takes the dotlock of `mbox`, waiting a few seconds for a holder.
    /// `Ok(None)` when the directory does not let us create one (a spool
    /// we may not write): the fcntl lock still serialises writers.
    pub fn take(mbox: &Path) -> Result<Option<DotLock>, Failure> {
        let mut path = mbox.as_os_str().to_owned();
        path.push(".lock");
        let path = PathBuf::from(path);
        for _ in 0..LOCK_TRIES {
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(_) => return Ok(Some(DotLock { path })),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let stale = std::fs::symlink_metadata(&path)
                        .ok()
                        .and_then(|m| m.modified().ok())
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > STALE_LOCK);
                    if stale {
                        let _ = std::fs::remove_file(&path);
                        continue;
                    }
                    std::thread::sleep(LOCK_PAUSE);
                }
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(None),
                Err(e) => {
                    return Err(Failure::defer(
                        StatusCode::known(4, 2, 0),
                        format!("cannot create {}: {e}", path.display()),
                    ))
                }
            }
        }
        Err(Failure::defer(
            StatusCode::known(4, 2, 0),
            format!("{} is locked", mbox.display()),
        ))
    }
}

impl Drop for DotLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Creates an empty mailbox owned by `uid`/`gid` if there is none (run as
/// root before switching to the user, for a spool the user cannot write).
pub fn create_owned(mbox: &Path, uid: u32, gid: u32) -> Result<(), Failure> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(sys::O_NOFOLLOW)
        .open(mbox)
    {
        Ok(f) => std::os::unix::fs::fchown(&f, Some(uid), Some(gid)).map_err(|e| {
            Failure::defer(
                StatusCode::known(4, 2, 0),
                format!("cannot chown {}: {e}", mbox.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Failure::defer(
            StatusCode::known(4, 2, 0),
            format!("cannot create {}: {e}", mbox.display()),
        )),
    }
}

/// Appends `bytes` (a complete mbox entry): [`append_mbox_with`] for
/// content already in memory.
#[cfg(test)]
pub fn append_mbox(
    mbox: &Path,
    bytes: &[u8],
    limit: u64,
    owner: Option<u32>,
) -> Result<(), Failure> {
    append_mbox_with(mbox, limit, owner, |w| {
        w.write_all(bytes).map_err(CopyError::Write)
    })
}

/// Appends the mbox entry that `write` writes to `mbox` as the current
/// (effective) user. `limit` 0 means no size limit. `owner`, when given,
/// is the uid the file must belong to (a mailbox; not an alias's /file).
pub fn append_mbox_with(
    mbox: &Path,
    limit: u64,
    owner: Option<u32>,
    write: impl FnOnce(&mut dyn Write) -> Result<(), CopyError>,
) -> Result<(), Failure> {
    let show = mbox.display();
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(sys::O_NOFOLLOW)
        .open(mbox)
        .map_err(|e| {
            Failure::defer(
                StatusCode::known(4, 2, 0),
                format!("cannot open mailbox {show}: {e}"),
            )
        })?;
    let meta = f.metadata().map_err(|e| {
        Failure::defer(
            StatusCode::known(4, 2, 0),
            format!("cannot stat mailbox {show}: {e}"),
        )
    })?;
    let owned = owner.is_none_or(|o| meta.uid() == o);
    if !meta.file_type().is_file() || meta.nlink() != 1 || !owned {
        return Err(Failure::defer(
            StatusCode::known(4, 2, 0),
            format!("mailbox {show}: not a regular file with one link owned by its user"),
        ));
    }
    sys::lock::fcntl_lock_exclusive(&f).map_err(|e| {
        Failure::defer(
            StatusCode::known(4, 2, 0),
            format!("cannot lock mailbox {show}: {e}"),
        )
    })?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(meta.len());
    let mut limited = Limited {
        file: &mut f,
        room: if limit > 0 {
            limit.saturating_sub(size)
        } else {
            u64::MAX
        },
        full: false,
    };
    let written = write(&mut limited);
    let full = limited.full;
    let failure = match written {
        Ok(()) => match f.sync_all() {
            Ok(()) => return Ok(()),
            Err(e) => Failure::defer(
                StatusCode::known(4, 2, 0),
                format!("cannot update mailbox {show}: {e}"),
            ),
        },
        Err(_) if full => Failure::bounce(
            StatusCode::known(5, 2, 2),
            format!("cannot update mailbox {show}: mailbox full (mailbox_size_limit {limit})"),
        ),
        Err(CopyError::Write(e)) => Failure::defer(
            StatusCode::known(4, 2, 0),
            format!("cannot update mailbox {show}: {e}"),
        ),
        Err(CopyError::Read(e)) => Failure::defer(
            StatusCode::known(4, 3, 0),
            format!("cannot read the message: {e}"),
        ),
    };
    let _ = f.set_len(size);
    Err(failure)
}

/// A mailbox being appended to, refusing to grow past its limit.
struct Limited<'a> {
    file: &'a mut File,
    /// Bytes that may still be written.
    room: u64,
    /// A write was refused for want of room.
    full: bool,
}

impl Write for Limited<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() as u64 > self.room {
            self.full = true;
            return Err(io::Error::other("mailbox_size_limit exceeded"));
        }
        let n = self.file.write(buf)?;
        self.room -= n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A Maildir file name: `<secs>.<micros>_<pid>_<counter>.<host>`, with `/`
/// and `:` in the host name escaped as `\057` and `\072`.
pub fn maildir_name(now: SystemTime, pid: u32, counter: u64, host: &str) -> String {
    let d = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let host = host.replace('/', "\\057").replace(':', "\\072");
    format!(
        "{}.{:06}_{pid}_{counter}.{host}",
        d.as_secs(),
        d.subsec_micros()
    )
}

/// Delivers `bytes` into the Maildir `dir`: [`deliver_maildir_with`] for
/// content already in memory.
#[cfg(test)]
pub fn deliver_maildir(dir: &Path, bytes: &[u8], host: &str) -> Result<PathBuf, Failure> {
    deliver_maildir_with(dir, host, |w| w.write_all(bytes).map_err(CopyError::Write))
}

/// Delivers what `write` writes into the Maildir `dir` (creating `tmp`,
/// `new`, `cur` as needed) as the current user. Returns the file's path
/// in `new`.
pub fn deliver_maildir_with(
    dir: &Path,
    host: &str,
    write: impl FnOnce(&mut dyn Write) -> Result<(), CopyError>,
) -> Result<PathBuf, Failure> {
    let fail = |what: &str, p: &Path, e: io::Error| {
        Failure::defer(
            StatusCode::known(4, 2, 0),
            format!("{what} {}: {e}", p.display()),
        )
    };
    for sub in ["tmp", "new", "cur"] {
        let p = dir.join(sub);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&p)
            .map_err(|e| fail("cannot create maildir", &p, e))?;
    }
    let name = maildir_name(
        SystemTime::now(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        host,
    );
    let tmp = dir.join("tmp").join(&name);
    let new = dir.join("new").join(&name);
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(CopyError::Write)
        .and_then(|mut f| {
            write(&mut f)?;
            f.sync_all().map_err(CopyError::Write)?;
            std::fs::rename(&tmp, &new).map_err(CopyError::Write)?;
            File::open(dir.join("new"))
                .and_then(|d| d.sync_all())
                .map_err(CopyError::Write)
        });
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        match e {
            CopyError::Write(e) => fail("cannot deliver to maildir", dir, e),
            CopyError::Read(e) => Failure::defer(
                StatusCode::known(4, 3, 0),
                format!("cannot read the message: {e}"),
            ),
        }
    })?;
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maildir_names_are_unique_and_escaped() {
        let _serial = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_000_042);
        assert_eq!(
            maildir_name(t, 77, 3, "mx.example"),
            "1700000000.000042_77_3.mx.example"
        );
        assert_eq!(
            maildir_name(t, 1, 0, "a/b:c"),
            "1700000000.000042_1_0.a\\057b\\072c"
        );
        let dir = tempfile::tempdir().unwrap();
        let a = deliver_maildir(dir.path(), b"x\n", "h").unwrap();
        let b = deliver_maildir(dir.path(), b"y\n", "h").unwrap();
        assert_ne!(a, b);
        assert_eq!(std::fs::read(&a).unwrap(), b"x\n");
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0
        );
    }

    #[test]
    fn mbox_appends_and_enforces_the_limit() {
        let _serial = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let mbox = dir.path().join("u");
        let me = Some(sys::current_ids().0);
        {
            let _l = DotLock::take(&mbox).unwrap().unwrap();
            assert!(dir.path().join("u.lock").exists());
            append_mbox(&mbox, b"From a\n\n", 0, me).unwrap();
        }
        assert!(!dir.path().join("u.lock").exists());
        append_mbox(&mbox, b"From b\n\n", 0, me).unwrap();
        assert_eq!(std::fs::read(&mbox).unwrap(), b"From a\n\nFrom b\n\n");
        let full = append_mbox(&mbox, b"From c\n\n", 20, me).unwrap_err();
        assert_eq!(full.status.to_string(), "5.2.2");
        let wrong = append_mbox(&mbox, b"x", 0, me.map(|u| u + 1)).unwrap_err();
        assert_eq!(wrong.status.class(), 4);
        std::os::unix::fs::symlink(&mbox, dir.path().join("link")).unwrap();
        assert!(append_mbox(&dir.path().join("link"), b"x", 0, me).is_err());
    }

    /// An entry written in pieces that passes the limit, or whose message
    /// cannot be read, midway: the mailbox is cut back to what it was.
    #[test]
    fn an_entry_that_fails_midway_is_truncated_back() {
        let _serial = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let mbox = dir.path().join("u");
        let me = Some(sys::current_ids().0);
        append_mbox(&mbox, b"From a\n\n", 0, me).unwrap();
        let pieces = |w: &mut dyn Write| -> Result<(), CopyError> {
            for _ in 0..10 {
                w.write_all(&[b'x'; 1000]).map_err(CopyError::Write)?;
            }
            Ok(())
        };
        let full = append_mbox_with(&mbox, 5000, me, pieces).unwrap_err();
        assert_eq!(full.status.to_string(), "5.2.2", "{full:?}");
        assert_eq!(std::fs::read(&mbox).unwrap(), b"From a\n\n");
        let unread = append_mbox_with(&mbox, 0, me, |w| {
            w.write_all(b"From b\nhalf").map_err(CopyError::Write)?;
            Err(CopyError::Read(io::Error::other("spool gone")))
        })
        .unwrap_err();
        assert_eq!(unread.status.to_string(), "4.3.0");
        assert!(unread.text.contains("spool gone"), "{}", unread.text);
        assert_eq!(std::fs::read(&mbox).unwrap(), b"From a\n\n");
        append_mbox_with(&mbox, 20_000, me, pieces).unwrap();
        assert_eq!(std::fs::metadata(&mbox).unwrap().len(), 8 + 10_000);
        // A Maildir file that cannot be finished is not left in tmp/.
        let md = dir.path().join("md");
        let e = deliver_maildir_with(&md, "h", |w| {
            w.write_all(b"half").map_err(CopyError::Write)?;
            Err(CopyError::Read(io::Error::other("spool gone")))
        })
        .unwrap_err();
        assert_eq!(e.status.to_string(), "4.3.0");
        for sub in ["tmp", "new"] {
            assert_eq!(std::fs::read_dir(md.join(sub)).unwrap().count(), 0);
        }
    }

    #[test]
    fn a_held_dotlock_makes_the_next_writer_wait() {
        let _serial = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let mbox = dir.path().join("u");
        let me = Some(sys::current_ids().0);
        let held = DotLock::take(&mbox).unwrap().unwrap();
        let m = mbox.clone();
        let other = std::thread::spawn(move || {
            let _l = DotLock::take(&m).unwrap().unwrap();
            append_mbox(&m, b"second\n", 0, me).unwrap();
        });
        std::thread::sleep(Duration::from_millis(300));
        append_mbox(&mbox, b"first\n", 0, me).unwrap();
        drop(held);
        other.join().unwrap();
        assert_eq!(std::fs::read(&mbox).unwrap(), b"first\nsecond\n");
    }
}
