//! anvil's counters: simultaneous connections and connection rate per
//! (service, client), as Postfix's anvil(8) keeps them.
//!
//! The rate is counted in fixed windows of `anvil_rate_time_unit` that start
//! at a client's first connection; an entry is forgotten once the client has
//! no connection left and its window is over, so memory follows the number of
//! active clients. Failed AUTH commands, MAIL commands and RCPT commands
//! are counted the same way, each in a window of its own. The maxima since the last report are kept for the
//! periodic `statistics:` log lines.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
struct Entry {
    count: u32,
    rate: u32,
    window_start: Instant,
    auth_failures: u32,
    auth_window_start: Instant,
    mail: Window,
    rcpt: Window,
}

/// Events counted in a fixed window that opens at the first one.
#[derive(Debug, Clone)]
struct Window {
    events: u32,
    start: Instant,
}

impl Window {
    /// Counts one event at `now`; returns the events in its window.
    fn incr(&mut self, unit: Duration, now: Instant) -> u32 {
        if now.duration_since(self.start) >= unit {
            self.start = now;
            self.events = 0;
        }
        self.events = self.events.saturating_add(1);
        self.events
    }

    /// Whether the window still counts at `now`.
    fn open(&self, unit: Duration, now: Instant) -> bool {
        self.events > 0 && now.duration_since(self.start) < unit
    }
}

/// The largest figure seen since the last report, and whose it was.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Peak {
    /// The figure.
    pub value: u32,
    /// `service:client`.
    pub who: String,
}

/// All clients' counters.
#[derive(Debug)]
pub struct Table {
    unit: Duration,
    entries: BTreeMap<(String, String), Entry>,
    /// Highest simultaneous count since the last report.
    pub max_count: Peak,
    /// Highest rate since the last report.
    pub max_rate: Peak,
    /// Highest message (MAIL) rate since the last report.
    pub max_mail: Peak,
    /// Highest recipient (RCPT) rate since the last report.
    pub max_rcpt: Peak,
    /// Most clients tracked at once since the last report.
    pub max_cache: usize,
}

impl Table {
    /// An empty table counting rates per `unit`.
    pub fn new(unit: Duration) -> Self {
        Table {
            unit: unit.max(Duration::from_secs(1)),
            entries: BTreeMap::new(),
            max_count: Peak::default(),
            max_rate: Peak::default(),
            max_mail: Peak::default(),
            max_rcpt: Peak::default(),
            max_cache: 0,
        }
    }

    /// The rate window length.
    pub fn unit(&self) -> Duration {
        self.unit
    }

    fn entry(&mut self, service: &str, client: &str, now: Instant) -> &mut Entry {
        self.entries
            .entry((service.to_string(), client.to_string()))
            .or_insert(Entry {
                count: 0,
                rate: 0,
                window_start: now,
                auth_failures: 0,
                auth_window_start: now,
                mail: Window {
                    events: 0,
                    start: now,
                },
                rcpt: Window {
                    events: 0,
                    start: now,
                },
            })
    }

    /// Records a connection; returns (count, rate) after it.
    pub fn connect(&mut self, service: &str, client: &str, now: Instant) -> (u32, u32) {
        let unit = self.unit;
        let e = self.entry(service, client, now);
        // A connection after the window ended opens a new one.
        if now.duration_since(e.window_start) >= unit {
            e.window_start = now;
            e.rate = 0;
        }
        e.count = e.count.saturating_add(1);
        e.rate = e.rate.saturating_add(1);
        let (count, rate) = (e.count, e.rate);
        let who = format!("{service}:{client}");
        if count > self.max_count.value {
            self.max_count = Peak {
                value: count,
                who: who.clone(),
            };
        }
        if rate > self.max_rate.value {
            self.max_rate = Peak { value: rate, who };
        }
        self.max_cache = self.max_cache.max(self.entries.len());
        (count, rate)
    }

    /// Records a disconnection; returns (count, rate) after it.
    pub fn disconnect(&mut self, service: &str, client: &str, now: Instant) -> (u32, u32) {
        let unit = self.unit;
        let e = self.entry(service, client, now);
        e.count = e.count.saturating_sub(1);
        let rate = if now.duration_since(e.window_start) < unit {
            e.rate
        } else {
            0
        };
        (e.count, rate)
    }

