//! smtpd's link to Dovecot's auth server (`smtpd_sasl_type = dovecot`),
//! one per process, shared by its sessions.
//!
//! The socket is one more fd in the event loop: an exchange is begun,
//! continued and answered by events, so a session waiting for Dovecot
//! (which delays failures on purpose) holds up no other session. The
//! protocol is `sasl::dovecot::Client`; here are the socket, the map from
//! Dovecot's exchange ids to sessions, and deadlines
//! (`smtpd_sasl_timeout`). The link opens when the first session starts,
//! so the mechanisms are known before its EHLO; until a handshake has
//! succeeded, PLAIN and LOGIN are offered. A Dovecot that is down, breaks
//! the protocol or is late fails the exchanges it carried as temporary
//! (454 4.7.0), with one warning per outage; the next exchange connects
//! again.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use daemon::{msg_warn, Cx};
use mio::net::UnixStream;
use mio::{Interest, Token};
use sasl::dovecot::{AuthRequest, Client, Event, Mechanism};

/// What a session hears about its exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The next challenge (base64) for the client.
    Challenge(String),
    /// Authenticated as this user.
    Success(String),
    /// The credentials were refused; Dovecot's reason, if it gave one.
    Failure(Option<String>),
    /// No answer can be had now (Dovecot down, broken or late): why.
    Temporary(String),
}

/// `smtpd_sasl_security_options`: mechanisms not to offer, by their flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SecurityOptions {
    /// `noanonymous`.
    pub noanonymous: bool,
    /// `noplaintext`.
    pub noplaintext: bool,
    /// `nodictionary`.
    pub nodictionary: bool,
    /// `noactive`.
    pub noactive: bool,
}

impl SecurityOptions {
    /// From the words of the parameter (validated by the parameter table).
    pub fn parse(words: &[String]) -> Self {
        let has = |w: &str| words.iter().any(|x| x.eq_ignore_ascii_case(w));
        SecurityOptions {
            noanonymous: has("noanonymous"),
            noplaintext: has("noplaintext"),
            nodictionary: has("nodictionary"),
            noactive: has("noactive"),
        }
    }

    fn allows(&self, m: &Mechanism) -> bool {
        !(m.private
            || (self.noanonymous && m.anonymous)
            || (self.noplaintext && m.plaintext)
            || (self.nodictionary && m.dictionary)
            || (self.noactive && m.active))
    }
}

struct Connection {
    stream: UnixStream,
    token: Token,
    client: Client,
    /// Bytes the socket has not taken yet.
    outbuf: Vec<u8>,
    /// Whether writing is in the socket's registered interest: only while
    /// `outbuf` waits, since a Unix socket watched for writing wakes the
    /// loop each time Dovecot reads a request.
    writable: bool,
}

/// The link and the exchanges in progress.
pub struct SaslLink {
    path: PathBuf,
    timeout: Duration,
    options: SecurityOptions,
    conn: Option<Connection>,
    /// Dovecot's exchange id → the session and when it gives up.
    waiting: BTreeMap<u32, (Token, Instant)>,
    /// Outcomes for sessions decided outside an event on the link.
    orphans: Vec<(Token, Outcome)>,
    /// When the oldest of them was decided.
    orphaned_at: Option<Instant>,
    /// What EHLO offers.
    offer: Vec<String>,
    outage: bool,
}

impl SaslLink {
    /// A link to Dovecot's socket at `path`, opened when first needed.
    pub fn new(path: PathBuf, timeout: Duration, options: SecurityOptions) -> Self {
        let mut link = SaslLink {
            path,
            timeout,
            options,
            conn: None,
            waiting: BTreeMap::new(),
            orphans: Vec::new(),
            orphaned_at: None,
            offer: Vec::new(),
            outage: false,
        };
        link.offer = link.fallback_offer();
        link
    }

    /// Applies reloaded settings to later exchanges.
    pub fn configure(
        &mut self,
        cx: &mut Cx<'_>,
        path: PathBuf,
        timeout: Duration,
        options: SecurityOptions,
    ) {
        if path != self.path {
            self.path = path;
            // The next exchange connects to the new socket.
            let failed = self.drop_conn(cx, "the auth socket changed");
            self.orphan(cx.now, failed);
        }
        self.timeout = timeout;
        self.options = options;
        self.offer = match &self.conn {
            Some(c) if c.client.is_ready() => self.filtered(c.client.mechanisms()),
            _ => self.fallback_offer(),
        };
    }

    /// The mechanisms to offer in EHLO now.
    pub fn mechanisms(&self) -> &[String] {
        &self.offer
    }

    /// The token of the open link, if any.
    pub fn token(&self) -> Option<Token> {
        self.conn.as_ref().map(|c| c.token)
    }

