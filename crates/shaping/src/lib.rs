//! Traffic shaping by fields, after Halon's policy model.
//!
//! A policy file (`policy_file` in main.cf, `sluice.policy(5)`) lists
//! policies, each counting by a tuple of [`Field`]s (source address,
//! grouping, tenant, …) with [`Props`] (concurrency, rate, connect
//! interval, transactions per connection, idle timeout) given by a default
//! and by conditions on field values. [`model`] holds the compiled file,
//! [`eval`] answers "which keys and limits apply to these field values",
//! and [`state`] keeps each key's live counters in virtual time for the
//! scheduler. [`file`] reads the policy file (the only I/O here, in
//! [`Policy::load`]); nothing here reads a clock.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod eval;
pub mod field;
pub mod file;
pub mod holdfile;
pub mod index;
pub mod model;
pub mod props;
pub mod share;
pub mod state;
pub mod syntax;

pub use error::{At, ErrorKind, PolicyError};
pub use field::{Binding, Field, FieldSet, KeyName};
pub use index::PolicyIndex;
pub use model::{
    Condition, Grouping, KeyPolicy, Pattern, Policy, RateAlgorithm, ReplyAction, ReplyRule, Source,
    Suspension, Threshold,
};
pub use props::{Props, Rate};
pub use share::Share;
pub use state::{BindId, Block, Hold, KeyIdx, KeyView, Ms, Origin, Shaper, Triggered};

#[cfg(test)]
mod file_tests;