    /// The figures without changing them.
    pub fn lookup(&mut self, service: &str, client: &str, now: Instant) -> (u32, u32) {
        let key = (service.to_string(), client.to_string());
        match self.entries.get(&key) {
            Some(e) if now.duration_since(e.window_start) < self.unit => (e.count, e.rate),
            Some(e) => (e.count, 0),
            None => (0, 0),
        }
    }

    /// Records a failed AUTH; returns the client's failures in the window.
    pub fn auth_failed(&mut self, service: &str, client: &str, now: Instant) -> u32 {
        let unit = self.unit;
        let e = self.entry(service, client, now);
        if now.duration_since(e.auth_window_start) >= unit {
            e.auth_window_start = now;
            e.auth_failures = 0;
        }
        e.auth_failures = e.auth_failures.saturating_add(1);
        e.auth_failures
    }

    /// The client's failed AUTH commands in the window, without changing them.
    pub fn auth_failures(&self, service: &str, client: &str, now: Instant) -> u32 {
        let key = (service.to_string(), client.to_string());
        match self.entries.get(&key) {
            Some(e) if now.duration_since(e.auth_window_start) < self.unit => e.auth_failures,
            _ => 0,
        }
    }

    /// Records a MAIL command (accepted or not, as Postfix's anvil counts
    /// each one smtpd reports); returns the client's MAIL commands in the window.
    pub fn mail(&mut self, service: &str, client: &str, now: Instant) -> u32 {
        let unit = self.unit;
        let rate = self.entry(service, client, now).mail.incr(unit, now);
        if rate > self.max_mail.value {
            self.max_mail = Peak {
                value: rate,
                who: format!("{service}:{client}"),
            };
        }
        self.max_cache = self.max_cache.max(self.entries.len());
        rate
    }

    /// Records a RCPT (or VRFY) command; returns the client's recipients in the window.
    pub fn rcpt(&mut self, service: &str, client: &str, now: Instant) -> u32 {
        let unit = self.unit;
        let rate = self.entry(service, client, now).rcpt.incr(unit, now);
        if rate > self.max_rcpt.value {
            self.max_rcpt = Peak {
                value: rate,
                who: format!("{service}:{client}"),
            };
        }
        self.max_cache = self.max_cache.max(self.entries.len());
        rate
    }

    /// Forgets clients with no connection whose windows have ended.
    pub fn expire(&mut self, now: Instant) {
        let unit = self.unit;
        self.entries.retain(|_, e| {
            e.count > 0
                || now.duration_since(e.window_start) < unit
                || (e.auth_failures > 0 && now.duration_since(e.auth_window_start) < unit)
                || e.mail.open(unit, now)
                || e.rcpt.open(unit, now)
        });
    }

