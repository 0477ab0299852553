//! systemd's readiness protocol (sd_notify(3)): one datagram of
//! `NAME=value` lines to the socket named by `$NOTIFY_SOCKET`.
//!
//! It is written here rather than taken from a crate because it is one
//! `sendto`: a path, or an abstract name when it starts with `@`.

use std::os::unix::net::UnixDatagram;

/// The environment variable systemd sets for a `Type=notify` service.
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// Sends `state` (e.g. `READY=1`) to `$NOTIFY_SOCKET`; without the variable
/// (not started by systemd) there is no one to tell, and that is no error.
pub fn notify(state: &str) -> Result<(), String> {
    let Some(path) = std::env::var_os(NOTIFY_SOCKET_ENV) else {
        return Ok(());
    };
    send(&path.to_string_lossy(), state)
}

/// Sends `state` to the notification socket at `path`.
pub fn send(path: &str, state: &str) -> Result<(), String> {
    let sock = UnixDatagram::unbound().map_err(|e| format!("notify socket: {e}"))?;
    let sent = match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .map_err(|e| format!("notify socket @{name}: {e}"))?;
            sock.send_to_addr(state.as_bytes(), &addr)
        }
        None => sock.send_to(state.as_bytes(), path),
    };
    sent.map(drop)
        .map_err(|e| format!("notify socket {path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_reaches_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        send(path.to_str().unwrap(), "READY=1\nMAINPID=7").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nMAINPID=7");
    }

    #[test]
    fn ready_reaches_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("sluice-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        send(&format!("@{name}"), "READY=1").unwrap();
        let mut buf = [0u8; 16];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }

    #[test]
    fn a_missing_socket_is_an_error_naming_it() {
        let e = send("/nonexistent/notify", "READY=1").unwrap_err();
        assert!(e.contains("/nonexistent/notify"), "{e}");
    }
}
