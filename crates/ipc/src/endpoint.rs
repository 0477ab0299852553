//! The non-blocking end of an IPC connection, for mio event loops.
//!
//! The loop calls [`Endpoint::read_ready`] when the socket is readable and
//! [`Endpoint::write_ready`] when it is writable; frames come out of
//! [`Endpoint::recv`] and go in through [`Endpoint::send`]. Both buffers are
//! bounded: a peer that sends frames over the limit or stops reading its
//! answers gets an error, which the caller turns into closing the connection.

use std::io::{Read, Write};

use mio::net::UnixStream;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{decode, encode, FrameBuf, Hello, HelloReply, IpcError, Protocol, Tagged};

/// Outgoing bytes we hold for a slow reader before giving up on it.
pub const MAX_OUTGOING: usize = 32 << 20;

/// A non-blocking framed connection.
#[derive(Debug)]
pub struct Endpoint {
    stream: UnixStream,
    frames: FrameBuf,
    out: Vec<u8>,
    out_pos: usize,
    eof: bool,
    greeted: bool,
}

impl Endpoint {
    /// Wraps a connected non-blocking stream.
    pub fn new(stream: UnixStream) -> Self {
        Endpoint {
            stream,
            frames: FrameBuf::new(),
            out: Vec::new(),
            out_pos: 0,
            eof: false,
            greeted: false,
        }
    }

    /// The underlying stream, for registering with mio.
    pub fn stream(&mut self) -> &mut UnixStream {
        &mut self.stream
    }

    /// The peer's credentials.
    pub fn peer(&self) -> Result<sys::creds::PeerCred, sys::SysError> {
        sys::creds::peer_cred(&self.stream)
    }

    /// Reads everything available; returns false once the peer has closed.
    pub fn read_ready(&mut self) -> Result<bool, IpcError> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.frames.push(&buf[..n]);
                    // Stop reading while a whole frame's worth is waiting to
                    // be handled: backpressure instead of unbounded buffering.
                    if self.frames.pending() > crate::MAX_FRAME as usize {
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(IpcError::Io(e)),
            }
        }
    }

    /// Whether the peer has closed its side.
    pub fn is_eof(&self) -> bool {
        self.eof
    }

    /// The next whole message, if one has arrived.
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, IpcError> {
        match self.frames.next_frame()? {
            Some(p) => decode(&p).map(Some),
            None => Ok(None),
        }
    }

    /// Server side of the handshake: consumes the client's hello once it
    /// has arrived and queues the answer. `Ok(true)` once accepted.
    pub fn accept_hello<P: Protocol>(&mut self) -> Result<bool, IpcError> {
        if self.greeted {
            return Ok(true);
        }
        let Some(hello) = self.recv::<Hello>()? else {
            return Ok(false);
        };
        let answer = hello.answer::<P>();
        self.send(&answer)?;
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

    /// Queues a message and tries to write it at once.
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), IpcError> {
        if self.out.len() - self.out_pos > MAX_OUTGOING {
            return Err(IpcError::Backlog);
        }
        self.out.extend_from_slice(&encode(msg));
        self.write_ready()
    }

    /// Queues a response to request `id`.
    pub fn reply<T: Serialize>(&mut self, id: u64, body: &T) -> Result<(), IpcError> {
        self.send(&Tagged { id, body })
    }

    /// Writes as much queued output as the socket takes.
    pub fn write_ready(&mut self) -> Result<(), IpcError> {
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(IpcError::Closed),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(IpcError::Io(e)),
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
        Ok(())
    }

    /// Bytes queued and not yet written.
    pub fn pending_output(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// Whether output is waiting for the socket to become writable.
    pub fn wants_write(&self) -> bool {
        self.out_pos < self.out.len()
    }
}
