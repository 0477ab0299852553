//! The agent side of the delivery protocol, for any agent.
//!
//! Accepts qmgr's connections, does the handshake, decodes each tagged
//! request and hands it to the [`Agent`], which answers through
//! [`Answers`] at once or later (from a socket event or a timer of its
//! own); the answers are written back here, each with its request's id.
//! The skeleton keeps the set of connections qmgr has open with this
//! process, so every agent refuses a duplicate `Open`, defers a `Send`
//! on a connection that is not open and confirms a `Close` of one that is
//! already gone in the same way. When qmgr goes away its connections are
//! abandoned: nobody is left to hear about them. A frame that does not
//! decode ends that client's link (logged), never the process.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Instant;

use daemon::{msg_warn, Conn, Cx, Server};
use ipc::delivery::{Delivery, Handoff, Request, Response, Transaction};
use ipc::{Endpoint, IpcError, Tagged};
use mail::{Status, StatusCode};
use mio::Token;

/// A connection as qmgr names it: its link to us and its id there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId {
    /// qmgr's link to this process.
    pub client: Token,
    /// qmgr's id for the connection.
    pub conn: u64,
}

/// What an `Open` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRequest {
    /// The host name (for logs and TLS).
    pub host: String,
    /// The next-hop destination the host serves.
    pub nexthop: String,
    /// Its addresses with the port, to try in order.
    pub addrs: Vec<SocketAddr>,
}

/// Answers for qmgr, written out by the skeleton after each callback.
#[derive(Debug, Default)]
pub struct Answers {
    out: Vec<(Token, u64, Response)>,
}

impl Answers {
    /// Answers request `request` (0: unsolicited) about connection `id`.
    pub fn answer(&mut self, id: ConnId, request: u64, response: Response) {
        self.out.push((id.client, request, response));
    }

    /// Answers a `Send` with the same status for every recipient.
    pub fn all(
        &mut self,
        id: ConnId,
        request: u64,
        txn: &Transaction,
        status: &Status,
        conn_failed: bool,
        handoff: Handoff,
    ) {
        let results = txn.results(status);
        self.answer(
            id,
            request,
            Response::Sent {
                conn: id.conn,
                results,
                conn_failed,
                handoff,
            },
        );
    }
}

