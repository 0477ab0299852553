//! The delivery-agent skeleton: what smtp(8), local(8) and every agent to
//! come (lmtp) do alike, as Postfix's `deliver_request.c` is for its agents.
//!
//! An agent is a set of callbacks ([`Agent`]) around its own delivery
//! logic; [`AgentServer`] serves the `sluice-delivery` protocol to qmgr
//! with them: the handshake, the request frames, the bookkeeping of which
//! connections qmgr has open (a duplicate `Open`, a `Send` or `Close` for
//! a connection that is not open are answered here), and the answers the
//! agent gives, at once or much later. [`Content`] reads a transaction's
//! message data from wherever qmgr says it is (inline, a message file, or
//! a span of the journal), a chunk at a time. [`Logger`] writes Postfix's
//! per-recipient `to=<…>, relay=…, delay=…, delays=…, dsn=…, status=…`
//! line with the delays measured the same way by every agent.
//!
//! Adding an agent means writing its [`Agent`] and a `main` that hands it
//! to `daemon::run` inside an [`AgentServer`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod content;
mod log;
mod server;

pub use content::{forget_segments, Content, ContentError};
pub use log::{Logger, Timing};
pub use server::{Agent, AgentServer, Answers, ConnId, OpenRequest};
