//! The non-blocking end of an IPC connection, for mio event loops.
//!
//! The loop calls [`Endpoint::read_event`] (or [`Endpoint::read_ready`],
//! which reads on to EAGAIN) when the socket is readable and
//! [`Endpoint::write_ready`] when it is writable; frames come out of
//! [`Endpoint::recv`], decoded where they were read, and go in through
//! [`Endpoint::send`], encoded straight into the output buffer. Both buffers
//! are bounded: a peer that sends frames over the limit or stops reading its
//! answers gets an error, which the caller turns into closing the connection.

use std::io::Write;

use mio::net::UnixStream;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{decode, encode_into, FrameBuf, Hello, HelloReply, IpcError, Protocol, Tagged};

/// Outgoing bytes we hold for a slow reader before giving up on it.
pub const MAX_OUTGOING: usize = 32 << 20;

/// Bytes buffered before reading pauses for the loop to handle them. Tests
/// use less than a socket buffer's worth so the pause really happens.
const READ_BOUND: usize = if cfg!(test) {
    64 << 10
} else {
    crate::MAX_FRAME as usize
};

/// A non-blocking framed connection.
#[derive(Debug)]
pub struct Endpoint {
    stream: UnixStream,
    frames: FrameBuf,
    out: Vec<u8>,
    out_pos: usize,
    eof: bool,
    greeted: bool,
    stalled: bool,
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
            stalled: false,
        }
    }

    /// Wraps a connection a server accepted and registers it for reading
    /// and writing (edge-triggered), as every daemon's `accept` does.
    pub fn registered(
        stream: UnixStream,
        registry: &mio::Registry,
        token: mio::Token,
    ) -> std::io::Result<Self> {
        let mut ep = Self::new(stream);
        registry.register(
            &mut ep.stream,
            token,
            mio::Interest::READABLE | mio::Interest::WRITABLE,
        )?;
        Ok(ep)
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
        self.fill(true)
    }

    /// Reads what an edge-triggered readable event announced: stops at the
    /// first read that leaves the socket empty (returns less than it could
    /// take), which saves the read that would fail with EAGAIN, since data
    /// arriving later raises a new event. `closed` is the event's
    /// read-closed flag: the peer's end of file came with the data and no
    /// new event will tell of it, so then it reads on to the end.
    pub fn read_event(&mut self, closed: bool) -> Result<bool, IpcError> {
        self.fill(closed)
    }

    fn fill(&mut self, to_eagain: bool) -> Result<bool, IpcError> {
        self.stalled = false;
        loop {
            match self.frames.read_from(&mut self.stream) {
                Ok(f) if f.bytes == 0 => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(f) => {
                    // Stop reading while a whole frame's worth is waiting to
                    // be handled: backpressure instead of unbounded buffering.
                    if self.frames.pending() > READ_BOUND {
                        // The socket may hold more and, edge-triggered, will
                        // not say so again: `recv` reads on once this drains.
                        self.stalled = true;
                        return Ok(true);
                    }
                    if !f.full && !to_eagain {
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

    /// The next whole message, if one has arrived. Reads on from the
    /// socket when an earlier read stopped at the buffering bound, so check
    /// [`Endpoint::is_eof`] after draining rather than `read_ready`'s answer.
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, IpcError> {
        loop {
            if let Some(p) = self.frames.next_payload()? {
                return decode(p).map(Some);
            }
            if !self.stalled || self.eof {
                return Ok(None);
            }
            self.read_ready()?;
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
        self.queue(msg)?;
        self.write_ready()
    }

    /// Queues a message without writing; bounded like everything queued.
    fn queue<T: Serialize>(&mut self, msg: &T) -> Result<(), IpcError> {
        if self.out.len() - self.out_pos > MAX_OUTGOING {
            return Err(IpcError::Backlog);
        }
        encode_into(&mut self.out, msg)
    }

    /// Queues a response to request `id` and tries to write it at once.
    pub fn reply<T: Serialize>(&mut self, id: u64, body: &T) -> Result<(), IpcError> {
        self.send(&Tagged { id, body })
    }

    /// Queues a response without writing: a server that answers a batch of
    /// pipelined requests calls [`Endpoint::write_ready`] once after it, so
    /// a thousand answers cost a few system calls, not a thousand.
    pub fn queue_reply<T: Serialize>(&mut self, id: u64, body: &T) -> Result<(), IpcError> {
        self.queue(&Tagged { id, body })
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
        } else if self.out_pos > 1 << 20 {
            // Keep a slow reader's buffer from holding what it already took.
            self.out.drain(..self.out_pos);
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

#[cfg(test)]
mod tests {
    use super::*;
    use mio::{Events, Interest, Poll, Token};

    #[test]
    fn recv_reads_on_after_stopping_at_the_buffer_bound() {
        // 1 MiB of 1 KiB frames from a writer that blocks on the socket:
        // once the reader stops at the bound, no new data arrives and an
        // edge-triggered poll has nothing more to say, so recv must read on.
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let count = 1024usize;
        let writer = std::thread::spawn(move || {
            let framed = crate::encode(&vec![7u8; 1024]);
            for _ in 0..count {
                theirs.write_all(&framed).unwrap();
            }
            theirs
        });
        let mut ep = Endpoint::new(UnixStream::from_std(ours));
        let mut poll = Poll::new().unwrap();
        poll.registry()
            .register(ep.stream(), Token(0), Interest::READABLE)
            .unwrap();
        let mut events = Events::with_capacity(4);
        let mut got = 0;
        while got < count {
            poll.poll(&mut events, Some(std::time::Duration::from_secs(5)))
                .unwrap();
            assert!(!events.is_empty(), "stalled after {got} of {count} frames");
            assert!(ep.read_ready().unwrap());
            while let Some(v) = ep.recv::<Vec<u8>>().unwrap() {
                assert_eq!(v.len(), 1024);
                got += 1;
            }
        }
        let _theirs = writer.join().unwrap();
        assert_eq!(got, count);
    }
}
