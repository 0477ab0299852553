//! Dropping root: chroot, then setgroups, setresgid, setresuid.
//!
//! The order is the one OpenSMTPD and Postfix use: chroot while still root
//! (it needs the privilege), supplementary groups before the gid (setgroups
//! needs root), the gid before the uid (after setresuid there is no way
//! back). Afterwards we check that root cannot be regained; if it can, the
//! drop failed and the caller must exit.

use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, User};

use crate::SysError;

/// A user account to run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The login name.
    pub name: String,
    /// The numeric uid.
    pub uid: u32,
    /// The primary gid.
    pub gid: u32,
    /// The home directory.
    pub home: PathBuf,
}

/// Looks a user up in the password database; `Ok(None)` if there is none.
pub fn lookup_user(name: &str) -> Result<Option<Identity>, SysError> {
    let user = User::from_name(name).map_err(|e| SysError::new(format!("getpwnam({name})"), e))?;
    Ok(user.map(|u| Identity {
        name: u.name,
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
        home: u.dir,
    }))
}

/// Looks a uid up in the password database; `Ok(None)` if there is none.
pub fn lookup_uid(uid: u32) -> Result<Option<Identity>, SysError> {
    let user = User::from_uid(Uid::from_raw(uid))
        .map_err(|e| SysError::new(format!("getpwuid({uid})"), e))?;
    Ok(user.map(|u| Identity {
        name: u.name,
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
        home: u.dir,
    }))
}

/// Changes root (if asked) and then the process's identity, for good.
pub fn drop_privileges(to: &Identity, chroot: Option<&Path>) -> Result<(), SysError> {
    if let Some(dir) = chroot {
        nix::unistd::chroot(dir)
            .map_err(|e| SysError::new(format!("chroot({})", dir.display()), e))?;
        nix::unistd::chdir("/").map_err(|e| SysError::new("chdir(/)", e))?;
    }
    let gid = Gid::from_raw(to.gid);
    let uid = Uid::from_raw(to.uid);
    nix::unistd::setgroups(&[gid]).map_err(|e| SysError::new(format!("setgroups({gid})"), e))?;
    nix::unistd::setresgid(gid, gid, gid)
        .map_err(|e| SysError::new(format!("setresgid({gid})"), e))?;
    nix::unistd::setresuid(uid, uid, uid)
        .map_err(|e| SysError::new(format!("setresuid({uid})"), e))?;
    if to.uid != 0 && nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
        return Err(SysError::new(
            "setuid(0) after dropping privileges succeeded",
            nix::errno::Errno::EPERM,
        ));
    }
    Ok(())
}
