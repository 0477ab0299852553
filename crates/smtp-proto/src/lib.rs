//! Sans-IO SMTP for Sluice: addresses, commands, replies, the server and
//! client sessions, and the DATA/BDAT receivers.
//!
//! Nothing in this crate touches a socket or a clock, reads the environment or
//! logs. The daemon shell feeds received bytes in, takes bytes to send and
//! actions out, and answers policy questions, possibly much later
//! (quinn-proto style). Peer input never panics; it becomes a reply.
//!
//! Modules:
//! - [`address`]: RFC 5321 paths (quoted local parts, address literals,
//!   source routes, SMTPUTF8) with typed errors that know their reply;
//! - [`command`]: the command parser, ESMTP parameters, xtext, and the command
//!   property table [`command::COMMANDS`];
//! - [`dsn`]: the one mapping of the DSN and BODY parameters to and from
//!   the envelope's types (`mail`);
//! - [`reply`]: [`Reply`], RFC 3463 [`StatusCode`]s, the bounded client-side
//!   [`ReplyParser`];
//! - [`receiver`]: the DATA and BDAT content receivers (end of data only at
//!   CRLF.CRLF, bare LF/CR policy, size limit, wire-format output);
//! - [`server`]: the server session state machine used by smtpd;
//! - [`proxy`]: the PROXY protocol header (v1 and v2) a load balancer sends first;
//! - [`client`] and [`client_session`]: command serialization, EHLO
//!   capabilities and the client session state machine for the smtp agent.
//!
//! Driving a server session (a real shell writes the output when
//! [`server::Session::should_flush`] says so or when its input is drained, and
//! answers the questions asynchronously):
//!
//! ```
//! use std::sync::Arc;
//! use smtp_proto::server::{Action, ServerConfig, Session};
//! use smtp_proto::{StatusCode, Reply};
//!
//! let mut s = Session::new(Arc::new(ServerConfig::default()), false);
//! let mut wire = s.take_output(); // "220 localhost ESMTP Sluice"
//! let mut input = b"EHLO c\r\nMAIL FROM:<a@b.example>\r\nRCPT TO:<c@d.example>\r\n\
//!                   DATA\r\nhi\r\n.\r\nQUIT\r\n".to_vec();
//! let mut message = Vec::new();
//! loop {
//!     let used = s.feed(&input);
//!     input.drain(..used);
//!     let mut acted = false;
//!     while let Some(action) = s.poll_action() {
//!         acted = true;
//!         match action {
//!             // Ask the policy service / router; answer when it replies.
//!             Action::CheckSender { .. } | Action::CheckRecipient { .. } => {
//!                 s.decide(Reply::ok()).unwrap()
//!             }
//!             Action::CheckData { .. } => s.decide(Reply::new(354, None, "go")).unwrap(),
//!             // Only with `ask_unknown`: milters hear unknown commands.
//!             Action::CheckUnknown { .. } => s
//!                 .decide(Reply::enhanced(502, StatusCode::known(5, 5, 2), "not recognized"))
//!                 .unwrap(),
//!             // Stream to cleanup.
//!             Action::Data(chunk) => message.extend_from_slice(&chunk),
//!             // Answer 250 only once cleanup says the message is durable.
//!             Action::MessageEnd(_summary) => s
//!                 .decide(Reply::enhanced(250, StatusCode::OK, "Ok: queued as 4Xyz"))
//!                 .unwrap(),
//!             // Flush, drop buffered plaintext, handshake, then:
//!             Action::StartTls => s.tls_established(),
//!             // Relay to the SASL server (AUTH is off by default).
//!             Action::Authenticate { .. } | Action::AuthResponse(_) => s
//!                 .decide(Reply::enhanced(535, StatusCode::known(5, 7, 8), "failed"))
//!                 .unwrap(),
//!             // Only with `ask_vrfy`: the recipient lookup may know better.
//!             Action::CheckVrfy { arg } => s.decide(Session::vrfy_ambiguous(&arg)).unwrap(),
//!             // Past the soft error limit: arm a timer, serve others, then:
//!             Action::Sleep(_) => s.wake(),
//!             Action::AuthCancelled
//!             | Action::TransactionAborted(_)
//!             | Action::Event(_)
//!             | Action::Close => {}
//!         }
//!     }
//!     wire.extend(s.take_output());
//!     if used == 0 && !acted {
//!         break;
//!     }
//! }
//! assert_eq!(message, b"hi\r\n");
//! assert!(s.is_closed());
//! assert!(String::from_utf8(wire).unwrap().ends_with("250 2.0.0 Ok: queued as 4Xyz\r\n221 2.0.0 Bye\r\n"));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod address;
pub mod client;
pub mod client_session;
pub mod command;
pub mod dsn;
pub mod fold;
pub mod mime;
pub mod mime8;
pub mod proxy;
pub mod receiver;
pub mod reply;
pub mod server;

pub use address::{AddressError, Domain, Mailbox, Path};
pub use client_session::{ClientAction, ClientConfig, ClientSession, Envelope};
pub use command::{Command, CommandError, MailParams, RcptParams, Verb};
pub use receiver::{BareNewline, BdatReceiver, DataReceiver, DataSummary, ReceiverLimits};
pub use reply::{Reply, ReplyError, ReplyParser, StatusCode};
pub use server::{Action, ServerConfig, Session};
