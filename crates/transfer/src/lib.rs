//! Moving mail between Sluice instances (`sluice queue move`, transferd(8)).
//!
//! [`proto`] is the wire protocol: length-prefixed postcard frames over
//! mutual TLS, a hello each way, then offers (a message with its whole
//! queue state and its bytes) answered by acceptances or refusals, many
//! in flight at once. [`ledger`] is the receiver's durable memory of the
//! transfer ids it has taken, which makes a retried transfer idempotent.
//! [`pace`] spaces the mover's offers (`--rate N/SECONDS`) and [`targets`]
//! rotates them over the receivers and their addresses. Nothing here
//! reads a clock or opens a socket; the ledger alone touches a file.
#![forbid(unsafe_code)]

pub mod ledger;
pub mod pace;
pub mod proto;
pub mod targets;
