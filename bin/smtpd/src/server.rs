//! The smtpd event loop's state: sessions by token, the pool of cleanup
//! links, anvil and the router, deadlines.
//!
//! A client whose connection anvil must count is held, unread and not yet
//! greeted, until anvil's answer (or its deadline) decides the greeting.
//! Behind a proxy (`smtpd_upstream_proxy_protocol`), a connection waits
//! for its PROXY header (`proxy.rs`) before even that, and the client it
//! names is the session's from then on. An AUTH goes to the one SASL link; with `smtpd_client_auth_rate_limit`
//! it first waits for anvil's count of the client's failures. With
//! `smtpd_client_message_rate_limit` (`smtpd_client_recipient_rate_limit`),
//! a MAIL (RCPT, VRFY) waits for anvil's count of it the same way.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use daemon::{msg_info, msg_warn, Conn as Accepted, Context, Cx, Server};
use mio::net::TcpStream;
use mio::{Interest, Token};

use crate::anvil::{Answer as AnvilAnswer, AnvilLink, Counts};
use crate::conn::{Conn, SaslRequest, Shared};
use crate::pool::Pool;
use crate::proxy::Via;
use crate::router::{Answer, RouterLink};
use crate::sasl::{Outcome, SaslLink};
use crate::settings;
use crate::verify::VerifyLink;

/// All sessions of this process.
pub struct SmtpServer {
    shared: Shared,
    conns: BTreeMap<Token, Conn>,
    /// The links to cleanup, lent to sessions one message at a time.
    pool: Pool,
    /// anvil, for the client connection limits; one link for all sessions.
    anvil: AnvilLink,
    /// Clients waiting for anvil's counts before their greeting, and
    /// what they sent after a PROXY header.
    pending: BTreeMap<Token, (TcpStream, SocketAddr, Via)>,
    /// Connections waiting for their PROXY header.
    proxied: crate::proxy::ProxyWait,
    /// The router, for reject_unlisted_recipient; one link for all sessions.
    router: RouterLink,
    /// qmgr's address verification, for reject_unverified_*; one link for all sessions.
    verify: VerifyLink,
    /// Dovecot's auth server, when AUTH is on; one link for all sessions.
    sasl: Option<SaslLink>,
    /// Milter sockets → the session they belong to.
    milter_owner: BTreeMap<Token, Token>,
    /// Sessions anvil counts (not the exempt ones).
    counted: std::collections::BTreeSet<Token>,
    service: String,
    chrooted: bool,
    /// What `shared.tls` was built from, for a reload to compare.
    tls_source: settings::TlsSource,
}

impl SmtpServer {
    /// Builds the server from the daemon context and the TLS configuration.
    pub fn new(ctx: &Context, tls: Option<Arc<rustls::ServerConfig>>) -> Result<Self, String> {
        let chrooted = ctx.args.chroot && sys::is_root();
        let s = settings::build(&ctx.config, tls.is_some(), chrooted)?;
        let sasl = s
            .sasl
            .as_ref()
            .map(|a| SaslLink::new(a.path.clone(), a.timeout, a.options));
        let auth_mechanisms = sasl
            .as_ref()
            .map(|l| l.mechanisms().to_vec())
            .unwrap_or_default();
        Ok(SmtpServer {
            sasl,
            router: RouterLink::new(&s.queue_root, s.router_timeout),
            verify: VerifyLink::new(&s.queue_root, s.verify_wait, s.router_timeout),
            pool: Pool::new(&s.queue_root, s.ipc_idle),
            anvil: AnvilLink::new(&s.queue_root, s.anvil_timeout),
            pending: BTreeMap::new(),
            proxied: crate::proxy::ProxyWait::default(),
            shared: Shared {
                space: crate::space::QueueSpace::new(s.queue_root.clone()),
                settings: s,
                tls,
                auth_mechanisms,
            },
            conns: BTreeMap::new(),
            milter_owner: BTreeMap::new(),
            counted: std::collections::BTreeSet::new(),
            service: ctx.args.service.clone(),
            chrooted,
            tls_source: settings::TlsSource::of(&ctx.config),
        })
    }

