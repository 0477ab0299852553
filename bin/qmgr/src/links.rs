//! qmgr's links to the router, the delivery agents and cleanup (for
//! notices): `ipc::Peer`s, made on demand and again after a loss, whose
//! requests carry the queue manager's ids, so that answers and losses
//! reach it as events. Their log lines are worded by crates/qmgr's
//! `links`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use daemon::{msg_warn, Cx};
use ipc::cleanup::Cleanup;
use ipc::delivery::Delivery;
use ipc::peer::{Lost, PeerError};
use ipc::router::Router;
use ipc::{Peer, Protocol};
use mio::{Registry, Token};
use queue_manager::links::Link;
use queue_manager::Event;

/// Every link qmgr opens.
pub struct Links {
    root: PathBuf,
    router: Peer<Router, u64>,
    agents: BTreeMap<String, Peer<Delivery, u64>>,
    cleanup: Peer<Cleanup, u64>,
}

impl Links {
    /// Links to the services under `root`/private.
    pub fn new(root: &Path) -> Self {
        let root = root.join("private");
        Links {
            router: Peer::new(root.join("router")),
            cleanup: Peer::new(root.join("cleanup")),
            agents: BTreeMap::new(),
            root,
        }
    }

    /// Whether `token` is one of these links'.
    pub fn owns(&self, token: Token) -> bool {
        self.router.owns(token)
            || self.cleanup.owns(token)
            || self.agents.values().any(|a| a.owns(token))
    }

    /// Sends a router request; the link's loss if it is lost.
    pub fn send_router(
        &mut self,
        cx: &mut Cx<'_>,
        req: &ipc::router::Request,
        id: u64,
    ) -> Option<Event> {
        send(
            &mut self.router,
            Link::Router,
            cx,
            std::slice::from_ref(req),
            id,
        )
    }

    /// Sends an agent request; the link's loss if it is lost.
    pub fn send_agent(
        &mut self,
        cx: &mut Cx<'_>,
        transport: &str,
        req: &ipc::delivery::Request,
        id: u64,
    ) -> Option<Event> {
        let root = &self.root;
        let a = self
            .agents
            .entry(transport.to_string())
            .or_insert_with(|| Peer::new(root.join(transport)));
        send(a, Link::Agent(transport), cx, std::slice::from_ref(req), id)
    }

    /// Sends a notice (Begin, Data…, End); the link's loss if it is lost.
    pub fn send_cleanup(
        &mut self,
        cx: &mut Cx<'_>,
        reqs: &[ipc::cleanup::Request],
        notice: u64,
    ) -> Option<Event> {
        if reqs.is_empty() {
            // Nothing would ever settle it.
            let _ = self.cleanup.close(cx.registry);
            return Some(Event::CleanupLost);
        }
        send(&mut self.cleanup, Link::Cleanup, cx, reqs, notice)
    }

    /// Closes the cleanup link (its answers are given up).
    pub fn drop_cleanup(&mut self, registry: &Registry) {
        let _ = self.cleanup.close(registry);
    }

    /// Reads what a ready link says, as events for the queue manager:
    /// only what a `readable` event announced (`closed`: its read-closed
    /// flag), so no read ends in EAGAIN.
    pub fn ready(
        &mut self,
        registry: &Registry,
        token: Token,
        readable: bool,
        closed: bool,
    ) -> Vec<Event> {
        let mut out = Vec::new();
        if self.router.owns(token) {
            let h = self.router.event(registry, readable, closed);
            for (id, response) in h.answers {
                if let Some(request) = id {
                    out.push(Event::RouterAnswer { request, response });
                }
            }
            out.extend(lost(h.lost, Link::Router));
        } else if self.cleanup.owns(token) {
            let h = self.cleanup.event(registry, readable, closed);
            // Started answers Begin, which nobody waits for.
            for (id, response) in h.answers {
                if let Some(notice) = id {
                    out.push(Event::CleanupAnswer { notice, response });
                }
            }
            out.extend(lost(h.lost, Link::Cleanup));
        } else if let Some((name, a)) = self.agents.iter_mut().find(|(_, a)| a.owns(token)) {
            let h = a.event(registry, readable, closed);
            for (request, response) in h.answers {
                out.push(Event::AgentAnswer {
                    transport: name.clone(),
                    request,
                    response,
                });
            }
            out.extend(lost(h.lost, Link::Agent(name)));
        }
        out
    }
}

/// Sends `reqs` on `p`; the link's loss, logged as `link` words it, if
/// they did not go out.
fn send<P: Protocol>(
    p: &mut Peer<P, u64>,
    link: Link<'_>,
    cx: &mut Cx<'_>,
    reqs: &[P::Request],
    id: u64,
) -> Option<Event> {
    let registry = cx.registry;
    match p
        .send(registry, || cx.token(), reqs, id)
        .map_err(|u| u.error)
    {
        Ok(()) => return None,
        Err(PeerError::Connect(e)) => msg_warn!("{}", link.connect_failed(p.path(), &e)),
        Err(PeerError::Send(e)) => {
            if let Some(l) = link.send_failed(&e) {
                msg_warn!("{l}");
            }
        }
    }
    Some(link.lost())
}

/// The link's loss, if it was lost; a failure is logged.
fn lost(l: Option<Lost>, link: Link<'_>) -> Option<Event> {
    if let Some(Lost::Failed(e)) = &l {
        msg_warn!("{}", link.failed(e));
    }
    l.map(|_| link.lost())
}
