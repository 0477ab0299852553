//! The router questions of an smtpd process, over its one tagged link.
//!
//! A session whose recipient needs the router (reject_unlisted_recipient
//! for a local or relay domain) hands its question here and waits; the
//! answer goes back to that session only. Every question has a deadline
//! (`smtpd_router_timeout`): a router that is late, absent or broken makes
//! that one RCPT a 451 4.3.0, and no other session waits on it.

use std::time::{Duration, Instant};

use daemon::Cx;
use ipc::router::{Request, Response, Router};
use mio::Token;

use crate::tagged::{Naming, Reply, TaggedLink};

/// What the router said about one recipient: unlisted or not, or why it
/// cannot say (for the log; `None` when the link failed and said so).
pub type Answer = Result<bool, Option<String>>;

/// The router link and the questions it owes answers to.
pub struct RouterLink(TaggedLink<Router>);

impl RouterLink {
    /// A link to the router socket under `queue_root`, opened when first needed.
    pub fn new(queue_root: &std::path::Path, timeout: Duration) -> Self {
        let naming = Naming {
            what: "router",
            param: "smtpd_router_timeout",
            note: "",
            once_per_outage: false,
        };
        RouterLink(TaggedLink::new(
            queue_root.join("private/router"),
            timeout,
            naming,
        ))
    }

    /// Applies a reloaded `smtpd_router_timeout` to later questions.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.0.set_timeout(timeout);
    }

    /// The token of the open link, if any.
    pub fn token(&self) -> Option<Token> {
        self.0.token()
    }

    /// Asks whether `address` is unlisted on behalf of `session`; `Err`
    /// when the question cannot even be sent (the session is answered now;
    /// the link has logged why).
    pub fn ask(
        &mut self,
        cx: &mut Cx<'_>,
        session: Token,
        address: String,
        smtputf8: bool,
    ) -> Result<(), Option<String>> {
        self.0
            .ask(cx, session, &Request::Resolve { address, smtputf8 })
            .map_err(|_| None)
    }

    /// The link is ready: the answers that arrived, by session.
    pub fn ready(&mut self, cx: &mut Cx<'_>) -> Vec<(Token, Answer)> {
        unlisted(self.0.ready(cx))
    }

    /// Questions whose deadline has passed, failed.
    pub fn expired(&mut self, now: Instant) -> Vec<(Token, Answer)> {
        unlisted(self.0.expired(now))
    }

    /// The earliest deadline of a question.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.0.next_deadline()
    }

    /// Forgets the questions of a session that has ended.
    pub fn forget(&mut self, session: Token) {
        self.0.forget(session);
    }
}

/// The router's answers as reject_unlisted_recipient reads them.
fn unlisted(replies: Vec<(Token, Reply<Router>)>) -> Vec<(Token, Answer)> {
    let read = |resp: Response| match resp {
        Response::Resolved { routes, .. } => Ok(routes.iter().any(|r| r.unknown)),
        Response::Failed { status } if status.is_permanent() => Ok(true),
        Response::Failed { status } => Err(Some(status.to_string())),
        other => Err(Some(format!("unexpected router answer {other:?}"))),
    };
    // A failed link has been logged by the link, once for all its questions.
    replies
        .into_iter()
        .map(|(t, r)| (t, r.map_err(|_| None).and_then(read)))
        .collect()
}
