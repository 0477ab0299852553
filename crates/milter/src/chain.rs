//! The milters of one session, one after another, sans-IO.
//!
//! Postfix asks its milters in turn (`milter.c`): an event goes to the
//! first, then, once it has answered, to the next; a refusal stops the
//! turn, so a milter after one that rejected never hears of it. The
//! message goes through them the same way: the first hears it as it
//! streams in; each later one hears it at the end, as the milters before
//! it left it ([`crate::edit`]), and the changes of all of them, in order,
//! are the result. [`Chain`] does this over one [`Client`] per milter, with
//! their deadlines (`milter_connect_timeout` for the connection and the
//! negotiation, `milter_command_timeout` for SMTP events,
//! `milter_content_timeout` for the content and its end) and
//! `milter_default_action` for a milter that cannot be reached, breaks the
//! protocol or is late: `accept` goes on without it, `tempfail` and
//! `reject` answer every later event (451 4.3.5, 550 5.5.0, Postfix's
//! words), `quarantine` holds the mail.
//!
//! It never touches a socket or a clock: the caller says when a milter is
//! connected ([`Chain::connected`]), gives what it read
//! ([`Chain::receive`]), writes what [`Chain::transmit`] gives, and calls
//! [`Chain::expire`] at [`Chain::deadline`]. Verdicts the caller waits for
//! come from [`Chain::ask`] or, later, [`Chain::poll_verdict`]. Nothing is
//! logged here: [`Chain::take_warnings`] has the lines for the log.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::client::{Client, Edit, Event, Stage, Verdict};
use crate::content::{Part, Splitter};
use crate::macros::MacroLists;

/// `milter_default_action`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultAction {
    /// Go on without the milter.
    Accept,
    /// 550 5.5.0 to every later event.
    Reject,
    /// 451 4.3.5 to every later event.
    Tempfail,
    /// Accept the mail and hold it.
    Quarantine,
}

impl DefaultAction {
    /// Its main.cf name.
    pub fn name(self) -> &'static str {
        match self {
            DefaultAction::Accept => "accept",
            DefaultAction::Reject => "reject",
            DefaultAction::Tempfail => "tempfail",
            DefaultAction::Quarantine => "quarantine",
        }
    }
}

/// The settings every milter of a chain shares.
#[derive(Clone, Debug)]
pub struct Options {
    /// `milter_default_action`.
    pub default_action: DefaultAction,
    /// `milter_protocol`.
    pub protocol: u32,
    /// `milter_connect_timeout`.
    pub connect_timeout: Duration,
    /// `milter_command_timeout`.
    pub command_timeout: Duration,
    /// `milter_content_timeout`.
    pub content_timeout: Duration,
    /// `milter_*_macros`.
    pub macros: MacroLists,
    /// The most a milter may change of one message, in bytes.
    pub edit_limit: usize,
}

/// Macro values: the name and its value.
pub type Macros = Vec<(&'static str, String)>;

/// The SMTP client, as the connect event tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its host name (`[address]` when it has none).
    pub name: String,
    /// `b'4'`, `b'6'`, `b'L'` (local) or `b'U'` (unknown).
    pub family: u8,
    /// Its port.
    pub port: u16,
    /// Its address.
    pub addr: String,
}

/// An event that waits for each milter's answer in turn.
#[derive(Clone, Debug)]
enum Call {
    Connect(Peer),
    Helo(String),
    Mail(Vec<String>),
    Rcpt(Vec<String>),
    Unknown(String),
    Eom,
}

impl Call {
    fn stage(&self) -> Stage {
        match self {
            Call::Connect(_) => Stage::Connect,
            Call::Helo(_) => Stage::Helo,
            Call::Mail(_) => Stage::Mail,
            Call::Rcpt(_) => Stage::Rcpt,
            Call::Unknown(_) => Stage::Unknown,
            Call::Eom => Stage::Eom,
        }
    }
}

struct Turn {
    call: Call,
    macros: Macros,
    /// The milter whose answer is due, or the next to ask.
    next: usize,
    sent: bool,
    /// The caller waits for the verdict (not for connect and HELO, whose
    /// refusals answer the next event).
    reported: bool,
}

struct One {
    name: String,
    client: Client,
    failed: bool,
    deadline: Option<Instant>,
    /// It hears the message as it streams.
    streamed: bool,
}

