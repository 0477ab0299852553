//! `sluice check`: every problem with the configuration and the file
//! system that would stop or weaken the mail system, found in one run.
//!
//! Like `postfix check`, it does not stop at the first problem: it reports
//! each one on its own line (`sluice: error: …` or `sluice: warning: …`) and
//! exits 1 if any was an error, 0 otherwise.
//!
//! An error here is whatever would make a daemon exit at start or at its
//! first client: a bad value, a restriction list smtpd cannot build, a
//! lookup table that does not open or parse, smtpd's certificate or key
//! that does not load, the smtp agent's CA file when it verifies servers,
//! a master.cf command that does not exist, a policy file that does not
//! read (`FILE:LINE:COLUMN: what is wrong`) or lacks the source pool that
//! `smtp_source_pool` names. Each is named with its file, line and parameter, so that
//! `ExecStartPre=sluice check` stops a broken configuration before it runs.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use config::{Config, ServiceDef, ServiceKind};

#[derive(Default)]
struct Report {
    errors: usize,
    warnings: usize,
}

impl Report {
    fn error(&mut self, msg: impl std::fmt::Display) {
        eprintln!("sluice: error: {msg}");
        self.errors += 1;
    }
    fn warn(&mut self, msg: impl std::fmt::Display) {
        eprintln!("sluice: warning: {msg}");
        self.warnings += 1;
    }
}

/// Runs every check; returns the exit code.
pub fn check(dir: &Path) -> i32 {
    let mut r = Report::default();
    // Every mistake in master.cf, and the entries that are right checked
    // further.
    let (services, master_errors) = config::check_master_cf(&dir.join("master.cf"));
    for e in master_errors {
        r.error(e);
    }
    let names: Vec<String> = services.iter().map(|s| s.name.clone()).collect();
    // Every problem in main.cf, not only the first one a load stops at.
    let (errors, _) = Config::check_file(&dir.join("main.cf"), &names);
    for e in &errors {
        r.error(e);
    }
    let cfg = match Config::load_with_master(dir, &services) {
        Ok(l) => {
            for w in &l.warnings {
                r.warn(w);
            }
            Some(l.config)
        }
        Err(e) => {
            if errors.is_empty() {
                r.error(e);
            }
            // The rest checked all the same, on the values that are right
            // (the bad ones at their defaults), so that one bad value does
            // not hide the problems the later checks find.
            Config::load_for_check(dir, &services).ok().map(|l| {
                for w in &l.warnings {
                    r.warn(w);
                }
                l.config
            })
        }
    };
    check_config_files(dir, &mut r);
    if let Some(cfg) = &cfg {
        let owner = check_owner(cfg, &mut r);
        check_services(cfg, &services, &mut r);
        check_restrictions_and_tables(dir, cfg, &services, &mut r);
        check_queue(cfg, owner, &mut r);
        check_log(cfg, &mut r);
        check_policy(dir, cfg, &services, &mut r);
        check_cluster(dir, cfg, &services, &mut r);
    }
    if r.errors == 0 {
        println!("sluice: check: no errors, {} warning(s)", r.warnings);
        0
    } else {
        println!(
            "sluice: check: {} error(s), {} warning(s)",
            r.errors, r.warnings
        );
        1
    }
}

fn check_config_files(dir: &Path, r: &mut Report) {
    for f in ["main.cf", "master.cf"] {
        let p = dir.join(f);
        match std::fs::metadata(&p) {
            Ok(m) => {
                if m.permissions().mode() & 0o022 != 0 {
                    r.error(format!("{}: writable by group or others (mode {:o}): anyone could reconfigure the mail system",
                        p.display(), m.permissions().mode() & 0o7777));
                }
                if sys::is_root() && m.uid() != 0 {
                    r.warn(format!(
                        "{}: owned by uid {}, not root",
                        p.display(),
                        m.uid()
                    ));
                }
            }
            Err(e) => r.error(format!("{}: {e}", p.display())),
        }
    }
}

