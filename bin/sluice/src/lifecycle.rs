//! `sluice start | stop | reload | status`: talking to master.
//!
//! start runs `$daemon_directory/master` and waits until its control
//! socket answers (or prints why it died); under systemd (`$NOTIFY_SOCKET`
//! set, as for a `Type=notify` unit) it becomes master instead, which stays
//! in the foreground and tells systemd itself when it is ready; stop and reload signal the pid in
//! `$queue_directory/pid/master.pid`, as `postfix stop` does, so they work
//! even when the control socket does not; status asks the control socket.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ipc::control::{Control, Request, Response};
use ipc::Client;

use crate::{fail, load_config};

struct Paths {
    pidfile: PathBuf,
    control: PathBuf,
    master: PathBuf,
    stop_timeout: Duration,
}

fn paths(dir: &Path) -> Result<Paths, String> {
    let (cfg, _) = load_config(dir, true)?;
    let queue = PathBuf::from(cfg.str("queue_directory"));
    Ok(Paths {
        pidfile: queue.join("pid/master.pid"),
        control: queue.join("pid/master.sock"),
        master: PathBuf::from(cfg.str("daemon_directory")).join("master"),
        stop_timeout: cfg.time("master_stop_timeout"),
    })
}

fn running_pid(p: &Paths) -> Option<i32> {
    if sys::lock::is_locked(&p.pidfile) {
        sys::lock::read_pid(&p.pidfile)
    } else {
        None
    }
}

