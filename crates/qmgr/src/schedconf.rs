//! The scheduler's configuration, from main.cf and master.cf (qmgr's,
//! and `sluice sim`'s for the configuration it compares).
//!
//! Every master.cf service whose program is a delivery agent is a
//! transport, in master.cf order (the scheduler's round-robin order); its
//! `maxproc` is the transport's process limit, and `<transport>_<name>`
//! overrides apply as in Postfix.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use config::{Config, Feedback, ServiceDef, ServiceKind};
use sched::{ClassKey, FeedbackFn, SchedConfig, TransportConfig};

/// Programs that deliver mail for qmgr.
pub const AGENTS: [&str; 4] = ["smtp", "lmtp", "local", "pipe"];

/// The delivery transports of master.cf.
pub fn transports(services: &[ServiceDef]) -> Vec<ServiceDef> {
    services
        .iter()
        .filter(|s| s.kind == ServiceKind::Unix && AGENTS.contains(&s.command.as_str()))
        .cloned()
        .collect()
}

fn feedback(f: Feedback) -> FeedbackFn {
    match f {
        Feedback::InverseConcurrency => FeedbackFn::PerConcurrency(1.0),
        Feedback::InverseSqrtConcurrency => FeedbackFn::PerSqrtConcurrency(1.0),
        Feedback::Constant(x) => FeedbackFn::Constant(x),
    }
}

fn u32_of(v: i64) -> u32 {
    v.clamp(0, i64::from(u32::MAX)) as u32
}

/// A smtp transport's value of an `smtp_*` parameter: its master.cf `-o`
/// override, else main.cf's; none when empty.
fn smtp_param(cfg: &Config, s: &ServiceDef, name: &str) -> Option<String> {
    if s.command != "smtp" {
        return None;
    }
    s.overrides
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| cfg.str(name))
        .split_whitespace()
        .next()
        .map(str::to_string)
}

/// The traffic-shaping policy `policy_file` names, if any; its error names
/// the file, line and column.
pub fn policy(cfg: &Config) -> Result<Option<Arc<shaping::Policy>>, String> {
    let file = cfg.str("policy_file");
    if file.trim().is_empty() {
        return Ok(None);
    }
    let path = Path::new(&cfg.str("config_directory")).join(file.trim());
    shaping::Policy::load(&path)
        .map(|p| Some(Arc::new(p)))
        .map_err(|e| e.to_string())
}

/// Builds the scheduler configuration; `seed` makes host choices
/// reproducible per run. Fails only on a policy file that cannot be read.
pub fn build(cfg: &Config, services: &[ServiceDef], seed: u64) -> Result<SchedConfig, String> {
    let default_limit = u32_of(cfg.int("default_process_limit"));
    let transports = transports(services)
        .into_iter()
        .map(|s| {
            let t = cfg.transport(&s.name);
            let mut tc = TransportConfig::new(&s.name);
            tc.process_limit = match s.maxproc {
                Some(0) => u32::MAX,
                Some(n) => n,
                None => default_limit,
            };
            tc.destination_recipient_limit =
                u32_of(t.int("default_destination_recipient_limit")).max(1);
            tc.initial_destination_concurrency =
                u32_of(t.int("initial_destination_concurrency")).max(1);
            tc.destination_concurrency_limit =
                u32_of(t.int("default_destination_concurrency_limit"));
            tc.positive_feedback =
                feedback(t.feedback("default_destination_concurrency_positive_feedback"));
            tc.negative_feedback =
                feedback(t.feedback("default_destination_concurrency_negative_feedback"));
            tc.failed_cohort_limit =
                t.int("default_destination_concurrency_failed_cohort_limit") as f64;
            tc.dead_while_delivering = t.bool("default_destination_dead_while_delivering");
            let th = t.ints("sender_class_thresholds");
            if th.len() == 2 {
                tc.sender_class_thresholds = [u32_of(th[0]), u32_of(th[1])];
            }
            tc.scheduler_class_key = match t.choice("scheduler_class_key") {
                "sender_domain" => ClassKey::SenderDomain,
                "tenant" => ClassKey::Tenant,
                "size" => ClassKey::Size,
                _ => ClassKey::Sender,
            };
            tc.class_slot_reserve_recipients = u32_of(t.int("class_slot_reserve_recipients"));
            tc.connection_backlog_limit = u32_of(t.int("connection_backlog_limit")).max(1);
            tc.connection_cache_time_limit = t.time("connection_cache_time_limit");
            tc.connection_reuse_count_limit = u32_of(t.int("connection_reuse_count_limit"));
            tc.connection_reuse_time_limit = t.time("connection_reuse_time_limit");
            tc.recipient_limit = u32_of(t.int("default_recipient_limit")).max(1);
            tc.host_retry_time = t.time("host_retry_time");
            tc.transport_retry_time = t.time("transport_retry_time");
            tc.source_pool = smtp_param(cfg, &s, "smtp_source_pool");
            tc.bind_address = smtp_param(cfg, &s, "smtp_bind_address");
            tc
        })
        .collect();
    let shaping = policy(cfg)?;
    Ok(SchedConfig {
        transports,
        max_message_concurrency: u32_of(cfg.int("max_message_concurrency")).max(1),
        scale_max_concurrency: u32_of(cfg.int("scale_max_concurrency")),
        minimal_backoff_time: cfg.time("minimal_backoff_time").max(Duration::from_secs(1)),
        maximal_backoff_time: cfg.time("maximal_backoff_time").max(Duration::from_secs(1)),
        maximal_queue_lifetime: cfg.time("maximal_queue_lifetime"),
        qmgr_message_active_limit: u32_of(cfg.int("qmgr_message_active_limit")).max(1),
        qmgr_message_recipient_limit: u32_of(cfg.int("qmgr_message_recipient_limit")).max(1),
        qmgr_message_recipient_minimum: u32_of(cfg.int("qmgr_message_recipient_minimum")).max(1),
        feedback_debug: cfg.bool("destination_concurrency_feedback_debug"),
        seed,
        shaping,
        ..SchedConfig::default()
    })
}

