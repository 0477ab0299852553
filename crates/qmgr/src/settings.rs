//! The queue manager's parameters, from main.cf and the scheduler's
//! configuration: what `myorigin` qualifies, the floors Postfix puts on
//! them, and where `address_verify_map` keeps the cache. A bad value is
//! refused by name (the config crate checks types; this, the meanings).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::VerifySettings;

/// The parameters of main.cf that the queue logic follows.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Transports that have a delivery agent in master.cf (none: mail stays queued).
    pub transports: BTreeSet<String>,
    /// `defer_transports`: mail for these waits for a flush.
    pub defer_transports: BTreeSet<String>,
    /// `qmgr_message_active_limit`.
    pub active_limit: usize,
    /// `queue_run_delay`: the wait of a message that left delivery with nothing due.
    pub run_delay: Duration,
    /// `delay_warning_time` (zero: never).
    pub delay_warning: Duration,
    /// `maximal_queue_lifetime`, for a warning's Will-Retry-Until.
    pub lifetime: Duration,
    /// `myhostname`, for notices.
    pub hostname: String,
    /// `myorigin`.
    pub origin: String,
    /// `2bounce_notice_recipient`, qualified.
    pub postmaster: String,
    /// `double_bounce_sender@$myhostname`: the sender of notices to the
    /// postmaster, whose own failures are only logged.
    pub double_bounce: String,
    /// `notify_classes` has `bounce` or `2bounce`: a notice that fails is
    /// reported to `postmaster` (else dropped, Postfix's default).
    pub notify_postmaster_of_bounces: bool,
    /// `bounce_notice_recipient` when `notify_classes` has `bounce`: it
    /// gets a copy (headers only) of every non-delivery notice.
    pub bounce_copy_to: Option<String>,
    /// `delay_notice_recipient` when `notify_classes` has `delay`: it gets
    /// a copy (headers only) of every delay warning.
    pub delay_copy_to: Option<String>,
    /// `bounce_size_limit`: a larger original is returned in its notice
    /// as headers only (0: whole whatever its size).
    pub bounce_size_limit: u64,
    /// Waiting messages are admitted in turn by sender (false: in arrival
    /// order, the baseline the simulator compares with).
    pub admission_by_sender: bool,
    /// Address verification: the cache and the probes' limits.
    pub verify: VerifySettings,
    /// `soft_bounce`: a permanent failure defers the recipient instead.
    pub soft_bounce: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            transports: BTreeSet::new(),
            defer_transports: BTreeSet::new(),
            active_limit: 20_000,
            run_delay: Duration::from_secs(300),
            delay_warning: Duration::ZERO,
            lifetime: Duration::from_secs(5 * 86400),
            hostname: "localhost".into(),
            origin: "localhost".into(),
            postmaster: "postmaster@localhost".into(),
            double_bounce: "double-bounce@localhost".into(),
            notify_postmaster_of_bounces: false,
            bounce_copy_to: None,
            delay_copy_to: None,
            bounce_size_limit: 50_000,
            admission_by_sender: true,
            verify: VerifySettings::default(),
            soft_bounce: false,
        }
    }
}

impl Settings {
    /// The parameters of `config`, for the transports `sched` has.
    pub fn from_config(config: &config::Config, sched: &sched::SchedConfig) -> Self {
        let origin = config.str("myorigin");
        // A bare name is qualified with myorigin, as Postfix's cleanup
        // qualifies the notice's recipient.
        let qualified = |name: &str| {
            let v = config.str(name);
            if v.contains('@') {
                v
            } else {
                format!("{v}@{origin}")
            }
        };
        let postmaster = qualified("2bounce_notice_recipient");
        let classes = config.list("notify_classes");
        let class = |c: &str| classes.iter().any(|x| x.eq_ignore_ascii_case(c));
        let bounce_copy_to = class("bounce").then(|| qualified("bounce_notice_recipient"));
        let delay_copy_to = class("delay").then(|| qualified("delay_notice_recipient"));
        // Postfix's mail_addr_double_bounce: qualified with myhostname.
        let db = config.str("double_bounce_sender");
        let double_bounce = if db.contains('@') {
            db
        } else {
            format!("{db}@{}", config.str("myhostname"))
        };
        Settings {
            transports: sched.transports.iter().map(|t| t.name.clone()).collect(),
            defer_transports: config.list("defer_transports").into_iter().collect(),
            active_limit: sched.qmgr_message_active_limit as usize,
            run_delay: config.time("queue_run_delay").max(Duration::from_secs(1)),
            delay_warning: config.time("delay_warning_time"),
            lifetime: config.time("maximal_queue_lifetime"),
            hostname: config.str("myhostname"),
            origin,
            postmaster,
            double_bounce,
            notify_postmaster_of_bounces: class("bounce") || class("2bounce"),
            bounce_copy_to,
            delay_copy_to,
            bounce_size_limit: config.size("bounce_size_limit"),
            admission_by_sender: true,
            verify: VerifySettings::from_config(config),
            soft_bounce: config.bool("soft_bounce"),
        }
    }
}