    /// Whether anvil must count this client: limits are set and it is not
    /// exempt (as in Postfix, exempt clients are not even counted).
    fn limited(&self, addr: SocketAddr) -> bool {
        let s = &self.shared.settings;
        if s.conn_count_limit == 0 && s.conn_rate_limit == 0 {
            return false;
        }
        let ip = addr.ip();
        !s.limit_exceptions.iter().any(|c| c.contains(ip))
    }

    /// The refusal text if anvil's counts put the client over its limits;
    /// no counts (anvil silent or gone) is no limit, as in Postfix.
    fn over_limits(&self, addr: SocketAddr, counts: Counts) -> Option<String> {
        let s = &self.shared.settings;
        let (count, rate) = counts?;
        let ip = addr.ip();
        let (count_limit, rate_limit, unit) =
            (s.conn_count_limit, s.conn_rate_limit, s.rate_unit.as_secs());
        if count_limit > 0 && count > count_limit {
            msg_warn!(
                "Connection concurrency limit exceeded: {count} from unknown[{ip}] for service {}",
                self.service
            );
            return Some(format!("Error: too many connections from {ip}"));
        }
        if rate_limit > 0 && rate > rate_limit {
            msg_warn!("Connection rate limit exceeded: {rate} from unknown[{ip}] for service {} per {unit}s", self.service);
            return Some(format!("Error: too many connections from {ip}"));
        }
        None
    }

    /// Starts the session of an accepted client: its greeting, then its input.
    fn start(
        &mut self,
        cx: &mut Cx<'_>,
        token: Token,
        stream: TcpStream,
        peer: SocketAddr,
        refuse: Option<String>,
        via: Via,
    ) {
        if let Some(sasl) = self.sasl.as_mut() {
            sasl.prepare(cx);
        }
        let mut c = Conn::new(stream, token, peer, &self.shared, (refuse, via), cx.now);
        let registered =
            cx.registry
                .register(c.socket(), token, Interest::READABLE | Interest::WRITABLE);
        for t in c.start_milters(cx, &self.shared) {
            self.milter_owner.insert(t, token);
        }
        self.conns.insert(token, c);
        if let Err(e) = registered {
            msg_warn!("register client: {e}");
            self.finish(cx, token);
            return;
        }
        self.after_io(cx, token);
    }

    /// A client is known (its PROXY header read, if one was due): its
    /// session starts, after anvil's counts when it is counted.
    fn admit(
        &mut self,
        cx: &mut Cx<'_>,
        token: Token,
        stream: TcpStream,
        peer: SocketAddr,
        via: Via,
    ) {
        msg_info!("connect from unknown[{}]", peer.ip());
        // Once the connection is sent, anvil counts it (even if it answers
        // too late): the disconnection is reported in any case.
        if self.limited(peer)
            && self
                .anvil
                .connect(cx, token, &self.service, peer.ip().to_string())
        {
            self.counted.insert(token);
            self.pending.insert(token, (stream, peer, via));
            return;
        }
        self.start(cx, token, stream, peer, None, via);
    }

    /// Starts the sessions whose counts came (or will not come), and
    /// goes on with the AUTH of those whose failures were counted.
    fn anvil_answers(&mut self, cx: &mut Cx<'_>, answers: Vec<(Token, AnvilAnswer)>) {
        for (token, answer) in answers {
            match answer {
                AnvilAnswer::Counts(counts) => {
                    if let Some((stream, peer, via)) = self.pending.remove(&token) {
                        let refuse = self.over_limits(peer, counts);
                        self.start(cx, token, stream, peer, refuse, via);
                    }
                }
                AnvilAnswer::AuthFailures(rate) => {
                    let limit = self
                        .shared
                        .settings
                        .sasl
                        .as_ref()
                        .map_or(0, |a| a.auth_rate_limit);
                    let Some(c) = self.conns.get_mut(&token) else {
                        continue;
                    };
                    let Some(begin) = c.take_held_auth() else {
                        continue;
                    };
                    match rate {
                        // The failures so far; one more AUTH would make rate + 1.
                        Some(rate) if limit > 0 && rate >= limit => {
                            c.auth_rate_refused(rate + 1, &self.service)
                        }
                        _ => Self::sasl_begin(&mut self.sasl, cx, token, c, begin),
                    }
                    self.after_io(cx, token);
                }
                AnvilAnswer::Rate(rate) => {
                    if let Some(c) = self.conns.get_mut(&token) {
                        c.rate_answer(cx, &mut self.pool, &self.shared, rate, &self.service);
                    }
                    self.after_io(cx, token);
                }
            }
        }
    }

