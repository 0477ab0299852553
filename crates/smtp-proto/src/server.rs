//! The SMTP server session: a sans-IO state machine from greeting to QUIT.
//!
//! The shell (smtpd) drives a [`Session`] quinn-proto style:
//! 1. [`Session::feed`] with received bytes; it returns how many it used;
//! 2. [`Session::poll_action`] until `None`, acting on each [`Action`]; the
//!    `Check*` and [`Action::MessageEnd`] actions are questions, answered later
//!    (maybe asynchronously) with [`Session::decide`]; until then `feed` uses
//!    no input;
//! 3. [`Session::take_output`] and write it: at once when
//!    [`Session::should_flush`] says so (a reply that ends a pipelining group,
//!    RFC 2920), and in any case once the shell has no more input to feed.
//!
//! What it enforces: command order (503 5.5.1; MAIL before HELO only with
//! `helo_required`, as Postfix), TLS-required mode (530 5.7.0),
//! ESMTP parameters against the configured extensions (555 5.5.4), command line
//! length (500 5.5.2), recipients per
//! message (452 4.5.3), message size (552 5.3.4 for SIZE= and for the content),
//! junk commands, a total command limit and the hard error limit (421 4.7.0 and
//! close), RFC 5321 §3.1's 554-greeting mode (only QUIT, everything else 503).
//! STARTTLS: after `220`, the session emits [`Action::StartTls`] and uses no
//! more input until [`Session::tls_established`]; everything the client sent
//! after the STARTTLS line in plaintext must be dropped by the shell (the
//! CVE-2011-0411 class), and the session forgets HELO/EHLO (RFC 3207 §4.2).
//! Policy is not here: the session asks through actions.
//! Memory: a command line is at most `max_command_line` bytes; message content
//! is streamed out as [`Action::Data`] chunks no larger than the input fed;
//! reply bytes grow only with input fed, so the shell applies backpressure by
//! not feeding while [`Session::output_len`] is large (the error and junk
//! limits end a garbage flood). Not done here: detection of improper
//! pipelining and of talking before the greeting (timing, so the shell's job),
//! EXPN (502), ETRN/XCLIENT (unrecognized).
//! AUTH (RFC 4954) is relayed: the session checks its order and syntax,
//! asks [`Action::Authenticate`] and relays challenges and responses
//! (`server_auth.rs`); who checks the password is the shell's business.
//! It never panics on peer input and does not log: [`Event`]s are for the log.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::address::{Mailbox, Path};
use crate::command::{
    parse_command, Body, Command, CommandError, MailParams, ParseOptions, RcptParams, Verb,
    COMMANDS,
};
use crate::receiver::{
    BareNewline, BdatReceiver, DataReceiver, DataSummary, ReceiverLimits, Refusal,
};
use crate::reply::{Reply, StatusCode};

/// How VRFY is answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VrfyMode {
    /// `252 2.0.0 <arg>`: neither confirm nor deny (Postfix `disable_vrfy_command = no` without a lookup).
    #[default]
    Ambiguous252,
    /// `502 5.5.1 VRFY command is disabled`.
    Disabled502,
}

/// STARTTLS policy (Postfix `smtpd_tls_security_level`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsPolicy {
    /// No STARTTLS.
    #[default]
    None,
    /// STARTTLS offered.
    May,
    /// STARTTLS offered and required before MAIL (530 5.7.0 otherwise).
    Encrypt,
}

