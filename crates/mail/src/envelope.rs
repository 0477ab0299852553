//! The static envelope: everything about a message except its data that
//! never changes after it is received.
//!
//! Written once, after the data, into the message file (or inline with the
//! journal's `Arrived` record). Addresses are kept as the strings the SMTP
//! parser accepted (without angle brackets; the null sender is ""). Limits:
//! none beyond memory; the writer of the spool bounds the encoded size.

use crate::dsn::{Notify, Ret};
use serde::{Deserialize, Serialize};

/// A time as seconds and microseconds since the Unix epoch.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Timestamp {
    /// Whole seconds since the epoch.
    pub secs: u64,
    /// Microseconds within the second (0..1_000_000).
    pub micros: u32,
}

impl Timestamp {
    /// The time from microseconds since the epoch.
    pub fn from_micros(us: u64) -> Self {
        Self {
            secs: us / 1_000_000,
            micros: (us % 1_000_000) as u32,
        }
    }

    /// Microseconds since the epoch (saturating).
    pub fn as_micros(&self) -> u64 {
        self.secs
            .saturating_mul(1_000_000)
            .saturating_add(self.micros as u64)
    }
}

/// MAIL BODY=: the message's content transfer class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum BodyType {
    /// 7BIT (or no BODY= given).
    #[default]
    SevenBit,
    /// 8BITMIME (RFC 6152).
    EightBitMime,
    /// BINARYMIME (RFC 3030), only with BDAT.
    BinaryMime,
}

/// One original recipient with its DSN options.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Recipient {
    /// The address as given in RCPT TO, without angle brackets.
    pub address: String,
    /// NOTIFY= option.
    pub notify: Notify,
    /// ORCPT= as `addr-type;xtext-address`, if given.
    pub orcpt: Option<String>,
}

impl Recipient {
    /// A recipient with no DSN options.
    pub fn new(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            notify: Notify::Default,
            orcpt: None,
        }
    }

    /// The original recipient ORCPT names (its address, without the
    /// `type;`), for logging as Postfix's `orig_to=`.
    pub fn original(&self) -> Option<&str> {
        let o = self.orcpt.as_deref()?;
        Some(o.split_once(';').map_or(o, |(_, a)| a))
    }
}

/// The ORCPT to record for a recipient that address mapping rewrote: the
/// address it had, typed `rfc822`, or `utf-8` (RFC 6533) when not ASCII.
pub fn orcpt_of(address: &str) -> String {
    if address.is_ascii() {
        format!("rfc822;{address}")
    } else {
        format!("utf-8;{address}")
    }
}

/// The static envelope of one message.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Envelope {
    /// MAIL FROM address; "" for the null sender.
    pub sender: String,
    /// Original recipients in RCPT order; their index is their identity in the journal.
    pub recipients: Vec<Recipient>,
    /// RET= option.
    pub ret: Option<Ret>,
    /// ENVID= option (xtext-decoded).
    pub envid: Option<String>,
    /// Client IP address as text.
    pub client_addr: Option<String>,
    /// Client host name (verified reverse name) or "unknown".
    pub client_name: Option<String>,
    /// HELO/EHLO argument.
    pub helo: Option<String>,
    /// TLS protocol and cipher, e.g. "TLSv1.3 TLS_AES_256_GCM_SHA384".
    pub tls: Option<String>,
    /// Authenticated SASL user name.
    pub auth: Option<String>,
    /// When the message was accepted.
    pub arrival: Timestamp,
    /// Size in bytes of the message data as stored (wire form).
    pub size: u64,
    /// BODY= option.
    pub body_type: BodyType,
    /// SMTPUTF8 was given.
    pub smtputf8: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postcard_round_trip() {
        let env = Envelope {
            sender: "a@example.org".into(),
            recipients: vec![
                Recipient::new("b@example.net"),
                Recipient {
                    address: "ü@例え.jp".into(),
                    notify: Notify::On {
                        success: true,
                        failure: true,
                        delay: false,
                    },
                    orcpt: Some("rfc822;x@y".into()),
                },
            ],
            ret: Some(Ret::Hdrs),
            envid: Some("QQ314159".into()),
            arrival: Timestamp::from_micros(1_700_000_000_654_321),
            size: 2048,
            body_type: BodyType::EightBitMime,
            smtputf8: true,
            ..Envelope::default()
        };
        let bytes = postcard::to_allocvec(&env).unwrap();
        let back: Envelope = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, env);
        assert_eq!(back.arrival.as_micros(), 1_700_000_000_654_321);
        assert_eq!(back.recipients[1].original(), Some("x@y"));
        assert_eq!(back.recipients[0].original(), None);
        assert_eq!(orcpt_of("team@v.test"), "rfc822;team@v.test");
        assert_eq!(
            crate::orig_to("a@r.test", Some("rfc822;team@v.test")),
            Some("team@v.test")
        );
        assert_eq!(crate::orig_to("a@r.test", Some("rfc822;A@R.test")), None);
        assert_eq!(orcpt_of("ü@例え.jp"), "utf-8;ü@例え.jp");
    }

    #[test]
    fn garbage_does_not_panic() {
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ n).collect();
            let _ = postcard::from_bytes::<Envelope>(&junk);
        }
    }
}
