//! Rate limits keyed by fields: token bucket, fixed window, minimum connect interval.
//!
//! A rule names the key fields it counts by (destination, host, source
//! address, tenant), what it counts (connections or transactions), optional
//! conditions on field values, and an algorithm. The scheduler asks the
//! [`Limiter`] before it opens a connection or starts a transaction; a denial
//! carries the time at which to ask again, and the destination sleeps until
//! then. The trait is the seam for the cluster coordinator: a clustered
//! limiter answers from the share of tokens that clusterd granted this
//! instance (tokens / (interval × n) for a bucket, max(1, tokens / n) for a
//! window) and tells the scheduler with `Event::LimitsChanged` when its
//! shares change. Panics: never. Limits: per-key state is kept until
//! `forget_idle` drops keys that are back to their initial state.

use crate::time::Time;
use std::collections::BTreeMap;
use std::time::Duration;

/// A field a limit can be keyed on or conditioned on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    /// The destination (transport nexthop).
    Destination,
    /// The remote host (MX name or address).
    Host,
    /// The local source address (`<transport>_bind_address`).
    SourceAddress,
    /// The message's tenant.
    Tenant,
}

/// What a rule counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// New connections.
    Connect,
    /// Transactions (messages) started.
    Transaction,
}

/// The counting algorithm of a rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Algorithm {
    /// `tokens` per `interval`, refilled continuously, burst up to `tokens`.
    TokenBucket {
        /// Bucket size and tokens added per interval.
        tokens: u32,
        /// Refill interval.
        interval: Duration,
    },
    /// At most `tokens` per aligned window of length `interval`.
    FixedWindow {
        /// Tokens per window.
        tokens: u32,
        /// Window length.
        interval: Duration,
    },
    /// At least `Duration` between two events.
    MinInterval(Duration),
}

/// One limit rule.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitRule {
    /// Fields whose values form the key (empty = one global counter).
    pub fields: Vec<Field>,
    /// Conditions: the rule applies only where each field has this value.
    pub when: Vec<(Field, String)>,
    /// What is counted.
    pub scope: Scope,
    /// How it is counted.
    pub algorithm: Algorithm,
}

/// The field values of one request.
#[derive(Clone, Copy, Debug, Default)]
pub struct LimitKey<'a> {
    /// Destination nexthop.
    pub destination: &'a str,
    /// Remote host, when known.
    pub host: Option<&'a str>,
    /// Source address, when configured.
    pub source: Option<&'a str>,
    /// Tenant, when the message has one.
    pub tenant: Option<&'a str>,
}

impl LimitKey<'_> {
    fn field(&self, f: Field) -> &str {
        match f {
            Field::Destination => self.destination,
            Field::Host => self.host.unwrap_or(""),
            Field::SourceAddress => self.source.unwrap_or(""),
            Field::Tenant => self.tenant.unwrap_or(""),
        }
    }
}

/// A limiter's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead; the token was taken.
    Allow,
    /// Denied; ask again at this time.
    RetryAt(Time),
}

/// The scheduler's view of rate limiting; implement it to plug in a coordinator.
pub trait Limiter {
    /// Takes one token for `scope` and `key` at `now`, or says when to retry.
    fn acquire(&mut self, now: Time, scope: Scope, key: &LimitKey<'_>) -> Verdict;
    /// Drops per-key state that carries no information any more.
    fn forget_idle(&mut self, now: Time);
}

#[derive(Clone, Debug)]
enum State {
    Bucket { tokens: f64, at: Time },
    Window { start: Time, used: u32 },
    Last(Time),
}

/// The local limiter: exact per-key state for every rule.
#[derive(Clone, Debug, Default)]
pub struct LocalLimiter {
    rules: Vec<LimitRule>,
    state: BTreeMap<(usize, Vec<String>), State>,
}

impl LocalLimiter {
    /// A limiter enforcing `rules`.
    pub fn new(rules: Vec<LimitRule>) -> Self {
        LocalLimiter {
            rules,
            state: BTreeMap::new(),
        }
    }

    /// Number of keys with state (for tests and memory accounting).
    pub fn keys(&self) -> usize {
        self.state.len()
    }

