//! One outbound SMTP connection and the transactions queued on it.
//!
//! Life: connect to each address in turn (connect timeout each), then the
//! session (greeting, EHLO/HELO, STARTTLS) until the engine says Ready,
//! which is reported as `Opened`; then transactions one after another as
//! qmgr queues them, content streamed from the spool in 64 KiB reads only
//! while the socket keeps up (memory stays bounded), with DATA or, when the
//! server offers CHUNKING, as BDAT chunks of one read each (the session
//! undoes the spool's dot-stuffing); `Close` ends it with
//! QUIT. A failure anywhere fails what is in flight with deferrals (never a
//! bounce: the peer did not say 5xx) and reports the connection closed; a
//! misbehaving peer can only end its own connection.
//!
//! For lmtp(8) a `unix:PATH` next hop is a Unix-domain socket (a relative
//! PATH is under the queue directory): qmgr's host lists hold IP
//! addresses, so the router gives such a next hop one placeholder address
//! and the connection goes to the path instead, logged as
//! `relay=HOST[PATH]`. An LMTP server's reply after the content for one
//! recipient is that recipient's outcome; if the connection breaks after
//! some of those replies came, their recipients keep them (a delivered
//! recipient is never deferred to be delivered twice).
//!
//! How the connection is made, directly or through the egress proxies
//! of `smtp_proxy`, is `connect`'s.
//!
//! At `dane` and `dane-only` the host's TLSA records (`crate::dane`)
//! decide per connection: a host that may not be used is deferred before
//! any connect; with usable records the handshake itself checks the
//! certificate, and a mismatch defers with the reason (4.7.5).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::{ConnId, Content, OpenRequest, Timing};
use daemon::{msg_info, Cx};
use ipc::delivery::{Handoff, OpenFailure, RcptResult, Response, Transaction};
use mail::{RemoteReply, Status, StatusCode};
use mio::{Registry, Token};
use smtp_proto::client_session::{ClientAction, ClientSession, Unsent};
use smtp_proto::Reply;

use rustls::pki_types::UnixTime;

use crate::dane::Policy;
use crate::results::{describe, envelope, nexthop_domain, result_of};
use crate::settings::{CertMatch, Settings};

mod connect;
pub use connect::ProxyEvent;

/// A response to deliver to qmgr.
pub struct Outcome {
    /// The request it answers (0: unsolicited).
    pub request: u64,
    /// The response.
    pub response: Response,
}

/// Why a connection was not set up, for what waited for it: 4.4.1 as
/// Postfix says when a host cannot be reached or will not talk.
fn unreached(why: impl Into<String>) -> Status {
    Status::new(StatusCode::NO_ANSWER, why)
}

/// A connection lost with transactions in flight or queued.
fn lost(why: impl Into<String>) -> Status {
    Status::new(StatusCode::CONNECTION_LOST, why)
}

struct Pending {
    request: u64,
    txn: Transaction,
    queued: Instant,
}

struct Active {
    request: u64,
    txn: Transaction,
    timing: Timing,
    /// Reply per position in `txn.recipients`.
    rcpt: Vec<Option<Reply>>,
    mail: Option<Reply>,
    /// Why the session gave the message up itself (no server said so).
    unsent: Option<Unsent>,
    /// The content and how far it has been sent.
    source: Option<(Content, u64)>,
    sending: bool,
    /// The content goes with BDAT (for "in reply to" texts).
    bdat: bool,
    /// LMTP: the reply after the content, per position in `txn.recipients`.
    delivered: Vec<Option<Reply>>,
}

enum Phase {
    Connecting,
    Session,
    Closed,
}

