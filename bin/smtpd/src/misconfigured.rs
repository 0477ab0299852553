//! smtpd with a configuration it cannot use: each client is told so.
//!
//! A restriction list or an access table that does not parse is found when
//! the sessions' settings are built, a certificate that does not load
//! before privileges are dropped. Exiting then (as smtpd once did) makes
//! master start another process for the next client, which exits too, and
//! no client ever gets a reply. As Postfix's smtpd, this process stays up
//! and answers every client `451 4.3.5 Server configuration error`, a
//! temporary refusal: the client keeps its mail and tries again after the
//! postmaster has fixed main.cf (a reload starts a fresh process).

use std::io::Write;
use std::time::Instant;

use daemon::{msg_error, msg_info, Conn, Cx, Server};
use mio::Token;

use crate::server::SmtpServer;

/// The greeting of a misconfigured server.
pub const REPLY: &[u8] = b"451 4.3.5 Server configuration error\r\n";

/// The smtpd process: serving, or refusing because main.cf is unusable.
pub enum Smtpd {
    /// The settings were built.
    Serving(Box<SmtpServer>),
    /// The settings failed with this error.
    Misconfigured(String),
}

impl Smtpd {
    /// The server, or a misconfigured one that says why in the log.
    pub fn new(built: Result<SmtpServer, String>) -> Smtpd {
        match built {
            Ok(s) => Smtpd::Serving(Box::new(s)),
            Err(e) => {
                msg_error!("{e}; answering every client 451 4.3.5 until it is fixed");
                Smtpd::Misconfigured(e)
            }
        }
    }
}

impl Server for Smtpd {
    fn start(&mut self, cx: &mut Cx<'_>) {
        if let Smtpd::Serving(s) = self {
            Server::start(s.as_mut(), cx)
        }
    }

    fn accept(&mut self, cx: &mut Cx<'_>, conn: Conn) {
        match self {
            Smtpd::Serving(s) => Server::accept(s.as_mut(), cx, conn),
            Smtpd::Misconfigured(e) => {
                let Conn::Tcp(mut stream, peer) = conn else {
                    return;
                };
                msg_info!(
                    "NOQUEUE: reject: CONNECT from unknown[{}]: 451 4.3.5 Server configuration error ({e})",
                    peer.ip()
                );
                // A new socket's send buffer is empty: this one short write
                // cannot block. The client gets the reply, then end of file.
                let _ = stream.write_all(REPLY);
                let _ = stream.shutdown(std::net::Shutdown::Write);
            }
        }
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, readable: bool, writable: bool) {
        if let Smtpd::Serving(s) = self {
            Server::ready(s.as_mut(), cx, token, readable, writable)
        }
    }

    fn timeout(&mut self, cx: &mut Cx<'_>) {
        if let Smtpd::Serving(s) = self {
            Server::timeout(s.as_mut(), cx)
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        match self {
            Smtpd::Serving(s) => Server::next_deadline(s.as_ref()),
            Smtpd::Misconfigured(_) => None,
        }
    }

    fn clients(&self) -> usize {
        match self {
            Smtpd::Serving(s) => Server::clients(s.as_ref()),
            Smtpd::Misconfigured(_) => 0,
        }
    }

    fn reload(&mut self, cx: &mut Cx<'_>, config: &config::Config) -> bool {
        match self {
            Smtpd::Serving(s) => Server::reload(s.as_mut(), cx, config),
            // Retire: the next process builds its settings from the new main.cf.
            Smtpd::Misconfigured(_) => false,
        }
    }

    fn shutdown(&mut self) {
        if let Smtpd::Serving(s) = self {
            Server::shutdown(s.as_mut())
        }
    }
}
