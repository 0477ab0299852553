//! The agent's clients (qmgr) and connections.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use daemon::{msg_warn, Conn as Accepted, Context, Cx, Server};
use ipc::delivery::{Delivery, Request, Response};
use ipc::{Endpoint, Tagged};
use mio::Token;
use smtp_proto::client_session::{ClientConfig, ClientTls};

use crate::conn::{Outcome, SmtpConn};

/// `smtp_tls_security_level`, as Postfix defines the levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsLevel {
    /// No STARTTLS.
    None,
    /// STARTTLS when offered, any certificate.
    May,
    /// STARTTLS required, any certificate.
    Encrypt,
    /// STARTTLS required, chain verified, names per `smtp_tls_verify_cert_match`.
    Verify,
    /// STARTTLS required, chain verified, names per `smtp_tls_secure_cert_match`.
    Secure,
}

impl TlsLevel {
    /// Whether the server's certificate must be verified.
    pub fn authenticates(self) -> bool {
        matches!(self, TlsLevel::Verify | TlsLevel::Secure)
    }
}

/// One `smtp_tls_*_cert_match` strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertMatch {
    /// The server's host name (the MX name or the relay's name).
    Hostname,
    /// The next-hop domain.
    Nexthop,
    /// Any name below the next-hop domain.
    DotNexthop,
}

/// Settings from main.cf.
pub struct Settings {
    /// The session engine's settings.
    pub client: ClientConfig,
    /// TLS client configuration when TLS may be used.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// `smtp_tls_security_level`.
    pub tls_level: TlsLevel,
    /// Trust anchors to class server certificates with (always there for
    /// verify and secure; for may and encrypt only to log Trusted/Untrusted).
    pub roots: Option<Arc<rustls::RootCertStore>>,
    /// The names a certificate must match at this level.
    pub cert_match: Vec<CertMatch>,
    /// `smtp_bind_address`.
    pub bind: Option<std::net::IpAddr>,
    /// `smtp_connect_timeout`.
    pub connect_timeout: Duration,
    /// `smtp_helo_timeout`.
    pub helo_timeout: Duration,
    /// `smtp_rcpt_timeout` (and MAIL).
    pub cmd_timeout: Duration,
    /// `smtp_data_xfer_timeout`.
    pub xfer_timeout: Duration,
    /// `smtp_data_done_timeout`.
    pub done_timeout: Duration,
    /// Where message files are.
    pub queue_root: PathBuf,
}

fn tls_level(cfg: &config::Config, service: &str) -> TlsLevel {
    match cfg.transport(service).choice("smtp_tls_security_level") {
        "may" => TlsLevel::May,
        "encrypt" => TlsLevel::Encrypt,
        "verify" => TlsLevel::Verify,
        "secure" => TlsLevel::Secure,
        _ => TlsLevel::None,
    }
}

/// Privileged initialisation (before any chroot): the trust anchors.
///
/// A CA file that cannot be read is fatal at verify and secure, where
/// nothing could be delivered without it; at may and encrypt it only costs
/// the Trusted/Untrusted distinction in the logs.
pub fn load_roots(ctx: &Context) -> Result<Option<Arc<rustls::RootCertStore>>, String> {
    let level = tls_level(&ctx.config, &ctx.args.service);
    if level == TlsLevel::None {
        return Ok(None);
    }
    let file = ctx
        .config
        .transport(&ctx.args.service)
        .str("smtp_tls_CAfile");
    let path = if file.is_empty() {
        tls::SYSTEM_CA_FILE.to_string()
    } else {
        file
    };
    match tls::load_trust_anchors(std::path::Path::new(&path)) {
        Ok(r) => Ok(Some(r)),
        Err(e) if level.authenticates() => Err(format!(
            "smtp_tls_CAfile: {e} (needed by smtp_tls_security_level = {})",
            if level == TlsLevel::Verify {
                "verify"
            } else {
                "secure"
            }
        )),
        Err(e) => {
            msg_warn!("smtp_tls_CAfile: {e}: server certificates are not checked");
            Ok(None)
        }
    }
}

