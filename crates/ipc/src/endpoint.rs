//! The non-blocking end of an IPC connection, for mio event loops.
//!
//! The loop calls [`Endpoint::read_event`] (or [`Endpoint::read_ready`],
//! which reads on to EAGAIN) when the socket is readable and
//! [`Endpoint::write_ready`] when it is writable; frames come out of
//! [`Endpoint::recv`], decoded where they were read, and go in through
//! [`Endpoint::send`], encoded straight into the output buffer; message
//! content goes by reference ([`Endpoint::queue_spliced`]: the frame's head
//! is encoded, the content written from its own buffer by `writev`). Both
//! buffers are bounded: a peer that sends frames over the limit or stops reading its
//! answers gets an error, which the caller turns into closing the connection.
//!
//! An endpoint registered through [`Endpoint::register`] watches its socket
//! for room to write only while output waits for it, as Postfix's
//! `event_enable_write` does. A Unix socket watched for writing all the
//! time wakes its owner each time the peer reads from it (the kernel
//! reports the room freed whether or not anything waits to be written):
//! one wakeup more per request and per answer, for nothing.

use std::collections::VecDeque;
use std::io::{IoSlice, Write};
use std::rc::Rc;

use mio::net::UnixStream;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{
    decode, encode_into, encode_spliced, FrameBuf, Hello, HelloReply, IpcError, Protocol, Tagged,
};

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
    /// Bodies queued by reference, in order, each written after
    /// `out[..at]` and before what follows it there.
    spliced: VecDeque<Splice>,
    eof: bool,
    greeted: bool,
    stalled: bool,
    /// Where it is registered, when it manages its own interest.
    watch: Option<Watch>,
}

/// The registration of an endpoint that adds and drops its interest in
/// writing as output waits or is written, and in reading as its owner
/// pauses and resumes it.
#[derive(Debug)]
struct Watch {
    /// The loop's registry, shared.
    registry: Rc<mio::Registry>,
    token: mio::Token,
    /// The registered interest; `None`: not registered (reads paused and
    /// no output waiting: mio has no empty interest).
    interest: Option<mio::Interest>,
    /// Whether reading is left out of the interest (`pause_reads`).
    paused: bool,
}

/// A body written from its own buffer, not copied into `out`.
#[derive(Debug)]
struct Splice {
    /// Where in `out` it goes.
    at: usize,
    bytes: Vec<u8>,
    /// How much of it is written.
    pos: usize,
}

/// Pieces offered to one `writev`: a few frames' heads and bodies.
const IOVECS: usize = 32;

impl Endpoint {
    /// Wraps a connected non-blocking stream.
    pub fn new(stream: UnixStream) -> Self {
        Endpoint {
            stream,
            frames: FrameBuf::new(),
            out: Vec::new(),
            out_pos: 0,
            spliced: VecDeque::new(),
            eof: false,
            greeted: false,
            stalled: false,
            watch: None,
        }
    }

    /// Registers the socket under `token`, edge-triggered, for reading;
    /// the endpoint adds writing to the interest while output waits for
    /// room and drops it once the output is written, through the share
    /// of the loop's registry it keeps.
    pub fn register(
        &mut self,
        registry: &Rc<mio::Registry>,
        token: mio::Token,
    ) -> std::io::Result<()> {
        let interest = evloop::interest(self.wants_write());
        registry.register(&mut self.stream, token, interest)?;
        self.watch = Some(Watch {
            registry: Rc::clone(registry),
            token,
            interest: Some(interest),
            paused: false,
        });
        Ok(())
    }

    /// Leaves reading out of the registered interest (`paused`) or puts it
    /// back: an owner with no use for the peer's requests yet sleeps
    /// through their arrival, and they wait in the socket. Edge-triggered
    /// epoll looks at the socket again when reading is put back, so what
    /// came meanwhile is announced then. Only for an endpoint registered
    /// with [`Endpoint::register`]; a no-op otherwise.
    pub fn pause_reads(&mut self, paused: bool) -> Result<(), IpcError> {
        if let Some(w) = self.watch.as_mut() {
            w.paused = paused;
        }
        self.watch_writes()
    }

