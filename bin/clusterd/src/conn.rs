//! One instance's TLS connection: bytes in and out, frames decoded.
//!
//! Input is bounded: at most [`READ_LIMIT`] bytes of plaintext per read
//! and one frame (`cluster::proto::MAX_FRAME`) in the decoder; a frame that
//! does not decode ends the connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use cluster::proto::{encode, Decoder, ToCoord, ToInstance};
use daemon::Cx;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

const READ_LIMIT: usize = 256 * 1024;

/// What one readiness event brought.
pub struct Got {
    /// The TLS handshake just completed.
    pub established: bool,
    /// Messages decoded.
    pub msgs: Vec<ToCoord>,
    /// The peer closed.
    pub eof: bool,
}

/// An instance's connection.
pub struct Peer {
    stream: tls::Stream,
    addr: SocketAddr,
    dec: Decoder,
    /// The coordinator's number for it.
    pub id: u64,
    /// Handshake done and announced to the coordinator.
    pub joined: bool,
    /// Accepted at.
    pub since: Instant,
    names: Vec<String>,
}

impl Peer {
    /// Wraps an accepted socket and starts the server side of TLS.
    pub fn new(
        sock: TcpStream,
        addr: SocketAddr,
        id: u64,
        cfg: Arc<rustls::ServerConfig>,
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
            dec: Decoder::new(),
            id,
            joined: false,
            since: cx.now,
            names: Vec::new(),
        })
    }

    /// The peer for log lines: its certificate's name and address.
    pub fn who(&self) -> String {
        match self.names.first() {
            Some(n) => format!("{n}[{}]:{}", self.addr.ip(), self.addr.port()),
            None => format!("unknown[{}]:{}", self.addr.ip(), self.addr.port()),
        }
    }

    /// Handles readiness: reads, decodes, flushes.
    pub fn ready(&mut self, readable: bool, writable: bool, closed: bool) -> Result<Got, String> {
        let was = self.stream.is_handshaking();
        let mut got = Got {
            established: false,
            msgs: Vec::new(),
            eof: false,
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
                self.dec.push(&buf);
                while let Some(m) = self.dec.decode::<ToCoord>().map_err(|e| e.to_string())? {
                    got.msgs.push(m);
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
        if was && !self.stream.is_handshaking() {
            self.names = tls::peer_names(&self.stream.peer_certificates());
            got.established = true;
        }
        if writable || self.stream.wants_write() {
            self.flush()?;
        }
        Ok(got)
    }

    /// Queues a message.
    pub fn send(&mut self, msg: &ToInstance) {
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