    /// Sends a session's Begin to the SASL link.
    fn sasl_begin(
        sasl: &mut Option<SaslLink>,
        cx: &mut Cx<'_>,
        token: Token,
        c: &mut Conn,
        begin: SaslRequest,
    ) {
        let SaslRequest::Begin { mechanism, initial } = begin else {
            return;
        };
        let Some(link) = sasl.as_mut() else {
            c.sasl_outcome(Outcome::Temporary("AUTH is not enabled".into()));
            return;
        };
        let (local_ip, remote_ip, secured) = (c.local_ip(), c.peer.ip(), c.is_tls());
        let req = sasl::dovecot::AuthRequest {
            mechanism: &mechanism,
            initial: initial.as_deref(),
            local_ip,
            remote_ip,
            secured,
        };
        link.begin(cx, token, &req);
    }

    /// Hands the SASL server's outcomes to their sessions.
    fn sasl_outcomes(&mut self, cx: &mut Cx<'_>, outcomes: Vec<(Token, Outcome)>) {
        for (token, outcome) in outcomes {
            if let Some(c) = self.conns.get_mut(&token) {
                c.sasl_outcome(outcome);
            }
            self.after_io(cx, token);
        }
    }

    /// Whether the client's failed AUTH commands are counted: a limit is
    /// set and it is not exempt.
    fn auth_limited(&self, peer: SocketAddr) -> bool {
        let s = &self.shared.settings;
        let limit = s.sasl.as_ref().map_or(0, |a| a.auth_rate_limit);
        limit > 0 && !s.limit_exceptions.iter().any(|c| c.contains(peer.ip()))
    }