    fn check(rule: &LimitRule, st: &mut State, now: Time, take: bool) -> Verdict {
        match (rule.algorithm, st) {
            (Algorithm::TokenBucket { tokens, interval }, State::Bucket { tokens: have, at }) => {
                let per_ms = f64::from(tokens) / (interval.as_millis().max(1) as f64);
                let elapsed = now.0.saturating_sub(at.0) as f64;
                *have = (*have + elapsed * per_ms).min(f64::from(tokens));
                *at = now;
                if *have >= 1.0 {
                    if take {
                        *have -= 1.0;
                    }
                    Verdict::Allow
                } else {
                    let wait = ((1.0 - *have) / per_ms).ceil() as u64;
                    Verdict::RetryAt(Time(now.0 + wait.max(1)))
                }
            }
            (Algorithm::FixedWindow { tokens, interval }, State::Window { start, used }) => {
                let len = interval.as_millis().max(1) as u64;
                let cur = Time(now.0 - now.0 % len);
                if *start != cur {
                    *start = cur;
                    *used = 0;
                }
                if *used < tokens {
                    if take {
                        *used += 1;
                    }
                    Verdict::Allow
                } else {
                    Verdict::RetryAt(Time(cur.0 + len))
                }
            }
            (Algorithm::MinInterval(d), State::Last(last)) => {
                let next = *last + d;
                if now >= next || *last == Time(u64::MAX) {
                    if take {
                        *last = now;
                    }
                    Verdict::Allow
                } else {
                    Verdict::RetryAt(next)
                }
            }
            _ => unreachable!("sched::limiter: state does not match rule"),
        }
    }

    fn fresh(rule: &LimitRule, now: Time) -> State {
        match rule.algorithm {
            Algorithm::TokenBucket { tokens, .. } => State::Bucket {
                tokens: f64::from(tokens),
                at: now,
            },
            Algorithm::FixedWindow { .. } => State::Window {
                start: Time(u64::MAX),
                used: 0,
            },
            Algorithm::MinInterval(_) => State::Last(Time(u64::MAX)),
        }
    }
}

impl Limiter for LocalLimiter {
    fn acquire(&mut self, now: Time, scope: Scope, key: &LimitKey<'_>) -> Verdict {
        // Check every applicable rule first and take tokens only when all
        // allow, so a denial by one rule does not consume another's token.
        let mut applicable = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            if r.scope == scope && r.when.iter().all(|(f, v)| key.field(*f) == v) {
                let k: Vec<String> = r.fields.iter().map(|f| key.field(*f).to_string()).collect();
                applicable.push((i, k));
            }
        }
        let mut latest: Option<Time> = None;
        for (i, k) in &applicable {
            let rule = &self.rules[*i];
            let st = self
                .state
                .entry((*i, k.clone()))
                .or_insert_with(|| Self::fresh(rule, now));
            if let Verdict::RetryAt(t) = Self::check(rule, st, now, false) {
                latest = Some(latest.map_or(t, |l| l.max(t)));
            }
        }
        if let Some(t) = latest {
            return Verdict::RetryAt(t);
        }
        for (i, k) in applicable {
            let rule = &self.rules[i];
            if let Some(st) = self.state.get_mut(&(i, k)) {
                Self::check(rule, st, now, true);
            }
        }
        Verdict::Allow
    }

