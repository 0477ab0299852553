//! The milter client: the Sendmail mail filter protocol, versions 2 to 6,
//! as Postfix speaks it to opendkim, rspamd, clamav-milter and the like.
//!
//! Sans-IO, as `sasl::dovecot`: [`client::Client`] takes the events of an
//! SMTP session and the bytes the milter sends, and gives back the bytes
//! to write and what the milter decided. [`chain::Chain`] asks several
//! milters one after another, with their deadlines and
//! `milter_default_action`; [`net::Milters`] is the thin shell that moves
//! its bytes over non-blocking sockets in a mio loop, used alike by smtpd
//! (`smtpd_milters`) and cleanup (`non_smtpd_milters`). [`codec`] is the
//! packet format (a four-byte length, a command byte, its data);
//! [`content`] turns the message in wire format (CRLF, dot-stuffed) into
//! the header and body events a milter wants; [`edit`] makes a milter's
//! changes for the next one; [`macros`] are the `milter_*_macros` lists, by [`stage`]
//! of the session.
//!
//! The packet codec is written here rather than taken from `miltr-common`:
//! the framing is a few hundred lines with no dependency, tested below
//! with hostile packets, and it keeps this crate free of any runtime.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod chain;
pub mod client;
pub mod codec;
pub mod content;
pub mod edit;
pub mod macros;
pub mod net;
pub mod stage;

pub use client::{Client, Edit, Event, Stage, Verdict};
