//! What the shell does at start, on a reload and from time to time,
//! decided and worded here so that the shell only reads files and logs.
//!
//! At start: the spool's journal configuration from main.cf, the queue
//! manager over what recovery found ([`open`]), then the state saved
//! before a restart (shaping holds, the address verification cache) put
//! back in force, with the lines that say how that went
//! ([`QueueManager::restore_saved`]). On `sluice reload`: the new
//! configuration, or why the running one stays ([`reload`]). Once a
//! minute: journal segments with nothing live are deleted
//! ([`Housekeeping`]). Times are the queue manager's wall-clock
//! milliseconds; nothing here reads a clock or a file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use config::{Config, ServiceDef};
use queue::{Replay, SpoolConfig};

use crate::{schedconf, Event, Level, QueueManager, Settings, Store, Time};

/// How often journal segments with nothing live are looked for.
pub const GC_INTERVAL: Duration = Duration::from_secs(60);

/// A line for the shell's log.
pub type Line = (Level, String);

/// Where the shaping holds are saved, under the queue directory
/// (mail_owner's: the queue directory itself is root's when master runs
/// privileged); then where an older release kept them, still read.
pub fn holds_files(root: &Path) -> [PathBuf; 2] {
    [root.join("state/shaping.holds"), root.join("shaping.holds")]
}

/// The spool's configuration from main.cf.
pub fn spool_config(config: &Config) -> SpoolConfig {
    // journal_segment_size was in the table but never reached the
    // journal: it also bounds the segments written ahead (the free
    // space qmgr holds in reserve).
    let mut spool = SpoolConfig::default();
    spool.journal.segment_size = config
        .size("journal_segment_size")
        .clamp(4096, u32::MAX as u64 / 2) as u32;
    spool
}

/// The queue manager over `state` as recovery left it, configured by
/// main.cf and master.cf's `services`; `seed` makes its choices of hosts
/// reproducible per run. The error is the reason not to start.
pub fn open<S: Store>(
    config: &Config,
    services: &[ServiceDef],
    now: Time,
    seed: u64,
    store: S,
    state: Replay,
) -> Result<QueueManager<S>, String> {
    let sched = schedconf::build(config, services, seed)?;
    let settings = Settings::from_config(config, &sched);
    QueueManager::new(now, settings, sched, store, state)
        .map_err(|e| format!("scheduler configuration: {e:?}"))
}

/// A saved file as the shell read it: its path and its text, or why it
/// could not be read.
pub type Saved<'a> = (&'a Path, Result<String, String>);

impl<S: Store> QueueManager<S> {
    /// Puts back what was saved before a restart: the shaping holds
    /// (suspensions and back-offs) and, when `address_verify_map` is
    /// kept, the verification cache (starting empty when it cannot be
    /// read). The lines to log about them.
    pub fn restore_saved(
        &mut self,
        now: Time,
        holds: Saved<'_>,
        verify: Option<Saved<'_>>,
    ) -> Vec<Line> {
        let mut lines = Vec::new();
        let (path, text) = holds;
        match text.and_then(|t| match t.is_empty() {
            true => Ok(None),
            false => self.restore_holds(now, &t).map(Some),
        }) {
            Ok(None) => {}
            Ok(Some(n)) => lines.push((
                Level::Info,
                format!("shaping: {n} suspensions and back-offs restored"),
            )),
            Err(e) => lines.push((Level::Warn, format!("{}: {e}", path.display()))),
        }
        if let Some((path, text)) = verify {
            let line = match text {
                Ok(text) => match self.load_verify_cache(&text) {
                    0 => None,
                    torn => Some(format!(
                        "address_verify_map {}: {torn} line(s) cut short or unreadable, skipped",
                        path.display()
                    )),
                },
                Err(e) => Some(format!(
                    "address_verify_map {}: {e}; starting empty",
                    path.display()
                )),
            };
            lines.extend(line.map(|l| (Level::Warn, l)));
        }
        lines
    }
}

/// `sluice reload`: the event that puts main.cf's and master.cf's new
/// values in force, or none when a file is wrong (the running
/// configuration stays); and the lines to log. `metrics_listen` is the
/// address bound at start, which a reload cannot bind again.
pub fn reload(
    config: &Config,
    master_cf: Result<Vec<ServiceDef>, config::ConfigError>,
    seed: u64,
    metrics_listen: &str,
) -> (Option<Event>, Vec<Line>) {
    match schedconf::reconfigure(config, master_cf, seed) {
        Err(warning) => (None, vec![(Level::Warn, warning)]),
        Ok(ev) => {
            let mut lines = Vec::new();
            if config.str("metrics_listen") != metrics_listen {
                lines.push((
                    Level::Warn,
                    "reload: metrics_listen changed: it takes effect when qmgr restarts".into(),
                ));
            }
            (Some(ev), lines)
        }
    }
}

/// When journal garbage is next collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Housekeeping {
    last: Time,
}

