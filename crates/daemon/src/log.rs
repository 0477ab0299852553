//! The mail log: Postfix's line format on syslog, a file, or stderr.
//!
//! Every line is `Mon DD HH:MM:SS host sluice/<service>[pid]: text`, with
//! `warning: `, `error: `, `fatal: ` or `panic: ` before the text for the
//! tiers of Postfix's msg_warn, msg_error, msg_fatal and msg_panic, so that
//! pflogsumm and the eyes of a postmaster read it as they read Postfix's.
//!
//! Where the lines go: `maillog_file` when set (each line is one `write` on
//! an O_APPEND descriptor, so lines from many processes never interleave),
//! stderr as well when running in the foreground, syslog (facility mail)
//! otherwise. The sink is opened before privileges are dropped, so chrooted
//! daemons keep logging. After logrotate has renamed `maillog_file`,
//! [`reopen`] opens the file again under its name.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;

/// Where log lines go.
enum Sink {
    File(File),
    Stderr,
    Syslog(syslog::Logger<syslog::LoggerBackend, syslog::Formatter3164>),
}

struct Logger {
    ident: String,
    host: String,
    sinks: Vec<Sink>,
}

static LOGGER: Mutex<Option<Logger>> = Mutex::new(None);

/// `maillog_file` as [`init`] opened it, for [`reopen`].
static MAILLOG_FILE: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);

/// Severity, as Postfix's msg_* tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Ordinary events: no prefix.
    Info,
    /// Something is wrong but we carry on.
    Warning,
    /// An error that does not stop the process.
    Error,
    /// The process exits.
    Fatal,
    /// A broken invariant.
    Panic,
}

impl Level {
    fn prefix(self) -> &'static str {
        match self {
            Level::Info => "",
            Level::Warning => "warning: ",
            Level::Error => "error: ",
            Level::Fatal => "fatal: ",
            Level::Panic => "panic: ",
        }
    }
}

/// How to set up logging for one process.
#[derive(Debug, Clone, Default)]
pub struct LogSetup {
    /// The program or service name after `sluice/`, e.g. `smtpd`.
    pub service: String,
    /// `syslog_name` (default `sluice`).
    pub syslog_name: String,
    /// `maillog_file`, empty for none.
    pub maillog_file: String,
    /// Also (or only) log to stderr.
    pub foreground: bool,
}

/// Opens the sinks; call once at start, before dropping privileges.
pub fn init(setup: &LogSetup) -> std::io::Result<()> {
    let syslog_name = if setup.syslog_name.is_empty() {
        "sluice"
    } else {
        &setup.syslog_name
    };
    let ident = format!("{syslog_name}/{}", setup.service);
    let mut sinks = Vec::new();
    let mut err = None;
    if !setup.maillog_file.is_empty() {
        *MAILLOG_FILE.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(setup.maillog_file.clone().into());
        match open_log_file(Path::new(&setup.maillog_file)) {
            Ok(f) => sinks.push(Sink::File(f)),
            Err(e) => err = Some(e),
        }
    }
    if setup.foreground {
        sinks.push(Sink::Stderr);
    }
    if sinks.is_empty() {
        let fmt = syslog::Formatter3164 {
            facility: syslog::Facility::LOG_MAIL,
            hostname: None,
            process: ident.clone(),
            pid: std::process::id(),
        };
        match syslog::unix(fmt) {
            Ok(l) => sinks.push(Sink::Syslog(l)),
            Err(_) => sinks.push(Sink::Stderr),
        }
    }
    *LOGGER.lock().unwrap_or_else(|p| p.into_inner()) = Some(Logger {
        ident,
        host: short_host(),
        sinks,
    });
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn open_log_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("open maillog_file {}: {e}", path.display()),
            )
        })
}