/// One connection.
pub struct SmtpConn {
    settings: Arc<Settings>,
    /// qmgr's name for it.
    pub id: ConnId,
    open_request: u64,
    host: String,
    nexthop: String,
    addrs: Vec<SocketAddr>,
    /// The address to bind, from qmgr's Open (the shaping policy's source).
    source: Option<std::net::IpAddr>,
    /// TLS for this host (the level, or what its TLSA records say).
    policy: Policy,
    next_addr: usize,
    token: Token,
    stream: Option<tls::Stream>,
    session: Option<ClientSession>,
    relay: String,
    phase: Phase,
    opened: bool,
    handshaking: bool,
    queue: VecDeque<Pending>,
    active: Option<Active>,
    close_request: Option<u64>,
    outcomes: Vec<Outcome>,
    deadline: Option<Instant>,
    inbuf: Vec<u8>,
    uses: u32,
    readable: bool,
    /// An event said the peer closed its side: read to the end, since
    /// nothing will announce it again.
    read_closed: bool,
    writable: bool,
    /// Whether writing is in a Unix socket's registered interest (LMTP):
    /// only while output waits, since a Unix socket watched for writing
    /// wakes the loop each time the server reads a command. A TCP socket
    /// is always watched: TCP reports room only to a writer that found
    /// none.
    watching_out: bool,
    connect_started: Instant,
    setup: Duration,
    errors: Vec<String>,
    /// Addresses passed over for the source address's family.
    family_skips: usize,
    done: bool,
    stage: &'static str,
    again: bool,
    /// The MTA-STS policy of the next hop's domain, when it has one.
    sts: Option<crate::sts::Check>,
    /// The egress proxies in the order to try them (none: direct).
    proxies: Vec<std::net::SocketAddr>,
    /// The proxy to try next, in `proxies`.
    proxy_at: usize,
    /// The proxy the current socket goes to.
    via: Option<std::net::SocketAddr>,
    /// The PROXY header went out on this connection: the host's address
    /// index has moved past the address the proxy was asked for.
    header_sent: bool,
    /// Why each proxy tried failed, for the reason when all did.
    proxy_errors: Vec<String>,
    /// Proxy outcomes not yet taken by the agent.
    proxy_events: Vec<ProxyEvent>,
    /// Sockets given up on, to take off the loop at the next connect step.
    stale: Vec<tls::Stream>,
    /// Connect again (next proxy or next address) at the next step.
    redial: bool,
}

const INBUF: usize = 64 * 1024;

impl SmtpConn {
    /// Whether the server took the DSN parameters (it then sends any
    /// success notice itself), for qmgr's NOTIFY=SUCCESS handling.
    fn handoff(&self) -> Handoff {
        let dsn = self
            .session
            .as_ref()
            .and_then(|s| s.capabilities())
            .is_some_and(|c| c.dsn);
        if dsn {
            Handoff::RelayedWithDsn
        } else {
            Handoff::Relayed
        }
    }

    /// A connection that will start connecting on the first `drive`,
    /// through `proxies` in that order when there are any.
    pub fn new(
        settings: Arc<Settings>,
        id: ConnId,
        open_request: u64,
        open: OpenRequest,
        proxies: Vec<std::net::SocketAddr>,
        token: Token,
        cx: &Cx<'_>,
    ) -> SmtpConn {
        let sts = if settings.mta_sts {
            crate::sts::Check::for_open(&settings.queue_root, &open.host, &open.nexthop)
        } else {
            None
        };
        let port = open.addrs.first().map_or(25, |a| a.port());
        let policy = Policy::new(
            settings.tls_level,
            &open.dane,
            &open.host,
            &open.nexthop,
            port,
        );
        SmtpConn {
            sts,
            settings,
            policy,
            id,
            open_request,
            host: open.host,
            nexthop: open.nexthop,
            addrs: open.addrs,
            source: open.source,
            next_addr: 0,
            token,
            stream: None,
            session: None,
            relay: String::new(),
            phase: Phase::Connecting,
            opened: false,
            handshaking: false,
            queue: VecDeque::new(),
            active: None,
            close_request: None,
            outcomes: Vec::new(),
            deadline: None,
            inbuf: Vec::new(),
            uses: 0,
            readable: false,
            read_closed: false,
            writable: false,
            watching_out: false,
            connect_started: cx.now,
            setup: Duration::ZERO,
            errors: Vec::new(),
            family_skips: 0,
            done: false,
            stage: "connect",
            again: false,
            proxies,
            proxy_at: 0,
            via: None,
            header_sent: false,
            proxy_errors: Vec::new(),
            proxy_events: Vec::new(),
            stale: Vec::new(),
            redial: false,
        }
    }

    /// Queues a transaction.
    pub fn queue(&mut self, request: u64, txn: Transaction, now: Instant) {
        self.queue.push_back(Pending {
            request,
            txn,
            queued: now,
        });
    }

    /// QUIT once the queued transactions are done.
    pub fn close_when_idle(&mut self, request: u64) {
        self.close_request = Some(request);
    }

