//! The milters' sockets in a daemon's mio loop, around a [`Chain`].
//!
//! smtpd (one set per SMTP session, `smtpd_milters`) and cleanup (one set
//! per local submission, `non_smtpd_milters`) use this alike: each milter
//! is one more non-blocking socket registered in the caller's event loop,
//! so a slow milter holds up only its own session. This shell only moves
//! bytes: it connects, reads until `WouldBlock`, writes what the chain
//! gives and tells it of failures; every decision is the chain's. The
//! caller routes the sockets' events here by token ([`Milters::ready`]),
//! calls [`Milters::expired`] at [`Milters::deadline`] and logs
//! [`Milters::take_warnings`].

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use mio::{Registry, Token};

use crate::chain::{Chain, DefaultAction, Macros, Options, Peer};
use crate::client::{Edit, Verdict};
use crate::macros::{split, MacroLists};

/// Bytes queued for a milter past which the caller should stop reading
/// its client.
pub const BACKLOG: usize = 1 << 20;

/// Where a milter listens, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A Unix-domain socket.
    Unix(PathBuf),
    /// A TCP address.
    Inet(SocketAddr),
}

/// A list of milters (`smtpd_milters` or `non_smtpd_milters`) and the
/// `milter_*` settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The milters, as named in main.cf, and where they are.
    pub milters: Vec<(String, Target)>,
    /// The settings they share.
    pub options: Options,
    /// `milter_macro_daemon_name`, the `{daemon_name}` macro.
    pub daemon_name: String,
    /// `myhostname`, the `j` macro.
    pub myhostname: String,
}

impl Settings {
    /// The milters `param` names and the `milter_*` parameters. Host
    /// names of `inet:` milters are looked up here, at start and reload,
    /// not per session. None when the list is empty.
    pub fn from_config(
        cfg: &config::Config,
        param: &str,
        queue_root: &std::path::Path,
        size_limit: u64,
    ) -> Result<Option<Settings>, String> {
        use std::net::ToSocketAddrs;
        let list = config::parse_milters(&cfg.str(param)).map_err(|e| format!("{param}: {e}"))?;
        if list.is_empty() {
            return Ok(None);
        }
        let mut milters = Vec::new();
        for m in list {
            let target = match &m {
                config::MilterAddr::Unix(p) => Target::Unix(queue_root.join(p)),
                config::MilterAddr::Inet(host, port) => Target::Inet(
                    (host.as_str(), *port)
                        .to_socket_addrs()
                        .ok()
                        .and_then(|mut a| a.next())
                        .ok_or_else(|| format!("{param}: {m}: cannot resolve {host}"))?,
                ),
            };
            milters.push((m.to_string(), target));
        }
        let default_action = match cfg.choice("milter_default_action") {
            "accept" => DefaultAction::Accept,
            "reject" => DefaultAction::Reject,
            "quarantine" => DefaultAction::Quarantine,
            _ => DefaultAction::Tempfail,
        };
        let macros = MacroLists {
            connect: split(&cfg.str("milter_connect_macros")),
            helo: split(&cfg.str("milter_helo_macros")),
            mail: split(&cfg.str("milter_mail_macros")),
            rcpt: split(&cfg.str("milter_rcpt_macros")),
            data: split(&cfg.str("milter_data_macros")),
            eoh: split(&cfg.str("milter_end_of_header_macros")),
            eod: split(&cfg.str("milter_end_of_data_macros")),
            unknown: split(&cfg.str("milter_unknown_command_macros")),
        };
        // A milter may add headers and replace the body: bounded by the
        // message size limit, with room for headers.
        let edit_limit = if size_limit == 0 {
            usize::MAX
        } else {
            usize::try_from(size_limit)
                .unwrap_or(usize::MAX)
                .saturating_add(1 << 20)
        };
        Ok(Some(Settings {
            milters,
            options: Options {
                default_action,
                protocol: cfg.choice("milter_protocol").parse().unwrap_or(6),
                connect_timeout: cfg.time("milter_connect_timeout"),
                command_timeout: cfg.time("milter_command_timeout"),
                content_timeout: cfg.time("milter_content_timeout"),
                macros,
                edit_limit,
            },
            daemon_name: cfg.str("milter_macro_daemon_name"),
            myhostname: cfg.str("myhostname"),
        }))
    }
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

struct Link {
    sock: Option<Sock>,
    token: Token,
    out: Vec<u8>,
    connected: bool,
    /// Whether writing is in the socket's registered interest. A Unix
    /// socket is watched for writing only while output waits: watched all
    /// the time, it wakes the loop each time the milter reads a command
    /// (the kernel reports the room freed). TCP reports room only to a
    /// writer that found none, so a TCP socket stays watched.
    writable: bool,
}

/// A session's milters and their sockets.
pub struct Milters {
    chain: Chain,
    links: Vec<Link>,
}

impl Milters {
    /// Connects to every milter, the i-th socket under `tokens[i]`; one
    /// that cannot be reached fails at once.
    pub fn open(reg: &Registry, tokens: &[Token], s: &Settings, now: Instant) -> Milters {
        assert_eq!(
            tokens.len(),
            s.milters.len(),
            "milter::net: one token per milter"
        );
        let names: Vec<String> = s.milters.iter().map(|(n, _)| n.clone()).collect();
        let mut m = Milters {
            chain: Chain::new(&names, s.options.clone(), now),
            links: Vec::new(),
        };
        for (i, (_, target)) in s.milters.iter().enumerate() {
            let t = tokens[i];
            let sock = match target {
                Target::Unix(p) => mio::net::UnixStream::connect(p).map(Sock::Unix),
                Target::Inet(a) => mio::net::TcpStream::connect(*a).map(Sock::Tcp),
            };
            // A TCP socket is watched for writing from the start: that is
            // how its connect completes.
            let tcp = matches!(target, Target::Inet(_));
            let registered = sock.and_then(|mut sock| {
                reg.register(sock.source(), t, evloop::interest(tcp))?;
                Ok(sock)
            });
            let mut link = Link {
                sock: None,
                token: t,
                out: Vec::new(),
                // A Unix-domain connect is done or failed at once.
                connected: !tcp,
                writable: tcp,
            };
            match registered {
                Ok(sock) => {
                    link.sock = Some(sock);
                    m.links.push(link);
                }
                Err(e) => {
                    m.links.push(link);
                    m.chain.lost(i, &format!("connect: {e}"), now);
                }
            }
        }
        m.pump(reg, now);
        m
    }

