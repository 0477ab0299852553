//! clusterd's model: several Sluice instances sharing one set of limits.
//!
//! Halon's delivery orchestrator, in Sluice's sans-IO style. Each
//! instance's qmgr runs a [`client::Client`] (the instance's
//! [`shaping::Share`]); clusterd runs one [`coordinator::Coordinator`].
//! They talk in [`proto`] messages over a TLS stream that the programs
//! own. Neither core reads a clock, opens a socket or draws an unseeded
//! random number: time is passed in as milliseconds on the caller's
//! monotonic clock, so the in-process simulated cluster (the `sim` tests)
//! runs many instances in virtual time. The instance's end of that stream,
//! for a mio loop, is [`link::Conn`]: it moves bytes and tells the client
//! what happened; the client decides. [`wired::Wired`] keeps it on the
//! loop's clock, with the file of the last instance count.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod coordinator;
pub mod link;
pub mod proto;
pub mod rates;
pub mod wired;

#[cfg(test)]
mod forget_tests;
#[cfg(test)]
mod sim;

/// Milliseconds on the caller's monotonic clock.
pub type Ms = u64;