/// Server settings shared by all sessions of an smtpd process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// Our host name, in the greeting and the EHLO reply.
    pub hostname: String,
    /// Greeting text after the host name (`smtpd_banner` minus `$myhostname`).
    pub banner: String,
    /// Longest command line accepted, CRLF excluded.
    pub max_command_line: usize,
    /// Recipients per message (`smtpd_recipient_limit`).
    pub max_recipients: usize,
    /// Message size limit in octets, 0 for none (`message_size_limit`).
    pub max_message_size: u64,
    /// Longest content line, `None` to accept any (Postfix behaviour).
    pub max_data_line: Option<usize>,
    /// Errors before `421` and disconnect (`smtpd_hard_error_limit`).
    pub hard_error_limit: u32,
    /// Errors after which each reply waits `error_sleep` (`smtpd_soft_error_limit`).
    pub soft_error_limit: u32,
    /// The wait before each reply past the soft limit (`smtpd_error_sleep_time`).
    pub error_sleep: Duration,
    /// Junk commands (NOOP, RSET, VRFY, …) before each counts as an error (`smtpd_junk_command_limit`).
    pub junk_command_limit: u32,
    /// Commands per session before `421`, 0 for no limit.
    pub max_commands: u32,
    /// Advertise and accept PIPELINING.
    pub pipelining: bool,
    /// Advertise and accept 8BITMIME.
    pub eight_bit_mime: bool,
    /// Advertise and accept SMTPUTF8.
    pub smtputf8: bool,
    /// Advertise ENHANCEDSTATUSCODES and put enhanced codes in replies.
    pub enhanced_status_codes: bool,
    /// Advertise and accept CHUNKING (BDAT).
    pub chunking: bool,
    /// Advertise and accept BINARYMIME (needs `chunking`).
    pub binarymime: bool,
    /// Advertise and accept DSN parameters.
    pub dsn: bool,
    /// STARTTLS policy.
    pub tls: TlsPolicy,
    /// VRFY behaviour.
    pub vrfy: VrfyMode,
    /// Bare LF / CR policy for commands and content.
    pub bare_newline: BareNewline,
    /// Refuse MAIL before HELO/EHLO (Postfix `smtpd_helo_required`, default no).
    pub helo_required: bool,
    /// Every 5xx reply is sent as 4xx (Postfix `soft_bounce`).
    pub soft_bounce: bool,
    /// Offer and accept AUTH (`smtpd_sasl_auth_enable`).
    pub sasl: bool,
    /// AUTH only under TLS (`smtpd_tls_auth_only`).
    pub tls_auth_only: bool,
    /// Ask before answering a command not recognized
    /// ([`Action::CheckUnknown`]: milters hear it, as with Postfix).
    pub ask_unknown: bool,
    /// Ask before answering VRFY ([`Action::CheckVrfy`]), so that an
    /// unknown local user gets 550 5.1.1 rather than 252 (as Postfix).
    pub ask_vrfy: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            hostname: "localhost".into(),
            banner: "ESMTP Sluice".into(),
            max_command_line: 2048,
            max_recipients: 1000,
            max_message_size: 10_240_000,
            max_data_line: None,
            hard_error_limit: 20,
            soft_error_limit: 10,
            error_sleep: Duration::from_secs(1),
            junk_command_limit: 100,
            max_commands: 0,
            pipelining: true,
            eight_bit_mime: true,
            smtputf8: true,
            enhanced_status_codes: true,
            chunking: true,
            binarymime: false,
            dsn: true,
            tls: TlsPolicy::None,
            vrfy: VrfyMode::Ambiguous252,
            bare_newline: BareNewline::Reject,
            helo_required: false,
            soft_bounce: false,
            sasl: false,
            tls_auth_only: true,
            ask_unknown: false,
            ask_vrfy: false,
        }
    }
}

/// Why a transaction ended without a final reply from the shell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AbortReason {
    /// RSET.
    Rset,
    /// A new EHLO/HELO.
    Helo,
    /// QUIT or the session closing.
    Closed,
    /// The receiver refused the content (size, bare newline, long line).
    Refused(Refusal, DataSummary),
    /// The shell refused DATA or the first BDAT.
    DataRefused,
}

/// Things worth a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A command line ended with a bare LF (accepted).
    BareNewlineInCommand,
    /// A command line longer than `max_command_line`.
    CommandTooLong,
    /// The hard error limit was reached; the session closes.
    TooManyErrors,
    /// The command limit was reached; the session closes.
    TooManyCommands,
}

/// What the session asks of the shell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Question: is this sender accepted? Answer with [`Session::decide`].
    CheckSender {
        /// The reverse path.
        from: Path,
        /// MAIL parameters.
        params: MailParams,
    },
    /// Question: is this recipient accepted? Answer with [`Session::decide`].
    CheckRecipient {
        /// The recipient.
        to: Mailbox,
        /// RCPT parameters.
        params: RcptParams,
    },
    /// Question: may the content start (DATA, or the first BDAT)? A positive
    /// answer makes the session send its own 354 (DATA) or read the chunk (BDAT);
    /// a negative one is sent as is.
    CheckData {
        /// True for BDAT.
        bdat: bool,
    },
    /// Message content, wire format (CRLF, dot-stuffed), in order.
    Data(Vec<u8>),
    /// Question (with [`ServerConfig::ask_unknown`]): a command line with
    /// no known verb; answer with the reply to send (502 5.5.2, or a
    /// temporary refusal in its place).
    CheckUnknown {
        /// The line as the client sent it, without CRLF.
        line: String,
    },
    /// Question (with [`ServerConfig::ask_vrfy`]): VRFY of this argument;
    /// answer with the reply to send: [`Session::vrfy_ambiguous`], or the
    /// refusal the recipient lookup gives an unknown user.
    CheckVrfy {
        /// The argument as the client wrote it.
        arg: String,
    },
    /// Question: the content is complete; answer with the final reply (250 only
    /// once the message is durable).
    MessageEnd(DataSummary),
    /// The current transaction ended without a final answer: drop its content.
    TransactionAborted(AbortReason),
    /// Flush the output (it ends with the 220), drop every unconsumed plaintext
    /// byte, start the TLS handshake, then call [`Session::tls_established`].
    StartTls,
    /// Question: authenticate with this mechanism (RFC 4954 AUTH). Answer
    /// with [`Session::decide`]: a `334` reply carries the next challenge
    /// (its text is the base64, as is), a `2xx` means authenticated, any
    /// other reply ends the exchange.
    Authenticate {
        /// The mechanism, as the client wrote it.
        mechanism: String,
        /// The initial response, base64 (empty for `=`), if given.
        initial: Option<String>,
    },
    /// Question: the client's response to the last challenge (base64).
    /// Answered as [`Action::Authenticate`].
    AuthResponse(String),
    /// The client cancelled the exchange (`*`) or sent an unusable
    /// response: the session answered it; forget the exchange.
    AuthCancelled,
    /// Write what [`Session::take_output`] gives now, then wait this long
    /// (the client made `soft_error_limit` errors) and call
    /// [`Session::wake`]; until then no input is used and the next reply
    /// is held back. Other sessions go on meanwhile: it is a timer, not a sleep.
    Sleep(Duration),
    /// Flush the output, then close the connection.
    Close,
    /// Something to log.
    Event(Event),
}

