//! One accepted connection of another instance: mutual TLS, bytes in and
//! out, frames decoded.
//!
//! Input is bounded: at most [`READ_LIMIT`] bytes of plaintext per read and
//! one frame of the owner's limit in the decoder. Output is bounded too:
//! frames wait in the peer's queue and go to TLS a chunk at a time as the
//! socket takes them (rustls refuses more than 64 KiB unsent, and a refused
//! write would lose a frame); a peer that stops reading until the owner's
//! limit of bytes waits is an error, and the owner drops it rather than
//! grow without bound.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::frame::{encode, Decoder};

/// Plaintext taken from TLS per read.
pub const READ_LIMIT: usize = 256 * 1024;

/// Plaintext handed to TLS at once: well under rustls's 64 KiB of unsent
/// records, so that a write after a complete flush always fits.
const CHUNK: usize = 16 * 1024;

/// What one readiness event brought.
#[derive(Debug)]
pub struct Got<T> {
    /// The TLS handshake just completed.
    pub established: bool,
    /// Messages decoded, in order.
    pub msgs: Vec<T>,
    /// The peer closed.
    pub eof: bool,
    /// A frame that was not a message (or over the limit): the peer broke
    /// the protocol; the messages before it are in `msgs`.
    pub bad: Option<String>,
}

/// An accepted connection.
pub struct Peer {
    stream: tls::Stream,
    addr: SocketAddr,
    dec: Decoder,
    /// Accepted at.
    pub since: Instant,
    names: Vec<String>,
    /// Frames not yet handed to TLS, from `out_pos`.
    out: Vec<u8>,
    out_pos: usize,
    out_limit: usize,
}

impl Peer {
    /// Wraps an accepted socket, starts the server side of TLS and
    /// registers it; frames over `max_frame` are refused, and more than
    /// `out_limit` bytes left unread by the peer end it.
    #[allow(clippy::too_many_arguments)]
    pub fn accept(
        sock: TcpStream,
        addr: SocketAddr,
        cfg: Arc<rustls::ServerConfig>,
        max_frame: usize,
        out_limit: usize,
        registry: &Registry,
        token: Token,
        now: Instant,
    ) -> Result<Peer, String> {
        let mut stream = tls::Stream::plain(sock);
        stream.start_server_tls(cfg).map_err(|e| e.to_string())?;
        registry
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
            since: now,
            names: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            out_limit,
        })
    }

    /// The peer for log lines: its certificate's name and address.
    pub fn who(&self) -> String {
        match self.names.first() {
            Some(n) => format!("{n}[{}]:{}", self.addr.ip(), self.addr.port()),
            None => format!("unknown[{}]:{}", self.addr.ip(), self.addr.port()),
        }
    }

    /// Handles readiness: reads, decodes, flushes. An error is the
    /// transport's (TLS, the socket): the owner drops the peer.
    pub fn ready<T: DeserializeOwned>(
        &mut self,
        readable: bool,
        writable: bool,
        closed: bool,
    ) -> Result<Got<T>, String> {
        let was = self.stream.is_handshaking();
        let mut got = Got {
            established: false,
            msgs: Vec::new(),
            eof: false,
            bad: None,
        };
        if readable || closed {
            'read: loop {
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
                loop {
                    match self.dec.decode::<T>() {
                        Ok(Some(m)) => got.msgs.push(m),
                        Ok(None) => break,
                        Err(e) => {
                            got.bad = Some(e.to_string());
                            break 'read;
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
        if was && !self.stream.is_handshaking() {
            self.names = tls::peer_names(&self.stream.peer_certificates());
            got.established = true;
        }
        if writable || self.stream.wants_write() || self.queued() > 0 {
            self.flush()?;
        }
        Ok(got)
    }

    /// Queues a message; an error when the peer has left more than the
    /// limit of bytes unread (the owner drops it).
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), String> {
        self.out.extend_from_slice(&encode(msg));
        let queued = self.queued();
        if queued > self.out_limit {
            return Err(format!(
                "{queued} bytes queued: the peer stopped reading (limit {})",
                self.out_limit
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
        } else if self.out_pos > self.out_limit / 2 {
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
