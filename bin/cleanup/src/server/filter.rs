//! `non_smtpd_milters`: the milters of mail submitted with sendmail(1).
//!
//! There is no SMTP session, so cleanup pretends one, as Postfix's
//! cleanup does (`cleanup_milter_emul_*`): the mail comes over ESMTP from
//! `localhost` [127.0.0.1], HELO `localhost`, MAIL FROM the sender, one
//! RCPT TO per recipient, then DATA and the message. The envelope events
//! go out at `Begin`, while the content streams in (cleanup holds it, as
//! for smtpd's milters); the content and its end go at `End`. The macros
//! are Postfix's for this case: `j`, `v`, `{daemon_name}`,
//! `{daemon_addr}`, `_`, `{client_*}`, `i`, `{mail_addr}`, `{rcpt_addr}`.
//!
//! A refusal at MAIL or at the end is the message's refusal (sendmail(1)
//! reports it and exits 65, or 75 for a temporary one); a refused
//! recipient is a configuration error, as with Postfix: the message is
//! not accepted, "4.3.5 Server configuration error", try again later.
//! Discard drops the message and answers as if it were queued.
//! The milters run on cleanup's event loop ([`milter::net::Milters`]):
//! nothing here blocks it.

use std::collections::VecDeque;
use std::time::Instant;

use ::milter::chain::{Macros, Peer};
use ::milter::net::{Milters, Settings};
use ::milter::{Edit, Verdict};
use mail::{Refusal, StatusCode};
use mio::{Registry, Token};

/// What the milters decided about a message.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Queue it, with these changes.
    Accept(Vec<Edit>),
    /// Refuse it with this reply.
    Refuse(Refusal),
    /// Say it was queued and drop it.
    Discard,
}

/// A verdict the filter waits for.
#[derive(Debug)]
enum Expect {
    Mail,
    Rcpt,
    Eom,
}

/// One submission's milters.
pub(super) struct Filter {
    milters: Milters,
    expect: VecDeque<Expect>,
    base: Macros,
    /// The refusal or discard already decided, or the changes at the end.
    outcome: Option<Outcome>,
    /// The message, once it is complete, waiting for the envelope verdicts.
    message: Option<Vec<u8>>,
    eom_sent: bool,
    warnings: Vec<String>,
}

impl Filter {
    /// Connects to the milters and tells them of the pretended session
    /// and the envelope.
    pub(super) fn start(
        reg: &Registry,
        tokens: &[Token],
        s: &Settings,
        now: Instant,
        queue_id: &str,
        sender: &str,
        recipients: &[String],
    ) -> Filter {
        let base: Macros = vec![
            ("j", s.myhostname.clone()),
            ("{daemon_name}", s.daemon_name.clone()),
            ("{daemon_addr}", "127.0.0.1".into()),
            ("v", "Sluice".into()),
            ("_", "localhost [127.0.0.1]".into()),
            ("{client_addr}", "127.0.0.1".into()),
            ("{client_name}", "localhost".into()),
            ("{client_port}", "0".into()),
            ("{client_ptr}", "localhost".into()),
            ("i", queue_id.to_string()),
        ];
        let mut f = Filter {
            milters: Milters::open(reg, tokens, s, now),
            expect: VecDeque::new(),
            base,
            outcome: None,
            message: None,
            eom_sent: false,
            warnings: Vec::new(),
        };
        let m = f.base.clone();
        f.milters.connect(
            reg,
            now,
            m.clone(),
            Peer {
                name: "localhost".into(),
                family: b'4',
                port: 0,
                addr: "127.0.0.1".into(),
            },
        );
        f.milters.helo(reg, now, m, "localhost");
        let mut mail = f.base.clone();
        mail.push(("{mail_addr}", sender.to_string()));
        f.expect.push_back(Expect::Mail);
        let v = f.milters.mail(reg, now, mail, vec![format!("<{sender}>")]);
        f.take(v);
        for r in recipients {
            if f.outcome.is_some() {
                break;
            }
            let mut rcpt = f.base.clone();
            rcpt.push(("{rcpt_addr}", r.clone()));
            f.expect.push_back(Expect::Rcpt);
            let v = f.milters.rcpt(reg, now, rcpt, vec![format!("<{r}>")]);
            f.take(v);
        }
        f.settle(reg, now);
        f
    }

    /// The sockets' tokens.
    pub(super) fn tokens(&self) -> Vec<Token> {
        self.milters.tokens()
    }

