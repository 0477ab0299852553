//! `smtpd_client_message_rate_limit` and `smtpd_client_recipient_rate_limit`:
//! which commands a session has anvil count, the command held for the
//! answer, and the refusal over a limit, in Postfix's words (smtpd.c,
//! `mail_cmd`, `rcpt_cmd`, `vrfy_cmd`).
//!
//! As in Postfix, anvil counts each MAIL (RCPT, VRFY) that gets this far,
//! accepted or refused later, the one over the limit included; a client in
//! `smtpd_client_event_limit_exceptions` is not counted at all.

use smtp_proto::command::{MailParams, RcptParams};
use smtp_proto::{Mailbox, Path, Reply, StatusCode};

pub use crate::anvil::Event;

/// The limits one session is held to (0: not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// `smtpd_client_message_rate_limit`.
    pub mail: u32,
    /// `smtpd_client_recipient_rate_limit`.
    pub rcpt: u32,
}

impl Limits {
    /// The limits for a client; none for an exempt one.
    pub fn new(mail: u32, rcpt: u32, exempt: bool) -> Limits {
        if exempt {
            Limits::default()
        } else {
            Limits { mail, rcpt }
        }
    }

    /// The limit that counts `event` (0: none).
    pub fn of(&self, event: Event) -> u32 {
        match event {
            Event::Mail => self.mail,
            Event::Rcpt => self.rcpt,
        }
    }
}

/// A command waiting for anvil's count before it is decided.
#[derive(Debug)]
pub enum Held {
    /// MAIL FROM.
    Mail(Path, MailParams),
    /// RCPT TO.
    Rcpt(Mailbox, RcptParams),
    /// VRFY, with its argument.
    Vrfy(String),
}

impl Held {
    /// What anvil counts for it.
    pub fn event(&self) -> Event {
        match self {
            Held::Mail(..) => Event::Mail,
            Held::Rcpt(..) | Held::Vrfy(_) => Event::Rcpt,
        }
    }
}

/// The reply and the warning when `rate` (the client's commands in the
/// unit, this one included) is over `limit`; `None` (anvil did not say)
/// is no limit, as in Postfix.
pub fn refusal(
    event: Event,
    rate: Option<u32>,
    limit: u32,
    client: std::net::IpAddr,
    service: &str,
) -> Option<(Reply, String)> {
    let rate = rate?;
    if limit == 0 || rate <= limit {
        return None;
    }
    let (text, warning) = match event {
        Event::Mail => (
            format!("Error: too much mail from {client}"),
            "Message delivery request rate limit exceeded",
        ),
        Event::Rcpt => (
            format!("Error: too many recipients from {client}"),
            "Recipient address rate limit exceeded",
        ),
    };
    let reply = Reply::enhanced(450, StatusCode::known(4, 7, 1), text);
    let warning = format!("{warning}: {rate} from unknown[{client}] for service {service}");
    Some((reply, warning))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7));

    #[test]
    fn over_the_limit_is_450_with_postfixs_texts() {
        assert_eq!(refusal(Event::Mail, Some(2), 2, CLIENT, "smtp"), None);
        let (reply, warning) = refusal(Event::Mail, Some(3), 2, CLIENT, "smtp").unwrap();
        assert_eq!(
            reply.to_string(),
            "450 4.7.1 Error: too much mail from 192.0.2.7"
        );
        assert_eq!(
            warning,
            "Message delivery request rate limit exceeded: 3 from unknown[192.0.2.7] for service smtp"
        );
        let (reply, warning) = refusal(Event::Rcpt, Some(6), 5, CLIENT, "submission").unwrap();
        assert_eq!(
            reply.to_string(),
            "450 4.7.1 Error: too many recipients from 192.0.2.7"
        );
        assert_eq!(
            warning,
            "Recipient address rate limit exceeded: 6 from unknown[192.0.2.7] for service submission"
        );
    }

    #[test]
    fn no_answer_or_no_limit_is_no_limit() {
        assert_eq!(refusal(Event::Mail, None, 1, CLIENT, "smtp"), None);
        assert_eq!(refusal(Event::Rcpt, Some(1000), 0, CLIENT, "smtp"), None);
    }

    #[test]
    fn exempt_clients_are_not_counted() {
        let l = Limits::new(10, 20, false);
        assert_eq!((l.of(Event::Mail), l.of(Event::Rcpt)), (10, 20));
        let l = Limits::new(10, 20, true);
        assert_eq!((l.of(Event::Mail), l.of(Event::Rcpt)), (0, 0));
    }

    #[test]
    fn vrfy_counts_as_a_recipient() {
        assert_eq!(Held::Vrfy("u".into()).event(), Event::Rcpt);
        assert_eq!(
            Held::Mail(Path::Null, MailParams::default()).event(),
            Event::Mail
        );
    }
}
