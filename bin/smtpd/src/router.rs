//! The one non-blocking router link of an smtpd process.
//!
//! A session whose recipient needs the router (reject_unlisted_recipient
//! for a local or relay domain) hands its question here and waits; the
//! question goes out tagged with an id, and the answer, whenever it comes,
//! goes back to that session only. Every question has a deadline
//! (`smtpd_router_timeout`): a router that is late, absent or broken makes
//! that one RCPT a 451 4.3.0, and no other session waits on it. A link that
//! fails is dropped, failing the questions it owed; the next question
//! opens a new one. A late answer to a question already given up is
//! ignored (its id is no longer known).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use daemon::{msg_warn, Cx};
use ipc::router::{Request, Response, Router};
use ipc::Link;
use mio::Token;

/// What the router said about one recipient: unlisted or not, or why it
/// cannot say.
pub type Answer = Result<bool, String>;

/// The router link and the questions it owes answers to.
pub struct RouterLink {
    path: PathBuf,
    link: Option<Link<Router>>,
    /// Request id → the session asking and when it gives up.
    waiting: BTreeMap<u64, (Token, Instant)>,
    /// Failed questions of other sessions, handed out at the next turn,
    /// and when they failed.
    orphans: Vec<(Token, Answer)>,
    orphaned_at: Option<Instant>,
    timeout: Duration,
}

impl RouterLink {
    /// A link to the router socket under `queue_root`, opened when first needed.
    pub fn new(queue_root: &std::path::Path, timeout: Duration) -> Self {
        RouterLink {
            path: queue_root.join("private/router"),
            link: None,
            waiting: BTreeMap::new(),
            orphans: Vec::new(),
            orphaned_at: None,
            timeout,
        }
    }

    /// Applies a reloaded `smtpd_router_timeout` to later questions.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The token of the open link, if any.
    pub fn token(&self) -> Option<Token> {
        self.link.as_ref().map(|l| l.token())
    }

    /// Asks whether `address` is unlisted on behalf of `session`; `Err`
    /// when the question cannot even be sent (the session is answered now).
    pub fn ask(
        &mut self,
        cx: &mut Cx<'_>,
        session: Token,
        address: String,
        smtputf8: bool,
    ) -> Result<(), String> {
        if self.link.is_none() {
            let t = cx.token();
            match Link::<Router>::connect(&self.path, cx.registry, t) {
                Ok(l) => self.link = Some(l),
                Err(e) => {
                    msg_warn!("connect to router {}: {e}", self.path.display());
                    return Err(format!("router: {e}"));
                }
            }
        }
        let link = self.link.as_mut().expect("connected above");
        match link.send(&Request::Resolve { address, smtputf8 }) {
            Ok(id) => {
                self.waiting.insert(id, (session, cx.now + self.timeout));
                Ok(())
            }
            Err(e) => {
                msg_warn!("router link: {e}");
                // Other sessions' questions went out on a link now
                // unusable: they are failed at the next loop turn.
                let failed = self.drop_link(cx, &e.to_string());
                if !failed.is_empty() {
                    self.orphans.extend(failed);
                    self.orphaned_at = Some(cx.now);
                }
                Err(format!("router: {e}"))
            }
        }
    }

    /// The link is ready: the answers that arrived, by session.
    pub fn ready(&mut self, cx: &mut Cx<'_>) -> Vec<(Token, Answer)> {
        let mut out = self.take_orphans();
        let Some(link) = self.link.as_mut() else {
            return out;
        };
        match link.ready() {
            Ok(answers) => {
                for (id, resp) in answers {
                    if let Some((session, _)) = self.waiting.remove(&id) {
                        out.push((session, unlisted(resp)));
                    }
                }
                if link.is_closed() {
                    msg_warn!("router link: closed by the router");
                    out.extend(self.drop_link(cx, "connection closed by the router"));
                }
            }
            Err(e) => {
                msg_warn!("router link: {e}");
                out.extend(self.drop_link(cx, &e.to_string()));
            }
        }
        out
    }

    /// Questions whose deadline has passed, failed.
    pub fn expired(&mut self, now: Instant) -> Vec<(Token, Answer)> {
        let late: Vec<u64> = self
            .waiting
            .iter()
            .filter(|(_, (_, d))| *d <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut out = self.take_orphans();
        for id in late {
            if let Some((session, _)) = self.waiting.remove(&id) {
                msg_warn!(
                    "router {}: no answer within smtpd_router_timeout ({}s)",
                    self.path.display(),
                    self.timeout.as_secs()
                );
                out.push((session, Err("router: timed out".into())));
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

    fn take_orphans(&mut self) -> Vec<(Token, Answer)> {
        self.orphaned_at = None;
        std::mem::take(&mut self.orphans)
    }

    fn drop_link(&mut self, cx: &mut Cx<'_>, why: &str) -> Vec<(Token, Answer)> {
        if let Some(mut l) = self.link.take() {
            l.deregister(cx.registry);
        }
        std::mem::take(&mut self.waiting)
            .into_values()
            .map(|(session, _)| (session, Err(format!("router: {why}"))))
            .collect()
    }
}

/// The router's answer as reject_unlisted_recipient reads it.
fn unlisted(resp: Response) -> Answer {
    match resp {
        Response::Resolved { routes, .. } => Ok(routes.iter().any(|r| r.unknown)),
        Response::Failed {
            temporary: false, ..
        } => Ok(true),
        Response::Failed { text, .. } => Err(text),
        other => Err(format!("unexpected router answer {other:?}")),
    }
}