fn check_owner(cfg: &Config, r: &mut Report) -> Option<sys::privilege::Identity> {
    let name = cfg.str("mail_owner");
    match sys::privilege::lookup_user(&name) {
        Ok(Some(u)) if u.uid == 0 => {
            r.error(format!(
                "mail_owner {name} has uid 0: it must be a dedicated unprivileged user"
            ));
            None
        }
        Ok(Some(u)) => Some(u),
        Ok(None) if sys::is_root() => {
            r.error(format!("mail_owner {name}: no such user (create it, e.g. `adduser --system --group {name}`)"));
            None
        }
        Ok(None) => {
            r.warn(format!(
                "mail_owner {name}: no such user (needed only when started as root)"
            ));
            None
        }
        Err(e) => {
            r.error(format!("mail_owner {name}: {e}"));
            None
        }
    }
}

fn check_services(cfg: &Config, services: &[ServiceDef], r: &mut Report) {
    let daemon_dir = Path::new(&cfg.str("daemon_directory")).to_path_buf();
    if !daemon_dir.is_dir() {
        r.error(format!(
            "daemon_directory {}: not a directory",
            daemon_dir.display()
        ));
    }
    let master = daemon_dir.join("master");
    if !is_executable(&master) {
        r.error(format!("{}: missing or not executable", master.display()));
    }
    let mut seen = std::collections::BTreeMap::new();
    for s in services {
        let cmd = daemon_dir.join(&s.command);
        if !is_executable(&cmd) {
            r.error(format!(
                "{}: command {} is missing or not executable",
                service_at(cfg, s),
                cmd.display()
            ));
        }
        if s.kind == ServiceKind::Inet {
            match config::inet_addresses(s, cfg) {
                Ok(addrs) => {
                    for a in addrs {
                        if let Some(other) = seen.insert(a, s.name.clone()) {
                            r.error(format!(
                                "{} listens on {a}, as service {other} does",
                                service_at(cfg, s)
                            ));
                        }
                    }
                }
                Err(e) => r.error(e),
            }
        }
        for (k, v) in &s.overrides {
            let mut c = cfg.clone();
            if let Err(e) = c.set_override(k, v) {
                r.error(format!("{}: -o {k}={v}: {e}", service_at(cfg, s)));
            }
        }
    }
}

/// A master.cf entry, as the start of a message: the file's full path,
/// the line and the service.
fn service_at(cfg: &Config, s: &ServiceDef) -> String {
    let master = Path::new(&cfg.str("config_directory")).join("master.cf");
    format!("{}, line {}: service {}", master.display(), s.line, s.name)
}

/// Where `param`'s value comes from, as the start of a message.
fn origin(dir: &Path, cfg: &Config, param: &str) -> String {
    match cfg.origin(param) {
        Some((file, line)) if line > 0 => format!("{}, line {line}", file.display()),
        Some((file, _)) => file.display().to_string(),
        None => format!("{} (default value)", dir.join("main.cf").display()),
    }
}

