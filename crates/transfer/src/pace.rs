//! `--rate N/SECONDS`: offers evenly spaced, N per SECONDS, measured from
//! the start so that a slow moment is made up rather than lost.

use std::time::Duration;

/// When each offer may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    n: u32,
    per: Duration,
}

impl Pace {
    /// N messages per `per`; `None` for a rate of nothing.
    pub fn new(n: u32, per: Duration) -> Option<Pace> {
        (n > 0 && !per.is_zero()).then_some(Pace { n, per })
    }

    /// Parses `N/SECONDS` (`100/1`, `5/60`).
    pub fn parse(text: &str) -> Result<Pace, String> {
        let bad = || format!("--rate {text:?}: write N/SECONDS, e.g. 100/1");
        let (n, s) = text.split_once('/').ok_or_else(bad)?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        let s: f64 = s.trim().parse().map_err(|_| bad())?;
        if !(s.is_finite() && s > 0.0) {
            return Err(bad());
        }
        Pace::new(n, Duration::from_secs_f64(s)).ok_or_else(bad)
    }

    /// How long after the start the `k`-th offer (from 0) may go.
    pub fn at(&self, k: u64) -> Duration {
        let nanos = self.per.as_nanos() * u128::from(k) / u128::from(self.n);
        Duration::from_nanos(nanos.min(u128::from(u64::MAX)) as u64)
    }

    /// How long to wait before the `k`-th offer when `elapsed` has gone by
    /// since the start (zero: now, also when behind schedule: the offers
    /// catch up).
    pub fn wait(&self, k: u64, elapsed: Duration) -> Duration {
        self.at(k).saturating_sub(elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_are_spaced_evenly_from_the_start() {
        let p = Pace::parse("100/1").unwrap();
        assert_eq!(p.at(0), Duration::ZERO);
        assert_eq!(p.at(100), Duration::from_secs(1));
        assert_eq!(p.at(3000), Duration::from_secs(30));
        assert_eq!(
            p.wait(50, Duration::from_millis(200)),
            Duration::from_millis(300)
        );
        assert_eq!(p.wait(10, Duration::from_secs(2)), Duration::ZERO);
        let slow = Pace::parse("5/60").unwrap();
        assert_eq!(slow.at(1), Duration::from_secs(12));
    }

    #[test]
    fn bad_rates_are_refused_in_words() {
        for bad in ["", "100", "0/1", "1/0", "a/1", "1/x", "1/-2", "1/inf"] {
            let e = Pace::parse(bad).unwrap_err();
            assert!(e.contains("N/SECONDS"), "{bad}: {e}");
        }
    }
}
