//! smtpd's settings, read from main.cf once at start and on reload.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use config::Config;
use smtp_proto::receiver::BareNewline;
use smtp_proto::server::{ServerConfig, TlsPolicy, VrfyMode};

/// Everything a session needs that comes from main.cf.
pub struct Settings {
    /// The protocol engine's settings.
    pub proto: Arc<ServerConfig>,
    /// The access policy.
    pub policy: policy::Policy,
    /// The lookup tables it names, compiled.
    pub tables: Tables,
    /// `smtpd_timeout`.
    pub timeout: Duration,
    /// `smtpd_router_timeout`.
    pub router_timeout: Duration,
    /// How long qmgr may hold a verification answer for a probe's result:
    /// (`address_verify_poll_count` - 1) x `address_verify_poll_delay`.
    pub verify_wait: Duration,
    /// `smtpd_anvil_timeout`.
    pub anvil_timeout: Duration,
    /// `smtpd_cleanup_timeout`.
    pub cleanup_timeout: Duration,
    /// `ipc_idle`: how long an unused link to cleanup is kept.
    pub ipc_idle: Duration,
    /// `queue_minfree`.
    pub queue_minfree: u64,
    /// `smtpd_per_record_deadline`: the timeout restarts only when a record
    /// (a line, or `record_len` bytes of one) is complete, not on every byte.
    pub per_record: bool,
    /// The longest record: `line_length_limit`, as Postfix's reads split lines.
    pub record_len: usize,
    /// `smtpd_client_connection_count_limit` (0 = none).
    pub conn_count_limit: u32,
    /// `smtpd_client_connection_rate_limit` (0 = none).
    pub conn_rate_limit: u32,
    /// `smtpd_client_message_rate_limit` (0 = none).
    pub msg_rate_limit: u32,
    /// `smtpd_client_recipient_rate_limit` (0 = none).
    pub rcpt_rate_limit: u32,
    /// `smtpd_client_event_limit_exceptions`.
    pub limit_exceptions: Vec<config::Cidr>,
    /// `message_size_limit`.
    pub size_limit: u64,
    /// Implicit TLS (`smtpd_tls_wrappermode`).
    pub wrapper: bool,
    /// Where the queue's sockets are, as seen by this process (inside a chroot: `/`).
    pub queue_root: PathBuf,
    /// `anvil_rate_time_unit`, for log lines.
    pub rate_unit: Duration,
    /// SASL AUTH, when `smtpd_sasl_auth_enable = yes`.
    pub sasl: Option<SaslSettings>,
    /// `smtpd_upstream_proxy_timeout`, when `smtpd_upstream_proxy_protocol = haproxy`.
    pub proxy: Option<Duration>,
    /// `smtpd_milters` and their settings, when there are any.
    pub milters: Option<Arc<milter::net::Settings>>,
    /// `smtpd_sasl_authenticated_header`.
    pub sasl_header: bool,
    /// `myorigin`: the domain of an unqualified VRFY argument.
    pub myorigin: String,
}

/// Where and how AUTH is checked.
pub struct SaslSettings {
    /// Dovecot's auth socket (`smtpd_sasl_path`, under the queue directory when relative).
    pub path: PathBuf,
    /// `smtpd_sasl_timeout`.
    pub timeout: Duration,
    /// `smtpd_sasl_security_options`.
    pub options: crate::sasl::SecurityOptions,
    /// `smtpd_client_auth_rate_limit` (0 = none).
    pub auth_rate_limit: u32,
}

/// Reads the certificate and key named in main.cf (needs privileges).
pub fn load_tls(cfg: &Config) -> Result<Option<Arc<rustls::ServerConfig>>, String> {
    let level = cfg.choice("smtpd_tls_security_level");
    let wrapper = cfg.bool("smtpd_tls_wrappermode");
    if level == "none" && !wrapper {
        return Ok(None);
    }
    let cert = cfg.str("smtpd_tls_cert_file");
    let key = cfg.str("smtpd_tls_key_file");
    if cert.is_empty() {
        return Err(format!(
            "smtpd_tls_security_level = {level}{} needs smtpd_tls_cert_file",
            if wrapper {
                " (or smtpd_tls_wrappermode = yes)"
            } else {
                ""
            }
        ));
    }
    tls::load_server_config(cert.as_ref(), key.as_ref())
        .map(Some)
        .map_err(|e| e.to_string())
}

