//! The server skeleton: how every Sluice daemon starts, runs and ends.
//!
//! Like Postfix's single_server/event_server: read the configuration (with
//! the service's `-o` overrides), open the log, run the daemon's privileged
//! initialisation, drop to `mail_owner` (and chroot) when master.cf says so,
//! run its unprivileged initialisation, then loop: accept clients on the
//! listening sockets master passed, hand them to the daemon, report
//! available/busy to master, reload on SIGHUP, leave on SIGTERM, when master
//! dies, after `max_use` clients or after `max_idle` without any.
//!
//! A daemon is a [`Server`]: a few callbacks around its own state. Daemons
//! that serve an IPC protocol implement [`ipcserver::Handler`] instead and
//! get connection handling, handshake and framing from [`ipcserver::IpcServer`];
//! [`later`] keeps what such a handler answers later and when it is due.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod args;
pub mod ipcserver;
pub mod later;
pub mod log;
pub mod metrics_http;
pub mod skeleton;

pub use args::DaemonArgs;
pub use skeleton::{run, Conn, Context, Cx, Options, Server};
