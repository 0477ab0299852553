//! A non-blocking stream that is plaintext until it is switched to TLS:
//! over TCP, or over a Unix-domain socket (LMTP to a local server, which
//! stays plaintext).

use std::io::{self, Read, Write};
use std::sync::Arc;

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};
use rustls::{ClientConnection, Connection, ServerConnection};

use crate::TlsInfo;

/// Bytes offered to one plaintext read.
const PLAIN_CHUNK: usize = 16 * 1024;

/// What a read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadStatus {
    /// Plaintext bytes appended to the caller's buffer.
    pub bytes: usize,
    /// The peer closed the connection (or its TLS session).
    pub eof: bool,
    /// The socket is known to be empty (a read returned EAGAIN, or less
    /// than it could take): new input raises a new event.
    pub drained: bool,
}

/// The socket under a [`Stream`].
#[derive(Debug)]
pub enum Sock {
    /// TCP.
    Tcp(TcpStream),
    /// A Unix-domain stream socket.
    Unix(UnixStream),
}

impl Sock {
    /// The TCP socket, if it is one.
    pub fn as_tcp(&mut self) -> Option<&mut TcpStream> {
        match self {
            Sock::Tcp(s) => Some(s),
            Sock::Unix(_) => None,
        }
    }

    /// The pending socket error (SO_ERROR), as after a non-blocking connect.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        match self {
            Sock::Tcp(s) => s.take_error(),
            Sock::Unix(s) => s.take_error(),
        }
    }

    /// `Ok` once a non-blocking connect has completed (the peer's address
    /// is known), `NotConnected` while it is in progress.
    pub fn connected(&self) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.peer_addr().map(drop),
            Sock::Unix(s) => s.peer_addr().map(drop),
        }
    }

    fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.shutdown(how),
            Sock::Unix(s) => s.shutdown(how),
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.flush(),
            Sock::Unix(s) => s.flush(),
        }
    }
}

impl Source for Sock {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.register(r, t, i),
            Sock::Unix(s) => s.register(r, t, i),
        }
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.reregister(r, t, i),
            Sock::Unix(s) => s.reregister(r, t, i),
        }
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.deregister(r),
            Sock::Unix(s) => s.deregister(r),
        }
    }
}

/// A connection, plaintext or TLS.
#[derive(Debug)]
pub struct Stream {
    sock: Sock,
    tls: Option<Connection>,
    out: Vec<u8>,
    out_pos: usize,
}

impl Stream {
    /// Wraps a connected socket in plaintext mode.
    pub fn plain(sock: TcpStream) -> Self {
        Self::over(Sock::Tcp(sock))
    }

    /// Wraps a connected (or connecting) socket of either kind, plaintext.
    pub fn over(sock: Sock) -> Self {
        Stream {
            sock,
            tls: None,
            out: Vec::new(),
            out_pos: 0,
        }
    }

    /// The socket, to register with mio.
    pub fn socket(&mut self) -> &mut Sock {
        &mut self.sock
    }

    /// Starts the server side of a TLS handshake (STARTTLS or implicit TLS).
    ///
    /// Plaintext output still queued is written first by the caller's
    /// flush; anything received in plaintext after this point is the
    /// caller's to discard (it must not be read as part of the TLS session).
    pub fn start_server_tls(
        &mut self,
        cfg: Arc<rustls::ServerConfig>,
    ) -> Result<(), rustls::Error> {
        self.tls = Some(Connection::Server(ServerConnection::new(cfg)?));
        self.unbounded();
        Ok(())
    }

    /// Starts the client side of a TLS handshake.
    pub fn start_client_tls(
        &mut self,
        cfg: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
    ) -> Result<(), rustls::Error> {
        self.tls = Some(Connection::Client(ClientConnection::new(cfg, name)?));
        self.unbounded();
        Ok(())
    }

    /// rustls keeps at most 64 KiB of unsent TLS by default and takes only
    /// part of a larger write (a 64 KiB BDAT chunk with its command), so
    /// `write` would fail halfway through a piece of content. Callers bound
    /// what they queue themselves (they wait for [`Stream::wants_write`] to
    /// clear before queueing more), so rustls's own limit is lifted.
    fn unbounded(&mut self) {
        if let Some(c) = &mut self.tls {
            c.set_buffer_limit(None);
        }
    }

    /// Whether TLS is on (handshake possibly still running).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Whether a TLS handshake is still in progress.
    pub fn is_handshaking(&self) -> bool {
        self.tls.as_ref().is_some_and(|c| c.is_handshaking())
    }

    /// The negotiated version and cipher, once the handshake is done.
    pub fn tls_info(&self) -> Option<TlsInfo> {
        let c = self.tls.as_ref()?;
        if c.is_handshaking() {
            return None;
        }
        Some(TlsInfo {
            version: c
                .protocol_version()
                .and_then(|v| v.as_str())
                .unwrap_or("TLS")
                .replace("TLSv1_", "TLSv1."),
            cipher: c
                .negotiated_cipher_suite()
                .map(|s| s.suite().as_str().unwrap_or("unknown").to_string())
                .unwrap_or_default(),
        })
    }

