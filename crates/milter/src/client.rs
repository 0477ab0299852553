//! One milter connection of one SMTP session, sans-IO.
//!
//! The session's events ([`Client::connect`], [`Client::helo`],
//! [`Client::mail`], [`Client::rcpt`], [`Client::data`],
//! [`Client::content`], [`Client::end_of_message`], [`Client::abort`])
//! are queued as packets and sent one at a time: the next goes out only
//! when the milter has answered the last (as Postfix does, so a milter
//! that rejects a header never sees the rest). [`Client::transmit`] gives
//! the bytes to write, [`Client::receive`] takes the milter's, and
//! [`Client::poll_event`] says what was decided.
//!
//! Negotiation offers every action and the protocol flags of the version
//! offered (`milter_protocol`); below 6, or with a milter that answers
//! with an older version, the flags that version lacks are not honoured
//! and the events it lacks (DATA below 4, unknown commands below 3) are
//! never sent, as Postfix's `milter8_connect` does. The macros sent with
//! each event are those its list names ([`crate::macros`]), or the
//! milter's own list when it gave one at negotiation.
//!
//! The stages a milter declines at negotiation (SMFIP_NO*) are not sent,
//! those it does not answer (SMFIP_NR_*) are not waited for; both are
//! decided `Continue` at once, so the caller waits the same way for every
//! stage it needs a verdict of: connect, helo, mail, rcpt and end of
//! message. Header, body and data verdicts are kept for the end of the
//! message: a milter that rejects at a header rejects the message at its
//! end, as with Postfix. Modifications come only in answer to the end of
//! the message and are handed over with its verdict
//! ([`Client::take_edits`]). A protocol error or a shutdown request is an
//! [`Event::Failed`]; the caller then applies `milter_default_action`.

use std::collections::VecDeque;

pub use mail::headers::HeaderChange;

use crate::codec::{self, act, cmd, proto, Decoder, Response};
use crate::content::Part;
use crate::macros::MacroLists;
pub use crate::stage::Stage;

/// What a milter decided at a stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Go on.
    Continue,
    /// Accept; this milter wants no more events for the message (at
    /// connect or helo: for the session).
    Accept,
    /// Reject, with the milter's own reply if it gave one.
    Reject(Option<String>),
    /// Fail temporarily, with the milter's own reply if it gave one.
    Tempfail(Option<String>),
    /// Accept and throw the message away.
    Discard,
}

/// A change to the message, asked at its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    /// Add, insert, change or delete a header.
    Header(HeaderChange),
    /// Add a recipient.
    AddRecipient {
        /// The address, maybe in angle brackets.
        address: String,
        /// ESMTP arguments.
        args: Option<String>,
    },
    /// Delete a recipient.
    DeleteRecipient {
        /// The address, maybe in angle brackets.
        address: String,
    },
    /// Change the envelope sender.
    ChangeSender {
        /// The address, maybe in angle brackets.
        address: String,
        /// ESMTP arguments.
        args: Option<String>,
    },
    /// The new body (all chunks joined; CRLF, not dot-stuffed).
    ReplaceBody(Vec<u8>),
    /// Hold the message, for this reason.
    Quarantine(String),
}

/// What the caller hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The verdict of a stage the caller waits for (connect, helo, mail,
    /// rcpt, end of message).
    Verdict(Stage, Verdict),
    /// The milter is still working: its timer starts again.
    Progress,
    /// The milter broke the protocol or asked to be dropped.
    Failed(String),
}

struct Command {
    stage: Stage,
    /// The macro packet (if any) and the command packet.
    bytes: Vec<u8>,
    /// Someone waits for its verdict.
    wanted: bool,
}

