//! What a destination's deliveries showed recently, for `sluice sim`: the
//! time its transactions and its connection set-ups took, its reply mix
//! (per recipient 2xx, 4xx, 5xx, and connections that failed), and the
//! concurrency at which it delivered or refused.
//!
//! Bounded in memory: a destination that never had a transaction costs one
//! pointer; one that had gets [`SAMPLES`] transaction times, [`GREETINGS`]
//! set-up times and a few counters (about 400 bytes). The counters forget:
//! once the replies counted pass [`MEMORY`] every count is halved, so the
//! mix is that of roughly the last few thousand results, not of the
//! destination's whole life. Only figures the shell asks for are computed,
//! a page of destinations at a time (`sluice sim`'s snapshot, in `stats`);
//! nothing here decides anything. Panics: never.

use crate::time::Time;

/// Transaction times kept per destination (a ring).
pub const SAMPLES: usize = 64;
/// Connection set-up times kept per destination (a ring).
pub const GREETINGS: usize = 16;
/// Results counted before every count is halved.
pub const MEMORY: u64 = 4096;

/// The recent behaviour of one destination (allocated at its first
/// transaction or connection).
#[derive(Clone, Debug)]
pub struct Observed {
    /// Transaction times in ms and the recipients each carried, a ring.
    txn: [(u32, u16); SAMPLES],
    /// Transactions recorded (the ring's next slot is `txns % SAMPLES`).
    txns: u64,
    /// Connect-plus-greeting times in ms, a ring.
    greet: [u32; GREETINGS],
    /// Set-ups recorded.
    greets: u64,
    /// Recipients answered 2xx, 4xx, 5xx; connections that failed.
    counts: [u64; 4],
    /// Most connections open while one delivered.
    busy_ok: u32,
    /// Connections open when the last handshake failure came (a server's
    /// session limit shows here), and when.
    refused_at: Option<(u32, Time)>,
    /// Last time anything was recorded.
    last: Time,
}

/// The figures of [`Observed`] as the shell reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Behaviour {
    /// Recent transaction times in ms with their recipient counts, oldest first.
    pub txn_ms: Vec<(u32, u16)>,
    /// Recent connect-plus-greeting times in ms, oldest first.
    pub greeting_ms: Vec<u32>,
    /// Recipients answered 2xx, recently.
    pub replies_2xx: u64,
    /// Recipients answered 4xx, recently.
    pub replies_4xx: u64,
    /// Recipients answered 5xx, recently.
    pub replies_5xx: u64,
    /// Connections that failed (unreachable or handshake), recently.
    pub conn_failures: u64,
    /// Most connections open while one of them delivered.
    pub busy_ok: u32,
    /// Connections open at the last handshake failure: the concurrency at
    /// which the server refused, when it did.
    pub refused_at: Option<u32>,
    /// When something was last recorded.
    pub last: Time,
}

impl Observed {
    fn new(now: Time) -> Self {
        Observed {
            txn: [(0, 0); SAMPLES],
            txns: 0,
            greet: [0; GREETINGS],
            greets: 0,
            counts: [0; 4],
            busy_ok: 0,
            refused_at: None,
            last: now,
        }
    }

    /// The record of `slot`, allocated on first use.
    pub fn of(slot: &mut Option<Box<Observed>>, now: Time) -> &mut Observed {
        let o = slot.get_or_insert_with(|| Box::new(Observed::new(now)));
        o.last = now;
        o
    }

    fn count(&mut self, k: usize, n: u64) {
        self.counts[k] += n;
        if self.counts.iter().sum::<u64>() > MEMORY {
            for c in &mut self.counts {
                *c /= 2;
            }
        }
    }

    /// A transaction of `rcpts` recipients took `ms`; its replies by kind
    /// (2xx, 4xx, 5xx) with `busy` connections open.
    pub fn transaction(&mut self, ms: u64, rcpts: usize, replies: [u64; 3], busy: u32) {
        let slot = (self.txns % SAMPLES as u64) as usize;
        self.txn[slot] = (
            u32::try_from(ms).unwrap_or(u32::MAX),
            u16::try_from(rcpts).unwrap_or(u16::MAX),
        );
        self.txns += 1;
        for (k, n) in replies.into_iter().enumerate() {
            self.count(k, n);
        }
        if replies[0] > 0 {
            self.busy_ok = self.busy_ok.max(busy);
        }
    }

    /// A connection was set up in `ms`.
    pub fn greeting(&mut self, ms: u64) {
        let slot = (self.greets % GREETINGS as u64) as usize;
        self.greet[slot] = u32::try_from(ms).unwrap_or(u32::MAX);
        self.greets += 1;
    }

    /// A connection failed; `refused` when the server was reached (a
    /// handshake failure) with `busy` connections open, counting it.
    pub fn failed(&mut self, now: Time, refused: bool, busy: u32) {
        self.count(3, 1);
        if refused {
            self.refused_at = Some((busy, now));
        }
    }

    /// The figures, oldest samples first.
    pub fn behaviour(&self) -> Behaviour {
        fn ring<T: Copy>(v: &[T], n: u64) -> Vec<T> {
            let len = v.len() as u64;
            if n <= len {
                return v[..n as usize].to_vec();
            }
            let at = (n % len) as usize;
            v[at..].iter().chain(&v[..at]).copied().collect()
        }
        Behaviour {
            txn_ms: ring(&self.txn, self.txns),
            greeting_ms: ring(&self.greet, self.greets),
            replies_2xx: self.counts[0],
            replies_4xx: self.counts[1],
            replies_5xx: self.counts[2],
            conn_failures: self.counts[3],
            busy_ok: self.busy_ok,
            refused_at: self.refused_at.map(|(b, _)| b),
            last: self.last,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_keep_the_latest_samples_in_order_and_counts_forget() {
        let mut slot = None;
        let o = Observed::of(&mut slot, Time(5));
        for i in 0..(SAMPLES as u64 + 3) {
            o.transaction(i, 1, [1, 0, 0], 2);
        }
        let b = o.behaviour();
        assert_eq!(b.txn_ms.len(), SAMPLES);
        assert_eq!(b.txn_ms[0], (3, 1), "the 3 oldest were overwritten");
        assert_eq!(b.txn_ms[SAMPLES - 1], (SAMPLES as u32 + 2, 1));
        assert_eq!(b.replies_2xx, SAMPLES as u64 + 3);
        assert_eq!(b.busy_ok, 2);
        o.greeting(7);
        o.failed(Time(9), true, 4);
        o.failed(Time(9), false, 1);
        let b = o.behaviour();
        assert_eq!(b.greeting_ms, [7]);
        assert_eq!(b.conn_failures, 2);
        assert_eq!(
            b.refused_at,
            Some(4),
            "only a refusal records the concurrency"
        );
        for _ in 0..MEMORY {
            o.transaction(1, 1, [0, 1, 0], 1);
        }
        let b = o.behaviour();
        assert!(b.replies_2xx < 64, "old successes fade: {b:?}");
        assert!(b.replies_4xx > 2000 && b.replies_4xx <= MEMORY);
    }
}
