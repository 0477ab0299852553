//! The milter client: the Sendmail mail filter protocol, version 6, as
//! Postfix speaks it to opendkim, rspamd, clamav-milter and the like.
//!
//! Sans-IO, as `sasl::dovecot`: [`client::Client`] takes the events of an
//! SMTP session and the bytes the milter sends, and gives back the bytes
//! to write and what the milter decided. [`codec`] is the packet format
//! (a four-byte length, a command byte, its data); [`content`] turns the
//! message as smtpd receives it (wire format: CRLF, dot-stuffed) into the
//! header and body events a milter wants.
//!
//! The packet codec is written here rather than taken from `miltr-common`:
//! the framing is a few hundred lines with no dependency, tested below
//! with hostile packets, and it keeps this crate free of any runtime.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod codec;
pub mod content;

pub use client::{Client, Edit, Event, Stage, Verdict};
