//! One SMTP session: the socket, the protocol engine, the transaction and,
//! while a message is in progress, a link to cleanup from the process's
//! pool (`pool.rs`).
//!
//! Bytes from the client go into `inbuf` (bounded) and are fed to the
//! session; the session's questions are answered from the policy (after
//! the router's answer, when reject_unlisted_recipient needs one: the
//! server asks it for the session over its one link), or, for the end of
//! message (and DATA, with milters), by cleanup over a non-blocking IPC
//! link (`cleanup.rs`), so a slow router or cleanup delays only its own
//! client, and each wait has a deadline. While the link has more than
//! `LINK_BACKLOG` bytes unsent, no more input is fed: memory stays bounded
//! and TCP pushes back on the client. AUTH exchanges go to the server's
//! one SASL link (`sasl.rs`) as requests the server takes after each turn;
//! their outcomes come back through [`Conn::sasl_outcome`]. The
//! session's milters are in `milters.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use daemon::{msg_info, msg_warn, Cx};
use ipc::cleanup::Cleanup;
use ipc::Link;
use mail::{BodyType, Recipient, Ret};
use mio::Token;
use smtp_proto::server::{AbortReason, Action, Session};
use smtp_proto::{Path, Reply, StatusCode};

use crate::pool::Pool;
use crate::settings::Settings;

mod cleanup;
mod milters;
pub mod rates;
use cleanup::Unsent;
use milters::MilterWait;

/// What every session shares.
pub struct Shared {
    /// main.cf-derived settings.
    pub settings: Settings,
    /// The TLS server configuration, if TLS is on.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Free space on the queue file system, for MAIL FROM.
    pub space: crate::space::QueueSpace,
    /// The SASL mechanisms EHLO offers (when AUTH is on).
    pub auth_mechanisms: Vec<String>,
}

/// A step of an AUTH exchange for the server's SASL link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SaslRequest {
    /// Begin with this mechanism and initial response.
    Begin {
        /// The mechanism (upper case).
        mechanism: String,
        /// The initial response, base64, if given.
        initial: Option<String>,
    },
    /// The client's response to the last challenge.
    Respond(String),
    /// The client cancelled; forget the exchange.
    Cancel,
}

const INBUF_LIMIT: usize = 64 * 1024;
/// Bytes one session may read in one turn of the loop: a client that sends
/// as fast as we read must not keep the other sessions of this process
/// waiting until it stops (a 64 MiB stream held them for seconds).
const TURN_BUDGET: usize = 256 * 1024;

