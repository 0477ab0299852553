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
//!
//! A listener serves a [`Service`]: one [`Protocol`] (every protocol is a
//! service), or a choice of them told apart by the client's hello (qmgr
//! takes cleanup's arrivals and `sluice queue` on one socket). The handler
//! may refuse a client for the protocol it chose ([`Handler::admit`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use ipc::{Endpoint, Hello, HelloReply, IpcError, Protocol, Tagged};
use mio::Token;
use sys::creds::PeerCred;

use crate::msg_warn;
use crate::skeleton::{Conn, Cx, Server};

/// What one listener serves: a protocol, or a choice of protocols told
/// apart by the client's hello.
pub trait Service {
    /// The name in log lines.
    const LOG_NAME: &'static str;
    /// A request of any protocol served, as the handler gets it.
    type Request;
    /// An answer of any protocol served.
    type Response;
    /// Which of the protocols a client speaks.
    type Kind: Copy + std::fmt::Debug;
    /// The protocol a client's hello asks for, or the refusal to send it.
    fn choose(hello: &Hello) -> Result<Self::Kind, HelloReply>;
    /// The next whole request of a client speaking `kind`, if one has arrived.
    fn recv(ep: &mut Endpoint, kind: Self::Kind)
        -> Result<Option<Tagged<Self::Request>>, IpcError>;
    /// Queues the answer to request `id` (written at the end of the callback).
    fn queue_reply(ep: &mut Endpoint, id: u64, resp: &Self::Response) -> Result<(), IpcError>;
}

impl<P: Protocol> Service for P {
    const LOG_NAME: &'static str = P::NAME;
    type Request = P::Request;
    type Response = P::Response;
    type Kind = ();

    fn choose(hello: &Hello) -> Result<(), HelloReply> {
        match hello.answer::<P>() {
            HelloReply::Accepted => Ok(()),
            refused => Err(refused),
        }
    }

    fn recv(ep: &mut Endpoint, _: ()) -> Result<Option<Tagged<P::Request>>, IpcError> {
        ep.recv()
    }

    fn queue_reply(ep: &mut Endpoint, id: u64, resp: &P::Response) -> Result<(), IpcError> {
        ep.queue_reply(id, resp)
    }
}

/// One client of the service, as long as it stays connected (a token is
/// not reused while the process lives, so a late answer never reaches
/// another client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(Token);

impl ClientId {
    /// The id as a number, for a sans-IO core that names clients so.
    pub fn number(self) -> u64 {
        self.0 .0 as u64
    }

    /// The id a core named by [`ClientId::number`].
    pub fn from_number(n: u64) -> Self {
        ClientId(Token(n as usize))
    }
}

struct Client<K> {
    ep: Endpoint,
    peer: PeerCred,
    /// The protocol it speaks, once its hello is accepted.
    kind: Option<K>,
}

/// Where a handler writes its answers.
pub struct Replies<'a, S: Service> {
    clients: &'a mut BTreeMap<Token, Client<S::Kind>>,
    touched: &'a mut BTreeSet<Token>,
}

impl<S: Service> Replies<'_, S> {
    /// Queues the answer to request `id` of `to`; false when that client
    /// is gone (the answer is dropped: nobody is waiting for it).
    pub fn send(&mut self, to: ClientId, id: u64, resp: &S::Response) -> bool {
        let Some(c) = self.clients.get_mut(&to.0) else {
            return false;
        };
        self.touched.insert(to.0);
        if let Err(e) = S::queue_reply(&mut c.ep, id, resp) {
            // The flush after this callback finds the client broken again
            // and drops it; say why once, here.
            msg_warn!("{}: client pid {}: {e}", S::LOG_NAME, c.peer.pid);
        }
        true
    }

    /// The identity of a connected client.
    pub fn peer(&self, of: ClientId) -> Option<&PeerCred> {
        self.clients.get(&of.0).map(|c| &c.peer)
    }
}