    /// Whether reading is paused ([`Endpoint::pause_reads`]).
    pub fn reads_paused(&self) -> bool {
        self.watch.as_ref().is_some_and(|w| w.paused)
    }

    /// Brings the registered interest in line with the output and the
    /// pause: writing watched while some waits, not once it is written;
    /// reading unless paused.
    fn watch_writes(&mut self) -> Result<(), IpcError> {
        let writable = self.wants_write();
        let Some(w) = self.watch.as_mut() else {
            return Ok(());
        };
        let want = match (w.paused, writable) {
            (false, _) => Some(evloop::interest(writable)),
            (true, true) => Some(mio::Interest::WRITABLE),
            (true, false) => None,
        };
        if w.interest == want {
            return Ok(());
        }
        match (w.interest, want) {
            (None, Some(i)) => w.registry.register(&mut self.stream, w.token, i)?,
            (Some(_), Some(i)) => w.registry.reregister(&mut self.stream, w.token, i)?,
            (Some(_), None) => w.registry.deregister(&mut self.stream)?,
            (None, None) => {}
        }
        w.interest = want;
        Ok(())
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
        if self.pending_output() > MAX_OUTGOING {
            return Err(IpcError::Backlog);
        }
        encode_into(&mut self.out, msg)
    }

    /// Queues a message whose last byte string is `body`, without copying
    /// it: `msg` has that byte string empty, followed by `after` bytes of
    /// encoding (see [`crate::encode_spliced`]); the body is written from
    /// its own buffer, between the message's other bytes, by `writev`.
    /// The peer reads the same frame as if `msg` held the body. A body
    /// that cannot be queued is given back with the error.
    pub fn queue_spliced<T: Serialize>(
        &mut self,
        msg: &T,
        body: Vec<u8>,
        after: usize,
    ) -> Result<(), (IpcError, Vec<u8>)> {
        if self.pending_output() > MAX_OUTGOING {
            return Err((IpcError::Backlog, body));
        }
        let at = match encode_spliced(&mut self.out, msg, body.len(), after) {
            Ok(at) => at,
            Err(e) => return Err((e, body)),
        };
        if !body.is_empty() {
            self.spliced.push_back(Splice {
                at,
                bytes: body,
                pos: 0,
            });
        }
        Ok(())
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

    /// Takes back the bodies queued by reference that are still queued
    /// (one partly written among them, whole), in order, leaving the rest
    /// of the output queued: a client whose connection failed before they
    /// went sends them on another.
    pub fn take_spliced(&mut self) -> Vec<Vec<u8>> {
        self.spliced.drain(..).map(|s| s.bytes).collect()
    }

    /// Writes as much queued output as the socket takes: one `write`, or
    /// one `writev` when bodies are queued by reference.
    pub fn write_ready(&mut self) -> Result<(), IpcError> {
        while self.wants_write() {
            let written = if self.spliced.is_empty() {
                self.stream.write(&self.out[self.out_pos..])
            } else {
                let mut iov = [IoSlice::new(&[]); IOVECS];
                let n = pieces(&self.out, self.out_pos, &self.spliced, &mut iov);
                self.stream.write_vectored(&iov[..n])
            };
            match written {
                Ok(0) => return Err(IpcError::Closed),
                Ok(n) => self.advance(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(IpcError::Io(e)),
            }
        }
        if !self.wants_write() {
            self.out.clear();
            self.out_pos = 0;
        } else if self.out_pos > 1 << 20 {
            // Keep a slow reader's buffer from holding what it already took.
            self.out.drain(..self.out_pos);
            for s in &mut self.spliced {
                s.at -= self.out_pos;
            }
            self.out_pos = 0;
        }
        self.watch_writes()
    }

    /// Takes `n` written bytes off the front of the queued output.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(s) = self.spliced.front_mut() else {
                self.out_pos += n;
                return;
            };
            if self.out_pos < s.at {
                let k = n.min(s.at - self.out_pos);
                self.out_pos += k;
                n -= k;
                continue;
            }
            let k = n.min(s.bytes.len() - s.pos);
            s.pos += k;
            n -= k;
            if s.pos == s.bytes.len() {
                self.spliced.pop_front();
            }
        }
    }

    /// Bytes queued and not yet written.
    pub fn pending_output(&self) -> usize {
        self.out.len() - self.out_pos
            + self
                .spliced
                .iter()
                .map(|s| s.bytes.len() - s.pos)
                .sum::<usize>()
    }

    /// Whether output is waiting for the socket to become writable.
    pub fn wants_write(&self) -> bool {
        self.out_pos < self.out.len() || !self.spliced.is_empty()
    }
}

