//! The milters of one SMTP session (`smtpd_milters`): their sockets,
//! deadlines and failures, and the one verdict the session waits for.
//!
//! Each session has its own connection to each milter, as with Postfix,
//! opened when the session starts; every socket is one more fd in the
//! event loop, so a slow milter holds up only its own session. The
//! protocol is `milter::Client`; here the milters' answers to a stage are
//! combined (the first refusal, in the order of `smtpd_milters`, wins;
//! every milter hears every stage at the same time), deadlines are kept
//! (`milter_connect_timeout` for the connection and the negotiation,
//! `milter_command_timeout` for SMTP events, `milter_content_timeout`
//! for the content and its end), and a milter that cannot be reached,
//! breaks the protocol or is late is dropped with a warning, after which
//! `milter_default_action` decides for it: `accept` goes on without it,
//! `tempfail` and `reject` answer every later command of the session as
//! Postfix does (451 4.3.5 or 550 5.5.0), `quarantine` holds its mail.
//! The content streams to the milters as it streams to cleanup; the
//! session stops reading from its client while more than
//! [`BACKLOG`] bytes wait for a milter. How the milters' changes reach
//! the message is told in cleanup's `milter` module.

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use daemon::{msg_warn, Cx};
use ipc::cleanup::Edit as CleanupEdit;
use milter::content::{Part, Splitter};
use milter::{Client, Edit, Event, Stage, Verdict};
use mio::{Interest, Token};

/// Bytes queued for a milter past which the client is not read.
pub const BACKLOG: usize = 1 << 20;

/// Where a milter listens, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A Unix-domain socket.
    Unix(PathBuf),
    /// A TCP address.
    Inet(SocketAddr),
}

/// `milter_default_action`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultAction {
    /// Go on without the milter.
    Accept,
    /// 550 5.5.0 to every later command.
    Reject,
    /// 451 4.3.5 to every later command.
    Tempfail,
    /// Accept the mail and hold it.
    Quarantine,
}

/// The milter settings of main.cf.
#[derive(Clone, Debug)]
pub struct MilterSettings {
    /// The milters, as named in `smtpd_milters`, and where they are.
    pub milters: Vec<(String, Target)>,
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
    /// `milter_macro_daemon_name`, the `{daemon_name}` macro.
    pub daemon_name: String,
    /// `myhostname`, the `j` macro.
    pub myhostname: String,
    /// The most a milter may change of one message, in bytes.
    pub edit_limit: usize,
}

enum Sock {
    Unix(mio::net::UnixStream),
    Tcp(mio::net::TcpStream),
}

