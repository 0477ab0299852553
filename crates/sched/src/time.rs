//! Virtual time: milliseconds since an epoch the caller chooses.
//!
//! The scheduler never reads a clock; every event carries `now`. Arithmetic
//! saturates so that a hostile or zero epoch cannot panic. Limits: 1 ms
//! resolution.

use std::ops::Add;
use std::time::Duration;

/// A point in time, in milliseconds since the caller's epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Time(pub u64);

impl Time {
    /// The epoch.
    pub const ZERO: Time = Time(0);

    /// Builds a time from whole seconds.
    pub fn from_secs(s: u64) -> Time {
        Time(s.saturating_mul(1000))
    }

    /// Milliseconds since the epoch.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// Seconds since the epoch as a float (for reports).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Time(5) + Duration::from_millis(7), Time(12));
        assert_eq!(Time(u64::MAX) + Duration::from_secs(1), Time(u64::MAX));
        assert_eq!(Time(3).since(Time(10)), Duration::ZERO);
        assert_eq!(
            Time::from_secs(2).since(Time(500)),
            Duration::from_millis(1500)
        );
    }
}
