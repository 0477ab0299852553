//! The anvil protocol: per-client connection counts and rates.
//!
//! Postfix's anvil(8): smtpd reports each connection and disconnection, and
//! learns the client's simultaneous connection count and its connection
//! rate over `anvil_rate_time_unit`, to enforce
//! `smtpd_client_connection_count_limit` and
//! `smtpd_client_connection_rate_limit`.

use serde::{Deserialize, Serialize};

/// Marker type for the anvil protocol.
#[derive(Debug)]
pub enum Anvil {}

impl crate::Protocol for Anvil {
    const NAME: &'static str = "sluice-anvil";
    const VERSION: u32 = 1;
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
}
