//! Sluice's queue scheduler: a sans-IO, deterministic state machine.
//!
//! The daemon (or the simulator) feeds events with
//! [`Scheduler::handle`]`(now, event)` and [`Scheduler::handle_timeout`]`(now)`
//! and drains actions with [`Scheduler::poll_action`]; [`Scheduler::poll_timeout`]
//! says when to call `handle_timeout` next. Nothing here reads a clock, a
//! socket or an unseeded random source, and no decision depends on hash
//! iteration order, so the same inputs give the same actions.
//!
//! Algorithms (see `docs/scheduler.md`): Wietse's three-class round-robin
//! selection (transport → class → destination → FIFO head), fanf's
//! `allowed_new_worker` and connection scheduling with destdb, Postfix 2.5
//! concurrency feedback with pseudo-cohort dead-destination detection,
//! back-off and expiry, pluggable rate limiters, and nqmgr-style recipient
//! slot lending under `qmgr_message_recipient_limit`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admission;
pub mod classq;
pub mod config;
pub mod connection;
mod connlife;
mod dead;
pub mod destdb;
pub mod destination;
mod dispatch;
pub mod entry;
pub mod event;
pub mod feedback;
mod hostparts;
pub use hostparts::{host_key, host_parts};
pub mod ids;
mod invariants;
mod joblist;
pub mod limiter;
mod memory;
pub mod message;
mod nextjob;
pub mod observed;
pub mod policy;
mod preempt;
mod reclass;
pub mod rng;
mod sched;
mod shape;
mod shapestate;
pub mod slab;
pub mod stats;
pub mod time;
pub mod transport;

pub use config::{ClassKey, ConfigError, FeedbackFn, SchedConfig, TransportConfig};
pub use event::{
    Action, ConnFailure, Event, NewMessage, Notice, QueueId, RcptStatus, RecipientGroup, Record,
    Status, StatusCode,
};
pub use ids::{ConnId, DestId, EntryId, HostId, MsgId, TransportId};
pub use limiter::{Limiter, LocalLimiter};
pub use observed::Behaviour;
pub use policy::{Fifo, Nqmgr, Policy, SlotParams, ThreeClass, ThreeClassFixed, ThreeClassReserve};
pub use sched::{SchedError, Scheduler, Stats};
pub use stats::{DestStats, TransportStats};
pub use time::Time;
