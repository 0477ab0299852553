//! The address verification questions of an smtpd process, over its one
//! tagged link to qmgr (which keeps the cache and runs the probes).
//!
//! A session whose RCPT reached `reject_unverified_recipient` or
//! `reject_unverified_sender` with nothing known of the address hands the
//! question here and waits; the answer goes back to that session only.
//! qmgr answers at once from its cache, or holds the answer up to the
//! poll time (`address_verify_poll_count` - 1 times
//! `address_verify_poll_delay`) for a probe's result. The link's deadline
//! is that time plus `smtpd_router_timeout`: a qmgr that is late, absent
//! or broken makes that one RCPT a 451 4.3.0, and no other session waits.

use std::time::Duration;

use daemon::Cx;
use ipc::verify::{Outcome, Request, Response, Verify};
use mio::Token;
use policy::VerifyState;

use crate::tagged::{Naming, Reply, TaggedLink};

/// The link to qmgr's verification service and the questions it owes.
pub struct VerifyLink {
    link: TaggedLink<Verify>,
    wait: Duration,
}

impl VerifyLink {
    /// A link to qmgr's socket under `queue_root`, opened when first
    /// needed; qmgr may hold an answer `wait`, and has `grace` more.
    pub fn new(queue_root: &std::path::Path, wait: Duration, grace: Duration) -> Self {
        let naming = Naming {
            what: "address verification service (qmgr)",
            param: "address_verify_poll_count x address_verify_poll_delay + smtpd_router_timeout",
            note: "",
            once_per_outage: true,
        };
        VerifyLink {
            link: TaggedLink::new(queue_root.join("private/qmgr"), wait + grace, naming),
            wait,
        }
    }

    /// Applies reloaded times to later questions.
    pub fn set_times(&mut self, wait: Duration, grace: Duration) {
        self.wait = wait;
        self.link.set_timeout(wait + grace);
    }

    /// The token of the open link, if any.
    pub fn token(&self) -> Option<Token> {
        self.link.token()
    }

    /// Asks about `address` on behalf of `session`; `Err` when the
    /// question cannot even be sent (the session is answered now).
    pub fn ask(&mut self, cx: &mut Cx<'_>, session: Token, address: String) -> Result<(), String> {
        let wait_ms = u64::try_from(self.wait.as_millis()).unwrap_or(u64::MAX);
        self.link
            .ask(cx, session, &Request::Query { address, wait_ms })
    }

    /// The link is ready: the answers that arrived, by session.
    pub fn ready(&mut self, cx: &mut Cx<'_>) -> Vec<(Token, VerifyState)> {
        states(self.link.ready(cx))
    }

    /// Questions whose deadline has passed, failed.
    pub fn expired(&mut self, now: std::time::Instant) -> Vec<(Token, VerifyState)> {
        states(self.link.expired(now))
    }

    /// The earliest deadline of a question.
    pub fn next_deadline(&self) -> Option<std::time::Instant> {
        self.link.next_deadline()
    }

    /// Forgets the questions of a session that has ended.
    pub fn forget(&mut self, session: Token) {
        self.link.forget(session);
    }
}

/// qmgr's answers as the policy reads them.
fn states(replies: Vec<(Token, Reply<Verify>)>) -> Vec<(Token, VerifyState)> {
    replies
        .into_iter()
        .map(|(t, r)| {
            let s = match r {
                Ok(Response::Status { outcome, text }) => match outcome {
                    Outcome::Deliverable => VerifyState::Deliverable,
                    Outcome::Undeliverable => VerifyState::Undeliverable(text),
                    Outcome::Deferred => VerifyState::Deferred(text),
                    Outcome::Unknown => VerifyState::Unknown(text),
                },
                Err(e) => VerifyState::Failed(e),
            };
            (t, s)
        })
        .collect()
}
