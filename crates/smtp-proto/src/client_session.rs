//! The SMTP client session: a sans-IO state machine for the smtp delivery agent.
//!
//! Driven like the server session: [`ClientSession::feed`] with the server's
//! bytes, [`ClientSession::poll_action`] for what happened, and
//! [`ClientSession::take_output`] for the bytes to write. It handles the
//! greeting, EHLO with fallback to HELO when EHLO is refused with 5xx,
//! STARTTLS (opportunistic or required), many transactions per connection,
//! PIPELINING (MAIL, every RCPT and DATA go out as one group, RFC 2920), RSET
//! before a transaction when the previous one did not finish, and QUIT.
//!
//! Message content comes from the spool in wire format (CRLF, dot-stuffed), so
//! with DATA [`ClientSession::send_content`] copies it as is and
//! [`ClientSession::end_content`] adds the final `.CRLF`. When the server
//! offers CHUNKING (RFC 3030) the content goes in BDAT chunks instead, with
//! the dot-stuffing undone (a dot that starts a line is dropped), each chunk
//! as one `send_content` gave it (one is held back so that the last can say
//! LAST); with PIPELINING the first chunk follows MAIL and RCPT without
//! waiting (a message of one chunk costs no round trip more than DATA's
//! group), and the others follow once the replies to MAIL and every RCPT
//! are in; without PIPELINING each chunk waits for the reply to the one
//! before ([`ClientSession::wants_content`]). A refused sender, or no
//! recipient accepted, ends the content there: a pipeline full of chunks
//! would each be an error the server counts (Postfix's smtpd disconnects
//! after `smtpd_hard_error_limit` of them). A message without a final CRLF gets
//! one either way, so DATA and BDAT deliver the same bytes. A failed chunk
//! ends the transaction with its reply; chunks already in the pipeline are
//! answered and ignored, and the next transaction starts with RSET. Lines
//! longer than [`ClientConfig::line_length_limit`] are broken with CR LF
//! SPACE on their way out, as Postfix's smtp client does ([`crate::fold`]):
//! in place with DATA, before the chunk is sized with BDAT.
//! ESMTP parameters the server did not announce are dropped (SIZE, BODY,
//! DSN's RET/ENVID/NOTIFY/ORCPT), as are the EHLO keywords named in
//! `discard_ehlo_keywords`; a message that needs SMTPUTF8 from a server
//! without it is given up here with 5.6.7 ([`Unsent`]), as Postfix does.
//! A server without 8BITMIME gets 8-bit MIME parts as quoted-printable
//! ([`crate::mime8`], Postfix's `disable_mime_output_conversion = no`):
//! converted after the dot-stuffing is undone and before it is redone
//! (DATA) or the chunk is sized (BDAT), with SIZE left out for a message
//! that said BODY=8BITMIME, since its size changes; content that cannot be
//! converted is given up ([`Unsent::Mime`]) and the connection dropped
//! without ending the transaction, as Postfix does. A server that offers
//! SMTPUTF8 counts as offering 8BITMIME (Postfix's fix of 20140706).
//! Limits: replies are read with a bounded [`ReplyParser`]. After STARTTLS's 220
//! the session uses no input until [`ClientSession::tls_established`]; the shell
//! must drop plaintext that arrived after the 220 (a server-side injection).
//! AUTH is not used by this client yet. Nothing here logs or panics.
//!
//! With [`ClientConfig::lmtp`] the session speaks LMTP (RFC 2033): LHLO
//! instead of EHLO (no HELO fallback, no STARTTLS), content always with
//! DATA, and after the content one reply per accepted recipient, in RCPT
//! order, each reported as [`ClientAction::Delivered`] before the
//! transaction's [`ClientAction::MessageDone`].

use std::collections::VecDeque;

use crate::address::{Mailbox, Path};
use crate::client::{write_command, Capabilities};
use crate::command::{Body, Command, MailParams, RcptParams};
use crate::fold::Folder;
use crate::mime8::{stuff, Downgrader, MimeError};
use crate::reply::{Reply, ReplyError, ReplyParser, StatusCode};

/// STARTTLS use (Postfix `smtp_tls_security_level`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientTls {
    /// Never STARTTLS.
    Disabled,
    /// STARTTLS when offered (`may`).
    #[default]
    Opportunistic,
    /// STARTTLS or give up (`encrypt`).
    Required,
}