/// A daemon's side of an IPC service.
pub trait Handler<S: Service> {
    /// One request from `from`; answer it through `out` now or later.
    fn request(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Replies<'_, S>,
        from: ClientId,
        id: u64,
        req: S::Request,
    );
    /// The requests one event brought have all been handed over: work
    /// batched across them (qmgr's group commit) starts here.
    fn requests_done(&mut self, _cx: &mut Cx<'_>, _out: &mut Replies<'_, S>) {}
    /// Whether this peer may talk to us at all.
    fn allow(&self, _peer: &PeerCred) -> bool {
        true
    }
    /// Whether this peer may speak the protocol its hello chose; a client
    /// refused here is dropped before any request is read.
    fn admit(&self, _peer: &PeerCred, _kind: S::Kind) -> bool {
        true
    }
    /// Whether requests from clients of `kind` are read now. A handler
    /// with no use for them yet (qmgr while a commit runs: arrivals wait
    /// for the next one anyway) says no, and sleeps through their arrival
    /// instead of waking for each; they wait in the socket, and are read
    /// in the first turn it says yes again. Asked after every event when
    /// [`Handler::PAUSES`] is set; never otherwise.
    fn reading(&self, _kind: S::Kind) -> bool {
        true
    }
    /// Whether `reading` can ever say no: a handler that never pauses
    /// (every daemon but qmgr) spares its loop a walk over all its clients
    /// after each event (cleanup has one per pooled smtpd link).
    const PAUSES: bool = false;
    /// Called once before the first event, to register the handler's own
    /// event sources.
    fn start(&mut self, _cx: &mut Cx<'_>) {}
    /// A socket the handler registered itself is ready.
    fn ready(
        &mut self,
        _cx: &mut Cx<'_>,
        _out: &mut Replies<'_, S>,
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
    fn timeout(&mut self, _cx: &mut Cx<'_>, _out: &mut Replies<'_, S>) {}
    /// When `timeout` should next run.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// main.cf changed; false to retire the process (see [`Server::reload`]).
    fn reload(&mut self, _cx: &mut Cx<'_>, _config: &config::Config) -> bool {
        true
    }
    /// The process is about to exit: last answers (written once each,
    /// without waiting), then [`Handler::shutdown`].
    fn closing(&mut self, _out: &mut Replies<'_, S>) {}
    /// The process is about to exit.
    fn shutdown(&mut self) {}
}

/// Serves `S` with handler `H`.
pub struct IpcServer<S: Service, H: Handler<S>> {
    handler: H,
    clients: BTreeMap<Token, Client<S::Kind>>,
    /// Clients with answers queued since the last flush.
    touched: BTreeSet<Token>,
}

impl<S: Service, H: Handler<S>> IpcServer<S, H> {
    /// Wraps a handler.
    pub fn new(handler: H) -> Self {
        IpcServer {
            handler,
            clients: BTreeMap::new(),
            touched: BTreeSet::new(),
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
        f: impl FnOnce(&mut H, &mut Cx<'_>, &mut Replies<'_, S>) -> R,
    ) -> R {
        let mut out = Replies {
            clients: &mut self.clients,
            touched: &mut self.touched,
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
                msg_warn!("{}: client pid {}: {e}", S::LOG_NAME, c.peer.pid);
                self.drop_client(cx, token);
            }
        }
    }

    /// Pauses or resumes reading each client as the handler's `reading`
    /// now says; a client whose registration fails is dropped.
    fn pause_readers(&mut self, cx: &mut Cx<'_>) {
        if !H::PAUSES {
            debug_assert!(
                self.clients
                    .values()
                    .all(|c| c.kind.is_none_or(|k| self.handler.reading(k))),
                "{}: a handler whose `reading` says no must set PAUSES",
                S::LOG_NAME
            );
            return;
        }
        let mut failed = Vec::new();
        for (token, c) in &mut self.clients {
            let Some(kind) = c.kind else {
                continue;
            };
            let pause = !self.handler.reading(kind);
            if c.ep.reads_paused() != pause {
                if let Err(e) = c.ep.pause_reads(pause) {
                    msg_warn!("{}: client pid {}: {e}", S::LOG_NAME, c.peer.pid);
                    failed.push(*token);
                }
            }
        }
        for token in failed {
            self.drop_client(cx, token);
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
    fn serve(&mut self, cx: &mut Cx<'_>, token: Token, readable: bool) -> Result<bool, IpcError> {
        let closed = cx.closed;
        let Some(c) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        // Only what the event announced: no read that ends in EAGAIN, and
        // none at all for a writable event (the client took our answers).
        let open = if readable || closed {
            c.ep.read_event(closed)?
        } else {
            !c.ep.is_eof()
        };
        let kind = match c.kind {
            Some(k) => k,
            None => {
                let Some(hello) = c.ep.recv::<Hello>()? else {
                    return Ok(open);
                };
                let kind = match S::choose(&hello) {
                    Ok(k) => k,
                    Err(refused) => {
                        let wanted = match &refused {
                            HelloReply::Refused { protocol, version } => {
                                format!("{protocol} {version}")
                            }
                            HelloReply::Accepted => S::LOG_NAME.to_string(),
                        };
                        // The refusal tells the client why; it may not read it.
                        let _ = c.ep.send(&refused);
                        return Err(IpcError::Refused {
                            wanted,
                            got: format!("{} {}", hello.protocol, hello.version),
                        });
                    }
                };
                if !self.handler.admit(&c.peer, kind) {
                    return Err(IpcError::Refused {
                        wanted: format!("a client allowed to speak {kind:?}"),
                        got: format!("uid {}", c.peer.uid),
                    });
                }
                c.ep.send(&HelloReply::Accepted)?;
                c.kind = Some(kind);
                kind
            }
        };
        // Each request is handled as it is decoded, so a client streaming a
        // large message (cleanup's Data) is never buffered whole here.
        let from = ClientId(token);
        let mut handled = false;
        loop {
            let Some(c) = self.clients.get_mut(&token) else {
                return Ok(false);
            };
            let Some(req) = S::recv(&mut c.ep, kind)? else {
                break;
            };
            let mut out = Replies {
                clients: &mut self.clients,
                touched: &mut self.touched,
            };
            self.handler.request(cx, &mut out, from, req.id, req.body);
            handled = true;
        }
        if handled {
            self.with_replies(cx, |h, cx, out| h.requests_done(cx, out));
        }
        self.flush(cx);
        let Some(c) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        c.ep.write_ready()?;
        Ok(!c.ep.is_eof() || c.ep.wants_write())
    }
}

impl<S: Service, H: Handler<S>> Server for IpcServer<S, H> {
    fn start(&mut self, cx: &mut Cx<'_>) {
        self.handler.start(cx);
        self.pause_readers(cx);
    }

    fn accept(&mut self, cx: &mut Cx<'_>, conn: Conn) {
        let Conn::Unix(stream) = conn else {
            msg_warn!("{}: refusing a TCP client on an IPC service", S::LOG_NAME);
            return;
        };
        let mut ep = Endpoint::new(stream);
        let peer = match ep.peer() {
            Ok(p) => p,
            Err(e) => {
                msg_warn!("{}: {e}", S::LOG_NAME);
                return;
            }
        };
        if !self.handler.allow(&peer) {
            msg_warn!(
                "{}: refusing client uid {} pid {}",
                S::LOG_NAME,
                peer.uid,
                peer.pid
            );
            return;
        }
        let token = cx.token();
        if let Err(e) = ep.register(cx.registry, token) {
            msg_warn!("{}: register client: {e}", S::LOG_NAME);
            return;
        }
        self.clients.insert(
            token,
            Client {
                ep,
                peer,
                kind: None,
            },
        );
        // The client may have written before we registered: serve at once.
        self.ready(cx, token, true, true);
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, readable: bool, writable: bool) {
        if !self.clients.contains_key(&token) {
            self.with_replies(cx, |h, cx, out| h.ready(cx, out, token, readable, writable));
            self.pause_readers(cx);
            return;
        }
        match self.serve(cx, token, readable) {
            Ok(true) => {}
            Ok(false) => self.drop_client(cx, token),
            Err(e) => {
                let pid = self.clients.get(&token).map_or(0, |c| c.peer.pid);
                msg_warn!("{}: client pid {pid}: {e}", S::LOG_NAME);
                self.drop_client(cx, token);
            }
        }
        self.pause_readers(cx);
    }

    fn timeout(&mut self, cx: &mut Cx<'_>) {
        self.with_replies(cx, |h, cx, out| h.timeout(cx, out));
        self.pause_readers(cx);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.handler.next_deadline()
    }

    fn clients(&self) -> usize {
        self.clients.len() + self.handler.busy()
    }

    fn reload(&mut self, cx: &mut Cx<'_>, config: &config::Config) -> bool {
        let keep = self.handler.reload(cx, config);
        self.pause_readers(cx);
        keep
    }

    fn shutdown(&mut self) {
        let mut out = Replies {
            clients: &mut self.clients,
            touched: &mut self.touched,
        };
        self.handler.closing(&mut out);
        for token in std::mem::take(&mut self.touched) {
            if let Some(c) = self.clients.get_mut(&token) {
                // Leaving anyway: a client that does not take it loses it.
                let _ = c.ep.write_ready();
            }
        }
        self.handler.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::anvil::{Anvil, Request, Response};

    /// Answers every request later, at its next timeout, and records the
    /// clients that left.
    #[derive(Default)]
    struct Later {
        owed: Vec<(ClientId, u64)>,
        gone: Vec<ClientId>,
        late_answers_taken: Vec<bool>,
    }

    impl Handler<Anvil> for Later {
        fn request(
            &mut self,
            _cx: &mut Cx<'_>,
            _out: &mut Replies<'_, Anvil>,
            from: ClientId,
            id: u64,
            _req: Request,
        ) {
            self.owed.push((from, id));
        }

        fn timeout(&mut self, _cx: &mut Cx<'_>, out: &mut Replies<'_, Anvil>) {
            for (to, id) in self.owed.drain(..) {
                let taken = out.send(
                    to,
                    id,
                    &Response::Counts {
                        count: id as u32,
                        rate: 0,
                    },
                );
                self.late_answers_taken.push(taken);
            }
        }

        fn gone(&mut self, _cx: &mut Cx<'_>, client: ClientId) {
            self.gone.push(client);
        }
    }

    fn lookup(n: u64) -> Tagged<Request> {
        Tagged {
            id: n,
            body: Request::Lookup {
                service: "smtp".into(),
                client: format!("192.0.2.{n}"),
            },
        }
    }

    /// Reads what the server wrote until `want` answers (after the hello
    /// reply) have come.
    fn answers(ep: &mut Endpoint, want: usize) -> Vec<(u64, u32)> {
        let mut got = Vec::new();
        let mut hello_seen = false;
        for _ in 0..1000 {
            let _ = ep.read_ready().unwrap();
            if !hello_seen {
                match ep.recv::<HelloReply>().unwrap() {
                    Some(HelloReply::Accepted) => hello_seen = true,
                    Some(other) => panic!("hello refused: {other:?}"),
                    None => {}
                }
            }
            if hello_seen {
                while let Some(a) = ep.recv::<Tagged<Response>>().unwrap() {
                    let Response::Counts { count, .. } = a.body else {
                        panic!("ipcserver test: counts expected, got {:?}", a.body);
                    };
                    got.push((a.id, count));
                }
            }
            if got.len() >= want {
                return got;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        panic!("only {got:?} of {want} answers came");
    }

    #[test]
    fn answers_made_later_go_by_request_id_and_none_reaches_a_client_that_left() {
        let poll = mio::Poll::new().unwrap();
        let mut next = 1 << 16;
        let registry = std::rc::Rc::new(poll.registry().try_clone().unwrap());
        let mut cx = Cx::for_test(&registry, &mut next);
        let mut server: IpcServer<Anvil, Later> = IpcServer::new(Later::default());

        // Two clients, each with pipelined requests in front of the accept.
        let (a_srv, a_cli) = mio::net::UnixStream::pair().unwrap();
        let (b_srv, b_cli) = mio::net::UnixStream::pair().unwrap();
        let mut a = Endpoint::new(a_cli);
        let mut b = Endpoint::new(b_cli);
        for ep in [&mut a, &mut b] {
            ep.send(&Hello::of::<Anvil>()).unwrap();
        }
        a.send(&lookup(7)).unwrap();
        a.send(&lookup(9)).unwrap();
        b.send(&lookup(3)).unwrap();
        server.accept(&mut cx, Conn::Unix(a_srv));
        server.accept(&mut cx, Conn::Unix(b_srv));
        assert_eq!(server.clients(), 2);
        assert_eq!(server.handler().owed.len(), 3, "every request handed over");

        // b leaves before its answer is made: nobody is left to take it.
        drop(b);
        let b_token = server.handler().owed[2].0;
        server.ready(&mut cx, b_token.0, true, false);
        assert_eq!(server.handler().gone, vec![b_token]);
        assert_eq!(server.clients(), 1);

        // The answers made later reach a by their ids, in the order made.
        server.timeout(&mut cx);
        assert_eq!(server.handler().late_answers_taken, vec![true, true, false]);
        assert_eq!(answers(&mut a, 2), vec![(7, 7), (9, 9)]);
    }

    #[test]
    fn a_client_speaking_another_protocol_is_refused_and_dropped() {
        let poll = mio::Poll::new().unwrap();
        let mut next = 1 << 16;
        let registry = std::rc::Rc::new(poll.registry().try_clone().unwrap());
        let mut cx = Cx::for_test(&registry, &mut next);
        let mut server: IpcServer<Anvil, Later> = IpcServer::new(Later::default());
        let (srv, cli) = mio::net::UnixStream::pair().unwrap();
        let mut c = Endpoint::new(cli);
        c.send(&Hello::of::<ipc::router::Router>()).unwrap();
        c.send(&lookup(1)).unwrap();
        server.accept(&mut cx, Conn::Unix(srv));
        assert_eq!(server.clients(), 0, "dropped at the hello");
        assert!(server.handler().owed.is_empty(), "no request read");
        let _ = c.read_ready().unwrap();
        match c.recv::<HelloReply>().unwrap() {
            Some(HelloReply::Refused { .. }) => {}
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
