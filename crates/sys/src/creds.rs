//! Peer credentials of a connected Unix socket (SO_PEERCRED).
//!
//! Servers use them to decide who may talk to a control or submission socket;
//! the kernel fills them in at connect time, so they cannot be forged.

use std::os::fd::AsFd;

use crate::SysError;

/// The process, user and group at the other end of a Unix stream socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// The peer's process id at connect time.
    pub pid: i32,
    /// The peer's effective uid.
    pub uid: u32,
    /// The peer's effective gid.
    pub gid: u32,
}

/// Reads the peer credentials of a connected Unix socket.
pub fn peer_cred<F: AsFd>(sock: &F) -> Result<PeerCred, SysError> {
    let c = nix::sys::socket::getsockopt(sock, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| SysError::new("getsockopt(SO_PEERCRED)", e))?;
    Ok(PeerCred {
        pid: c.pid(),
        uid: c.uid(),
        gid: c.gid(),
    })
}
