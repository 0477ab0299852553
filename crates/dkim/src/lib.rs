//! DKIM signing (RFC 6376; Ed25519 as RFC 8463), sans-IO, for cleanup.
//!
//! A message is signed as it streams ([`Signing`]): the header block is
//! canonicalized once it is complete, the body is hashed chunk by chunk
//! without being copied, and the `DKIM-Signature:` field's length is known
//! before the body starts, so that cleanup can reserve its place at the
//! front of the message file. Keys come from opendkim-style signing and
//! key tables ([`Keys`]). Signing runs on `ring`, already linked through
//! rustls; verification is not done here.
//!
//! Limits: SHA-256 only (rsa-sha1 is obsolete), no `l=`, `i=`, `z=` or
//! `x=` tags; a key under 2048 bits RSA is refused.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod base64;
pub mod canon;
pub mod key;
pub mod keys;
pub mod sign;

pub use canon::Canon;
pub use key::{generate_ed25519, Algorithm, KeyError, PrivateKey};
pub use keys::Keys;
pub use sign::{from_address, KeySpec, Settings, Signing, DEFAULT_SIGNED};
