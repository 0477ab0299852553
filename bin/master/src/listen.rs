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

    /// A wakeup: connects without waiting, for the service to accept and
    /// read end of file from once the connection is let go. An error now
    /// is one the connection has at once (refused; a Unix socket whose
    /// queue is full gives `WouldBlock`); a TCP handshake still under way
    /// is judged when the poke is let go ([`Poke::failure`]). master's
    /// loop never waits on a service it is waking.
    pub fn poke(&self) -> std::io::Result<Poke> {
        match self {
            ListenSock::Tcp(_, a) => mio::net::TcpStream::connect(*a).map(Poke::Tcp),
            ListenSock::Unix(_, p) => mio::net::UnixStream::connect(p).map(Poke::Unix),
        }
    }
}

/// A wakeup's connection, held open while the service takes it.
#[derive(Debug)]
pub enum Poke {
    /// To an inet service.
    Tcp(mio::net::TcpStream),
    /// To a unix service (connected when made).
    Unix(mio::net::UnixStream),
}

impl Poke {
    /// Why the wakeup did not reach the service, asked when it is let go:
    /// a TCP handshake that failed or never completed (the service's
    /// accept queue full all along).
    pub fn failure(&self) -> Option<std::io::Error> {
        match self {
            Poke::Tcp(s) => match s.take_error() {
                Ok(Some(e)) | Err(e) => Some(e),
                Ok(None) => s.peer_addr().err(),
            },
            Poke::Unix(s) => s.take_error().unwrap_or_else(Some),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_wakeup_reaches_an_inet_service_as_a_connection_that_ends() {
        let l = sys::net::tcp_listener("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        let addr = l.local_addr().unwrap();
        let sock = ListenSock::Tcp(l, addr);
        let poke = sock.poke().expect("connect without waiting");
        let ListenSock::Tcp(l, _) = &sock else {
            unreachable!()
        };
        let (mut c, _) = l.accept().unwrap();
        assert!(poke.failure().is_none(), "the handshake completed");
        drop(poke);
        let mut buf = [0u8; 8];
        assert_eq!(
            c.read(&mut buf).unwrap(),
            0,
            "the service reads end of file"
        );
    }

    #[test]
    fn a_wakeup_to_a_full_inet_queue_does_not_wait_and_is_reported_when_let_go() {
        // Backlog 0: one connection waits in the queue, later SYNs are
        // dropped and their handshakes hang (a blocking connect would wait
        // for its timeout here, and the loop with it).
        let l = sys::net::tcp_listener("127.0.0.1:0".parse().unwrap(), 0).unwrap();
        let addr = l.local_addr().unwrap();
        let sock = ListenSock::Tcp(l, addr);
        let pokes: Vec<Poke> = (0..4).map(|_| sock.poke().expect("never blocks")).collect();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let failed: Vec<String> = pokes
            .iter()
            .filter_map(|p| p.failure().map(|e| e.to_string()))
            .collect();
        assert!(
            !failed.is_empty(),
            "a wakeup that never reached the service is reported"
        );
        assert!(
            failed.len() < pokes.len(),
            "the first is queued: {failed:?}"
        );
    }

    #[test]
    fn a_wakeup_to_a_full_unix_queue_fails_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc");
        // A queue of one: std's bind takes the system's maximum, which
        // would need thousands of descriptors to fill.
        let l = sys::net::unix_listener(&path, 1).unwrap();
        let sock = ListenSock::Unix(l, path);
        let mut held = Vec::new();
        let err = loop {
            match sock.poke() {
                Ok(p) => {
                    assert!(p.failure().is_none());
                    held.push(p);
                }
                Err(e) => break e,
            }
            assert!(held.len() < 64, "the queue never filled");
        };
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "{err}");
        assert!(!held.is_empty());
    }
}