/// The pool's link this session holds for its message in progress.
struct Held {
    link: Link<Cleanup>,
    /// Kept from an earlier message (its cleanup may have gone since).
    kept: bool,
    /// The request whose answer the session waits for, and until when
    /// (`smtpd_cleanup_timeout`).
    waiting: Option<(u64, Waiting, Instant)>,
    /// The id of the message's quiet Begin, once sent (`cleanup.rs`).
    quiet: Option<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Waiting {
    Started,
    Queued,
}

/// The current mail transaction.
#[derive(Default)]
struct Txn {
    sender: String,
    ret: Option<Ret>,
    envid: Option<String>,
    body: BodyType,
    smtputf8: bool,
    recipients: Vec<Recipient>,
    hold: bool,
    discard: bool,
    /// The tenant and job access TENANT and JOB actions named.
    tenant: Option<String>,
    job: Option<String>,
    queue_id: Option<String>,
    /// cleanup's refusal of the quiet start of message, for the end of data.
    refused: Option<Reply>,
}

/// One client session.
pub struct Conn {
    stream: tls::Stream,
    session: Session,
    /// The client's address.
    pub peer: SocketAddr,
    inbuf: Vec<u8>,
    /// Its token in the event loop, as the pool's links know their holder.
    token: Token,
    link: Option<Held>,
    /// The start of the message and its first content, until written.
    unsent: Option<Unsent>,
    txn: Txn,
    deadline: Instant,
    /// The end of an error sleep (smtpd_error_sleep_time) in progress.
    sleep_until: Option<Instant>,
    timeout: std::time::Duration,
    cleanup_timeout: std::time::Duration,
    /// A RCPT waiting for the router's answer before the policy runs.
    pending_rcpt: Option<(smtp_proto::Mailbox, smtp_proto::command::RcptParams)>,
    /// The question for the router, until the server has sent it.
    router_question: Option<(String, bool)>,
    /// A VRFY waiting for the router's answer: the address, the argument.
    pending_vrfy: Option<(smtp_proto::Mailbox, String)>,
    /// The router's answer for the RCPT waiting for verification.
    pending_unlisted: Option<crate::router::Answer>,
    /// The address to ask qmgr's verification about, until the server has sent it.
    verify_question: Option<String>,
    /// What verification said for the RCPT under evaluation, by address.
    verified: Vec<(String, policy::VerifyState)>,
    /// The address asked about, until its answer comes.
    asked: Option<String>,
    /// `smtpd_per_record_deadline`, and the bytes of the record in progress.
    per_record: bool,
    record_len: usize,
    record_bytes: usize,
    /// The turn's budget ran out with input maybe left in the socket.
    rearm: bool,
    /// The last read emptied the socket: reading again before the next
    /// event would only fail with EAGAIN.
    drained: bool,
    handshaking: bool,
    closing: bool,
    eof: bool,
    failed: bool,
    last_verb: &'static str,
    /// AUTH steps for the server's SASL link.
    sasl_requests: Vec<SaslRequest>,
    /// The exchange in progress: its mechanism.
    auth_mechanism: Option<String>,
    /// The exchange waiting for anvil's count of failures before it begins.
    auth_held: Option<SaslRequest>,
    /// Authenticated: (mechanism, user name).
    pub sasl_login: Option<(String, String)>,
    /// Failed AUTH commands not yet told to anvil.
    auth_failures: u32,
    /// The address the client connected to, as a PROXY header gave it.
    server_ip: Option<std::net::IpAddr>,
    /// The session's milters (`smtpd_milters`).
    milters: Option<milter::net::Milters>,
    /// The session-wide milter macros (j, {daemon_name}, …).
    milter_base: milter::chain::Macros,
    /// The HELO name the milters were last told.
    milter_helo: Option<String>,
    /// What the session waits for from them.
    milter_wait: Option<MilterWait>,
    /// `smtpd_sasl_authenticated_header`.
    sasl_header: bool,
    /// The message and recipient rate limits this client is held to.
    rate_limits: rates::Limits,
    /// A MAIL, RCPT or VRFY waiting for anvil's count.
    rate_held: Option<rates::Held>,
    /// What to tell anvil, until the server has sent it.
    rate_question: Option<rates::Event>,
}

impl Conn {
    /// A new session; `refuse` makes it a 421 greeting (client over its
    /// limits); `via` is what a PROXY header brought (input after it,
    /// the address the client connected to).
    pub fn new(
        sock: mio::net::TcpStream,
        token: Token,
        peer: SocketAddr,
        shared: &Shared,
        (refuse, via): (Option<String>, crate::proxy::Via),
        now: Instant,
    ) -> Conn {
        let s = &shared.settings;
        let mut stream = tls::Stream::plain(sock);
        let wrapper = s.wrapper && shared.tls.is_some();
        let session = match refuse {
            Some(text) => {
                // The 421 is the greeting, as in Postfix: after a 220 the
                // client would take the 421 for the answer to its EHLO.
                let reply = Reply::enhanced(421, StatusCode::TEMP_SECURITY, text);
                let mut sess = Session::new_refusing(s.proto.clone(), wrapper, reply);
                sess.close(None);
                sess
            }
            None => Session::new(s.proto.clone(), wrapper),
        };
        let mut handshaking = false;
        if wrapper {
            if let Some(cfg) = &shared.tls {
                if stream.start_server_tls(cfg.clone()).is_ok() {
                    handshaking = true;
                }
            }
        }
        Conn {
            stream,
            session,
            peer,
            inbuf: via.early,
            server_ip: via.server,
            token,
            link: None,
            unsent: None,
            txn: Txn::default(),
            deadline: now + s.timeout,
            sleep_until: None,
            timeout: s.timeout,
            cleanup_timeout: s.cleanup_timeout,
            pending_rcpt: None,
            pending_vrfy: None,
            router_question: None,
            pending_unlisted: None,
            verify_question: None,
            verified: Vec::new(),
            asked: None,
            per_record: s.per_record,
            record_len: s.record_len,
            record_bytes: 0,
            rearm: false,
            drained: false,
            handshaking,
            closing: false,
            eof: false,
            failed: false,
            last_verb: "CONNECT",
            sasl_requests: Vec::new(),
            auth_mechanism: None,
            auth_held: None,
            sasl_login: None,
            auth_failures: 0,
            milters: None,
            milter_base: Vec::new(),
            milter_helo: None,
            milter_wait: None,
            sasl_header: s.sasl_header,
            // The exceptions are only looked at when a limit is set: the
            // default path costs nothing.
            rate_limits: rates::Limits::new(
                s.msg_rate_limit,
                s.rcpt_rate_limit,
                (s.msg_rate_limit, s.rcpt_rate_limit) != (0, 0)
                    && s.limit_exceptions.iter().any(|c| c.contains(peer.ip())),
            ),
            rate_held: None,
            rate_question: None,
        }
    }