impl Settings {
    fn from(
        cfg: &config::Config,
        chrooted: bool,
        service: &str,
        roots: Option<Arc<rustls::RootCertStore>>,
    ) -> Result<Settings, String> {
        let t = cfg.transport(service);
        let tls_level = tls_level(cfg, service);
        let tls = match tls_level {
            TlsLevel::None => ClientTls::Disabled,
            TlsLevel::May => ClientTls::Opportunistic,
            _ => ClientTls::Required,
        };
        let match_param = match tls_level {
            TlsLevel::Secure => "smtp_tls_secure_cert_match",
            _ => "smtp_tls_verify_cert_match",
        };
        // The values were checked at load against the table's words.
        let cert_match = t
            .list(match_param)
            .iter()
            .filter_map(|w| match w.to_ascii_lowercase().as_str() {
                "hostname" => Some(CertMatch::Hostname),
                "nexthop" => Some(CertMatch::Nexthop),
                "dot-nexthop" => Some(CertMatch::DotNexthop),
                _ => None,
            })
            .collect::<Vec<_>>();
        if tls_level.authenticates() && cert_match.is_empty() {
            return Err(format!(
                "{match_param} is empty: no certificate name could match"
            ));
        }
        let bind = cfg.str("smtp_bind_address");
        let bind = if bind.is_empty() {
            None
        } else {
            Some(
                bind.parse()
                    .map_err(|_| format!("smtp_bind_address = {bind}: not an IP address"))?,
            )
        };
        Ok(Settings {
            client: ClientConfig {
                helo_name: cfg.str("smtp_helo_name"),
                tls,
                discard_ehlo_keywords: t.list("smtp_discard_ehlo_keywords"),
                ..ClientConfig::default()
            },
            // Certificates are checked after the handshake (as Postfix
            // does), so that may and encrypt can still say what they got.
            tls: (tls != ClientTls::Disabled).then(tls::insecure_client_config),
            tls_level,
            roots,
            cert_match,
            bind,
            connect_timeout: t.time("smtp_connect_timeout"),
            helo_timeout: t.time("smtp_helo_timeout"),
            cmd_timeout: t.time("smtp_rcpt_timeout"),
            xfer_timeout: t.time("smtp_data_xfer_timeout"),
            done_timeout: t.time("smtp_data_done_timeout"),
            queue_root: if chrooted {
                PathBuf::from("/")
            } else {
                PathBuf::from(cfg.str("queue_directory"))
            },
        })
    }
}

struct Client {
    ep: Endpoint,
}

/// All of this process's clients and connections.
pub struct AgentServer {
    settings: Arc<Settings>,
    clients: BTreeMap<Token, Client>,
    /// Socket token → connection.
    conns: BTreeMap<Token, SmtpConn>,
    /// (client, qmgr's conn id) → socket token.
    by_id: BTreeMap<(Token, u64), Token>,
    service: String,
    chrooted: bool,
    /// `smtp_tls_CAfile` as read at start (reloads cannot read it again).
    ca_file: String,
}

impl AgentServer {
    /// Reads the settings.
    pub fn new(ctx: &Context, roots: Option<Arc<rustls::RootCertStore>>) -> Result<Self, String> {
        let chrooted = ctx.args.chroot && sys::is_root();
        Ok(AgentServer {
            settings: Arc::new(Settings::from(
                &ctx.config,
                chrooted,
                &ctx.args.service,
                roots,
            )?),
            clients: BTreeMap::new(),
            conns: BTreeMap::new(),
            by_id: BTreeMap::new(),
            service: ctx.args.service.clone(),
            chrooted,
            ca_file: ctx
                .config
                .transport(&ctx.args.service)
                .str("smtp_tls_CAfile"),
        })
    }

    fn respond(&mut self, client: Token, id: u64, resp: Response) {
        if let Some(c) = self.clients.get_mut(&client) {
            if let Err(e) = c.ep.reply(id, &resp) {
                msg_warn!("qmgr: {e}");
            }
        }
    }

    fn handle(&mut self, cx: &mut Cx<'_>, client: Token, req: Tagged<Request>) {
        match req.body {
            Request::Open {
                conn,
                host,
                nexthop,
                addrs,
            } => {
                if self.by_id.contains_key(&(client, conn)) {
                    self.respond(
                        client,
                        req.id,
                        Response::OpenFailed {
                            conn,
                            handshake: false,
                            reason: format!("connection {conn} already exists"),
                        },
                    );
                    return;
                }
                let token = cx.token();
                let c = SmtpConn::new(
                    self.settings.clone(),
                    client,
                    conn,
                    req.id,
                    host,
                    nexthop,
                    addrs,
                    token,
                    cx,
                );
                self.by_id.insert((client, conn), token);
                self.conns.insert(token, c);
                self.progress(cx, token);
            }
            Request::Send { conn, txn } => match self.by_id.get(&(client, conn)).copied() {
                Some(token) => {
                    if let Some(c) = self.conns.get_mut(&token) {
                        c.queue(req.id, *txn, cx.now);
                    }
                    self.progress(cx, token);
                }
                None => {
                    let results = crate::conn::all(&txn, 421, "4.4.0", "connection is not open");
                    self.respond(
                        client,
                        req.id,
                        Response::Sent {
                            conn,
                            results,
                            conn_failed: true,
                            // Nothing was delivered.
                            handoff: ipc::delivery::Handoff::Relayed,
                        },
                    );
                }
            },
            Request::Close { conn } => match self.by_id.get(&(client, conn)).copied() {
                Some(token) => {
                    if let Some(c) = self.conns.get_mut(&token) {
                        c.close_when_idle(req.id);
                    }
                    self.progress(cx, token);
                }
                None => self.respond(
                    client,
                    req.id,
                    Response::Closed {
                        conn,
                        reason: String::new(),
                    },
                ),
            },
        }
    }