    fn fallback_offer(&self) -> Vec<String> {
        if self.options.noplaintext {
            return Vec::new();
        }
        vec!["PLAIN".into(), "LOGIN".into()]
    }

    fn filtered(&self, mechs: &[Mechanism]) -> Vec<String> {
        mechs
            .iter()
            .filter(|m| self.options.allows(m))
            .map(|m| m.name.clone())
            .collect()
    }

    /// Opens the link if it is not open (at a session's start, so the
    /// mechanisms are known by its EHLO); a failure is only logged.
    pub fn prepare(&mut self, cx: &mut Cx<'_>) {
        if self.conn.is_none() {
            let _ = self.connect(cx);
        }
    }

    fn connect(&mut self, cx: &mut Cx<'_>) -> Result<(), String> {
        let mut stream = match UnixStream::connect(&self.path) {
            Ok(s) => s,
            Err(e) => {
                self.warn(format!(
                    "SASL: Connect to {} failed: {e}",
                    self.path.display()
                ));
                return Err(format!("connect to {}: {e}", self.path.display()));
            }
        };
        let token = cx.token();
        if let Err(e) = cx.registry.register(&mut stream, token, Interest::READABLE) {
            self.warn(format!("SASL: register {}: {e}", self.path.display()));
            return Err(e.to_string());
        }
        let mut client = Client::new(std::process::id());
        let outbuf = client.take_output();
        self.conn = Some(Connection {
            stream,
            token,
            client,
            outbuf,
            writable: false,
        });
        self.flush(cx);
        Ok(())
    }

    /// Begins an exchange for `session`; its outcomes come from `ready`,
    /// `expired` or `take_orphans`.
    pub fn begin(&mut self, cx: &mut Cx<'_>, session: Token, req: &AuthRequest<'_>) {
        if self.conn.is_none() {
            if let Err(e) = self.connect(cx) {
                self.orphan(cx.now, vec![(session, Outcome::Temporary(e))]);
                return;
            }
        }
        let conn = self.conn.as_mut().expect("connected above");
        match conn.client.begin(req) {
            Ok(id) => {
                self.waiting.insert(id, (session, cx.now + self.timeout));
                self.flush(cx);
            }
            // The session checked both; a refusal here is a failure, not an outage.
            Err(e) => self.orphan(
                cx.now,
                vec![(session, Outcome::Failure(Some(e.to_string())))],
            ),
        }
    }

    /// The client's response to the last challenge of `session`'s exchange.
    pub fn respond(&mut self, cx: &mut Cx<'_>, session: Token, response: &str) {
        let id = self.exchange_of(session);
        match (id, self.conn.as_mut()) {
            (Some(id), Some(conn)) => {
                if let Err(e) = conn.client.respond(id, response) {
                    self.forget(session);
                    let failed = vec![(session, Outcome::Failure(Some(e.to_string())))];
                    self.orphan(cx.now, failed);
                    return;
                }
                if let Some(w) = self.waiting.get_mut(&id) {
                    w.1 = cx.now + self.timeout;
                }
                self.flush(cx);
            }
            // The link went away since the challenge.
            _ => {
                let why = "connection to the auth server lost".to_string();
                self.orphan(cx.now, vec![(session, Outcome::Temporary(why))]);
            }
        }
    }

    /// Forgets `session`'s exchange (cancelled, or the session ended).
    pub fn forget(&mut self, session: Token) {
        if let Some(id) = self.exchange_of(session) {
            self.waiting.remove(&id);
            if let Some(c) = self.conn.as_mut() {
                c.client.forget(id);
            }
        }
        self.orphans.retain(|(s, _)| *s != session);
    }

    fn exchange_of(&self, session: Token) -> Option<u32> {
        self.waiting
            .iter()
            .find(|(_, (s, _))| *s == session)
            .map(|(id, _)| *id)
    }

    /// Outcomes decided without an event on the link (a failed connect,
    /// a refused request), to hand out now.
    pub fn take_orphans(&mut self) -> Vec<(Token, Outcome)> {
        self.orphaned_at = None;
        std::mem::take(&mut self.orphans)
    }

    fn orphan(&mut self, now: Instant, outcomes: Vec<(Token, Outcome)>) {
        if !outcomes.is_empty() {
            self.orphaned_at.get_or_insert(now);
            self.orphans.extend(outcomes);
        }
    }

