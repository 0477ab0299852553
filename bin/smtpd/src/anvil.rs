//! The anvil questions of an smtpd process, over its one tagged link.
//!
//! A new client's session waits for anvil's count and rate before its
//! greeting (220, or 421 4.7.0 over a limit); the other sessions do not.
//! An anvil that does not answer within `smtpd_anvil_timeout`, is not
//! running or drops the link means no limit for that client, as in Postfix
//! when anvil cannot be reached, with one warning per outage. Disconnects
//! are told without waiting for the answer. For
//! `smtpd_client_auth_rate_limit`, a session asks for its client's failed
//! AUTH commands before relaying one more, and each failure is told; a
//! silent anvil is no limit there too. For `smtpd_client_message_rate_limit`
//! and `smtpd_client_recipient_rate_limit`, a session tells anvil of each
//! MAIL (RCPT) and waits for the client's count before deciding it, as
//! Postfix's smtpd does (`ANVIL_REQ_MAIL`, `ANVIL_REQ_RCPT`).

use std::time::{Duration, Instant};

use daemon::Cx;
use ipc::anvil::{Anvil, Request, Response};
use mio::Token;

use crate::tagged::{Naming, Reply, TaggedLink};

/// A client's connection count and rate, or `None` when anvil did not say.
pub type Counts = Option<(u32, u32)>;

/// What anvil answered a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Its client's connection figures (before the greeting).
    Counts(Counts),
    /// Its client's failed AUTH commands, `None` when anvil did not say.
    AuthFailures(Option<u32>),
    /// Its client's MAIL or RCPT commands in the unit (the one asked
    /// about included), `None` when anvil did not say.
    Rate(Option<u32>),
}

/// What a session asked, to know what a failure answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counts,
    Auth,
    Rate,
}

/// A command anvil counts for the message and recipient rate limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// MAIL FROM.
    Mail,
    /// RCPT TO (and VRFY, as in Postfix).
    Rcpt,
}

/// The anvil link and what each session waiting on it asked.
pub struct AnvilLink(TaggedLink<Anvil>, std::collections::BTreeMap<Token, Kind>);

impl AnvilLink {
    /// A link to the anvil socket under `queue_root`, opened when first needed.
    pub fn new(queue_root: &std::path::Path, timeout: Duration) -> Self {
        let naming = Naming {
            what: "anvil",
            param: "smtpd_anvil_timeout",
            note: ": client limits not enforced until anvil answers",
            once_per_outage: true,
        };
        AnvilLink(
            TaggedLink::new(queue_root.join("private/anvil"), timeout, naming),
            std::collections::BTreeMap::new(),
        )
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
        self.ask(cx, session, &req, Kind::Counts)
    }

    fn ask(&mut self, cx: &mut Cx<'_>, session: Token, req: &Request, kind: Kind) -> bool {
        let asked = self.0.ask(cx, session, req).is_ok();
        if asked {
            self.1.insert(session, kind);
        }
        asked
    }

    /// Tells anvil of a MAIL or RCPT of `session`'s client and asks for its
    /// count; `false` when anvil cannot be asked (no limit then).
    pub fn event(
        &mut self,
        cx: &mut Cx<'_>,
        session: Token,
        service: &str,
        client: String,
        event: Event,
    ) -> bool {
        let service = service.to_string();
        let req = match event {
            Event::Mail => Request::Mail { service, client },
            Event::Rcpt => Request::Rcpt { service, client },
        };
        self.ask(cx, session, &req, Kind::Rate)
    }

    /// Reports a disconnection; nobody waits for the answer.
    pub fn disconnect(&mut self, cx: &mut Cx<'_>, service: &str, client: String) {
        let req = Request::Disconnect {
            service: service.to_string(),
            client,
        };
        let _ = self.0.tell(cx, &req);
    }

    /// Asks for the failed AUTH commands of `session`'s client; `false`
    /// when anvil cannot be asked (no limit then).
    pub fn auth_lookup(
        &mut self,
        cx: &mut Cx<'_>,
        session: Token,
        service: &str,
        client: String,
    ) -> bool {
        let req = Request::AuthLookup {
            service: service.to_string(),
            client,
        };
        self.ask(cx, session, &req, Kind::Auth)
    }

    /// Reports a failed AUTH; nobody waits for the answer.
    pub fn auth_failed(&mut self, cx: &mut Cx<'_>, service: &str, client: String) {
        let req = Request::AuthFailed {
            service: service.to_string(),
            client,
        };
        let _ = self.0.tell(cx, &req);
    }

    /// The link is ready: the answers that arrived, by session.
    pub fn ready(&mut self, cx: &mut Cx<'_>) -> Vec<(Token, Answer)> {
        let replies = self.0.ready(cx);
        self.answers(replies)
    }

    /// Sessions whose deadline has passed: no figures for them.
    pub fn expired(&mut self, now: Instant) -> Vec<(Token, Answer)> {
        let replies = self.0.expired(now);
        self.answers(replies)
    }

    fn answers(&mut self, replies: Vec<(Token, Reply<Anvil>)>) -> Vec<(Token, Answer)> {
        replies
            .into_iter()
            .map(|(t, r)| {
                let kind = self.1.remove(&t).unwrap_or(Kind::Counts);
                let answer = match (r, kind) {
                    (Ok(Response::Counts { count, rate }), _) => {
                        Answer::Counts(Some((count, rate)))
                    }
                    (Ok(Response::AuthFailures { rate }), _) => Answer::AuthFailures(Some(rate)),
                    (Ok(Response::Rate { rate }), _) => Answer::Rate(Some(rate)),
                    (Err(_), Kind::Auth) => Answer::AuthFailures(None),
                    (Err(_), Kind::Rate) => Answer::Rate(None),
                    (Err(_), Kind::Counts) => Answer::Counts(None),
                };
                (t, answer)
            })
            .collect()
    }

    /// The earliest deadline of a question.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.0.next_deadline()
    }

    /// Forgets the question of a session that has ended.
    pub fn forget(&mut self, session: Token) {
        self.0.forget(session);
        self.1.remove(&session);
    }
}
