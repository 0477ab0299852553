//! One mover's TLS connection: bytes in and out, the hello, offers decoded.
//!
//! Input is bounded: at most [`READ_LIMIT`] bytes of plaintext per read
//! and one frame of the daemon's limit in the decoder.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use daemon::Cx;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use transfer::proto::{encode, Decoder, Offer, ToMover, ToReceiver, VERSION};

const READ_LIMIT: usize = 1 << 20;

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
    stream: tls::Stream,
    addr: SocketAddr,
    dec: Decoder,
    /// The mover's instance name, once it said hello.
    pub name: Option<String>,
    /// Accepted at.
    pub since: Instant,
    cert_names: Vec<String>,
    my_name: String,
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
        let mut stream = tls::Stream::plain(sock);
        stream.start_server_tls(cfg).map_err(|e| e.to_string())?;
        cx.registry
            .register(
                stream.socket(),
                token,
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| e.to_string())?;
        Ok(Peer {
            stream,
            addr,
            dec: Decoder::new(max_frame),
            name: None,
            since: cx.now,
            cert_names: Vec::new(),
            my_name,
        })
    }

    /// The peer for log lines: its certificate's name and address.
    pub fn who(&self) -> String {
        match self.cert_names.first() {
            Some(n) => format!("{n}[{}]:{}", self.addr.ip(), self.addr.port()),
            None => format!("unknown[{}]:{}", self.addr.ip(), self.addr.port()),
        }
    }

    /// Handles readiness: reads, decodes, flushes.
    pub fn ready(&mut self, readable: bool, writable: bool, closed: bool) -> Result<Got, String> {
        let was = self.stream.is_handshaking();
        let mut got = Got {
            offers: Vec::new(),
            eof: false,
            bad: None,
        };
        if readable || closed {
            loop {
                let mut buf = Vec::new();
                let st = self
                    .stream
                    .read_event(&mut buf, READ_LIMIT, closed)
                    .map_err(|e| {
                        if was {
                            format!("TLS handshake failed: {e}")
                        } else {
                            e.to_string()
                        }
                    })?;
                if was && !self.stream.is_handshaking() && self.cert_names.is_empty() {
                    self.cert_names = tls::peer_names(&self.stream.peer_certificates());
                }
                self.dec.push(&buf);
                loop {
                    match self.dec.decode::<ToReceiver>() {
                        Ok(Some(ToReceiver::Hello { version, name })) => {
                            if version != VERSION {
                                got.bad = Some(format!(
                                    "protocol version {version}, this receiver speaks {VERSION}"
                                ));
                                return Ok(got);
                            }
                            if name.is_empty() || name.contains([' ', '/', '\n']) {
                                got.bad =
                                    Some(format!("instance name {name:?} is not a host name"));
                                return Ok(got);
                            }
                            self.send(&ToMover::Hello {
                                version: VERSION,
                                name: self.my_name.clone(),
                            });
                            daemon::msg_info!("connect from {} (instance {name})", self.who());
                            self.name = Some(name);
                        }
                        Ok(Some(ToReceiver::Offer(o))) if self.name.is_some() => {
                            got.offers.push(*o)
                        }
                        Ok(Some(ToReceiver::Offer(_))) => {
                            got.bad = Some("an offer before hello".into());
                            return Ok(got);
                        }
                        Ok(None) => break,
                        Err(e) => {
                            got.bad = Some(e.to_string());
                            return Ok(got);
                        }
                    }
                }
                if st.eof {
                    got.eof = true;
                    break;
                }
                if st.drained || st.bytes == 0 {
                    break;
                }
            }
        }
        if writable || self.stream.wants_write() {
            self.flush()?;
        }
        Ok(got)
    }

    /// Queues a message.
    pub fn send(&mut self, msg: &ToMover) {
        let _ = self.stream.write(&encode(msg));
    }

    /// Writes what the socket takes; the rest goes when it is writable.
    pub fn flush(&mut self) -> Result<(), String> {
        self.stream.flush().map(drop).map_err(|e| e.to_string())
    }

    /// Closes and deregisters.
    pub fn close(&mut self, registry: &Registry) {
        self.stream.close();
        let _ = registry.deregister(self.stream.socket());
    }
}
