//! One message's signature, made as the message streams through cleanup.
//!
//! [`Signing::start`] gets the final header block (after cleanup added
//! what it adds) and picks and canonicalizes the signed fields then; the
//! body goes through [`Signing::body`] chunk by chunk, straight into the
//! hash; [`Signing::finish`] signs and gives the `DKIM-Signature:` field.
//! The field's length is known from the start ([`Signing::len`]): every
//! part of it but `bh=` and `b=` is settled then, and those two have fixed
//! lengths for a key and are folded by length alone. cleanup reserves
//! that many bytes at the front of the message file and fills them at the
//! end, so the message is written once, in order, and never held whole.

use std::sync::Arc;

use crate::base64;
use crate::canon::{self, BodyHasher, Canon};
use crate::key::{KeyError, PrivateKey};

/// How messages are signed (main.cf).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Header canonicalization.
    pub header_canon: Canon,
    /// Body canonicalization.
    pub body_canon: Canon,
    /// Header fields signed, each instance present.
    pub signed: Vec<String>,
    /// Header fields signed once more than they occur, so that none can
    /// be added without breaking the signature.
    pub oversigned: Vec<String>,
}

/// The fields signed when main.cf does not say: RFC 6376 section 5.4.1's
/// list less the trace and resent fields.
pub const DEFAULT_SIGNED: &str = "From, Reply-To, Subject, Date, To, Cc, Message-ID, In-Reply-To, References, MIME-Version, Content-Type, Content-Transfer-Encoding, Content-ID, Content-Description, List-Id, List-Unsubscribe, List-Unsubscribe-Post";

impl Default for Settings {
    fn default() -> Self {
        Settings {
            header_canon: Canon::Relaxed,
            body_canon: Canon::Relaxed,
            signed: DEFAULT_SIGNED.split(", ").map(str::to_string).collect(),
            oversigned: vec!["From".into()],
        }
    }
}

/// Which key signs, for which domain and selector.
#[derive(Debug, Clone)]
pub struct KeySpec {
    /// `d=`.
    pub domain: String,
    /// `s=`.
    pub selector: String,
    /// The private key.
    pub key: Arc<PrivateKey>,
}

/// Width at which the field's lists are folded.
const WIDTH: usize = 72;

/// A signature in the making.
#[derive(Debug)]
pub struct Signing {
    spec: KeySpec,
    settings_canon: (Canon, Canon),
    time: u64,
    names: Vec<String>,
    /// The canonicalized signed fields, each with CRLF.
    header_data: Vec<u8>,
    body: BodyHasher,
    len: usize,
}

impl Signing {
    /// Starts a signature over `header_block` (the fields, each ending in
    /// CRLF, without the empty line), made at `time` (seconds since 1970).
    pub fn start(spec: KeySpec, settings: &Settings, header_block: &[u8], time: u64) -> Self {
        let fields = canon::fields(header_block);
        let mut names = Vec::new();
        let mut header_data = Vec::new();
        let mut used: Vec<(String, usize)> = Vec::new();
        // From: must be signed (RFC 6376 5.4), whatever the list says.
        let from = (!settings
            .signed
            .iter()
            .any(|n| n.eq_ignore_ascii_case("From")))
        .then(|| "From".to_string());
        for name in from.iter().chain(&settings.signed) {
            let lower = name.to_ascii_lowercase();
            if used.iter().any(|(n, _)| *n == lower) {
                continue;
            }
            let present: Vec<&canon::Field<'_>> = fields
                .iter()
                .filter(|f| f.name.eq_ignore_ascii_case(name.as_bytes()))
                .collect();
            let over = settings
                .oversigned
                .iter()
                .any(|o| o.eq_ignore_ascii_case(name));
            // Instances are taken from the bottom up (RFC 6376 5.4.2).
            for f in present.iter().rev() {
                canon::header(settings.header_canon, f.raw, &mut header_data, true);
                names.push(name.clone());
            }
            if over {
                names.push(name.clone());
            }
            used.push((lower, present.len()));
        }
        let mut s = Signing {
            spec,
            settings_canon: (settings.header_canon, settings.body_canon),
            time,
            names,
            header_data,
            body: BodyHasher::new(settings.body_canon),
            len: 0,
        };
        let bh = "=".repeat(base64::encoded_len(32));
        let b = "=".repeat(base64::encoded_len(s.spec.key.signature_len()));
        s.len = s.field(&bh, &b).len();
        s
    }

    /// Bytes of the `DKIM-Signature:` field [`Signing::finish`] gives, CRLF included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The key, domain and selector signing.
    pub fn key(&self) -> &KeySpec {
        &self.spec
    }

    /// Whether the field is empty (never: it is for the trait's sake).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Feeds body bytes (wire form, from just after the empty line).
    pub fn body(&mut self, bytes: &[u8]) {
        self.body.update(bytes);
    }

    /// The field, CRLF included, exactly [`Signing::len`] bytes long.
    pub fn finish(mut self) -> Result<Vec<u8>, KeyError> {
        let bh = base64::encode(self.body.finish().as_ref());
        let unsigned = self.field(&bh, "");
        let mut data = self.header_data.clone();
        canon::header(self.settings_canon.0, &unsigned, &mut data, false);
        let sig = self.spec.key.sign(&data)?;
        let field = self.field(&bh, &base64::encode(&sig));
        if field.len() != self.len {
            panic!(
                "dkim::sign: field of {} bytes where {} were reserved",
                field.len(),
                self.len
            );
        }
        Ok(field)
    }

