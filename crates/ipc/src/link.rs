//! The non-blocking client side of a connection, for daemons that talk to
//! other daemons from their event loop: qmgr to the router, the delivery
//! agents and cleanup (notices); smtpd to cleanup (a pool of links shared
//! by its sessions), the router and anvil; cleanup to qmgr and the router.
//! No daemon has a client of its own; tools and one-shot submissions
//! (sendmail, local's forwarding) use the blocking [`crate::Client`]. A
//! link made on demand and again after a loss, its answers matched to the
//! caller's own request names, is a [`crate::Peer`].
//!
//! Requests go out at once, tagged with increasing ids, the handshake in
//! front of the first; answers come back in any order, matched by id.
//! [`Link::ready`] reads until the socket says EAGAIN; [`Link::event`]
//! reads what one edge-triggered event announced and no more (see
//! [`Endpoint::read_event`]), which saves a failed read per answer.

use std::marker::PhantomData;
use std::path::Path;
use std::rc::Rc;

use mio::{Registry, Token};

use crate::{Endpoint, Hello, HelloReply, IpcError, Protocol, Tagged};

/// A non-blocking client connection speaking protocol `P`.
#[derive(Debug)]
pub struct Link<P: Protocol> {
    ep: Endpoint,
    token: Token,
    greeted: bool,
    next_id: u64,
    _p: PhantomData<P>,
}

impl<P: Protocol> Link<P> {
    /// Connects to the Unix socket at `path`, registers it under `token` and
    /// sends the hello. The connect does not block: a server too busy or
    /// stopped to take it (its backlog full) is an error at once (EAGAIN),
    /// not a wait in the caller's event loop.
    pub fn connect(path: &Path, registry: &Rc<Registry>, token: Token) -> Result<Self, IpcError> {
        let mut ep = Endpoint::new(mio::net::UnixStream::connect(path)?);
        ep.register(registry, token)?;
        ep.send(&Hello::of::<P>())?;
        Ok(Link {
            ep,
            token,
            greeted: false,
            next_id: 1,
            _p: PhantomData,
        })
    }

    /// The token it is registered under.
    pub fn token(&self) -> Token {
        self.token
    }

    /// Sends a request; returns its id.
    pub fn send(&mut self, req: &P::Request) -> Result<u64, IpcError> {
        let id = self.next_id;
        self.next_id += 1;
        self.ep.send(&Tagged { id, body: req })?;
        Ok(id)
    }

    /// Queues a request without writing it (the next `send` or `flush`
    /// does): requests that follow each other go out in one write.
    pub fn send_later(&mut self, req: &P::Request) -> Result<u64, IpcError> {
        let id = self.next_id;
        self.next_id += 1;
        self.ep.queue_reply(id, req)?;
        Ok(id)
    }

    /// Queues a request whose last byte string is `body`, left out of
    /// `req` (empty there, `after` bytes before the end of its encoding)
    /// and written from its own buffer ([`Endpoint::queue_spliced`]); the
    /// next `send` or `flush` writes it. The server reads the request as
    /// if `req` held the body. A body that cannot be queued is given back
    /// with the error.
    pub fn send_later_spliced(
        &mut self,
        req: &P::Request,
        body: Vec<u8>,
        after: usize,
    ) -> Result<u64, (IpcError, Vec<u8>)> {
        let id = self.next_id;
        self.next_id += 1;
        self.ep
            .queue_spliced(&Tagged { id, body: req }, body, after)?;
        Ok(id)
    }

    /// The bodies queued by [`Link::send_later_spliced`] and still
    /// queued, in order (see [`Endpoint::take_spliced`]).
    pub fn take_spliced(&mut self) -> Vec<Vec<u8>> {
        self.ep.take_spliced()
    }

    /// Writes what is queued, as much as the socket takes.
    pub fn flush(&mut self) -> Result<(), IpcError> {
        self.ep.write_ready()
    }

    /// Reads what arrived: the answers, by request id. `Err` when the
    /// connection is unusable (closed, refused, garbled).
    pub fn ready(&mut self) -> Result<Vec<(u64, P::Response)>, IpcError> {
        self.ep.read_ready()?;
        self.answers()
    }

    /// Handles one event on the link: reads only when it is `readable`
    /// (a peer that takes our data makes the socket writable: there is
    /// nothing to read then), as [`Endpoint::read_event`] does with the
    /// event's read-closed flag `closed`, and writes what waits. The
    /// answers, by request id, as [`Link::ready`].
    pub fn event(
        &mut self,
        readable: bool,
        closed: bool,
    ) -> Result<Vec<(u64, P::Response)>, IpcError> {
        if readable || closed {
            self.ep.read_event(closed)?;
        }
        self.answers()
    }

    fn answers(&mut self) -> Result<Vec<(u64, P::Response)>, IpcError> {
        let open = !self.ep.is_eof();
        if self.ep.wants_write() {
            self.ep.write_ready()?;
        }
        let mut out = Vec::new();
        if !self.greeted {
            match self.ep.recv::<HelloReply>()? {
                Some(HelloReply::Accepted) => self.greeted = true,
                Some(HelloReply::Refused { protocol, version }) => {
                    return Err(IpcError::Refused {
                        wanted: format!("{} {}", P::NAME, P::VERSION),
                        got: format!("{protocol} {version}"),
                    })
                }
                None if open => return Ok(out),
                None => return Err(IpcError::Closed),
            }
        }
        while let Some(t) = self.ep.recv::<Tagged<P::Response>>()? {
            out.push((t.id, t.body));
        }
        if self.ep.is_eof() && out.is_empty() {
            return Err(IpcError::Closed);
        }
        // A close that came with answers: the caller handles them, then
        // sees `is_closed` (edge-triggered polling brings no further event).
        Ok(out)
    }

    /// Whether the server has accepted the handshake.
    pub fn is_greeted(&self) -> bool {
        self.greeted
    }

    /// Bytes sent and not yet taken by the socket.
    pub fn pending_output(&self) -> usize {
        self.ep.pending_output()
    }

    /// Whether the peer has closed the connection (after the answers read
    /// with the close were handed over by `ready`).
    pub fn is_closed(&self) -> bool {
        self.ep.is_eof()
    }

    /// Stops watching the socket.
    pub fn deregister(&mut self, registry: &Registry) {
        let _ = registry.deregister(self.ep.stream());
    }
}