/// [`Session::decide`] was called with no question pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotWaiting;

impl std::fmt::Display for NotWaiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no decision pending")
    }
}

impl std::error::Error for NotWaiting {}

/// The question the session is waiting on.
#[derive(Debug)]
enum Pending {
    Sender { from: Path, params: MailParams },
    Recipient,
    Data,
    FirstChunk { size: u64, last: bool },
    MessageEnd,
    Auth,
    Unknown,
    Vrfy,
}

/// Protocol states.
#[derive(Debug)]
enum State {
    /// 554 greeting sent; only QUIT is honoured (RFC 5321 §3.1).
    ExpectQuit,
    /// Reading command lines.
    ExpectCommand,
    /// A question is out; no input is used.
    ExpectDecision(Pending),
    /// Reading DATA content up to CRLF.CRLF.
    ExpectData(DataReceiver),
    /// Reading `remaining` octets of a BDAT chunk; `fail` is the reply when the chunk is being discarded.
    ExpectChunk {
        size: u64,
        remaining: u64,
        last: bool,
        fail: Option<Reply>,
    },
    /// 220 sent to STARTTLS; waiting for the handshake.
    ExpectTls,
    /// A 334 challenge sent; the next line is the client's response.
    ExpectAuthResponse,
    /// Done.
    Closed,
}

/// A mail transaction in progress.
#[derive(Debug)]
struct Transaction {
    params: MailParams,
    sender: Path,
    recipients: usize,
    bdat: Option<BdatReceiver>,
    data_seen: bool,
}

/// One SMTP server session.
#[derive(Debug)]
pub struct Session {
    config: Arc<ServerConfig>,
    state: State,
    tls_active: bool,
    helo: Option<String>,
    esmtp: bool,
    tx: Option<Transaction>,
    line: Vec<u8>,
    line_overflow: bool,
    /// The last command line ended with CRLF (not a bare LF).
    line_crlf: bool,
    output: Vec<u8>,
    flush: bool,
    actions: VecDeque<Action>,
    errors: u32,
    junk: u32,
    commands: u32,
    /// Verb of the command whose decision is pending, for the stats.
    pending_verb: Option<Verb>,
    stats: CommandStats,
    /// The mechanisms AUTH offers, as the shell last set them.
    auth_mechanisms: Vec<String>,
    /// AUTH succeeded in this session.
    authenticated: bool,
    /// While an error sleep runs: output from this offset on is held.
    held_from: Option<usize>,
    /// A command ended in a bare LF already (reported once per session).
    bare_lf_seen: bool,
}

fn r(code: u16, e: StatusCode, text: &str) -> Reply {
    Reply::enhanced(code, e, text)
}

fn bad_sequence(text: &str) -> Reply {
    r(503, StatusCode::INVALID_COMMAND, text)
}

impl Session {
    /// A session that greets with `220 hostname banner`; `tls_active` for implicit TLS (port 465).
    pub fn new(config: Arc<ServerConfig>, tls_active: bool) -> Self {
        let greeting = Reply::new(220, None, format!("{} {}", config.hostname, config.banner));
        let mut s = Self::with_state(config, tls_active, State::ExpectCommand);
        s.send(greeting);
        s
    }

    /// A session that greets with `reply` (a 554 refusal) and then only honours QUIT.
    pub fn new_refusing(config: Arc<ServerConfig>, tls_active: bool, reply: Reply) -> Self {
        let mut s = Self::with_state(config, tls_active, State::ExpectQuit);
        s.send(reply);
        s.flush = true;
        s
    }

    fn with_state(config: Arc<ServerConfig>, tls_active: bool, state: State) -> Self {
        Self {
            config,
            state,
            tls_active,
            helo: None,
            esmtp: false,
            tx: None,
            line: Vec::new(),
            line_overflow: false,
            line_crlf: true,
            output: Vec::new(),
            flush: true,
            actions: VecDeque::new(),
            errors: 0,
            junk: 0,
            commands: 0,
            pending_verb: None,
            stats: CommandStats::default(),
            auth_mechanisms: Vec::new(),
            authenticated: false,
            held_from: None,
            bare_lf_seen: false,
        }
    }

