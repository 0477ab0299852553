//! A client connection that batches its answers.
//!
//! Like `ipc::Endpoint`, but a reply is only queued: the shell writes once
//! per batch of requests read, so a client that pipelines a thousand
//! resolve requests costs a few system calls, not a thousand (this is most
//! of the router's table-only throughput). The output bound is the same as
//! Endpoint's: a client that stops reading its answers is dropped.

use std::io::{ErrorKind, Read, Write};

use ipc::endpoint::MAX_OUTGOING;
use ipc::{FrameBuf, Hello, HelloReply, IpcError, Protocol, Tagged};
use mio::net::UnixStream;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// One client of the router.
#[derive(Debug)]
pub struct Conn {
    stream: UnixStream,
    frames: FrameBuf,
    out: Vec<u8>,
    sent: usize,
    greeted: bool,
    stalled: bool,
    eof: bool,
}

impl Conn {
    /// Wraps an accepted stream.
    pub fn new(stream: UnixStream) -> Conn {
        Conn {
            stream,
            frames: FrameBuf::new(),
            out: Vec::new(),
            sent: 0,
            greeted: false,
            stalled: false,
            eof: false,
        }
    }

    /// The stream, for registration.
    pub fn stream(&mut self) -> &mut UnixStream {
        &mut self.stream
    }

    /// The peer's credentials.
    pub fn peer(&self) -> Result<sys::creds::PeerCred, sys::SysError> {
        sys::creds::peer_cred(&self.stream)
    }

    /// Reads what is available; false once the peer has closed.
    pub fn read_ready(&mut self) -> Result<bool, IpcError> {
        let mut buf = [0u8; 64 * 1024];
        self.stalled = false;
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.frames.push(&buf[..n]);
                    // Backpressure: handle what we have before reading more.
                    // No new edge will come for what is left in the socket,
                    // so `recv` reads on once this drains.
                    if self.frames.pending() > ipc::MAX_FRAME as usize {
                        self.stalled = true;
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(IpcError::Io(e)),
            }
        }
    }

    /// The handshake: `Ok(true)` once the client's hello was accepted.
    pub fn accept_hello<P: Protocol>(&mut self) -> Result<bool, IpcError> {
        if self.greeted {
            return Ok(true);
        }
        let Some(hello) = self.recv::<Hello>()? else {
            return Ok(false);
        };
        let answer = hello.answer::<P>();
        self.queue(&answer)?;
        self.write_ready()?;
        match answer {
            HelloReply::Accepted => {
                self.greeted = true;
                Ok(true)
            }
            HelloReply::Refused { .. } => Err(IpcError::Refused {
                wanted: format!("{} {}", P::NAME, P::VERSION),
                got: format!("{} {}", hello.protocol, hello.version),
            }),
        }
    }

    /// The next whole message, if one has arrived; reads on from the socket
    /// after a pause at the buffering bound.
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, IpcError> {
        loop {
            if let Some(p) = self.frames.next_frame()? {
                return ipc::decode(&p).map(Some);
            }
            if !self.stalled || self.eof {
                return Ok(None);
            }
            self.read_ready()?;
        }
    }

    /// Whether the peer has closed its side.
    pub fn is_eof(&self) -> bool {
        self.eof
    }

    fn queue<T: Serialize>(&mut self, msg: &T) -> Result<(), IpcError> {
        if self.out.len() - self.sent > MAX_OUTGOING {
            return Err(IpcError::Backlog);
        }
        self.out.extend_from_slice(&ipc::encode(msg));
        Ok(())
    }

    /// Queues the answer to request `id`; [`Conn::write_ready`] sends it.
    pub fn reply<T: Serialize>(&mut self, id: u64, body: &T) -> Result<(), IpcError> {
        self.queue(&Tagged { id, body })
    }

    /// Writes as much queued output as the socket takes.
    pub fn write_ready(&mut self) -> Result<(), IpcError> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err(IpcError::Closed),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(IpcError::Io(e)),
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        } else if self.sent > 1 << 20 {
            // Keep a slow reader's buffer from holding what it already took.
            self.out.drain(..self.sent);
            self.sent = 0;
        }
        Ok(())
    }

    /// Whether output is waiting for the socket.
    pub fn wants_write(&self) -> bool {
        self.sent < self.out.len()
    }
}