    /// The MAIL or RCPT the session waits to have told anvil of.
    pub fn take_rate_question(&mut self) -> Option<rates::Event> {
        self.rate_question.take()
    }

    /// anvil's count for the command held (`None`: anvil did not say, no
    /// limit): refused over the limit, decided as usual otherwise.
    pub fn rate_answer(
        &mut self,
        cx: &mut Cx<'_>,
        pool: &mut Pool,
        shared: &Shared,
        rate: Option<u32>,
        service: &str,
    ) {
        let Some(held) = self.rate_held.take() else {
            return;
        };
        let event = held.event();
        let limit = self.rate_limits.of(event);
        if let Some((reply, warning)) = rates::refusal(event, rate, limit, self.peer.ip(), service)
        {
            msg_warn!("{warning}");
            let _ = self.session.decide(reply);
            return;
        }
        match held {
            rates::Held::Mail(from, params) => self.check_sender(cx, shared, pool, from, params),
            rates::Held::Rcpt(to, params) => self.rcpt(cx, shared, pool, to, params),
            rates::Held::Vrfy(arg) => self.check_vrfy(shared, arg),
        }
    }

    /// Holds a command whose limit is set (not by default: then anvil is
    /// not asked and the command is decided at once) for anvil's count.
    fn hold_for_rate(&mut self, held: rates::Held) {
        self.rate_question = Some(held.event());
        self.rate_held = Some(held);
    }

    /// The AUTH steps the session has for the SASL link.
    pub fn take_sasl_requests(&mut self) -> Vec<SaslRequest> {
        std::mem::take(&mut self.sasl_requests)
    }

    /// Holds a Begin until anvil says how often this client failed.
    pub fn hold_auth(&mut self, begin: SaslRequest) {
        self.auth_held = Some(begin);
    }

    /// The Begin held for anvil's answer.
    pub fn take_held_auth(&mut self) -> Option<SaslRequest> {
        self.auth_held.take()
    }

    /// Failed AUTH commands to tell anvil.
    pub fn take_auth_failures(&mut self) -> u32 {
        std::mem::take(&mut self.auth_failures)
    }