impl Housekeeping {
    /// Starting at `now`: the first collection is an interval away.
    pub fn new(now: Time) -> Self {
        Housekeeping { last: now }
    }

    /// When the next collection is due.
    pub fn next(&self) -> Time {
        Time(self.last.0 + GC_INTERVAL.as_millis() as u64)
    }

    /// Whether a collection is due at `now`; if so, the next is an
    /// interval after `now`.
    pub fn due(&mut self, now: Time) -> bool {
        if now < self.next() {
            return false;
        }
        self.last = now;
        true
    }

    /// The line to log about a collection: the segments deleted, or why
    /// none could be.
    pub fn outcome<E: std::fmt::Display>(r: Result<Vec<u32>, E>) -> Option<Line> {
        match r {
            Ok(gone) if gone.is_empty() => None,
            Ok(gone) => Some((
                Level::Info,
                format!(
                    "journal: deleted {} segment(s) with nothing live",
                    gone.len()
                ),
            )),
            Err(e) => Some((Level::Warn, format!("journal garbage collection: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{settings, World, T0};

    fn config(main_cf: &str) -> Config {
        Config::parse(main_cf, Path::new("main.cf"), &[])
            .unwrap()
            .config
    }

    #[test]
    fn garbage_is_collected_once_a_minute_in_virtual_time() {
        let mut h = Housekeeping::new(T0);
        assert!(!h.due(T0));
        assert!(!h.due(Time(T0.0 + 59_999)));
        assert_eq!(h.next(), Time(T0.0 + 60_000));
        assert!(h.due(Time(T0.0 + 61_000)));
        assert!(!h.due(Time(T0.0 + 61_000)), "once");
        assert_eq!(h.next(), Time(T0.0 + 121_000), "an interval after the last");
        assert_eq!(Housekeeping::outcome::<String>(Ok(vec![])), None);
        assert_eq!(
            Housekeeping::outcome::<String>(Ok(vec![3, 4])),
            Some((
                Level::Info,
                "journal: deleted 2 segment(s) with nothing live".into()
            ))
        );
        assert_eq!(
            Housekeeping::outcome(Err("EIO")),
            Some((Level::Warn, "journal garbage collection: EIO".into()))
        );
    }

    #[test]
    fn saved_state_that_cannot_be_read_is_named_and_the_rest_restored() {
        let mut w = World::new(settings());
        let holds = PathBuf::from("/q/state/shaping.holds");
        let cache = PathBuf::from("/q/state/verify_cache");
        let none = w.qm.restore_saved(T0, (&holds, Ok(String::new())), None);
        assert!(none.is_empty(), "{none:?}");
        let lines = w.qm.restore_saved(
            T0,
            (&holds, Err("Permission denied".into())),
            Some((&cache, Err("Is a directory".into()))),
        );
        assert_eq!(
            lines,
            vec![
                (
                    Level::Warn,
                    "/q/state/shaping.holds: Permission denied".into()
                ),
                (
                    Level::Warn,
                    "address_verify_map /q/state/verify_cache: Is a directory; starting empty"
                        .into()
                ),
            ]
        );
        let torn = format!("a@example.net\tdeliverable\t{}\tok\nb@exa", T0.0);
        let lines =
            w.qm.restore_saved(T0, (&holds, Ok(String::new())), Some((&cache, Ok(torn))));
        assert_eq!(
            lines,
            vec![(
                Level::Warn,
                "address_verify_map /q/state/verify_cache: 1 line(s) cut short or unreadable, skipped"
                    .into()
            )]
        );
    }

    #[test]
    fn a_reload_keeps_the_running_configuration_on_a_bad_file_and_notes_metrics_listen() {
        let cfg = config("metrics_listen = 127.0.0.1:9101\n");
        let (ev, lines) = reload(&cfg, Ok(Vec::new()), 1, "127.0.0.1:9100");
        assert!(matches!(ev, Some(Event::Reconfigure { .. })));
        assert_eq!(
            lines,
            vec![(
                Level::Warn,
                "reload: metrics_listen changed: it takes effect when qmgr restarts".into()
            )]
        );
        let (ev, lines) = reload(&cfg, Ok(Vec::new()), 1, "127.0.0.1:9101");
        assert!(ev.is_some() && lines.is_empty(), "{lines:?}");
        let bad = config::parse_master_cf("smtp unix - - n - - \n", Path::new("master.cf"));
        let (ev, lines) = reload(&cfg, bad, 1, "127.0.0.1:9101");
        assert!(ev.is_none());
        assert!(lines[0].1.starts_with("reload: master.cf"), "{lines:?}");
    }

    #[test]
    fn the_journal_segment_size_comes_from_main_cf_within_bounds() {
        let s = spool_config(&config("journal_segment_size = 8m\n"));
        assert_eq!(s.journal.segment_size, 8 << 20);
        let s = spool_config(&config("journal_segment_size = 1\n"));
        assert_eq!(s.journal.segment_size, 4096);
    }
}