    /// VRFY's answer when nothing says the address is unknown:
    /// `252 2.0.0 <arg>`, neither confirmed nor denied (RFC 5321 §3.5.3).
    pub fn vrfy_ambiguous(arg: &str) -> Reply {
        r(252, StatusCode::OK, arg)
    }

    /// The HELO/EHLO name, once given.
    pub fn helo_name(&self) -> Option<&str> {
        self.helo.as_deref()
    }

    /// True after EHLO (rather than HELO).
    pub fn is_esmtp(&self) -> bool {
        self.esmtp
    }

    /// True when TLS is active.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// The sender of the transaction in progress.
    pub fn sender(&self) -> Option<&Path> {
        self.tx.as_ref().map(|t| &t.sender)
    }

    /// The MAIL parameters of the transaction in progress.
    pub fn mail_params(&self) -> Option<&MailParams> {
        self.tx.as_ref().map(|t| &t.params)
    }

    /// Errors counted so far (toward `hard_error_limit`).
    pub fn error_count(&self) -> u32 {
        self.errors
    }

    /// Per-command counts for the disconnect log line.
    pub fn stats(&self) -> &CommandStats {
        &self.stats
    }

    /// True once the session has closed (after QUIT, 421 or the 554 mode's QUIT).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// True while a `Check*` or `MessageEnd` question awaits [`Session::decide`].
    pub fn is_waiting(&self) -> bool {
        matches!(self.state, State::ExpectDecision(_))
    }

    /// True when the output must be written now, before reading more input.
    pub fn should_flush(&self) -> bool {
        self.flush && self.has_output()
    }

    /// True when there are reply bytes to write now (held ones excluded).
    pub fn has_output(&self) -> bool {
        self.held_from.unwrap_or(self.output.len()) > 0
    }

    /// True between [`Action::Sleep`] and [`Session::wake`].
    pub fn is_sleeping(&self) -> bool {
        self.held_from.is_some()
    }

    /// The error sleep is over: the held reply may go, input is used again.
    pub fn wake(&mut self) {
        if self.held_from.take().is_some() {
            self.flush = true;
        }
    }

    /// Reply bytes waiting; a shell stops feeding input while this is large
    /// (a client that pipelines without reading replies must not grow it forever).
    pub fn output_len(&self) -> usize {
        self.output.len()
    }

    /// True between STARTTLS's 220 and [`Session::tls_established`]: no input is
    /// used, and buffered plaintext must be dropped.
    pub fn is_awaiting_tls(&self) -> bool {
        matches!(self.state, State::ExpectTls)
    }

    /// Takes the reply bytes to write (not those an error sleep holds).
    pub fn take_output(&mut self) -> Vec<u8> {
        match self.held_from.as_mut() {
            Some(at) => self.output.drain(..std::mem::take(at)).collect(),
            None => {
                self.flush = false;
                std::mem::take(&mut self.output)
            }
        }
    }

    /// The next action, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Closes the session from the shell's side (timeout, shutdown), after `reply` if given.
    pub fn close(&mut self, reply: Option<Reply>) {
        if self.is_closed() {
            return;
        }
        if let Some(reply) = reply {
            self.send(reply);
        }
        self.shut();
    }

    /// The TLS handshake finished: the session starts afresh (RFC 3207 §4.2).
    pub fn tls_established(&mut self) {
        if matches!(self.state, State::ExpectTls) {
            self.tls_active = true;
            self.helo = None;
            self.esmtp = false;
            self.authenticated = false;
            self.line.clear();
            self.line_overflow = false;
            self.state = State::ExpectCommand;
        }
    }

    fn send(&mut self, mut reply: Reply) {
        if self.config.soft_bounce {
            reply = reply.softened();
        }
        reply.write_to(&mut self.output, self.config.enhanced_status_codes);
    }

    /// Sends a reply to a command, counting errors toward the hard limit.
    /// Past the soft limit it waits first, whatever the reply (Postfix's
    /// smtpd_chat_reply "sleep-on-anything").
    fn respond(&mut self, reply: Reply, verb: Option<Verb>) {
        if self.errors >= self.config.soft_error_limit
            && !self.config.error_sleep.is_zero()
            && self.held_from.is_none()
        {
            self.held_from = Some(self.output.len());
            self.actions
                .push_back(Action::Sleep(self.config.error_sleep));
        }
        let ok = !reply.is_error();
        if !ok && reply.code != 421 {
            self.errors += 1;
        }
        self.count(verb, ok);
        self.send(reply);
    }

    fn count(&mut self, verb: Option<Verb>, ok: bool) {
        match verb.and_then(|v| COMMANDS.iter().position(|c| c.verb == v)) {
            Some(i) => {
                let e = &mut self.stats.per_verb[i];
                e.1 += 1;
                e.0 += u32::from(ok);
            }
            None => self.stats.unknown += 1,
        }
    }

    fn shut(&mut self) {
        // The goodbye is not delayed: the session ends here.
        self.held_from = None;
        self.abort_tx(AbortReason::Closed);
        self.state = State::Closed;
        self.flush = true;
        self.actions.push_back(Action::Close);
    }