    /// Our address on this connection (Dovecot's `lip=`).
    pub fn local_ip(&mut self) -> std::net::IpAddr {
        if let Some(ip) = self.server_ip {
            return ip;
        }
        self.stream
            .socket()
            .as_tcp()
            .and_then(|s| s.local_addr().ok())
            .map(|a| a.ip())
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    /// Whether the session is under TLS (Dovecot's `secured`).
    pub fn is_tls(&self) -> bool {
        self.session.tls_active()
    }

    /// The client went over `smtpd_client_auth_rate_limit`: its AUTH is refused.
    pub fn auth_rate_refused(&mut self, rate: u32, service: &str) {
        self.auth_held = None;
        self.auth_mechanism = None;
        msg_warn!(
            "AUTH command rate limit exceeded: {rate} from {} for service {service}",
            self.client_label()
        );
        let text = format!("Error: too many AUTH commands from {}", self.peer.ip());
        let _ = self
            .session
            .decide(Reply::enhanced(450, StatusCode::known(4, 7, 1), text));
    }

    /// The SASL server's answer to the exchange in progress.
    pub fn sasl_outcome(&mut self, outcome: crate::sasl::Outcome) {
        use crate::sasl::Outcome;
        if self.auth_mechanism.is_none() {
            // The exchange was cancelled meanwhile.
            return;
        }
        let reply = match outcome {
            Outcome::Challenge(c) => Reply::new(334, None, c),
            Outcome::Success(user) => {
                let mech = self.auth_mechanism.take().unwrap_or_default();
                self.sasl_login = Some((mech, user));
                Reply::enhanced(235, StatusCode::known(2, 7, 0), "Authentication successful")
            }
            Outcome::Failure(reason) => {
                let mech = self.auth_mechanism.take().unwrap_or_default();
                let reason = reason.unwrap_or_else(|| "authentication failure".into());
                msg_warn!(
                    "{}: SASL {mech} authentication failed: {reason}",
                    self.client_label()
                );
                self.auth_failures += 1;
                Reply::enhanced(
                    535,
                    StatusCode::known(5, 7, 8),
                    "Error: authentication failed: authentication failure",
                )
            }
            Outcome::Temporary(why) => {
                let mech = self.auth_mechanism.take().unwrap_or_default();
                msg_warn!(
                    "{}: SASL {mech} authentication aborted: {why}",
                    self.client_label()
                );
                Reply::enhanced(
                    454,
                    StatusCode::TEMP_SECURITY,
                    "Temporary authentication failure",
                )
            }
        };
        let _ = self.session.decide(reply);
    }

    /// The socket, to register.
    pub fn socket(&mut self) -> &mut tls::Sock {
        self.stream.socket()
    }

    /// `unknown[addr]`, as Postfix names clients in logs.
    pub fn client_label(&self) -> String {
        format!("unknown[{}]", self.peer.ip())
    }

    /// The command counts for the disconnect line.
    pub fn stats(&self) -> String {
        self.session.stats().summary()
    }

    /// When this session times out, gives up waiting for cleanup, or ends
    /// its error sleep (smtpd_error_sleep_time).
    pub fn deadline(&self) -> Instant {
        let d = match self.link.as_ref().and_then(|l| l.waiting) {
            Some((_, _, d)) => d.min(self.deadline),
            None => self.deadline,
        };
        let d = self.sleep_until.map_or(d, |s| s.min(d));
        self.milter_deadline().map_or(d, |m| m.min(d))
    }

    /// The question the session waits to have sent to the router: the
    /// recipient and whether the transaction uses SMTPUTF8.
    pub fn take_router_question(&mut self) -> Option<(String, bool)> {
        self.router_question.take()
    }

    /// The address the session waits to have asked about (reject_unverified_*).
    pub fn take_verify_question(&mut self) -> Option<String> {
        self.verify_question.take()
    }

    /// Verification's answer about the address asked: the RCPT is checked again.
    pub fn verify_answer(
        &mut self,
        cx: &mut Cx<'_>,
        pool: &mut Pool,
        shared: &Shared,
        state: policy::VerifyState,
    ) {
        if let Some((to, params)) = self.pending_rcpt.take() {
            if let Some(address) = self.asked.take() {
                self.verified.push((address, state));
            }
            let unlisted = self.pending_unlisted.take();
            self.check_recipient(cx, pool, shared, to, params, unlisted.as_ref());
        }
    }

    /// The router's answer to the session's question: the RCPT is decided.
    pub fn router_answer(
        &mut self,
        cx: &mut Cx<'_>,
        pool: &mut Pool,
        shared: &Shared,
        answer: crate::router::Answer,
    ) {
        if let Some((to, arg)) = self.pending_vrfy.take() {
            self.vrfy_answer(shared, &to, &arg, answer);
        } else if let Some((to, params)) = self.pending_rcpt.take() {
            self.check_recipient(cx, pool, shared, to, params, Some(&answer));
        }
    }

    /// True (once) when the socket must be registered again: the turn's
    /// budget ran out, and the kernel will not say again that input waits.
    pub fn take_rearm(&mut self) -> bool {
        std::mem::take(&mut self.rearm)
    }

    /// Whether the session is over and can be dropped.
    pub fn is_done(&self) -> bool {
        self.failed || ((self.closing || self.eof) && !self.stream.wants_write())
    }

    /// The client socket is ready.
    pub fn socket_ready(&mut self, cx: &mut Cx<'_>, readable: bool, _writable: bool) {
        if readable {
            self.drained = false;
            self.read(cx);
        }
    }

    fn read(&mut self, cx: &mut Cx<'_>) {
        if self.inbuf.len() >= INBUF_LIMIT {
            return;
        }
        let start = self.inbuf.len();
        match self
            .stream
            .read_event(&mut self.inbuf, INBUF_LIMIT, cx.closed)
        {
            Ok(st) => {
                self.drained = st.drained;
                if st.bytes > 0 {
                    self.restart_deadline(cx.now, start);
                }
                if st.eof {
                    self.eof = true;
                }
            }
            Err(e) => {
                if self.handshaking {
                    msg_warn!("TLS handshake failed with {}: {e}", self.client_label());
                } else if !self.closing {
                    // After QUIT a reset is how many clients hang up
                    // (smtp-source among them); Postfix logs nothing then.
                    msg_info!(
                        "lost connection after {} from {}: {e}",
                        self.last_verb,
                        self.client_label()
                    );
                }
                self.failed = true;
            }
        }
        if self.handshaking && !self.stream.is_handshaking() {
            self.handshaking = false;
            if let Some(info) = self.stream.tls_info() {
                msg_info!(
                    "Anonymous TLS connection established from {}: {} with cipher {}",
                    self.client_label(),
                    info.version,
                    info.cipher
                );
            }
            self.session.tls_established();
        }
    }

    /// Input arrived at `inbuf[start..]`: the timeout starts again, per read
    /// or, with smtpd_per_record_deadline, once a record is complete (a
    /// client trickling one byte at a time is then ended after smtpd_timeout).
    fn restart_deadline(&mut self, now: Instant, start: usize) {
        let new = &self.inbuf[start..];
        if self.per_record {
            self.record_bytes += new.len();
            let line_end = new.iter().rposition(|&b| b == b'\n');
            match line_end {
                Some(i) => self.record_bytes = new.len() - i - 1,
                None if self.record_bytes >= self.record_len => {
                    self.record_bytes %= self.record_len
                }
                None => return,
            }
        }
        self.deadline = now + self.timeout;
    }

    /// The client was silent for smtpd_timeout, cleanup did not answer
    /// within smtpd_cleanup_timeout, or the session's error sleep is over.
    pub fn timed_out(&mut self, cx: &mut Cx<'_>, pool: &mut Pool) {
        if self.sleep_until.is_some_and(|t| t <= cx.now) {
            // The held reply goes when the server drives the session next;
            // another deadline that passed too fires on the next turn.
            self.sleep_until = None;
            self.session.wake();
            return;
        }
        if self.milters_expired(cx, pool) {
            return;
        }
        if let Some((_, what, d)) = self.link.as_ref().and_then(|l| l.waiting) {
            if d <= cx.now {
                msg_warn!(
                    "{}: cleanup did not answer {} within smtpd_cleanup_timeout ({}s)",
                    self.txn.queue_id.as_deref().unwrap_or("NOQUEUE"),
                    if what == Waiting::Started {
                        "the start of a message"
                    } else {
                        "the end of data"
                    },
                    self.cleanup_timeout.as_secs()
                );
                // Closing the link makes cleanup drop the message unless it
                // has already handed it to qmgr (see smtpd(8)).
                self.break_link(cx, pool);
                return;
            }
        }
        if self.closing {
            // It did not even take our goodbye within the grace period.
            self.failed = true;
            return;
        }
        msg_info!(
            "timeout after {} from {}",
            self.last_verb,
            self.client_label()
        );
        self.session.close(Some(Reply::enhanced(
            421,
            StatusCode::CONNECTION_LOST,
            "Error: timeout exceeded",
        )));
        self.closing = true;
        self.deadline = cx.now + std::time::Duration::from_secs(10);
        self.abort_link_txn(cx, pool);
        self.flush_output();
    }

    /// Tells the client we are going away (on shutdown).
    pub fn say_goodbye(&mut self) {
        self.session.close(Some(Reply::enhanced(
            421,
            StatusCode::NOT_ACCEPTING,
            "Service shutting down, closing transmission channel",
        )));
        self.flush_output();
    }

    /// Releases the sockets.
    pub fn shutdown(&mut self, cx: &mut Cx<'_>, pool: &mut Pool) {
        self.abort_link_txn(cx, pool);
        self.close_milters(cx);
        // Dropping the socket closes it, which also takes it out of the
        // poll set and sends the FIN after what is queued: in plaintext
        // neither epoll_ctl nor shutdown(2) is needed first.
        if self.stream.is_tls() {
            self.stream.close();
        } else {
            let _ = self.stream.flush();
        }
    }

    /// Runs the session on what has arrived and answers what it can.
    pub fn drive(&mut self, cx: &mut Cx<'_>, shared: &Shared, pool: &mut Pool) {
        // Replies still waiting for the socket go first.
        if let Err(e) = self.stream.flush() {
            self.lost(e);
        }
        if shared.settings.sasl.is_some() {
            // What Dovecot offers may have been learnt since the last turn.
            self.session.set_auth_mechanisms(&shared.auth_mechanisms);
        }
        let mut budget = TURN_BUDGET;
        loop {
            loop {
                let mut used = 0;
                // A client that does not read its replies is not fed more
                // commands: its replies would pile up without bound.
                if !self.handshaking
                    && !self.inbuf.is_empty()
                    && !self.link_backlogged()
                    && !self.stream.wants_write()
                {
                    used = self.session.feed(&self.inbuf);
                    self.inbuf.drain(..used);
                }
                let mut acted = false;
                while let Some(a) = self.session.poll_action() {
                    acted = true;
                    self.act(cx, shared, pool, a);
                }
                if used == 0 && !acted {
                    break;
                }
            }
            self.flush_link(cx, pool);
            if self.session.should_flush() || self.inbuf.is_empty() || self.session.is_closed() {
                self.flush_output();
            } else if let Err(e) = self.stream.flush() {
                self.lost(e);
            }
            // Reading stopped at the buffer limit; the socket may hold more
            // and mio will not say so again (edge-triggered): read on while
            // there is room and something comes. A socket the last read
            // emptied has nothing: new input brings a new event.
            if self.failed
                || self.drained
                || self.eof
                || self.handshaking
                || self.inbuf.len() >= INBUF_LIMIT / 2
                || self.stream.wants_write()
            {
                break;
            }
            if budget == 0 {
                // Others' turn; the socket is armed again to come back here.
                self.rearm = true;
                break;
            }
            let before = self.inbuf.len();
            self.read(cx);
            let got = self.inbuf.len() - before;
            if got == 0 {
                break;
            }
            budget = budget.saturating_sub(got);
        }
        if self.eof && !self.closing {
            if self.in_message() || self.session.is_waiting() {
                msg_info!(
                    "lost connection after {} from {}",
                    self.last_verb,
                    self.client_label()
                );
            }
            self.abort_link_txn(cx, pool);
            self.closing = true;
        }
    }

    fn flush_output(&mut self) {
        if self.session.has_output() {
            let out = self.session.take_output();
            if let Err(e) = self.stream.write(&out) {
                self.lost(e);
                return;
            }
        }
        if let Err(e) = self.stream.flush() {
            self.lost(e);
        }
    }

    fn lost(&mut self, e: std::io::Error) {
        if !self.closing {
            msg_info!(
                "lost connection after {} from {}: {e}",
                self.last_verb,
                self.client_label()
            );
        }
        self.failed = true;
    }

    fn act(&mut self, cx: &mut Cx<'_>, shared: &Shared, pool: &mut Pool, a: Action) {
        match a {
            Action::CheckSender { from, params } => {
                self.last_verb = "MAIL";
                if self.rate_limits.of(rates::Event::Mail) > 0 {
                    self.hold_for_rate(rates::Held::Mail(from, params));
                } else {
                    self.check_sender(cx, shared, pool, from, params);
                }
            }
            Action::CheckRecipient { to, params } => {
                self.last_verb = "RCPT";
                if self.rate_limits.of(rates::Event::Rcpt) > 0 {
                    self.hold_for_rate(rates::Held::Rcpt(to, params));
                } else {
                    self.rcpt(cx, shared, pool, to, params);
                }
            }
            Action::CheckData { bdat } => {
                self.last_verb = if bdat { "BDAT" } else { "DATA" };
                self.begin_message(cx, shared, pool);
                self.milter_data(cx);
            }
            Action::Data(bytes) => {
                self.milter_content(cx, &bytes);
                self.send_data(cx, pool, bytes);
            }
            Action::MessageEnd(_summary) => {
                self.last_verb = "END-OF-MESSAGE";
                self.message_end(cx, pool);
            }
            Action::TransactionAborted(reason) => {
                self.milter_abort(cx);
                if let AbortReason::Refused(refusal, _) = reason {
                    let r = refusal.reply();
                    let enh = r.enhanced.map(|e| format!(" {e}")).unwrap_or_default();
                    msg_info!(
                        "{}: reject: END-OF-MESSAGE from {}: {}{enh} {}; from=<{}> proto={} helo=<{}>",
                        self.txn.queue_id.as_deref().unwrap_or("NOQUEUE"),
                        self.client_label(),
                        r.code,
                        r.text(),
                        self.txn.sender,
                        if self.session.is_esmtp() { "ESMTP" } else { "SMTP" },
                        self.session.helo_name().unwrap_or("")
                    );
                }
                self.abort_link_txn(cx, pool);
            }
            Action::StartTls => {
                self.last_verb = "STARTTLS";
                self.flush_output();
                // CVE-2011-0411: whatever the client pipelined after
                // STARTTLS was sent in plaintext and must not be executed.
                self.inbuf.clear();
                match &shared.tls {
                    Some(cfg) if self.stream.start_server_tls(cfg.clone()).is_ok() => {
                        self.handshaking = true
                    }
                    _ => {
                        msg_warn!(
                            "STARTTLS from {} without a TLS configuration",
                            self.client_label()
                        );
                        self.failed = true;
                    }
                }
            }
            Action::Authenticate { mechanism, initial } => {
                self.last_verb = "AUTH";
                self.auth_mechanism = Some(mechanism.clone());
                self.sasl_requests
                    .push(SaslRequest::Begin { mechanism, initial });
            }
            Action::AuthResponse(response) => {
                self.sasl_requests.push(SaslRequest::Respond(response));
            }
            Action::AuthCancelled => {
                self.auth_mechanism = None;
                self.sasl_requests.push(SaslRequest::Cancel);
            }
            Action::CheckUnknown { line } => self.unknown_command(cx, pool, &line),
            Action::CheckVrfy { arg } => {
                self.last_verb = "VRFY";
                if self.rate_limits.of(rates::Event::Rcpt) > 0 {
                    self.hold_for_rate(rates::Held::Vrfy(arg));
                } else {
                    self.check_vrfy(shared, arg);
                }
            }
            Action::Sleep(d) => self.sleep_until = Some(cx.now + d),
            Action::Close => {
                self.last_verb = "QUIT";
                self.closing = true;
            }
            Action::Event(ev) => {
                msg_info!("{:?} from {}", ev, self.client_label());
            }
        }
    }

    /// MAIL FROM, once anvil has counted it (when it counts): the size
    /// and free space checks, then the transaction starts.
    fn check_sender(
        &mut self,
        cx: &mut Cx<'_>,
        shared: &Shared,
        pool: &mut Pool,
        from: Path,
        params: smtp_proto::MailParams,
    ) {
        if let Some(size) = params.size {
            if shared.settings.size_limit > 0 && size > shared.settings.size_limit {
                let _ = self.session.decide(Reply::enhanced(
                    552,
                    StatusCode::MESSAGE_TOO_BIG,
                    "Message size exceeds fixed limit",
                ));
                return;
            }
        }
        if let Some(reply) = shared.space.check(
            cx.now,
            shared.settings.queue_minfree,
            shared.settings.size_limit,
            params.size,
        ) {
            msg_info!(
                "NOQUEUE: reject: MAIL from {}: {} {} {}; proto={} helo=<{}>",
                self.client_label(),
                reply.code,
                reply.enhanced.map(|e| e.to_string()).unwrap_or_default(),
                reply.text(),
                if self.session.is_esmtp() {
                    "ESMTP"
                } else {
                    "SMTP"
                },
                self.session.helo_name().unwrap_or("")
            );
            let _ = self.session.decide(reply);
            return;
        }
        self.txn = Txn {
            sender: match &from {
                Path::Null => String::new(),
                Path::Mailbox(m) => m.to_string(),
            },
            // smtp_proto::dsn: the one mapping, as the smtp agent's.
            ret: params.mail_ret(),
            envid: params.envid.clone(),
            body: params.body_type(),
            smtputf8: params.smtputf8,
            ..Txn::default()
        };
        let sender = self.txn.sender.clone();
        let esmtp = milters::mail_args(&params);
        self.sender_accepted(cx, pool, &sender, &esmtp);
    }

    /// RCPT TO, once anvil has counted it (when it counts): the router
    /// first when the policy needs it, then the policy.
    fn rcpt(
        &mut self,
        cx: &mut Cx<'_>,
        shared: &Shared,
        pool: &mut Pool,
        to: smtp_proto::Mailbox,
        params: smtp_proto::command::RcptParams,
    ) {
        if shared.settings.policy.asks_router(&to) {
            // The router answers asynchronously; the session waits
            // (and so do its pipelined commands, in order).
            self.router_question = Some((to.to_string(), self.txn.smtputf8));
            self.pending_rcpt = Some((to, params));
            return;
        }
        self.check_recipient(cx, pool, shared, to, params, None);
    }

    /// Runs the policy for one recipient, with the router's answer when
    /// it was needed, and answers the RCPT.
    fn check_recipient(
        &mut self,
        cx: &mut Cx<'_>,
        pool: &mut Pool,
        shared: &Shared,
        to: smtp_proto::Mailbox,
        params: smtp_proto::command::RcptParams,
        unlisted: Option<&crate::router::Answer>,
    ) {
        let sender = self.session.sender().and_then(|p| p.mailbox()).cloned();
        let q = policy::Query {
            client_addr: self.peer.ip(),
            client_name: "unknown",
            helo: self.session.helo_name(),
            sender: sender.as_ref(),
            recipient: &to,
            sasl_username: self.sasl_login.as_ref().map(|(_, u)| u.as_str()),
        };
        let lookups = crate::settings::Lookups {
            tables: &shared.settings.tables,
            unlisted,
            verified: &self.verified,
        };
        let verdict = shared.settings.policy.check(&q, &lookups);
        if !matches!(verdict, policy::Verdict::Verify { .. }) {
            self.verified.clear();
        }
        match verdict {
            policy::Verdict::Verify { address } => {
                // Asked asynchronously; the RCPT (and what the client
                // pipelined after it) waits, and is checked again with
                // the answer.
                self.verify_question = Some(address.clone());
                self.asked = Some(address);
                self.pending_unlisted = unlisted.cloned();
                self.pending_rcpt = Some((to, params));
            }
            policy::Verdict::Accept {
                hold,
                discard,
                tenant,
                job,
            } => {
                self.txn.hold |= hold;
                self.txn.discard |= discard;
                // As the action list itself: the last one reached wins.
                if tenant.is_some() {
                    self.txn.tenant = tenant;
                }
                if job.is_some() {
                    self.txn.job = job;
                }
                self.recipient_accepted(cx, pool, params.recipient(to.to_string()));
            }
            policy::Verdict::Refuse {
                reply,
                by: _,
                warning,
            } => {
                // What failed stays out of the reply (Postfix's "Warning is
                // already logged"): the postmaster reads it here.
                if let Some(w) = warning {
                    msg_warn!("{w}");
                }
                msg_info!(
                    "NOQUEUE: reject: RCPT from {}: {reply}; from=<{}> to=<{}> proto={} helo=<{}>",
                    self.client_label(),
                    self.txn.sender,
                    to,
                    if self.session.is_esmtp() {
                        "ESMTP"
                    } else {
                        "SMTP"
                    },
                    self.session.helo_name().unwrap_or("")
                );
                let _ = self.session.decide(reply.into());
            }
        }
    }
}

impl Conn {
    /// VRFY: an address the recipient lookup may know is asked about
    /// (asynchronously, as for RCPT); any other gets 252.
    fn check_vrfy(&mut self, shared: &Shared, arg: String) {
        match vrfy_mailbox(&arg, &shared.settings.myorigin) {
            Some(to) if shared.settings.policy.asks_router(&to) => {
                self.router_question = Some((to.to_string(), to.is_utf8()));
                self.pending_vrfy = Some((to, arg));
            }
            _ => {
                let _ = self.session.decide(Session::vrfy_ambiguous(&arg));
            }
        }
    }

