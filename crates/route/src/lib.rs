//! Address resolution: where does a recipient go?
//!
//! The sans-IO core of router(8). [`Router::resolve`] takes a recipient as
//! it arrived and answers (transport, next hop, rewritten address, class,
//! flags) for each address it becomes, following Postfix's rules and
//! parameters: `recipient_canonical_maps`/`canonical_maps`
//! (`sender_canonical_maps` for the sender, in [`Router::rewrite_sender`]),
//! `virtual_alias_maps` (recursive, loop-checked, limited),
//! `mydestination` → `local_transport`, `virtual_alias_domains`,
//! `relay_domains` → `relay_transport`, `relayhost`, `default_transport`,
//! `transport_maps`, `recipient_delimiter` and `local_recipient_maps`.
//!
//! Only [`Settings::load`] reads files (the tables, once); resolution is a
//! pure function of the settings and the address, so it is tested with
//! tables and answers microseconds after a request arrives. Malformed
//! addresses are typed errors ([`AddressError`]); nothing here panics on
//! any input (a property test feeds it arbitrary bytes).
//!
//! Limits: no `sender_dependent_*` maps, no `virtual_mailbox_*` domains,
//! no `relay_recipient_maps`; `resolve_numeric_domain` is not needed
//! because address literals are classed by `mydestination` entries such as
//! `[192.0.2.1]`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod address;
mod resolve;
mod settings;
mod transport;

pub use address::{Addr, AddressError, MAX_ADDRESS};
pub use resolve::{Class, ResolveError, Route, Router};
pub use settings::{DomainList, Settings, SettingsError};
pub use transport::{check_transport, error_status, split_transport};

#[cfg(test)]
mod tests;
