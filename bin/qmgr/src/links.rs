//! qmgr's links to the router, the delivery agents and cleanup (for
//! notices), and the carrying out of the queue manager's actions on them.
//!
//! The queue manager names its requests with its own ids; a link's wire
//! ids are mapped back here, so its answers reach it as events. A link
//! that cannot be made, fails, or closes is reported as lost (the queue
//! manager defers or requeues what waited on it) and made afresh by the
//! next request.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use daemon::{msg_warn, Cx};
use ipc::cleanup::Cleanup;
use ipc::delivery::Delivery;
use ipc::router::Router;
use ipc::{Link, Protocol};
use mio::{Registry, Token};
use queue_manager::Event;

/// One link and the queue manager's ids of the requests on it.
struct Named<P: Protocol> {
    link: Link<P>,
    /// Wire id → the queue manager's id.
    ids: HashMap<u64, u64>,
}

impl<P: Protocol> Named<P> {
    fn connect(path: &Path, cx: &mut Cx<'_>) -> Result<Self, ipc::IpcError> {
        let t = cx.token();
        Ok(Named {
            link: Link::connect(path, cx.registry, t)?,
            ids: HashMap::new(),
        })
    }

    /// Sends `req` as the queue manager's `id`.
    fn send(&mut self, req: &P::Request, id: u64) -> Result<u64, ipc::IpcError> {
        let wire = self.link.send(req)?;
        self.ids.insert(wire, id);
        Ok(wire)
    }
}

/// Every link qmgr opens.
pub struct Links {
    root: PathBuf,
    router: Option<Named<Router>>,
    agents: BTreeMap<String, Named<Delivery>>,
    cleanup: Option<Named<Cleanup>>,
}

impl Links {
    /// Links to the services under `root`/private.
    pub fn new(root: &Path) -> Self {
        Links {
            root: root.join("private"),
            router: None,
            agents: BTreeMap::new(),
            cleanup: None,
        }
    }

    /// Whether `token` is one of these links'.
    pub fn owns(&self, token: Token) -> bool {
        self.router
            .as_ref()
            .is_some_and(|r| r.link.token() == token)
            || self
                .cleanup
                .as_ref()
                .is_some_and(|c| c.link.token() == token)
            || self.agents.values().any(|a| a.link.token() == token)
    }

    /// Sends a router request; `false` when the link is lost.
    pub fn send_router(&mut self, cx: &mut Cx<'_>, req: &ipc::router::Request, id: u64) -> bool {
        if self.router.is_none() {
            let path = self.root.join("router");
            match Named::connect(&path, cx) {
                Ok(l) => self.router = Some(l),
                Err(e) => {
                    msg_warn!("connect to router {}: {e}", path.display());
                    return false;
                }
            }
        }
        let ok = self
            .router
            .as_mut()
            .is_some_and(|r| r.send(req, id).is_ok());
        if !ok {
            drop_link(&mut self.router, cx.registry);
        }
        ok
    }

    /// Sends an agent request; `false` when the link is lost.
    pub fn send_agent(
        &mut self,
        cx: &mut Cx<'_>,
        transport: &str,
        req: &ipc::delivery::Request,
        id: u64,
    ) -> bool {
        if !self.agents.contains_key(transport) {
            let path = self.root.join(transport);
            match Named::connect(&path, cx) {
                Ok(l) => {
                    self.agents.insert(transport.to_string(), l);
                }
                Err(e) => {
                    msg_warn!("connect to delivery agent {}: {e}", path.display());
                    return false;
                }
            }
        }
        let ok = self
            .agents
            .get_mut(transport)
            .is_some_and(|a| a.send(req, id).is_ok());
        if !ok {
            let mut gone = self.agents.remove(transport);
            drop_link(&mut gone, cx.registry);
        }
        ok
    }

    /// Sends a notice (Begin, Data…, End); `false` when the link is lost.
    pub fn send_cleanup(
        &mut self,
        cx: &mut Cx<'_>,
        reqs: &[ipc::cleanup::Request],
        notice: u64,
    ) -> bool {
        if self.cleanup.is_none() {
            match Named::connect(&self.root.join("cleanup"), cx) {
                Ok(l) => self.cleanup = Some(l),
                Err(e) => {
                    msg_warn!("connect to cleanup for notices: {e}");
                    return false;
                }
            }
        }
        let Some(c) = self.cleanup.as_mut() else {
            return false;
        };
        let mut last = None;
        for r in reqs {
            match c.link.send(r) {
                Ok(wire) => last = Some(wire),
                Err(e) => {
                    msg_warn!("cleanup link for notices: {e}");
                    last = None;
                    break;
                }
            }
        }
        match last {
            // Only the answer to End settles the notice.
            Some(wire) => {
                c.ids.insert(wire, notice);
                true
            }
            None => {
                drop_link(&mut self.cleanup, cx.registry);
                false
            }
        }
    }

    /// Closes the cleanup link (its answers are given up).
    pub fn drop_cleanup(&mut self, registry: &Registry) {
        drop_link(&mut self.cleanup, registry);
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
        let ev = (readable, closed);
        let mut out = Vec::new();
        if self
            .router
            .as_ref()
            .is_some_and(|r| r.link.token() == token)
        {
            let r = self.router.as_mut().expect("checked");
            let lost = read(&mut r.link, ev, "router", |wire, response| {
                if let Some(request) = r.ids.remove(&wire) {
                    out.push(Event::RouterAnswer { request, response });
                }
            });
            if lost {
                drop_link(&mut self.router, registry);
                out.push(Event::RouterLost);
            }
        } else if self
            .cleanup
            .as_ref()
            .is_some_and(|c| c.link.token() == token)
        {
            let c = self.cleanup.as_mut().expect("checked");
            let lost = read(
                &mut c.link,
                ev,
                "cleanup link for notices",
                |wire, response| {
                    // Started answers Begin, which nobody waits for.
                    if let Some(notice) = c.ids.remove(&wire) {
                        out.push(Event::CleanupAnswer { notice, response });
                    }
                },
            );
            if lost {
                drop_link(&mut self.cleanup, registry);
                out.push(Event::CleanupLost);
            }
        } else if let Some(name) = self
            .agents
            .iter()
            .find(|(_, a)| a.link.token() == token)
            .map(|(n, _)| n.clone())
        {
            let a = self.agents.get_mut(&name).expect("found");
            let what = format!("delivery agent {name}");
            let lost = read(&mut a.link, ev, &what, |wire, response| {
                out.push(Event::AgentAnswer {
                    transport: name.clone(),
                    request: a.ids.remove(&wire),
                    response,
                });
            });
            if lost {
                let mut gone = self.agents.remove(&name);
                drop_link(&mut gone, registry);
                out.push(Event::AgentLost { transport: name });
            }
        }
        out
    }
}

/// Reads a link's answers; whether the link is lost.
fn read<P: Protocol>(
    link: &mut Link<P>,
    (readable, closed): (bool, bool),
    what: &str,
    mut answer: impl FnMut(u64, P::Response),
) -> bool {
    match link.event(readable, closed) {
        Ok(answers) => {
            for (wire, resp) in answers {
                answer(wire, resp);
            }
            link.is_closed()
        }
        Err(e) => {
            msg_warn!("{what}: {e}");
            true
        }
    }
}

fn drop_link<P: Protocol>(l: &mut Option<Named<P>>, registry: &Registry) {
    if let Some(mut n) = l.take() {
        n.link.deregister(registry);
    }
}
