//! Spawning children with descriptors at fixed numbers, and reaping them.
//!
//! master hands each child its status pipe, its life pipe and its listening
//! sockets at descriptor 3 and up, as Postfix's master does with
//! MASTER_STATUS_FD and MASTER_LISTEN_FD. `std::process::Command` cannot place
//! descriptors, so a `pre_exec` hook does it between fork and exec, using only
//! async-signal-safe calls (fcntl, dup2).

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::SysError;

/// The first descriptor number a child receives passed descriptors at.
pub const FIRST_PASSED_FD: RawFd = 3;

/// Spawns `cmd` with `fds[i]` available in the child as descriptor `3 + i`.
///
/// Every other descriptor of ours is close-on-exec (Rust opens everything so),
/// so the child gets exactly these plus stdin, stdout and stderr.
pub fn spawn_with_fds(cmd: &mut Command, fds: &[BorrowedFd<'_>]) -> std::io::Result<Child> {
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: the closure runs in the forked child before exec and calls only
    // fcntl and dup2, which are async-signal-safe; it allocates nothing
    // (`raw` was built before the fork and is only read).
    unsafe {
        cmd.pre_exec(move || {
            // First move every source above the target range so that no
            // dup2 below overwrites a source that is still to be copied.
            let mut high = [0 as RawFd; 64];
            if raw.len() > high.len() {
                return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
            }
            let floor = FIRST_PASSED_FD + raw.len() as RawFd + 64;
            for (i, fd) in raw.iter().enumerate() {
                let h = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, floor);
                if h < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                high[i] = h;
            }
            for (i, h) in high.iter().take(raw.len()).enumerate() {
                // dup2 leaves the new descriptor without close-on-exec.
                if libc::dup2(*h, FIRST_PASSED_FD + i as RawFd) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// It called exit with this status.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
}

impl ExitKind {
    /// True for exit status 0.
    pub fn is_success(self) -> bool {
        self == ExitKind::Exited(0)
    }
}

/// Reaps one exited child without blocking: `Ok(None)` when none is waiting.
pub fn reap_any() -> Result<Option<(i32, ExitKind)>, SysError> {
    match nix::sys::wait::waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(pid, code)) => Ok(Some((pid.as_raw(), ExitKind::Exited(code)))),
        Ok(WaitStatus::Signaled(pid, sig, _)) => {
            Ok(Some((pid.as_raw(), ExitKind::Signaled(sig as i32))))
        }
        Ok(_) => Ok(None),
        Err(nix::errno::Errno::ECHILD) => Ok(None),
        Err(e) => Err(SysError::new("waitpid", e)),
    }
}

/// Sends a signal by number; a process that is already gone is not an error.
pub fn signal(pid: i32, sig: i32) -> Result<(), SysError> {
    let s = Signal::try_from(sig).map_err(|e| SysError::new(format!("signal {sig}"), e))?;
    match nix::sys::signal::kill(Pid::from_raw(pid), s) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(e) => Err(SysError::new(format!("kill({pid}, {sig})"), e)),
    }
}

/// Whether a process with this pid exists (signal 0).
pub fn alive(pid: i32) -> bool {
    pid > 0
        && !matches!(
            nix::sys::signal::kill(Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        )
}

/// The soft limit on open descriptors (RLIMIT_NOFILE); `None` when unlimited.
pub fn open_files_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    (soft != RLIM_INFINITY).then_some(soft)
}

/// Detaches from the controlling terminal and process group.
pub fn new_session() -> Result<(), SysError> {
    nix::unistd::setsid()
        .map(|_| ())
        .map_err(|e| SysError::new("setsid", e))
}

/// A signal's conventional name (`SIGKILL`), for log lines.
pub fn signal_name(sig: i32) -> String {
    Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| sig.to_string())
}

/// Makes a passed descriptor close-on-exec so it does not leak to grandchildren.
pub fn set_cloexec(fd: BorrowedFd<'_>) -> Result<(), SysError> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map(|_| ())
        .map_err(|e| SysError::new("fcntl(F_SETFD)", e))
}

/// Whether a descriptor number is open in this process.
pub fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only queries flags; an invalid descriptor gives EBADF.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// Creates a pipe whose both ends are close-on-exec.
pub fn pipe() -> Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd), SysError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| SysError::new("pipe2", e))
}

/// Points stdin, stdout and stderr at /dev/null, as a daemon does once it
/// has nothing more to say on a terminal.
pub fn stdio_to_devnull() -> Result<(), SysError> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| {
            SysError::new(
                "open(/dev/null)",
                nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            )
        })?;
    nix::unistd::dup2_stdin(&null).map_err(|e| SysError::new("dup2(stdin)", e))?;
    nix::unistd::dup2_stdout(&null).map_err(|e| SysError::new("dup2(stdout)", e))?;
    nix::unistd::dup2_stderr(&null).map_err(|e| SysError::new("dup2(stderr)", e))?;
    Ok(())
}

/// Takes ownership of a descriptor passed at a fixed number by our parent.
///
/// Returns `None` if that descriptor is not open, so a daemon started by
/// hand instead of by master fails with a message rather than misbehaving.
pub fn take_passed_fd(fd: RawFd) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    if !fd_is_open(fd) {
        return None;
    }
    // SAFETY: the descriptor is open (checked above) and, by the contract
    // with master, nothing else in this process owns it.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let _ = set_cloexec(std::os::fd::AsFd::as_fd(&owned));
    Some(owned)
}

/// Puts a descriptor in non-blocking mode.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> Result<(), SysError> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(|e| SysError::new("fcntl(F_GETFL)", e))?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags))
        .map(|_| ())
        .map_err(|e| SysError::new("fcntl(F_SETFL)", e))
}