    /// When a milter gives up.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.milters.deadline()
    }

    /// Lines for the log.
    pub(super) fn take_warnings(&mut self) -> Vec<String> {
        let mut w = std::mem::take(&mut self.warnings);
        w.extend(self.milters.take_warnings());
        w
    }

    /// The message is complete (header section and body, wire format):
    /// it goes to the milters once the envelope has passed them.
    pub(super) fn end(&mut self, reg: &Registry, now: Instant, message: Vec<u8>) {
        self.message = Some(message);
        self.settle(reg, now);
    }

    /// The decision, once made and the message ended.
    pub(super) fn outcome(&mut self) -> Option<Outcome> {
        match &self.outcome {
            Some(Outcome::Accept(_)) => self.outcome.take(),
            Some(_) if self.message.is_some() => self.outcome.take(),
            _ => None,
        }
    }

    /// A milter socket is ready.
    pub(super) fn ready(&mut self, reg: &Registry, now: Instant, token: Token) {
        let v = self.milters.ready(reg, now, token);
        self.take(v);
        self.settle(reg, now);
    }

    /// Milters past their deadline.
    pub(super) fn expired(&mut self, reg: &Registry, now: Instant) {
        let v = self.milters.expired(reg, now);
        self.take(v);
        self.settle(reg, now);
    }

    /// The pretended session ends.
    pub(super) fn close(&mut self, reg: &Registry) {
        self.milters.close(reg);
    }

    /// Takes the verdicts that came, in order.
    fn take(&mut self, mut v: Option<Verdict>) {
        while let Some(verdict) = v.take().or_else(|| self.milters.poll_verdict()) {
            let Some(what) = self.expect.pop_front() else {
                continue;
            };
            if self.outcome.is_some() {
                continue;
            }
            self.outcome = match (what, verdict) {
                (Expect::Eom, Verdict::Continue | Verdict::Accept) => {
                    Some(Outcome::Accept(self.milters.take_edits()))
                }
                (_, Verdict::Continue | Verdict::Accept) => None,
                (_, Verdict::Discard) => Some(Outcome::Discard),
                (Expect::Rcpt, _) => {
                    self.warnings.push(
                        "milter configuration error: can't reject recipient in non-smtpd(8) submission"
                            .into(),
                    );
                    Some(Outcome::Refuse(Refusal::new(
                        451,
                        StatusCode::known(4, 3, 5),
                        "Server configuration error",
                    )))
                }
                (_, refused) => Some(refusal(&refused)),
            };
        }
    }

    /// Sends the message once the envelope verdicts are in; takes the
    /// end's verdict and changes.
    fn settle(&mut self, reg: &Registry, now: Instant) {
        if let Some(o) = &self.outcome {
            if !matches!(o, Outcome::Accept(_)) {
                self.expect.clear();
            }
            return;
        }
        if self.eom_sent || !self.expect.is_empty() {
            return;
        }
        let Some(message) = self.message.as_ref() else {
            return;
        };
        let m = self.base.clone();
        self.milters.data(reg, now, &m);
        self.milters.content(reg, now, &m, message);
        self.expect.push_back(Expect::Eom);
        self.eom_sent = true;
        let v = self.milters.end_of_message(reg, now, m);
        self.take(v);
    }
}

/// The reply for a milter's refusal: its own (`550 5.7.1 text` or `550
/// text`, parsed here, once, by `mail`'s parser that smtpd uses too), or
/// Postfix's words.
fn refusal(v: &Verdict) -> Outcome {
    let (own, default) = match v {
        Verdict::Tempfail(own) => (
            own,
            Refusal::new(
                451,
                StatusCode::known(4, 7, 1),
                "Service unavailable - try again later",
            ),
        ),
        Verdict::Reject(own) => (
            own,
            Refusal::new(550, StatusCode::NOT_AUTHORIZED, "Command rejected"),
        ),
        _ => (
            &None,
            Refusal::new(550, StatusCode::NOT_AUTHORIZED, "Command rejected"),
        ),
    };
    let own = own
        .as_deref()
        .and_then(|own| Refusal::from_milter_reply(own, (7, 1)));
    Outcome::Refuse(own.unwrap_or(default))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(own: &str) -> String {
        match refusal(&Verdict::Reject(Some(own.to_string()))) {
            Outcome::Refuse(r) => r.to_string(),
            _ => panic!("not a refusal"),
        }
    }

    #[test]
    fn a_milters_own_reply_is_kept_on_one_line_or_several() {
        assert_eq!(refused("554 5.7.1 spam"), "554 5.7.1 spam");
        assert_eq!(refused("550 no status"), "550 5.7.1 no status");
        assert_eq!(
            refused("554-5.7.1 first line\r\n554 5.7.1 second line"),
            "554 5.7.1 first line second line"
        );
        // Not a reply: Postfix's words.
        assert_eq!(refused("go away"), "550 5.7.1 Command rejected");
    }
}