    /// Clients tracked now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Resets the maxima after a report.
    pub fn reset_peaks(&mut self) {
        self.max_count = Peak::default();
        self.max_rate = Peak::default();
        self.max_mail = Peak::default();
        self.max_rcpt = Peak::default();
        self.max_cache = self.entries.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_rates_and_expires() {
        let t0 = Instant::now();
        let mut t = Table::new(Duration::from_secs(60));
        assert_eq!(t.connect("smtp", "192.0.2.1", t0), (1, 1));
        assert_eq!(t.connect("smtp", "192.0.2.1", t0), (2, 2));
        assert_eq!(t.connect("smtp", "192.0.2.2", t0), (1, 1));
        assert_eq!(t.disconnect("smtp", "192.0.2.1", t0), (1, 2));
        assert_eq!(t.lookup("smtp", "192.0.2.1", t0), (1, 2));
        // Another service counts separately.
        assert_eq!(t.connect("submission", "192.0.2.1", t0), (1, 1));
        // The rate window restarts after the unit; the count stays.
        let t1 = t0 + Duration::from_secs(61);
        assert_eq!(t.connect("smtp", "192.0.2.1", t1), (2, 1));
        assert_eq!(
            t.max_count,
            Peak {
                value: 2,
                who: "smtp:192.0.2.1".into()
            }
        );
        assert_eq!(t.max_rate.value, 2);
        t.disconnect("smtp", "192.0.2.2", t1);
        t.disconnect("submission", "192.0.2.1", t1);
        t.expire(t1);
        assert_eq!(t.len(), 1, "only the client with open connections is kept");
        assert_eq!(t.lookup("smtp", "192.0.2.2", t1), (0, 0));
    }

    #[test]
    fn auth_failures_are_counted_per_client_and_window() {
        let t0 = Instant::now();
        let mut t = Table::new(Duration::from_secs(60));
        assert_eq!(t.auth_failures("submission", "192.0.2.1", t0), 0);
        assert_eq!(t.auth_failed("submission", "192.0.2.1", t0), 1);
        assert_eq!(t.auth_failed("submission", "192.0.2.1", t0), 2);
        assert_eq!(t.auth_failed("submission", "192.0.2.2", t0), 1);
        assert_eq!(t.auth_failures("submission", "192.0.2.1", t0), 2);
        // Connections do not count as failures, nor failures as connections.
        assert_eq!(t.connect("submission", "192.0.2.1", t0), (1, 1));
        assert_eq!(t.auth_failures("submission", "192.0.2.1", t0), 2);
        // Kept after the client hung up, until the window ends.
        t.disconnect("submission", "192.0.2.1", t0);
        let t1 = t0 + Duration::from_secs(30);
        t.expire(t1);
        assert_eq!(t.auth_failures("submission", "192.0.2.1", t1), 2);
        let t2 = t0 + Duration::from_secs(61);
        assert_eq!(t.auth_failures("submission", "192.0.2.1", t2), 0);
        t.expire(t2);
        assert_eq!(t.len(), 0);
        assert_eq!(t.auth_failed("submission", "192.0.2.1", t2), 1);
    }

    #[test]
    fn messages_and_recipients_are_counted_per_client_and_window() {
        let t0 = Instant::now();
        let mut t = Table::new(Duration::from_secs(60));
        assert_eq!(t.mail("smtp", "192.0.2.1", t0), 1);
        assert_eq!(t.mail("smtp", "192.0.2.1", t0), 2);
        assert_eq!(t.mail("smtp", "192.0.2.2", t0), 1);
        assert_eq!(t.mail("submission", "192.0.2.1", t0), 1);
        // Recipients, connections and messages are separate figures.
        assert_eq!(t.rcpt("smtp", "192.0.2.1", t0), 1);
        assert_eq!(t.rcpt("smtp", "192.0.2.1", t0), 2);
        assert_eq!(t.rcpt("smtp", "192.0.2.1", t0), 3);
        assert_eq!(t.connect("smtp", "192.0.2.1", t0), (1, 1));
        assert_eq!(t.mail("smtp", "192.0.2.1", t0), 3);
        assert_eq!(
            t.max_mail,
            Peak {
                value: 3,
                who: "smtp:192.0.2.1".into()
            }
        );
        assert_eq!(t.max_rcpt.value, 3);
        t.disconnect("smtp", "192.0.2.1", t0);
        // Kept after the client hung up, until the windows end.
        let t1 = t0 + Duration::from_secs(30);
        t.expire(t1);
        assert_eq!(t.len(), 3);
        assert_eq!(t.mail("smtp", "192.0.2.1", t1), 4);
        // A new window starts from zero; the last ones are forgotten.
        let t2 = t0 + Duration::from_secs(61);
        assert_eq!(t.rcpt("smtp", "192.0.2.1", t2), 1);
        // The open recipient window alone keeps its client.
        let t3 = t2 + Duration::from_secs(30);
        t.expire(t3);
        assert_eq!(t.len(), 1);
        assert_eq!(t.rcpt("smtp", "192.0.2.1", t3), 2);
        let t4 = t2 + Duration::from_secs(61);
        t.expire(t4);
        assert_eq!(t.len(), 0);
        t.reset_peaks();
        assert_eq!(t.max_mail, Peak::default());
        assert_eq!(t.max_rcpt, Peak::default());
    }

    #[test]
    fn disconnect_without_connect_does_not_underflow() {
        let t0 = Instant::now();
        let mut t = Table::new(Duration::from_secs(60));
        assert_eq!(t.disconnect("smtp", "x", t0), (0, 0));
    }
}
