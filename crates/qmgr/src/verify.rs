//! The address verification cache (Postfix's verify(8) database), sans-IO.
//!
//! One entry per address: what its last probe found, when, and whether a
//! probe is under way. A query answers from a current entry at once; an
//! entry older than its refresh time is still answered, and probed again
//! in the background (Postfix's `address_verify_*_refresh_time`); one
//! older than its expiry time, or none, is unknown and probed. Results a
//! server accepted live `address_verify_positive_expire_time`, the others
//! `address_verify_negative_expire_time` (and are not kept at all with
//! `address_verify_negative_cache = no`).
//!
//! Bounds: at most `address_verify_cache_limit` entries (the one updated
//! longest ago goes first), and at most `address_verify_pending_limit`
//! probes under way; a miss beyond that is answered unknown without a
//! probe, so a flood of new addresses costs memory and probes no more than
//! the limits say.
//!
//! Saved as text, one entry a line (`address TAB outcome TAB updated-ms TAB
//! text`), and loaded back at start; a line that does not parse (the torn
//! last line of a save cut short) is skipped and counted. Panics: never.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use ipc::verify::Outcome;
use sched::Time;

/// The cache's parameters, from main.cf.
#[derive(Debug, Clone)]
pub struct VerifySettings {
    /// `address_verify_positive_expire_time` (31d).
    pub positive_expire: Duration,
    /// `address_verify_positive_refresh_time` (7d).
    pub positive_refresh: Duration,
    /// `address_verify_negative_expire_time` (3d).
    pub negative_expire: Duration,
    /// `address_verify_negative_refresh_time` (3h).
    pub negative_refresh: Duration,
    /// `address_verify_negative_cache` (yes).
    pub negative_cache: bool,
    /// `address_verify_cache_limit` (100000 entries).
    pub cache_limit: usize,
    /// `address_verify_pending_limit` (1000 probes under way).
    pub pending_limit: usize,
    /// `address_verify_concurrency_limit` (10): probes of one transport in
    /// its pseudo-message at once.
    pub concurrency_limit: usize,
    /// `address_verify_rate_limit` (0: none): probes a transport starts per second.
    pub rate_limit: u32,
    /// `address_verify_sender`, qualified ("" for `<>`).
    pub sender: String,
}

impl Default for VerifySettings {
    fn default() -> Self {
        let day = 86_400;
        VerifySettings {
            positive_expire: Duration::from_secs(31 * day),
            positive_refresh: Duration::from_secs(7 * day),
            negative_expire: Duration::from_secs(3 * day),
            negative_refresh: Duration::from_secs(3 * 3600),
            negative_cache: true,
            cache_limit: 100_000,
            pending_limit: 1000,
            concurrency_limit: 10,
            rate_limit: 0,
            sender: "double-bounce@localhost".into(),
        }
    }
}

/// What is known of one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    /// Deliverable, Undeliverable or Deferred.
    pub outcome: Outcome,
    /// The reply that decided it.
    pub text: String,
    /// When the probe finished.
    pub updated: Time,
}

#[derive(Debug, Default)]
struct Entry {
    known: Option<Known>,
    probing: bool,
}

/// The answer to a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// What is known and current (`None`: nothing yet).
    pub known: Option<Known>,
    /// Start a probe of the address now (the caller does, then calls
    /// [`Cache::probe_started`]).
    pub probe: bool,
    /// A probe is wanted but `address_verify_pending_limit` probes are
    /// under way already.
    pub refused: bool,
}

/// The cache.
#[derive(Debug)]
pub struct Cache {
    settings: VerifySettings,
    entries: HashMap<String, Entry>,
    /// Entries with a result, by the time of the result: the eviction order.
    by_age: BTreeSet<(Time, String)>,
    probing: usize,
    /// Changed since the last save.
    dirty: bool,
}

impl Cache {
    /// An empty cache.
    pub fn new(settings: VerifySettings) -> Self {
        Cache {
            settings,
            entries: HashMap::new(),
            by_age: BTreeSet::new(),
            probing: 0,
            dirty: false,
        }
    }

    /// The parameters.
    pub fn settings(&self) -> &VerifySettings {
        &self.settings
    }

