//! A [`Server`] for daemons that answer an IPC protocol.
//!
//! It accepts Unix clients, does the handshake, decodes tagged requests,
//! asks the [`Handler`] for each answer and writes it back. A client that
//! breaks the protocol (bad frame, wrong version) is logged and dropped;
//! a client the handler does not allow (by its SO_PEERCRED identity) is
//! refused before any request is read.

use std::collections::BTreeMap;
use std::time::Instant;

use ipc::{Endpoint, IpcError, Protocol, Tagged};
use mio::{Interest, Token};
use sys::creds::PeerCred;

use crate::msg_warn;
use crate::skeleton::{Conn, Cx, Server};

/// A daemon's answers to one IPC protocol.
pub trait Handler<P: Protocol> {
    /// Answers one request.
    fn handle(&mut self, peer: &PeerCred, req: P::Request, now: Instant) -> P::Response;
    /// Whether this peer may talk to us at all.
    fn allow(&self, _peer: &PeerCred) -> bool {
        true
    }
    /// Periodic work; called at or after `next_deadline`.
    fn timeout(&mut self, _now: Instant) {}
    /// When `timeout` should next run.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// main.cf changed.
    fn reload(&mut self, _config: &config::Config) {}
    /// The process is about to exit.
    fn shutdown(&mut self) {}
}

struct Client {
    ep: Endpoint,
    peer: PeerCred,
}

/// Serves protocol `P` with handler `H`.
pub struct IpcServer<P: Protocol, H: Handler<P>> {
    handler: H,
    clients: BTreeMap<Token, Client>,
    _p: std::marker::PhantomData<P>,
}

impl<P: Protocol, H: Handler<P>> IpcServer<P, H> {
    /// Wraps a handler.
    pub fn new(handler: H) -> Self {
        IpcServer {
            handler,
            clients: BTreeMap::new(),
            _p: std::marker::PhantomData,
        }
    }

    /// The handler, for inspection.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    fn drop_client(&mut self, cx: &mut Cx<'_>, token: Token) {
        if let Some(mut c) = self.clients.remove(&token) {
            let _ = cx.registry.deregister(c.ep.stream());
        }
    }

    fn serve(&mut self, token: Token, now: Instant) -> Result<bool, IpcError> {
        let Some(c) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        let open = c.ep.read_ready()?;
        if !c.ep.accept_hello::<P>()? {
            return Ok(open);
        }
        while let Some(req) = c.ep.recv::<Tagged<P::Request>>()? {
            let resp = self.handler.handle(&c.peer, req.body, now);
            c.ep.reply(req.id, &resp)?;
        }
        c.ep.write_ready()?;
        Ok(!c.ep.is_eof() || c.ep.wants_write())
    }
}

impl<P: Protocol, H: Handler<P>> Server for IpcServer<P, H> {
    fn accept(&mut self, cx: &mut Cx<'_>, conn: Conn) {
        let Conn::Unix(stream) = conn else {
            msg_warn!("{}: refusing a TCP client on an IPC service", P::NAME);
            return;
        };
        let mut ep = Endpoint::new(stream);
        let peer = match ep.peer() {
            Ok(p) => p,
            Err(e) => {
                msg_warn!("{}: {e}", P::NAME);
                return;
            }
        };
        if !self.handler.allow(&peer) {
            msg_warn!(
                "{}: refusing client uid {} pid {}",
                P::NAME,
                peer.uid,
                peer.pid
            );
            return;
        }
        let token = cx.token();
        if let Err(e) =
            cx.registry
                .register(ep.stream(), token, Interest::READABLE | Interest::WRITABLE)
        {
            msg_warn!("{}: register client: {e}", P::NAME);
            return;
        }
        self.clients.insert(token, Client { ep, peer });
        // The client may have written before we registered: serve at once.
        match self.serve(token, cx.now) {
            Ok(true) => {}
            Ok(false) => self.drop_client(cx, token),
            Err(e) => {
                msg_warn!("{}: client pid {}: {e}", P::NAME, peer.pid);
                self.drop_client(cx, token);
            }
        }
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, _readable: bool, _writable: bool) {
        match self.serve(token, cx.now) {
            Ok(true) => {}
            Ok(false) => self.drop_client(cx, token),
            Err(e) => {
                let pid = self.clients.get(&token).map_or(0, |c| c.peer.pid);
                msg_warn!("{}: client pid {pid}: {e}", P::NAME);
                self.drop_client(cx, token);
            }
        }
    }

    fn timeout(&mut self, cx: &mut Cx<'_>) {
        self.handler.timeout(cx.now);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.handler.next_deadline()
    }

    fn clients(&self) -> usize {
        self.clients.len()
    }

    fn reload(&mut self, _cx: &mut Cx<'_>, config: &config::Config) -> bool {
        self.handler.reload(config);
        true
    }

    fn shutdown(&mut self) {
        self.handler.shutdown();
    }
}