    /// The field with `bh` and `b` as given; without its CRLF when `b` is
    /// empty (the form that is hashed).
    fn field(&self, bh: &str, b: &str) -> Vec<u8> {
        let mut f = format!(
            "DKIM-Signature: v=1; a={}; c={}/{}; d={}; s={};\r\n\tt={}; h=",
            self.spec.key.algorithm().name(),
            self.settings_canon.0.name(),
            self.settings_canon.1.name(),
            self.spec.domain,
            self.spec.selector,
            self.time
        );
        let mut col = 8 + self.time.to_string().len() + 4;
        for (i, n) in self.names.iter().enumerate() {
            if i > 0 {
                f.push(':');
                col += 1;
                if col + n.len() > WIDTH {
                    f.push_str("\r\n\t");
                    col = 8;
                }
            }
            f.push_str(n);
            col += n.len();
        }
        f.push_str(";\r\n\tbh=");
        f.push_str(bh);
        f.push_str(";\r\n\tb=");
        if b.is_empty() {
            return f.into_bytes();
        }
        for (i, piece) in b.as_bytes().chunks(WIDTH - 8).enumerate() {
            if i > 0 {
                f.push_str("\r\n\t ");
            }
            f.push_str(std::str::from_utf8(piece).unwrap_or_default());
        }
        f.push_str("\r\n");
        f.into_bytes()
    }
}

/// The domain of the first address in the header block's From: field, in
/// lower case; `None` without a From: or an address in it.
pub fn from_address(header_block: &[u8]) -> Option<String> {
    let f = canon::fields(header_block)
        .into_iter()
        .find(|f| f.name.eq_ignore_ascii_case(b"From"))?;
    let mut value = Vec::new();
    canon::header(Canon::Relaxed, f.raw, &mut value, false);
    let value = String::from_utf8_lossy(&value[5..]).into_owned();
    let value = strip_comments(&value);
    let addr = match (value.find('<'), value.find('>')) {
        (Some(a), Some(b)) if a < b => value[a + 1..b].trim().to_string(),
        _ => value.split(',').next().unwrap_or("").trim().to_string(),
    };
    (addr.contains('@') && !addr.contains(' ')).then(|| addr.to_lowercase())
}

fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut depth = 0usize;
    let mut quoted = false;
    for c in s.chars() {
        match c {
            // Display names cannot hold the address: dropped with their brackets.
            '"' if depth == 0 => quoted = !quoted,
            _ if quoted => {}
            '(' if !quoted => depth += 1,
            ')' if !quoted && depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Arc<PrivateKey> {
        let pem = crate::key::generate_ed25519().unwrap();
        Arc::new(PrivateKey::from_pem(pem.as_bytes()).unwrap())
    }

    #[test]
    fn field_is_as_long_as_reserved_and_oversigns_from() {
        let spec = KeySpec {
            domain: "example.com".into(),
            selector: "s1".into(),
            key: key(),
        };
        let block = b"From: A <a@example.com>\r\nTo: b@example.org\r\nSubject: hi\r\nTo: c@example.org\r\nX-Other: x\r\n";
        let mut s = Signing::start(spec, &Settings::default(), block, 1_700_000_000);
        let reserved = s.len();
        s.body(b"Hello\r\n");
        let field = s.finish().unwrap();
        assert_eq!(field.len(), reserved);
        let text = String::from_utf8(field).unwrap();
        assert!(text.contains("h=From:From:Subject:To:To;"), "{text}");
        assert!(text.starts_with(
            "DKIM-Signature: v=1; a=ed25519-sha256; c=relaxed/relaxed; d=example.com; s=s1;"
        ));
        assert!(text.ends_with("\r\n"));
        assert!(text.lines().all(|l| l.len() <= 78), "{text}");
    }

    #[test]
    fn from_is_always_signed() {
        let spec = KeySpec {
            domain: "example.com".into(),
            selector: "s1".into(),
            key: key(),
        };
        let settings = Settings {
            signed: vec!["Subject".into()],
            oversigned: vec![],
            ..Settings::default()
        };
        let s = Signing::start(spec, &settings, b"From: a@example.com\r\nSubject: x\r\n", 1);
        let text = String::from_utf8(s.finish().unwrap()).unwrap();
        assert!(text.contains("h=From:Subject;"), "{text}");
    }

    #[test]
    fn from_addresses() {
        for (block, want) in [
            (&b"From: A <A@Example.COM>\r\n"[..], Some("a@example.com")),
            (b"from: a@example.com (Someone)\r\n", Some("a@example.com")),
            (
                b"From: \"x <y@z>\" <real@d.example>\r\n",
                Some("real@d.example"),
            ),
            (
                b"From:\r\n a@b.example,\r\n c@d.example\r\n",
                Some("a@b.example"),
            ),
            (b"To: a@b.example\r\n", None),
            (b"From: undisclosed\r\n", None),
        ] {
            assert_eq!(from_address(block).as_deref(), want, "{block:?}");
        }
    }
}
