//! Listening sockets with the options std does not set.
//!
//! An IPv6 wildcard socket is made IPv6-only, so that `0.0.0.0:25` and
//! `[::]:25` can both be bound, as Postfix does for `inet_protocols = all`;
//! a Unix socket can be given a backlog of its own.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{FromRawFd, IntoRawFd};

use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage};

/// Binds and listens on `addr` with SO_REUSEADDR (and IPV6_V6ONLY for IPv6).
pub fn tcp_listener(addr: SocketAddr, backlog: i32) -> std::io::Result<TcpListener> {
    let family = if addr.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    let fd = socket::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    if addr.is_ipv6() {
        socket::setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    }
    let sa = SockaddrStorage::from(addr);
    socket::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &sa)?;
    let backlog = socket::Backlog::new(backlog.clamp(1, 4096)).unwrap_or(socket::Backlog::MAXCONN);
    socket::listen(&fd, backlog)?;
    // SAFETY: the descriptor is a listening stream socket we own; the
    // TcpListener takes that ownership over.
    Ok(unsafe { TcpListener::from_raw_fd(fd.into_raw_fd()) })
}

/// A Unix stream socket listening at `path` with this `backlog` (std's
/// `UnixListener::bind` takes the system's maximum).
pub fn unix_listener(
    path: &std::path::Path,
    backlog: i32,
) -> std::io::Result<std::os::unix::net::UnixListener> {
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let sa = socket::UnixAddr::new(path)?;
    socket::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &sa)?;
    let backlog = socket::Backlog::new(backlog.clamp(1, 4096)).unwrap_or(socket::Backlog::MAXCONN);
    socket::listen(&fd, backlog)?;
    // SAFETY: the descriptor is a listening stream socket we own; the
    // UnixListener takes that ownership over.
    Ok(unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd.into_raw_fd()) })
}

/// Sets TCP_NODELAY on a listening socket: on Linux the connections it
/// accepts inherit it, so a server need not set it on each.
pub fn set_tcp_nodelay(l: &TcpListener) -> std::io::Result<()> {
    socket::setsockopt(l, sockopt::TcpNoDelay, &true)?;
    Ok(())
}

/// Why [`tcp_connect`] could not start a connection.
#[derive(Debug)]
pub enum ConnectError {
    /// The source address could not be bound (not an address of this
    /// host, of the other family, or none left).
    Bind(std::io::Error),
    /// The socket could not be made, or the connect failed at once.
    Connect(std::io::Error),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Bind(e) | ConnectError::Connect(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConnectError {}

/// Starts a non-blocking connect to `addr`, from `bind` when given
/// (`smtp_bind_address`, or a shaping policy's source). Completion is
/// signalled by writability; check `take_error` then.
pub fn tcp_connect(
    addr: SocketAddr,
    bind: Option<std::net::IpAddr>,
) -> Result<std::net::TcpStream, ConnectError> {
    let family = if addr.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    let fd = socket::socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(|e| ConnectError::Connect(e.into()))?;
    if let Some(ip) = bind {
        let local = SockaddrStorage::from(SocketAddr::new(ip, 0));
        socket::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &local)
            .map_err(|e| ConnectError::Bind(e.into()))?;
    }
    match socket::connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(addr),
    ) {
        Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => {}
        Err(e) => return Err(ConnectError::Connect(e.into())),
    }
    // SAFETY: a connected (or connecting) stream socket we own.
    Ok(unsafe { std::net::TcpStream::from_raw_fd(fd.into_raw_fd()) })
}

/// Moves the calling thread (only it) into the network namespace whose
/// file is `path` (`/run/netns/NAME`, as `ip netns add` makes): sockets
/// it makes from then on belong to that namespace's stack. Needs
/// CAP_SYS_ADMIN; the test harness uses it to put listeners in a
/// namespace without a helper process.
pub fn enter_net_namespace(path: &std::path::Path) -> std::io::Result<()> {
    let f = std::fs::File::open(path)?;
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_accepted_takes_the_listeners_tcp_nodelay() {
        // smtpd sets it once on the listener (daemon::Options::tcp_nodelay)
        // and relies on this to answer pipelined commands without Nagle.
        let l = tcp_listener("127.0.0.1:0".parse().unwrap(), 4).unwrap();
        let plain = tcp_listener("127.0.0.1:0".parse().unwrap(), 4).unwrap();
        set_tcp_nodelay(&l).unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _d = std::net::TcpStream::connect(plain.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        let (b, _) = plain.accept().unwrap();
        assert!(a.nodelay().unwrap(), "inherited from the listener");
        assert!(!b.nodelay().unwrap(), "off unless the listener had it");
    }

    #[test]
    fn connect_reaches_a_listener_from_a_bound_address() {
        let l = tcp_listener("127.0.0.1:0".parse().unwrap(), 4).unwrap();
        let addr = l.local_addr().unwrap();
        let s = tcp_connect(addr, Some("127.0.0.1".parse().unwrap())).unwrap();
        let (peer, from) = l.accept().unwrap();
        drop(peer);
        assert_eq!(from.ip(), s.local_addr().unwrap().ip());
    }

    #[test]
    fn v4_and_v6_wildcards_coexist_on_one_port() {
        let v4 = tcp_listener("0.0.0.0:0".parse().unwrap(), 16).unwrap();
        let port = v4.local_addr().unwrap().port();
        match tcp_listener(format!("[::]:{port}").parse().unwrap(), 16) {
            Ok(v6) => assert_eq!(v6.local_addr().unwrap().port(), port),
            // No IPv6 on this machine at all: nothing to test.
            Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {}
            Err(e) => panic!("{e}"),
        }
    }
}
