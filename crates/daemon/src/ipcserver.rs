//! A [`Server`] for daemons that answer an IPC protocol, now or later.
//!
//! It accepts Unix clients, does the handshake, decodes tagged requests and
//! hands each to the [`Handler`] with the client's [`ClientId`] and the
//! request id. The handler answers through [`Replies`] at once (a table
//! lookup) or later, from one of its own events (a DNS answer, a journal
//! commit, a delivery that ended), by the same ids; a handler keeps what
//! it owes by `(ClientId, id)` and is told with [`Handler::gone`] when a
//! client leaves, so it can drop the work. Answers are queued and written
//! once per callback, so a batch of pipelined requests costs a few system
//! calls. A client that breaks the protocol (bad frame, wrong version,
//! output it does not read past the endpoint's bound) is logged and
//! dropped; a client the handler does not allow (by its SO_PEERCRED
//! identity) is refused before any request is read.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use ipc::{Endpoint, IpcError, Protocol, Tagged};
use mio::{Interest, Token};
use sys::creds::PeerCred;

use crate::msg_warn;
use crate::skeleton::{Conn, Cx, Server};

/// One client of the service, as long as it stays connected (a token is
/// not reused while the process lives, so a late answer never reaches
/// another client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(Token);

struct Client {
    ep: Endpoint,
    peer: PeerCred,
}

/// Where a handler writes its answers.
pub struct Replies<'a, P: Protocol> {
    clients: &'a mut BTreeMap<Token, Client>,
    touched: &'a mut BTreeSet<Token>,
    _p: std::marker::PhantomData<P>,
}

impl<P: Protocol> Replies<'_, P> {
    /// Queues the answer to request `id` of `to`; false when that client
    /// is gone (the answer is dropped: nobody is waiting for it).
    pub fn send(&mut self, to: ClientId, id: u64, resp: &P::Response) -> bool {
        let Some(c) = self.clients.get_mut(&to.0) else {
            return false;
        };
        self.touched.insert(to.0);
        if let Err(e) = c.ep.queue_reply(id, resp) {
            // The flush after this callback finds the client broken again
            // and drops it; say why once, here.
            msg_warn!("{}: client pid {}: {e}", P::NAME, c.peer.pid);
        }
        true
    }

    /// The identity of a connected client.
    pub fn peer(&self, of: ClientId) -> Option<&PeerCred> {
        self.clients.get(&of.0).map(|c| &c.peer)
    }
}

/// A daemon's side of one IPC protocol.
pub trait Handler<P: Protocol> {
    /// One request from `from`; answer it through `out` now or later.
    fn request(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Replies<'_, P>,
        from: ClientId,
        id: u64,
        req: P::Request,
    );
    /// Whether this peer may talk to us at all.
    fn allow(&self, _peer: &PeerCred) -> bool {
        true
    }
    /// Called once before the first event, to register the handler's own
    /// event sources.
    fn start(&mut self, _cx: &mut Cx<'_>) {}
    /// A socket the handler registered itself is ready.
    fn ready(
        &mut self,
        _cx: &mut Cx<'_>,
        _out: &mut Replies<'_, P>,
        _token: Token,
        _readable: bool,
        _writable: bool,
    ) {
    }
    /// A client left: whatever is owed to it is owed to nobody now.
    fn gone(&mut self, _cx: &mut Cx<'_>, _client: ClientId) {}
    /// Work in progress beyond the clients (e.g. an agent's own
    /// connections), counted for the process's busy state.
    fn busy(&self) -> usize {
        0
    }
    /// Periodic work; called at or after `next_deadline`.
    fn timeout(&mut self, _cx: &mut Cx<'_>, _out: &mut Replies<'_, P>) {}
    /// When `timeout` should next run.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// main.cf changed; false to retire the process (see [`Server::reload`]).
    fn reload(&mut self, _cx: &mut Cx<'_>, _config: &config::Config) -> bool {
        true
    }
    /// The process is about to exit.
    fn shutdown(&mut self) {}
}

/// Serves protocol `P` with handler `H`.
pub struct IpcServer<P: Protocol, H: Handler<P>> {
    handler: H,
    clients: BTreeMap<Token, Client>,
    /// Clients with answers queued since the last flush.
    touched: BTreeSet<Token>,
    _p: std::marker::PhantomData<P>,
}

impl<P: Protocol, H: Handler<P>> IpcServer<P, H> {
    /// Wraps a handler.
    pub fn new(handler: H) -> Self {
        IpcServer {
            handler,
            clients: BTreeMap::new(),
            touched: BTreeSet::new(),
            _p: std::marker::PhantomData,
        }
    }

    /// The handler, for inspection.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// Runs `f` with the handler and the reply queue, then writes what it
    /// queued.
    fn with_replies<R>(
        &mut self,
        cx: &mut Cx<'_>,
        f: impl FnOnce(&mut H, &mut Cx<'_>, &mut Replies<'_, P>) -> R,
    ) -> R {
        let mut out = Replies {
            clients: &mut self.clients,
            touched: &mut self.touched,
            _p: std::marker::PhantomData,
        };
        let r = f(&mut self.handler, cx, &mut out);
        self.flush(cx);
        r
    }

    /// One write per client that has answers queued; a client whose
    /// socket fails is dropped.
    fn flush(&mut self, cx: &mut Cx<'_>) {
        for token in std::mem::take(&mut self.touched) {
            let Some(c) = self.clients.get_mut(&token) else {
                continue;
            };
            if let Err(e) = c.ep.write_ready() {
                msg_warn!("{}: client pid {}: {e}", P::NAME, c.peer.pid);
                self.drop_client(cx, token);
            }
        }
    }

    fn drop_client(&mut self, cx: &mut Cx<'_>, token: Token) {
        if let Some(mut c) = self.clients.remove(&token) {
            let _ = cx.registry.deregister(c.ep.stream());
            self.touched.remove(&token);
            self.handler.gone(cx, ClientId(token));
        }
    }

    /// Reads and hands on what a client sent; false when it is gone.
    fn serve(&mut self, cx: &mut Cx<'_>, token: Token) -> Result<bool, IpcError> {
        let Some(c) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        let open = c.ep.read_ready()?;
        if !c.ep.accept_hello::<P>()? {
            return Ok(open);
        }
        let mut reqs = Vec::new();
        while let Some(req) = c.ep.recv::<Tagged<P::Request>>()? {
            reqs.push(req);
        }
        let from = ClientId(token);
        self.with_replies(cx, |h, cx, out| {
            for req in reqs {
                h.request(cx, out, from, req.id, req.body);
            }
        });
        let Some(c) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        c.ep.write_ready()?;
        Ok(!c.ep.is_eof() || c.ep.wants_write())
    }
}

impl<P: Protocol, H: Handler<P>> Server for IpcServer<P, H> {
    fn start(&mut self, cx: &mut Cx<'_>) {
        self.handler.start(cx);
    }

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
        self.ready(cx, token, true, true);
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, readable: bool, writable: bool) {
        if !self.clients.contains_key(&token) {
            self.with_replies(cx, |h, cx, out| h.ready(cx, out, token, readable, writable));
            return;
        }
        match self.serve(cx, token) {
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
        self.with_replies(cx, |h, cx, out| h.timeout(cx, out));
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.handler.next_deadline()
    }

    fn clients(&self) -> usize {
        self.clients.len() + self.handler.busy()
    }

    fn reload(&mut self, cx: &mut Cx<'_>, config: &config::Config) -> bool {
        self.handler.reload(cx, config)
    }

    fn shutdown(&mut self) {
        self.handler.shutdown();
    }
}