/// Opens `maillog_file` again by name (after logrotate moved it away) and
/// logs to the new file from now on. Returns false when there is no log
/// file or it was not moved; on an error (a daemon that dropped its
/// privileges may not open it) the old descriptor stays in use.
pub fn reopen() -> std::io::Result<bool> {
    let path = MAILLOG_FILE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let Some(path) = path else {
        return Ok(false);
    };
    let mut guard = LOGGER.lock().unwrap_or_else(|p| p.into_inner());
    let Some(logger) = guard.as_mut() else {
        return Ok(false);
    };
    let open = logger.sinks.iter_mut().find_map(|s| match s {
        Sink::File(f) => Some(f),
        _ => None,
    });
    // Still the same file (nothing rotated it): keep it, so that a daemon
    // without the privileges to open it again has nothing to do.
    if let (Some(f), Ok(now)) = (&open, std::fs::metadata(&path)) {
        if let Ok(cur) = f.metadata() {
            if (cur.dev(), cur.ino()) == (now.dev(), now.ino()) {
                return Ok(false);
            }
        }
    }
    let file = open_log_file(&path)?;
    match open {
        Some(f) => *f = file,
        None => logger.sinks.insert(0, Sink::File(file)),
    }
    Ok(true)
}

fn short_host() -> String {
    let h = sys::hostname();
    h.split('.').next().unwrap_or("localhost").to_string()
}

/// Formats one line as it appears in a log file.
pub fn format_line(
    stamp: &str,
    host: &str,
    ident: &str,
    pid: u32,
    level: Level,
    text: &str,
) -> String {
    format!("{stamp} {host} {ident}[{pid}]: {}{text}\n", level.prefix())
}

/// Writes one log line at `level`.
pub fn write(level: Level, text: &str) {
    let mut guard = LOGGER.lock().unwrap_or_else(|p| p.into_inner());
    let Some(logger) = guard.as_mut() else {
        // Before init (or in a tool): stderr, so nothing is silently lost.
        eprintln!("{}{text}", level.prefix());
        return;
    };
    let stamp = sys::time::syslog_stamp(std::time::SystemTime::now());
    let line = format_line(
        &stamp,
        &logger.host,
        &logger.ident,
        std::process::id(),
        level,
        text,
    );
    for sink in &mut logger.sinks {
        match sink {
            Sink::File(f) => {
                let _ = f.write_all(line.as_bytes());
            }
            Sink::Stderr => {
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
            Sink::Syslog(l) => {
                let msg = format!("{}{text}", level.prefix());
                let _ = match level {
                    Level::Info => l.info(msg),
                    Level::Warning => l.warning(msg),
                    Level::Error => l.err(msg),
                    Level::Fatal | Level::Panic => l.crit(msg),
                };
            }
        }
    }
}

/// Logs at info level, `format!`-style.
#[macro_export]
macro_rules! msg_info {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Info, &format!($($arg)*)) };
}

/// Logs a warning, `format!`-style.
#[macro_export]
macro_rules! msg_warn {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Warning, &format!($($arg)*)) };
}

/// Logs an error, `format!`-style.
#[macro_export]
macro_rules! msg_error {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Error, &format!($($arg)*)) };
}

/// Logs a fatal error and exits with status 1, `format!`-style.
#[macro_export]
macro_rules! msg_fatal {
    ($($arg:tt)*) => {{
        $crate::log::write($crate::log::Level::Fatal, &format!($($arg)*));
        std::process::exit(1)
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_has_postfix_shape() {
        let l = format_line(
            "Nov 21 23:43:12",
            "mx",
            "sluice/smtpd",
            42,
            Level::Warning,
            "oops",
        );
        assert_eq!(l, "Nov 21 23:43:12 mx sluice/smtpd[42]: warning: oops\n");
    }

    #[test]
    fn reopen_follows_a_rotated_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maillog");
        init(&LogSetup {
            service: "test".into(),
            syslog_name: "sluice".into(),
            maillog_file: path.display().to_string(),
            foreground: false,
        })
        .unwrap();
        write(Level::Info, "before rotation");
        let rotated = dir.path().join("maillog.1");
        std::fs::rename(&path, &rotated).unwrap();
        assert!(reopen().unwrap());
        assert!(!reopen().unwrap(), "the same file is not opened twice");
        write(Level::Info, "after rotation");
        let old = std::fs::read_to_string(&rotated).unwrap();
        let new = std::fs::read_to_string(&path).unwrap();
        assert!(old.contains("before rotation") && !old.contains("after rotation"));
        assert!(new.contains("sluice/test[") && new.contains("after rotation"));
    }
}