    /// The socket is ready.
    pub fn socket_ready(&mut self, readable: bool, writable: bool, closed: bool) {
        self.readable |= readable;
        self.writable |= writable;
        self.read_closed |= closed;
    }

    /// When the current wait times out.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the connection is finished and can be dropped.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Responses to send to qmgr.
    pub fn take_outcomes(&mut self) -> Vec<Outcome> {
        std::mem::take(&mut self.outcomes)
    }

    /// Stops watching the socket.
    pub fn deregister(&mut self, registry: &Registry) {
        if let Some(s) = self.stream.as_mut() {
            let _ = registry.deregister(s.socket());
        }
    }

    /// qmgr went away: just close.
    pub fn abandon(&mut self) {
        if let Some(s) = self.stream.as_mut() {
            s.close();
        }
        self.done = true;
    }

    fn stage_text(&self) -> &'static str {
        match self.stage {
            "connect" => "receiving the initial server greeting",
            "mail" => "sending MAIL FROM",
            "rcpt" => "sending RCPT TO",
            "data" => "sending message body",
            "quit" => "sending QUIT",
            _ => "performing the EHLO handshake",
        }
    }

    /// Does everything that can be done now.
    pub fn drive(&mut self, cx: &mut Cx<'_>) {
        self.do_what_can_be_done(cx);
        self.watch_writes(cx);
    }

    /// Brings a Unix socket's registered interest in line with its output.
    fn watch_writes(&mut self, cx: &mut Cx<'_>) {
        if self.done || self.unix_path().is_none() {
            return;
        }
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        let want = stream.wants_write();
        if want == self.watching_out {
            return;
        }
        match cx
            .registry
            .reregister(stream.socket(), self.token, evloop::interest(want))
        {
            Ok(()) => self.watching_out = want,
            Err(e) => self.fail(format!("register: {e}")),
        }
    }

    fn do_what_can_be_done(&mut self, cx: &mut Cx<'_>) {
        if self.done {
            return;
        }
        if let Policy::Refuse { why, cause } = &self.policy {
            let why = why.clone();
            match cause {
                Some(cause) => msg_info!("{}: {why} ({cause})", self.host),
                None => msg_info!("{}: {why}", self.host),
            }
            self.tls_refused(why);
            return;
        }
        if self.redial || matches!(self.phase, Phase::Connecting) {
            self.connect_step(cx);
            if !matches!(self.phase, Phase::Session) {
                return;
            }
        }
        // Work queued (or a Close asked for) while the session sat idle:
        // the engine will not say Ready again, so start it here.
        if self.opened
            && self.active.is_none()
            && self.session.as_ref().is_some_and(|s| s.is_ready())
        {
            self.start_next(cx.now);
        }
        // Bounded, so one connection cannot hold the loop; if it still had
        // work when the bound was reached, it asks to be driven again soon
        // (a socket that never said WouldBlock sends no further event).
        self.again = true;
        for _ in 0..64 {
            if self.done || !self.session_step(cx.now) {
                self.again = false;
                break;
            }
        }
        if self.redial && !self.done {
            self.connect_step(cx);
        }
    }

    /// Whether the last `drive` stopped with work left.
    pub fn wants_drive(&self) -> bool {
        self.again && !self.done
    }

    /// Classes the server's certificate, logs it as Postfix does, and ends
    /// the connection when the security level wants more than it proved.
    fn tls_peer_ok(&mut self) -> bool {
        let Some(stream) = self.stream.as_ref() else {
            return false;
        };
        let chain = stream.peer_certificates();
        let patterns = self.cert_patterns();
        let trust = match &self.settings.roots {
            // The TLSA records matched during the handshake (tls::dane).
            _ if matches!(self.policy, Policy::Tlsa(_)) => {
                tls::PeerTrust::Verified(self.host.clone())
            }
            Some(roots) => tls::check_peer(&chain, roots, &patterns, UnixTime::now()),
            None if chain.is_empty() => tls::PeerTrust::Anonymous,
            None => tls::PeerTrust::Untrusted("no trust anchors".into()),
        };
        if let Some(i) = stream.tls_info() {
            msg_info!(
                "{} TLS connection established to {}: {} with cipher {}",
                trust.word(),
                self.relay,
                i.version,
                i.cipher
            );
        }
        // RFC 8461 section 2: where DANE applies it decides, not MTA-STS.
        if let Some(sts) = self
            .sts
            .as_mut()
            .filter(|_| !matches!(self.policy, Policy::Tlsa(_)))
        {
            let ip = self.addrs.get(self.next_addr.saturating_sub(1)).copied();
            if let Some(why) = sts.certificate(&chain, self.settings.roots.as_deref(), ip) {
                self.tls_refused(format!("{why}, host {}", self.relay));
                return false;
            }
        }
        if !self.policy.level().authenticates() {
            return true;
        }
        let why = match trust {
            tls::PeerTrust::Verified(_) => return true,
            tls::PeerTrust::Anonymous => "Server certificate not trusted: none presented".into(),
            tls::PeerTrust::Untrusted(e) => {
                msg_info!(
                    "server certificate verification failed for {}: {e}",
                    self.relay
                );
                format!("Server certificate not trusted ({e})")
            }
            tls::PeerTrust::Trusted(names) => {
                let wanted = patterns.join(", ");
                msg_info!(
                    "server certificate verification failed for {}: certificate names [{}] do not match {wanted}",
                    self.relay,
                    names.join(", ")
                );
                format!(
                    "Server certificate not verified (names [{}] do not match {wanted})",
                    names.join(", ")
                )
            }
        };
        self.tls_refused(format!("{why}, host {}", self.relay));
        false
    }

    /// The names a certificate may carry, in Postfix's internal form:
    /// `.domain` stands for any name below the domain.
    fn cert_patterns(&self) -> Vec<String> {
        let nexthop = nexthop_domain(&self.nexthop);
        let mut v: Vec<String> = Vec::new();
        for m in &self.settings.cert_match {
            let p = match m {
                CertMatch::Hostname => self.host.clone(),
                CertMatch::Nexthop => nexthop.to_string(),
                CertMatch::DotNexthop => format!(".{nexthop}"),
            };
            if !v.contains(&p) && !p.trim_start_matches('.').is_empty() {
                v.push(p);
            }
        }
        v
    }

    /// The level required an authenticated server and this one is not:
    /// a handshake failure for the scheduler's feedback, the mail deferred
    /// with 4.7.5 as Postfix does.
    fn tls_refused(&mut self, why: String) {
        self.outcomes.push(Outcome {
            request: self.open_request,
            response: Response::OpenFailed {
                conn: self.id.conn,
                failure: OpenFailure::Handshake,
                reason: Status::new(StatusCode::TLS_POLICY, why.clone()),
                remote: None,
            },
        });
        while let Some(p) = self.queue.pop_front() {
            let results = p
                .txn
                .results(&Status::new(StatusCode::TLS_POLICY, why.clone()));
            self.outcomes.push(Outcome {
                request: p.request,
                response: Response::Sent {
                    conn: self.id.conn,
                    results,
                    conn_failed: true,
                    handoff: self.handoff(),
                },
            });
        }
        if let Some(s) = self.stream.as_mut() {
            s.close();
        }
        self.done = true;
    }

    /// One round of reading, feeding, acting and writing; true if it did something.
    fn session_step(&mut self, now: Instant) -> bool {
        let mut progressed = false;
        let mut eof = false;
        let Some(stream) = self.stream.as_mut() else {
            return false;
        };
        if self.readable && self.inbuf.len() < INBUF {
            // One read per event in plaintext: a short read emptied the
            // socket and what comes later raises a new event (the read
            // that would say EAGAIN was two of every three before).
            match stream.read_event(&mut self.inbuf, INBUF, self.read_closed) {
                Ok(st) => {
                    if st.drained || st.bytes == 0 {
                        self.readable = false;
                    } else {
                        progressed = true;
                    }
                    // A server that refuses (421) often closes right after
                    // its reply: act on the reply before on the close.
                    if st.eof && !self.handshaking && !self.inbuf.is_empty() {
                        eof = true;
                    } else if st.eof
                        && self.via.is_some()
                        && !self.opened
                        && self.stage == "connect"
                        && self.inbuf.is_empty()
                    {
                        self.unreached_behind_proxy();
                        return false;
                    } else if st.eof {
                        let why = format!(
                            "lost connection with {} while {}",
                            self.relay,
                            self.stage_text()
                        );
                        self.fail(why);
                        return false;
                    }
                }
                Err(e) => {
                    // Behind a proxy, an error before any byte (a reset) is
                    // the proxy's: HAProxy closes cleanly when the host does
                    // not answer. The next proxy is tried.
                    if let Some(proxy) = self.via.filter(|_| {
                        !self.opened
                            && !self.handshaking
                            && self.stage == "connect"
                            && self.inbuf.is_empty()
                    }) {
                        self.proxy_failed(proxy, format!("lost before the greeting: {e}"));
                        self.stale.extend(self.stream.take());
                        self.redial = true;
                        return false;
                    }
                    if let Some(why) = tls::dane::dane_failure(&e).filter(|_| self.handshaking) {
                        msg_info!(
                            "server certificate verification failed for {}: {why}",
                            self.relay
                        );
                        self.tls_refused(format!(
                            "Server certificate not trusted (TLSA certificate verification failed: {why}), host {}",
                            self.relay
                        ));
                        return false;
                    }
                    let why = if self.handshaking {
                        format!("TLS handshake with {} failed: {e}", self.relay)
                    } else {
                        format!(
                            "lost connection with {} while {}: {e}",
                            self.relay,
                            self.stage_text()
                        )
                    };
                    self.fail(why);
                    return false;
                }
            }
        }
        if self.handshaking {
            if stream.is_handshaking() {
                return progressed;
            }
            self.handshaking = false;
            if !self.tls_peer_ok() {
                return false;
            }
            if let Some(s) = self.session.as_mut() {
                s.tls_established();
            }
            progressed = true;
        }
        let Some(session) = self.session.as_mut() else {
            return false;
        };
        let used = session.feed(&self.inbuf);
        if used > 0 {
            self.inbuf.drain(..used);
            progressed = true;
            if self.stage == "connect" {
                self.stage = "helo";
            }
        }
        while let Some(a) = self.session.as_mut().and_then(|s| s.poll_action()) {
            progressed = true;
            self.act(a, now);
            if self.done {
                return false;
            }
        }
        if eof && !matches!(self.phase, Phase::Closed) {
            let why = format!(
                "lost connection with {} while {}",
                self.relay,
                self.stage_text()
            );
            self.fail(why);
            return false;
        }
        // Content, only as fast as the socket takes it.
        progressed |= self.pump_content(now);
        if let (Some(stream), Some(session)) = (self.stream.as_mut(), self.session.as_mut()) {
            // Output left from a socket that was full holds the content
            // back (pump_content waits for it): draining it is progress,
            // or a connection woken by a writable event would flush it and
            // stop, with nothing left to make the socket signal again.
            let backlog = stream.wants_write();
            let out = session.take_output();
            if !out.is_empty() {
                progressed = true;
            }
            match stream.write_owned(out).and_then(|()| stream.flush()) {
                Ok(all_out) => progressed |= backlog && all_out,
                Err(e) => {
                    let why = format!(
                        "lost connection with {} while {}: {e}",
                        self.relay,
                        self.stage_text()
                    );
                    self.fail(why);
                    return false;
                }
            }
        }
        if matches!(self.phase, Phase::Closed) {
            self.done = true;
            return false;
        }
        progressed
    }

    fn pump_content(&mut self, now: Instant) -> bool {
        let Some(active) = self.active.as_mut() else {
            return false;
        };
        if !active.sending {
            return false;
        }
        if self.stream.as_ref().is_some_and(|s| s.wants_write()) {
            return false;
        }
        // BDAT without PIPELINING: the previous chunk's reply comes first.
        if !self.session.as_ref().is_some_and(|s| s.wants_content()) {
            return false;
        }
        // Sized to what is left, at most one 64 KiB read: a small message
        // costs no 64 KiB allocation and clearing per step.
        let left = match active.source.as_ref() {
            Some((content, pos)) => content.len().saturating_sub(*pos),
            None => 0,
        };
        let want = left.min(64 * 1024) as usize;
        let Some(session) = self.session.as_mut() else {
            return false;
        };
        // Read from the spool straight into the session's output (with
        // DATA), which goes to the socket as it is: no copy in between.
        let n = match active.source.as_mut() {
            Some(_) if want == 0 => Ok(0),
            Some((content, pos)) => session
                .send_content_from(want, |buf| content.read_at(buf, *pos))
                .inspect(|n| *pos += *n as u64),
            None => Ok(0),
        };
        let finished = match n {
            Ok(0) => true,
            Ok(n) => {
                // The last piece: the end of data goes out with it, in
                // the same write, not in a step and a write of its own
                // (unless a BDAT chunk must be answered first).
                n as u64 == left && session.wants_content()
            }
            Err(e) => {
                // Our own spool failed: the peer must not get a truncated
                // message, so the connection is dropped before the dot.
                let why = format!("{}: reading the message file: {e}", active.txn.queue_id);
                self.fail(why);
                return false;
            }
        };
        if finished {
            session.end_content();
            if session.lines_broken() > 0 {
                // Once per message, as Postfix's smtp client says it.
                msg_info!(
                    "{}: breaking line > {} bytes with <CR><LF>SPACE",
                    active.txn.queue_id,
                    self.settings.client.line_length_limit
                );
            }
            active.sending = false;
            self.stage = "data";
            self.deadline = Some(now + self.settings.done_timeout);
        } else {
            self.deadline = Some(now + self.settings.xfer_timeout);
        }
        true
    }

    fn act(&mut self, a: ClientAction, now: Instant) {
        match a {
            ClientAction::Ready => {
                if !self.opened {
                    self.opened = true;
                    if let Some(sts) = self.sts.as_mut() {
                        let tls = self.session.as_ref().is_some_and(|s| s.tls_active());
                        sts.opened(
                            tls,
                            self.addrs.get(self.next_addr.saturating_sub(1)).copied(),
                        );
                    }
                    self.setup = now.saturating_duration_since(self.connect_started);
                    self.outcomes.push(Outcome {
                        request: self.open_request,
                        response: Response::Opened {
                            conn: self.id.conn,
                            relay: self.relay.clone(),
                        },
                    });
                }
                self.start_next(now);
            }
            ClientAction::StartTls => {
                let name = tls::server_name(&self.host);
                let cfg = match &self.policy {
                    Policy::Tlsa(c) => Some(c.clone()),
                    _ => self.settings.tls.clone(),
                };
                match (cfg, name, self.stream.as_mut()) {
                    (Some(cfg), Some(name), Some(stream)) => {
                        if let Some(s) = self.session.as_mut() {
                            let out = s.take_output();
                            let _ = stream.write(&out);
                            let _ = stream.flush();
                        }
                        self.inbuf.clear();
                        if let Err(e) = stream.start_client_tls(cfg, name) {
                            self.fail(format!("TLS with {}: {e}", self.relay));
                            return;
                        }
                        self.handshaking = true;
                        self.readable = true;
                        self.writable = true;
                    }
                    _ => self.fail(format!("cannot start TLS with {}", self.relay)),
                }
            }
            ClientAction::SenderRefused(r) => {
                if let Some(a) = self.active.as_mut() {
                    a.mail = Some(r);
                }
            }
            ClientAction::Unsent(why) => {
                if let Some(a) = self.active.as_mut() {
                    a.unsent = Some(why);
                }
            }
            ClientAction::Recipient { index, reply } => {
                self.stage = "rcpt";
                if let Some(slot) = self.active.as_mut().and_then(|a| a.rcpt.get_mut(index)) {
                    *slot = Some(reply);
                }
            }
            ClientAction::SendContent => {
                if let Some(a) = self.active.as_mut() {
                    a.sending = true;
                }
                self.stage = "data";
                self.deadline = Some(now + self.settings.xfer_timeout);
            }
            ClientAction::Delivered { index, reply } => {
                if let Some(slot) = self
                    .active
                    .as_mut()
                    .and_then(|a| a.delivered.get_mut(index))
                {
                    *slot = Some(reply);
                }
            }
            ClientAction::MessageDone(reply) => self.finish(reply, now),
            ClientAction::Failed(e) => {
                if let (Some(sts), smtp_proto::client_session::ClientError::TlsUnavailable(_)) =
                    (self.sts.as_mut(), &e)
                {
                    sts.no_starttls(self.addrs.get(self.next_addr.saturating_sub(1)).copied());
                }
                let handshake_phase = !self.opened;
                let (why, remote) = describe(&e, &self.relay);
                if handshake_phase {
                    msg_info!("{why}");
                    self.outcomes.push(Outcome {
                        request: self.open_request,
                        response: Response::OpenFailed {
                            conn: self.id.conn,
                            failure: OpenFailure::Handshake,
                            reason: unreached(why.clone()),
                            remote,
                        },
                    });
                    self.fail_queued(&why);
                    if let Some(s) = self.stream.as_mut() {
                        s.close();
                    }
                    self.done = true;
                } else {
                    self.fail_with(why, remote);
                }
            }
            ClientAction::Close => {
                self.phase = Phase::Closed;
                if let Some(s) = self.stream.as_mut() {
                    if let Some(sess) = self.session.as_mut() {
                        let _ = s.write(&sess.take_output());
                    }
                    s.close();
                }
                let request = self.close_request.take().unwrap_or(0);
                self.outcomes.push(Outcome {
                    request,
                    response: Response::Closed {
                        conn: self.id.conn,
                        reason: None,
                    },
                });
                self.fail_queued("connection closed");
                self.deadline = None;
            }
        }
    }

    fn start_next(&mut self, now: Instant) {
        if self.active.is_some() {
            return;
        }
        let Some(p) = self.queue.pop_front() else {
            if self.close_request.is_some() {
                self.stage = "quit";
                if let Some(s) = self.session.as_mut() {
                    s.quit();
                }
                self.deadline = Some(now + self.settings.cmd_timeout);
            } else {
                // Idle: qmgr decides how long a connection stays cached.
                self.deadline = None;
            }
            return;
        };
        let source = match Content::open(&p.txn.data, &self.settings.queue_root) {
            Ok(s) => s,
            Err(e) => {
                // A local problem, not the peer's: defer these recipients.
                let text = format!("cannot read the message: {e}");
                msg_info!("{}: {text}", p.txn.queue_id);
                let results = p.txn.results(&Status::new(StatusCode::SYSTEM_TEMP, text));
                self.outcomes.push(Outcome {
                    request: p.request,
                    response: Response::Sent {
                        conn: self.id.conn,
                        results,
                        conn_failed: false,
                        handoff: self.handoff(),
                    },
                });
                return self.start_next(now);
            }
        };
        let mut env = match envelope(&p.txn) {
            Ok(e) => e,
            Err(text) => {
                let results = p.txn.results(&Status::new(StatusCode::BAD_ADDRESS, text));
                let delays = Timing::at(now).delays(&p.txn, now);
                for r in &results {
                    let log = &self.settings.logger;
                    log.recipient(&p.txn, r.index, &self.relay, 0, delays, &r.status);
                }
                self.outcomes.push(Outcome {
                    request: p.request,
                    response: Response::Sent {
                        conn: self.id.conn,
                        results,
                        conn_failed: false,
                        handoff: self.handoff(),
                    },
                });
                return self.start_next(now);
            }
        };
        if p.txn.smtputf8 && !env.utf8_required {
            // A header it cannot read counts as UTF-8: refused (and said
            // why) rather than sent to a server that may not take it.
            env.utf8_required = source.header_is_8bit().unwrap_or(true);
        }
        let n = p.txn.recipients.len();
        let setup = if self.uses == 0 {
            self.setup
        } else {
            Duration::ZERO
        };
        let bdat = self.session.as_ref().is_some_and(|s| s.uses_bdat());
        let probe = p.txn.data == ipc::delivery::Data::Probe;
        let started = self.session.as_mut().is_some_and(|s| {
            if probe {
                s.send_probe(&env)
            } else {
                s.send_message(&env)
            }
        });
        self.active = Some(Active {
            request: p.request,
            txn: p.txn,
            timing: Timing {
                queued: p.queued,
                started: now,
                conn_setup: setup,
            },
            rcpt: vec![None; n],
            delivered: vec![None; n],
            mail: None,
            unsent: None,
            source: Some((source, 0)),
            sending: false,
            bdat,
        });
        self.stage = "mail";
        self.deadline = Some(now + self.settings.cmd_timeout);
        if !started {
            self.fail("the session was not ready for a new message".into());
        }
    }

    fn finish(&mut self, final_reply: Reply, now: Instant) {
        let Some(a) = self.active.take() else { return };
        self.uses += 1;
        let delays = a.timing.delays(&a.txn, now);
        let probe = a.txn.data == ipc::delivery::Data::Probe;
        let mut results = Vec::with_capacity(a.txn.recipients.len());
        for (i, r) in a.txn.recipients.iter().enumerate() {
            let (reply, stage) = match (&a.mail, &a.rcpt[i], &a.delivered[i]) {
                (Some(m), _, _) => (m.clone(), "MAIL FROM"),
                (None, Some(rr), _) if !rr.is_positive() => (rr.clone(), "RCPT TO"),
                // A probe ends after RCPT: its reply is the result.
                (None, Some(rr), _) if probe => (rr.clone(), "RCPT TO"),
                (None, _, Some(d)) => (d.clone(), "end of DATA"),
                _ if a.bdat => (final_reply.clone(), "BDAT"),
                _ => (final_reply.clone(), "end of DATA"),
            };
            let res = match a.unsent {
                // Ours, not the server's: no "host said".
                Some(why) => {
                    let (code, text) = why.status(&self.relay);
                    RcptResult {
                        index: r.index,
                        status: Status::new(code, text),
                        remote: None,
                    }
                }
                None => self.said(r.index, &reply, stage),
            };
            let st = &res.status;
            let log = &self.settings.logger;
            log.recipient(&a.txn, r.index, &self.relay, self.uses, delays, st);
            results.push(res);
        }
        self.outcomes.push(Outcome {
            request: a.request,
            response: Response::Sent {
                conn: self.id.conn,
                results,
                conn_failed: false,
                handoff: self.handoff(),
            },
        });
        // After a refused BDAT chunk, replies to chunks still in the
        // pipeline are due first; the session says Ready after them.
        if self.session.as_ref().is_some_and(|s| s.is_ready()) {
            self.start_next(now);
        }
    }

    /// A recipient's result from the server's reply, its text as Postfix
    /// logs it.
    fn said(&self, index: u32, reply: &Reply, stage: &str) -> RcptResult {
        result_of(index, reply, &self.relay, stage)
    }

    /// The connection broke: defer what is in flight and queued, report closed.
    fn fail(&mut self, why: String) {
        self.fail_with(why, None);
    }

    /// As [`Self::fail`], when a server's reply (`remote`, a 421 in the
    /// middle of a transaction) broke it: the reply goes with the deferrals
    /// of the transaction in flight, as the server sent it.
    fn fail_with(&mut self, why: String, remote: Option<RemoteReply>) {
        if !self.opened {
            self.outcomes.push(Outcome {
                request: self.open_request,
                response: Response::OpenFailed {
                    conn: self.id.conn,
                    failure: OpenFailure::Handshake,
                    reason: unreached(why.clone()),
                    remote: remote.clone(),
                },
            });
            msg_info!("{why}");
        }
        if let Some(a) = self.active.take() {
            let delays = a.timing.delays(&a.txn, Instant::now());
            let mut results = Vec::new();
            for (i, r) in a.txn.recipients.iter().enumerate() {
                // A recipient the server already refused for good keeps its
                // bounce; everything else is deferred.
                let res = match (&a.rcpt[i], &a.delivered[i]) {
                    (_, Some(d)) => self.said(r.index, d, "end of DATA"),
                    (Some(rr), _) if rr.is_permanent() => self.said(r.index, rr, "RCPT TO"),
                    _ => RcptResult {
                        index: r.index,
                        status: lost(why.clone()),
                        remote: remote.clone(),
                    },
                };
                let log = &self.settings.logger;
                log.recipient(&a.txn, r.index, &self.relay, 0, delays, &res.status);
                results.push(res);
            }
            self.outcomes.push(Outcome {
                request: a.request,
                response: Response::Sent {
                    conn: self.id.conn,
                    results,
                    conn_failed: true,
                    handoff: self.handoff(),
                },
            });
        }
        self.fail_queued(&why);
        if self.opened {
            let request = self.close_request.take().unwrap_or(0);
            self.outcomes.push(Outcome {
                request,
                response: Response::Closed {
                    conn: self.id.conn,
                    reason: Some(lost(why)),
                },
            });
        }
        if let Some(s) = self.stream.as_mut() {
            s.close();
        }
        self.done = true;
    }

    fn fail_queued(&mut self, why: &str) {
        self.fail_queued_with(&lost(why));
    }

    fn fail_queued_with(&mut self, status: &Status) {
        while let Some(p) = self.queue.pop_front() {
            let results = p.txn.results(status);
            self.outcomes.push(Outcome {
                request: p.request,
                response: Response::Sent {
                    conn: self.id.conn,
                    results,
                    conn_failed: true,
                    handoff: self.handoff(),
                },
            });
        }
    }
}