/// Client settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// Our EHLO/HELO name.
    pub helo_name: String,
    /// STARTTLS policy.
    pub tls: ClientTls,
    /// Longest reply line accepted.
    pub max_reply_line: usize,
    /// Most lines in one reply.
    pub max_reply_lines: usize,
    /// EHLO keywords to act as if the server had not sent
    /// (Postfix `smtp_discard_ehlo_keywords`).
    pub discard_ehlo_keywords: Vec<String>,
    /// Speak LMTP (RFC 2033) rather than SMTP.
    pub lmtp: bool,
    /// Longest content line sent; longer ones are broken with CR LF SPACE
    /// as Postfix's `smtp_line_length_limit` (0: none, the library's default).
    pub line_length_limit: usize,
    /// Convert 8-bit MIME parts to quoted-printable for a server without
    /// 8BITMIME (Postfix's `disable_mime_output_conversion = no`).
    pub mime_output_conversion: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            helo_name: "localhost".into(),
            tls: ClientTls::Opportunistic,
            max_reply_line: 2048,
            max_reply_lines: 100,
            discard_ehlo_keywords: Vec::new(),
            lmtp: false,
            line_length_limit: 0,
            mime_output_conversion: true,
        }
    }
}

/// One message's envelope; the content is streamed separately.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Sender.
    pub from: Path,
    /// MAIL parameters wanted (unsupported ones are dropped).
    pub params: MailParams,
    /// Recipients with their parameters.
    pub recipients: Vec<(Mailbox, RcptParams)>,
    /// The message needs SMTPUTF8 of the server: an address or its header
    /// section holds UTF-8 (Postfix's SMTPUTF8_FLAG_SENDER, _RECIPIENT,
    /// _HEADER). Mail that only asked for SMTPUTF8 goes to a server
    /// without it as plain mail, as Postfix sends it.
    pub utf8_required: bool,
}

/// Why the connection is unusable.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientError {
    /// The greeting was not 2xx.
    Greeting(Reply),
    /// EHLO and HELO were both refused.
    Helo(Reply),
    /// TLS is required and the server did not offer or refused STARTTLS.
    TlsUnavailable(Option<Reply>),
    /// The server closed the session (421) or answered out of protocol.
    ServerClosing(Reply),
    /// A reply could not be parsed.
    BadReply(ReplyError),
    /// The server sent a reply nobody was waiting for.
    Unexpected(Reply),
}

/// Why the session gave a message up itself, no server having refused it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsent {
    /// The message needs SMTPUTF8 and the server did not offer it.
    Smtputf8Required,
    /// The content could not be converted to 7 bits for a server without
    /// 8BITMIME; the connection is dropped after it.
    Mime(MimeError),
}

impl Unsent {
    /// The status for every recipient; `relay` names the server for the text.
    pub fn status(self, relay: &str) -> (StatusCode, String) {
        match self {
            Unsent::Smtputf8Required => (
                StatusCode::UTF8_REQUIRED,
                format!("SMTPUTF8 is required, but was not offered by host {relay}"),
            ),
            Unsent::Mime(e) => {
                let (code, text) = e.status();
                (code, text.to_string())
            }
        }
    }
}

/// What the session reports to the delivery agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientAction {
    /// Ready for [`ClientSession::send_message`] (or [`ClientSession::quit`]).
    Ready,
    /// Flush the output (STARTTLS), drop buffered input, handshake, then call
    /// [`ClientSession::tls_established`].
    StartTls,
    /// MAIL was refused: the reply applies to every recipient of the message.
    SenderRefused(Reply),
    /// The session gave the message up itself: this, not the reply in the
    /// [`ClientAction::MessageDone`] that follows, is every recipient's outcome.
    Unsent(Unsent),
    /// The reply to one RCPT (index into the envelope's recipients).
    Recipient {
        /// Index of the recipient.
        index: usize,
        /// The server's reply.
        reply: Reply,
    },
    /// Write the content with [`ClientSession::send_content`], then [`ClientSession::end_content`].
    SendContent,
    /// LMTP: the reply after the content for one accepted recipient
    /// (index into the envelope's recipients); it is that recipient's
    /// outcome, whatever [`ClientAction::MessageDone`] says after.
    Delivered {
        /// Index of the recipient.
        index: usize,
        /// The server's reply for it.
        reply: Reply,
    },
    /// The final reply for every recipient that was accepted (to DATA or to the content).
    MessageDone(Reply),
    /// The connection failed; everything in flight must be retried elsewhere.
    Failed(ClientError),
    /// Close the connection (after flushing the output).
    Close,
}