    /// Passes a session's AUTH steps on, and its failures to anvil.
    fn sasl_steps(&mut self, cx: &mut Cx<'_>, token: Token) {
        let Some(c) = self.conns.get_mut(&token) else {
            return;
        };
        let requests = c.take_sasl_requests();
        let failures = c.take_auth_failures();
        let peer = c.peer;
        if failures > 0 && self.auth_limited(peer) {
            for _ in 0..failures {
                self.anvil
                    .auth_failed(cx, &self.service, peer.ip().to_string());
            }
        }
        for req in requests {
            match req {
                SaslRequest::Begin { .. } => {
                    let counted = self.auth_limited(peer)
                        && self
                            .anvil
                            .auth_lookup(cx, token, &self.service, peer.ip().to_string());
                    let Some(c) = self.conns.get_mut(&token) else {
                        return;
                    };
                    if counted {
                        c.hold_auth(req);
                    } else {
                        Self::sasl_begin(&mut self.sasl, cx, token, c, req);
                    }
                }
                SaslRequest::Respond(r) => {
                    if let Some(link) = self.sasl.as_mut() {
                        link.respond(cx, token, &r);
                    }
                }
                SaslRequest::Cancel => {
                    if let Some(link) = self.sasl.as_mut() {
                        link.forget(token);
                    }
                }
            }
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>, token: Token) {
        let Some(mut c) = self.conns.remove(&token) else {
            return;
        };
        self.router.forget(token);
        self.verify.forget(token);
        self.anvil.forget(token);
        self.milter_owner.retain(|_, owner| *owner != token);
        if let Some(sasl) = self.sasl.as_mut() {
            sasl.forget(token);
        }
        c.shutdown(cx, &mut self.pool);
        msg_info!("disconnect from {} {}", c.client_label(), c.stats());
        if self.counted.remove(&token) {
            self.anvil
                .disconnect(cx, &self.service, c.peer.ip().to_string());
        }
    }

    /// Hands the router's answers (or failures) to the sessions waiting.
    fn router_answers(&mut self, cx: &mut Cx<'_>, answers: Vec<(Token, Answer)>) {
        for (token, answer) in answers {
            if let Some(c) = self.conns.get_mut(&token) {
                c.router_answer(cx, &mut self.pool, &self.shared, answer);
            }
            self.after_io(cx, token);
        }
    }

    /// Hands verification's answers (or failures) to the sessions waiting.
    fn verify_answers(&mut self, cx: &mut Cx<'_>, answers: Vec<(Token, policy::VerifyState)>) {
        for (token, answer) in answers {
            if let Some(c) = self.conns.get_mut(&token) {
                c.verify_answer(cx, &mut self.pool, &self.shared, answer);
            }
            self.after_io(cx, token);
        }
    }

    fn after_io(&mut self, cx: &mut Cx<'_>, token: Token) {
        if let Some(c) = self.conns.get_mut(&token) {
            c.drive(cx, &self.shared, &mut self.pool);
        }
        self.sasl_steps(cx, token);
        let done = match self.conns.get_mut(&token) {
            Some(c) => {
                // An answer given at once may raise the next question.
                loop {
                    if let Some((address, smtputf8)) = c.take_router_question() {
                        if let Err(e) = self.router.ask(cx, token, address, smtputf8) {
                            c.router_answer(cx, &mut self.pool, &self.shared, Err(e));
                            c.drive(cx, &self.shared, &mut self.pool);
                        }
                    } else if let Some(event) = c.take_rate_question() {
                        let client = c.peer.ip().to_string();
                        if !self.anvil.event(cx, token, &self.service, client, event) {
                            // No anvil: no limit, as in Postfix.
                            c.rate_answer(cx, &mut self.pool, &self.shared, None, &self.service);
                            c.drive(cx, &self.shared, &mut self.pool);
                        }
                    } else if let Some(address) = c.take_verify_question() {
                        if let Err(e) = self.verify.ask(cx, token, address) {
                            let failed = policy::VerifyState::Failed(e);
                            c.verify_answer(cx, &mut self.pool, &self.shared, failed);
                            c.drive(cx, &self.shared, &mut self.pool);
                        }
                    } else {
                        break;
                    }
                }
                if c.take_rearm() {
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    if let Err(e) = cx.registry.reregister(c.socket(), token, interest) {
                        msg_warn!("register client again: {e}");
                    }
                }
                c.is_done()
            }
            None => false,
        };
        if done {
            self.finish(cx, token);
        }
    }
}

impl Server for SmtpServer {
    fn accept(&mut self, cx: &mut Cx<'_>, conn: Accepted) {
        let Accepted::Tcp(stream, peer) = conn else {
            msg_warn!("smtpd: ignoring a Unix-domain client");
            return;
        };
        // TCP_NODELAY comes from the listener (daemon::Options::tcp_nodelay).
        let token = cx.token();
        if let Some(timeout) = self.shared.settings.proxy {
            self.proxied.add(cx, token, stream, peer, timeout);
            return;
        }
        self.admit(cx, token, stream, peer, Via::default());
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, readable: bool, writable: bool) {
        if self.proxied.contains(token) {
            if let Some(a) = self.proxied.ready(cx, token) {
                self.admit(cx, token, a.stream, a.client, a.via);
            }
            return;
        }
        if self.router.token() == Some(token) {
            let answers = self.router.ready(cx);
            self.router_answers(cx, answers);
            return;
        }
        if self.verify.token() == Some(token) {
            let answers = self.verify.ready(cx);
            self.verify_answers(cx, answers);
            return;
        }
        if self.anvil.token() == Some(token) {
            let answers = self.anvil.ready(cx);
            self.anvil_answers(cx, answers);
            return;
        }
        if let Some(sasl) = self.sasl.as_mut().filter(|l| l.token() == Some(token)) {
            let outcomes = sasl.ready(cx);
            let mechs = sasl.mechanisms();
            if self.shared.auth_mechanisms != mechs {
                self.shared.auth_mechanisms = mechs.to_vec();
            }
            self.sasl_outcomes(cx, outcomes);
            return;
        }
        if let Some(&owner) = self.milter_owner.get(&token) {
            if let Some(c) = self.conns.get_mut(&owner) {
                c.milter_ready(cx, &mut self.pool, token);
            }
            self.after_io(cx, owner);
            return;
        }
        if let Some(owner) = self.pool.owner(token) {
            if let Some(c) = self.conns.get_mut(&owner) {
                c.link_ready(cx, &mut self.pool, readable);
            }
            self.after_io(cx, owner);
            return;
        }
        if self.pool.idle_event(cx, token, readable) {
            return;
        }
        if let Some(c) = self.conns.get_mut(&token) {
            c.socket_ready(cx, readable, writable);
        }
        self.after_io(cx, token);
    }

