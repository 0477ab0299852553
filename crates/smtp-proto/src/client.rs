//! Client side pieces for the smtp delivery agent: command serialization and
//! EHLO capability parsing.
//!
//! [`write_command`] turns a [`Command`] into its wire form (the inverse of
//! [`crate::command::parse_command`]; a property test checks the round trip),
//! including ESMTP parameters with ENVID and ORCPT xtext-encoded (RFC 3461).
//! Message content needs no writer: the spool already holds wire format
//! (dot-stuffed, CRLF), so the client sends it as is and then `.CRLF`, or
//! unstuffed in BDAT chunks ([`crate::client_session::unstuff`]).
//! [`Capabilities`] reads a server's EHLO reply. Replies are read with
//! [`crate::reply::ReplyParser`]; a whole client session is in
//! [`crate::client_session`].
//! Nothing here logs or panics.

use crate::address::{Domain, Mailbox, Path};
use crate::command::{uxtext_encode, xtext_encode, Body, Command, MailParams, RcptParams, Ret};
use crate::reply::Reply;

/// Appends the wire form of `params` (each with its leading space).
pub fn write_mail_params(p: &MailParams, out: &mut String) {
    if let Some(size) = p.size {
        out.push_str(&format!(" SIZE={size}"));
    }
    if let Some(body) = p.body {
        out.push_str(match body {
            Body::SevenBit => " BODY=7BIT",
            Body::EightBitMime => " BODY=8BITMIME",
            Body::BinaryMime => " BODY=BINARYMIME",
        });
    }
    if p.smtputf8 {
        out.push_str(" SMTPUTF8");
    }
    if let Some(ret) = p.ret {
        out.push_str(match ret {
            Ret::Full => " RET=FULL",
            Ret::Headers => " RET=HDRS",
        });
    }
    if let Some(envid) = &p.envid {
        out.push_str(" ENVID=");
        out.push_str(&xtext_encode(envid));
    }
    if let Some(auth) = &p.auth {
        out.push_str(" AUTH=");
        out.push_str(&xtext_encode(auth));
    }
}

/// Appends the wire form of RCPT `params` (each with its leading space).
pub fn write_rcpt_params(p: &RcptParams, out: &mut String) {
    if let Some(n) = p.notify {
        out.push_str(&format!(" NOTIFY={n}"));
    }
    if let Some(o) = &p.orcpt {
        // RFC 6533: a utf-8 address is escaped its own way, not as xtext.
        let addr = if o.addr_type().eq_ignore_ascii_case("utf-8") {
            uxtext_encode(o.addr())
        } else {
            xtext_encode(o.addr())
        };
        out.push_str(&format!(" ORCPT={};{addr}", o.addr_type()));
    }
}

fn mailbox_path(m: &Mailbox) -> String {
    // `<Postmaster>` is the one mailbox allowed without a domain.
    if m.domain == Domain::Name(String::new()) {
        format!("<{}>", m.local)
    } else {
        format!("<{m}>")
    }
}

