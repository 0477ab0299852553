//! One mover's connection: `wire`'s mutual-TLS peer, the hello, offers.
//!
//! Frames over the daemon's limit end the connection, and so does a mover
//! that leaves [`OUT_LIMIT`] bytes of answers unread.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use daemon::Cx;
use mio::net::TcpStream;
use mio::{Registry, Token};
use transfer::proto::{Offer, ToMover, ToReceiver, VERSION};

/// Answers a mover may leave unread: tens of thousands of acceptances,
/// far beyond its window.
const OUT_LIMIT: usize = 4 << 20;

/// What one readiness event brought.
pub struct Got {
    /// Offers decoded.
    pub offers: Vec<Offer>,
    /// The peer closed.
    pub eof: bool,
    /// The peer broke the protocol: say why and close.
    pub bad: Option<String>,
}

/// A mover's connection.
pub struct Peer {
    wire: wire::Peer,
    /// The mover's instance name, once it said hello.
    pub name: Option<String>,
    my_name: String,
    /// Why the mover must go (it stopped reading), for the next flush.
    stuck: Option<String>,
}

impl Peer {
    /// Wraps an accepted socket and starts the server side of TLS.
    pub fn new(
        sock: TcpStream,
        addr: SocketAddr,
        cfg: Arc<rustls::ServerConfig>,
        max_frame: usize,
        my_name: String,
        cx: &mut Cx<'_>,
        token: Token,
    ) -> Result<Peer, String> {
        let wire = wire::Peer::accept(
            sock,
            addr,
            cfg,
            max_frame,
            OUT_LIMIT,
            cx.registry,
            token,
            cx.now,
        )?;
        Ok(Peer {
            wire,
            name: None,
            my_name,
            stuck: None,
        })
    }

    /// The peer for log lines: its certificate's name and address.
    pub fn who(&self) -> String {
        self.wire.who()
    }

    /// Accepted at.
    pub fn since(&self) -> Instant {
        self.wire.since
    }

    /// Handles readiness: reads, the hello, offers; flushes.
    pub fn ready(&mut self, readable: bool, writable: bool, closed: bool) -> Result<Got, String> {
        let got = self.wire.ready::<ToReceiver>(readable, writable, closed)?;
        let mut out = Got {
            offers: Vec::new(),
            eof: got.eof,
            bad: None,
        };
        for msg in got.msgs {
            match msg {
                ToReceiver::Hello { version, name } => {
                    if version != VERSION {
                        out.bad = Some(format!(
                            "protocol version {version}, this receiver speaks {VERSION}"
                        ));
                        return Ok(out);
                    }
                    if name.is_empty() || name.contains([' ', '/', '\n']) {
                        out.bad = Some(format!("instance name {name:?} is not a host name"));
                        return Ok(out);
                    }
                    self.send(&ToMover::Hello {
                        version: VERSION,
                        name: self.my_name.clone(),
                    });
                    daemon::msg_info!("connect from {} (instance {name})", self.who());
                    self.name = Some(name);
                }
                ToReceiver::Offer(o) if self.name.is_some() => out.offers.push(*o),
                ToReceiver::Offer(_) => {
                    out.bad = Some("an offer before hello".into());
                    return Ok(out);
                }
            }
        }
        out.bad = got.bad;
        Ok(out)
    }

    /// Queues a message.
    pub fn send(&mut self, msg: &ToMover) {
        if let Err(e) = self.wire.send(msg) {
            self.stuck.get_or_insert(e);
        }
    }

    /// Writes what the socket takes; the rest goes when it is writable. An
    /// error drops the mover.
    pub fn flush(&mut self) -> Result<(), String> {
        if let Some(e) = self.stuck.take() {
            return Err(e);
        }
        self.wire.flush()
    }

    /// Closes and deregisters.
    pub fn close(&mut self, registry: &Registry) {
        self.wire.close(registry);
    }
}
