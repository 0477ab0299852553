//! The static envelope: everything about a message except its data that
//! never changes after it is received.
//!
//! Written once, after the data, into the message file (or inline with the
//! journal's `Arrived` record). Addresses are kept as the strings the SMTP
//! parser accepted (without angle brackets; the null sender is ""). Limits:
//! none beyond memory; the writer of the spool bounds the encoded size.
//!
//! The tenant and job ids (traffic shaping's `tenantid` and `jobid`) came
//! after the first on-disk layout. postcard is not self-describing, so the
//! layout without them stays readable as [`EnvelopeV1`] and writable as
//! [`AsV1`]: the journal and the message file choose by a variant or a
//! version, never by guessing. [`shaping_id`] is the one rule for what
//! a tenant or job id may be.

use crate::dsn::{Notify, Ret};
use crate::orcpt::Orcpt;
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
    /// ORCPT= in its stored form, `type;address` with the address decoded
    /// from xtext (see [`Orcpt`]), if given; read it with [`Recipient::orcpt`].
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

    /// The ORCPT, checked; `None` when there is none or the stored one is
    /// not valid (see [`Orcpt::parse`]).
    pub fn orcpt(&self) -> Option<Orcpt> {
        Orcpt::parse(self.orcpt.as_deref()?)
    }

    /// The original recipient ORCPT names (its address, without the
    /// `type;`), for logging as Postfix's `orig_to=`.
    pub fn original(&self) -> Option<&str> {
        crate::orcpt::stored_addr(self.orcpt.as_deref()?)
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
    /// The tenant the message is shaped under (a header, an access action
    /// or the SASL user name; see cleanup(8)).
    pub tenant: Option<String>,
    /// The job (campaign, batch) the message belongs to.
    pub job: Option<String>,
}

/// Longest tenant or job id, in bytes.
pub const MAX_SHAPING_ID: usize = 64;

/// A tenant or job id as given (a header value, an access action's
/// argument), trimmed; `None` when it is empty, longer than
/// [`MAX_SHAPING_ID`] bytes, or holds a control character.
pub fn shaping_id(value: &str) -> Option<&str> {
    let v = value.trim();
    (!v.is_empty() && v.len() <= MAX_SHAPING_ID && !v.chars().any(char::is_control)).then_some(v)
}

/// The envelope as written before tenants and jobs: the same fields in the
/// same order, without the last two. Decoded from old journals and message
/// files, then turned into an [`Envelope`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct EnvelopeV1 {
    sender: String,
    recipients: Vec<Recipient>,
    ret: Option<Ret>,
    envid: Option<String>,
    client_addr: Option<String>,
    client_name: Option<String>,
    helo: Option<String>,
    tls: Option<String>,
    auth: Option<String>,
    arrival: Timestamp,
    size: u64,
    body_type: BodyType,
    smtputf8: bool,
}

impl From<EnvelopeV1> for Envelope {
    fn from(v: EnvelopeV1) -> Self {
        Envelope {
            sender: v.sender,
            recipients: v.recipients,
            ret: v.ret,
            envid: v.envid,
            client_addr: v.client_addr,
            client_name: v.client_name,
            helo: v.helo,
            tls: v.tls,
            auth: v.auth,
            arrival: v.arrival,
            size: v.size,
            body_type: v.body_type,
            smtputf8: v.smtputf8,
            tenant: None,
            job: None,
        }
    }
}

impl Envelope {
    /// Whether the envelope has nothing the first layout lacks, so that it
    /// can be written as [`AsV1`] and read back the same.
    pub fn fits_v1(&self) -> bool {
        self.tenant.is_none() && self.job.is_none()
    }
}

/// Writes an envelope in the layout of [`EnvelopeV1`], without a copy; the
/// caller checks [`Envelope::fits_v1`] first (the tenant and job are not
/// written).
#[derive(Debug, Clone, Copy)]
pub struct AsV1<'a>(pub &'a Envelope);