/// A reply the session is waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Greeting,
    Ehlo,
    Helo,
    StartTls,
    Rset,
    Mail,
    Rcpt(usize),
    Data,
    DataEnd,
    /// The reply to a BDAT chunk that is not the last.
    Bdat,
    /// The reply to BDAT ... LAST: the message's final reply.
    BdatLast,
    /// The end of an empty message sent only because the server said 354 with no recipient accepted.
    DiscardEnd,
    Quit,
}

/// Connection phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for replies in `expect`.
    Talking,
    /// STARTTLS accepted; waiting for the handshake.
    Handshake,
    /// Nothing outstanding; the agent may send a message.
    Idle,
    /// 354 received; the agent is writing content.
    Content,
    /// Done.
    Closed,
}

/// Per-transaction bookkeeping.
#[derive(Debug, Default)]
struct Tx {
    mail_failed: bool,
    mail_reply: Option<Reply>,
    accepted: usize,
    last_two: [u8; 2],
    /// The content goes in BDAT chunks.
    bdat: bool,
    /// BDAT content has been asked for (without PIPELINING, only once a
    /// recipient is accepted).
    content_started: bool,
    /// The unstuffed chunk held back until we know whether it is the last.
    held: Vec<u8>,
    /// The content so far ends inside a line (for undoing dot-stuffing).
    mid_line: bool,
    /// BDAT chunks written whose reply has not come.
    chunks_out: usize,
    /// Where the content is for breaking long lines.
    fold: Folder,
    /// The 8-bit to quoted-printable conversion, for a server without 8BITMIME.
    mime: Option<Downgrader>,
    /// The converted content so far ends inside a line (for redoing
    /// dot-stuffing with DATA).
    stuff_mid: bool,
    /// Indexes of the recipients accepted, in RCPT order (LMTP's replies
    /// after the content come in this order).
    accepted_idx: Vec<usize>,
    /// LMTP: how many of those have had their reply after the content.
    delivered: usize,
}

impl Tx {
    /// Notes the last two bytes of the content sent.
    fn track(&mut self, sent: &[u8]) {
        match sent {
            [] => {}
            [b] => self.last_two = [self.last_two[1], *b],
            [.., a, b] => self.last_two = [*a, *b],
        }
    }
}

/// One SMTP client connection.
#[derive(Debug)]
pub struct ClientSession {
    config: ClientConfig,
    parser: ReplyParser,
    phase: Phase,
    expect: VecDeque<Expect>,
    caps: Option<Capabilities>,
    tls_active: bool,
    needs_rset: bool,
    tx: Option<Tx>,
    /// Commands of the transaction not yet written (servers without PIPELINING).
    pending: VecDeque<(Command, Expect)>,
    output: Vec<u8>,
    actions: VecDeque<Action>,
}

type Action = ClientAction;

impl ClientSession {
    /// A session waiting for the server's greeting; `tls_active` for implicit TLS.
    pub fn new(config: ClientConfig, tls_active: bool) -> Self {
        let parser = ReplyParser::new(config.max_reply_line, config.max_reply_lines);
        Self {
            config,
            parser,
            phase: Phase::Talking,
            expect: VecDeque::from([Expect::Greeting]),
            caps: None,
            tls_active,
            needs_rset: false,
            tx: None,
            pending: VecDeque::new(),
            output: Vec::new(),
            actions: VecDeque::new(),
        }
    }

    /// The server's EHLO capabilities (`None` after HELO fallback or before EHLO).
    pub fn capabilities(&self) -> Option<&Capabilities> {
        self.caps.as_ref()
    }

    /// True when TLS is active.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// True when the session can take a message.
    pub fn is_ready(&self) -> bool {
        self.phase == Phase::Idle
    }

    /// Whether the message goes (or the next would go) with BDAT.
    pub fn uses_bdat(&self) -> bool {
        self.caps.as_ref().is_some_and(|c| c.chunking)
    }

    /// Whether [`ClientSession::send_content`] or
    /// [`ClientSession::end_content`] may be called now: in the content
    /// phase, and for BDAT without PIPELINING, once the previous chunk's
    /// reply is in; with PIPELINING, for the first chunk at once and for
    /// the others once MAIL's and every RCPT's reply is in.
    pub fn wants_content(&self) -> bool {
        if self.phase != Phase::Content {
            return false;
        }
        let pipelining = self.caps.as_ref().is_some_and(|c| c.pipelining);
        match &self.tx {
            Some(tx) if tx.bdat && !pipelining => tx.chunks_out == 0,
            Some(tx) if tx.bdat => tx.chunks_out == 0 || !self.envelope_pending(),
            Some(_) => true,
            None => false,
        }
    }

