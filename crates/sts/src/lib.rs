//! MTA-STS and SMTP TLS reporting: what a sender needs of RFC 8461 and 8460.
//!
//! - [`policy`]: the policy file and the `_mta-sts` and `_smtp._tls` TXT
//!   records, parsed strictly; MX pattern matching.
//! - [`fetch`]: the blocking HTTPS GET of a policy (a thread's work,
//!   never an event loop's), with the RFC's limits.
//! - [`cache`]: the policies on disk under the queue directory, shared by
//!   router(8), which fetches them, and smtp(8), which applies them.
//! - [`report`]: the per-session log that smtp(8) and router(8) append
//!   to, and the daily JSON report and its message.
//!
//! Nothing here reads the clock: times are passed in, in seconds since
//! the epoch. Nothing panics on what a server or a file says.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cache;
pub mod fetch;
pub mod policy;
pub mod report;

pub use cache::Cached;
pub use policy::{Mode, Policy};
pub use report::{Event, Outcome};
