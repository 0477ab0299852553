//! The agent's callbacks: qmgr's requests and the connections they make.
//!
//! Served by the agent skeleton ([`agent::AgentServer`]). Each `Open`
//! becomes an [`SmtpConn`] on a socket of its own; `Send` queues a
//! transaction on it, `Close` lets it QUIT when idle. Socket events and
//! timeouts drive the connections, and what they have to say goes back to
//! qmgr through the skeleton. A reload keeps open connections on the
//! settings they started with.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use agent::{Agent, Answers, ConnId, OpenRequest};
use daemon::{msg_info, msg_warn, Context, Cx};
use ipc::delivery::{Response, Transaction};
use mio::Token;

use crate::conn::{Outcome, ProxyEvent, SmtpConn};
use crate::proxy::Proxies;
use crate::settings::{tls_level, Settings};

/// All of this process's connections.
pub struct SmtpAgent {
    settings: Arc<Settings>,
    /// Socket token → connection.
    conns: BTreeMap<Token, SmtpConn>,
    /// qmgr's connection → socket token.
    by_id: BTreeMap<ConnId, Token>,
    service: String,
    chrooted: bool,
    /// `smtp_tls_CAfile` as read at start (reloads cannot read it again).
    ca_file: String,
    /// This is lmtp(8).
    lmtp: bool,
    /// The loop turn's time, as the last callback saw it: a connection
    /// that wants driving again is due then, not at a later clock read
    /// (the skeleton reads the clock once per turn).
    turn: Instant,
    /// The egress proxies and which are down.
    proxies: Proxies,
}

impl SmtpAgent {
    /// Reads the settings.
    pub fn new(
        ctx: &Context,
        roots: Option<Arc<rustls::RootCertStore>>,
        lmtp: bool,
    ) -> Result<Self, String> {
        let chrooted = ctx.args.chroot && sys::is_root();
        let settings =
            Settings::from(&ctx.config, chrooted, &ctx.args.service, roots, lmtp)?.speaking(lmtp);
        Ok(SmtpAgent {
            proxies: Proxies::new(settings.proxies.clone()),
            settings: Arc::new(settings),
            lmtp,
            conns: BTreeMap::new(),
            by_id: BTreeMap::new(),
            service: ctx.args.service.clone(),
            turn: Instant::now(),
            chrooted,
            ca_file: ctx
                .config
                .transport(&ctx.args.service)
                .str("smtp_tls_CAfile"),
        })
    }

    /// Lets a connection act, passes on what it has to say, drops it when done.
    fn progress(&mut self, cx: &mut Cx<'_>, out: &mut Answers, token: Token) {
        self.turn = cx.now;
        let Some(c) = self.conns.get_mut(&token) else {
            return;
        };
        c.drive(cx);
        let (id, done) = (c.id, c.is_done());
        for ev in c.take_proxy_events() {
            match ev {
                ProxyEvent::Worked(proxy) => {
                    if self.proxies.worked(proxy) {
                        msg_info!("proxy {proxy} is taking connections again");
                    }
                }
                ProxyEvent::Failed(proxy, why) => {
                    if self.proxies.failed(proxy, cx.now) {
                        msg_warn!(
                            "proxy {proxy}: {why}: tried after the other proxies for {}s",
                            crate::proxy::DOWN_TIME.as_secs()
                        );
                    }
                    // qmgr counts it for monitoring.
                    let response = Response::ProxyFailed {
                        conn: id.conn,
                        proxy,
                    };
                    out.answer(id, 0, response);
                }
            }
        }
        for Outcome { request, response } in c.take_outcomes() {
            out.answer(id, request, response);
        }
        if done {
            if let Some(mut c) = self.conns.remove(&token) {
                c.deregister(cx.registry);
            }
            self.by_id.remove(&id);
        }
    }
}

impl Agent for SmtpAgent {
    fn open(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Answers,
        id: ConnId,
        request: u64,
        open: OpenRequest,
    ) {
        let token = cx.token();
        let proxies = self.proxies.order(cx.now);
        let c = SmtpConn::new(self.settings.clone(), id, request, open, proxies, token, cx);
        self.by_id.insert(id, token);
        self.conns.insert(token, c);
        self.progress(cx, out, token);
    }

    fn send(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Answers,
        id: ConnId,
        request: u64,
        txn: Transaction,
    ) {
        let Some(token) = self.by_id.get(&id).copied() else {
            return;
        };
        if let Some(c) = self.conns.get_mut(&token) {
            c.queue(request, txn, cx.now);
        }
        self.progress(cx, out, token);
    }

    fn close(&mut self, cx: &mut Cx<'_>, out: &mut Answers, id: ConnId, request: u64) {
        let Some(token) = self.by_id.get(&id).copied() else {
            return;
        };
        if let Some(c) = self.conns.get_mut(&token) {
            c.close_when_idle(request);
        }
        self.progress(cx, out, token);
    }

    fn abandon(&mut self, cx: &mut Cx<'_>, id: ConnId) {
        if let Some(mut c) = self.by_id.remove(&id).and_then(|t| self.conns.remove(&t)) {
            c.abandon();
            c.deregister(cx.registry);
        }
    }

    fn ready(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Answers,
        token: Token,
        readable: bool,
        writable: bool,
    ) {
        if let Some(c) = self.conns.get_mut(&token) {
            c.socket_ready(readable, writable, cx.closed);
            self.progress(cx, out, token);
        }
    }

    fn timeout(&mut self, cx: &mut Cx<'_>, out: &mut Answers) {
        let busy: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.wants_drive())
            .map(|(t, _)| *t)
            .collect();
        for t in busy {
            self.progress(cx, out, t);
        }
        let due: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline().is_some_and(|d| d <= cx.now))
            .map(|(t, _)| *t)
            .collect();
        for t in due {
            if let Some(c) = self.conns.get_mut(&t) {
                c.timed_out(cx.now);
            }
            self.progress(cx, out, t);
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        if self.conns.values().any(|c| c.wants_drive()) {
            return Some(self.turn);
        }
        self.conns.values().filter_map(|c| c.deadline()).min()
    }

    fn busy(&self) -> usize {
        self.conns.len()
    }

    fn reload(&mut self, _cx: &mut Cx<'_>, config: &config::Config) -> bool {
        // Open connections keep the settings they started with. The trust
        // anchors were read before privileges were dropped: a new CA file,
        // or verification where there was none, needs a restart.
        let roots = self.settings.roots.clone();
        let want_roots = tls_level(config, &self.service).authenticates()
            || config.transport(&self.service).bool("smtp_mta_sts");
        let ca_file = config.transport(&self.service).str("smtp_tls_CAfile");
        if ca_file != self.ca_file {
            msg_warn!(
                "reload: smtp_tls_CAfile changed: the trust anchors read at start stay until smtp restarts (sluice stop; sluice start)"
            );
        }
        if want_roots && roots.is_none() {
            // Applied all the same: without anchors a certificate cannot
            // verify, so mail that needs verification is deferred, never
            // sent in clear or to an unverified server.
            msg_warn!(
                "reload: certificate verification needs trust anchors read at start: deliveries that need it are deferred until smtp restarts (sluice stop; sluice start)"
            );
        }
        match Settings::from(config, self.chrooted, &self.service, roots, self.lmtp) {
            Ok(s) if self.lmtp => self.settings = Arc::new(s.speaking(true)),
            Ok(s) => {
                self.proxies.replace(s.proxies.clone());
                self.settings = Arc::new(s);
            }
            Err(e) => msg_warn!("reload: {e}; keeping the running settings"),
        }
        true
    }
}
