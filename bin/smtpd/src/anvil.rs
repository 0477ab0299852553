//! The anvil questions of an smtpd process, over its one tagged link.
//!
//! A new client's session waits for anvil's count and rate before its
//! greeting (220, or 421 4.7.0 over a limit); the other sessions do not.
//! An anvil that does not answer within `smtpd_anvil_timeout`, is not
//! running or drops the link means no limit for that client, as in Postfix
//! when anvil cannot be reached, with one warning per outage. Disconnects
//! are told without waiting for the answer.

use std::time::{Duration, Instant};

use daemon::Cx;
use ipc::anvil::{Anvil, Request, Response};
use mio::Token;

use crate::tagged::{Naming, Reply, TaggedLink};

/// A client's connection count and rate, or `None` when anvil did not say.
pub type Counts = Option<(u32, u32)>;

/// The anvil link and the sessions waiting for their counts.
pub struct AnvilLink(TaggedLink<Anvil>);

impl AnvilLink {
    /// A link to the anvil socket under `queue_root`, opened when first needed.
    pub fn new(queue_root: &std::path::Path, timeout: Duration) -> Self {
        let naming = Naming {
            what: "anvil",
            param: "smtpd_anvil_timeout",
            note: ": client connection limits not enforced until anvil answers",
            once_per_outage: true,
        };
        AnvilLink(TaggedLink::new(
            queue_root.join("private/anvil"),
            timeout,
            naming,
        ))
    }

    /// Applies a reloaded `smtpd_anvil_timeout` to later questions.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.0.set_timeout(timeout);
    }

    /// The token of the open link, if any.
    pub fn token(&self) -> Option<Token> {
        self.0.token()
    }

    /// Registers the connection of `client` for `session`, whose counts come
    /// later; `false` when anvil cannot be told (no limit for it, and no
    /// disconnection to report).
    pub fn connect(
        &mut self,
        cx: &mut Cx<'_>,
        session: Token,
        service: &str,
        client: String,
    ) -> bool {
        let req = Request::Connect {
            service: service.to_string(),
            client,
        };
        self.0.ask(cx, session, &req).is_ok()
    }

    /// Reports a disconnection; nobody waits for the answer.
    pub fn disconnect(&mut self, cx: &mut Cx<'_>, service: &str, client: String) {
        let req = Request::Disconnect {
            service: service.to_string(),
            client,
        };
        let _ = self.0.tell(cx, &req);
    }

    /// The link is ready: the counts that arrived, by session.
    pub fn ready(&mut self, cx: &mut Cx<'_>) -> Vec<(Token, Counts)> {
        counts(self.0.ready(cx))
    }

    /// Sessions whose deadline has passed: no counts for them.
    pub fn expired(&mut self, now: Instant) -> Vec<(Token, Counts)> {
        counts(self.0.expired(now))
    }

    /// The earliest deadline of a question.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.0.next_deadline()
    }

    /// Forgets the question of a session that has ended.
    pub fn forget(&mut self, session: Token) {
        self.0.forget(session);
    }
}

fn counts(replies: Vec<(Token, Reply<Anvil>)>) -> Vec<(Token, Counts)> {
    replies
        .into_iter()
        .map(|(t, r)| match r {
            Ok(Response::Counts { count, rate }) => (t, Some((count, rate))),
            Err(_) => (t, None),
        })
        .collect()
}
