//! The router's event-loop shell: clients, the DNS transport, reloads.
//!
//! Resolve and rewrite requests are answered as they are read (tables are in memory);
//! hosts requests start a DNS job and are answered when it ends, in any
//! order, by request id, so a slow domain never holds up anything else.
//! A reload builds the new tables first and swaps them in only when they
//! all compiled: a bad table line is logged with file and line and the
//! running tables stay. Requests read before the swap were answered
//! already; DNS jobs in flight carry on.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use daemon::skeleton::{Conn, Cx, Server};
use daemon::{msg_info, msg_warn};
use dns::transport::Transport;
use dns::{Dns, JobId};
use ipc::router::{Request, Response, Router as Proto};
use ipc::{IpcError, Protocol, Tagged};
use mio::{Interest, Token};
use sys::creds::PeerCred;

use crate::convert;
use ipc::Endpoint as ClientConn;

struct Client {
    ep: ClientConn,
    peer: PeerCred,
}

/// What a finished system-resolver lookup sends back.
type NativeDone = (
    dns::NativeRequest,
    Result<Vec<std::net::IpAddr>, dns::DnsError>,
);

/// The router daemon's state.
pub struct RouterServer {
    router: route::Router,
    dns: Dns,
    transport: Transport,
    native_tx: Sender<NativeDone>,
    native_rx: Receiver<NativeDone>,
    waker: Option<(Arc<mio::Waker>, Token)>,
    clients: BTreeMap<Token, Client>,
    jobs: HashMap<JobId, (Token, u64)>,
    config_dir: PathBuf,
    overrides: Vec<(String, String)>,
}

impl RouterServer {
    /// A server over loaded settings and DNS.
    pub fn new(
        router: route::Router,
        dns: Dns,
        config_dir: PathBuf,
        overrides: Vec<(String, String)>,
    ) -> RouterServer {
        let (native_tx, native_rx) = channel();
        let transport = Transport::new(dns.resolver.config().timeout);
        RouterServer {
            router,
            dns,
            transport,
            native_tx,
            native_rx,
            waker: None,
            clients: BTreeMap::new(),
            jobs: HashMap::new(),
            config_dir,
            overrides,
        }
    }

    fn drop_client(&mut self, cx: &mut Cx<'_>, token: Token) {
        if let Some(mut c) = self.clients.remove(&token) {
            let _ = cx.registry.deregister(c.ep.stream());
        }
    }

    /// Reads and answers what a client has sent; false when it is gone.
    fn serve(&mut self, cx: &mut Cx<'_>, token: Token) -> Result<bool, IpcError> {
        let Some(c) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        let open = c.ep.read_ready()?;
        if !c.ep.accept_hello::<Proto>()? {
            return Ok(open);
        }
        let mut reqs = Vec::new();
        while let Some(req) = c.ep.recv::<Tagged<Request>>()? {
            reqs.push(req);
        }
        for req in reqs {
            self.request(cx, token, req);
        }
        let Some(c) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        c.ep.write_ready()?;
        Ok(!c.ep.is_eof() || c.ep.wants_write())
    }

    fn request(&mut self, cx: &mut Cx<'_>, token: Token, req: Tagged<Request>) {
        match req.body {
            Request::Resolve { address, smtputf8 } => {
                let r = self
                    .router
                    .classify(&address, smtputf8)
                    .and_then(|c| Ok((c, self.router.resolve(&address, smtputf8)?)));
                let r = convert::resolved(r);
                self.reply(token, req.id, &r);
            }
            Request::ResolveQueued { address, smtputf8 } => {
                let r = self
                    .router
                    .classify(&address, smtputf8)
                    .and_then(|c| Ok((c, vec![self.router.resolve_queued(&address, smtputf8)?])));
                let r = convert::resolved(r);
                self.reply(token, req.id, &r);
            }
            Request::Rewrite {
                sender,
                addresses,
                smtputf8,
            } => {
                let r = Response::Rewritten {
                    sender: convert::rewrite(
                        self.router
                            .rewrite_sender(&sender, smtputf8)
                            .map(|s| s.map(|s| vec![s])),
                    ),
                    recipients: addresses
                        .iter()
                        .map(|a| convert::rewrite(self.router.rewrite_recipient(a, smtputf8)))
                        .collect(),
                };
                self.reply(token, req.id, &r);
            }
            Request::Hosts { nexthop } => {
                let job = self.dns.hosts(&nexthop, cx.now);
                self.jobs.insert(job, (token, req.id));
                self.pump(cx);
            }
            Request::Reload => {
                match config::Config::load(&self.config_dir, &[]) {
                    Ok(l) => {
                        // master.cf's -o overrides hold on reload, as at start.
                        let mut c = l.config;
                        for (k, v) in &self.overrides {
                            let _ = c.set_override(k, v);
                        }
                        self.reload_from(&c)
                    }
                    Err(e) => msg_warn!("reload: {e}; keeping the running tables"),
                }
                self.reply(token, req.id, &Response::Reloaded);
            }
        }
    }