    fn abort_tx(&mut self, reason: AbortReason) {
        if self.tx.take().is_some() {
            self.actions.push_back(Action::TransactionAborted(reason));
        }
    }

    fn limits(&self) -> ReceiverLimits {
        let binary = self
            .tx
            .as_ref()
            .is_some_and(|t| t.params.body == Some(Body::BinaryMime));
        ReceiverLimits {
            max_size: self.config.max_message_size,
            max_line: if binary {
                None
            } else {
                self.config.max_data_line
            },
            // Binary content legitimately holds lone CR and LF octets.
            bare_newline: if binary {
                BareNewline::Allow
            } else {
                self.config.bare_newline
            },
        }
    }

    /// Answers the pending question with `reply`.
    pub fn decide(&mut self, reply: Reply) -> Result<(), NotWaiting> {
        let State::ExpectDecision(pending) =
            std::mem::replace(&mut self.state, State::ExpectCommand)
        else {
            return Err(NotWaiting);
        };
        let verb = self.pending_verb.take();
        let ok = reply.is_positive();
        match pending {
            Pending::Sender { from, params } => {
                if ok {
                    self.tx = Some(Transaction {
                        params,
                        sender: from,
                        recipients: 0,
                        bdat: None,
                        data_seen: false,
                    });
                }
                self.respond(reply, verb);
            }
            Pending::Recipient => {
                if ok {
                    if let Some(tx) = &mut self.tx {
                        tx.recipients += 1;
                    }
                }
                self.respond(reply, verb);
            }
            Pending::Data => {
                if ok {
                    // Counted when the message ends, as Postfix's `data=1`.
                    self.pending_verb = verb;
                    self.send(Reply::new(354, None, "End data with <CR><LF>.<CR><LF>"));
                    self.flush = true;
                    if let Some(tx) = &mut self.tx {
                        tx.data_seen = true;
                    }
                    let rx = if self.line_crlf {
                        DataReceiver::new(self.limits())
                    } else {
                        DataReceiver::after_bare_newline(self.limits())
                    };
                    self.state = State::ExpectData(rx);
                } else {
                    self.respond(reply, verb);
                }
            }
            Pending::FirstChunk { size, last } => {
                let fail = if ok {
                    let limits = self.limits();
                    if let Some(tx) = &mut self.tx {
                        tx.bdat = Some(BdatReceiver::new(limits));
                    }
                    None
                } else {
                    Some(reply)
                };
                self.pending_verb = verb;
                self.state = State::ExpectChunk {
                    size,
                    remaining: size,
                    last,
                    fail,
                };
            }
            Pending::MessageEnd => {
                self.tx = None;
                if ok {
                    // A delivered message forgives earlier errors (Postfix's
                    // smtpd.c: error_count and junk_cmds go back to 0).
                    self.errors = 0;
                    self.junk = 0;
                }
                self.respond(reply, verb);
            }
            Pending::Auth => self.auth_decided(reply, verb),
            Pending::Unknown => self.respond(reply, None),
            Pending::Vrfy => self.respond(reply, verb),
        }
        Ok(())
    }

    /// Feeds received bytes; returns how many were used (the rest must be fed again later).
    pub fn feed(&mut self, input: &[u8]) -> usize {
        let mut used = 0;
        loop {
            if self.is_sleeping() {
                return used;
            }
            let rest = &input[used..];
            let state = std::mem::replace(&mut self.state, State::Closed);
            let (n, progressed) = match state {
                State::ExpectCommand | State::ExpectQuit | State::ExpectAuthResponse => {
                    let quit_only = matches!(state, State::ExpectQuit);
                    self.state = state;
                    self.read_line(rest, quit_only)
                }
                State::ExpectData(mut rx) => {
                    // Content comes out about as long as it went in: one
                    // allocation, no copies as the buffer grows.
                    let mut out = Vec::with_capacity(rest.len());
                    let (n, end) = rx.feed(rest, &mut out);
                    if !out.is_empty() {
                        self.actions.push_back(Action::Data(out));
                    }
                    match end {
                        Some(summary) => {
                            let verb = self.pending_verb.take();
                            self.content_end(summary, verb)
                        }
                        None => self.state = State::ExpectData(rx),
                    }
                    (n, n > 0 || end.is_some())
                }
                State::ExpectChunk {
                    size,
                    remaining,
                    last,
                    fail,
                } => self.read_chunk(rest, (size, remaining), last, fail),
                s @ (State::ExpectDecision(_) | State::ExpectTls | State::Closed) => {
                    self.state = s;
                    (0, false)
                }
            };
            used += n;
            if !progressed {
                return used;
            }
        }
    }