    /// Whether a reply to the transaction's RSET, MAIL or an RCPT is still
    /// to come.
    fn envelope_pending(&self) -> bool {
        self.expect
            .iter()
            .any(|e| matches!(e, Expect::Rset | Expect::Mail | Expect::Rcpt(_)))
    }

    /// Pipelined BDAT content whose envelope turned out refused (the
    /// sender, or every recipient) stops here: the transaction ends with
    /// the refusal, and the replies to chunks already written are read and
    /// ignored (RFC 3030 §2 allows no chunk after a failed one anyway).
    fn stop_refused_content(&mut self) {
        if self.phase != Phase::Content || self.envelope_pending() {
            return;
        }
        let refused = self
            .tx
            .as_ref()
            .is_some_and(|t| t.bdat && (t.mail_failed || t.accepted == 0));
        if refused {
            self.phase = Phase::Talking;
            self.finish_tx(None);
        }
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Bytes to write.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.output)
    }

    /// The next action.
    pub fn poll_action(&mut self) -> Option<ClientAction> {
        self.actions.pop_front()
    }

    fn send(&mut self, cmd: &Command, expect: Expect) {
        write_command(cmd, &mut self.output);
        self.expect.push_back(expect);
    }

    /// EHLO, or LHLO for LMTP (which has no command of its own in the
    /// server's table: it is written here).
    fn hello(&mut self) {
        if self.config.lmtp {
            self.output
                .extend_from_slice(format!("LHLO {}\r\n", self.config.helo_name).as_bytes());
            self.expect.push_back(Expect::Ehlo);
        } else {
            let ehlo = Command::Ehlo(self.config.helo_name.clone());
            self.send(&ehlo, Expect::Ehlo);
        }
    }

    fn fail(&mut self, e: ClientError) {
        if self.phase == Phase::Closed {
            return;
        }
        self.actions.push_back(Action::Failed(e));
        self.quit_now();
    }

    fn quit_now(&mut self) {
        self.expect.clear();
        self.pending.clear();
        self.send(&Command::Quit, Expect::Quit);
        self.phase = Phase::Talking;
    }

    /// Ends the connection politely (QUIT), once idle.
    pub fn quit(&mut self) {
        if self.phase == Phase::Idle {
            self.quit_now();
        }
    }

    /// The TLS handshake is done: EHLO again (RFC 3207 §4.2).
    pub fn tls_established(&mut self) {
        if self.phase == Phase::Handshake {
            self.tls_active = true;
            self.caps = None;
            self.phase = Phase::Talking;
            self.hello();
        }
    }

    /// Feeds server bytes; returns how many were used.
    pub fn feed(&mut self, input: &[u8]) -> usize {
        let mut used = 0;
        while used < input.len()
            && matches!(self.phase, Phase::Talking | Phase::Idle | Phase::Content)
        {
            let (n, reply) = self.parser.parse(&input[used..]);
            used += n;
            match reply {
                None => break,
                Some(Err(e)) => {
                    self.fail(ClientError::BadReply(e));
                    self.phase = Phase::Closed;
                    self.actions.push_back(Action::Close);
                }
                Some(Ok(r)) => self.on_reply(r),
            }
        }
        used
    }

    fn on_reply(&mut self, r: Reply) {
        let Some(expect) = self.expect.pop_front() else {
            if r.code == 421 {
                self.fail(ClientError::ServerClosing(r));
            } else {
                self.fail(ClientError::Unexpected(r));
            }
            return;
        };
        if r.code == 421 && expect != Expect::Quit {
            // The server is going away; whatever is in flight is deferred.
            // At the greeting it is a refusal to talk, as Postfix logs it.
            let e = if expect == Expect::Greeting {
                ClientError::Greeting(r)
            } else {
                ClientError::ServerClosing(r)
            };
            self.actions.push_back(Action::Failed(e));
            self.phase = Phase::Closed;
            self.actions.push_back(Action::Close);
            return;
        }
        match expect {
            Expect::Greeting => {
                if r.class() == 2 {
                    self.hello();
                } else {
                    self.fail(ClientError::Greeting(r));
                }
            }
            Expect::Ehlo => {
                if r.class() == 2 {
                    let mut caps = Capabilities::from_ehlo(&r);
                    caps.discard(&self.config.discard_ehlo_keywords);
                    let want_tls = self.config.tls != ClientTls::Disabled
                        && !self.tls_active
                        && !self.config.lmtp;
                    if want_tls && caps.starttls {
                        self.send(&Command::StartTls, Expect::StartTls);
                    } else if self.config.tls == ClientTls::Required && !self.tls_active {
                        self.fail(ClientError::TlsUnavailable(None));
                        return;
                    } else {
                        self.idle();
                    }
                    self.caps = Some(caps);
                } else if r.class() == 5 && !self.config.lmtp {
                    let helo = Command::Helo(self.config.helo_name.clone());
                    self.send(&helo, Expect::Helo);
                } else {
                    self.fail(ClientError::Helo(r));
                }
            }
            Expect::Helo => {
                if r.class() != 2 {
                    self.fail(ClientError::Helo(r));
                } else if self.config.tls == ClientTls::Required && !self.tls_active {
                    self.fail(ClientError::TlsUnavailable(None));
                } else {
                    self.caps = None;
                    self.idle();
                }
            }
            Expect::StartTls => {
                if r.code == 220 {
                    self.phase = Phase::Handshake;
                    self.actions.push_back(Action::StartTls);
                } else if self.config.tls == ClientTls::Required {
                    self.fail(ClientError::TlsUnavailable(Some(r)));
                } else {
                    self.idle();
                }
            }
            Expect::Rset => {
                if r.class() == 2 {
                    self.needs_rset = false;
                    self.maybe_idle();
                } else {
                    self.fail(ClientError::Unexpected(r));
                }
            }
            Expect::Mail => {
                if r.class() != 2 {
                    if let Some(tx) = &mut self.tx {
                        tx.mail_failed = true;
                        tx.mail_reply = Some(r.clone());
                    }
                    self.actions.push_back(Action::SenderRefused(r));
                } else {
                    // From here the server holds a transaction until it ends.
                    self.needs_rset = true;
                }
                self.stop_refused_content();
                self.maybe_idle();
            }
            Expect::Rcpt(index) => {
                let mail_failed = self.tx.as_ref().filter(|t| !t.mail_failed).is_none();
                if !mail_failed {
                    if r.class() == 2 {
                        if let Some(tx) = &mut self.tx {
                            tx.accepted += 1;
                            tx.accepted_idx.push(index);
                        }
                    }
                    self.actions
                        .push_back(Action::Recipient { index, reply: r });
                }
                self.stop_refused_content();
                self.maybe_idle();
            }
            Expect::Data => {
                let accepted =
                    self.tx
                        .as_ref()
                        .map_or(0, |t| if t.mail_failed { 0 } else { t.accepted });
                if r.code == 354 && accepted > 0 {
                    self.phase = Phase::Content;
                    self.actions.push_back(Action::SendContent);
                } else if r.code == 354 {
                    // RFC 2920 §3.1: a 354 with no valid recipient is answered
                    // with an empty message, whose reply is ignored.
                    self.output.extend_from_slice(b".\r\n");
                    self.expect.push_back(Expect::DiscardEnd);
                } else {
                    if accepted > 0 {
                        self.finish_tx(Some(r));
                    } else {
                        self.finish_tx(None);
                    }
                    self.maybe_idle();
                }
            }
            Expect::DiscardEnd => {
                self.finish_tx(None);
                self.maybe_idle();
            }
            Expect::DataEnd => {
                if self.config.lmtp {
                    let next = self.tx.as_mut().and_then(|t| {
                        let index = t.accepted_idx.get(t.delivered).copied()?;
                        t.delivered += 1;
                        Some((index, t.delivered < t.accepted_idx.len()))
                    });
                    if let Some((index, more)) = next {
                        self.actions.push_back(Action::Delivered {
                            index,
                            reply: r.clone(),
                        });
                        if more {
                            // The next recipient's reply comes next.
                            self.expect.push_front(Expect::DataEnd);
                            return;
                        }
                    }
                }
                self.needs_rset = false;
                self.finish_tx(Some(r));
                self.maybe_idle();
            }
            Expect::Bdat | Expect::BdatLast => self.on_bdat_reply(r, expect == Expect::BdatLast),
            Expect::Quit => {
                self.phase = Phase::Closed;
                self.actions.push_back(Action::Close);
            }
        }
    }

    fn on_bdat_reply(&mut self, r: Reply, last: bool) {
        let Some(tx) = self.tx.as_mut() else {
            // A chunk that was in the pipeline when an earlier one failed.
            self.maybe_idle();
            return;
        };
        tx.chunks_out = tx.chunks_out.saturating_sub(1);
        let accepted = if tx.mail_failed { 0 } else { tx.accepted };
        if r.class() == 2 && !last {
            return;
        }
        if r.class() == 2 {
            self.needs_rset = false;
        }
        // RFC 3030 §2: after a failed chunk no more may be sent; the reply
        // (or, with no recipient accepted, the MAIL/RCPT outcome) is final.
        if self.phase == Phase::Content {
            self.phase = Phase::Talking;
        }
        self.finish_tx((accepted > 0).then_some(r));
        self.maybe_idle();
    }

    fn idle(&mut self) {
        self.phase = Phase::Idle;
        self.actions.push_back(Action::Ready);
    }

    /// Reports the end of the transaction once: `reply` applies to the accepted
    /// recipients; without one, the MAIL refusal or a local "no recipient" reply.
    fn finish_tx(&mut self, reply: Option<Reply>) {
        let Some(tx) = self.tx.take() else { return };
        self.pending.clear();
        let reply = reply.or(tx.mail_reply).unwrap_or_else(|| {
            Reply::enhanced(554, StatusCode::PROTOCOL, "no recipient was accepted")
        });
        self.actions.push_back(Action::MessageDone(reply));
    }

    /// Writes the next command of a non-pipelined transaction, or goes idle
    /// once every reply is in.
    fn maybe_idle(&mut self) {
        if !self.expect.is_empty() || self.phase != Phase::Talking {
            return;
        }
        let (mail_failed, accepted) = self
            .tx
            .as_ref()
            .map_or((true, 0), |t| (t.mail_failed, t.accepted));
        if let Some((cmd, expect)) = self.pending.pop_front() {
            // Without PIPELINING we can stop early: no RCPT after a refused
            // MAIL, no DATA without an accepted recipient.
            let skip = mail_failed || (expect == Expect::Data && accepted == 0);
            if !skip {
                self.send(&cmd, expect);
                return;
            }
        } else if !mail_failed && accepted > 0 {
            if let Some(tx) = self.tx.as_mut().filter(|t| t.bdat && !t.content_started) {
                tx.content_started = true;
                self.phase = Phase::Content;
                self.actions.push_back(Action::SendContent);
                return;
            }
        }
        self.finish_tx(None);
        self.idle();
    }

    /// Starts a transaction; `false` when the session is not ready.
    ///
    /// With PIPELINING, MAIL, the RCPTs and DATA are written at once; without,
    /// one at a time as replies come.
    pub fn send_message(&mut self, env: &Envelope) -> bool {
        self.start(env, false)
    }

    /// Starts an address verification probe: MAIL, the RCPTs and RSET,
    /// never DATA (Postfix's verify probes stop there too). Each RCPT's
    /// reply comes as [`ClientAction::Recipient`]; `MessageDone` follows
    /// the RSET. `false` when the session is not ready.
    pub fn send_probe(&mut self, env: &Envelope) -> bool {
        self.start(env, true)
    }

    fn start(&mut self, env: &Envelope, probe: bool) -> bool {
        if self.phase != Phase::Idle || env.recipients.is_empty() {
            return false;
        }
        let caps = self.caps.clone().unwrap_or_default();
        if env.params.smtputf8 && !caps.smtputf8 && env.utf8_required {
            let reply = Reply::enhanced(
                553,
                StatusCode::UTF8_REQUIRED,
                "SMTPUTF8 is required, but was not offered by the host",
            );
            self.actions
                .push_back(Action::Unsent(Unsent::Smtputf8Required));
            self.tx = Some(Tx {
                mail_failed: true,
                mail_reply: Some(reply),
                ..Tx::default()
            });
            self.finish_tx(None);
            self.actions.push_back(Action::Ready);
            return true;
        }
        let mut params = env.params.clone();
        // Asked for, not needed (all ASCII), not offered: sent without.
        params.smtputf8 &= caps.smtputf8;
        let eight_bit = caps.eight_bit_mime || caps.smtputf8;
        let downgrade = self.config.mime_output_conversion && !eight_bit && !probe;
        // Converted content may be larger than the SIZE the envelope knows,
        // whatever BODY= said: Postfix leaves SIZE out when it may convert.
        if caps.size.is_none() || downgrade {
            params.size = None;
        }
        match params.body {
            Some(Body::EightBitMime) if !eight_bit => params.body = None,
            Some(Body::BinaryMime) => params.body = None,
            _ => {}
        }
        if !caps.dsn {
            params.ret = None;
            params.envid = None;
        }
        self.phase = Phase::Talking;
        // LMTP's replies per recipient are DATA's (RFC 2033 section 4.2).
        let bdat = caps.chunking && !self.config.lmtp && !probe;
        self.tx = Some(Tx {
            bdat,
            fold: Folder::new(self.config.line_length_limit),
            mime: downgrade.then(Downgrader::new),
            ..Tx::default()
        });
        if self.needs_rset {
            self.pending.push_back((Command::Rset, Expect::Rset));
        }
        let mail = Command::Mail {
            from: env.from.clone(),
            params,
        };
        self.pending.push_back((mail, Expect::Mail));
        for (i, (to, rp)) in env.recipients.iter().enumerate() {
            let mut rp = rp.clone();
            if !caps.dsn {
                rp = RcptParams::default();
            }
            let cmd = Command::Rcpt {
                to: to.clone(),
                params: rp,
            };
            self.pending.push_back((cmd, Expect::Rcpt(i)));
        }
        if probe {
            self.pending.push_back((Command::Rset, Expect::Rset));
        } else if !bdat {
            self.pending.push_back((Command::Data, Expect::Data));
        }
        if caps.pipelining {
            // RFC 2920: RSET, MAIL, RCPT… and DATA form one group; with
            // CHUNKING the BDAT chunks follow at once (RFC 3030 §4.2).
            while let Some((cmd, expect)) = self.pending.pop_front() {
                self.send(&cmd, expect);
            }
            if let Some(tx) = self.tx.as_mut().filter(|t| t.bdat) {
                tx.content_started = true;
                self.phase = Phase::Content;
                self.actions.push_back(Action::SendContent);
            }
        } else if let Some((cmd, expect)) = self.pending.pop_front() {
            self.send(&cmd, expect);
        }
        true
    }

    /// As [`ClientSession::send_content`] for at most `max` bytes that
    /// `fill` reads into the buffer it is given: with DATA they are read
    /// straight into the session's output, where the spool's wire format
    /// (dot-stuffed) is what goes on the wire, so the content is not copied
    /// on its way from the spool to the socket. Gives what `fill` gave.
    pub fn send_content_from<E>(
        &mut self,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let direct = self.wants_content()
            && self
                .tx
                .as_ref()
                .is_some_and(|t| !t.bdat && t.mime.is_none());
        if !direct {
            let mut buf = vec![0u8; max];
            let n = fill(&mut buf)?;
            self.send_content(&buf[..n.min(max)]);
            return Ok(n);
        }
        let at = self.output.len();
        self.output.resize(at + max, 0);
        let got = fill(&mut self.output[at..]);
        let n = *got.as_ref().unwrap_or(&0);
        self.output.truncate(at + n.min(max));
        if n > 0 {
            if let Some(tx) = &mut self.tx {
                let end = self.output.len();
                tx.last_two = match n {
                    1 => [tx.last_two[1], self.output[end - 1]],
                    _ => [self.output[end - 2], self.output[end - 1]],
                };
                // Lines within the limit (nearly all) stay where they were read.
                if !tx.fold.passes(&self.output[at..], true) {
                    let read = self.output.split_off(at);
                    tx.fold.fold(&read, true, &mut self.output);
                }
            }
        }
        got
    }

    /// Writes message content (wire format from the spool) after [`ClientAction::SendContent`].
    ///
    /// With BDAT, call it only while [`ClientSession::wants_content`] says so.
    pub fn send_content(&mut self, chunk: &[u8]) {
        if !self.wants_content() || chunk.is_empty() {
            return;
        }
        let Some(tx) = &mut self.tx else { return };
        if tx.mime.is_none() {
            tx.track(chunk);
        }
        if !tx.bdat && tx.mime.is_none() {
            tx.fold.fold(chunk, true, &mut self.output);
            return;
        }
        let mut unstuffed = Vec::with_capacity(chunk.len());
        tx.mid_line = unstuff(chunk, tx.mid_line, &mut unstuffed);
        if let Some(mime) = tx.mime.as_mut() {
            let mut converted = Vec::with_capacity(unstuffed.len() + unstuffed.len() / 8);
            let done = mime.push(&unstuffed, &mut converted);
            tx.track(&converted);
            if let Err(e) = done {
                return self.give_up(e);
            }
            unstuffed = converted;
            if !tx.bdat {
                let mut wire = Vec::with_capacity(unstuffed.len() + 8);
                tx.stuff_mid = stuff(&unstuffed, tx.stuff_mid, &mut wire);
                tx.fold.fold(&wire, true, &mut self.output);
                return;
            }
        }
        // Broken before it is held: a chunk's BDAT size counts the breaks.
        let plain = if tx.fold.is_off() {
            unstuffed
        } else {
            let mut folded = Vec::with_capacity(unstuffed.len() + unstuffed.len() / 64);
            tx.fold.fold(&unstuffed, false, &mut folded);
            folded
        };
        if plain.is_empty() {
            return;
        }
        let ready = std::mem::replace(&mut tx.held, plain);
        if !ready.is_empty() {
            self.send_chunk(ready, false);
        }
    }

    /// Content that cannot be converted: the message is given up and the
    /// connection dropped in the middle of the transaction, the only way
    /// to cancel it (as Postfix's smtp client does).
    fn give_up(&mut self, e: MimeError) {
        let (code, text) = e.status();
        self.actions.push_back(Action::Unsent(Unsent::Mime(e)));
        self.finish_tx(Some(Reply::enhanced(554, code, text)));
        self.output.clear();
        self.expect.clear();
        self.pending.clear();
        self.phase = Phase::Closed;
        self.actions.push_back(Action::Close);
    }

    fn send_chunk(&mut self, bytes: Vec<u8>, last: bool) {
        let cmd = Command::Bdat {
            size: bytes.len() as u64,
            last,
        };
        self.send(&cmd, if last { Expect::BdatLast } else { Expect::Bdat });
        self.output.extend_from_slice(&bytes);
        if let Some(tx) = &mut self.tx {
            tx.chunks_out += 1;
        }
        if !last {
            // A server that took (or refused) a chunk without LAST holds
            // BDAT state until LAST or RSET, even when MAIL was refused:
            // Postfix's smtpd answers the next MAIL "503 5.5.1 Error: MAIL
            // after BDAT". The next transaction starts with RSET unless
            // LAST's 2xx ends this one.
            self.needs_rset = true;
        }
    }

    /// How many CR LF SPACE breaks the current message's long lines got.
    pub fn lines_broken(&self) -> u64 {
        self.tx.as_ref().map_or(0, |t| t.fold.broken())
    }

    /// Ends the content with `.CRLF` (adding a CRLF first if the content lacked one).
    pub fn end_content(&mut self) {
        if !self.wants_content() {
            return;
        }
        if let Some(tx) = self.tx.as_mut() {
            if let Some(mime) = tx.mime.as_mut() {
                let mut rest = Vec::new();
                let done = mime.finish(&mut rest);
                tx.track(&rest);
                if let Err(e) = done {
                    return self.give_up(e);
                }
                if tx.bdat {
                    tx.fold.fold(&rest, false, &mut tx.held);
                } else {
                    let mut wire = Vec::with_capacity(rest.len() + 8);
                    tx.stuff_mid = stuff(&rest, tx.stuff_mid, &mut wire);
                    tx.fold.fold(&wire, true, &mut self.output);
                }
            }
        }
        let ends_crlf = self.tx.as_ref().is_some_and(|t| t.last_two == *b"\r\n");
        let empty = self.tx.as_ref().is_some_and(|t| t.last_two == [0, 0]);
        if let Some(tx) = self.tx.as_mut().filter(|t| t.bdat) {
            let mut last = std::mem::take(&mut tx.held);
            tx.fold.finish(&mut last);
            if !ends_crlf && !empty {
                last.extend_from_slice(b"\r\n");
            }
            self.send_chunk(last, true);
            self.phase = Phase::Talking;
            return;
        }
        if let Some(tx) = &mut self.tx {
            tx.fold.finish(&mut self.output);
        }
        if !ends_crlf && !empty {
            self.output.extend_from_slice(b"\r\n");
        }
        self.output.extend_from_slice(b".\r\n");
        self.expect.push_back(Expect::DataEnd);
        self.phase = Phase::Talking;
    }
}

/// Appends `wire` to `out` without dot-stuffing: a dot that starts a line
/// (after LF, as the spool's readers count lines) is dropped. `mid_line`
/// says whether the previous chunk ended inside a line; the same for this
/// one is returned.
pub fn unstuff(wire: &[u8], mut mid_line: bool, out: &mut Vec<u8>) -> bool {
    let mut rest = wire;
    while !rest.is_empty() {
        if !mid_line && rest[0] == b'.' {
            rest = &rest[1..];
            mid_line = true;
            continue;
        }
        mid_line = true;
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                out.extend_from_slice(&rest[..=i]);
                rest = &rest[i + 1..];
                mid_line = false;
            }
            None => {
                out.extend_from_slice(rest);
                rest = &[];
            }
        }
    }
    mid_line
}

#[cfg(test)]
#[path = "client_session_tests.rs"]
mod tests;