/// What the TLS context built before privileges were dropped came from.
///
/// The key is readable only with privileges, so a running process cannot
/// rebuild the context: a reload that changes any of this retires the
/// process and master starts a fresh one that reads the new files, as
/// Postfix's `postfix reload` does for every daemon.
#[derive(Debug, PartialEq, Eq)]
pub struct TlsSource(Option<TlsFiles>);

/// The parameters and the files' identity behind an enabled TLS context.
#[derive(Debug, PartialEq, Eq)]
struct TlsFiles {
    wrapper: bool,
    cert: String,
    key: String,
    /// (device, inode, size, mtime in ns) of each file; None when this
    /// process cannot see it (chrooted), so a renewal cannot be ruled out.
    stamps: [Option<(u64, u64, u64, i128)>; 2],
}

impl TlsSource {
    /// Reads the TLS parameters of `cfg` and stats the files they name.
    pub fn of(cfg: &Config) -> TlsSource {
        let wrapper = cfg.bool("smtpd_tls_wrappermode");
        if cfg.choice("smtpd_tls_security_level") == "none" && !wrapper {
            return TlsSource(None);
        }
        let stamp = |path: &str| {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(path).ok()?;
            let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
            Some((m.dev(), m.ino(), m.size(), mtime))
        };
        let (cert, key) = (
            cfg.str("smtpd_tls_cert_file"),
            cfg.str("smtpd_tls_key_file"),
        );
        let stamps = [stamp(&cert), stamp(&key)];
        TlsSource(Some(TlsFiles {
            wrapper,
            cert,
            key,
            stamps,
        }))
    }

    /// Whether a context built from `self` is still the one `now` asks
    /// for: same parameters, and files known not to have changed.
    pub fn still(&self, now: &TlsSource) -> bool {
        match (&self.0, &now.0) {
            (None, None) => true,
            (Some(a), Some(b)) => a == b && a.stamps.iter().all(Option::is_some),
            _ => false,
        }
    }
}