    /// New parameters (a reload); entries stay.
    pub fn reconfigure(&mut self, settings: VerifySettings) {
        self.settings = settings;
        self.evict();
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Probes under way.
    pub fn probing(&self) -> usize {
        self.probing
    }

    fn expire(&self, k: &Known) -> Duration {
        if k.outcome == Outcome::Deliverable {
            self.settings.positive_expire
        } else {
            self.settings.negative_expire
        }
    }

    fn refresh(&self, k: &Known) -> Duration {
        if k.outcome == Outcome::Deliverable {
            self.settings.positive_refresh
        } else {
            self.settings.negative_refresh
        }
    }

    /// What is known of `address` at `now`, and whether to probe it.
    pub fn query(&mut self, now: Time, address: &str) -> Lookup {
        let key = address.to_ascii_lowercase();
        let (known, probing) = match self.entries.get(&key) {
            Some(e) => (e.known.clone(), e.probing),
            None => (None, false),
        };
        let known = known.filter(|k| now.since(k.updated) < self.expire(k));
        let stale = known
            .as_ref()
            .is_none_or(|k| now.since(k.updated) >= self.refresh(k));
        let want = stale && !probing;
        let room = self.probing < self.settings.pending_limit;
        Lookup {
            known,
            probe: want && room,
            refused: want && !room,
        }
    }

    /// A probe of `address` was started.
    pub fn probe_started(&mut self, address: &str) {
        let e = self
            .entries
            .entry(address.to_ascii_lowercase())
            .or_default();
        if !e.probing {
            e.probing = true;
            self.probing += 1;
        }
        self.evict();
    }

    /// A probe's result; `None` when it could not run at all (the entry
    /// keeps what it knew).
    pub fn result(&mut self, now: Time, address: &str, found: Option<(Outcome, String)>) {
        let key = address.to_ascii_lowercase();
        let e = self.entries.entry(key.clone()).or_default();
        if e.probing {
            e.probing = false;
            self.probing -= 1;
        }
        let expire = self.settings.positive_expire;
        // As Postfix's verify: a probe that failed does not clobber a
        // positive result before it expires (the address is probed again
        // at the next query; while some probes succeed it stays good).
        let keep_ok = |e: &Entry, o: Outcome| {
            o != Outcome::Deliverable
                && e.known.as_ref().is_some_and(|k| {
                    k.outcome == Outcome::Deliverable && now.since(k.updated) < expire
                })
        };
        if let Some((outcome, text)) = found.filter(|(o, _)| !keep_ok(e, *o)) {
            if outcome != Outcome::Deliverable && !self.settings.negative_cache {
                if let Some(old) = e.known.take() {
                    self.by_age.remove(&(old.updated, key.clone()));
                }
            } else {
                if let Some(old) = e.known.replace(Known {
                    outcome,
                    text: clip(text),
                    updated: now,
                }) {
                    self.by_age.remove(&(old.updated, key.clone()));
                }
                self.by_age.insert((now, key.clone()));
            }
            self.dirty = true;
        }
        if self
            .entries
            .get(&key)
            .is_some_and(|e| e.known.is_none() && !e.probing)
        {
            self.entries.remove(&key);
        }
        self.evict();
    }

    /// Drops entries past the limit, those updated longest ago first
    /// (never one whose probe is under way: its result has a place to go).
    fn evict(&mut self) {
        while self.entries.len() > self.settings.cache_limit {
            let Some((t, k)) = self.by_age.pop_first() else {
                return;
            };
            if let Some(e) = self.entries.get_mut(&k) {
                e.known = None;
                if !e.probing {
                    self.entries.remove(&k);
                }
            }
            let _ = t;
            self.dirty = true;
        }
    }

    /// Drops entries expired at `now`.
    pub fn prune(&mut self, now: Time) {
        let old: Vec<(Time, String)> = self
            .by_age
            .iter()
            .filter(|(t, k)| {
                let e = self.entries.get(k).and_then(|e| e.known.as_ref());
                e.is_none_or(|kn| now.since(*t) >= self.expire(kn))
            })
            .cloned()
            .collect();
        for (t, k) in old {
            self.by_age.remove(&(t, k.clone()));
            if let Some(e) = self.entries.get_mut(&k) {
                e.known = None;
                if !e.probing {
                    self.entries.remove(&k);
                }
            }
            self.dirty = true;
        }
    }

    /// The entries as saved, when something changed since the last call.
    pub fn take_save(&mut self) -> Option<String> {
        if !std::mem::take(&mut self.dirty) {
            return None;
        }
        let mut out = String::new();
        for (_, k) in &self.by_age {
            let Some(kn) = self.entries.get(k).and_then(|e| e.known.as_ref()) else {
                continue;
            };
            let word = match kn.outcome {
                Outcome::Deliverable => "deliverable",
                Outcome::Undeliverable => "undeliverable",
                Outcome::Deferred => "deferred",
                Outcome::Unknown => continue,
            };
            // The text is one line already; tabs and newlines would break the form.
            let text: String = kn
                .text
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            out.push_str(&format!("{k}\t{word}\t{}\t{text}\n", kn.updated.0));
        }
        Some(out)
    }

    /// Loads saved entries (those still current at `now`); the number of
    /// lines that did not parse.
    pub fn load(&mut self, now: Time, text: &str) -> usize {
        let mut bad = 0;
        for line in text.split_inclusive('\n') {
            // A last line without its newline was cut short by a crash.
            let Some(line) = line.strip_suffix('\n') else {
                bad += 1;
                continue;
            };
            let mut f = line.splitn(4, '\t');
            let parsed = (|| {
                let k = f.next().filter(|k| !k.is_empty() && !k.contains(' '))?;
                let outcome = match f.next()? {
                    "deliverable" => Outcome::Deliverable,
                    "undeliverable" => Outcome::Undeliverable,
                    "deferred" => Outcome::Deferred,
                    _ => return None,
                };
                let updated = Time(f.next()?.parse().ok()?);
                let text = clip(f.next()?.to_string());
                Some((k.to_ascii_lowercase(), outcome, updated, text))
            })();
            let Some((k, outcome, updated, text)) = parsed else {
                bad += 1;
                continue;
            };
            let kn = Known {
                outcome,
                text,
                updated,
            };
            if now.since(updated) >= self.expire(&kn) {
                continue;
            }
            let e = self.entries.entry(k.clone()).or_default();
            if let Some(old) = e.known.replace(kn) {
                self.by_age.remove(&(old.updated, k.clone()));
            }
            self.by_age.insert((updated, k));
        }
        self.evict();
        bad
    }
}

/// The most of a server's reply kept with a result (Postfix keeps 250
/// characters too): a hostile server's hundred-line reply is neither held
/// for every address nor repeated in smtpd's reply.
pub const MAX_TEXT: usize = 250;

/// `text` cut to [`MAX_TEXT`] bytes at a character boundary.
pub(crate) fn clip(mut text: String) -> String {
    if text.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3_600_000;

    #[test]
    fn a_long_reply_is_kept_to_250_bytes() {
        let mut c = cache();
        let long = format!("550 5.1.1 {}", "é".repeat(400));
        c.probe_started("a@b.example");
        c.result(Time(0), "a@b.example", Some((Outcome::Undeliverable, long)));
        let saved = c.take_save().unwrap();
        let line = saved.lines().next().unwrap();
        let text = line.rsplit('\t').next().unwrap();
        assert!(
            text.len() <= MAX_TEXT && text.starts_with("550 5.1.1 é"),
            "{text}"
        );
    }

    fn cache() -> Cache {
        Cache::new(VerifySettings {
            positive_expire: Duration::from_secs(10 * 3600),
            positive_refresh: Duration::from_secs(2 * 3600),
            negative_expire: Duration::from_secs(3 * 3600),
            negative_refresh: Duration::from_secs(3600),
            cache_limit: 3,
            pending_limit: 2,
            ..VerifySettings::default()
        })
    }

    fn ok(s: &str) -> Option<(Outcome, String)> {
        Some((Outcome::Deliverable, s.into()))
    }

    #[test]
    fn a_miss_probes_once_and_the_result_answers_until_it_expires() {
        let mut c = cache();
        let t0 = Time(1_000 * HOUR);
        let l = c.query(t0, "U@Example.test");
        assert_eq!((l.known, l.probe), (None, true));
        c.probe_started("U@Example.test");
        // Asked again while the probe runs: no second probe.
        assert!(!c.query(t0, "u@example.test").probe);
        c.result(t0, "u@example.test", ok("250 2.1.5 Ok"));
        assert_eq!(c.probing(), 0);
        let l = c.query(Time(t0.0 + HOUR), "u@example.test");
        assert_eq!(l.known.unwrap().outcome, Outcome::Deliverable);
        assert!(!l.probe);
        // Past the refresh time: still answered, and probed again.
        let l = c.query(Time(t0.0 + 3 * HOUR), "u@example.test");
        assert!(l.known.is_some() && l.probe);
        // Past the expiry: unknown.
        let l = c.query(Time(t0.0 + 10 * HOUR), "u@example.test");
        assert!(l.known.is_none() && l.probe);
    }

    #[test]
    fn a_failed_probe_does_not_clobber_a_positive_result() {
        let mut c = cache();
        let t0 = Time(1_000 * HOUR);
        c.probe_started("u@t");
        c.result(t0, "u@t", ok("250"));
        let later = Time(t0.0 + 3 * HOUR);
        assert!(c.query(later, "u@t").probe, "past the refresh time");
        c.probe_started("u@t");
        let busy = Some((Outcome::Deferred, "451 busy".to_string()));
        c.result(later, "u@t", busy.clone());
        let l = c.query(later, "u@t");
        assert_eq!(l.known.unwrap().outcome, Outcome::Deliverable);
        assert!(l.probe, "probed again at the next query");
        // Once the positive result has expired, the failure is what is known.
        let gone = Time(t0.0 + 10 * HOUR);
        c.probe_started("u@t");
        c.result(gone, "u@t", busy);
        assert_eq!(
            c.query(gone, "u@t").known.unwrap().outcome,
            Outcome::Deferred
        );
    }

    #[test]
    fn negative_results_expire_sooner_and_can_be_left_uncached() {
        let mut c = cache();
        let t0 = Time(1_000 * HOUR);
        c.probe_started("x@example.test");
        let no = Some((Outcome::Undeliverable, "550 5.1.1 no".to_string()));
        c.result(t0, "x@example.test", no.clone());
        let l = c.query(Time(t0.0 + 2 * HOUR), "x@example.test");
        assert_eq!(l.known.unwrap().outcome, Outcome::Undeliverable);
        assert!(l.probe, "past the negative refresh time");
        assert!(c
            .query(Time(t0.0 + 3 * HOUR), "x@example.test")
            .known
            .is_none());
        let mut off = Cache::new(VerifySettings {
            negative_cache: false,
            ..VerifySettings::default()
        });
        off.probe_started("x@example.test");
        off.result(t0, "x@example.test", no);
        assert!(off.is_empty());
    }

    #[test]
    fn probes_under_way_and_entries_are_bounded() {
        let mut c = cache();
        let t0 = Time(1_000 * HOUR);
        for a in ["a@t", "b@t"] {
            assert!(c.query(t0, a).probe);
            c.probe_started(a);
        }
        let l = c.query(t0, "c@t");
        assert!(!l.probe && l.refused);
        c.result(t0, "a@t", ok("250"));
        assert!(c.query(t0, "c@t").probe);
        for (i, a) in ["c@t", "d@t", "e@t"].iter().enumerate() {
            c.probe_started(a);
            c.result(Time(t0.0 + 1 + i as u64), a, ok("250"));
        }
        // Five entries would be too many: the oldest results (a, c) went
        // (b's probe was under way: never evicted); b learnt nothing.
        c.result(t0, "b@t", None);
        assert_eq!(c.len(), 2);
        // The oldest results went first.
        assert!(c.query(Time(t0.0 + 10), "a@t").known.is_none());
        assert!(c.query(Time(t0.0 + 10), "e@t").known.is_some());
    }

    #[test]
    fn saved_entries_load_back_and_a_torn_last_line_is_skipped() {
        let mut c = cache();
        let t0 = Time(1_000 * HOUR);
        c.probe_started("a@t");
        c.result(t0, "a@t", ok("250 2.1.5 Ok"));
        c.probe_started("b@t");
        c.result(
            t0,
            "b@t",
            Some((Outcome::Undeliverable, "host x said:\t550\nno".into())),
        );
        let saved = c.take_save().unwrap();
        assert!(c.take_save().is_none(), "nothing changed since");
        let torn = format!("{saved}c@t\tdeliverable\t36");
        let mut d = cache();
        assert_eq!(d.load(Time(t0.0 + HOUR), &torn), 1);
        let a = d.query(Time(t0.0 + HOUR), "a@t").known.unwrap();
        assert_eq!(a.text, "250 2.1.5 Ok");
        let b = d.query(Time(t0.0 + HOUR), "b@t").known.unwrap();
        assert_eq!(
            (b.outcome, b.text.as_str()),
            (Outcome::Undeliverable, "host x said: 550 no")
        );
        // Loaded after the negative expiry: gone.
        let mut e = cache();
        e.load(Time(t0.0 + 4 * HOUR), &saved);
        assert_eq!(e.len(), 1);
    }

    #[test]
    fn expired_entries_are_pruned() {
        let mut c = cache();
        let t0 = Time(1_000 * HOUR);
        c.probe_started("a@t");
        c.result(t0, "a@t", Some((Outcome::Deferred, "451".into())));
        c.prune(Time(t0.0 + HOUR));
        assert_eq!(c.len(), 1);
        c.prune(Time(t0.0 + 3 * HOUR));
        assert!(c.is_empty());
    }
}
