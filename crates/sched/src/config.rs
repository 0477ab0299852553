//! Scheduler configuration: `SchedConfig` and per-transport `TransportConfig`.
//!
//! Plain structs that the daemon fills from main.cf; every field's doc names
//! the main.cf parameter it comes from and the defaults are Postfix's (or,
//! for parameters Postfix lacks, documented Sluice defaults). `validate`
//! refuses values the algorithms cannot work with. Panics: never.

use crate::limiter::LimitRule;
use std::time::Duration;

/// A feedback function of the destination concurrency N (Postfix 2.5).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FeedbackFn {
    /// `x/concurrency`: linear growth in time.
    PerConcurrency(f64),
    /// `x/sqrt_concurrency`.
    PerSqrtConcurrency(f64),
    /// A constant `x` per delivery.
    Constant(f64),
}

impl FeedbackFn {
    /// Feedback amount at concurrency `n` (n is at least 1 here).
    pub fn value(self, n: u32) -> f64 {
        let n = f64::from(n.max(1));
        match self {
            FeedbackFn::PerConcurrency(x) => x / n,
            FeedbackFn::PerSqrtConcurrency(x) => x / n.sqrt(),
            FeedbackFn::Constant(x) => x,
        }
    }

    /// Short label for reports (`1/N`, `1/sqrt(N)`, `0.25`).
    pub fn label(self) -> String {
        match self {
            FeedbackFn::PerConcurrency(1.0) => "1/N".into(),
            FeedbackFn::PerConcurrency(x) => format!("{x}/N"),
            FeedbackFn::PerSqrtConcurrency(1.0) => "1/sqrt(N)".into(),
            FeedbackFn::PerSqrtConcurrency(x) => format!("{x}/sqrt(N)"),
            FeedbackFn::Constant(x) => format!("{x}"),
        }
    }
}

/// What an entry's scheduling class is computed from
/// (`<transport>_scheduler_class_key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassKey {
    /// The envelope sender (default).
    Sender,
    /// The domain part of the envelope sender.
    SenderDomain,
    /// The tenant id of the message.
    Tenant,
    /// Message size: the count compared with the thresholds is the size in KiB.
    Size,
}

/// Per-transport parameters; `<transport>_...` overrides in main.cf.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// master.cf service name (e.g. `smtp`, `relay`, `local`).
    pub name: String,
    /// master.cf maxproc / `default_process_limit` (100): connections or agents.
    pub process_limit: u32,
    /// `<transport>_destination_recipient_limit` (50): recipients per entry.
    pub destination_recipient_limit: u32,
    /// `<transport>_initial_destination_concurrency` (5).
    pub initial_destination_concurrency: u32,
    /// `<transport>_destination_concurrency_limit` (20).
    pub destination_concurrency_limit: u32,
    /// `<transport>_destination_concurrency_positive_feedback` (1/concurrency).
    pub positive_feedback: FeedbackFn,
    /// `<transport>_destination_concurrency_negative_feedback` (1/concurrency).
    pub negative_feedback: FeedbackFn,
    /// `<transport>_destination_concurrency_feedback_hysteresis` (1; Sluice name for Postfix's built-in 1).
    pub feedback_hysteresis: u32,
    /// `<transport>_destination_concurrency_failed_cohort_limit` (1).
    pub failed_cohort_limit: f64,
    /// `<transport>_destination_dead_while_delivering` (no): whether the
    /// failed pseudo-cohort rule declares a destination dead while one of
    /// its connections is open and delivers (Postfix: yes). With
    /// `false` such a destination's window drops to the connections that
    /// deliver instead (a server that takes N sessions and answers 421 to
    /// the rest).
    pub dead_while_delivering: bool,
    /// `<transport>_sender_class_thresholds` (10, 1000): small below the first, large from the second.
    pub sender_class_thresholds: [u32; 2],
    /// `<transport>_scheduler_class_key` (sender).
    pub scheduler_class_key: ClassKey,
    /// `<transport>_class_slot_reserve_recipients` (10; 0 = never): the
    /// mean recipients per transaction at which a medium or large class
    /// leaves a destination's last free connection slot to a smaller
    /// class (`Destination::keeps_last_slot`).
    pub class_slot_reserve_recipients: u32,
    /// `<transport>_connection_backlog_limit` (2): jobs (running plus waiting) on one connection before another opens.
    pub connection_backlog_limit: u32,
    /// `<transport>_connection_cache_time_limit` (2s): idle time before a cached connection closes; 0 disables caching.
    pub connection_cache_time_limit: Duration,
    /// `<transport>_connection_reuse_count_limit` (0 = unlimited): transactions per connection.
    pub connection_reuse_count_limit: u32,
    /// `<transport>_connection_reuse_time_limit` (300s): maximum connection age.
    pub connection_reuse_time_limit: Duration,
    /// `<transport>_host_retry_time` (0 = off; Sluice): how long destdb skips a host that could not be reached.
    pub host_retry_time: Duration,
    /// `<transport>_transport_retry_time` (60s): after the transport's own
    /// side failed to set up a connection (no egress proxy answered, the
    /// source address cannot be bound), how long the destination opens no
    /// new one (Postfix's throttled transport).
    pub transport_retry_time: Duration,
    /// `<transport>_recipient_limit` (20000): this transport's recipient slot pool.
    pub recipient_limit: u32,
    /// `<transport>_bind_address` (none): source address, a limiter key field.
    pub bind_address: Option<String>,
    /// `<transport>_source_pool` (none): the policy file's `sources:` pool
    /// new connections take their source addresses from, in turn.
    pub source_pool: Option<String>,
}

