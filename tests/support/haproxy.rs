//! Debian's HAProxy for tests: in front of smtpd (tests/proxy_protocol.rs)
//! and as an egress proxy for smtp(8) (tests/egress_proxy.rs).
//!
//! [`HaProxy::start`] runs `/usr/sbin/haproxy -db` on a configuration made
//! of the test's frontends and backends under a common `global` and
//! `defaults` (TCP mode, one log line per session on its stdout as soon as
//! the session is set up, kept in a file) and waits until the given ports
//! on 127.0.0.1 take connections. [`HaProxy::egress`] is the proxy layer
//! of Halon's architecture: it reads a PROXY protocol header, connects to
//! the destination the header names, from the source address it names.
//! A missing haproxy fails the test saying how to install it.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{free_port, wait_for, Kill};

/// Where Debian installs it.
pub const HAPROXY: &str = "/usr/sbin/haproxy";

/// A running haproxy, killed when dropped.
pub struct HaProxy {
    /// The process.
    pub child: Kill,
    /// Its session log (one line per session, `option tcplog`).
    pub log: PathBuf,
}

impl HaProxy {
    /// Runs haproxy with `sections` (frontends and backends) in `dir`,
    /// its files named after `name`, and waits for `ports` on 127.0.0.1.
    pub fn start(dir: &Path, name: &str, sections: &str, ports: &[u16]) -> HaProxy {
        assert!(
            Path::new(HAPROXY).exists(),
            "{HAPROXY} is missing: scripts/test installs haproxy (apt-get install haproxy)"
        );
        let cfg = format!(
            "global\n  maxconn 200\n  log stdout format raw local0\n\
             defaults\n  mode tcp\n  log global\n  option tcplog\n  option logasap\n\
             timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n{sections}"
        );
        let path = dir.join(format!("{name}.cfg"));
        std::fs::write(&path, cfg).unwrap();
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(HAPROXY)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("start haproxy");
        let proxy = HaProxy {
            child: Kill(child),
            log,
        };
        for p in ports {
            wait_for(20, &format!("haproxy {name} on port {p}"), || {
                TcpStream::connect(("127.0.0.1", *p))
                    .or_else(|_| TcpStream::connect(("::1", *p)))
                    .ok()
                    .map(drop)
            });
        }
        proxy
    }

    /// An egress proxy on 127.0.0.1 (its port is returned): `accept-proxy`
    /// on the way in, to the destination of the header (`server s
    /// 0.0.0.0`) from the source address of the header (`usesrc
    /// clientip`, which needs root). The frontend's own session checks
    /// while starting come without a header and are logged as errors.
    pub fn egress(dir: &Path, name: &str) -> (HaProxy, u16) {
        let port = free_port();
        (HaProxy::egress_on(dir, name, port), port)
    }

    /// [`HaProxy::egress`] on a given port (one that comes back).
    pub fn egress_on(dir: &Path, name: &str, port: u16) -> HaProxy {
        let sections = format!(
            "frontend egress\n  bind 127.0.0.1:{port} accept-proxy\n  default_backend out\n\
             backend out\n  source 0.0.0.0 usesrc clientip\n  server s 0.0.0.0\n"
        );
        HaProxy::start(dir, name, &sections, &[port])
    }

    /// [`HaProxy::egress`] on `[::1]`, connecting from the IPv6 source
    /// address the PROXY header names.
    pub fn egress_v6(dir: &Path, name: &str) -> (HaProxy, u16) {
        let port = free_port();
        let sections = format!(
            "frontend egress\n  bind ipv6@::1:{port} accept-proxy\n  default_backend out\n\
             backend out\n  source [::] usesrc clientip\n  server s [::]\n"
        );
        (HaProxy::start(dir, name, &sections, &[port]), port)
    }

    /// Sessions it forwarded to the backend so far (a log line naming the
    /// server; a connection without a header never gets that far).
    pub fn sessions(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" out/s "))
            .count()
    }

    /// Kills it at once (SIGKILL), as a proxy host that dies.
    pub fn kill(&mut self) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
    }
}
