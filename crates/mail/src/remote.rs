//! A remote server's reply as it was sent, and the one wording of it in
//! reasons.
//!
//! The smtp agent words a failure that a server's reply decided as
//! Postfix's smtp(8) does (`host mx[192.0.2.1]:25 said: 550 5.1.1 text (in
//! reply to RCPT TO command)`): the reply as the server sent it, with its
//! own enhanced code or none (the code Sluice acts on, made up with
//! `StatusCode::of_reply` when the server sent none, stays in
//! [`crate::Status`]). The reply also travels typed ([`RemoteReply`]) to
//! the scheduler's traffic shaping. A reason read back from the journal,
//! for a notice's Remote-MTA and Diagnostic-Code, is parsed by
//! [`RemoteReply::parse_reason`], the exact inverse of
//! [`RemoteReply::reason`]: it accepts only strings that wording gives
//! back unchanged, so a local reason (a pipe command's output) is never
//! taken for a server's reply. A success notice quotes the reply that
//! accepted a recipient the same way, worded as Postfix's trace does
//! (`delivery via mx[192.0.2.1]:25: 250 2.0.0 Ok`): the journal's record of
//! an owed success keeps no status, so that quote is how the server's
//! enhanced code reaches the notice's Status. Panics: never.

use serde::{Deserialize, Serialize};

use crate::StatusCode;

/// A reply a remote SMTP server sent, and the server that sent it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemoteReply {
    /// The server as logged: `name[addr]:port`.
    pub relay: String,
    /// The three-digit reply code.
    pub code: u16,
    /// The enhanced status code the server sent, if it sent one.
    pub enhanced: Option<StatusCode>,
    /// The text lines joined by a space, without codes.
    pub text: String,
}

/// When in the session the reply came, as the reason says it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Said {
    /// The greeting: `refused to talk to me`.
    Greeting,
    /// EHLO, then HELO: `refused EHLO and HELO`.
    Helo,
    /// A reply to a command: `(in reply to MAIL FROM command)`.
    InReplyTo(String),
    /// A 421 the server sent in place of a reply (it is closing).
    Closing,
    /// A reply of a kind the command cannot have.
    Unexpected,
    /// The reply that accepted a recipient, as a success notice quotes it
    /// (Postfix's `delivery via mx[192.0.2.1]:25: 250 2.0.0 Ok`).
    Accepted,
}

impl RemoteReply {
    /// The reply as the server sent it, on one line: `550 5.1.1 text`, or
    /// `550 text` when it sent no enhanced code.
    pub fn said(&self) -> String {
        let mut s = self.code.to_string();
        if let Some(e) = self.enhanced {
            s.push(' ');
            s.push_str(&e.to_string());
        }
        if !self.text.is_empty() {
            s.push(' ');
            s.push_str(&self.text);
        }
        s
    }

    /// The server's name, as a notice's Remote-MTA gives it.
    pub fn host(&self) -> &str {
        self.relay.split('[').next().unwrap_or("")
    }

    /// The reason as logged and journaled, worded as Postfix's smtp(8) does.
    pub fn reason(&self, when: &Said) -> String {
        let (relay, said) = (&self.relay, self.said());
        match when {
            Said::Greeting => format!("host {relay} refused to talk to me: {said}"),
            Said::Helo => format!("host {relay} refused EHLO and HELO: {said}"),
            Said::InReplyTo(cmd) => {
                format!("host {relay} said: {said} (in reply to {cmd} command)")
            }
            Said::Closing => format!("host {relay} said: {said}"),
            Said::Unexpected => format!("host {relay} sent an unexpected reply: {said}"),
            Said::Accepted => format!("delivery via {relay}: {said}"),
        }
    }

    /// The reply and its place from a reason [`RemoteReply::reason`]
    /// worded; `None` for any string that wording does not give back
    /// exactly (a local reason, a reason of another agent).
    pub fn parse_reason(reason: &str) -> Option<(RemoteReply, Said)> {
        if let Some(rest) = reason.strip_prefix("delivery via ") {
            let (relay, said) = rest.split_once(' ')?;
            let reply = Self::parse(relay.strip_suffix(':')?, said)?;
            return (reply.reason(&Said::Accepted) == reason).then_some((reply, Said::Accepted));
        }
        let rest = reason.strip_prefix("host ")?;
        let (relay, rest) = rest.split_once(' ')?;
        let (when, said) = if let Some(s) = rest.strip_prefix("refused to talk to me: ") {
            (Said::Greeting, s)
        } else if let Some(s) = rest.strip_prefix("refused EHLO and HELO: ") {
            (Said::Helo, s)
        } else if let Some(s) = rest.strip_prefix("sent an unexpected reply: ") {
            (Said::Unexpected, s)
        } else if let Some(s) = rest.strip_prefix("said: ") {
            match s
                .strip_suffix(" command)")
                .and_then(|s| s.rsplit_once(" (in reply to "))
            {
                Some((said, cmd)) => (Said::InReplyTo(cmd.to_string()), said),
                None => (Said::Closing, s),
            }
        } else {
            return None;
        };
        let reply = Self::parse(relay, said)?;
        // Only what the wording gives back unchanged is its output.
        (reply.reason(&when) == reason).then_some((reply, when))
    }

