//! qmgr's links to the router, the delivery agents and cleanup (for
//! notices): `ipc::Peer`s, made on demand and again after a loss, whose
//! requests carry the queue manager's ids, so that answers and losses
//! reach it as events. Their log lines are worded by crates/qmgr's
//! `links`.

use std::collections::{BTreeMap, BTreeSet};
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
    /// Whether router requests are queued and not yet written.
    router_queued: bool,
    /// The agents with requests queued and not yet written.
    agents_queued: BTreeSet<String>,
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
            router_queued: false,
            agents_queued: BTreeSet::new(),
        }
    }

    /// Whether `token` is one of these links'.
    pub fn owns(&self, token: Token) -> bool {
        self.router.owns(token)
            || self.cleanup.owns(token)
            || self.agents.values().any(|a| a.owns(token))
    }

    /// Queues a router request for [`Links::flush`]; the link's loss if
    /// it is lost.
    pub fn send_router(
        &mut self,
        cx: &mut Cx<'_>,
        req: &ipc::router::Request,
        id: u64,
    ) -> Option<Event> {
        let lost = queue(&mut self.router, Link::Router, cx, req, id);
        self.router_queued |= lost.is_none();
        lost
    }

    /// Queues an agent request for [`Links::flush`]; the link's loss if
    /// it is lost.
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
        let lost = queue(a, Link::Agent(transport), cx, req, id);
        if lost.is_none() {
            self.agents_queued.insert(transport.to_string());
        }
        lost
    }

    /// Writes the router and agent requests queued in this loop turn, one
    /// write per link (a service woken once for all of them); the losses
    /// of the links that failed.
    pub fn flush(&mut self, registry: &Registry) -> Vec<Event> {
        let mut lost = Vec::new();
        if std::mem::take(&mut self.router_queued) {
            lost.extend(flushed(&mut self.router, Link::Router, registry));
        }
        for name in std::mem::take(&mut self.agents_queued) {
            if let Some(a) = self.agents.get_mut(&name) {
                lost.extend(flushed(a, Link::Agent(&name), registry));
            }
        }
        lost
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
    let error = p.send(registry, || cx.token(), reqs, id).err()?.error;
    unsent(p, link, error)
}

/// Queues `req` on `p` to be written by [`flushed`]; the link's loss,
/// logged as `link` words it, if it could not be.
fn queue<P: Protocol>(
    p: &mut Peer<P, u64>,
    link: Link<'_>,
    cx: &mut Cx<'_>,
    req: &P::Request,
    id: u64,
) -> Option<Event> {
    let registry = cx.registry;
    let error = p.send_later(registry, || cx.token(), req, id).err()?.error;
    unsent(p, link, error)
}

/// Writes what is queued on `p`; the link's loss, logged, if it failed.
fn flushed<P: Protocol>(
    p: &mut Peer<P, u64>,
    link: Link<'_>,
    registry: &Registry,
) -> Option<Event> {
    let error = p.flush(registry).err()?.error;
    unsent(p, link, error)
}

/// Logs why requests did not go out on `p`; the link's loss.
fn unsent<P: Protocol>(p: &Peer<P, u64>, link: Link<'_>, error: PeerError) -> Option<Event> {
    match error {
        PeerError::Connect(e) => msg_warn!("{}", link.connect_failed(p.path(), &e)),
        PeerError::Send(e) => {
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