impl TransportConfig {
    /// A transport with Postfix defaults.
    pub fn new(name: &str) -> Self {
        TransportConfig {
            name: name.to_string(),
            process_limit: 100,
            destination_recipient_limit: 50,
            initial_destination_concurrency: 5,
            destination_concurrency_limit: 20,
            positive_feedback: FeedbackFn::PerConcurrency(1.0),
            negative_feedback: FeedbackFn::PerConcurrency(1.0),
            feedback_hysteresis: 1,
            failed_cohort_limit: 1.0,
            dead_while_delivering: false,
            sender_class_thresholds: [10, 1000],
            scheduler_class_key: ClassKey::Sender,
            class_slot_reserve_recipients: 10,
            connection_backlog_limit: 2,
            connection_cache_time_limit: Duration::from_secs(2),
            connection_reuse_count_limit: 0,
            connection_reuse_time_limit: Duration::from_secs(300),
            host_retry_time: Duration::ZERO,
            transport_retry_time: Duration::from_secs(60),
            recipient_limit: 20_000,
            bind_address: None,
            source_pool: None,
        }
    }

    /// Postfix's behaviour without connection caching: one delivery per connection.
    pub fn without_connection_reuse(mut self) -> Self {
        self.connection_reuse_count_limit = 1;
        self.connection_cache_time_limit = Duration::ZERO;
        self.connection_backlog_limit = 1;
        self
    }
}

/// Scheduler-wide parameters.
#[derive(Clone, Debug)]
pub struct SchedConfig {
    /// The transports, in master.cf order (the round-robin order).
    pub transports: Vec<TransportConfig>,
    /// `max_message_concurrency` (10; fanf): workers one message may hold under load.
    pub max_message_concurrency: u32,
    /// `scale_max_concurrency` (10; fanf): a message may also hold up to this times the free workers.
    pub scale_max_concurrency: u32,
    /// `minimal_backoff_time` (300s).
    pub minimal_backoff_time: Duration,
    /// `maximal_backoff_time` (4000s).
    pub maximal_backoff_time: Duration,
    /// `maximal_queue_lifetime` (5d): older mail bounces instead of being deferred.
    pub maximal_queue_lifetime: Duration,
    /// `qmgr_message_active_limit` (20000): messages in memory.
    pub qmgr_message_active_limit: u32,
    /// `qmgr_message_recipient_limit` (20000): recipients in memory (first batches).
    pub qmgr_message_recipient_limit: u32,
    /// `qmgr_message_recipient_minimum` (10): recipients a message may always have in memory.
    pub qmgr_message_recipient_minimum: u32,
    /// `destdb_record_lifetime` (3600s; Sluice): age after which destdb forgets closed/retry hosts.
    pub destdb_record_lifetime: Duration,
    /// `destination_concurrency_feedback_debug` (no): emit a notice on every window change.
    pub feedback_debug: bool,
    /// Rate and connect limits, enforced before a connection or transaction.
    pub limits: Vec<LimitRule>,
    /// The traffic-shaping policy (`policy_file`), if any.
    pub shaping: Option<std::sync::Arc<shaping::Policy>>,
    /// Seed for the scheduler's random host choices.
    pub seed: u64,
    /// Starting windows of destinations by (transport, nexthop) where not
    /// the transport's initial concurrency (`sluice sim` replays a live
    /// queue from the windows it had); the limit still caps them.
    pub windows: std::collections::BTreeMap<(String, String), u32>,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            transports: vec![TransportConfig::new("smtp")],
            max_message_concurrency: 10,
            scale_max_concurrency: 10,
            minimal_backoff_time: Duration::from_secs(300),
            maximal_backoff_time: Duration::from_secs(4000),
            maximal_queue_lifetime: Duration::from_secs(5 * 86400),
            qmgr_message_active_limit: 20_000,
            qmgr_message_recipient_limit: 20_000,
            qmgr_message_recipient_minimum: 10,
            destdb_record_lifetime: Duration::from_secs(3600),
            feedback_debug: false,
            limits: Vec::new(),
            shaping: None,
            seed: 1,
            windows: std::collections::BTreeMap::new(),
        }
    }
}

