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

/// The previous effective identity, put back when dropped: see [`switch_effective`].
#[derive(Debug)]
#[must_use = "the identity is restored when this is dropped"]
pub struct EffectiveIds {
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
}

/// Switches the effective uid and gid (and the supplementary groups) to a
/// user's while keeping root as the saved uid, as Postfix's set_eugid: the
/// local delivery agent writes a user's mailbox as that user, then comes
/// back to root for the next one. Only meaningful when running as root.
pub fn switch_effective(uid: u32, gid: u32) -> Result<EffectiveIds, SysError> {
    let g = Gid::from_raw(gid);
    let guard = EffectiveIds {
        uid: nix::unistd::geteuid(),
        gid: nix::unistd::getegid(),
        groups: nix::unistd::getgroups().map_err(|e| SysError::new("getgroups", e))?,
    };
    nix::unistd::setgroups(&[g]).map_err(|e| SysError::new(format!("setgroups({g})"), e))?;
    nix::unistd::setegid(g).map_err(|e| SysError::new(format!("setegid({g})"), e))?;
    nix::unistd::seteuid(Uid::from_raw(uid))
        .map_err(|e| SysError::new(format!("seteuid({uid})"), e))?;
    Ok(guard)
}

impl Drop for EffectiveIds {
    fn drop(&mut self) {
        // Failing to come back to root leaves the process less privileged,
        // never more; the next switch then fails and defers the mail.
        let _ = nix::unistd::seteuid(self.uid);
        let _ = nix::unistd::setegid(self.gid);
        let _ = nix::unistd::setgroups(&self.groups);
    }
}