/// Builds the settings; `chrooted` says whether paths are inside the queue directory.
pub fn build(cfg: &Config, tls_on: bool, chrooted: bool) -> Result<Settings, String> {
    let hostname = cfg.str("myhostname");
    let banner = cfg.str("smtpd_banner");
    let banner = banner
        .strip_prefix(&hostname)
        .map(|b| b.trim_start().to_string())
        .unwrap_or(banner);
    let tls = match cfg.choice("smtpd_tls_security_level") {
        "may" if tls_on => TlsPolicy::May,
        "encrypt" if tls_on => TlsPolicy::Encrypt,
        _ => TlsPolicy::None,
    };
    let bare_newline = match cfg.choice("smtpd_forbid_bare_newline") {
        "normalize" => BareNewline::Normalize,
        "no" => BareNewline::Allow,
        _ => BareNewline::Reject,
    };
    let size_limit = cfg.size("message_size_limit");
    let proto = ServerConfig {
        hostname: hostname.clone(),
        banner,
        max_command_line: cfg.int("line_length_limit").clamp(512, 1 << 20) as usize,
        max_recipients: cfg
            .int("smtpd_recipient_limit")
            .clamp(1, i64::from(u32::MAX)) as usize,
        max_message_size: size_limit,
        hard_error_limit: cfg
            .int("smtpd_hard_error_limit")
            .clamp(1, i64::from(u32::MAX)) as u32,
        soft_error_limit: cfg
            .int("smtpd_soft_error_limit")
            .clamp(0, i64::from(u32::MAX)) as u32,
        error_sleep: cfg.time("smtpd_error_sleep_time"),
        junk_command_limit: cfg
            .int("smtpd_junk_command_limit")
            .clamp(1, i64::from(u32::MAX)) as u32,
        tls,
        vrfy: if cfg.bool("disable_vrfy_command") {
            VrfyMode::Disabled502
        } else {
            VrfyMode::Ambiguous252
        },
        bare_newline,
        sasl: cfg.bool("smtpd_sasl_auth_enable"),
        tls_auth_only: cfg.bool("smtpd_tls_auth_only"),
        helo_required: cfg.bool("smtpd_helo_required"),
        soft_bounce: cfg.bool("soft_bounce"),
        // Milters hear commands smtpd does not know, as with Postfix.
        ask_unknown: !cfg.str("smtpd_milters").trim().is_empty(),
        ask_vrfy: true,
        ..ServerConfig::default()
    };
    let policy = policy::Policy::from_config(cfg).map_err(|e| e.to_string())?;
    let mut compiled = std::collections::BTreeMap::new();
    for m in policy.tables() {
        let t = tables::Table::open(&m).map_err(|e| e.to_string())?;
        compiled.insert(m.to_string(), t);
    }
    let tables = Tables(compiled);
    let queue_root = if chrooted {
        PathBuf::from("/")
    } else {
        PathBuf::from(cfg.str("queue_directory"))
    };
    let record_len = proto.max_command_line;
    let sasl = proto.sasl.then(|| SaslSettings {
        path: queue_root.join(cfg.str("smtpd_sasl_path")),
        timeout: cfg.time("smtpd_sasl_timeout"),
        options: crate::sasl::SecurityOptions::parse(&cfg.list("smtpd_sasl_security_options")),
        auth_rate_limit: cfg
            .int("smtpd_client_auth_rate_limit")
            .clamp(0, i64::from(u32::MAX)) as u32,
    });
    let milters =
        milter::net::Settings::from_config(cfg, "smtpd_milters", &queue_root, size_limit)?
            .map(Arc::new);
    Ok(Settings {
        proto: Arc::new(proto),
        policy,
        tables,
        timeout: cfg.time("smtpd_timeout"),
        router_timeout: cfg.time("smtpd_router_timeout"),
        verify_wait: cfg.time("address_verify_poll_delay").saturating_mul(
            u32::try_from(cfg.int("address_verify_poll_count").max(1) - 1).unwrap_or(0),
        ),
        anvil_timeout: cfg.time("smtpd_anvil_timeout"),
        cleanup_timeout: cfg.time("smtpd_cleanup_timeout"),
        ipc_idle: cfg.time("ipc_idle"),
        queue_minfree: cfg.size("queue_minfree"),
        per_record: cfg.bool("smtpd_per_record_deadline"),
        record_len,
        conn_count_limit: cfg
            .int("smtpd_client_connection_count_limit")
            .clamp(0, i64::from(u32::MAX)) as u32,
        conn_rate_limit: cfg
            .int("smtpd_client_connection_rate_limit")
            .clamp(0, i64::from(u32::MAX)) as u32,
        msg_rate_limit: cfg
            .int("smtpd_client_message_rate_limit")
            .clamp(0, i64::from(u32::MAX)) as u32,
        rcpt_rate_limit: cfg
            .int("smtpd_client_recipient_rate_limit")
            .clamp(0, i64::from(u32::MAX)) as u32,
        limit_exceptions: cfg.cidrs("smtpd_client_event_limit_exceptions"),
        size_limit,
        wrapper: cfg.bool("smtpd_tls_wrappermode"),
        queue_root,
        rate_unit: cfg.time("anvil_rate_time_unit"),
        sasl,
        proxy: (cfg.choice("smtpd_upstream_proxy_protocol") == "haproxy")
            .then(|| cfg.time("smtpd_upstream_proxy_timeout")),
        milters,
        sasl_header: cfg.bool("smtpd_sasl_authenticated_header"),
        myorigin: cfg.str("myorigin"),
    })
}

/// The access tables, compiled at start and on reload, answering the policy.
pub struct Tables(std::collections::BTreeMap<String, tables::Table>);

impl policy::Lookup for Tables {
    fn lookup(&self, table: &config::MapRef, key: &str) -> Result<Option<String>, String> {
        match self.0.get(&table.to_string()) {
            Some(t) => Ok(t.lookup(key)),
            None => Err(format!("table {table} is not open")),
        }
    }
}

/// What the policy consults: the compiled tables and the router's answer
/// about the recipient, fetched before the policy runs.
pub struct Lookups<'a> {
    /// Access tables.
    pub tables: &'a Tables,
    /// The router's answer, when `Policy::asks_router` said to ask.
    pub unlisted: Option<&'a crate::router::Answer>,
    /// What qmgr's address verification said, by address, for this RCPT.
    pub verified: &'a [(String, policy::VerifyState)],
}

impl policy::Lookup for Lookups<'_> {
    fn lookup(&self, table: &config::MapRef, key: &str) -> Result<Option<String>, String> {
        policy::Lookup::lookup(self.tables, table, key)
    }

    fn unlisted(&self, _recipient: &smtp_proto::Mailbox) -> Result<bool, Option<String>> {
        match self.unlisted {
            Some(answer) => answer.clone(),
            // The policy and smtpd share `asks_router`, so this is not
            // reached; if it were, a temporary refusal is the safe answer.
            None => Err(Some("the router was not asked".into())),
        }
    }

    fn verified(&self, address: &str) -> Option<policy::VerifyState> {
        self.verified
            .iter()
            .find(|(a, _)| a == address)
            .map(|(_, s)| s.clone())
    }
}
