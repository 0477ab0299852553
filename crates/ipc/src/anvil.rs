//! The anvil protocol: per-client connection counts and rates.
//!
//! Postfix's anvil(8): smtpd reports each connection and disconnection, and
//! learns the client's simultaneous connection count and its connection
//! rate over `anvil_rate_time_unit`, to enforce
//! `smtpd_client_connection_count_limit` and
//! `smtpd_client_connection_rate_limit`; and each failed AUTH, with the
//! client's failures over the same unit, to enforce
//! `smtpd_client_auth_rate_limit`; and each MAIL and RCPT, with the
//! client's commands of that kind over the unit, to enforce
//! `smtpd_client_message_rate_limit` and `smtpd_client_recipient_rate_limit`.

use serde::{Deserialize, Serialize};

/// Marker type for the anvil protocol.
#[derive(Debug)]
pub enum Anvil {}

impl crate::Protocol for Anvil {
    const NAME: &'static str = "sluice-anvil";
    const VERSION: u32 = 3;
    type Request = Request;
    type Response = Response;
}

/// What a server process tells or asks anvil.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// A client connected to a service.
    Connect {
        /// The service name, e.g. `smtp`.
        service: String,
        /// The client address.
        client: String,
    },
    /// A client disconnected.
    Disconnect {
        /// The service name.
        service: String,
        /// The client address.
        client: String,
    },
    /// The client's figures, without changing them.
    Lookup {
        /// The service name.
        service: String,
        /// The client address.
        client: String,
    },
    /// A client's AUTH failed; answered with [`Response::AuthFailures`].
    AuthFailed {
        /// The service name.
        service: String,
        /// The client address.
        client: String,
    },
    /// The client's failed AUTH commands in the current unit, without
    /// changing them; answered with [`Response::AuthFailures`].
    AuthLookup {
        /// The service name.
        service: String,
        /// The client address.
        client: String,
    },
    /// A client sent MAIL; answered with [`Response::Rate`] (Postfix's
    /// ANVIL_REQ_MAIL).
    Mail {
        /// The service name.
        service: String,
        /// The client address.
        client: String,
    },
    /// A client sent RCPT (or VRFY); answered with [`Response::Rate`]
    /// (Postfix's ANVIL_REQ_RCPT).
    Rcpt {
        /// The service name.
        service: String,
        /// The client address.
        client: String,
    },
}

/// anvil's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The client's figures after the request.
    Counts {
        /// Simultaneous connections now.
        count: u32,
        /// Connections within the current rate time unit.
        rate: u32,
    },
    /// Failed AUTH commands within the current rate time unit.
    AuthFailures {
        /// The failures, the one just reported included.
        rate: u32,
    },
    /// MAIL or RCPT commands within the current rate time unit.
    Rate {
        /// The commands, the one just reported included.
        rate: u32,
    },
}
