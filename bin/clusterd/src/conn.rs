//! One instance's TLS connection: bytes in and out, frames decoded.
//!
//! Input is bounded: at most [`READ_LIMIT`] bytes of plaintext per read
//! and one frame (`cluster::proto::MAX_FRAME`) in the decoder; a frame that
//! does not decode ends the connection. Output is bounded too: frames wait
//! in the peer's queue and go to TLS a chunk at a time as the socket takes
//! them (rustls refuses more than 64 KiB unsent, and a refused write would
//! lose a frame); a peer that stops reading until [`OUT_LIMIT`] bytes wait
//! is an error, and clusterd drops it rather than grow without bound.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use cluster::proto::{encode, Decoder, ToCoord, ToInstance};
use daemon::Cx;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

const READ_LIMIT: usize = 256 * 1024;

/// Bytes of frames a peer may leave unread before it is dropped: a few
/// full re-syncs of a thousand keys, far more than a peer that reads ever
/// has waiting.
pub const OUT_LIMIT: usize = 4 << 20;

/// Plaintext handed to TLS at once: well under rustls's 64 KiB of unsent
/// records, so that a write after a complete flush always fits.
const CHUNK: usize = 16 * 1024;

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
    /// Frames not yet handed to TLS, from `out_pos`.
    out: Vec<u8>,
    out_pos: usize,
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
            out: Vec::new(),
            out_pos: 0,
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
        if writable || self.stream.wants_write() || self.queued() > 0 {
            self.flush()?;
        }
        Ok(got)
    }

    /// Queues a message; an error when the peer has left [`OUT_LIMIT`]
    /// bytes unread (the caller drops it).
    pub fn send(&mut self, msg: &ToInstance) -> Result<(), String> {
        self.out.extend_from_slice(&encode(msg));
        let queued = self.queued();
        if queued > OUT_LIMIT {
            return Err(format!(
                "{queued} bytes queued: the peer stopped reading (limit {OUT_LIMIT})"
            ));
        }
        Ok(())
    }

    /// Bytes queued and not yet handed to TLS.
    pub fn queued(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// Writes what the socket takes; the rest goes when it is writable.
    pub fn flush(&mut self) -> Result<(), String> {
        loop {
            let all_out = self.stream.flush().map_err(|e| e.to_string())?;
            if !all_out || self.out_pos == self.out.len() {
                break;
            }
            let end = self.out.len().min(self.out_pos + CHUNK);
            self.stream
                .write(&self.out[self.out_pos..end])
                .map_err(|e| e.to_string())?;
            self.out_pos = end;
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        } else if self.out_pos > OUT_LIMIT / 2 {
            self.out.drain(..self.out_pos);
            self.out_pos = 0;
        }
        Ok(())
    }

    /// Closes and deregisters.
    pub fn close(&mut self, registry: &Registry) {
        self.stream.close();
        let _ = registry.deregister(self.stream.socket());
    }
}
