//! Dividing a shared rate between instances.
//!
//! Halon's equal division: `tokenbucket` gives each of n instances
//! tokens / (interval × n), a smooth flow; `fixedwindow` gives each
//! max(1, tokens / n) per interval, bursts at window starts. Beyond Halon,
//! division by backlog is max-min fair over what each instance showed it
//! needs: an instance that was refused for want of its part is hungry
//! (unbounded demand), the others need what they used; the rate is
//! water-filled over those demands and what nobody needs is spread evenly,
//! so an instance that starts sending has room before its next report.
//! A token-bucket part that is not a whole number of tokens per interval
//! is kept exact by scaling the interval (tokens ⌊x⌋ per interval ×
//! ⌊x⌋/x), as Halon scales the denominator.

use crate::proto::WireRate;

/// How rates are divided (`cluster_rate_division`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Division {
    /// Halon's: the same part for every instance.
    Equal,
    /// Max-min fair by each instance's demand.
    Backlog,
}

/// What an instance needs of a rate, in tokens per the rate's interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Demand {
    /// It was refused for want of tokens: it would take all it can get.
    Hungry,
    /// It used this many.
    Used(f64),
}

/// `x` tokens per `limit`'s interval, as a rate the shaper enforces.
pub fn part(limit: WireRate, x: f64) -> WireRate {
    if limit.fixed_window {
        // Windows stay aligned with the cluster's: whole tokens only.
        return WireRate {
            tokens: x.floor() as u32,
            ..limit
        };
    }
    if x <= 0.0 {
        return WireRate { tokens: 0, ..limit };
    }
    let whole = x.floor().max(1.0);
    WireRate {
        tokens: whole as u32,
        per_ms: ((limit.per_ms as f64) * whole / x).round().max(1.0) as u64,
        ..limit
    }
}

/// Halon's equal part of `limit` for one of `n` instances.
pub fn equal(limit: WireRate, n: u32) -> WireRate {
    let n = n.max(1);
    if limit.fixed_window {
        return WireRate {
            tokens: (limit.tokens / n).max(1),
            ..limit
        };
    }
    part(limit, f64::from(limit.tokens) / f64::from(n))
}

/// Max-min fair parts of `limit` for instances needing `demands`.
pub fn by_backlog(limit: WireRate, demands: &[Demand]) -> Vec<WireRate> {
    let n = demands.len();
    if n == 0 {
        return Vec::new();
    }
    let cap = f64::from(limit.tokens);
    let need = |d: &Demand| match d {
        Demand::Hungry => f64::INFINITY,
        Demand::Used(u) => u.max(0.0),
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        need(&demands[a])
            .total_cmp(&need(&demands[b]))
            .then(a.cmp(&b))
    });
    let mut give = vec![0.0f64; n];
    let mut left = cap;
    for (i, &who) in order.iter().enumerate() {
        let fair = left / (n - i) as f64;
        let g = need(&demands[who]).min(fair);
        give[who] = g;
        left -= g;
    }
    if left > 1e-9 {
        for g in &mut give {
            *g += left / n as f64;
        }
    }
    if limit.fixed_window {
        // Whole tokens summing to the limit: floors, then the remainder
        // to the largest fractions (the lower index on a tie).
        let mut whole: Vec<u32> = give.iter().map(|g| g.floor() as u32).collect();
        let mut rest = limit.tokens.saturating_sub(whole.iter().sum());
        let mut frac: Vec<usize> = (0..n).collect();
        frac.sort_by(|&a, &b| {
            (give[b] - give[b].floor())
                .total_cmp(&(give[a] - give[a].floor()))
                .then(a.cmp(&b))
        });
        for &who in frac.iter().cycle().take(n * 2) {
            if rest == 0 {
                break;
            }
            whole[who] += 1;
            rest -= 1;
        }
        return whole
            .into_iter()
            .map(|t| WireRate { tokens: t, ..limit })
            .collect();
    }
    give.into_iter().map(|g| part(limit, g)).collect()
}

/// Tokens per millisecond of a rate (what the parts must add up to).
pub fn per_ms(r: WireRate) -> f64 {
    f64::from(r.tokens) / r.per_ms.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(tokens: u32, per_ms: u64) -> WireRate {
        WireRate {
            tokens,
            per_ms,
            fixed_window: false,
        }
    }

    #[test]
    fn halon_equal_division() {
        // tokenbucket: 10/1 s over 3 → 10/3 per second, exact.
        let r = equal(bucket(10, 1000), 3);
        assert!((per_ms(r) * 3.0 - 0.01).abs() < 1e-6, "{r:?}");
        assert_eq!(r.tokens, 3);
        // 600/60 s over 5: 120 per 60 s.
        assert_eq!(equal(bucket(600, 60_000), 5), bucket(120, 60_000));
        // Fewer tokens than instances: under one per interval, still exact.
        let r = equal(bucket(2, 1000), 5);
        assert_eq!((r.tokens, r.per_ms), (1, 2500));
        // fixedwindow: max(1, tokens / n) per interval.
        let fw = WireRate {
            tokens: 10,
            per_ms: 1000,
            fixed_window: true,
        };
        assert_eq!(equal(fw, 3).tokens, 3);
        assert_eq!(equal(fw, 20).tokens, 1);
        assert_eq!(equal(fw, 20).per_ms, 1000);
    }

    #[test]
    fn backlog_is_max_min_fair() {
        let l = bucket(600, 60_000);
        // One instance of five holds all the mail: it gets the whole rate.
        let d = [
            Demand::Hungry,
            Demand::Used(0.0),
            Demand::Used(0.0),
            Demand::Used(0.0),
            Demand::Used(0.0),
        ];
        let p = by_backlog(l, &d);
        assert!((per_ms(p[0]) - per_ms(l)).abs() < 1e-9, "{p:?}");
        assert!(p[1..].iter().all(|r| r.tokens == 0));
        // A small user keeps what it uses; the hungry share the rest.
        let p = by_backlog(l, &[Demand::Used(60.0), Demand::Hungry, Demand::Hungry]);
        assert!((per_ms(p[0]) * 60_000.0 - 60.0).abs() < 1e-6);
        assert!((per_ms(p[1]) * 60_000.0 - 270.0).abs() < 1e-6);
        // Nobody hungry: the unused rest is spread, nothing is lost.
        let p = by_backlog(l, &[Demand::Used(100.0), Demand::Used(200.0)]);
        let sum: f64 = p.iter().map(|r| per_ms(*r)).sum();
        assert!((sum - per_ms(l)).abs() < 1e-9);
        assert!(per_ms(p[1]) > per_ms(p[0]));
        // fixedwindow: whole tokens adding up to the limit exactly.
        let fw = WireRate {
            tokens: 10,
            per_ms: 1000,
            fixed_window: true,
        };
        let p = by_backlog(fw, &[Demand::Hungry, Demand::Hungry, Demand::Hungry]);
        assert_eq!(p.iter().map(|r| r.tokens).sum::<u32>(), 10);
        assert_eq!(p.iter().map(|r| r.tokens).collect::<Vec<_>>(), [4, 3, 3]);
    }
}
