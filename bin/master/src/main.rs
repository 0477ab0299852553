//! master(8): the Sluice process supervisor.
//!
//! Usage: `master [-c config_dir] [-f | -s]`. Normally started by `sluice start`.
//! Reads master.cf and main.cf, takes the one-master-per-queue lock, opens
//! every listening socket, and runs the supervisor loop (see `supervisor`).
//! `-f` keeps it in the foreground with logs on stderr as well. `-s`
//! (supervised, as under systemd) keeps it in the foreground logging as a
//! daemon does, and tells `$NOTIFY_SOCKET` when every service is open.
#![forbid(unsafe_code)]

mod listen;
mod notify;
mod service;
mod supervisor;

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use daemon::{msg_fatal, msg_info, msg_warn};

fn usage() -> ! {
    eprintln!("usage: master [-c config_dir] [-f | -s]");
    std::process::exit(2)
}

fn main() {
    let mut config_dir = std::env::var_os(ipc::status::CONFIG_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/sluice"));
    let mut foreground = false;
    let mut supervised = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-c" => config_dir = args.next().map(PathBuf::from).unwrap_or_else(|| usage()),
            "-f" => foreground = true,
            "-s" => supervised = true,
            _ => usage(),
        }
    }
    let config_dir = std::path::absolute(&config_dir).unwrap_or(config_dir);

    // Until the log is open, problems go to stderr, where `sluice start` shows them.
    let loaded = supervisor::load(&config_dir).unwrap_or_else(|e| {
        eprintln!("master: fatal: {e}");
        std::process::exit(1)
    });
    let cfg = &loaded.config;
    if let Err(e) = daemon::log::init(&daemon::log::LogSetup {
        service: "master".into(),
        syslog_name: cfg.str("syslog_name"),
        maillog_file: cfg.str("maillog_file"),
        foreground,
    }) {
        eprintln!("master: fatal: {e}");
        std::process::exit(1)
    }
    loaded.log_warnings();

    let owner = if sys::is_root() {
        let name = cfg.str("mail_owner");
        match sys::privilege::lookup_user(&name) {
            Ok(Some(u)) if u.uid == 0 => fatal_both(&format!(
                "mail_owner {name} has uid 0: set mail_owner to a dedicated unprivileged user"
            )),
            Ok(Some(u)) => Some(u),
            Ok(None) => fatal_both(&format!(
                "mail_owner {name}: no such user; create it (e.g. `adduser --system --group {name}`) or set mail_owner in {}",
                config_dir.join("main.cf").display()
            )),
            Err(e) => fatal_both(&format!("mail_owner {name}: {e}")),
        }
    } else {
        None
    };

    let queue = PathBuf::from(cfg.str("queue_directory"));
    if let Err(e) = make_queue_dirs(&queue, owner.as_ref()) {
        fatal_both(&e);
    }
    let pidfile = queue.join("pid/master.pid");
    let _lock = match sys::lock::PidLock::acquire(&pidfile) {
        Ok(l) => l,
        Err(sys::lock::LockError::Held { pid, .. }) => fatal_both(&format!(
            "the Sluice mail system is already running on {} (master pid {})",
            queue.display(),
            pid.map_or("unknown".into(), |p| p.to_string())
        )),
        Err(e) => fatal_both(&e.to_string()),
    };

    let control_path = queue.join("pid/master.sock");
    let _ = std::fs::remove_file(&control_path);
    let control = std::os::unix::net::UnixListener::bind(&control_path)
        .unwrap_or_else(|e| fatal_both(&format!("bind {}: {e}", control_path.display())));
    let _ = std::fs::set_permissions(&control_path, std::fs::Permissions::from_mode(0o660));
    if let Some(o) = &owner {
        let _ = std::os::unix::fs::chown(&control_path, Some(0), Some(o.gid));
    }
    control
        .set_nonblocking(true)
        .unwrap_or_else(|e| fatal_both(&format!("control socket: {e}")));

    let mut sup = supervisor::Supervisor::new(
        config_dir.clone(),
        loaded,
        foreground,
        control,
        control_path,
        owner,
    )
    .unwrap_or_else(|e| fatal_both(&e));
    if let Err(e) = sup.start_services() {
        sup.cleanup();
        fatal_both(&e);
    }

    if supervised {
        // The supervisor keeps our pid and our stderr; it only needs to
        // hear that the services are open.
        if let Err(e) = notify::notify(&format!("READY=1\nMAINPID={}", std::process::id())) {
            msg_warn!("{e}");
        }
    } else if !foreground {
        // Everything that can fail at start-up has been said on stderr.
        if let Err(e) = sys::process::new_session() {
            msg_warn!("{e}");
        }
        if let Err(e) = sys::process::stdio_to_devnull() {
            msg_warn!("{e}");
        }
    }
    msg_info!(
        "daemon started -- version {}, configuration {}",
        env!("CARGO_PKG_VERSION"),
        config_dir.display()
    );
    if !sys::is_root() {
        let (uid, _) = sys::current_ids();
        let who = sys::privilege::lookup_uid(uid)
            .ok()
            .flatten()
            .map_or(uid.to_string(), |u| u.name);
        msg_warn!("running unprivileged as {who}: daemons keep this identity, no chroot, no privilege separation");
    }
    let code = sup.run();
    if supervised {
        let _ = notify::notify("STOPPING=1");
    }
    sup.cleanup();
    std::process::exit(code);
}

/// Logs a fatal error and says it on stderr too, then exits 1.
fn fatal_both(msg: &str) -> ! {
    eprintln!("master: fatal: {msg}");
    msg_fatal!("{msg}")
}

/// Creates the queue directory tree with Postfix-like modes.
fn make_queue_dirs(queue: &Path, owner: Option<&sys::privilege::Identity>) -> Result<(), String> {
    let mk = |p: &Path, mode: u32| -> Result<(), String> {
        if !p.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(p)
                .map_err(|e| format!("create {}: {e}", p.display()))?;
        }
        let meta = std::fs::symlink_metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if !meta.is_dir() {
            return Err(format!("{}: not a directory", p.display()));
        }
        Ok(())
    };
    mk(queue, 0o755)?;
    mk(&queue.join("pid"), 0o755)?;
    mk(&queue.join("private"), 0o700)?;
    mk(&queue.join("public"), 0o755)?;
    // The spool proper: only mail_owner's daemons read and write it.
    // state/: the daemons' small files (saved shaping holds, transferd's
    // ledger); sts/: router's cache of MTA-STS policies; tlsrpt/: the TLS
    // report log.
    let spool = ["msg", "journal", "pool", "state", "sts", "tlsrpt"];
    for d in spool {
        mk(&queue.join(d), 0o700)?;
    }
    if let Some(o) = owner {
        for d in spool.iter().chain(&["private", "public"]) {
            let p = queue.join(d);
            std::os::unix::fs::chown(&p, Some(o.uid), Some(o.gid))
                .map_err(|e| format!("chown {}: {e}", p.display()))?;
        }
    }
    Ok(())
}
