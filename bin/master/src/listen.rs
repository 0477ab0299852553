//! Opening the listening sockets that master holds and passes to children.
//!
//! master opens every socket itself, before any child runs, so that
//! services start on demand and a crashed child loses no queued clients:
//! the socket, and the connections waiting on it, outlive every process.

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use config::{Config, ServiceDef, ServiceKind};

/// One listening socket of a service.
#[derive(Debug)]
pub enum ListenSock {
    /// A TCP socket of an inet service.
    Tcp(std::net::TcpListener, SocketAddr),
    /// A Unix socket of a unix service, with its path.
    Unix(std::os::unix::net::UnixListener, PathBuf),
}

impl ListenSock {
    /// The descriptor, to pass to children.
    pub fn fd(&self) -> BorrowedFd<'_> {
        match self {
            ListenSock::Tcp(l, _) => l.as_fd(),
            ListenSock::Unix(l, _) => l.as_fd(),
        }
    }

    /// The raw descriptor, to register with mio.
    pub fn raw(&self) -> RawFd {
        self.fd().as_raw_fd()
    }

    /// Where it listens, for status output.
    pub fn describe(&self) -> String {
        match self {
            ListenSock::Tcp(_, a) => a.to_string(),
            ListenSock::Unix(_, p) => p.display().to_string(),
        }
    }
}

/// Where a service listens, as master will bind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bind {
    /// TCP addresses.
    Inet(Vec<SocketAddr>),
    /// A Unix socket path and whether it is public.
    Unix(PathBuf, bool),
}

/// Works out where a service listens.
pub fn endpoint_of(def: &ServiceDef, cfg: &Config) -> Result<Bind, String> {
    match def.kind {
        ServiceKind::Inet => config::inet_addresses(def, cfg)
            .map(Bind::Inet)
            .map_err(|e| e.to_string()),
        ServiceKind::Unix => {
            let dir = if def.private { "private" } else { "public" };
            let path = Path::new(&cfg.str("queue_directory"))
                .join(dir)
                .join(&def.name);
            Ok(Bind::Unix(path, !def.private))
        }
    }
}

/// Binds the sockets of an endpoint, non-blocking.
pub fn open(ep: &Bind, owner: Option<(u32, u32)>) -> Result<Vec<ListenSock>, String> {
    match ep {
        Bind::Inet(addrs) => addrs
            .iter()
            .map(|a| {
                let l = sys::net::tcp_listener(*a, 1024).map_err(|e| format!("bind {a}: {e}"))?;
                l.set_nonblocking(true).map_err(|e| format!("{a}: {e}"))?;
                Ok(ListenSock::Tcp(l, *a))
            })
            .collect(),
        Bind::Unix(path, public) => {
            // A socket file left by a previous master is stale: we hold the
            // pid lock, so nobody else can be listening on it.
            match std::fs::symlink_metadata(path) {
                Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
                    let _ = std::fs::remove_file(path);
                }
                Ok(_) => return Err(format!("{}: exists and is not a socket", path.display())),
                Err(_) => {}
            }
            let l = std::os::unix::net::UnixListener::bind(path)
                .map_err(|e| format!("bind {}: {e}", path.display()))?;
            l.set_nonblocking(true)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let mode = if *public { 0o666 } else { 0o600 };
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("chmod {}: {e}", path.display()))?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(path, Some(uid), Some(gid))
                    .map_err(|e| format!("chown {}: {e}", path.display()))?;
            }
            Ok(vec![ListenSock::Unix(l, path.clone())])
        }
    }
}