/// Appends the command's wire form, CRLF included, to `out`.
pub fn write_command(cmd: &Command, out: &mut Vec<u8>) {
    let line = match cmd {
        Command::Ehlo(d) => format!("EHLO {d}"),
        Command::Helo(d) => format!("HELO {d}"),
        Command::Mail { from, params } => {
            let mut s = format!("MAIL FROM:{from}");
            write_mail_params(params, &mut s);
            s
        }
        Command::Rcpt { to, params } => {
            let mut s = format!("RCPT TO:{}", mailbox_path(to));
            write_rcpt_params(params, &mut s);
            s
        }
        Command::Data => "DATA".into(),
        Command::Bdat { size, last: true } => format!("BDAT {size} LAST"),
        Command::Bdat { size, last: false } => format!("BDAT {size}"),
        Command::Rset => "RSET".into(),
        Command::Noop => "NOOP".into(),
        Command::Vrfy(s) => format!("VRFY {s}"),
        Command::Expn(s) => format!("EXPN {s}"),
        Command::Help => "HELP".into(),
        Command::Quit => "QUIT".into(),
        Command::StartTls => "STARTTLS".into(),
        Command::Auth(s) => format!("AUTH {s}"),
    };
    // Why: a CR or LF in a caller-supplied argument (an EHLO name from config,
    // a VRFY string) would let it inject a second command.
    out.extend(
        line.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// The command's wire form, CRLF included.
pub fn command_bytes(cmd: &Command) -> Vec<u8> {
    let mut v = Vec::new();
    write_command(cmd, &mut v);
    v
}

/// `MAIL FROM:` for an envelope sender.
pub fn mail(from: &Path, params: &MailParams) -> Vec<u8> {
    command_bytes(&Command::Mail {
        from: from.clone(),
        params: params.clone(),
    })
}

/// `RCPT TO:` for a recipient.
pub fn rcpt(to: &Mailbox, params: &RcptParams) -> Vec<u8> {
    command_bytes(&Command::Rcpt {
        to: to.clone(),
        params: params.clone(),
    })
}

/// What a server announced in its EHLO reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// PIPELINING (RFC 2920).
    pub pipelining: bool,
    /// SIZE, with its limit if given and not 0 (RFC 1870).
    pub size: Option<Option<u64>>,
    /// 8BITMIME (RFC 6152).
    pub eight_bit_mime: bool,
    /// SMTPUTF8 (RFC 6531).
    pub smtputf8: bool,
    /// ENHANCEDSTATUSCODES (RFC 2034).
    pub enhanced_status_codes: bool,
    /// CHUNKING (RFC 3030).
    pub chunking: bool,
    /// BINARYMIME (RFC 3030).
    pub binarymime: bool,
    /// DSN (RFC 3461).
    pub dsn: bool,
    /// STARTTLS (RFC 3207).
    pub starttls: bool,
    /// AUTH mechanisms (RFC 4954).
    pub auth: Vec<String>,
}

impl Capabilities {
    /// Reads the keyword lines (all but the first) of a 250 EHLO reply.
    pub fn from_ehlo(reply: &Reply) -> Self {
        let mut c = Capabilities::default();
        for line in reply.lines.iter().skip(1) {
            let mut words = line.split_ascii_whitespace();
            let Some(kw) = words.next() else { continue };
            match kw.to_ascii_uppercase().as_str() {
                "PIPELINING" => c.pipelining = true,
                "SIZE" => {
                    c.size = Some(words.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0))
                }
                "8BITMIME" => c.eight_bit_mime = true,
                "SMTPUTF8" => c.smtputf8 = true,
                "ENHANCEDSTATUSCODES" => c.enhanced_status_codes = true,
                "CHUNKING" => c.chunking = true,
                "BINARYMIME" => c.binarymime = true,
                "DSN" => c.dsn = true,
                "STARTTLS" => c.starttls = true,
                "AUTH" => c.auth = words.map(str::to_ascii_uppercase).collect(),
                _ => {}
            }
        }
        c
    }

    /// Forgets keywords as Postfix's `smtp_discard_ehlo_keywords` does
    /// (names without case; `silent-discard` and unknown names are ignored).
    pub fn discard(&mut self, keywords: &[String]) {
        for k in keywords {
            match k.to_ascii_uppercase().as_str() {
                "PIPELINING" => self.pipelining = false,
                "SIZE" => self.size = None,
                "8BITMIME" => self.eight_bit_mime = false,
                "SMTPUTF8" => self.smtputf8 = false,
                "ENHANCEDSTATUSCODES" => self.enhanced_status_codes = false,
                "CHUNKING" => self.chunking = false,
                "BINARYMIME" => self.binarymime = false,
                "DSN" => self.dsn = false,
                "STARTTLS" => self.starttls = false,
                "AUTH" => self.auth.clear(),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::parse_mailbox;
    use crate::command::{parse_command, Notify, Orcpt, ParseOptions};
    use proptest::prelude::*;

    #[test]
    fn serialize_mail_rcpt() {
        let from = Path::Mailbox(parse_mailbox("a@b.com", false).unwrap());
        let params = MailParams {
            size: Some(10),
            body: Some(Body::EightBitMime),
            smtputf8: false,
            ret: Some(Ret::Headers),
            envid: Some("id+1 x".into()),
            auth: Some("<>".into()),
        };
        assert_eq!(
            mail(&from, &params),
            b"MAIL FROM:<a@b.com> SIZE=10 BODY=8BITMIME RET=HDRS ENVID=id+2B1+20x AUTH=<>\r\n"
        );
        let to = parse_mailbox("c@d.com", false).unwrap();
        let rp = RcptParams {
            notify: Some(Notify {
                success: true,
                failure: true,
                delay: false,
            }),
            orcpt: Orcpt::new("rfc822", "c=x@d.com"),
        };
        assert_eq!(
            rcpt(&to, &rp),
            b"RCPT TO:<c@d.com> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;c+3Dx@d.com\r\n"
        );
        assert_eq!(
            command_bytes(&Command::Ehlo("a\r\nRSET".into())),
            b"EHLO a  RSET\r\n"
        );
        assert_eq!(
            mail(&Path::Null, &MailParams::default()),
            b"MAIL FROM:<>\r\n"
        );
    }

    #[test]
    fn capabilities() {
        let r = Reply::multiline(
            250,
            None,
            [
                "mx",
                "PIPELINING",
                "SIZE 1000",
                "8bitmime",
                "AUTH PLAIN login",
                "CHUNKING",
                "STARTTLS",
            ]
            .map(String::from)
            .to_vec(),
        );
        let c = Capabilities::from_ehlo(&r);
        assert!(c.pipelining && c.eight_bit_mime && c.chunking && c.starttls && !c.dsn);
        let mut d = c.clone();
        d.discard(&[
            "chunking".into(),
            "Pipelining".into(),
            "silent-discard".into(),
        ]);
        assert!(!d.chunking && !d.pipelining && d.eight_bit_mime && d.starttls);
        assert_eq!(c.size, Some(Some(1000)));
        assert_eq!(c.auth, ["PLAIN", "LOGIN"]);
        let r = Reply::multiline(250, None, vec!["mx".into(), "SIZE".into()]);
        assert_eq!(Capabilities::from_ehlo(&r).size, Some(None));
    }

    fn arb_command() -> impl Strategy<Value = Command> {
        let local = "[a-z0-9]{1,8}(\\.[a-z0-9+_-]{1,5}){0,2}";
        let domain = "[a-z]{1,8}(\\.[a-z]{2,4}){1,2}";
        let mailbox =
            (local, domain).prop_map(|(l, d)| parse_mailbox(&format!("{l}@{d}"), false).unwrap());
        let mail_params = (
            proptest::option::of(0u64..u64::MAX),
            proptest::option::of(prop::sample::select(vec![
                Body::SevenBit,
                Body::EightBitMime,
                Body::BinaryMime,
            ])),
            any::<bool>(),
            proptest::option::of(prop::sample::select(vec![Ret::Full, Ret::Headers])),
            proptest::option::of("[ -~]{1,20}"),
        )
            .prop_map(|(size, body, smtputf8, ret, envid)| MailParams {
                auth: None,
                size,
                body,
                smtputf8,
                ret,
                envid,
            });
        let rcpt_params = (
            proptest::option::of((any::<bool>(), any::<bool>(), any::<bool>())),
            proptest::option::of("[ -~]{1,30}"),
        )
            .prop_map(|(n, o)| RcptParams {
                notify: n.map(|(success, failure, delay)| Notify {
                    success,
                    failure,
                    delay,
                }),
                orcpt: o.and_then(|addr| Orcpt::new("rfc822", &addr)),
            });
        prop_oneof![
            "[a-z.]{1,20}".prop_map(Command::Ehlo),
            (proptest::option::of(mailbox.clone()), mail_params).prop_map(|(m, params)| {
                Command::Mail {
                    from: m.map_or(Path::Null, Path::Mailbox),
                    params,
                }
            }),
            (mailbox, rcpt_params).prop_map(|(to, params)| Command::Rcpt { to, params }),
            (any::<u64>(), any::<bool>()).prop_map(|(size, last)| Command::Bdat { size, last }),
            Just(Command::Data),
            Just(Command::Quit),
            Just(Command::StartTls),
        ]
    }

    proptest! {
        #[test]
        fn serialize_parse_round_trip(cmd in arb_command()) {
            let wire = command_bytes(&cmd);
            prop_assert!(wire.ends_with(b"\r\n"));
            let parsed = parse_command(&wire[..wire.len() - 2], ParseOptions::default());
            prop_assert_eq!(parsed, Ok(cmd));
        }
    }
}
