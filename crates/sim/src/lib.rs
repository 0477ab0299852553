//! Deterministic simulation of the queue manager (`crates/qmgr`, the code
//! qmgr runs) and its scheduler against modelled servers.
//!
//! `engine` is the discrete-event loop and the server models; `scenarios`
//! holds the six experiments of issue 5 (full and `--quick` sizes) and
//! `shaping` those of traffic shaping, `verify` the address verification
//! flood, that the
//! `sim` binary prints and the tests assert on; `bench` measures decisions
//! per second and memory per queued recipient; `replay` runs a live
//! queue's snapshot (`sluice sim`). Deterministic: a seed fixes
//! every run. Panics: never.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bench;
pub mod deadlive;
pub mod engine;
pub mod harness;
pub mod policybench;
pub mod replay;
#[cfg(test)]
mod replay_tests;
pub mod scenarios;
pub mod shaping;
pub mod verify;