impl Sock {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Sock::Unix(s) => s,
            Sock::Tcp(s) => s,
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Sock::Unix(s) => s.read(buf),
            Sock::Tcp(s) => s.read(buf),
        }
    }

    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sock::Unix(s) => s.write(buf),
            Sock::Tcp(s) => s.write(buf),
        }
    }

    /// A pending connect's outcome: Ok(true) once connected.
    fn connected(&mut self) -> std::io::Result<bool> {
        match self {
            Sock::Unix(_) => Ok(true),
            Sock::Tcp(s) => {
                if let Some(e) = s.take_error()? {
                    return Err(e);
                }
                match s.peer_addr() {
                    Ok(_) => Ok(true),
                    Err(e) if e.kind() == ErrorKind::NotConnected => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }
}

struct One {
    name: String,
    sock: Option<Sock>,
    token: Token,
    client: Client,
    out: Vec<u8>,
    connected: bool,
    negotiated: bool,
    /// Dropped, its default action applied.
    failed: bool,
    deadline: Option<Instant>,
    /// Its verdict on the stage waited for.
    verdict: Option<Verdict>,
}

/// A session's milters.
pub struct Milters {
    ones: Vec<One>,
    default_action: DefaultAction,
    command_timeout: Duration,
    content_timeout: Duration,
    /// The stage whose combined verdict the session waits for.
    wait: Option<Stage>,
    /// A verdict for every later command: a milter refused the session at
    /// connect or HELO, or failed under `tempfail` or `reject`.
    sticky: Option<Verdict>,
    /// A milter failed under `quarantine`: mail is held.
    hold: bool,
    splitter: Splitter,
    helo: Option<String>,
    edits: Vec<CleanupEdit>,
}

impl Milters {
    /// Connects to every milter; one that cannot be reached fails at once.
    pub fn open(cx: &mut Cx<'_>, s: &MilterSettings) -> Milters {
        let mut m = Milters {
            ones: Vec::new(),
            default_action: s.default_action,
            command_timeout: s.command_timeout,
            content_timeout: s.content_timeout,
            wait: None,
            sticky: None,
            hold: false,
            splitter: Splitter::default(),
            helo: None,
            edits: Vec::new(),
        };
        for (name, target) in &s.milters {
            let token = cx.token();
            let mut client = Client::new(s.protocol);
            client.set_edit_limit(s.edit_limit);
            let mut one = One {
                name: name.clone(),
                sock: None,
                token,
                client,
                out: Vec::new(),
                // A Unix-domain connect is done or failed at once.
                connected: matches!(target, Target::Unix(_)),
                negotiated: false,
                failed: false,
                deadline: Some(cx.now + s.connect_timeout),
                verdict: None,
            };
            let sock = match target {
                Target::Unix(p) => mio::net::UnixStream::connect(p).map(Sock::Unix),
                Target::Inet(a) => mio::net::TcpStream::connect(*a).map(Sock::Tcp),
            };
            let registered = sock.and_then(|mut sock| {
                cx.registry.register(
                    sock.source(),
                    token,
                    Interest::READABLE | Interest::WRITABLE,
                )?;
                Ok(sock)
            });
            let failed = match registered {
                Ok(sock) => {
                    one.sock = Some(sock);
                    None
                }
                Err(e) => Some(format!("connect: {e}")),
            };
            m.ones.push(one);
            if let Some(why) = failed {
                let i = m.ones.len() - 1;
                m.fail(cx, i, &why);
            }
        }
        m
    }

    /// The tokens of the milters' sockets.
    pub fn tokens(&self) -> Vec<Token> {
        self.ones.iter().map(|o| o.token).collect()
    }

    /// Whether the session must not read more from its client.
    pub fn backlogged(&self) -> bool {
        self.ones
            .iter()
            .any(|o| o.sock.is_some() && o.client.backlog() + o.out.len() > BACKLOG)
    }

    /// Whether mail is to be held (a milter failed under `quarantine`).
    pub fn hold(&self) -> bool {
        self.hold
    }

    /// When the next milter gives up.
    pub fn deadline(&self) -> Option<Instant> {
        self.ones.iter().filter_map(|o| o.deadline).min()
    }

    /// Sends one stage to every milter still in use.
    fn each(&mut self, f: impl Fn(&mut Client)) {
        for o in self.ones.iter_mut().filter(|o| o.sock.is_some()) {
            f(&mut o.client);
        }
    }

    /// The client connected (the verdict counts at MAIL FROM).
    pub fn connect(&mut self, cx: &mut Cx<'_>, macros: &[(&str, String)], peer: SocketAddr) {
        let family = if peer.is_ipv4() { b'4' } else { b'6' };
        let addr = peer.ip().to_string();
        let name = format!("[{addr}]");
        self.each(|c| c.connect(macros, &name, family, peer.port(), &addr));
        self.pump(cx);
    }

    /// HELO (sent before MAIL FROM when the name is new).
    pub fn helo(&mut self, macros: &[(&str, String)], name: &str) {
        if self.helo.as_deref() == Some(name) {
            return;
        }
        self.helo = Some(name.to_string());
        self.each(|c| c.helo(macros, name));
    }

    /// Asks a stage that has a verdict (MAIL, RCPT, end of message); the
    /// verdict comes now or from [`Milters::ready`] or [`Milters::expired`].
    pub fn ask(
        &mut self,
        cx: &mut Cx<'_>,
        stage: Stage,
        macros: &[(&str, String)],
        args: &[&str],
    ) -> Option<Verdict> {
        if stage == Stage::Mail {
            self.splitter = Splitter::default();
            self.edits.clear();
        }
        match stage {
            Stage::Mail => self.each(|c| c.mail(macros, args)),
            Stage::Rcpt => self.each(|c| c.rcpt(macros, args)),
            Stage::Eom => {
                let mut parts = Vec::new();
                self.splitter.finish(&mut parts);
                for p in &parts {
                    self.each(|c| c.content(&[], p));
                }
                self.each(|c| c.end_of_message(macros));
            }
            other => panic!("smtpd::milter: no verdict is asked at {other:?}"),
        }
        for o in &mut self.ones {
            o.verdict = None;
        }
        self.wait = Some(stage);
        self.pump(cx);
        self.collect(cx)
    }

    /// DATA (its verdict counts at the end of the message).
    pub fn data(&mut self, cx: &mut Cx<'_>, macros: &[(&str, String)]) {
        self.each(|c| c.data(macros));
        self.pump(cx);
    }

    /// Content as it streams (wire format).
    pub fn content(&mut self, cx: &mut Cx<'_>, macros: &[(&str, String)], bytes: &[u8]) {
        let mut parts = Vec::new();
        self.splitter.feed(bytes, &mut parts);
        for p in &parts {
            let m: &[(&str, String)] = if *p == Part::EndOfHeaders {
                macros
            } else {
                &[]
            };
            self.each(|c| c.content(m, p));
        }
        self.pump(cx);
    }

    /// The transaction was abandoned.
    pub fn abort(&mut self, cx: &mut Cx<'_>) {
        self.wait = None;
        self.splitter = Splitter::default();
        self.each(Client::abort);
        self.pump(cx);
    }

    /// The edits the end of the message brought, for cleanup.
    pub fn take_edits(&mut self) -> Vec<CleanupEdit> {
        let mut edits = std::mem::take(&mut self.edits);
        if self.hold {
            edits.push(CleanupEdit::Hold {
                reason: "milter_default_action = quarantine".into(),
            });
        }
        edits
    }

    /// The session ends: each milter is told and closed.
    pub fn close(&mut self, cx: &mut Cx<'_>) {
        for o in &mut self.ones {
            if let Some(mut sock) = o.sock.take() {
                if o.negotiated {
                    o.client.quit();
                    o.out.extend_from_slice(&o.client.transmit());
                    // Best effort: the milter learns of the end anyway
                    // when the socket closes.
                    let _ = sock.write(&o.out);
                }
                let _ = cx.registry.deregister(sock.source());
            }
            o.deadline = None;
        }
    }

    /// A milter socket is ready: its answers, and the verdict if that
    /// completes one.
    pub fn ready(&mut self, cx: &mut Cx<'_>, token: Token) -> Option<Verdict> {
        let i = self.ones.iter().position(|o| o.token == token)?;
        let mut failure = None;
        {
            let o = &mut self.ones[i];
            let sock = o.sock.as_mut()?;
            if !o.connected {
                match sock.connected() {
                    Ok(true) => o.connected = true,
                    Ok(false) => return None,
                    Err(e) => failure = Some(format!("connect: {e}")),
                }
            }
            let mut buf = [0u8; 16384];
            while failure.is_none() {
                match sock.read(&mut buf) {
                    Ok(0) => {
                        failure = Some("lost connection".to_string());
                    }
                    Ok(n) => {
                        o.client.receive(&buf[..n]);
                        // An answer came: the next one has its own time.
                        o.deadline = None;
                        o.negotiated = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => failure = Some(format!("read: {e}")),
                }
            }
        }
        if let Some(why) = failure {
            self.fail(cx, i, &why);
        }
        self.pump(cx);
        self.collect(cx)
    }

    /// Milters past their deadline fail; the verdict, if that completes one.
    pub fn expired(&mut self, cx: &mut Cx<'_>) -> Option<Verdict> {
        let late: Vec<usize> = (0..self.ones.len())
            .filter(|&i| self.ones[i].deadline.is_some_and(|d| d <= cx.now))
            .collect();
        for i in late {
            self.fail(cx, i, "timeout");
        }
        self.collect(cx)
    }

    /// Writes what each milter has to send and arms its deadline.
    fn pump(&mut self, cx: &mut Cx<'_>) {
        let mut failed = Vec::new();
        for (i, o) in self.ones.iter_mut().enumerate() {
            let Some(sock) = o.sock.as_mut() else {
                continue;
            };
            o.out.extend_from_slice(&o.client.transmit());
            while o.connected && !o.out.is_empty() {
                match sock.write(&o.out) {
                    Ok(n) => {
                        o.out.drain(..n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        failed.push((i, format!("write: {e}")));
                        break;
                    }
                }
            }
            if o.deadline.is_none() {
                if let Some(stage) = o.client.awaiting() {
                    let t = match stage {
                        Stage::Header | Stage::Eoh | Stage::Body | Stage::Eom => {
                            self.content_timeout
                        }
                        _ => self.command_timeout,
                    };
                    o.deadline = Some(cx.now + t);
                }
            }
        }
        for (i, why) in failed {
            self.fail(cx, i, &why);
        }
    }

    /// Takes the milters' events; the combined verdict once every milter
    /// in use has given its own.
    fn collect(&mut self, cx: &mut Cx<'_>) -> Option<Verdict> {
        let mut failed = Vec::new();
        for (i, o) in self.ones.iter_mut().enumerate() {
            while let Some(ev) = o.client.poll_event() {
                match ev {
                    Event::Verdict(Stage::Connect | Stage::Helo, v) => {
                        if matches!(v, Verdict::Reject(_) | Verdict::Tempfail(_)) {
                            self.sticky.get_or_insert(v);
                        }
                    }
                    Event::Verdict(stage, v) if Some(stage) == self.wait => {
                        if stage == Stage::Eom {
                            self.edits
                                .extend(o.client.take_edits().into_iter().map(to_cleanup));
                        }
                        o.verdict = Some(v);
                    }
                    Event::Verdict(..) => {}
                    Event::Progress => o.deadline = Some(cx.now + self.content_timeout),
                    Event::Failed(why) => failed.push((i, why)),
                }
            }
        }
        for (i, why) in failed {
            self.fail(cx, i, &why);
        }
        let stage = self.wait?;
        if self
            .ones
            .iter()
            .any(|o| o.sock.is_some() && o.verdict.is_none())
        {
            return None;
        }
        self.wait = None;
        if let Some(v) = &self.sticky {
            return Some(v.clone());
        }
        let refusal = self.ones.iter().filter(|o| o.sock.is_some()).find_map(|o| {
            o.verdict
                .clone()
                .filter(|v| !matches!(v, Verdict::Continue | Verdict::Accept))
        });
        let v = refusal.unwrap_or(Verdict::Continue);
        if stage == Stage::Eom && v != Verdict::Continue {
            self.edits.clear();
        }
        Some(v)
    }

    /// Drops a milter and applies `milter_default_action` for it.
    fn fail(&mut self, cx: &mut Cx<'_>, i: usize, why: &str) {
        let o = &mut self.ones[i];
        if o.failed {
            return;
        }
        o.failed = true;
        if let Some(mut sock) = o.sock.take() {
            let _ = cx.registry.deregister(sock.source());
        }
        o.deadline = None;
        o.client.fail(why.to_string());
        while o.client.poll_event().is_some() {}
        let action = match self.default_action {
            DefaultAction::Accept => "accept",
            DefaultAction::Reject => "reject",
            DefaultAction::Tempfail => "tempfail",
            DefaultAction::Quarantine => "quarantine",
        };
        msg_warn!(
            "milter {}: {why}; applying milter_default_action = {action}",
            o.name
        );
        match self.default_action {
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

/// An address as milters give it, without its angle brackets.
fn bare(address: &str) -> String {
    let a = address.trim();
    a.strip_prefix('<')
        .and_then(|a| a.strip_suffix('>'))
        .unwrap_or(a)
        .to_string()
}

fn to_cleanup(e: Edit) -> CleanupEdit {
    match e {
        Edit::AddHeader { name, value } => CleanupEdit::AddHeader { name, value },
        Edit::InsertHeader { index, name, value } => {
            CleanupEdit::InsertHeader { index, name, value }
        }
        Edit::ChangeHeader { index, name, value } => {
            CleanupEdit::ChangeHeader { index, name, value }
        }
        Edit::AddRecipient { address, .. } => CleanupEdit::AddRecipient {
            address: bare(&address),
        },
        Edit::DeleteRecipient { address } => CleanupEdit::DeleteRecipient {
            address: bare(&address),
        },
        Edit::ChangeSender { address, .. } => CleanupEdit::ChangeSender {
            address: bare(&address),
        },
        Edit::ReplaceBody(bytes) => CleanupEdit::ReplaceBody { bytes },
        Edit::Quarantine(reason) => CleanupEdit::Hold { reason },
    }
}