/// The milters of one session.
pub struct Chain {
    ones: Vec<One>,
    opts: Options,
    turns: VecDeque<Turn>,
    verdicts: VecDeque<Verdict>,
    /// A verdict for every later event: a milter refused the session at
    /// connect or HELO, or failed under `tempfail` or `reject`.
    sticky: Option<Verdict>,
    hold: bool,
    splitter: Splitter,
    /// The message so far, for the milters after the first.
    parts: Vec<Part>,
    eoh_macros: Macros,
    edits: Vec<Edit>,
    warnings: Vec<String>,
}

impl Chain {
    /// A chain of the named milters, each negotiating at once.
    pub fn new(names: &[String], opts: Options, now: Instant) -> Chain {
        let ones = names
            .iter()
            .map(|name| {
                let mut client = Client::new(opts.protocol);
                client.set_edit_limit(opts.edit_limit);
                client.set_macros(opts.macros.clone());
                One {
                    name: name.clone(),
                    client,
                    failed: false,
                    deadline: Some(now + opts.connect_timeout),
                    streamed: false,
                }
            })
            .collect();
        Chain {
            ones,
            opts,
            turns: VecDeque::new(),
            verdicts: VecDeque::new(),
            sticky: None,
            hold: false,
            splitter: Splitter::default(),
            parts: Vec::new(),
            eoh_macros: Vec::new(),
            edits: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// How many milters the chain has.
    pub fn len(&self) -> usize {
        self.ones.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.ones.is_empty()
    }

    /// Whether milter `i` was dropped.
    pub fn is_failed(&self, i: usize) -> bool {
        self.ones[i].failed
    }

    /// Bytes to write to milter `i`.
    pub fn transmit(&mut self, i: usize) -> Vec<u8> {
        self.ones[i].client.transmit()
    }

    /// Bytes queued for milter `i` and not yet taken.
    pub fn backlog(&self, i: usize) -> usize {
        self.ones[i].client.backlog()
    }

    /// Whether milter `i` answered the negotiation (it may be told QUIT).
    pub fn is_negotiated(&self, i: usize) -> bool {
        !matches!(self.ones[i].client.awaiting(), Some(Stage::Negotiate))
    }

    /// Whether mail is to be held (a milter failed under `quarantine`).
    pub fn hold(&self) -> bool {
        self.hold
    }

    /// When the next milter gives up.
    pub fn deadline(&self) -> Option<Instant> {
        self.ones.iter().filter_map(|o| o.deadline).min()
    }

    /// Lines for the log (milters dropped, and why).
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// A verdict the caller waits for, once it is known.
    pub fn poll_verdict(&mut self) -> Option<Verdict> {
        self.verdicts.pop_front()
    }

    /// Bytes read from milter `i`.
    pub fn receive(&mut self, i: usize, bytes: &[u8], now: Instant) {
        let o = &mut self.ones[i];
        if o.failed {
            return;
        }
        o.client.receive(bytes);
        // An answer came: the next one has its own time.
        o.deadline = None;
        self.step(now);
    }

    /// Milter `i` could not be reached or went away.
    pub fn lost(&mut self, i: usize, why: &str, now: Instant) {
        self.fail(i, why);
        self.step(now);
    }

    /// Milters past their deadline fail.
    pub fn expire(&mut self, now: Instant) {
        let late: Vec<usize> = (0..self.ones.len())
            .filter(|&i| self.ones[i].deadline.is_some_and(|d| d <= now))
            .collect();
        for i in late {
            self.fail(i, "timeout");
        }
        self.step(now);
    }

    /// The client connected (its refusal answers the next event).
    pub fn connect(&mut self, macros: Macros, peer: Peer, now: Instant) {
        self.push(Call::Connect(peer), macros, false, now);
    }

    /// HELO or EHLO (its refusal answers the next event).
    pub fn helo(&mut self, macros: Macros, name: &str, now: Instant) {
        self.push(Call::Helo(name.to_string()), macros, false, now);
    }

    /// MAIL FROM (the sender in angle brackets, then ESMTP parameters); the
    /// verdict now or from [`Chain::poll_verdict`].
    pub fn mail(&mut self, macros: Macros, args: Vec<String>, now: Instant) -> Option<Verdict> {
        self.splitter = Splitter::default();
        self.parts.clear();
        self.edits.clear();
        for o in &mut self.ones {
            o.streamed = false;
        }
        self.push(Call::Mail(args), macros, true, now);
        self.verdicts.pop_front()
    }

    /// RCPT TO; the verdict now or later.
    pub fn rcpt(&mut self, macros: Macros, args: Vec<String>, now: Instant) -> Option<Verdict> {
        self.push(Call::Rcpt(args), macros, true, now);
        self.verdicts.pop_front()
    }

    /// An unknown SMTP command; the verdict now or later.
    pub fn unknown(&mut self, macros: Macros, command: &str, now: Instant) -> Option<Verdict> {
        self.push(Call::Unknown(command.to_string()), macros, true, now);
        self.verdicts.pop_front()
    }

    /// DATA, to every milter (its verdict counts at the end of the
    /// message); the content will stream to the first still in use.
    pub fn data(&mut self, macros: &Macros, now: Instant) {
        if self.sticky.is_some() {
            return;
        }
        let first = self.ones.iter().position(|o| !o.failed);
        for (i, o) in self.ones.iter_mut().enumerate() {
            if !o.failed {
                o.client.data(macros);
                o.streamed = Some(i) == first;
            }
        }
        self.step(now);
    }

    /// Content as it streams (wire format: CRLF, dot-stuffed).
    pub fn content(&mut self, macros: &Macros, bytes: &[u8], now: Instant) {
        let mut parts = Vec::new();
        self.splitter.feed(bytes, &mut parts);
        self.stream(macros, parts, now);
    }

    fn stream(&mut self, macros: &Macros, parts: Vec<Part>, now: Instant) {
        if parts.contains(&Part::EndOfHeaders) {
            self.eoh_macros = macros.clone();
        }
        if let Some(o) = self.ones.iter_mut().find(|o| o.streamed && !o.failed) {
            for p in &parts {
                let m: &[(&str, String)] = if *p == Part::EndOfHeaders {
                    macros
                } else {
                    &[]
                };
                o.client.content(m, p);
            }
        }
        if self.ones.len() > 1 {
            self.parts.extend(parts);
        }
        self.step(now);
    }

    /// The end of the message: each milter's verdict and changes in turn;
    /// the verdict now or later, the changes from [`Chain::take_edits`].
    pub fn end_of_message(&mut self, macros: Macros, now: Instant) -> Option<Verdict> {
        let mut parts = Vec::new();
        self.splitter.finish(&mut parts);
        self.stream(&self.eoh_macros.clone(), parts, now);
        self.push(Call::Eom, macros, true, now);
        self.verdicts.pop_front()
    }

    /// The changes of every milter, in order, after the end of the message.
    pub fn take_edits(&mut self) -> Vec<Edit> {
        let mut edits = std::mem::take(&mut self.edits);
        if self.hold {
            edits.push(Edit::Quarantine(
                "milter_default_action = quarantine".into(),
            ));
        }
        edits
    }

    /// The transaction was abandoned.
    pub fn abort(&mut self, now: Instant) {
        self.turns
            .retain(|t| matches!(t.call, Call::Connect(_) | Call::Helo(_)));
        self.verdicts.clear();
        self.splitter = Splitter::default();
        self.parts.clear();
        self.edits.clear();
        for o in self.ones.iter_mut().filter(|o| !o.failed) {
            o.client.abort();
            o.streamed = false;
        }
        self.step(now);
    }

    /// The session ends: QUIT to each milter that negotiated.
    pub fn quit(&mut self) {
        for o in self.ones.iter_mut().filter(|o| !o.failed) {
            o.client.quit();
            o.deadline = None;
        }
    }

    fn push(&mut self, call: Call, macros: Macros, reported: bool, now: Instant) {
        self.turns.push_back(Turn {
            call,
            macros,
            next: 0,
            sent: false,
            reported,
        });
        self.step(now);
    }

    /// Takes the milters' events and moves the turns on, until nothing moves.
    fn step(&mut self, now: Instant) {
        loop {
            let mut moved = false;
            for i in 0..self.ones.len() {
                while let Some(ev) = self.ones[i].client.poll_event() {
                    moved = true;
                    match ev {
                        Event::Verdict(stage, v) => self.answered(i, stage, v),
                        Event::Progress => {
                            self.ones[i].deadline = Some(now + self.opts.content_timeout)
                        }
                        Event::Failed(why) => self.fail(i, &why),
                    }
                }
            }
            moved |= self.advance();
            if !moved {
                break;
            }
        }
        for o in self.ones.iter_mut().filter(|o| !o.failed) {
            if o.deadline.is_none() {
                if let Some(stage) = o.client.awaiting() {
                    let t = match stage {
                        Stage::Negotiate => self.opts.connect_timeout,
                        Stage::Header | Stage::Eoh | Stage::Body | Stage::Eom => {
                            self.opts.content_timeout
                        }
                        _ => self.opts.command_timeout,
                    };
                    o.deadline = Some(now + t);
                }
            }
        }
    }

    /// Milter `i`'s verdict; it counts if the current turn waits for it.
    fn answered(&mut self, i: usize, stage: Stage, v: Verdict) {
        let Some(t) = self.turns.front_mut() else {
            return;
        };
        if t.call.stage() != stage || t.next != i || !t.sent {
            return;
        }
        match v {
            Verdict::Continue | Verdict::Accept => {
                if stage == Stage::Eom {
                    let mine = self.ones[i].client.take_edits();
                    if i + 1 < self.ones.len() {
                        crate::edit::apply(&mut self.parts, &mine);
                    }
                    crate::edit::combine(&mut self.edits, mine);
                }
                t.next += 1;
                t.sent = false;
            }
            refused => {
                if matches!(stage, Stage::Connect | Stage::Helo)
                    && matches!(refused, Verdict::Reject(_) | Verdict::Tempfail(_))
                {
                    self.sticky.get_or_insert(refused.clone());
                }
                self.finish(refused);
            }
        }
    }

    /// Ends the current turn with its verdict.
    fn finish(&mut self, v: Verdict) {
        let Some(t) = self.turns.pop_front() else {
            return;
        };
        if t.call == Call::Eom && v != Verdict::Continue {
            self.edits.clear();
        }
        if t.reported {
            self.verdicts.push_back(v);
        }
    }

    /// Sends the current turn to its next milter, or ends it; true if
    /// anything moved.
    fn advance(&mut self) -> bool {
        let mut moved = false;
        loop {
            let Some(t) = self.turns.front_mut() else {
                return moved;
            };
            if let Some(v) = self.sticky.clone() {
                moved = true;
                self.finish(v);
                continue;
            }
            while t.next < self.ones.len() && self.ones[t.next].failed {
                t.next += 1;
                t.sent = false;
            }
            if t.next == self.ones.len() {
                moved = true;
                self.finish(Verdict::Continue);
                continue;
            }
            if t.sent {
                return moved;
            }
            t.sent = true;
            moved = true;
            let o = &mut self.ones[t.next];
            let m = &t.macros;
            match &t.call {
                Call::Connect(p) => o.client.connect(m, &p.name, p.family, p.port, &p.addr),
                Call::Helo(name) => o.client.helo(m, name),
                Call::Mail(args) => o
                    .client
                    .mail(m, &args.iter().map(String::as_str).collect::<Vec<_>>()),
                Call::Rcpt(args) => o
                    .client
                    .rcpt(m, &args.iter().map(String::as_str).collect::<Vec<_>>()),
                Call::Unknown(command) => o.client.unknown(m, command),
                Call::Eom => {
                    if !o.streamed {
                        // The message as the milters before it left it.
                        for p in &self.parts {
                            let pm: &[(&str, String)] = if *p == Part::EndOfHeaders {
                                &self.eoh_macros
                            } else {
                                &[]
                            };
                            o.client.content(pm, p);
                        }
                    }
                    o.client.end_of_message(m);
                }
            }
            return moved;
        }
    }

    /// Drops a milter and applies `milter_default_action` for it.
    fn fail(&mut self, i: usize, why: &str) {
        let o = &mut self.ones[i];
        if o.failed {
            return;
        }
        o.failed = true;
        o.deadline = None;
        o.client.fail(why.to_string());
        while o.client.poll_event().is_some() {}
        let action = self.opts.default_action;
        self.warnings.push(format!(
            "milter {}: {why}; applying milter_default_action = {}",
            o.name,
            action.name()
        ));
        match action {
            DefaultAction::Accept => {}
            DefaultAction::Quarantine => self.hold = true,
            DefaultAction::Reject => {
                self.sticky.get_or_insert(Verdict::Reject(Some(
                    "550 5.5.0 Service unavailable".into(),
                )));
            }
            DefaultAction::Tempfail => {
                self.sticky.get_or_insert(Verdict::Tempfail(Some(
                    "451 4.3.5 Server configuration problem - try again later".into(),
                )));
            }
        }
    }
}

impl PartialEq for Call {
    fn eq(&self, other: &Self) -> bool {
        self.stage() == other.stage()
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