/// A delivery agent's callbacks; answers go to `out`.
pub trait Agent {
    /// Open connection `id` (qmgr waits for `Opened` or `OpenFailed`).
    fn open(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Answers,
        id: ConnId,
        request: u64,
        open: OpenRequest,
    );
    /// Run `txn` on connection `id` once it is free (answer `Sent`).
    fn send(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Answers,
        id: ConnId,
        request: u64,
        txn: Transaction,
    );
    /// Close connection `id` once its transactions are done (answer `Closed`).
    fn close(&mut self, cx: &mut Cx<'_>, out: &mut Answers, id: ConnId, request: u64);
    /// qmgr is gone: drop connection `id` without a word.
    fn abandon(&mut self, cx: &mut Cx<'_>, id: ConnId);
    /// A socket the agent registered is ready.
    fn ready(
        &mut self,
        _cx: &mut Cx<'_>,
        _out: &mut Answers,
        _token: Token,
        _readable: bool,
        _writable: bool,
    ) {
    }
    /// The deadline from `next_deadline` has passed.
    fn timeout(&mut self, _cx: &mut Cx<'_>, _out: &mut Answers) {}
    /// When `timeout` should next run.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// Sockets of its own in use (for the process's busy count).
    fn busy(&self) -> usize {
        0
    }
    /// main.cf changed: apply it (true) or retire the process (false).
    fn reload(&mut self, cx: &mut Cx<'_>, config: &config::Config) -> bool;
}

/// Serves `sluice-delivery` for an [`Agent`].
pub struct AgentServer<A: Agent> {
    agent: A,
    service: String,
    clients: BTreeMap<Token, Endpoint>,
    /// Connections qmgr has opened and not yet seen closed.
    open: BTreeSet<ConnId>,
}

impl<A: Agent> AgentServer<A> {
    /// Serves `agent` for master.cf service `service` (named in warnings).
    pub fn new(agent: A, service: &str) -> Self {
        AgentServer {
            agent,
            service: service.to_string(),
            clients: BTreeMap::new(),
            open: BTreeSet::new(),
        }
    }

    /// The agent, for inspection.
    pub fn agent(&self) -> &A {
        &self.agent
    }

    /// Writes answers; a connection reported failed or closed is no longer open.
    fn deliver(&mut self, out: Answers) {
        for (client, request, response) in out.out {
            if let Response::OpenFailed { conn, .. } | Response::Closed { conn, .. } = &response {
                self.open.remove(&ConnId {
                    client,
                    conn: *conn,
                });
            }
            if let Some(ep) = self.clients.get_mut(&client) {
                if let Err(e) = ep.queue_reply(request, &response) {
                    msg_warn!("{}: qmgr link: {e}", self.service);
                }
            }
        }
    }

    fn handle(&mut self, cx: &mut Cx<'_>, client: Token, req: Tagged<Request>) {
        let mut out = Answers::default();
        match req.body {
            Request::Open {
                conn,
                host,
                nexthop,
                addrs,
            } => {
                let id = ConnId { client, conn };
                if self.open.insert(id) {
                    let open = OpenRequest {
                        host,
                        nexthop,
                        addrs,
                    };
                    self.agent.open(cx, &mut out, id, req.id, open);
                } else {
                    // Not OpenFailed: that would forget the open one.
                    msg_warn!("{}: qmgr opened connection {conn} twice", self.service);
                    let reason = Status::new(
                        StatusCode::SYSTEM_TEMP,
                        format!("connection {conn} already exists"),
                    );
                    if let Some(ep) = self.clients.get_mut(&client) {
                        let resp = Response::OpenFailed {
                            conn,
                            handshake: false,
                            reason,
                        };
                        if let Err(e) = ep.reply(req.id, &resp) {
                            msg_warn!("{}: qmgr link: {e}", self.service);
                        }
                    }
                }
            }
            Request::Send { conn, txn } => {
                let id = ConnId { client, conn };
                if self.open.contains(&id) {
                    self.agent.send(cx, &mut out, id, req.id, *txn);
                } else {
                    let why = Status::new(StatusCode::NETWORK_TEMP, "connection is not open");
                    // Nothing was delivered, so the hand-off does not matter.
                    out.all(id, req.id, &txn, &why, true, Handoff::Relayed);
                }
            }
            Request::Close { conn } => {
                let id = ConnId { client, conn };
                if self.open.contains(&id) {
                    self.agent.close(cx, &mut out, id, req.id);
                } else {
                    out.answer(id, req.id, Response::Closed { conn, reason: None });
                }
            }
        }
        self.deliver(out);
    }

    fn serve(&mut self, cx: &mut Cx<'_>, token: Token) -> Result<bool, IpcError> {
        let Some(ep) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        let open = ep.read_ready()?;
        if !ep.accept_hello::<Delivery>()? {
            return Ok(open);
        }
        loop {
            let Some(ep) = self.clients.get_mut(&token) else {
                return Ok(false);
            };
            let Some(req) = ep.recv::<Tagged<Request>>()? else {
                break;
            };
            self.handle(cx, token, req);
        }
        let Some(ep) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        ep.write_ready()?;
        Ok(!ep.is_eof() || ep.wants_write())
    }

    fn drop_client(&mut self, cx: &mut Cx<'_>, token: Token) {
        if let Some(mut ep) = self.clients.remove(&token) {
            let _ = cx.registry.deregister(ep.stream());
        }
        let orphans: Vec<ConnId> = self
            .open
            .iter()
            .filter(|id| id.client == token)
            .copied()
            .collect();
        for id in orphans {
            self.open.remove(&id);
            self.agent.abandon(cx, id);
        }
    }

    /// Flushes what answers left in the clients' buffers.
    fn flush(&mut self, cx: &mut Cx<'_>) {
        let broken: Vec<Token> = self
            .clients
            .iter_mut()
            .filter(|(_, ep)| ep.wants_write())
            .filter_map(|(t, ep)| match ep.write_ready() {
                Ok(_) => None,
                Err(e) => {
                    msg_warn!("{}: qmgr link: {e}", self.service);
                    Some(*t)
                }
            })
            .collect();
        for t in broken {
            self.drop_client(cx, t);
        }
    }
}

impl<A: Agent> Server for AgentServer<A> {
    fn accept(&mut self, cx: &mut Cx<'_>, conn: Conn) {
        let Conn::Unix(stream) = conn else {
            msg_warn!(
                "{}: refusing a TCP client on a delivery service",
                self.service
            );
            return;
        };
        let token = cx.token();
        let Ok(ep) = Endpoint::registered(stream, cx.registry, token) else {
            return;
        };
        self.clients.insert(token, ep);
        // qmgr may have written before we registered: serve at once.
        self.ready(cx, token, true, true);
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, readable: bool, writable: bool) {
        if !self.clients.contains_key(&token) {
            let mut out = Answers::default();
            self.agent.ready(cx, &mut out, token, readable, writable);
            self.deliver(out);
            self.flush(cx);
            return;
        }
        match self.serve(cx, token) {
            Ok(true) => {}
            Ok(false) => self.drop_client(cx, token),
            Err(e) => {
                msg_warn!("{}: qmgr link: {e}", self.service);
                self.drop_client(cx, token);
            }
        }
    }

    fn timeout(&mut self, cx: &mut Cx<'_>) {
        let mut out = Answers::default();
        self.agent.timeout(cx, &mut out);
        self.deliver(out);
        self.flush(cx);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.agent.next_deadline()
    }

    fn clients(&self) -> usize {
        self.clients.len() + self.agent.busy()
    }

    fn reload(&mut self, cx: &mut Cx<'_>, config: &config::Config) -> bool {
        self.agent.reload(cx, config)
    }
}
