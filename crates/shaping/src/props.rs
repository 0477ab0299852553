//! The properties a policy sets on a key.

use std::time::Duration;

/// `N/seconds`: at most `tokens` transactions per `per`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Tokens per interval (the bucket size).
    pub tokens: u32,
    /// The interval.
    pub per: Duration,
}

/// Bits of [`Props::local`]: which properties a `cluster: false` clause set.
pub mod prop_bit {
    /// `concurrency`.
    pub const CONCURRENCY: u8 = 1;
    /// `rate`.
    pub const RATE: u8 = 2;
    /// `connectinterval`.
    pub const CONNECT_INTERVAL: u8 = 4;
    /// `transactions`.
    pub const TRANSACTIONS: u8 = 8;
    /// `idletimeout`.
    pub const IDLE_TIMEOUT: u8 = 16;
}

/// What a policy says about one key; `None` is "no limit from here".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Props {
    /// Connections open at once (idle ones included).
    pub concurrency: Option<u32>,
    /// Transactions per interval.
    pub rate: Option<Rate>,
    /// Least time between two new connections.
    pub connect_interval: Option<Duration>,
    /// Transactions on one connection before it closes.
    pub transactions: Option<u32>,
    /// How long an idle connection stays open.
    pub idle_timeout: Option<Duration>,
    /// Properties set by a clause with `cluster: false` ([`prop_bit`]).
    pub local: u8,
}

impl Props {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.concurrency.is_none()
            && self.rate.is_none()
            && self.connect_interval.is_none()
            && self.transactions.is_none()
            && self.idle_timeout.is_none()
    }

    /// Lays `over` on top: each property it sets replaces this one's.
    pub fn overlay(&mut self, over: &Props) {
        use prop_bit::*;
        let mut take = |bit: u8, set: bool| {
            if set {
                self.local = (self.local & !bit) | (over.local & bit);
            }
        };
        take(CONCURRENCY, over.concurrency.is_some());
        take(RATE, over.rate.is_some());
        take(CONNECT_INTERVAL, over.connect_interval.is_some());
        take(TRANSACTIONS, over.transactions.is_some());
        take(IDLE_TIMEOUT, over.idle_timeout.is_some());
        self.concurrency = over.concurrency.or(self.concurrency);
        self.rate = over.rate.or(self.rate);
        self.connect_interval = over.connect_interval.or(self.connect_interval);
        self.transactions = over.transactions.or(self.transactions);
        self.idle_timeout = over.idle_timeout.or(self.idle_timeout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_clauses_override_property_by_property() {
        let mut p = Props {
            concurrency: Some(20),
            rate: Some(Rate {
                tokens: 5,
                per: Duration::from_secs(1),
            }),
            ..Props::default()
        };
        p.overlay(&Props {
            concurrency: Some(5),
            local: prop_bit::CONCURRENCY,
            ..Props::default()
        });
        assert_eq!(p.concurrency, Some(5));
        assert_eq!(p.rate.map(|r| r.tokens), Some(5), "rate kept");
        assert_eq!(p.local, prop_bit::CONCURRENCY);
        p.overlay(&Props {
            concurrency: Some(3),
            ..Props::default()
        });
        assert_eq!(p.local, 0, "a clustered clause clears the bit it sets");
    }
}
