//! One non-blocking tagged link from an smtpd process to a helper daemon
//! (the router, anvil), shared by all its sessions.
//!
//! A session's question goes out tagged with an id, and the answer,
//! whenever it comes, goes back to that session only. Every question has a
//! deadline: a daemon that is late, absent or broken fails that question,
//! and no other session waits on it. A link that fails is dropped, failing
//! the questions it owed; the next question opens a new one. A late answer
//! to a question already given up is ignored (its id is no longer known),
//! as are answers to notices sent without waiting ([`TaggedLink::tell`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use daemon::{msg_warn, Cx};
use ipc::{Link, Protocol};
use mio::Token;

/// A daemon's answer to one session, or why there is none.
pub type Reply<P> = Result<<P as Protocol>::Response, String>;

/// How a link reports its problems in the log.
#[derive(Clone, Copy)]
pub struct Naming {
    /// The daemon, as logs and replies name it ("router").
    pub what: &'static str,
    /// The parameter bounding the wait ("smtpd_router_timeout").
    pub param: &'static str,
    /// Appended to every warning ("" for none).
    pub note: &'static str,
    /// Warn once per outage (until the next answer) rather than each time.
    pub once_per_outage: bool,
}

/// The link to one daemon and the questions it owes answers to.
pub struct TaggedLink<P: Protocol> {
    path: PathBuf,
    naming: Naming,
    link: Option<Link<P>>,
    /// Request id → the session asking and when it gives up.
    waiting: BTreeMap<u64, (Token, Instant)>,
    /// Failed questions of other sessions, handed out at the next turn,
    /// and when they failed.
    orphans: Vec<(Token, Reply<P>)>,
    orphaned_at: Option<Instant>,
    timeout: Duration,
    /// A problem was logged and no answer has come since.
    outage: bool,
}

impl<P: Protocol> TaggedLink<P> {
    /// A link to the socket at `path`, opened when first needed.
    pub fn new(path: PathBuf, timeout: Duration, naming: Naming) -> Self {
        TaggedLink {
            path,
            naming,
            link: None,
            waiting: BTreeMap::new(),
            orphans: Vec::new(),
            orphaned_at: None,
            timeout,
            outage: false,
        }
    }

    /// Applies a reloaded deadline to later questions.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The token of the open link, if any.
    pub fn token(&self) -> Option<Token> {
        self.link.as_ref().map(|l| l.token())
    }

    /// Sends `req` on behalf of `session`, whose answer comes from `ready`
    /// or `expired`; `Err` when it cannot even be sent (the session is
    /// answered now).
    pub fn ask(&mut self, cx: &mut Cx<'_>, session: Token, req: &P::Request) -> Result<(), String> {
        let id = self.send(cx, req)?;
        self.waiting.insert(id, (session, cx.now + self.timeout));
        Ok(())
    }

    /// Sends `req` without waiting for its answer.
    pub fn tell(&mut self, cx: &mut Cx<'_>, req: &P::Request) -> Result<(), String> {
        self.send(cx, req).map(|_| ())
    }

    fn send(&mut self, cx: &mut Cx<'_>, req: &P::Request) -> Result<u64, String> {
        let what = self.naming.what;
        if self.link.is_none() {
            let t = cx.token();
            match Link::<P>::connect(&self.path, cx.registry, t) {
                Ok(l) => self.link = Some(l),
                Err(e) => {
                    self.warn(format!("connect to {what} {}: {e}", self.path.display()));
                    return Err(format!("{what}: {e}"));
                }
            }
        }
        let link = self.link.as_mut().expect("connected above");
        match link.send(req) {
            Ok(id) => Ok(id),
            Err(e) => {
                self.warn(format!("{what} link: {e}"));
                // Other sessions' questions went out on a link now
                // unusable: they are failed at the next loop turn.
                let failed = self.drop_link(cx, &e.to_string());
                if !failed.is_empty() {
                    self.orphans.extend(failed);
                    self.orphaned_at = Some(cx.now);
                }
                Err(format!("{what}: {e}"))
            }
        }
    }

    /// The link is ready: the answers that arrived, by session.
    pub fn ready(&mut self, cx: &mut Cx<'_>) -> Vec<(Token, Reply<P>)> {
        let what = self.naming.what;
        let mut out = self.take_orphans();
        let Some(link) = self.link.as_mut() else {
            return out;
        };
        match link.event(true, cx.closed) {
            Ok(answers) => {
                if !answers.is_empty() {
                    self.outage = false;
                }
                for (id, resp) in answers {
                    if let Some((session, _)) = self.waiting.remove(&id) {
                        out.push((session, Ok(resp)));
                    }
                }
                if link.is_closed() {
                    self.warn(format!("{what} link: closed by the {what}"));
                    let why = format!("connection closed by the {what}");
                    out.extend(self.drop_link(cx, &why));
                }
            }
            Err(e) => {
                self.warn(format!("{what} link: {e}"));
                out.extend(self.drop_link(cx, &e.to_string()));
            }
        }
        out
    }

    /// Questions whose deadline has passed, failed.
    pub fn expired(&mut self, now: Instant) -> Vec<(Token, Reply<P>)> {
        let late: Vec<u64> = self
            .waiting
            .iter()
            .filter(|(_, (_, d))| *d <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut out = self.take_orphans();
        for id in late {
            if let Some((session, _)) = self.waiting.remove(&id) {
                self.warn(format!(
                    "{} {}: no answer within {} ({}s)",
                    self.naming.what,
                    self.path.display(),
                    self.naming.param,
                    self.timeout.as_secs()
                ));
                out.push((session, Err(format!("{}: timed out", self.naming.what))));
            }
        }
        out
    }

    /// The earliest deadline of a question; already passed when failures
    /// wait to be handed out.
    pub fn next_deadline(&self) -> Option<Instant> {
        if !self.orphans.is_empty() {
            return self.orphaned_at;
        }
        self.waiting.values().map(|(_, d)| *d).min()
    }

    /// Forgets the questions of a session that has ended.
    pub fn forget(&mut self, session: Token) {
        self.waiting.retain(|_, (s, _)| *s != session);
        self.orphans.retain(|(s, _)| *s != session);
    }

    fn warn(&mut self, text: String) {
        if self.naming.once_per_outage && self.outage {
            return;
        }
        self.outage = true;
        msg_warn!("{text}{}", self.naming.note);
    }

    fn take_orphans(&mut self) -> Vec<(Token, Reply<P>)> {
        self.orphaned_at = None;
        std::mem::take(&mut self.orphans)
    }

    fn drop_link(&mut self, cx: &mut Cx<'_>, why: &str) -> Vec<(Token, Reply<P>)> {
        if let Some(mut l) = self.link.take() {
            l.deregister(cx.registry);
        }
        let what = self.naming.what;
        std::mem::take(&mut self.waiting)
            .into_values()
            .map(|(session, _)| (session, Err(format!("{what}: {why}"))))
            .collect()
    }
}