impl VerifySettings {
    /// The address verification parameters of `config` (the cache's and
    /// the probes'); limits of 0 are taken as 1.
    pub fn from_config(config: &config::Config) -> Self {
        let origin = config.str("myorigin");
        let sender = config.str("address_verify_sender");
        let sender = match sender.trim() {
            "" | "<>" => String::new(),
            s if s.contains('@') => s.to_string(),
            s => format!("{s}@{origin}"),
        };
        let count = |name: &str| usize::try_from(config.int(name)).unwrap_or(0);
        VerifySettings {
            positive_expire: config.time("address_verify_positive_expire_time"),
            positive_refresh: config.time("address_verify_positive_refresh_time"),
            negative_expire: config.time("address_verify_negative_expire_time"),
            negative_refresh: config.time("address_verify_negative_refresh_time"),
            negative_cache: config.bool("address_verify_negative_cache"),
            cache_limit: count("address_verify_cache_limit").max(1),
            pending_limit: count("address_verify_pending_limit").max(1),
            concurrency_limit: count("address_verify_concurrency_limit").max(1),
            rate_limit: u32::try_from(config.int("address_verify_rate_limit")).unwrap_or(0),
            sender,
        }
    }
}

/// Where `address_verify_map` keeps the cache: `value` under the queue
/// directory `root` when relative; `Ok(None)` when empty (kept in memory
/// only). A Postfix `type:name` value is refused: the file is Sluice's own
/// text, not a table.
pub fn verify_map_path(root: &Path, value: &str) -> Result<Option<PathBuf>, String> {
    let v = value.trim();
    if let Some((kind, _)) = v.split_once(':').filter(|(k, _)| !k.contains('/')) {
        return Err(format!(
            "address_verify_map = {v}: a file name, not a {kind}: table (Sluice keeps the cache as text)"
        ));
    }
    Ok((!v.is_empty()).then(|| root.join(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings_of(main_cf: &str) -> Settings {
        let cfg = config::Config::parse(main_cf, Path::new("main.cf"), &[])
            .unwrap()
            .config;
        Settings::from_config(&cfg, &sched::SchedConfig::default())
    }

    #[test]
    fn bare_names_are_qualified_by_myorigin() {
        let s = settings_of(
            "myorigin = example.org\n2bounce_notice_recipient = hostmaster\naddress_verify_sender = probe\n",
        );
        assert_eq!(s.postmaster, "hostmaster@example.org");
        assert_eq!(s.verify.sender, "probe@example.org");
        let s = settings_of(
            "myorigin = example.org\n2bounce_notice_recipient = pm@example.net\naddress_verify_sender = <>\n",
        );
        assert_eq!(s.postmaster, "pm@example.net");
        assert_eq!(s.verify.sender, "", "the null sender");
    }

    #[test]
    fn postmaster_copies_follow_notify_classes() {
        let s = settings_of("myorigin = example.org\n");
        assert_eq!((s.bounce_copy_to, s.delay_copy_to), (None, None));
        assert!(!s.notify_postmaster_of_bounces);
        let s = settings_of(
            "myorigin = example.org\nnotify_classes = bounce, delay\ndelay_notice_recipient = ops@example.net\n",
        );
        assert_eq!(s.bounce_copy_to.as_deref(), Some("postmaster@example.org"));
        assert_eq!(s.delay_copy_to.as_deref(), Some("ops@example.net"));
        assert!(s.notify_postmaster_of_bounces);
    }

    #[test]
    fn floors_apply_to_zero_values() {
        let s = settings_of(
            "queue_run_delay = 0s\naddress_verify_cache_limit = 0\naddress_verify_pending_limit = 0\naddress_verify_concurrency_limit = 0\n",
        );
        assert_eq!(s.run_delay, Duration::from_secs(1));
        assert_eq!(
            (
                s.verify.cache_limit,
                s.verify.pending_limit,
                s.verify.concurrency_limit
            ),
            (1, 1, 1)
        );
    }

    #[test]
    fn the_verify_map_is_a_file_under_the_queue_directory() {
        let root = Path::new("/var/spool/sluice");
        assert_eq!(
            verify_map_path(root, "state/verify_cache").unwrap(),
            Some(root.join("state/verify_cache"))
        );
        assert_eq!(
            verify_map_path(root, "/srv/cache").unwrap(),
            Some(PathBuf::from("/srv/cache"))
        );
        assert_eq!(verify_map_path(root, " ").unwrap(), None);
        let e = verify_map_path(root, "btree:/var/lib/postfix/verify_cache").unwrap_err();
        assert!(e.contains("not a btree: table"), "{e}");
        assert!(
            verify_map_path(root, "./a:b").is_ok(),
            "a colon after a slash is a file's"
        );
    }
}