/// One milter connection.
pub struct Client {
    out: Vec<u8>,
    decoder: Decoder,
    queue: VecDeque<Command>,
    /// The command whose answer is due, whether its verdict is waited
    /// for, and whether it still counts (false once abandoned).
    awaiting: Option<(Stage, bool, bool)>,
    /// (actions, protocol flags) once negotiated.
    negotiated: Option<(u32, u32)>,
    events: VecDeque<Event>,
    /// The milter accepted or refused the session: nothing more is sent.
    session_done: bool,
    /// The milter decided the message: no more of it is sent.
    message_done: bool,
    /// The verdict it decided the message with, for the end of the message.
    message_verdict: Option<Verdict>,
    skip_body: bool,
    edits: Vec<Edit>,
    /// Bytes of edits taken for one message, and the most allowed.
    edit_bytes: usize,
    edit_limit: usize,
    failed: bool,
    /// The protocol version offered (`milter_protocol`).
    version: u32,
    /// The macros sent at each stage (the milter may replace lists).
    macros: MacroLists,
}

impl Default for Client {
    fn default() -> Self {
        Self::new(codec::VERSION)
    }
}

impl Client {
    /// A client that starts with option negotiation, offering `version`
    /// (`milter_protocol`: 2 to 6) and the protocol flags that version
    /// defines; every action is offered, as Postfix does.
    pub fn new(version: u32) -> Self {
        let mut neg = Vec::with_capacity(12);
        neg.extend_from_slice(&version.to_be_bytes());
        neg.extend_from_slice(&act::ALL.to_be_bytes());
        neg.extend_from_slice(&proto::of_version(version).to_be_bytes());
        let mut out = Vec::new();
        codec::encode(&mut out, cmd::OPTNEG, &neg);
        Client {
            out,
            decoder: Decoder::default(),
            queue: VecDeque::new(),
            awaiting: Some((Stage::Negotiate, false, true)),
            negotiated: None,
            events: VecDeque::new(),
            session_done: false,
            message_done: false,
            message_verdict: None,
            skip_body: false,
            edits: Vec::new(),
            edit_bytes: 0,
            edit_limit: usize::MAX,
            failed: false,
            version,
            macros: MacroLists::default(),
        }
    }

    /// The macro lists (`milter_*_macros`); a milter's own at negotiation
    /// replace them.
    pub fn set_macros(&mut self, lists: MacroLists) {
        self.macros = lists;
    }

    /// Bounds the edits of one message (headers, body, addresses) in
    /// bytes: a milter that sends more has failed.
    pub fn set_edit_limit(&mut self, bytes: usize) {
        self.edit_limit = bytes;
    }

    /// The client connected: its name, address and port (`family` is
    /// `'4'`, `'6'`, `'L'` for local or `'U'` for unknown).
    pub fn connect(
        &mut self,
        macros: &[(&str, String)],
        name: &str,
        family: u8,
        port: u16,
        addr: &str,
    ) {
        let mut data = codec::strings([name]);
        data.push(family);
        if family != b'U' {
            data.extend_from_slice(&port.to_be_bytes());
            data.extend_from_slice(&codec::strings([addr]));
        }
        self.push(Stage::Connect, macros, data, true);
    }

    /// HELO or EHLO with this name.
    pub fn helo(&mut self, macros: &[(&str, String)], name: &str) {
        self.push(Stage::Helo, macros, codec::strings([name]), true);
    }

    /// MAIL FROM: the sender in angle brackets, then ESMTP parameters.
    /// A new transaction: what was decided for the last one is forgotten.
    pub fn mail(&mut self, macros: &[(&str, String)], args: &[&str]) {
        self.message_done = false;
        self.message_verdict = None;
        self.skip_body = false;
        self.edits.clear();
        self.edit_bytes = 0;
        let data = codec::strings(args.iter().copied());
        self.push(Stage::Mail, macros, data, true);
    }

    /// RCPT TO: the recipient in angle brackets, then ESMTP parameters.
    pub fn rcpt(&mut self, macros: &[(&str, String)], args: &[&str]) {
        let data = codec::strings(args.iter().copied());
        self.push(Stage::Rcpt, macros, data, true);
    }

    /// DATA (its verdict counts at the end of the message).
    pub fn data(&mut self, macros: &[(&str, String)]) {
        self.push(Stage::Data, macros, Vec::new(), false);
    }

