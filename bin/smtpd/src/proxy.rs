//! Connections waiting for their PROXY protocol header
//! (`smtpd_upstream_proxy_protocol = haproxy`).
//!
//! A connection from the load balancer is read, not greeted, until its
//! header is complete (`smtp_proto::proxy`); then the session starts as
//! if the client named in it had connected: its address is the one logged,
//! counted by anvil, checked against `mynetworks` and written in Received:.
//! Reads are bounded by the header's own bounds. A connection whose header
//! is malformed, missing (SMTP instead) or not complete within
//! `smtpd_upstream_proxy_timeout` is closed with a warning, as Postfix's
//! `haproxy read:` ones; nothing is answered to it.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use daemon::{msg_warn, Cx};
use mio::net::TcpStream;
use mio::{Interest, Token};
use smtp_proto::proxy::{parse, Header, Parsed, V1_MAX, V2_MAX_BODY};

/// The most a header can take: beyond it [`parse`] has decided.
const HEADER_MAX: usize = if V1_MAX > 16 + V2_MAX_BODY {
    V1_MAX
} else {
    16 + V2_MAX_BODY
};

struct Waiting {
    stream: TcpStream,
    /// The balancer's address (the TCP peer).
    peer: SocketAddr,
    buf: Vec<u8>,
    deadline: Instant,
}

/// A connection whose header is complete: the client it names (or the
/// TCP peer for LOCAL/UNKNOWN) and what else the header brought.
pub struct Admitted {
    /// The socket, no longer registered.
    pub stream: TcpStream,
    /// The client's address.
    pub client: SocketAddr,
    /// The rest, for the session.
    pub via: Via,
}

/// What a PROXY header leaves a session besides its client's address.
#[derive(Debug, Default)]
pub struct Via {
    /// Input that came after the header, before the greeting.
    pub early: Vec<u8>,
    /// The address the client connected to (the balancer's), for Dovecot's `lip=`.
    pub server: Option<std::net::IpAddr>,
}

/// The connections waiting for their header.
#[derive(Default)]
pub struct ProxyWait(BTreeMap<Token, Waiting>);

impl ProxyWait {
    /// Starts reading the header of a new connection.
    pub fn add(
        &mut self,
        cx: &mut Cx<'_>,
        token: Token,
        mut stream: TcpStream,
        peer: SocketAddr,
        timeout: Duration,
    ) {
        if let Err(e) = cx.registry.register(&mut stream, token, Interest::READABLE) {
            msg_warn!("register client: {e}");
            return;
        }
        let w = Waiting {
            stream,
            peer,
            buf: Vec::new(),
            deadline: cx.now + timeout,
        };
        self.0.insert(token, w);
    }

    /// Whether `token` is a connection waiting for its header.
    pub fn contains(&self, token: Token) -> bool {
        self.0.contains_key(&token)
    }

    /// Connections waiting.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Reads what came; the connection once its header is complete.
    pub fn ready(&mut self, cx: &mut Cx<'_>, token: Token) -> Option<Admitted> {
        let w = self.0.get_mut(&token)?;
        let mut eof = false;
        let mut failed = None;
        while w.buf.len() < HEADER_MAX {
            let mut chunk = [0u8; HEADER_MAX];
            let room = HEADER_MAX - w.buf.len();
            match w.stream.read(&mut chunk[..room]) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => w.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            }
        }
        let why = match (parse(&w.buf), failed) {
            (_, Some(e)) => e,
            (Parsed::Done(header, used), None) => {
                let mut w = self.0.remove(&token)?;
                let _ = cx.registry.deregister(&mut w.stream);
                let (client, server) = match header {
                    Header::Proxied {
                        source,
                        destination,
                    } => (source, Some(destination.ip())),
                    Header::Local => (w.peer, None),
                };
                let early = w.buf.split_off(used);
                return Some(Admitted {
                    stream: w.stream,
                    client,
                    via: Via { early, server },
                });
            }
            (Parsed::Bad(e), None) => e.to_string(),
            (Parsed::Incomplete, None) if eof => {
                "lost connection while reading the PROXY header".into()
            }
            (Parsed::Incomplete, None) => return None,
        };
        self.drop_conn(cx, token, &why);
        None
    }

    /// Drops the connections whose header did not come in time.
    pub fn expire(&mut self, cx: &mut Cx<'_>) {
        let late: Vec<Token> = self
            .0
            .iter()
            .filter(|(_, w)| w.deadline <= cx.now)
            .map(|(t, _)| *t)
            .collect();
        for t in late {
            self.drop_conn(cx, t, "time limit exceeded (smtpd_upstream_proxy_timeout)");
        }
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.0.values().map(|w| w.deadline).min()
    }

    /// Drops every waiting connection (shutdown): nothing was owed to them.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    fn drop_conn(&mut self, cx: &mut Cx<'_>, token: Token, why: &str) {
        if let Some(mut w) = self.0.remove(&token) {
            let _ = cx.registry.deregister(&mut w.stream);
            msg_warn!(
                "haproxy read: {why}: connection from [{}] dropped",
                w.peer.ip()
            );
        }
    }
}
