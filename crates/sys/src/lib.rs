//! The system layer: the one crate that talks to nix and libc directly.
//!
//! Everything that needs `unsafe` or a raw system call lives here, so every
//! other crate can `#![forbid(unsafe_code)]`. Nothing here knows about mail:
//! privilege drop in the order OpenSMTPD and Postfix use (chroot, setgroups,
//! setresgid, setresuid), spawning a child with descriptors at fixed numbers,
//! the pid-file lock that keeps one master per queue directory, peer
//! credentials of Unix sockets, and local time for log lines.
#![warn(missing_docs)]

pub mod creds;
pub mod fs;
pub mod lock;
pub mod net;
pub mod privilege;
pub mod process;
pub mod time;

use std::fmt;

/// An error from a system call, with what was being attempted.
#[derive(Debug)]
#[non_exhaustive]
pub struct SysError {
    /// What the call was trying to do, e.g. `setresuid(107)`.
    pub what: String,
    /// The operating system's error.
    pub errno: nix::errno::Errno,
}

impl SysError {
    pub(crate) fn new(what: impl Into<String>, errno: nix::errno::Errno) -> Self {
        SysError {
            what: what.into(),
            errno,
        }
    }
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.errno.desc())
    }
}

impl std::error::Error for SysError {}

/// Whether the process runs with root's effective uid.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The current real uid and gid.
pub fn current_ids() -> (u32, u32) {
    (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    )
}

/// The system's host name, or `localhost` if it cannot be read.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// `O_NOFOLLOW`, for `OpenOptionsExt::custom_flags` (std has no constant).
pub const O_NOFOLLOW: i32 = libc::O_NOFOLLOW;