/// A configuration value the scheduler refuses.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No transport is configured.
    NoTransports,
    /// Two transports share a name.
    DuplicateTransport(String),
    /// A parameter is out of range; the string is its main.cf name.
    OutOfRange(String),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::NoTransports => write!(f, "no transports configured"),
            ConfigError::DuplicateTransport(n) => write!(f, "duplicate transport {n}"),
            ConfigError::OutOfRange(p) => write!(f, "parameter {p} out of range"),
        }
    }
}

impl std::error::Error for ConfigError {}

impl SchedConfig {
    /// Checks the values the algorithms rely on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.transports.is_empty() {
            return Err(ConfigError::NoTransports);
        }
        let bad = |p: &str, t: &str| ConfigError::OutOfRange(format!("{t}_{p}"));
        for (i, t) in self.transports.iter().enumerate() {
            if self.transports[..i].iter().any(|o| o.name == t.name) {
                return Err(ConfigError::DuplicateTransport(t.name.clone()));
            }
            let n = &t.name;
            if t.process_limit == 0 {
                return Err(bad("process_limit", n));
            }
            if t.destination_recipient_limit == 0 {
                return Err(bad("destination_recipient_limit", n));
            }
            if t.destination_concurrency_limit == 0 {
                return Err(bad("destination_concurrency_limit", n));
            }
            if t.initial_destination_concurrency == 0 {
                return Err(bad("initial_destination_concurrency", n));
            }
            if t.feedback_hysteresis == 0 {
                return Err(bad("destination_concurrency_feedback_hysteresis", n));
            }
            for f in [t.positive_feedback, t.negative_feedback] {
                let x = match f {
                    FeedbackFn::PerConcurrency(x)
                    | FeedbackFn::PerSqrtConcurrency(x)
                    | FeedbackFn::Constant(x) => x,
                };
                if !(0.0..=1.0).contains(&x) {
                    return Err(bad("destination_concurrency_positive_feedback", n));
                }
            }
            if t.sender_class_thresholds[0] > t.sender_class_thresholds[1] {
                return Err(bad("sender_class_thresholds", n));
            }
            if t.connection_backlog_limit == 0 {
                return Err(bad("connection_backlog_limit", n));
            }
        }
        if self.minimal_backoff_time.is_zero()
            || self.minimal_backoff_time > self.maximal_backoff_time
        {
            return Err(ConfigError::OutOfRange("minimal_backoff_time".into()));
        }
        if self.qmgr_message_active_limit == 0 {
            return Err(ConfigError::OutOfRange("qmgr_message_active_limit".into()));
        }
        if self.qmgr_message_recipient_minimum == 0 {
            return Err(ConfigError::OutOfRange(
                "qmgr_message_recipient_minimum".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_postfix_and_valid() {
        let c = SchedConfig::default();
        assert!(c.validate().is_ok());
        let t = &c.transports[0];
        assert_eq!(
            (
                t.initial_destination_concurrency,
                t.destination_concurrency_limit
            ),
            (5, 20)
        );
        assert_eq!(c.minimal_backoff_time, Duration::from_secs(300));
        assert_eq!(c.maximal_backoff_time, Duration::from_secs(4000));
    }

    #[test]
    fn feedback_values() {
        assert_eq!(FeedbackFn::PerConcurrency(1.0).value(4), 0.25);
        assert_eq!(FeedbackFn::PerSqrtConcurrency(1.0).value(4), 0.5);
        assert_eq!(FeedbackFn::Constant(0.25).value(100), 0.25);
        assert_eq!(
            FeedbackFn::PerConcurrency(1.0).value(0),
            1.0,
            "n clamped to 1"
        );
    }

    #[test]
    fn validate_rejects_bad_values() {
        let mut c = SchedConfig::default();
        c.transports[0].process_limit = 0;
        assert_eq!(
            c.validate(),
            Err(ConfigError::OutOfRange("smtp_process_limit".into()))
        );
        let mut c = SchedConfig::default();
        c.transports.push(TransportConfig::new("smtp"));
        assert_eq!(
            c.validate(),
            Err(ConfigError::DuplicateTransport("smtp".into()))
        );
        let mut c = SchedConfig::default();
        c.transports[0].positive_feedback = FeedbackFn::Constant(2.0);
        assert!(c.validate().is_err());
        let c = SchedConfig {
            transports: vec![],
            ..SchedConfig::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::NoTransports));
    }
}