/// smtpd's restriction lists and certificate, and every lookup table:
/// main.cf's values, then each master.cf service's `-o` overrides of them.
fn check_restrictions_and_tables(
    dir: &Path,
    cfg: &Config,
    services: &[ServiceDef],
    r: &mut Report,
) {
    let map_params: Vec<&'static str> = Config::params()
        .filter(|p| p.ty == config::ParamType::MapRef)
        .map(|p| p.name)
        .collect();
    for list in policy::LISTS {
        check_restriction_list(cfg, list, &origin(dir, cfg, list), r);
    }
    // qmgr's own check at start: the cache is a text file, not a table.
    if let Err(e) = queue_manager::verify_map_path(Path::new(""), &cfg.str("address_verify_map")) {
        r.error(format!("{}: {e}", origin(dir, cfg, "address_verify_map")));
    }
    for code in policy::UNVERIFIED_CODES
        .into_iter()
        .chain(policy::ACCESS_CODES)
    {
        if let Err(e) = policy::reply_code(cfg, code) {
            r.error(format!(
                "{}: parameter \"{code}\": {}",
                origin(dir, cfg, code),
                e.message
            ));
        }
    }
    for param in &map_params {
        check_maps(cfg, param, &origin(dir, cfg, param), r);
    }
    // luser_relay is expanded by local(8) per recipient: a name it does
    // not know expands to nothing there (as in Postfix), so say so here.
    for name in config::references(&cfg.str("luser_relay")) {
        if !LUSER_RELAY_NAMES.contains(&name.as_str()) {
            r.warn(format!(
                "{}: parameter \"luser_relay\": unknown name \"${name}\" expands to nothing (local(8) knows {})",
                origin(dir, cfg, "luser_relay"),
                LUSER_RELAY_NAMES.join(", ")
            ));
        }
    }
    // An error transport's status, as the router reads it at start.
    for param in ["local_transport", "relay_transport", "default_transport"] {
        if let Err(e) = route::check_transport(&cfg.str(param)) {
            r.error(format!(
                "{}: parameter \"{param}\": {e}",
                origin(dir, cfg, param)
            ));
        }
    }
    // The keys, read as cleanup reads them at start.
    if let Err(e) = dkim::Keys::open(&cfg.maps("dkim_signing_table"), &cfg.maps("dkim_key_table")) {
        r.error(format!("{}: {e}", origin(dir, cfg, "dkim_key_table")));
    }
    let check_tls = |c: &Config, at: &str, r: &mut Report| {
        if let Err(e) = smtpd_tls(c) {
            r.error(format!("{at}: {e}"));
        }
    };
    if services
        .iter()
        .any(|s| s.command == "smtpd" && s.overrides.is_empty())
    {
        check_tls(cfg, &origin(dir, cfg, "smtpd_tls_cert_file"), r);
    }
    for s in services.iter().filter(|s| s.command == "smtp") {
        let mut c = cfg.clone();
        if s.overrides
            .iter()
            .all(|(k, v)| c.set_override(k, v).is_ok())
        {
            if let Err(e) = smtp_trust_anchors(&c, &s.name) {
                r.error(format!("{}: {e}", service_at(cfg, s)));
            }
        }
    }
    for s in services {
        if s.overrides.is_empty() {
            continue;
        }
        let mut c = cfg.clone();
        // A bad override is reported by check_services.
        if s.overrides
            .iter()
            .any(|(k, v)| c.set_override(k, v).is_err())
        {
            continue;
        }
        if s.command == "smtpd" {
            check_tls(&c, &service_at(cfg, s), r);
        }
        for (k, _) in &s.overrides {
            let at = format!("{}: -o {k}", service_at(cfg, s));
            if policy::LISTS.contains(&k.as_str()) {
                check_restriction_list(&c, k, &at, r);
            } else if map_params.contains(&k.as_str()) {
                check_maps(&c, k, &at, r);
            }
        }
    }
}

/// smtpd's certificate and key, loaded as smtpd loads them at start
/// when TLS is on.
fn smtpd_tls(cfg: &Config) -> Result<(), String> {
    let level = cfg.choice("smtpd_tls_security_level");
    if level == "none" && !cfg.bool("smtpd_tls_wrappermode") {
        return Ok(());
    }
    let cert = cfg.str("smtpd_tls_cert_file");
    if cert.is_empty() {
        return Err(format!(
            "parameter \"smtpd_tls_security_level\": {level} needs smtpd_tls_cert_file"
        ));
    }
    let key = cfg.str("smtpd_tls_key_file");
    tls::load_server_config(cert.as_ref(), key.as_ref())
        .map(drop)
        .map_err(|e| format!("parameter \"smtpd_tls_cert_file\": {e}"))
}

/// The smtp agent's CA file, which it cannot start without when the
/// service's TLS level verifies certificates (smtp(8)).
fn smtp_trust_anchors(cfg: &Config, service: &str) -> Result<(), String> {
    let t = cfg.transport(service);
    let level = t.choice("smtp_tls_security_level");
    if level != "verify" && level != "secure" {
        return Ok(());
    }
    let file = t.str("smtp_tls_CAfile");
    let path = if file.is_empty() {
        tls::SYSTEM_CA_FILE.to_string()
    } else {
        file
    };
    tls::load_trust_anchors(Path::new(&path))
        .map(drop)
        .map_err(|e| {
            format!(
                "parameter \"smtp_tls_CAfile\": {e} (needed by smtp_tls_security_level = {level})"
            )
        })
}

/// One restriction list as smtpd builds it, and the access tables it names.
fn check_restriction_list(cfg: &Config, list: &str, at: &str, r: &mut Report) {
    match policy::parse_list(&cfg.str(list)) {
        Ok(items) => {
            for item in items {
                if let policy::Restriction::CheckClientAccess(m)
                | policy::Restriction::CheckSenderAccess(m)
                | policy::Restriction::CheckRecipientAccess(m) = item
                {
                    if let Err(e) = tables::Table::open(&m) {
                        r.error(format!("{at}: parameter \"{list}\": {e}"));
                    }
                }
            }
        }
        Err(e) => r.error(format!("{at}: parameter \"{list}\": {}", e.message)),
    }
}