    /// Headers, end of headers and body, as [`crate::content::Splitter`] makes them.
    pub fn content(&mut self, macros: &[(&str, String)], part: &Part) {
        match part {
            Part::Header(name, value) => {
                // The space after the colon only for a milter that asked
                // for it (SMFIP_HDR_LEADSPC), as Postfix does.
                let value = if self.leading_space() {
                    value.as_str()
                } else {
                    value.trim_start_matches([' ', '\t'])
                };
                let data = codec::strings([name.as_str(), value]);
                self.push(Stage::Header, &[], data, false);
            }
            Part::EndOfHeaders => self.push(Stage::Eoh, macros, Vec::new(), false),
            Part::Body(bytes) => {
                for chunk in bytes.chunks(codec::BODY_CHUNK) {
                    self.push(Stage::Body, &[], chunk.to_vec(), false);
                }
            }
        }
    }

    /// The end of the message: its verdict and edits come back.
    pub fn end_of_message(&mut self, macros: &[(&str, String)]) {
        self.push(Stage::Eom, macros, Vec::new(), true);
    }

    /// An unknown SMTP command, as the client sent it.
    pub fn unknown(&mut self, macros: &[(&str, String)], command: &str) {
        self.push(Stage::Unknown, macros, codec::strings([command]), true);
    }

    /// The transaction is abandoned: what was queued for it is dropped,
    /// an answer due for it is ignored, and the milter is told.
    pub fn abort(&mut self) {
        self.queue.retain(|c| !c.stage.in_transaction());
        if let Some((stage, _, live)) = self.awaiting.as_mut() {
            if stage.in_transaction() {
                *live = false;
            }
        }
        self.message_done = false;
        self.message_verdict = None;
        self.edits.clear();
        if !self.session_done {
            let mut bytes = Vec::new();
            codec::encode(&mut bytes, cmd::ABORT, b"");
            self.queue.push_back(Command {
                stage: Stage::Abort,
                bytes,
                wanted: false,
            });
        }
        self.pump();
    }

    /// The session ends: QUIT goes after what is queued.
    pub fn quit(&mut self) {
        let mut bytes = Vec::new();
        codec::encode(&mut bytes, cmd::QUIT, b"");
        self.queue.push_back(Command {
            stage: Stage::Quit,
            bytes,
            wanted: false,
        });
        self.pump();
    }

    fn leading_space(&self) -> bool {
        self.negotiated
            .is_some_and(|(_, p)| p & proto::HDR_LEADSPC != 0)
    }

