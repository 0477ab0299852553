//! Connections (workers): the entries queued on them and their lifecycle.
//!
//! fanf: "there can be a queue of multiple jobs per worker". A connection
//! runs one transaction at a time; the rest of its jobs wait in `backlog`.
//! It is active while it has jobs, idle when open without jobs, and closing
//! once the scheduler has decided to close it. Panics: never.

use crate::ids::{DestId, EntryId, HostId, TransportId};
use crate::time::Time;
use std::collections::VecDeque;

/// Lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// `Action::Open` sent, waiting for `ConnectionOpened`.
    Opening,
    /// Open.
    Open,
}

/// A connection.
#[derive(Clone, Debug)]
pub struct Connection {
    /// Transport.
    pub transport: TransportId,
    /// Destination.
    pub dest: DestId,
    /// Host.
    pub host: HostId,
    /// State.
    pub state: ConnState,
    /// Entries waiting for their transaction.
    pub backlog: VecDeque<EntryId>,
    /// The running transaction.
    pub in_flight: Option<EntryId>,
    /// Transactions finished.
    pub transactions: u32,
    /// Opening time.
    pub opened_at: Time,
    /// When its running transaction started (for the destination's
    /// observed transaction times).
    pub txn_since: Time,
    /// Idle since (no jobs), if idle.
    pub idle_since: Option<Time>,
    /// No new jobs: reuse count or age limit reached.
    pub retiring: bool,
    /// The shaping binding it holds slots of, if a policy is loaded.
    pub bind: Option<shaping::BindId>,
    /// The shaping side of the mail it carries (0: none).
    pub side: u32,
    /// Transactions before it closes (0 = unlimited): the transport's
    /// reuse count limit or a policy's `transactions`, whichever is smaller.
    pub reuse_limit: u32,
    /// Idle time before it closes: the transport's cache time limit or a
    /// policy's `idletimeout`, whichever is smaller.
    pub idle_limit: std::time::Duration,
}

impl Connection {
    /// A new connection, opening.
    pub fn new(transport: TransportId, dest: DestId, host: HostId, now: Time) -> Self {
        Connection {
            transport,
            dest,
            host,
            state: ConnState::Opening,
            backlog: VecDeque::new(),
            in_flight: None,
            transactions: 0,
            opened_at: now,
            txn_since: now,
            idle_since: None,
            retiring: false,
            bind: None,
            side: 0,
            reuse_limit: 0,
            idle_limit: std::time::Duration::ZERO,
        }
    }

    /// Jobs queued or running.
    pub fn jobs(&self) -> u32 {
        self.backlog.len() as u32 + u32::from(self.in_flight.is_some())
    }

    /// True when it may take another job under the backlog and reuse limits.
    pub fn may_take(&self, backlog_limit: u32, reuse_limit: u32) -> bool {
        if self.retiring {
            return false;
        }
        let jobs = self.jobs();
        let reuse_ok = reuse_limit == 0 || self.transactions + jobs < reuse_limit;
        reuse_ok && jobs < backlog_limit.max(1)
    }

    /// Like `may_take` without the backlog threshold (fanf's "free ride").
    pub fn may_ride(&self, reuse_limit: u32) -> bool {
        !self.retiring && (reuse_limit == 0 || self.transactions + self.jobs() < reuse_limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlog_and_reuse_limits() {
        let mut c = Connection::new(TransportId(0), DestId(0), HostId(0), Time(0));
        assert!(c.may_take(2, 0));
        c.backlog.push_back(EntryId(1));
        c.in_flight = Some(EntryId(0));
        assert_eq!(c.jobs(), 2);
        assert!(!c.may_take(2, 0), "backlog threshold");
        assert!(c.may_ride(0), "free ride ignores the threshold");
        assert!(!c.may_ride(2), "reuse count counts queued jobs");
        c.retiring = true;
        assert!(!c.may_ride(0));
    }
}