/// The tables the router (and local(8), for alias_maps) open tolerantly:
/// one that cannot be read defers mail instead of stopping the program.
const ROUTER_MAPS: &[&str] = &[
    "alias_maps",
    "local_recipient_maps",
    "virtual_alias_maps",
    "canonical_maps",
    "sender_canonical_maps",
    "recipient_canonical_maps",
    "transport_maps",
];

/// The names local(8) expands in luser_relay (bin/local/src/luser.rs).
const LUSER_RELAY_NAMES: &[&str] = &[
    "user",
    "extension",
    "domain",
    "local",
    "recipient",
    "recipient_delimiter",
    "home",
    "shell",
];

/// Every table of a `type:table` list parameter.
fn check_maps(cfg: &Config, param: &str, at: &str, r: &mut Report) {
    // transport_maps' values are checked as the router checks them.
    let check: tables::Check<'_> = match param {
        "transport_maps" => &route::check_transport,
        // Their actions, as cleanup reads them at start.
        "header_checks" => &tables::actions::check_header_action,
        "mime_header_checks" | "nested_header_checks" => {
            // Left at $header_checks: the same tables, reported there.
            if cfg.maps(param) == cfg.maps("header_checks") {
                return;
            }
            &tables::actions::check_header_action
        }
        "body_checks" => &tables::actions::check_body_action,
        _ => &|_| Ok(()),
    };
    let aliases = cfg.maps("alias_maps");
    for m in cfg.maps(param) {
        match tables::Table::open_checked(&m, check) {
            Ok(t) => {
                for w in t.warnings() {
                    r.warn(format!("{at}: parameter \"{param}\": {w}"));
                }
            }
            // local_recipient_maps names $alias_maps: the alias_maps line
            // is the one to fix, and its own check reports it there.
            Err(_) if param == "local_recipient_maps" && aliases.contains(&m) => {}
            // The router opens these as Postfix's surrogate tables: a file
            // it cannot read defers the mail whose lookup needs it, and
            // other mail flows; local(8) defers mail for local users.
            Err(e)
                if ROUTER_MAPS.contains(&param)
                    && matches!(e.problem, tables::TableProblem::Io(_)) =>
            {
                let who = match param {
                    "alias_maps" | "local_recipient_maps" => "local recipients are",
                    _ => "mail that needs it is",
                };
                r.warn(format!(
                    "{at}: parameter \"{param}\": {e} ({who} deferred until it can be read and sluice reload)"
                ))
            }
            Err(e) => r.error(format!("{at}: parameter \"{param}\": {e}")),
        }
    }
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

fn check_queue(cfg: &Config, owner: Option<sys::privilege::Identity>, r: &mut Report) {
    let queue = Path::new(&cfg.str("queue_directory")).to_path_buf();
    let meta = match std::fs::symlink_metadata(&queue) {
        Ok(m) => m,
        Err(_) => {
            r.warn(format!(
                "queue_directory {}: does not exist yet; master creates it at start",
                queue.display()
            ));
            return;
        }
    };
    if !meta.is_dir() {
        r.error(format!(
            "queue_directory {}: not a directory",
            queue.display()
        ));
        return;
    }
    if meta.permissions().mode() & 0o002 != 0 {
        r.error(format!(
            "queue_directory {}: world-writable",
            queue.display()
        ));
    }
    let root = sys::is_root();
    if root && meta.uid() != 0 {
        r.warn(format!(
            "queue_directory {}: owned by uid {}, not root",
            queue.display(),
            meta.uid()
        ));
    }
    for (sub, mode) in [("private", 0o700), ("public", 0o755), ("pid", 0o755)] {
        let p = queue.join(sub);
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            r.warn(format!(
                "{}: missing; master creates it at start",
                p.display()
            ));
            continue;
        };
        if !m.is_dir() {
            r.error(format!("{}: not a directory", p.display()));
            continue;
        }
        let actual = m.permissions().mode() & 0o7777;
        if actual & 0o002 != 0 {
            r.error(format!("{}: world-writable (mode {actual:o})", p.display()));
        } else if sub == "private" && actual & 0o077 != 0 {
            r.error(format!("{}: mode {actual:o}, should be {mode:o}: other users could reach internal services",
                p.display()));
        }
        if root && sub != "pid" {
            if let Some(o) = &owner {
                if m.uid() != o.uid {
                    r.error(format!(
                        "{}: owned by uid {}, should be mail_owner {} (uid {})",
                        p.display(),
                        m.uid(),
                        o.name,
                        o.uid
                    ));
                }
            }
        }
    }
}