    /// The tokens of the milters' sockets.
    pub fn tokens(&self) -> Vec<Token> {
        self.links.iter().map(|l| l.token).collect()
    }

    /// Whether the caller should stop reading its client.
    pub fn backlogged(&self) -> bool {
        self.links
            .iter()
            .enumerate()
            .any(|(i, l)| l.sock.is_some() && self.chain.backlog(i) + l.out.len() > BACKLOG)
    }

    /// Whether mail is to be held (a milter failed under `quarantine`).
    pub fn hold(&self) -> bool {
        self.chain.hold()
    }

    /// When the next milter gives up.
    pub fn deadline(&self) -> Option<Instant> {
        self.chain.deadline()
    }

    /// Lines for the log.
    pub fn take_warnings(&mut self) -> Vec<String> {
        self.chain.take_warnings()
    }

    /// The client connected.
    pub fn connect(&mut self, reg: &Registry, now: Instant, macros: Macros, peer: Peer) {
        self.chain.connect(macros, peer, now);
        self.pump(reg, now);
    }

    /// HELO or EHLO.
    pub fn helo(&mut self, reg: &Registry, now: Instant, macros: Macros, name: &str) {
        self.chain.helo(macros, name, now);
        self.pump(reg, now);
    }

    /// MAIL FROM; the verdict now or from [`Milters::ready`]/[`Milters::expired`].
    pub fn mail(
        &mut self,
        reg: &Registry,
        now: Instant,
        macros: Macros,
        args: Vec<String>,
    ) -> Option<Verdict> {
        let v = self.chain.mail(macros, args, now);
        self.pump(reg, now);
        v.or_else(|| self.chain.poll_verdict())
    }

    /// RCPT TO; the verdict now or later.
    pub fn rcpt(
        &mut self,
        reg: &Registry,
        now: Instant,
        macros: Macros,
        args: Vec<String>,
    ) -> Option<Verdict> {
        let v = self.chain.rcpt(macros, args, now);
        self.pump(reg, now);
        v.or_else(|| self.chain.poll_verdict())
    }

    /// An unknown SMTP command; the verdict now or later.
    pub fn unknown(
        &mut self,
        reg: &Registry,
        now: Instant,
        macros: Macros,
        command: &str,
    ) -> Option<Verdict> {
        let v = self.chain.unknown(macros, command, now);
        self.pump(reg, now);
        v.or_else(|| self.chain.poll_verdict())
    }