    /// Bytes to write to the milter (taken: the caller writes them all
    /// or keeps the rest).
    pub fn transmit(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Whether a stage waits for the milter's answer, and which.
    pub fn awaiting(&self) -> Option<Stage> {
        self.awaiting.map(|(s, _, _)| s)
    }

    /// Commands queued behind the one in flight, in bytes (for back-pressure).
    pub fn backlog(&self) -> usize {
        self.queue.iter().map(|c| c.bytes.len()).sum::<usize>() + self.out.len()
    }

    /// Whether QUIT has gone out and nothing more will come.
    pub fn is_finished(&self) -> bool {
        self.failed || (self.awaiting.is_none() && self.queue.is_empty() && self.session_done)
    }

    /// The next event for the caller.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The edits asked at the end of the message (after its verdict).
    pub fn take_edits(&mut self) -> Vec<Edit> {
        self.edit_bytes = 0;
        std::mem::take(&mut self.edits)
    }

    /// Bytes read from the milter.
    pub fn receive(&mut self, bytes: &[u8]) {
        if self.failed {
            return;
        }
        self.decoder.feed(bytes);
        loop {
            match self.decoder.next_response() {
                Ok(Some(r)) => {
                    if let Err(why) = self.answer(r) {
                        self.fail(why);
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    self.fail(e.to_string());
                    return;
                }
            }
        }
        self.pump();
    }

    /// The milter went away or timed out: the caller's default applies.
    pub fn fail(&mut self, why: String) {
        if !self.failed {
            self.failed = true;
            self.queue.clear();
            self.awaiting = None;
            self.events.push_back(Event::Failed(why));
        }
    }

    fn push(&mut self, stage: Stage, macros: &[(&str, String)], data: Vec<u8>, wanted: bool) {
        let mut bytes = Vec::new();
        let macros = self.macros.select(stage, macros);
        if !macros.is_empty() {
            let mut m = vec![stage.code()];
            for (k, v) in macros {
                m.extend_from_slice(&codec::strings([k, v]));
            }
            codec::encode(&mut bytes, cmd::MACRO, &m);
        }
        codec::encode(&mut bytes, stage.code(), &data);
        self.queue.push_back(Command {
            stage,
            bytes,
            wanted,
        });
        self.pump();
    }

    /// Sends what can be sent: queued commands up to the next one whose
    /// answer must be awaited.
    fn pump(&mut self) {
        let Some((_, protocol)) = self.negotiated else {
            return;
        };
        if self.failed {
            return;
        }
        while self.awaiting.is_none() {
            let Some(c) = self.queue.pop_front() else {
                break;
            };
            let (no, nr) = c.stage.flags();
            let quiet = matches!(c.stage, Stage::Abort | Stage::Quit);
            let skipped = (self.session_done && !matches!(c.stage, Stage::Quit))
                || protocol & no != 0
                || (c.stage.in_transaction() && self.message_done)
                || (c.stage == Stage::Body && self.skip_body);
            if skipped {
                if c.wanted {
                    let v = self.settled(c.stage);
                    self.events.push_back(Event::Verdict(c.stage, v));
                }
                if c.stage == Stage::Quit {
                    self.session_done = true;
                }
                continue;
            }
            self.out.extend_from_slice(&c.bytes);
            if c.stage == Stage::Quit {
                self.session_done = true;
                self.queue.clear();
                break;
            }
            if quiet || protocol & nr != 0 {
                if c.wanted {
                    self.events
                        .push_back(Event::Verdict(c.stage, Verdict::Continue));
                }
                continue;
            }
            self.awaiting = Some((c.stage, c.wanted, true));
        }
    }

    /// The verdict of a stage that is not asked.
    fn settled(&self, stage: Stage) -> Verdict {
        if stage == Stage::Eom && self.message_done {
            match &self.message_verdict {
                Some(v) => v.clone(),
                None => Verdict::Accept,
            }
        } else {
            Verdict::Continue
        }
    }

    fn answer(&mut self, r: Response) -> Result<(), String> {
        let Some((stage, wanted, live)) = self.awaiting else {
            return Err(format!("unexpected response {r:?}"));
        };
        let verdict = match r {
            Response::Negotiate {
                version,
                actions,
                protocol,
                macros,
            } if stage == Stage::Negotiate => {
                if version < 2 {
                    return Err(format!("protocol version {version} is too old"));
                }
                if version > self.version {
                    return Err(format!(
                        "protocol version {version} conflict with MTA protocol version {}",
                        self.version
                    ));
                }
                if actions & !act::ALL != 0 {
                    return Err(format!(
                        "request mask {actions:#x} conflict with MTA request mask {:#x}",
                        act::ALL
                    ));
                }
                // As Postfix: flags of a later version than the one spoken
                // are not honoured, and the events it lacks are never sent.
                let known = proto::of_version(version);
                let protocol = (protocol & known) | (proto::NOSEND_MASK & !known);
                self.negotiated = Some((actions, protocol));
                for (smfim, list) in macros {
                    // An unknown stage number is ignored, as Postfix does.
                    self.macros.set_requested(smfim, &list);
                }
                self.awaiting = None;
                return Ok(());
            }
            Response::SetSymbolList if stage == Stage::Negotiate => return Ok(()),
            Response::Progress => {
                self.events.push_back(Event::Progress);
                return Ok(());
            }
            Response::Shutdown => return Err("the milter asked to be shut down".into()),
            Response::Continue => Verdict::Continue,
            Response::Skip if stage == Stage::Body => {
                self.skip_body = true;
                Verdict::Continue
            }
            Response::Accept => Verdict::Accept,
            Response::Reject => Verdict::Reject(None),
            Response::Tempfail => Verdict::Tempfail(None),
            Response::Discard => Verdict::Discard,
            Response::ReplyCode(text) => match text.as_bytes().first() {
                Some(b'4') if valid_reply(&text) => Verdict::Tempfail(Some(text)),
                Some(b'5') if valid_reply(&text) => Verdict::Reject(Some(text)),
                _ => return Err(format!("bad reply code \"{text}\"")),
            },
            edit if stage == Stage::Eom => return self.edit(edit),
            other => return Err(format!("unexpected response {other:?} at {stage:?}")),
        };
        self.awaiting = None;
        if !live {
            // The answer to a command of an abandoned transaction.
            return Ok(());
        }
        match stage {
            Stage::Connect | Stage::Helo if verdict != Verdict::Continue => {
                self.session_done = true;
            }
            Stage::Mail if verdict != Verdict::Continue => {
                self.message_done = true;
                self.message_verdict = Some(verdict.clone());
            }
            Stage::Rcpt if verdict == Verdict::Discard => {
                self.message_done = true;
                self.message_verdict = Some(Verdict::Discard);
            }
            Stage::Eom => self.message_done = true,
            _ => {}
        }
        if stage.in_content() {
            if verdict != Verdict::Continue {
                self.message_done = true;
                self.message_verdict = Some(verdict);
            }
            return Ok(());
        }
        if wanted {
            self.events.push_back(Event::Verdict(stage, verdict));
        }
        Ok(())
    }

    fn edit(&mut self, r: Response) -> Result<(), String> {
        let (actions, _) = self.negotiated.unwrap_or((0, 0));
        self.edit_bytes += match &r {
            Response::ReplaceBody(b) => b.len(),
            Response::AddHeader(n, v)
            | Response::InsertHeader(_, n, v)
            | Response::ChangeHeader(_, n, v) => n.len() + v.len() + 4,
            _ => 64,
        };
        if self.edit_bytes > self.edit_limit {
            return Err(format!(
                "changes to one message over {} bytes",
                self.edit_limit
            ));
        }
        // A milter that sees leading spaces gives them too: the one a
        // header is written with after its colon is not part of the value.
        let lead = self.leading_space();
        let unlead = |v: String| -> String {
            match v.strip_prefix(' ') {
                Some(rest) if lead => rest.to_string(),
                _ => v,
            }
        };
        let (needed, edit) = match r {
            Response::AddHeader(name, v) => (
                act::ADDHDRS,
                Edit::Header(HeaderChange::Add {
                    name,
                    value: unlead(v),
                }),
            ),
            Response::InsertHeader(index, name, v) => (
                act::ADDHDRS,
                Edit::Header(HeaderChange::Insert {
                    index,
                    name,
                    value: unlead(v),
                }),
            ),
            Response::ChangeHeader(index, name, v) => (
                act::CHGHDRS,
                Edit::Header(HeaderChange::Change {
                    index,
                    name,
                    value: unlead(v),
                }),
            ),
            Response::AddRecipient(address, args) => {
                let flag = if args.is_some() {
                    act::ADDRCPT_PAR
                } else {
                    act::ADDRCPT
                };
                (flag, Edit::AddRecipient { address, args })
            }
            Response::DeleteRecipient(address) => (act::DELRCPT, Edit::DeleteRecipient { address }),
            Response::ChangeSender(address, args) => {
                (act::CHGFROM, Edit::ChangeSender { address, args })
            }
            Response::ReplaceBody(bytes) => {
                if let Some(Edit::ReplaceBody(b)) = self.edits.last_mut() {
                    b.extend_from_slice(&bytes);
                    return Ok(());
                }
                (act::CHGBODY, Edit::ReplaceBody(bytes))
            }
            Response::Quarantine(reason) => (act::QUARANTINE, Edit::Quarantine(reason)),
            other => return Err(format!("unexpected response {other:?} at end of message")),
        };
        if actions & needed == 0 {
            return Err(format!("{edit:?} was not negotiated"));
        }
        self.edits.push(edit);
        Ok(())
    }
}

/// `4xx x.y.z text` or `5xx x.y.z text`, on one line or several, as a
/// milter's reply must be (one parser for smtpd and cleanup alike).
fn valid_reply(text: &str) -> bool {
    mail::Refusal::from_milter_reply(text, (7, 1)).is_some()
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