/// A reload's new configuration, from main.cf and master.cf as read
/// again (`master_cf`), as the event that puts it in force; or, when
/// either is wrong, the warning that says so, and the running
/// configuration stays: qmgr reloads in place (it holds the active queue,
/// and new parameter values are not worth the journal replay a restart
/// costs), so a bad file must not take it down.
pub fn reconfigure(
    cfg: &Config,
    master_cf: Result<Vec<ServiceDef>, config::ConfigError>,
    seed: u64,
) -> Result<crate::Event, String> {
    let keep = |e: String| format!("reload: {e}; keeping the running configuration");
    let services = master_cf.map_err(|e| keep(e.to_string()))?;
    let sched = build(cfg, &services, seed).map_err(keep)?;
    let settings = crate::Settings::from_config(cfg, &sched);
    Ok(crate::Event::Reconfigure {
        settings: Box::new(settings),
        sched: Box::new(sched),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::parse_master_cf;

    #[test]
    fn a_reload_with_a_bad_file_keeps_the_running_configuration() {
        let master = "smtp unix - - n - - smtp\nrelay unix - - n - - smtp\n";
        let services = parse_master_cf(master, Path::new("master.cf")).unwrap();
        let cfg = Config::parse("", Path::new("main.cf"), &[]).unwrap().config;
        match reconfigure(&cfg, Ok(services), 1) {
            Ok(crate::Event::Reconfigure { sched, .. }) => {
                let names: Vec<&str> = sched.transports.iter().map(|t| t.name.as_str()).collect();
                assert_eq!(names, ["smtp", "relay"]);
            }
            other => panic!("{other:?}"),
        }
        let bad = parse_master_cf("smtp unix - - n - - \n", Path::new("master.cf"));
        let e = reconfigure(&cfg, bad, 1).unwrap_err();
        assert!(e.starts_with("reload: master.cf"), "{e}");
        assert!(e.ends_with("; keeping the running configuration"), "{e}");
        let policy = Config::parse(
            "policy_file = /nonexistent/policy\n",
            Path::new("main.cf"),
            &[],
        )
        .unwrap()
        .config;
        let e = reconfigure(&policy, Ok(Vec::new()), 1).unwrap_err();
        assert!(e.contains("/nonexistent/policy"), "{e}");
        assert!(e.ends_with("; keeping the running configuration"), "{e}");
    }

    fn sched_of(main_cf: &str) -> Result<SchedConfig, config::ConfigError> {
        let master = "smtp unix - - n - - smtp\nrelay unix - - n - - smtp\n";
        let services = parse_master_cf(master, Path::new("master.cf")).unwrap();
        let names: Vec<String> = services.iter().map(|s| s.name.clone()).collect();
        let cfg = Config::parse(main_cf, Path::new("main.cf"), &names)?.config;
        Ok(build(&cfg, &services, 1).unwrap())
    }

    #[test]
    fn class_slot_reserve_recipients_per_transport() {
        let c = sched_of("").unwrap();
        assert_eq!(c.transports[0].class_slot_reserve_recipients, 10);
        let c = sched_of(
            "class_slot_reserve_recipients = 25\nrelay_class_slot_reserve_recipients = 0\n",
        )
        .unwrap();
        assert_eq!(c.transports[0].name, "smtp");
        assert_eq!(c.transports[0].class_slot_reserve_recipients, 25);
        assert_eq!(c.transports[1].class_slot_reserve_recipients, 0, "0: never");
        match sched_of("\nclass_slot_reserve_recipients = many\n") {
            Err(config::ConfigError::BadValue {
                file, line, param, ..
            }) => {
                assert_eq!(file, Path::new("main.cf"));
                assert_eq!(line, 2);
                assert_eq!(param, "class_slot_reserve_recipients");
            }
            other => panic!("{other:?}"),
        }
    }
}