    fn timeout(&mut self, cx: &mut Cx<'_>) {
        let late = self.router.expired(cx.now);
        self.router_answers(cx, late);
        let late = self.verify.expired(cx.now);
        self.verify_answers(cx, late);
        let late = self.anvil.expired(cx.now);
        self.anvil_answers(cx, late);
        if let Some(sasl) = self.sasl.as_mut() {
            let late = sasl.expired(cx.now);
            self.sasl_outcomes(cx, late);
        }
        self.pool.expire(cx);
        self.proxied.expire(cx);
        let expired: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline() <= cx.now)
            .map(|(t, _)| *t)
            .collect();
        for t in expired {
            if let Some(c) = self.conns.get_mut(&t) {
                c.timed_out(cx, &mut self.pool);
            }
            self.after_io(cx, t);
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let sessions = self.conns.values().map(|c| c.deadline()).min();
        sessions
            .into_iter()
            .chain(self.router.next_deadline())
            .chain(self.verify.next_deadline())
            .chain(self.anvil.next_deadline())
            .chain(self.sasl.as_ref().and_then(|l| l.next_deadline()))
            .chain(self.pool.next_deadline())
            .chain(self.proxied.next_deadline())
            .min()
    }

    fn clients(&self) -> usize {
        self.conns.len() + self.pending.len() + self.proxied.len()
    }

    fn reload(&mut self, cx: &mut Cx<'_>, config: &config::Config) -> bool {
        if !self.tls_source.still(&settings::TlsSource::of(config)) {
            // Applying the rest in place would leave new sessions with the
            // old TLS: no STARTTLS, plaintext accepted under encrypt.
            // Sessions open now finish with what they started with.
            msg_info!("reload: TLS settings or certificate files changed: new sessions go to a fresh process");
            return false;
        }
        match settings::build(config, self.shared.tls.is_some(), self.chrooted) {
            // Sessions in progress keep their protocol settings; new ones get these.
            Ok(s) => {
                match (&s.sasl, self.sasl.as_mut()) {
                    (Some(a), Some(link)) => {
                        link.configure(cx, a.path.clone(), a.timeout, a.options)
                    }
                    (Some(a), None) => {
                        self.sasl = Some(SaslLink::new(a.path.clone(), a.timeout, a.options))
                    }
                    (None, _) => {
                        if let Some(mut link) = self.sasl.take() {
                            let failed = link.close(cx);
                            self.sasl_outcomes(cx, failed);
                        }
                    }
                }
                self.shared.auth_mechanisms = self
                    .sasl
                    .as_ref()
                    .map(|l| l.mechanisms().to_vec())
                    .unwrap_or_default();
                self.router.set_timeout(s.router_timeout);
                self.verify.set_times(s.verify_wait, s.router_timeout);
                self.anvil.set_timeout(s.anvil_timeout);
                self.pool.set_ttl(s.ipc_idle);
                self.shared.settings = s;
            }
            Err(e) => msg_warn!("reload: {e}; keeping the running settings"),
        }
        true
    }

    fn shutdown(&mut self) {
        // Clients in the middle of a transaction get a 421; nothing they
        // sent was acknowledged, so nothing is lost.
        for c in self.conns.values_mut() {
            c.say_goodbye();
        }
        // Clients still waiting for their greeting are only closed: no
        // reply was due to them yet.
        self.pending.clear();
        self.proxied.clear();
    }
}