    /// Reads (part of) one command line; executes it when complete.
    fn read_line(&mut self, rest: &[u8], quit_only: bool) -> (usize, bool) {
        if rest.is_empty() {
            return (0, false);
        }
        let (take, complete) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (rest.len(), false),
        };
        let body = &rest[..if complete { take - 1 } else { take }];
        if self.line.len() + body.len() > self.config.max_command_line + 1 {
            // +1 leaves room for the CR of CRLF.
            self.line_overflow = true;
            self.line.clear();
        } else if !self.line_overflow {
            self.line.extend_from_slice(body);
        }
        if !complete {
            return (take, true);
        }
        let mut line = std::mem::take(&mut self.line);
        let overflow = std::mem::replace(&mut self.line_overflow, false);
        let crlf = line.last() == Some(&b'\r');
        if crlf {
            line.pop();
        }
        self.line_crlf = crlf;
        if matches!(self.state, State::ExpectAuthResponse) {
            self.auth_line(&line, overflow);
        } else {
            self.command_line(&line, crlf, overflow, quit_only);
        }
        (take, true)
    }

    fn command_line(&mut self, line: &[u8], crlf: bool, overflow: bool, quit_only: bool) {
        if self.errors >= self.config.hard_error_limit {
            self.actions.push_back(Action::Event(Event::TooManyErrors));
            let text = format!("{} Error: too many errors", self.config.hostname);
            self.send(r(421, StatusCode::TEMP_SECURITY, &text));
            self.shut();
            return;
        }
        self.commands += 1;
        if self.config.max_commands > 0 && self.commands > self.config.max_commands {
            self.actions
                .push_back(Action::Event(Event::TooManyCommands));
            let text = format!("{} Error: too many commands", self.config.hostname);
            self.send(r(421, StatusCode::TEMP_SECURITY, &text));
            self.shut();
            return;
        }
        if overflow {
            self.actions.push_back(Action::Event(Event::CommandTooLong));
            self.respond(
                r(500, StatusCode::SYNTAX_ERROR, "Error: line too long"),
                None,
            );
            return;
        }
        if !crlf && !self.bare_lf_seen {
            // Accepted in every mode, as Postfix's default (normalize) does:
            // netcat and many scripts end commands so. A command line holds
            // no content, so nothing can be smuggled through it; DATA after
            // one starts its content as if after a bare LF (`decide`).
            // Reported once per session, not once per command.
            self.bare_lf_seen = true;
            self.actions
                .push_back(Action::Event(Event::BareNewlineInCommand));
        }
        let opts = ParseOptions {
            utf8_transaction: self.tx.as_ref().is_some_and(|t| t.params.smtputf8),
        };
        let cmd = match parse_command(line, opts) {
            Ok(c) => c,
            Err(e) => {
                // Count it against its verb when the verb was known.
                let verb = std::str::from_utf8(line)
                    .ok()
                    .and_then(|l| l.split([' ', '\t']).next())
                    .and_then(Verb::from_name);
                if quit_only {
                    self.respond(bad_sequence("Error: send QUIT"), verb);
                } else if e == CommandError::Unrecognized
                    && verb.is_none()
                    && self.config.ask_unknown
                {
                    self.flush = true;
                    let line = String::from_utf8_lossy(line).into_owned();
                    self.actions.push_back(Action::CheckUnknown { line });
                    self.state = State::ExpectDecision(Pending::Unknown);
                } else {
                    self.respond(e.reply(), verb);
                }
                return;
            }
        };
        let verb = cmd.verb();
        if verb.info().ends_group {
            self.flush = true;
        }
        if quit_only {
            if verb == Verb::Quit {
                self.count(Some(verb), true);
                self.send(r(221, StatusCode::OK, "Bye"));
                self.shut();
            } else {
                self.respond(bad_sequence("Error: send QUIT"), Some(verb));
            }
            return;
        }
        if verb.info().junk {
            self.junk += 1;
            if self.junk > self.config.junk_command_limit {
                self.errors += 1;
            }
        }
        if self.config.tls == TlsPolicy::Encrypt && !self.tls_active && !verb.info().before_tls {
            let reply = r(
                530,
                StatusCode::SECURITY,
                "Must issue a STARTTLS command first",
            );
            if let Command::Bdat { size, .. } = cmd {
                self.discard_chunk(size, false, reply, verb);
            } else {
                self.respond(reply, Some(verb));
            }
            return;
        }
        self.execute(cmd);
    }

    fn ask(&mut self, action: Action, pending: Pending, verb: Verb) {
        self.actions.push_back(action);
        self.pending_verb = Some(verb);
        self.state = State::ExpectDecision(pending);
    }

    fn execute(&mut self, cmd: Command) {
        let verb = Some(cmd.verb());
        match cmd {
            Command::Ehlo(name) | Command::Helo(name) => {
                self.abort_tx(AbortReason::Helo);
                self.esmtp = verb == Some(Verb::Ehlo);
                self.helo = Some(name);
                let reply = if self.esmtp {
                    self.ehlo_reply()
                } else {
                    Reply::new(250, None, self.config.hostname.clone())
                };
                self.respond(reply, verb);
            }
            Command::Mail { from, params } => {
                if self.helo.is_none() && self.config.helo_required {
                    self.respond(bad_sequence("Error: send HELO/EHLO first"), verb);
                } else if self.tx.is_some() {
                    self.respond(bad_sequence("Error: nested MAIL command"), verb);
                } else if let Some(reply) = self.check_mail_params(&params) {
                    self.respond(reply, verb);
                } else {
                    let action = Action::CheckSender {
                        from: from.clone(),
                        params: params.clone(),
                    };
                    self.ask(action, Pending::Sender { from, params }, Verb::Mail);
                }
            }
            Command::Rcpt { to, params } => {
                let recipients = self.tx.as_ref().map(|t| t.recipients);
                if recipients.is_none() {
                    self.respond(bad_sequence("Error: need MAIL command"), verb);
                } else if !self.config.dsn && (params.notify.is_some() || params.orcpt.is_some()) {
                    let key = if params.notify.is_some() {
                        "NOTIFY"
                    } else {
                        "ORCPT"
                    };
                    self.respond(unsupported(key), verb);
                } else if recipients >= Some(self.config.max_recipients) {
                    self.count(verb, false);
                    self.send(r(
                        452,
                        StatusCode::TOO_MANY_RECIPIENTS,
                        "Error: too many recipients",
                    ));
                } else {
                    self.ask(
                        Action::CheckRecipient { to, params },
                        Pending::Recipient,
                        Verb::Rcpt,
                    );
                }
            }
            Command::Data => match self.content_precheck(false) {
                Some(reply) => self.respond(reply, verb),
                None => self.ask(Action::CheckData { bdat: false }, Pending::Data, Verb::Data),
            },
            Command::Bdat { size, last } => {
                if !self.config.chunking {
                    self.respond(not_implemented(), verb);
                } else if let Some(reply) = self.content_precheck(true) {
                    self.discard_chunk(size, last, reply, Verb::Bdat);
                } else if self.tx.as_ref().is_some_and(|t| t.bdat.is_some()) {
                    self.pending_verb = verb;
                    self.state = State::ExpectChunk {
                        size,
                        remaining: size,
                        last,
                        fail: None,
                    };
                } else {
                    let pending = Pending::FirstChunk { size, last };
                    self.ask(Action::CheckData { bdat: true }, pending, Verb::Bdat);
                }
            }
            Command::Rset => {
                self.abort_tx(AbortReason::Rset);
                self.respond(Reply::ok(), verb);
            }
            Command::Noop => self.respond(Reply::ok(), verb),
            Command::Vrfy(arg)
                if self.config.ask_vrfy && self.config.vrfy == VrfyMode::Ambiguous252 =>
            {
                self.ask(Action::CheckVrfy { arg }, Pending::Vrfy, Verb::Vrfy)
            }
            Command::Vrfy(arg) => {
                let reply = match self.config.vrfy {
                    VrfyMode::Ambiguous252 => Self::vrfy_ambiguous(&arg),
                    VrfyMode::Disabled502 => {
                        r(502, StatusCode::INVALID_COMMAND, "VRFY command is disabled")
                    }
                };
                self.respond(reply, verb);
            }
            Command::Expn(_) => self.respond(not_implemented(), verb),
            Command::Help => self.respond(self.help_reply(), verb),
            Command::Quit => {
                self.count(verb, true);
                self.send(r(221, StatusCode::OK, "Bye"));
                self.shut();
            }
            Command::StartTls => {
                if self.config.tls == TlsPolicy::None {
                    self.respond(not_implemented(), verb);
                } else if self.tls_active {
                    self.respond(
                        r(
                            554,
                            StatusCode::INVALID_COMMAND,
                            "Error: TLS already active",
                        ),
                        verb,
                    );
                } else if self.tx.is_some() {
                    self.respond(bad_sequence("Error: MAIL transaction in progress"), verb);
                } else {
                    self.count(verb, true);
                    self.send(r(220, StatusCode::OK, "Ready to start TLS"));
                    self.flush = true;
                    self.state = State::ExpectTls;
                    self.actions.push_back(Action::StartTls);
                }
            }
            Command::Auth(arg) => self.auth_command(&arg),
        }
    }

    /// Checks MAIL parameters against the enabled extensions and limits.
    fn check_mail_params(&self, p: &MailParams) -> Option<Reply> {
        let c = &self.config;
        if let Some(size) = p.size {
            if c.max_message_size > 0 && size > c.max_message_size {
                let text = "Message size exceeds fixed limit";
                return Some(r(552, StatusCode::MESSAGE_TOO_BIG, text));
            }
        }
        match p.body {
            Some(Body::EightBitMime) if !c.eight_bit_mime => {
                return Some(unsupported("BODY=8BITMIME"))
            }
            Some(Body::BinaryMime) if !(c.binarymime && c.chunking) => {
                return Some(unsupported("BODY=BINARYMIME"))
            }
            _ => {}
        }
        if p.smtputf8 && !c.smtputf8 {
            return Some(unsupported("SMTPUTF8"));
        }
        if !c.dsn && (p.ret.is_some() || p.envid.is_some()) {
            return Some(unsupported(if p.ret.is_some() { "RET" } else { "ENVID" }));
        }
        if p.auth.is_some() && self.auth_offer().is_none() {
            return Some(unsupported("AUTH"));
        }
        None
    }

    /// Order checks shared by DATA and BDAT; `Some` is the refusal.
    fn content_precheck(&self, bdat: bool) -> Option<Reply> {
        let Some(tx) = &self.tx else {
            return Some(bad_sequence("Error: need MAIL command"));
        };
        if tx.recipients == 0 {
            return Some(bad_sequence("Error: need RCPT command"));
        }
        if !bdat && tx.bdat.is_some() {
            return Some(bad_sequence("Error: DATA after BDAT"));
        }
        if !bdat && tx.params.body == Some(Body::BinaryMime) {
            return Some(bad_sequence("Error: BODY=BINARYMIME requires BDAT"));
        }
        if bdat && tx.data_seen {
            return Some(bad_sequence("Error: BDAT after DATA"));
        }
        None
    }

    /// Consumes a BDAT chunk that will be refused with `reply` (RFC 3030 §2: the
    /// chunk's octets follow the command whatever the answer).
    fn discard_chunk(&mut self, size: u64, last: bool, reply: Reply, verb: Verb) {
        self.pending_verb = Some(verb);
        self.state = State::ExpectChunk {
            size,
            remaining: size,
            last,
            fail: Some(reply),
        };
    }

    /// Reads chunk octets; `(size, remaining)` of the chunk.
    fn read_chunk(
        &mut self,
        rest: &[u8],
        (size, remaining): (u64, u64),
        last: bool,
        fail: Option<Reply>,
    ) -> (usize, bool) {
        let take = usize::try_from(remaining)
            .unwrap_or(usize::MAX)
            .min(rest.len());
        let remaining = remaining - take as u64;
        if fail.is_none() {
            if let Some(rx) = self.tx.as_mut().and_then(|t| t.bdat.as_mut()) {
                let mut out = Vec::with_capacity(take);
                rx.feed(&rest[..take], &mut out);
                if !out.is_empty() {
                    self.actions.push_back(Action::Data(out));
                }
            }
        }
        if remaining > 0 {
            self.state = State::ExpectChunk {
                size,
                remaining,
                last,
                fail,
            };
            return (take, take > 0);
        }
        let verb = self.pending_verb.take();
        self.state = State::ExpectCommand;
        if let Some(reply) = fail {
            // A refused first chunk ends the transaction: the client must not
            // send more chunks for it (RFC 3030 §2), and any it sends find no
            // transaction.
            if self
                .tx
                .as_ref()
                .is_some_and(|t| t.bdat.is_none() && t.recipients > 0)
            {
                self.abort_tx(AbortReason::DataRefused);
            }
            self.respond(reply, verb);
            return (take, true);
        }
        let Some(rx) = self.tx.as_mut().and_then(|t| t.bdat.as_mut()) else {
            self.respond(bad_sequence("Error: need MAIL command"), verb);
            return (take, true);
        };
        let mut out = Vec::new();
        let summary = if last {
            Some(rx.finish(&mut out))
        } else {
            None
        };
        let total = rx.size();
        if !out.is_empty() {
            self.actions.push_back(Action::Data(out));
        }
        match summary {
            Some(summary) => self.content_end(summary, verb),
            None if self.config.max_message_size > 0 && total > self.config.max_message_size => {
                // Refuse at once rather than after gigabytes more chunks.
                let summary = DataSummary {
                    size: total,
                    refusal: Some(Refusal::TooBig),
                    ..DataSummary::default()
                };
                self.content_end(summary, verb);
            }
            None => {
                let text = format!("Ok: {size} octets");
                self.respond(r(250, StatusCode::OK, &text), verb);
            }
        }
        (take, true)
    }

    /// The content is complete: refuse it here or ask the shell for the final reply.
    fn content_end(&mut self, summary: DataSummary, verb: Option<Verb>) {
        match summary.refusal {
            Some(refusal) => {
                self.state = State::ExpectCommand;
                self.abort_tx(AbortReason::Refused(refusal, summary));
                self.respond(refusal.reply(), verb);
            }
            None => {
                self.actions.push_back(Action::MessageEnd(summary));
                self.pending_verb = verb;
                self.state = State::ExpectDecision(Pending::MessageEnd);
            }
        }
    }
}

fn unsupported(key: &str) -> Reply {
    r(
        555,
        StatusCode::INVALID_ARGUMENTS,
        &format!("Unsupported option: {key}"),
    )
}

fn not_implemented() -> Reply {
    r(
        502,
        StatusCode::INVALID_COMMAND,
        "Error: command not implemented",
    )
}

#[path = "server_auth.rs"]
mod auth;

#[path = "server_offer.rs"]
mod offer;

#[path = "server_stats.rs"]
mod stats;
pub use stats::CommandStats;

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
