//! A master.cf service as master runs it: its sockets, its processes, and
//! the bookkeeping that decides when to start another one.
//!
//! Postfix's master_avail logic: a service needs a new process when a
//! client is waiting on its socket and no process has said it is available,
//! as long as `maxproc` allows and the service is not throttled. A process
//! counts as available from the moment it is spawned until it says
//! otherwise, so one waiting client never starts two processes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use config::ServiceDef;
use ipc::status::ChildState;

use crate::listen::{Bind, ListenSock};

/// What master last heard from a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcState {
    /// Spawned, no report yet (counted as available).
    Starting,
    /// Said it can take clients.
    Available,
    /// Said it cannot.
    Busy,
}

/// One child process.
#[derive(Debug, Clone)]
pub struct Proc {
    /// Its last reported state.
    pub state: ProcState,
    /// Clients served, as last reported.
    pub uses: u32,
    /// Wall-clock start, for status output.
    pub started: SystemTime,
}

/// A running service.
#[derive(Debug)]
pub struct Service {
    /// Its master.cf entry.
    pub def: ServiceDef,
    /// Where it listens.
    pub bind: Bind,
    /// Its sockets.
    pub socks: Vec<ListenSock>,
    /// Its live processes by pid.
    pub procs: BTreeMap<i32, Proc>,
    /// Whether master is watching its sockets for clients (mio registered).
    pub watching: bool,
    /// Failed starts in a row (for the back-off).
    pub bad_starts: u32,
    /// No new processes before this time.
    pub throttled_until: Option<Instant>,
    /// The service's unique number, for mio tokens.
    pub id: usize,
    /// Its next wakeup (one at a time: waking it early replaces it).
    pub wakeup_timer: Option<evloop::TimerId>,
}

impl Service {
    /// Processes that are (or are presumed) able to take a client.
    pub fn available(&self) -> usize {
        self.procs
            .values()
            .filter(|p| p.state != ProcState::Busy)
            .count()
    }

    /// The process limit; 0 = none.
    pub fn limit(&self, default_limit: u32) -> u32 {
        self.def.maxproc.unwrap_or(default_limit)
    }

    /// Whether a waiting client should make master start a process now.
    pub fn may_spawn(&self, now: Instant, default_limit: u32) -> bool {
        let limit = self.limit(default_limit);
        (limit == 0 || (self.procs.len() as u32) < limit)
            && self.throttled_until.is_none_or(|t| t <= now)
    }

    /// Whether master should watch the sockets for waiting clients.
    pub fn wants_watch(&self, now: Instant, default_limit: u32) -> bool {
        self.available() == 0 && self.may_spawn(now, default_limit)
    }

    /// Records a status report from one of its processes.
    pub fn report(&mut self, pid: i32, state: ChildState, uses: u32) -> bool {
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        p.state = match state {
            ChildState::Available => ProcState::Available,
            ChildState::Busy => ProcState::Busy,
        };
        p.uses = uses;
        if uses > 0 {
            self.bad_starts = 0;
        }
        true
    }

    /// Notes a process that died abnormally; returns the throttle it earns,
    /// if it died before it was ready (Postfix's "bad command startup").
    pub fn died_badly(&mut self, proc: &Proc, now: Instant, max: Duration) -> Option<Duration> {
        // A process that reported itself ready got through its start-up
        // (configuration, privileges, recovery); dying later is not a
        // failed start, however few clients it served.
        if proc.uses > 0 || proc.state != ProcState::Starting {
            return None;
        }
        self.bad_starts = self.bad_starts.saturating_add(1);
        let wait = backoff(self.bad_starts, max);
        self.throttled_until = Some(now + wait);
        Some(wait)
    }
}

/// The back-off after `n` failed starts in a row: 1 s, 2 s, 4 s … up to `max`.
pub fn backoff(n: u32, max: Duration) -> Duration {
    let secs = 1u64
        .checked_shl(n.saturating_sub(1).min(30))
        .unwrap_or(u64::MAX);
    Duration::from_secs(secs)
        .min(max)
        .max(Duration::from_millis(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap() {
        let max = Duration::from_secs(60);
        let got: Vec<u64> = (1..=8).map(|n| backoff(n, max).as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(u32::MAX, max), max);
    }
}