    /// The router's answer for a VRFY: 550 5.1.1 for an unknown user
    /// (Postfix with disable_vrfy_command = no), 252 otherwise.
    fn vrfy_answer(
        &mut self,
        shared: &Shared,
        to: &smtp_proto::Mailbox,
        arg: &str,
        answer: crate::router::Answer,
    ) {
        let lookups = crate::settings::Lookups {
            tables: &shared.settings.tables,
            unlisted: Some(&answer),
            verified: &[],
        };
        let reply = match shared.settings.policy.vrfy(to, &lookups) {
            Some(refusal) => {
                msg_info!(
                    "NOQUEUE: reject: VRFY from {}: {refusal}; to=<{to}> proto={} helo=<{}>",
                    self.client_label(),
                    if self.session.is_esmtp() {
                        "ESMTP"
                    } else {
                        "SMTP"
                    },
                    self.session.helo_name().unwrap_or("")
                );
                refusal.into()
            }
            None => Session::vrfy_ambiguous(arg),
        };
        let _ = self.session.decide(reply);
    }
}

/// The address a VRFY argument names (`user`, `user@domain`, `<…>`, or
/// `Name <…>`, RFC 5321 §3.5.3); an unqualified one is in `origin`, as
/// Postfix qualifies it with $myorigin.
fn vrfy_mailbox(arg: &str, origin: &str) -> Option<smtp_proto::Mailbox> {
    let addr = match arg.rfind('<') {
        Some(i) => arg[i + 1..].trim_end().strip_suffix('>')?,
        None => arg.trim(),
    };
    let addr = if addr.contains('@') {
        addr.to_string()
    } else {
        format!("{addr}@{origin}")
    };
    smtp_proto::address::parse_mailbox(&addr, true).ok()
}