    /// DATA.
    pub fn data(&mut self, reg: &Registry, now: Instant, macros: &Macros) {
        self.chain.data(macros, now);
        self.pump(reg, now);
    }

    /// Content as it streams (wire format).
    pub fn content(&mut self, reg: &Registry, now: Instant, macros: &Macros, bytes: &[u8]) {
        self.chain.content(macros, bytes, now);
        self.pump(reg, now);
    }

    /// The end of the message; the verdict now or later, then [`Milters::take_edits`].
    pub fn end_of_message(
        &mut self,
        reg: &Registry,
        now: Instant,
        macros: Macros,
    ) -> Option<Verdict> {
        let v = self.chain.end_of_message(macros, now);
        self.pump(reg, now);
        v.or_else(|| self.chain.poll_verdict())
    }

    /// A verdict that came after the call that asked it and was not yet
    /// returned (when several are asked without waiting).
    pub fn poll_verdict(&mut self) -> Option<Verdict> {
        self.chain.poll_verdict()
    }

    /// The changes of the milters at the end of the message, in order.
    pub fn take_edits(&mut self) -> Vec<Edit> {
        self.chain.take_edits()
    }

    /// The transaction was abandoned.
    pub fn abort(&mut self, reg: &Registry, now: Instant) {
        self.chain.abort(now);
        self.pump(reg, now);
    }

    /// The session ends: each milter is told and closed.
    pub fn close(&mut self, reg: &Registry) {
        self.chain.quit();
        for (i, l) in self.links.iter_mut().enumerate() {
            if let Some(mut sock) = l.sock.take() {
                if self.chain.is_negotiated(i) {
                    l.out.extend_from_slice(&self.chain.transmit(i));
                    // Best effort: the milter learns of the end anyway
                    // when the socket closes.
                    let _ = sock.write(&l.out);
                }
                let _ = reg.deregister(sock.source());
            }
        }
    }

    /// A milter socket is ready: its answers, and the verdict if that
    /// completes one. None for a token that is not a milter's.
    pub fn ready(&mut self, reg: &Registry, now: Instant, token: Token) -> Option<Verdict> {
        let i = self.links.iter().position(|l| l.token == token)?;
        let mut failure = None;
        {
            let l = &mut self.links[i];
            let sock = l.sock.as_mut()?;
            if !l.connected {
                match sock.connected() {
                    Ok(true) => l.connected = true,
                    Ok(false) => return None,
                    Err(e) => failure = Some(format!("connect: {e}")),
                }
            }
            let mut buf = [0u8; 16384];
            while failure.is_none() {
                match sock.read(&mut buf) {
                    Ok(0) => failure = Some("lost connection".to_string()),
                    Ok(n) => self.chain.receive(i, &buf[..n], now),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => failure = Some(format!("read: {e}")),
                }
            }
        }
        if let Some(why) = failure {
            self.chain.lost(i, &why, now);
        }
        self.pump(reg, now);
        self.chain.poll_verdict()
    }

    /// Milters past their deadline fail; the verdict, if that completes one.
    pub fn expired(&mut self, reg: &Registry, now: Instant) -> Option<Verdict> {
        self.chain.expire(now);
        self.pump(reg, now);
        self.chain.poll_verdict()
    }

    /// Writes what each milter has to send; drops the sockets of failed ones.
    fn pump(&mut self, reg: &Registry, now: Instant) {
        loop {
            let mut failed = Vec::new();
            for (i, l) in self.links.iter_mut().enumerate() {
                let Some(sock) = l.sock.as_mut() else {
                    continue;
                };
                if self.chain.is_failed(i) {
                    let _ = reg.deregister(sock.source());
                    l.sock = None;
                    continue;
                }
                l.out.extend_from_slice(&self.chain.transmit(i));
                while l.connected && !l.out.is_empty() {
                    match sock.write(&l.out) {
                        Ok(n) => {
                            l.out.drain(..n);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => {
                            failed.push((i, format!("write: {e}")));
                            break;
                        }
                    }
                }
                let want = matches!(sock, Sock::Tcp(_)) || !l.out.is_empty();
                if want != l.writable {
                    match reg.reregister(sock.source(), l.token, evloop::interest(want)) {
                        Ok(()) => l.writable = want,
                        Err(e) => failed.push((i, format!("register: {e}"))),
                    }
                }
            }
            if failed.is_empty() {
                return;
            }
            for (i, why) in failed {
                self.chain.lost(i, &why, now);
            }
        }
    }
}