/// The queued output from `out[pos..]` on, bodies in their places, as
/// many pieces as `iov` holds; gives how many.
fn pieces<'a>(
    out: &'a [u8],
    mut pos: usize,
    spliced: &'a VecDeque<Splice>,
    iov: &mut [IoSlice<'a>],
) -> usize {
    let mut n = 0;
    for s in spliced {
        if n + 2 > iov.len() {
            return n;
        }
        if pos < s.at {
            iov[n] = IoSlice::new(&out[pos..s.at]);
            n += 1;
            pos = s.at;
        }
        iov[n] = IoSlice::new(&s.bytes[s.pos..]);
        n += 1;
    }
    if pos < out.len() && n < iov.len() {
        iov[n] = IoSlice::new(&out[pos..]);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::{Events, Interest, Poll, Token};

    /// Frames with bodies queued by reference, between frames encoded
    /// whole, reach a reader that takes them slowly (partial `writev`s,
    /// a body cut anywhere) as the same frames encoded whole.
    #[test]
    fn spliced_bodies_arrive_as_whole_frames_through_partial_writes() {
        use crate::cleanup::Request;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let sizes: Vec<usize> = (0..300).map(|i| (i * 7919) % 70_000).collect();
        let expect: Vec<Request> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| match i % 3 {
                0 => Request::End,
                _ => Request::Data {
                    bytes: (0..n).map(|b| (b % 253) as u8 ^ i as u8).collect(),
                },
            })
            .collect();
        let want = expect.clone();
        let reader = std::thread::spawn(move || {
            let mut theirs = theirs;
            let mut fb = FrameBuf::new();
            let mut got = Vec::new();
            while got.len() < want.len() {
                std::thread::sleep(std::time::Duration::from_micros(200));
                let f = fb.read_from(&mut theirs).unwrap();
                assert!(f.bytes > 0, "closed after {} frames", got.len());
                while let Some(p) = fb.next_payload().unwrap() {
                    got.push(decode::<Request>(p).unwrap());
                }
            }
            got
        });
        let mut ep = Endpoint::new(UnixStream::from_std(ours));
        for r in &expect {
            match r {
                Request::Data { bytes } => ep
                    .queue_spliced(&Request::Data { bytes: Vec::new() }, bytes.clone(), 0)
                    .map_err(|(e, _)| e)
                    .unwrap(),
                other => ep.queue(other).unwrap(),
            }
        }
        let total = ep.pending_output();
        assert!(total > 4 << 20, "{total} bytes queued");
        while ep.wants_write() {
            ep.write_ready().unwrap();
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        assert_eq!(ep.pending_output(), 0);
        assert_eq!(reader.join().unwrap(), expect);
    }

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

    /// Sends 8 MiB, far more than a socket buffer holds, written out on
    /// the writable events `ep` asks for while `theirs` reads the frame
    /// whole on a thread; `check` sees each poll's events. Gives `theirs`
    /// back.
    fn send_big(
        ep: &mut Endpoint,
        poll: &mut Poll,
        events: &mut Events,
        mut theirs: std::os::unix::net::UnixStream,
        check: impl Fn(&Events),
    ) -> std::os::unix::net::UnixStream {
        use std::io::Read;
        ep.send(&vec![9u8; 8 << 20]).unwrap();
        assert!(ep.wants_write(), "all of it went at once");
        let reader = std::thread::spawn(move || {
            let mut got = 0usize;
            let mut buf = vec![0u8; 1 << 16];
            // The frame: its length prefix and bincode's, then the bytes.
            while got < (8 << 20) + 4 + 5 {
                let n = theirs.read(&mut buf).unwrap();
                assert!(n > 0, "closed after {got} bytes");
                got += n;
            }
            theirs
        });
        while ep.wants_write() {
            poll.poll(events, Some(std::time::Duration::from_secs(5)))
                .unwrap();
            assert!(
                events.iter().any(|e| e.is_writable()),
                "stalled with {} bytes queued",
                ep.pending_output()
            );
            check(events);
            ep.write_ready().unwrap();
        }
        reader.join().unwrap()
    }

    /// A registered endpoint is not woken when its peer reads what it
    /// wrote (a Unix socket watched for writing would be: the room freed
    /// is reported), yet output larger than the socket takes still goes
    /// out whole on the writable events it asks for while it waits, and
    /// once it is written the peer's reads wake it no more.
    #[test]
    fn a_registered_endpoint_watches_for_room_only_while_output_waits() {
        use std::io::Read;
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut poll = Poll::new().unwrap();
        let registry = Rc::new(poll.registry().try_clone().unwrap());
        let mut ep = Endpoint::new(UnixStream::from_std(ours));
        ep.register(&registry, Token(7)).unwrap();
        let mut events = Events::with_capacity(8);
        let quiet = |poll: &mut Poll, events: &mut Events| {
            poll.poll(events, Some(std::time::Duration::from_millis(50)))
                .unwrap();
            events.iter().count()
        };
        assert_eq!(quiet(&mut poll, &mut events), 0, "registration alone");

        ep.send(&vec![1u8; 100]).unwrap();
        assert!(!ep.wants_write());
        let mut small = vec![0u8; 4096];
        let n = theirs.read(&mut small).unwrap();
        assert!(n > 100, "{n} bytes read");
        assert_eq!(
            quiet(&mut poll, &mut events),
            0,
            "the peer's read woke the writer"
        );

        let mut theirs = send_big(&mut ep, &mut poll, &mut events, theirs, |_| {});
        theirs.set_nonblocking(true).unwrap();
        while theirs.read(&mut small).map(|n| n > 0).unwrap_or(false) {}
        let _ = quiet(&mut poll, &mut events);
        ep.send(&vec![2u8; 100]).unwrap();
        let _ = theirs.read(&mut small).unwrap();
        assert_eq!(
            quiet(&mut poll, &mut events),
            0,
            "still watching for room once the output was written"
        );
    }

    /// An endpoint whose reads are paused is not woken by what its peer
    /// sends (it stays in the socket), still writes its own output, and
    /// is told of what came meanwhile as soon as reading is put back.
    #[test]
    fn paused_reads_sleep_through_requests_which_are_read_on_resuming() {
        use std::io::Write;
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut poll = Poll::new().unwrap();
        let registry = Rc::new(poll.registry().try_clone().unwrap());
        let mut ep = Endpoint::new(UnixStream::from_std(ours));
        ep.register(&registry, Token(3)).unwrap();
        let mut events = Events::with_capacity(8);
        let woken = |poll: &mut Poll, events: &mut Events| {
            poll.poll(events, Some(std::time::Duration::from_millis(50)))
                .unwrap();
            events.iter().filter(|e| e.is_readable()).count()
        };

        ep.pause_reads(true).unwrap();
        assert!(ep.reads_paused());
        let mut framed = Vec::new();
        crate::encode_into(&mut framed, &7u64).unwrap();
        crate::encode_into(&mut framed, &8u64).unwrap();
        theirs.write_all(&framed).unwrap();
        assert_eq!(
            woken(&mut poll, &mut events),
            0,
            "a paused endpoint was woken"
        );

        // Its answers still go out while it does not read: one that the
        // socket cannot take at once goes on the writable events it
        // watches for meanwhile (writing only, reading still paused).
        let _theirs = send_big(&mut ep, &mut poll, &mut events, theirs, |events| {
            assert!(!events.iter().any(|e| e.is_readable()), "read while paused");
        });
        assert!(ep.reads_paused());

        ep.pause_reads(false).unwrap();
        assert_eq!(
            woken(&mut poll, &mut events),
            1,
            "what came meanwhile was not announced"
        );
        assert!(ep.read_ready().unwrap());
        assert_eq!(ep.recv::<u64>().unwrap(), Some(7));
        assert_eq!(ep.recv::<u64>().unwrap(), Some(8));
    }
}