    /// Lets a connection act, delivers what it has to say, drops it when done.
    fn progress(&mut self, cx: &mut Cx<'_>, token: Token) {
        let Some(c) = self.conns.get_mut(&token) else {
            return;
        };
        c.drive(cx);
        let (client, id, outcomes, done) = (c.client, c.id, c.take_outcomes(), c.is_done());
        for Outcome { request, response } in outcomes {
            self.respond(client, request, response);
        }
        if done {
            if let Some(mut c) = self.conns.remove(&token) {
                c.deregister(cx.registry);
            }
            self.by_id.remove(&(client, id));
        }
    }

    fn serve(&mut self, cx: &mut Cx<'_>, token: Token) -> Result<bool, ipc::IpcError> {
        let Some(c) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        let open = c.ep.read_ready()?;
        if !c.ep.accept_hello::<Delivery>()? {
            return Ok(open);
        }
        loop {
            let Some(c) = self.clients.get_mut(&token) else {
                return Ok(false);
            };
            let Some(req) = c.ep.recv::<Tagged<Request>>()? else {
                break;
            };
            self.handle(cx, token, req);
        }
        let Some(c) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        c.ep.write_ready()?;
        Ok(!c.ep.is_eof() || c.ep.wants_write())
    }

    fn drop_client(&mut self, cx: &mut Cx<'_>, token: Token) {
        if let Some(mut c) = self.clients.remove(&token) {
            let _ = cx.registry.deregister(c.ep.stream());
        }
        // qmgr is gone: its connections have no one to report to.
        let orphans: Vec<Token> = self
            .by_id
            .iter()
            .filter(|((c, _), _)| *c == token)
            .map(|(_, t)| *t)
            .collect();
        for t in orphans {
            if let Some(mut c) = self.conns.remove(&t) {
                c.abandon();
                c.deregister(cx.registry);
                self.by_id.remove(&(token, c.id));
            }
        }
    }
}

impl Server for AgentServer {
    fn reload(&mut self, _cx: &mut Cx<'_>, config: &config::Config) -> bool {
        // Open connections keep the settings they started with. The trust
        // anchors were read before privileges were dropped: a new CA file,
        // or verification where there was none, needs a restart.
        let roots = self.settings.roots.clone();
        let want_roots = tls_level(config, &self.service).authenticates();
        let ca_file = config.transport(&self.service).str("smtp_tls_CAfile");
        if ca_file != self.ca_file {
            msg_warn!(
                "reload: smtp_tls_CAfile changed: the trust anchors read at start stay until smtp restarts (sluice stop; sluice start)"
            );
        }
        match Settings::from(config, self.chrooted, &self.service, roots.clone()) {
            Ok(_) if want_roots && roots.is_none() => msg_warn!(
                "reload: certificate verification needs trust anchors read at start; restart smtp (sluice stop; sluice start)"
            ),
            Ok(s) => self.settings = Arc::new(s),
            Err(e) => msg_warn!("reload: {e}; keeping the running settings"),
        }
        true
    }

    fn accept(&mut self, cx: &mut Cx<'_>, conn: Accepted) {
        let Accepted::Unix(stream) = conn else { return };
        let token = cx.token();
        let Ok(ep) = Endpoint::registered(stream, cx.registry, token) else {
            return;
        };
        self.clients.insert(token, Client { ep });
        self.ready(cx, token, true, true);
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, readable: bool, writable: bool) {
        if self.conns.contains_key(&token) {
            if let Some(c) = self.conns.get_mut(&token) {
                c.socket_ready(readable, writable);
            }
            self.progress(cx, token);
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
        let busy: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.wants_drive())
            .map(|(t, _)| *t)
            .collect();
        for t in busy {
            self.progress(cx, t);
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
            self.progress(cx, t);
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        if self.conns.values().any(|c| c.wants_drive()) {
            return Some(Instant::now());
        }
        self.conns.values().filter_map(|c| c.deadline()).min()
    }

    fn clients(&self) -> usize {
        self.clients.len() + self.conns.len()
    }
}
