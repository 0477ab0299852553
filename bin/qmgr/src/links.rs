//! qmgr's links to the router, the delivery agents and cleanup (for
//! notices): `ipc::Peer`s, made on demand and again after a loss, whose
//! requests carry the queue manager's ids, so that answers and losses
//! reach it as events. Only the wording of the log lines is here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use daemon::{msg_warn, Cx};
use ipc::cleanup::Cleanup;
use ipc::delivery::Delivery;
use ipc::peer::{Lost, PeerError};
use ipc::router::Router;
use ipc::{Peer, Protocol};
use mio::{Registry, Token};
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

    /// Sends a router request; `false` when the link is lost.
    pub fn send_router(&mut self, cx: &mut Cx<'_>, req: &ipc::router::Request, id: u64) -> bool {
        let r = send(&mut self.router, cx, std::slice::from_ref(req), id);
        sent(
            r,
            |e| format!("connect to router {}: {e}", self.router.path().display()),
            None,
        )
    }

    /// Sends an agent request; `false` when the link is lost.
    pub fn send_agent(
        &mut self,
        cx: &mut Cx<'_>,
        transport: &str,
        req: &ipc::delivery::Request,
        id: u64,
    ) -> bool {
        let root = &self.root;
        let a = self
            .agents
            .entry(transport.to_string())
            .or_insert_with(|| Peer::new(root.join(transport)));
        let r = send(a, cx, std::slice::from_ref(req), id);
        let path = a.path().display().to_string();
        sent(
            r,
            |e| format!("connect to delivery agent {path}: {e}"),
            None,
        )
    }

    /// Sends a notice (Begin, Data…, End); `false` when the link is lost.
    pub fn send_cleanup(
        &mut self,
        cx: &mut Cx<'_>,
        reqs: &[ipc::cleanup::Request],
        notice: u64,
    ) -> bool {
        if reqs.is_empty() {
            // Nothing would ever settle it.
            let _ = self.cleanup.close(cx.registry);
            return false;
        }
        let r = send(&mut self.cleanup, cx, reqs, notice);
        sent(
            r,
            |e| format!("connect to cleanup for notices: {e}"),
            Some("cleanup link for notices"),
        )
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
            if lost(h.lost, "router") {
                out.push(Event::RouterLost);
            }
        } else if self.cleanup.owns(token) {
            let h = self.cleanup.event(registry, readable, closed);
            // Started answers Begin, which nobody waits for.
            for (id, response) in h.answers {
                if let Some(notice) = id {
                    out.push(Event::CleanupAnswer { notice, response });
                }
            }
            if lost(h.lost, "cleanup link for notices") {
                out.push(Event::CleanupLost);
            }
        } else if let Some((name, a)) = self.agents.iter_mut().find(|(_, a)| a.owns(token)) {
            let h = a.event(registry, readable, closed);
            for (request, response) in h.answers {
                out.push(Event::AgentAnswer {
                    transport: name.clone(),
                    request,
                    response,
                });
            }
            if lost(h.lost, &format!("delivery agent {name}")) {
                out.push(Event::AgentLost {
                    transport: name.clone(),
                });
            }
        }
        out
    }
}

fn send<P: Protocol>(
    p: &mut Peer<P, u64>,
    cx: &mut Cx<'_>,
    reqs: &[P::Request],
    id: u64,
) -> Result<(), PeerError> {
    let registry = cx.registry;
    p.send(registry, || cx.token(), reqs, id)
        .map_err(|u| u.error)
}

/// Whether a request went out; a failure is logged as `connect` words it,
/// or, for a failed write, as `what` does (`None`: not logged).
fn sent(
    r: Result<(), PeerError>,
    connect: impl FnOnce(&ipc::IpcError) -> String,
    what: Option<&str>,
) -> bool {
    match r {
        Ok(()) => true,
        Err(PeerError::Connect(e)) => {
            msg_warn!("{}", connect(&e));
            false
        }
        Err(PeerError::Send(e)) => {
            if let Some(what) = what {
                msg_warn!("{what}: {e}");
            }
            false
        }
    }
}

/// Whether a link was lost; a failure is logged.
fn lost(l: Option<Lost>, what: &str) -> bool {
    match l {
        None => false,
        Some(Lost::Closed) => true,
        Some(Lost::Failed(e)) => {
            msg_warn!("{what}: {e}");
            true
        }
    }
}
