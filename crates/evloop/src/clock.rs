//! The clock: the only place in Sluice that reads the system time.
//!
//! Cores take `now` as an argument; shells get it from a `Clock`, so a test
//! or a simulation can substitute its own.

use std::time::{Instant, SystemTime};

/// A source of monotonic and wall-clock time.
pub trait Clock {
    /// Monotonic time, for timeouts and intervals.
    fn now(&self) -> Instant;
    /// Wall-clock time, for log lines and queue ids.
    fn wall(&self) -> SystemTime;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}
