//! The cluster's say over this instance's share of a key: the seam for
//! clusterd (issue 15).
//!
//! Halon's model: concurrency of policies whose fields include `localip`
//! and `grouping` is granted cluster-wide as slots, and every rate is
//! divided between the instances; a clause with `cluster: false` keeps its
//! properties per instance. The [`crate::Shaper`] asks its [`Share`], when
//! it has one, for this instance's part of each shared limit, tells it
//! when mail waits for a slot and when connections open and close; the
//! share answers from what the coordinator granted (or, cut off from it,
//! from the limit divided by the last known number of instances) and,
//! when its grants change, the caller wakes the scheduler
//! (`Event::LimitsChanged`).

use crate::field::Field;
use crate::field::KeyName;
use crate::props::{prop_bit, Props, Rate};

/// This instance's share of the cluster's limits.
pub trait Share: std::fmt::Debug + Send {
    /// Connections this instance may hold now on `key`, whose limit for the
    /// whole cluster is `cluster`.
    fn concurrency(&self, key: &KeyName, cluster: u32) -> u32;
    /// The rate this instance may use on `key`, whose rate for the whole
    /// cluster is `cluster`.
    fn rate(&self, key: &KeyName, cluster: Rate) -> Rate;
    /// Mail waits for a connection on `key`, which holds `held` here and
    /// `cluster` in the whole cluster: ask the coordinator for a slot.
    fn want(&mut self, key: &KeyName, held: u32, cluster: u32);
    /// A connection on `key` opened (its slot is in use).
    fn opened(&mut self, key: &KeyName);
    /// A connection on `key` closed (its slot can go back).
    fn closed(&mut self, key: &KeyName);
    /// A transaction took a token of `key`'s shared rate, whose rate for
    /// the whole cluster is `cluster`: the use the coordinator divides
    /// rates by (`cluster_rate_division = backlog`).
    fn sent(&mut self, key: &KeyName, cluster: Rate) {
        let _ = (key, cluster);
    }
    /// Mail waits because this instance's part of `key`'s rate is spent
    /// (asked from [`crate::Shaper::can_send`], which takes `&self`: a
    /// share that records it keeps its state behind a lock).
    fn starved(&self, key: &KeyName, cluster: Rate) {
        let _ = (key, cluster);
    }
}

/// Whether `key`'s concurrency under `props` is granted cluster-wide: its
/// policy counts by `localip` and `grouping` and the clause that set it
/// did not say `cluster: false`.
pub fn shared_concurrency(key: &KeyName, props: &Props) -> bool {
    props.concurrency.is_some()
        && props.local & prop_bit::CONCURRENCY == 0
        && key.fields.contains(&Field::LocalIp)
        && key.fields.contains(&Field::Grouping)
}

/// Whether `props`' rate is divided between the instances (rates always
/// are, unless `cluster: false` said otherwise).
pub fn shared_rate(props: &Props) -> bool {
    props.rate.is_some() && props.local & prop_bit::RATE == 0
}
