//! The agent side of the delivery protocol, for any agent.
//!
//! A [`daemon::ipcserver::Handler`] for `sluice-delivery`: the IPC server
//! accepts qmgr's connections, does the handshake and decodes each tagged
//! request; this hands it to the [`Agent`], which answers through
//! [`Answers`] at once or later (from a socket event or a timer of its
//! own), and the answers go back with their requests' ids. The skeleton keeps the set of connections qmgr has open with this
//! process, so every agent refuses a duplicate `Open`, defers a `Send`
//! on a connection that is not open and confirms a `Close` of one that is
//! already gone in the same way. When qmgr goes away its connections are
//! abandoned: nobody is left to hear about them. A frame that does not
//! decode ends that client's link (logged), never the process.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Instant;

use daemon::ipcserver::{ClientId, Handler, IpcServer, Replies};
use daemon::{msg_warn, Cx};
use ipc::delivery::{Delivery, Handoff, Request, Response, Transaction};
use mail::{Status, StatusCode};
use mio::Token;

/// A connection as qmgr names it: its link to us and its id there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId {
    /// qmgr's link to this process.
    pub client: ClientId,
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
    /// The local address to bind (the shaping policy's source), over the
    /// agent's own setting.
    pub source: Option<std::net::IpAddr>,
    /// The host's DANE standing, for smtp's `dane` security levels.
    pub dane: ipc::delivery::Dane,
}

/// Answers for qmgr, written out by the skeleton after each callback.
#[derive(Debug, Default)]
pub struct Answers {
    out: Vec<(ClientId, u64, Response)>,
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

/// Serves `sluice-delivery` for an [`Agent`] (inside an [`IpcServer`]).
pub struct AgentServer<A: Agent> {
    agent: A,
    service: String,
    /// Connections qmgr has opened and not yet seen closed.
    open: BTreeSet<ConnId>,
}

impl<A: Agent> AgentServer<A> {
    /// The daemon serving `agent` for master.cf service `service` (named
    /// in warnings).
    pub fn serve(agent: A, service: &str) -> IpcServer<Delivery, Self> {
        IpcServer::new(AgentServer {
            agent,
            service: service.to_string(),
            open: BTreeSet::new(),
        })
    }

    /// The agent, for inspection.
    pub fn agent(&self) -> &A {
        &self.agent
    }

    /// Sends answers; a connection reported failed or closed is no longer open.
    fn deliver(&mut self, out: &mut Replies<'_, Delivery>, answers: Answers) {
        for (client, request, response) in answers.out {
            if let Response::OpenFailed { conn, .. } | Response::Closed { conn, .. } = &response {
                self.open.remove(&ConnId {
                    client,
                    conn: *conn,
                });
            }
            out.send(client, request, &response);
        }
    }
}

impl<A: Agent> Handler<Delivery> for AgentServer<A> {
    fn request(
        &mut self,
        cx: &mut Cx<'_>,
        replies: &mut Replies<'_, Delivery>,
        client: ClientId,
        request: u64,
        req: Request,
    ) {
        let mut out = Answers::default();
        match req {
            Request::Open {
                conn,
                host,
                nexthop,
                addrs,
                source,
                dane,
            } => {
                let id = ConnId { client, conn };
                if self.open.insert(id) {
                    let open = OpenRequest {
                        host,
                        nexthop,
                        addrs,
                        source,
                        dane,
                    };
                    self.agent.open(cx, &mut out, id, request, open);
                } else {
                    // Not OpenFailed: that would forget the open one.
                    msg_warn!("{}: qmgr opened connection {conn} twice", self.service);
                    let reason = Status::new(
                        StatusCode::SYSTEM_TEMP,
                        format!("connection {conn} already exists"),
                    );
                    replies.send(
                        client,
                        request,
                        &Response::OpenFailed {
                            conn,
                            failure: ipc::delivery::OpenFailure::Local,
                            reason,
                            remote: None,
                        },
                    );
                }
            }
            Request::Send { conn, txn } => {
                let id = ConnId { client, conn };
                if self.open.contains(&id) {
                    self.agent.send(cx, &mut out, id, request, *txn);
                } else {
                    let why = Status::new(StatusCode::NETWORK_TEMP, "connection is not open");
                    // Nothing was delivered, so the hand-off does not matter.
                    out.all(id, request, &txn, &why, true, Handoff::Relayed);
                }
            }
            Request::Close { conn } => {
                let id = ConnId { client, conn };
                if self.open.contains(&id) {
                    self.agent.close(cx, &mut out, id, request);
                } else {
                    out.answer(id, request, Response::Closed { conn, reason: None });
                }
            }
        }
        self.deliver(replies, out);
    }

    fn gone(&mut self, cx: &mut Cx<'_>, client: ClientId) {
        // The qmgr that named those segments may be gone for good.
        crate::content::forget_segments();
        let orphans: Vec<ConnId> = self
            .open
            .iter()
            .filter(|id| id.client == client)
            .copied()
            .collect();
        for id in orphans {
            self.open.remove(&id);
            self.agent.abandon(cx, id);
        }
    }

    fn ready(
        &mut self,
        cx: &mut Cx<'_>,
        replies: &mut Replies<'_, Delivery>,
        token: Token,
        readable: bool,
        writable: bool,
    ) {
        let mut out = Answers::default();
        self.agent.ready(cx, &mut out, token, readable, writable);
        self.deliver(replies, out);
    }

    fn timeout(&mut self, cx: &mut Cx<'_>, replies: &mut Replies<'_, Delivery>) {
        let mut out = Answers::default();
        self.agent.timeout(cx, &mut out);
        self.deliver(replies, out);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.agent.next_deadline()
    }

    fn busy(&self) -> usize {
        self.agent.busy()
    }

    fn reload(&mut self, cx: &mut Cx<'_>, config: &config::Config) -> bool {
        self.agent.reload(cx, config)
    }
}