    /// The certificate chain the peer presented (end entity first); empty
    /// before the handshake or without one.
    pub fn peer_certificates(&self) -> Vec<rustls::pki_types::CertificateDer<'static>> {
        self.tls
            .as_ref()
            .and_then(|c| c.peer_certificates())
            .map(|c| c.iter().map(|d| d.clone().into_owned()).collect())
            .unwrap_or_default()
    }

    /// Reads what is available, appending plaintext to `buf` while it is
    /// shorter than `limit`. Stops early at the limit: the caller consumes
    /// and calls again (mio is edge-triggered, so the caller must keep
    /// reading until `bytes == 0` or it has room again).
    pub fn read(&mut self, buf: &mut Vec<u8>, limit: usize) -> io::Result<ReadStatus> {
        self.read_event(buf, limit, true)
    }

    /// As [`Stream::read`] for one edge-triggered readable event, saving
    /// the read that would fail with EAGAIN: in plaintext, a read that
    /// returns less than it asked for has emptied the socket, and anything
    /// arriving later raises a new event. `closed` is the event's
    /// read-closed flag: the end of file came with the data and nothing
    /// will announce it again, so then it reads to the end.
    pub fn read_event(
        &mut self,
        buf: &mut Vec<u8>,
        limit: usize,
        closed: bool,
    ) -> io::Result<ReadStatus> {
        let start = buf.len();
        let mut eof = false;
        let mut drained = false;
        match &mut self.tls {
            None => {
                // Plaintext goes straight into the caller's buffer: no
                // bytes copied on their way in but the kernel's.
                while buf.len() < limit {
                    let at = buf.len();
                    let want = PLAIN_CHUNK.min(limit - at);
                    buf.resize(at + want, 0);
                    let got = self.sock.read(&mut buf[at..]);
                    buf.truncate(at + *got.as_ref().unwrap_or(&0));
                    match got {
                        Ok(0) => {
                            eof = true;
                            break;
                        }
                        Ok(n) => {
                            if n < want && !closed {
                                drained = true;
                                break;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            drained = true;
                            break;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e),
                    }
                }
            }
            Some(conn) => {
                loop {
                    // Drain decrypted plaintext first, within the limit.
                    let mut chunk = [0u8; 16 * 1024];
                    while buf.len() < limit {
                        let want = chunk.len().min(limit - buf.len());
                        match conn.reader().read(&mut chunk[..want]) {
                            Ok(0) => {
                                eof = true;
                                break;
                            }
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) => return Err(e),
                        }
                    }
                    if eof || buf.len() >= limit || !conn.wants_read() {
                        break;
                    }
                    match conn.read_tls(&mut self.sock) {
                        Ok(0) => {
                            eof = true;
                            break;
                        }
                        Ok(_) => {
                            if let Err(e) = conn.process_new_packets() {
                                // Send the alert before giving up.
                                let _ = conn.write_tls(&mut self.sock);
                                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            drained = true;
                            break;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e),
                    }
                }
                // Handshake messages may need sending.
                self.flush()?;
            }
        }
        Ok(ReadStatus {
            bytes: buf.len() - start,
            eof,
            drained,
        })
    }

    /// Queues bytes to send; call [`Stream::flush`] to push them out.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.tls {
            None => self.out.extend_from_slice(data),
            Some(conn) => conn.writer().write_all(data)?,
        }
        Ok(())
    }

    /// As [`Stream::write`], taking the bytes: in plaintext, with nothing
    /// queued before them, the buffer itself is queued, not copied.
    pub fn write_owned(&mut self, data: Vec<u8>) -> io::Result<()> {
        if self.tls.is_none() && self.out_pos == self.out.len() {
            self.out = data;
            self.out_pos = 0;
            return Ok(());
        }
        self.write(&data)
    }

    /// Writes as much queued output as the socket takes. `Ok(true)` when
    /// everything is out.
    pub fn flush(&mut self) -> io::Result<bool> {
        while self.out_pos < self.out.len() {
            match self.sock.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        if let Some(conn) = &mut self.tls {
            while conn.wants_write() {
                match conn.write_tls(&mut self.sock) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(true)
    }

    /// Bytes queued and not yet on the wire (plaintext mode only; TLS
    /// output is counted by rustls).
    pub fn pending_output(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// Whether output is waiting for the socket to become writable.
    pub fn wants_write(&self) -> bool {
        self.out_pos < self.out.len() || self.tls.as_ref().is_some_and(|c| c.wants_write())
    }

    /// Sends a TLS close_notify (if TLS is on) and flushes what it can.
    pub fn close(&mut self) {
        if let Some(conn) = &mut self.tls {
            conn.send_close_notify();
        }
        let _ = self.flush();
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
    }
}