    /// The reply `relay` sent, from its one-line form `550 5.1.1 text`
    /// (the enhanced code only of the reply's class, as smtp-proto's reply
    /// parser takes it); `None` without a reply code.
    pub fn parse(relay: &str, said: &str) -> Option<RemoteReply> {
        let digits = said.get(..3)?;
        if !digits.bytes().all(|b| b.is_ascii_digit())
            || !(200..=599).contains(&digits.parse::<u16>().ok()?)
        {
            return None;
        }
        let code: u16 = digits.parse().ok()?;
        let rest = &said[3..];
        let rest = match rest.strip_prefix(' ') {
            Some(r) => r,
            None if rest.is_empty() => rest,
            None => return None,
        };
        let (word, after) = rest.split_once(' ').unwrap_or((rest, ""));
        let enhanced = word
            .parse::<StatusCode>()
            .ok()
            .filter(|e| u16::from(e.class()) == code / 100);
        let text = if enhanced.is_some() { after } else { rest };
        Some(RemoteReply {
            relay: relay.to_string(),
            code,
            enhanced,
            text: text.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code: u16, enhanced: Option<StatusCode>, text: &str) -> RemoteReply {
        RemoteReply {
            relay: "mx.example.net[192.0.2.1]:25".into(),
            code,
            enhanced,
            text: text.into(),
        }
    }

    #[test]
    fn the_reply_is_quoted_as_sent() {
        let r = reply(550, None, "no such user");
        assert_eq!(r.said(), "550 no such user");
        assert_eq!(
            r.reason(&Said::InReplyTo("RCPT TO".into())),
            "host mx.example.net[192.0.2.1]:25 said: 550 no such user (in reply to RCPT TO command)"
        );
        let r = reply(421, Some(StatusCode::known(4, 7, 0)), "[TS01] later");
        assert_eq!(
            r.reason(&Said::Greeting),
            "host mx.example.net[192.0.2.1]:25 refused to talk to me: 421 4.7.0 [TS01] later"
        );
        assert_eq!(r.host(), "mx.example.net");
        assert_eq!(reply(554, None, "").said(), "554");
    }

    #[test]
    fn parsing_is_the_inverse_of_wording() {
        let whens = [
            Said::Greeting,
            Said::Helo,
            Said::InReplyTo("RCPT TO".into()),
            Said::InReplyTo("end of DATA".into()),
            Said::Closing,
            Said::Unexpected,
            Said::Accepted,
        ];
        let replies = [
            reply(550, Some(StatusCode::known(5, 1, 1)), "no such user"),
            reply(550, None, "no such user"),
            reply(421, None, ""),
            reply(452, None, "said: x (in reply to y command)"),
            reply(550, None, "4.1.1 a code of another class is text"),
            reply(250, Some(StatusCode::known(2, 6, 0)), "queued as 4Q"),
            reply(250, None, "Ok"),
        ];
        for r in &replies {
            for w in &whens {
                let s = r.reason(w);
                let (p, pw) = RemoteReply::parse_reason(&s).expect(&s);
                assert_eq!(p.reason(&pw), s);
                // A text ending as a command's does reads as one: the same words.
                if !r.text.contains(" (in reply to ") {
                    assert_eq!((p, pw), (r.clone(), w.clone()), "{s}");
                }
            }
        }
    }

    #[test]
    fn other_reasons_are_not_replies() {
        for s in [
            "",
            "connect to mx[192.0.2.1]:25: Connection refused",
            "Command died with status 1: \"x\". Command output: host a[b]:25 said: 550 x",
            "host mx[192.0.2.1]:25 said: 5x0 text",
            "host mx[192.0.2.1]:25 said: 650 text",
            "host mx[192.0.2.1]:25 said: 550 5.01.1 padded code",
            "host mx[192.0.2.1]:25 said:550 text",
            "host mx[192.0.2.1]:25: TlsFailed",
            "lost connection with host mx[192.0.2.1]:25 while sending RCPT TO",
            "delivery via mx[192.0.2.1]:25 250 no colon",
            "delivery via mx[192.0.2.1]:25: delivered to mailbox",
            "delivered to mailbox",
        ] {
            assert_eq!(RemoteReply::parse_reason(s), None, "{s}");
        }
    }
}