fn check_log(cfg: &Config, r: &mut Report) {
    let file = cfg.str("maillog_file");
    if file.is_empty() {
        return;
    }
    let p = Path::new(&file);
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.is_dir() => r.error(format!(
            "maillog_file {file}: directory {} does not exist",
            d.display()
        )),
        _ => {}
    }
    if !p.is_absolute() {
        r.warn(format!("maillog_file {file}: not an absolute path; it is opened relative to each daemon's directory"));
    }
}

/// The policy file, read as qmgr reads it, and the source pools that main.cf
/// and master.cf's `-o` overrides name in it.
fn check_policy(dir: &Path, cfg: &Config, services: &[ServiceDef], r: &mut Report) {
    let mut pools = vec![(
        origin(dir, cfg, "smtp_source_pool"),
        cfg.str("smtp_source_pool"),
    )];
    for s in services {
        for (k, v) in &s.overrides {
            if k == "smtp_source_pool" {
                pools.push((service_at(cfg, s), v.clone()));
            }
        }
    }
    pools.retain(|(_, pool)| !pool.is_empty());
    let file = cfg.str("policy_file");
    if file.is_empty() {
        for (at, pool) in pools {
            r.error(format!(
                "{at}: smtp_source_pool {pool}: no policy_file is set to define it"
            ));
        }
        return;
    }
    let path = dir.join(&file);
    match shaping::Policy::load(&path) {
        Err(e) => r.error(e),
        Ok(policy) => {
            for (at, pool) in pools {
                if policy.source(&pool).is_none() {
                    r.error(format!(
                        "{at}: smtp_source_pool {pool}: {} has no such id under sources:",
                        path.display()
                    ));
                }
            }
        }
    }
}

/// The cluster link's certificates, loaded as clusterd (`cluster_listen`,
/// when master.cf runs it), transferd (`transfer_listen`) and qmgr
/// (`cluster_server`) load them.
fn check_cluster(dir: &Path, cfg: &Config, services: &[ServiceDef], r: &mut Report) {
    // transferd (transfer_listen) serves on the same certificates.
    let transfers = !cfg.str("transfer_listen").is_empty();
    if transfers && !services.iter().any(|s| s.command == "transferd") {
        r.warn(format!(
            "{}: transfer_listen is set but master.cf runs no transferd: nothing takes moved mail",
            origin(dir, cfg, "transfer_listen")
        ));
    }
    let coordinates = services.iter().any(|s| s.command == "clusterd");
    let serves = coordinates || transfers;
    let links = !cfg.str("cluster_server").is_empty();
    if coordinates && cfg.str("cluster_listen").is_empty() {
        r.error(format!(
            "{}: master.cf runs clusterd but cluster_listen is empty",
            origin(dir, cfg, "cluster_listen")
        ));
    }
    if !serves && !links {
        return;
    }
    let files: Vec<(&str, String)> = [
        "cluster_tls_cert_file",
        "cluster_tls_key_file",
        "cluster_tls_CAfile",
    ]
    .iter()
    .map(|p| (*p, cfg.str(p)))
    .collect();
    if let Some((p, _)) = files.iter().find(|(_, v)| v.is_empty()) {
        r.error(format!(
            "{}: {p} is empty: the cluster link is mutual TLS only",
            origin(dir, cfg, p)
        ));
        return;
    }
    let (cert, key, ca) = (&files[0].1, &files[1].1, &files[2].1);
    let loaded = if serves {
        tls::mutual_server_config(cert.as_ref(), key.as_ref(), ca.as_ref()).map(drop)
    } else {
        tls::mutual_client_config(cert.as_ref(), key.as_ref(), ca.as_ref()).map(drop)
    };
    if let Err(e) = loaded {
        r.error(format!(
            "{}: {e}",
            origin(dir, cfg, "cluster_tls_cert_file")
        ));
    }
    if links && cfg.str("policy_file").is_empty() {
        r.warn(format!(
            "{}: cluster_server is set but no policy_file is: there is nothing to share",
            origin(dir, cfg, "cluster_server")
        ));
    }
}