    /// The link is ready: outcomes that arrived, by session.
    pub fn ready(&mut self, cx: &mut Cx<'_>) -> Vec<(Token, Outcome)> {
        let mut out = self.take_orphans();
        let Some(conn) = self.conn.as_mut() else {
            return out;
        };
        let mut buf = [0u8; 8192];
        let mut broken: Option<String> = None;
        loop {
            match conn.stream.read(&mut buf) {
                Ok(0) => {
                    broken = Some("connection closed by the auth server".into());
                    break;
                }
                Ok(n) => {
                    if let Err(e) = conn.client.feed(&buf[..n]) {
                        broken = Some(format!("protocol error: {e}"));
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    broken = Some(e.to_string());
                    break;
                }
            }
        }
        while let Some(ev) = conn.client.poll_event() {
            match ev {
                Event::Ready => {
                    self.outage = false;
                }
                Event::Continue { id, challenge } => {
                    if let Some((s, _)) = self.waiting.get(&id) {
                        out.push((*s, Outcome::Challenge(challenge)));
                    }
                }
                Event::Success { id, user } => {
                    if let Some((s, _)) = self.waiting.remove(&id) {
                        out.push((s, Outcome::Success(user)));
                    }
                }
                Event::Failure {
                    id,
                    reason,
                    temporary,
                } => {
                    if let Some((s, _)) = self.waiting.remove(&id) {
                        let outcome = if temporary {
                            Outcome::Temporary(reason.unwrap_or_else(|| "temporary failure".into()))
                        } else {
                            Outcome::Failure(reason)
                        };
                        out.push((s, outcome));
                    }
                }
            }
        }
        if let Some(c) = self.conn.as_ref().filter(|c| c.client.is_ready()) {
            self.offer = self.filtered(c.client.mechanisms());
        }
        match broken {
            Some(why) => {
                self.warn(format!("SASL: {}: {why}", self.path.display()));
                out.extend(self.drop_conn(cx, &why));
            }
            None => self.flush(cx),
        }
        out
    }

    /// Writes what the protocol has for the socket.
    fn flush(&mut self, cx: &mut Cx<'_>) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let more = conn.client.take_output();
        conn.outbuf.extend_from_slice(&more);
        let mut failure = None;
        while !conn.outbuf.is_empty() {
            match conn.stream.write(&conn.outbuf) {
                Ok(n) => {
                    conn.outbuf.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let want = !conn.outbuf.is_empty();
        if failure.is_none() && want != conn.writable {
            match cx
                .registry
                .reregister(&mut conn.stream, conn.token, evloop::interest(want))
            {
                Ok(()) => conn.writable = want,
                Err(e) => failure = Some(e),
            }
        }
        if let Some(e) = failure {
            let why = e.to_string();
            self.warn(format!("SASL: {}: {why}", self.path.display()));
            let failed = self.drop_conn(cx, &why);
            self.orphan(cx.now, failed);
        }
    }

    /// Exchanges whose deadline has passed, failed.
    pub fn expired(&mut self, now: Instant) -> Vec<(Token, Outcome)> {
        let late: Vec<u32> = self
            .waiting
            .iter()
            .filter(|(_, (_, d))| *d <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut out = self.take_orphans();
        for &id in &late {
            if let Some((session, _)) = self.waiting.remove(&id) {
                if let Some(c) = self.conn.as_mut() {
                    c.client.forget(id);
                }
                self.warn(format!(
                    "SASL: {}: no answer within smtpd_sasl_timeout ({}s)",
                    self.path.display(),
                    self.timeout.as_secs()
                ));
                out.push((session, Outcome::Temporary("timed out".into())));
            }
        }
        if !late.is_empty() && self.conn.as_ref().is_some_and(|c| !c.client.is_ready()) {
            // Connected but never through the handshake: a Dovecot that
            // accepts and says nothing. The next exchange connects anew;
            // dropping the socket also takes it out of the poll set.
            self.conn = None;
            out.extend(self.drop_waiting("no handshake from the auth server"));
        }
        out
    }

    /// The earliest deadline; already passed when outcomes wait to be handed out.
    pub fn next_deadline(&self) -> Option<Instant> {
        if !self.orphans.is_empty() {
            return self.orphaned_at;
        }
        self.waiting.values().map(|(_, d)| *d).min()
    }

    fn warn(&mut self, text: String) {
        if self.outage {
            return;
        }
        self.outage = true;
        msg_warn!("{text}");
    }

    /// Closes the link (AUTH turned off): the exchanges in progress fail.
    pub fn close(&mut self, cx: &mut Cx<'_>) -> Vec<(Token, Outcome)> {
        let mut out = self.take_orphans();
        out.extend(self.drop_conn(cx, "AUTH turned off"));
        out
    }

    fn drop_conn(&mut self, cx: &mut Cx<'_>, why: &str) -> Vec<(Token, Outcome)> {
        if let Some(mut c) = self.conn.take() {
            let _ = cx.registry.deregister(&mut c.stream);
        }
        self.drop_waiting(why)
    }

    fn drop_waiting(&mut self, why: &str) -> Vec<(Token, Outcome)> {
        std::mem::take(&mut self.waiting)
            .into_values()
            .map(|(s, _)| (s, Outcome::Temporary(why.to_string())))
            .collect()
    }
}
