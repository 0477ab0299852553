//! The non-blocking client side of a connection, for daemons that talk to
//! other daemons from their event loop (qmgr to the router and the
//! delivery agents, smtpd to cleanup, cleanup to qmgr).
//!
//! Requests go out at once, tagged with increasing ids, the handshake in
//! front of the first; answers come back in any order, matched by id.

use std::marker::PhantomData;
use std::path::Path;

use mio::{Interest, Registry, Token};

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
    pub fn connect(path: &Path, registry: &Registry, token: Token) -> Result<Self, IpcError> {
        let mut ep = Endpoint::new(mio::net::UnixStream::connect(path)?);
        registry.register(ep.stream(), token, Interest::READABLE | Interest::WRITABLE)?;
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

    /// Reads what arrived: the answers, by request id. `Err` when the
    /// connection is unusable (closed, refused, garbled).
    pub fn ready(&mut self) -> Result<Vec<(u64, P::Response)>, IpcError> {
        let open = self.ep.read_ready()?;
        self.ep.write_ready()?;
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