impl Serialize for AsV1<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let e = self.0;
        let mut st = s.serialize_struct("Envelope", 13)?;
        st.serialize_field("sender", &e.sender)?;
        st.serialize_field("recipients", &e.recipients)?;
        st.serialize_field("ret", &e.ret)?;
        st.serialize_field("envid", &e.envid)?;
        st.serialize_field("client_addr", &e.client_addr)?;
        st.serialize_field("client_name", &e.client_name)?;
        st.serialize_field("helo", &e.helo)?;
        st.serialize_field("tls", &e.tls)?;
        st.serialize_field("auth", &e.auth)?;
        st.serialize_field("arrival", &e.arrival)?;
        st.serialize_field("size", &e.size)?;
        st.serialize_field("body_type", &e.body_type)?;
        st.serialize_field("smtputf8", &e.smtputf8)?;
        st.end()
    }
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
        assert_eq!(
            crate::orig_to("a@r.test", Some("rfc822;team@v.test")),
            Some("team@v.test")
        );
        assert_eq!(crate::orig_to("a@r.test", Some("rfc822;A@R.test")), None);
    }

    /// The envelope exactly as it was before tenants and jobs, as the
    /// derive wrote it: what old journals and message files hold.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct OldEnvelope {
        sender: String,
        recipients: Vec<Recipient>,
        ret: Option<Ret>,
        envid: Option<String>,
        client_addr: Option<String>,
        client_name: Option<String>,
        helo: Option<String>,
        tls: Option<String>,
        auth: Option<String>,
        arrival: Timestamp,
        size: u64,
        body_type: BodyType,
        smtputf8: bool,
    }

    fn old() -> OldEnvelope {
        OldEnvelope {
            sender: "a@example.org".into(),
            recipients: vec![Recipient::new("b@example.net")],
            ret: Some(Ret::Full),
            envid: Some("E1".into()),
            client_addr: Some("192.0.2.1".into()),
            client_name: Some("unknown".into()),
            helo: Some("client.test".into()),
            tls: None,
            auth: Some("alice".into()),
            arrival: Timestamp::from_micros(1_700_000_000_000_001),
            size: 99,
            body_type: BodyType::EightBitMime,
            smtputf8: false,
        }
    }

    #[test]
    fn the_first_layout_reads_and_writes_as_before() {
        let o = old();
        let bytes = postcard::to_allocvec(&o).unwrap();
        let env: Envelope = postcard::from_bytes::<EnvelopeV1>(&bytes).unwrap().into();
        assert_eq!(env.sender, "a@example.org");
        assert_eq!(env.auth.as_deref(), Some("alice"));
        assert_eq!(env.arrival.as_micros(), 1_700_000_000_000_001);
        assert_eq!((env.tenant.as_deref(), env.job.as_deref()), (None, None));
        assert!(env.fits_v1());
        // Written back in the old layout, byte for byte.
        assert_eq!(postcard::to_allocvec(&AsV1(&env)).unwrap(), bytes);
        // The new layout is the old one and the two ids after it.
        let mut with = env.clone();
        with.tenant = Some("acme".into());
        with.job = Some("spring-sale".into());
        assert!(!with.fits_v1());
        let new = postcard::to_allocvec(&with).unwrap();
        assert!(new.starts_with(&bytes));
        assert_eq!(postcard::from_bytes::<Envelope>(&new).unwrap(), with);
        // Old bytes are too short for the new layout: never misread.
        assert!(postcard::from_bytes::<Envelope>(&bytes).is_err());
    }

    #[test]
    fn shaping_ids_are_trimmed_and_bounded() {
        assert_eq!(shaping_id("  acme \t"), Some("acme"));
        assert_eq!(shaping_id("Acme Corp"), Some("Acme Corp"));
        assert_eq!(shaping_id(""), None);
        assert_eq!(shaping_id("   "), None);
        assert_eq!(shaping_id(&"x".repeat(64)), Some("x".repeat(64).as_str()));
        assert_eq!(shaping_id(&"x".repeat(65)), None);
        assert_eq!(shaping_id("a\u{0}b"), None);
        assert_eq!(shaping_id("a\x1bb"), None);
        assert_eq!(shaping_id("a\r\nX-Evil: 1"), None);
        assert_eq!(shaping_id("ünï"), Some("ünï"));
    }

    #[test]
    fn garbage_does_not_panic() {
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ n).collect();
            let _ = postcard::from_bytes::<Envelope>(&junk);
        }
    }
}