    fn reply(&mut self, token: Token, id: u64, r: &Response) {
        let Some(c) = self.clients.get_mut(&token) else {
            return;
        };
        // Answers go out in one write per batch (see `serve`).
        if let Err(e) = c.ep.queue_reply(id, r) {
            // The next readiness event finds the error again and drops it.
            msg_warn!("{}: client pid {}: {e}", Proto::NAME, c.peer.pid);
        }
    }

    /// Sends what DNS wants sent and answers the jobs that ended.
    fn pump(&mut self, cx: &mut Cx<'_>) {
        let (registry, now) = (cx.registry, cx.now);
        self.transport
            .flush(&mut self.dns, registry, &mut || cx.token(), now);
        while let Some(req) = self.dns.poll_native() {
            self.native_lookup(cx, req);
        }
        self.answer_jobs();
    }

    fn answer_jobs(&mut self) {
        let mut touched = std::collections::BTreeSet::new();
        while let Some((job, r)) = self.dns.poll_event() {
            if let Some((token, id)) = self.jobs.remove(&job) {
                let resp = convert::hosts(r);
                self.reply(token, id, &resp);
                touched.insert(token);
            }
        }
        // One write per client for the whole batch; an error shows again
        // on the client's next readiness event, which drops it.
        for token in touched {
            if let Some(c) = self.clients.get_mut(&token) {
                let _ = c.ep.write_ready();
            }
        }
    }

    /// smtp_host_lookup = native: getaddrinfo in a thread, so the loop
    /// never waits for it; the answer comes back through a channel and a waker.
    fn native_lookup(&mut self, cx: &mut Cx<'_>, req: dns::NativeRequest) {
        if self.waker.is_none() {
            let t = cx.token();
            match mio::Waker::new(cx.registry, t) {
                Ok(w) => self.waker = Some((Arc::new(w), t)),
                Err(e) => {
                    let r = Err(dns::DnsError::ServFail(format!(
                        "cannot start a lookup: {e}"
                    )));
                    self.dns.native_done(&req, r, cx.now);
                    return;
                }
            }
        }
        let Some((waker, _)) = self.waker.clone() else {
            return;
        };
        let tx = self.native_tx.clone();
        std::thread::spawn(move || {
            let r = dns::native_addresses(&req.name);
            let _ = tx.send((req, r));
            let _ = waker.wake();
        });
    }

    fn reload_from(&mut self, cfg: &config::Config) {
        match route::Settings::load(cfg) {
            Ok((s, warnings)) => {
                for w in warnings {
                    msg_warn!("{w}");
                }
                self.router = route::Router::new(s);
                self.dns.resolver.clear_cache();
                msg_info!("tables reloaded");
            }
            Err(e) => msg_warn!("reload: {e}; keeping the running tables"),
        }
    }
}

impl Server for RouterServer {
    fn accept(&mut self, cx: &mut Cx<'_>, conn: Conn) {
        let Conn::Unix(stream) = conn else {
            msg_warn!("{}: refusing a TCP client", Proto::NAME);
            return;
        };
        let ep = ClientConn::new(stream);
        let peer = match ep.peer() {
            Ok(p) => p,
            Err(e) => {
                msg_warn!("{}: {e}", Proto::NAME);
                return;
            }
        };
        // Only the mail system's own processes: root, or our own uid
        // (mail_owner, or the invoking user when unprivileged).
        if peer.uid != 0 && peer.uid != sys::current_ids().0 {
            msg_warn!(
                "{}: refusing client uid {} pid {}",
                Proto::NAME,
                peer.uid,
                peer.pid
            );
            return;
        }
        let token = cx.token();
        let mut c = Client { ep, peer };
        if let Err(e) = cx.registry.register(
            c.ep.stream(),
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            msg_warn!("{}: register client: {e}", Proto::NAME);
            return;
        }
        self.clients.insert(token, c);
        self.ready(cx, token, true, true);
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, _readable: bool, _writable: bool) {
        if self.waker.as_ref().is_some_and(|(_, t)| *t == token) {
            while let Ok((req, r)) = self.native_rx.try_recv() {
                self.dns.native_done(&req, r, cx.now);
            }
            self.answer_jobs();
            return;
        }
        if self
            .transport
            .ready(token, &mut self.dns, cx.registry, cx.now)
        {
            self.pump(cx);
            return;
        }
        match self.serve(cx, token) {
            Ok(true) => {}
            Ok(false) => self.drop_client(cx, token),
            Err(e) => {
                let pid = self.clients.get(&token).map_or(0, |c| c.peer.pid);
                msg_warn!("{}: client pid {pid}: {e}", Proto::NAME);
                self.drop_client(cx, token);
            }
        }
    }

    fn timeout(&mut self, cx: &mut Cx<'_>) {
        self.dns.resolver.handle_timeout(cx.now);
        self.transport.expire(&mut self.dns, cx.registry, cx.now);
        self.dns.poll(cx.now);
        self.pump(cx);
    }

    fn next_deadline(&self) -> Option<Instant> {
        [
            self.dns.resolver.poll_timeout(),
            self.transport.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn clients(&self) -> usize {
        self.clients.len()
    }

    fn reload(&mut self, _cx: &mut Cx<'_>, config: &config::Config) -> bool {
        self.reload_from(config);
        true
    }
}
