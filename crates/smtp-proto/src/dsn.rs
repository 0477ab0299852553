//! The ESMTP parameters of MAIL and RCPT as the envelope keeps them.
//!
//! RET, ENVID, BODY (RFC 3461, RFC 6152, RFC 3030), NOTIFY and ORCPT
//! arrive at smtpd as [`MailParams`] and [`RcptParams`], are stored with
//! the message as `mail`'s envelope types, and leave through the smtp
//! agent as parameters again. This module is the one mapping between the
//! two, both ways, so that what the server parsed is what the client sends.
//! ORCPT is kept in the envelope as `type;address` with the address
//! decoded from xtext (the client encodes it again): [`mail::Orcpt`]'s
//! stored form, checked once when RCPT is parsed and again when read.

use crate::command::{Body, MailParams, Notify, Orcpt, RcptParams, Ret};

impl From<Ret> for mail::Ret {
    fn from(r: Ret) -> Self {
        match r {
            Ret::Full => mail::Ret::Full,
            Ret::Headers => mail::Ret::Hdrs,
        }
    }
}

impl From<mail::Ret> for Ret {
    fn from(r: mail::Ret) -> Self {
        match r {
            mail::Ret::Full => Ret::Full,
            mail::Ret::Hdrs => Ret::Headers,
        }
    }
}

/// BODY= as the envelope keeps it: absent is 7BIT.
pub fn body_type(body: Option<Body>) -> mail::BodyType {
    match body {
        None | Some(Body::SevenBit) => mail::BodyType::SevenBit,
        Some(Body::EightBitMime) => mail::BodyType::EightBitMime,
        Some(Body::BinaryMime) => mail::BodyType::BinaryMime,
    }
}

/// BODY= to send for a message of type `t` (none for 7BIT, as Postfix).
pub fn body_param(t: mail::BodyType) -> Option<Body> {
    match t {
        mail::BodyType::SevenBit => None,
        mail::BodyType::EightBitMime => Some(Body::EightBitMime),
        mail::BodyType::BinaryMime => Some(Body::BinaryMime),
    }
}

/// NOTIFY= as the envelope keeps it.
pub fn notify(n: Option<Notify>) -> mail::Notify {
    match n {
        None => mail::Notify::Default,
        Some(n) if n.is_never() => mail::Notify::Never,
        Some(n) => mail::Notify::On {
            success: n.success,
            failure: n.failure,
            delay: n.delay,
        },
    }
}

/// NOTIFY= to send for what the envelope keeps.
pub fn notify_param(n: mail::Notify) -> Option<Notify> {
    match n {
        mail::Notify::Default => None,
        mail::Notify::Never => Some(Notify::default()),
        mail::Notify::On {
            success,
            failure,
            delay,
        } => Some(Notify {
            success,
            failure,
            delay,
        }),
    }
}

/// ORCPT= as the envelope keeps it: `type;address`.
pub fn orcpt(o: &Orcpt) -> String {
    o.to_string()
}

/// ORCPT= to send for the envelope's `type;address` (none when it is not
/// a valid one, as for every other reader of it).
pub fn orcpt_param(o: &str) -> Option<Orcpt> {
    Orcpt::parse(o)
}

impl RcptParams {
    /// The envelope's recipient for `address` with these parameters.
    pub fn recipient(&self, address: impl Into<String>) -> mail::Recipient {
        mail::Recipient {
            address: address.into(),
            notify: notify(self.notify),
            orcpt: self.orcpt.as_ref().map(orcpt),
        }
    }

    /// The parameters to send for a recipient with these DSN options.
    pub fn of(notify: mail::Notify, orcpt: Option<&str>) -> RcptParams {
        RcptParams {
            notify: notify_param(notify),
            orcpt: orcpt.and_then(orcpt_param),
        }
    }
}

impl MailParams {
    /// The parameters to send for a message with these envelope options.
    pub fn of(
        size: u64,
        body: mail::BodyType,
        smtputf8: bool,
        ret: Option<mail::Ret>,
        envid: Option<&str>,
    ) -> MailParams {
        MailParams {
            size: Some(size),
            body: body_param(body),
            smtputf8,
            ret: ret.map(Ret::from),
            envid: envid.map(str::to_string),
            auth: None,
        }
    }

    /// RET= as the envelope keeps it.
    pub fn mail_ret(&self) -> Option<mail::Ret> {
        self.ret.map(mail::Ret::from)
    }

    /// BODY= as the envelope keeps it.
    pub fn body_type(&self) -> mail::BodyType {
        body_type(self.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{write_mail_params, write_rcpt_params};
    use crate::command::{parse_command, Command, ParseOptions};

    /// What smtpd parses, the envelope keeps and the agent sends are the
    /// same parameters.
    #[test]
    fn parameters_survive_server_envelope_client() {
        let opts = ParseOptions::default();
        let cases = [
            (
                "MAIL FROM:<a@b.example> RET=HDRS ENVID=Q+2B1 BODY=8BITMIME",
                " SIZE=10 BODY=8BITMIME RET=HDRS ENVID=Q+2B1",
            ),
            ("MAIL FROM:<a@b.example> RET=FULL", " SIZE=10 RET=FULL"),
            ("MAIL FROM:<a@b.example> BODY=7BIT", " SIZE=10"),
        ];
        for (line, sent) in cases {
            let Ok(Command::Mail { params, .. }) = parse_command(line.as_bytes(), opts) else {
                panic!("{line}");
            };
            let back = MailParams::of(
                10,
                params.body_type(),
                params.smtputf8,
                params.mail_ret(),
                params.envid.as_deref(),
            );
            let mut out = String::new();
            write_mail_params(&back, &mut out);
            assert_eq!(out, sent, "{line}");
        }
        let cases = [
            (
                "RCPT TO:<c@d.example> NOTIFY=SUCCESS,DELAY ORCPT=rfc822;x+2By@d.example",
                " NOTIFY=SUCCESS,DELAY ORCPT=rfc822;x+2By@d.example",
            ),
            ("RCPT TO:<c@d.example> NOTIFY=NEVER", " NOTIFY=NEVER"),
            ("RCPT TO:<c@d.example>", ""),
        ];
        for (line, sent) in cases {
            let Ok(Command::Rcpt { params, .. }) = parse_command(line.as_bytes(), opts) else {
                panic!("{line}");
            };
            let r = params.recipient("c@d.example");
            let back = RcptParams::of(r.notify, r.orcpt.as_deref());
            assert_eq!(back, params, "{line}");
            let mut out = String::new();
            write_rcpt_params(&back, &mut out);
            assert_eq!(out, sent, "{line}");
        }
        assert_eq!(
            RcptParams::default().recipient("x@y").orcpt,
            None,
            "no ORCPT, none kept"
        );
    }
}