/// `sluice start [--foreground]`.
pub fn start(dir: &Path, foreground: bool) -> i32 {
    // Validate first: a configuration error is reported here, with file
    // and line, instead of from a master that dies in the background.
    if let Err(e) = load_config(dir, false) {
        return fail(e);
    }
    let p = match paths(dir) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if let Some(pid) = running_pid(&p) {
        return fail(format!(
            "the Sluice mail system is already running (master pid {pid})"
        ));
    }
    if !p.master.is_file() {
        return fail(format!(
            "{}: no such program; check daemon_directory in {}",
            p.master.display(),
            dir.join("main.cf").display()
        ));
    }
    let mut cmd = Command::new(&p.master);
    cmd.arg("-c").arg(dir);
    let supervised = std::env::var_os("NOTIFY_SOCKET").is_some();
    if foreground || supervised {
        // systemd watches the pid it started: master must be that process.
        cmd.arg(if foreground { "-f" } else { "-s" });
        let e = cmd.exec();
        return fail(format!("exec {}: {e}", p.master.display()));
    }
    eprintln!("sluice: starting the Sluice mail system");
    let mut child = match cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return fail(format!("{}: {e}", p.master.display())),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let mut msg = String::new();
            if let Some(mut err) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut err, &mut msg);
            }
            eprint!("{msg}");
            return fail(format!("master exited at start-up ({status})"));
        }
        if let Ok(mut c) = Client::<Control>::connect(&p.control, Duration::from_secs(2)) {
            if let Ok(Response::Status(_)) = c.call(&Request::Status) {
                return 0;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    fail("master did not answer within 30 seconds; see the mail log")
}

/// `sluice stop`.
pub fn stop(dir: &Path) -> i32 {
    let p = match paths(dir) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let Some(pid) = running_pid(&p) else {
        return fail("the Sluice mail system is not running");
    };
    eprintln!("sluice: stopping the Sluice mail system");
    if let Err(e) = sys::process::signal(pid, 15) {
        return fail(e);
    }
    // master waits master_stop_timeout before SIGKILL; give it that and
    // a little more to reap.
    let deadline = Instant::now() + p.stop_timeout + Duration::from_secs(10);
    while Instant::now() < deadline {
        if !sys::lock::is_locked(&p.pidfile) {
            return 0;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    fail(format!("master pid {pid} is still running"))
}

/// `sluice reload`.
pub fn reload(dir: &Path) -> i32 {
    let cfg = match load_config(dir, false) {
        Ok((cfg, _)) => cfg,
        Err(e) => return fail(format!("{e}; not reloading")),
    };
    if let Err(e) = content_checks_open(&cfg) {
        return fail(format!(
            "{e}; not reloading (cleanup would stop taking mail; see sluice check)"
        ));
    }
    let p = match paths(dir) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let Some(pid) = running_pid(&p) else {
        return fail("the Sluice mail system is not running");
    };
    eprintln!("sluice: refreshing the Sluice mail system");
    match sys::process::signal(pid, 1) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// Opens the content check tables as cleanup does at a reload: one it
/// cannot read (a bad pattern, an unknown action) retires cleanup, whose
/// successor stops on it, and mail waits until the table is mended.
fn content_checks_open(cfg: &config::Config) -> Result<(), String> {
    for (param, check) in [
        (
            "header_checks",
            &tables::actions::check_header_action as tables::Check<'_>,
        ),
        ("mime_header_checks", &tables::actions::check_header_action),
        (
            "nested_header_checks",
            &tables::actions::check_header_action,
        ),
        ("body_checks", &tables::actions::check_body_action),
    ] {
        for m in cfg.maps(param) {
            tables::Table::open_checked(&m, check)
                .map_err(|e| format!("parameter \"{param}\": {e}"))?;
        }
    }
    Ok(())
}

/// `sluice reopen`: SIGUSR1 to master, which opens `maillog_file` again
/// and passes it on to its daemons (logrotate's postrotate command).
pub fn reopen(dir: &Path) -> i32 {
    let p = match paths(dir) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let Some(pid) = running_pid(&p) else {
        return fail("the Sluice mail system is not running");
    };
    match sys::process::signal(pid, 10) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// `sluice status`.
pub fn status(dir: &Path, json: bool) -> i32 {
    let p = match paths(dir) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if running_pid(&p).is_none() {
        if json {
            println!("{{\"running\":false}}");
        }
        eprintln!("sluice: the Sluice mail system is not running");
        return 3;
    }
    let st = match Client::<Control>::connect(&p.control, Duration::from_secs(5))
        .and_then(|mut c| c.call(&Request::Status))
    {
        Ok(Response::Status(st)) => st,
        Ok(other) => return fail(format!("unexpected answer from master: {other:?}")),
        Err(e) => return fail(format!("{}: {e}", p.control.display())),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // The queue's figures; without them (qmgr not answering) status still
    // reports master and its services.
    let summary = crate::top::Qmgr::new(dir, std::time::Duration::from_secs(10))
        .and_then(|mut q| q.summary(crate::top::STATUS_TOP));
    if json {
        println!("{}", status_json(&st, now, summary.as_ref().ok()));
        return 0;
    }
    println!(
        "sluice: the Sluice mail system is running: master pid {}, up {}, configuration {}, queue {}{}",
        st.pid,
        human(now.saturating_sub(st.started)),
        st.config_directory,
        st.queue_directory,
        if st.unprivileged { " (unprivileged)" } else { "" }
    );
    println!(
        "{:<24} {:<5} {:<10} {:>7}  processes",
        "service", "type", "command", "maxproc"
    );
    for s in &st.services {
        let procs: Vec<String> = s
            .processes
            .iter()
            .map(|p| format!("{}:{}:{}", p.pid, p.state, p.uses))
            .collect();
        let mut line = format!(
            "{:<24} {:<5} {:<10} {:>7}  {}",
            s.name,
            s.kind,
            s.command,
            if s.maxproc == 0 {
                "-".to_string()
            } else {
                s.maxproc.to_string()
            },
            if procs.is_empty() {
                "none".to_string()
            } else {
                procs.join(" ")
            }
        );
        if s.throttled_for > 0 {
            line.push_str(&format!(" (throttled for {}s)", s.throttled_for));
        }
        println!("{line}");
    }
    match &summary {
        Ok(s) => print!("{}", crate::top::status_text(s)),
        Err(e) => println!("queue: unknown ({e})"),
    }
    0
}

/// `status --json`: master, its services and processes, and qmgr's figures
/// (queue sizes by state, delivery rates, transports and classes, busiest
/// destinations; `queue` is `null` when qmgr does not answer), for monitoring.
fn status_json(
    st: &ipc::control::MasterStatus,
    now: u64,
    queue: Option<&ipc::queuectl::Summary>,
) -> String {
    use ipc::queuectl::json_str;
    let services: Vec<String> = st
        .services
        .iter()
        .map(|s| {
            let procs: Vec<String> = s
                .processes
                .iter()
                .map(|p| {
                    format!(
                        "{{\"pid\":{},\"state\":{},\"uses\":{},\"started\":{}}}",
                        p.pid,
                        json_str(&p.state),
                        p.uses,
                        p.started
                    )
                })
                .collect();
            format!(
                "{{\"name\":{},\"type\":{},\"command\":{},\"maxproc\":{},\"throttled_for\":{},\"processes\":[{}]}}",
                json_str(&s.name),
                json_str(&s.kind),
                json_str(&s.command),
                s.maxproc,
                s.throttled_for,
                procs.join(",")
            )
        })
        .collect();
    let queue = match queue {
        Some(q) => crate::top::json_members(q),
        None => "\"queue\":null".to_string(),
    };
    format!(
        "{{\"running\":true,\"master_pid\":{},\"started\":{},\"uptime\":{},\"config_directory\":{},\"queue_directory\":{},\"unprivileged\":{},\"services\":[{}],{}}}",
        st.pid,
        st.started,
        now.saturating_sub(st.started),
        json_str(&st.config_directory),
        json_str(&st.queue_directory),
        st.unprivileged,
        services.join(","),
        queue
    )
}

fn human(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}
