//! The pid-file lock: one master per queue directory.
//!
//! Postfix keeps `pid/master.pid` locked for the life of master; a second
//! master finds the lock held and names the pid that holds it. The lock is an
//! `flock` on the open file, so it disappears with the process however it
//! dies: a stale pid file never blocks a restart after kill -9.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::SysError;

/// Why a pid lock could not be taken.
#[derive(Debug)]
#[non_exhaustive]
pub enum LockError {
    /// Another process holds the lock; its pid as written in the file, if readable.
    Held {
        /// The lock file.
        path: PathBuf,
        /// The pid recorded in it.
        pid: Option<i32>,
    },
    /// The file could not be opened or written.
    Io {
        /// The lock file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The lock call itself failed for another reason.
    Sys(SysError),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held {
                path,
                pid: Some(pid),
            } => {
                write!(f, "{} is locked by process {pid}", path.display())
            }
            LockError::Held { path, pid: None } => write!(f, "{} is locked", path.display()),
            LockError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            LockError::Sys(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LockError {}

/// A held pid lock; dropping it releases the lock and leaves the file.
#[derive(Debug)]
pub struct PidLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl PidLock {
    /// Takes the lock without waiting and records our pid in the file.
    pub fn acquire(path: &Path) -> Result<PidLock, LockError> {
        let io = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(io)?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(LockError::Held {
                    path: path.to_path_buf(),
                    pid: read_pid(path),
                })
            }
            Err((_, e)) => return Err(LockError::Sys(SysError::new("flock", e))),
        };
        let pid = std::process::id();
        lock.set_len(0).map_err(io)?;
        lock.seek(SeekFrom::Start(0)).map_err(io)?;
        // Postfix's format: the pid right-aligned in 10 columns and a newline.
        writeln!(lock, "{pid:>10}").map_err(io)?;
        lock.flush().map_err(io)?;
        Ok(PidLock {
            _lock: lock,
            path: path.to_path_buf(),
        })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads the pid recorded in a pid file.
pub fn read_pid(path: &Path) -> Option<i32> {
    let mut s = String::new();
    File::open(path).ok()?.read_to_string(&mut s).ok()?;
    s.trim().parse().ok().filter(|p| *p > 0)
}

/// Whether the pid file is locked by a live process right now.
pub fn is_locked(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_) => false,
        Err((_, e)) => e == Errno::EWOULDBLOCK,
    }
}

/// Takes an exclusive fcntl (POSIX record) lock on the whole of `file`,
/// waiting for it, as mail readers expect on an mbox. The lock goes away
/// when the file is closed.
pub fn fcntl_lock_exclusive(file: &File) -> Result<(), SysError> {
    // SAFETY: an all-zero flock is a valid value; the fields that matter are
    // set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_SETLKW(&fl))
        .map(|_| ())
        .map_err(|e| SysError::new("fcntl(F_SETLKW)", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_is_refused_with_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.pid");
        let held = PidLock::acquire(&path).unwrap();
        assert!(is_locked(&path));
        // flock locks belong to the open file description, so a second open
        // in the same process conflicts just as another process would.
        match PidLock::acquire(&path) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id() as i32)),
            other => panic!("expected Held, got {other:?}"),
        }
        drop(held);
        assert!(!is_locked(&path));
        PidLock::acquire(&path).unwrap();
    }
}