    fn forget_idle(&mut self, now: Time) {
        let rules = &self.rules;
        self.state
            .retain(|(i, _), st| match (rules[*i].algorithm, st) {
                (
                    Algorithm::TokenBucket { tokens, interval },
                    State::Bucket { tokens: have, at },
                ) => {
                    let per_ms = f64::from(tokens) / (interval.as_millis().max(1) as f64);
                    *have + now.0.saturating_sub(at.0) as f64 * per_ms < f64::from(tokens)
                }
                (Algorithm::FixedWindow { interval, .. }, State::Window { start, .. }) => {
                    *start != Time(u64::MAX)
                        && now.0 < start.0.saturating_add(interval.as_millis() as u64)
                }
                (Algorithm::MinInterval(d), State::Last(last)) => now < *last + d,
                _ => false,
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(d: &str) -> LimitKey<'_> {
        LimitKey {
            destination: d,
            ..LimitKey::default()
        }
    }

    #[test]
    fn token_bucket_bursts_then_refills() {
        let rule = LimitRule {
            fields: vec![Field::Destination],
            when: vec![],
            scope: Scope::Transaction,
            algorithm: Algorithm::TokenBucket {
                tokens: 2,
                interval: Duration::from_secs(1),
            },
        };
        let mut l = LocalLimiter::new(vec![rule]);
        let t = Time(1000);
        assert_eq!(l.acquire(t, Scope::Transaction, &key("a")), Verdict::Allow);
        assert_eq!(l.acquire(t, Scope::Transaction, &key("a")), Verdict::Allow);
        assert_eq!(
            l.acquire(t, Scope::Transaction, &key("a")),
            Verdict::RetryAt(Time(1500))
        );
        // Keys are independent; scopes too.
        assert_eq!(l.acquire(t, Scope::Transaction, &key("b")), Verdict::Allow);
        assert_eq!(l.acquire(t, Scope::Connect, &key("a")), Verdict::Allow);
        assert_eq!(
            l.acquire(Time(1500), Scope::Transaction, &key("a")),
            Verdict::Allow
        );
    }

    #[test]
    fn fixed_window_resets_on_boundary() {
        let rule = LimitRule {
            fields: vec![],
            when: vec![],
            scope: Scope::Connect,
            algorithm: Algorithm::FixedWindow {
                tokens: 1,
                interval: Duration::from_secs(10),
            },
        };
        let mut l = LocalLimiter::new(vec![rule]);
        assert_eq!(
            l.acquire(Time(12_000), Scope::Connect, &key("x")),
            Verdict::Allow
        );
        assert_eq!(
            l.acquire(Time(15_000), Scope::Connect, &key("y")),
            Verdict::RetryAt(Time(20_000))
        );
        assert_eq!(
            l.acquire(Time(20_000), Scope::Connect, &key("y")),
            Verdict::Allow
        );
    }

    #[test]
    fn min_interval_and_conditions() {
        let rule = LimitRule {
            fields: vec![Field::Host],
            when: vec![(Field::Destination, "slow.example".into())],
            scope: Scope::Connect,
            algorithm: Algorithm::MinInterval(Duration::from_secs(5)),
        };
        let mut l = LocalLimiter::new(vec![rule]);
        let k = LimitKey {
            destination: "slow.example",
            host: Some("mx1"),
            ..LimitKey::default()
        };
        assert_eq!(l.acquire(Time(0), Scope::Connect, &k), Verdict::Allow);
        assert_eq!(
            l.acquire(Time(1000), Scope::Connect, &k),
            Verdict::RetryAt(Time(5000))
        );
        // Other destinations are not matched by the condition.
        for _ in 0..3 {
            assert_eq!(
                l.acquire(Time(1000), Scope::Connect, &key("fast.example")),
                Verdict::Allow
            );
        }
        l.forget_idle(Time(10_000));
        assert_eq!(l.keys(), 0, "expired interval forgotten");
    }

    #[test]
    fn denial_by_one_rule_takes_no_token_from_another() {
        let a = LimitRule {
            fields: vec![],
            when: vec![],
            scope: Scope::Connect,
            algorithm: Algorithm::FixedWindow {
                tokens: 1,
                interval: Duration::from_secs(60),
            },
        };
        let b = LimitRule {
            algorithm: Algorithm::MinInterval(Duration::from_secs(100)),
            ..a.clone()
        };
        let mut l = LocalLimiter::new(vec![a, b]);
        assert_eq!(
            l.acquire(Time(0), Scope::Connect, &key("d")),
            Verdict::Allow
        );
        assert!(matches!(
            l.acquire(Time(60_000), Scope::Connect, &key("d")),
            Verdict::RetryAt(Time(100_000))
        ));
        // The window rule still has its token for the minute starting at 60s.
        assert_eq!(
            l.acquire(Time(100_000), Scope::Connect, &key("d")),
            Verdict::Allow
        );
    }
}
