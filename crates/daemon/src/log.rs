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
//!
//! A daemon's event loop calls [`batch`] once: from then on the lines its
//! loop thread writes to a file or stderr are gathered and go out in one
//! `write` when the loop calls [`flush`] before it waits again (an SMTP
//! session's connect, client= and disconnect lines cost one system call
//! between them instead of three). A warning or worse, a line from another
//! thread, a full buffer and a panic flush at once, so a line is never
//! held while the loop sleeps and the lines before a crash are not lost.
//! Syslog takes one datagram per line and is never batched.

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
    /// Read once: getpid(2) is a system call on every line otherwise, and
    /// a daemon never forks without exec.
    pid: u32,
    sinks: Vec<Sink>,
    /// The loop thread whose lines are gathered, once [`batch`] was called.
    batching: Option<std::thread::ThreadId>,
    /// Gathered lines, not yet written to the file and stderr sinks.
    pending: Vec<u8>,
}

/// Gathered lines are written once they reach this size.
const BATCH_LIMIT: usize = 32 << 10;

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
        pid: std::process::id(),
        sinks,
        batching: None,
        pending: Vec::new(),
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
    // What the loop gathered before the rotation belongs to the old file.
    logger.write_pending();
    let open = logger.sinks.iter_mut().find_map(|s| match s {
        Sink::File(f) => Some(f),
        _ => None,
    });
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

/// `text` with every control character (CR and LF above all) replaced by
/// `?`, as Postfix's msg_* output does with `printable()`: a line carries
/// what clients said (addresses, ORCPT, HELO names), and one of them must
/// not end the line and forge the next. Other UTF-8 is kept.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(char::is_control) {
        text.chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect::<String>()
            .into()
    } else {
        text.into()
    }
}

/// Writes one log line at `level`.
pub fn write(level: Level, text: &str) {
    let text = &*printable(text);
    let mut guard = LOGGER.lock().unwrap_or_else(|p| p.into_inner());
    let Some(logger) = guard.as_mut() else {
        // Before init (or in a tool): stderr, so nothing is silently lost.
        eprintln!("{}{text}", level.prefix());
        return;
    };
    let stamp = sys::time::syslog_stamp(std::time::SystemTime::now());
    let line = format_line(&stamp, &logger.host, &logger.ident, logger.pid, level, text);
    let gather = level == Level::Info
        && logger.batching == Some(std::thread::current().id())
        && logger.pending.len() + line.len() <= BATCH_LIMIT;
    if gather {
        logger.pending.extend_from_slice(line.as_bytes());
    } else {
        logger.write_pending();
    }
    for sink in &mut logger.sinks {
        match sink {
            Sink::File(f) if !gather => {
                let _ = f.write_all(line.as_bytes());
            }
            Sink::Stderr if !gather => {
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
            Sink::File(_) | Sink::Stderr => {}
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

impl Logger {
    /// Writes the gathered lines to the file and stderr sinks.
    fn write_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        for sink in &mut self.sinks {
            match sink {
                Sink::File(f) => {
                    let _ = f.write_all(&self.pending);
                }
                Sink::Stderr => {
                    let _ = std::io::stderr().write_all(&self.pending);
                }
                Sink::Syslog(_) => {}
            }
        }
        self.pending.clear();
    }
}

/// Gathers the calling thread's info lines until [`flush`]: for an event
/// loop, which flushes before each wait. A panic flushes them first.
pub fn batch() {
    let mut guard = LOGGER.lock().unwrap_or_else(|p| p.into_inner());
    let Some(logger) = guard.as_mut() else {
        return;
    };
    logger.batching = Some(std::thread::current().id());
    drop(guard);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // try_lock: a panic inside `write` holds the lock; its lines are
        // lost rather than the process deadlocked in its own panic hook.
        let mut guard = match LOGGER.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        if let Some(logger) = guard.as_deref_mut().and_then(Option::as_mut) {
            logger.write_pending();
        }
        previous(info);
    }));
}

/// Writes the lines gathered since the last flush.
pub fn flush() {
    let mut guard = LOGGER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(logger) = guard.as_mut() {
        logger.write_pending();
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

    /// A client's CR LF (in an address, an ORCPT, a HELO name) cannot end
    /// a line and forge the next one.
    #[test]
    fn control_characters_are_made_printable() {
        let (_turn, _dir, path) = log_to_file();
        write(
            Level::Info,
            "Q1: to=<a@b>, orig_to=<x\r\nNov 21 23:43:12 mx sluice/smtpd[1]: forged>\u{85}\0\tü",
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1, "{text:?}");
        assert!(
            text.ends_with("orig_to=<x??Nov 21 23:43:12 mx sluice/smtpd[1]: forged>???ü\n"),
            "{text:?}"
        );
        assert_eq!(printable("plain ü"), "plain ü");
    }

    /// The logger is one per process: its tests take turns.
    static TURN: Mutex<()> = Mutex::new(());

    /// Takes the turn and logs to `maillog` in a new directory.
    fn log_to_file() -> (
        std::sync::MutexGuard<'static, ()>,
        tempfile::TempDir,
        std::path::PathBuf,
    ) {
        let turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maillog");
        init(&LogSetup {
            service: "test".into(),
            syslog_name: "sluice".into(),
            maillog_file: path.display().to_string(),
            foreground: false,
        })
        .unwrap();
        (turn, dir, path)
    }

    #[test]
    fn a_loop_writes_its_lines_together_and_never_holds_a_warning() {
        let (_turn, _dir, path) = log_to_file();
        let read = || std::fs::read_to_string(&path).unwrap();
        batch();
        write(Level::Info, "connect from a");
        write(Level::Info, "client=a");
        assert_eq!(read(), "", "gathered until the loop flushes");
        flush();
        let text = read();
        assert!(text.contains("connect from a\n") && text.ends_with("client=a\n"));
        write(Level::Info, "disconnect from a");
        write(Level::Warning, "something odd");
        let text = read();
        let (d, w) = (text.find("disconnect").unwrap(), text.find("odd").unwrap());
        assert!(
            d < w,
            "a warning goes at once, after what was gathered: {text}"
        );
        write(Level::Info, "from the loop");
        std::thread::spawn(|| write(Level::Info, "from another thread"))
            .join()
            .unwrap();
        let text = read();
        let (a, b) = (
            text.find("from the loop").unwrap(),
            text.find("another thread").unwrap(),
        );
        assert!(
            a < b,
            "another thread's line goes at once, in order: {text}"
        );
        write(Level::Info, "before a panic");
        let _ = std::panic::catch_unwind(|| panic!("broken invariant"));
        assert!(
            read().contains("before a panic"),
            "a panic writes what was gathered"
        );
        // The next test's logger starts unbatched.
        *LOGGER.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    #[test]
    fn reopen_follows_a_rotated_file() {
        let (_turn, dir, path) = log_to_file();
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

    #[test]
    fn lines_gathered_before_a_rotation_go_to_the_old_file() {
        let (_turn, dir, path) = log_to_file();
        batch();
        write(Level::Info, "gathered before rotation");
        let rotated = dir.path().join("maillog.1");
        std::fs::rename(&path, &rotated).unwrap();
        assert!(reopen().unwrap());
        write(Level::Info, "gathered after rotation");
        flush();
        let old = std::fs::read_to_string(&rotated).unwrap();
        let new = std::fs::read_to_string(&path).unwrap();
        assert!(old.contains("gathered before rotation"), "{old:?}");
        assert!(!new.contains("before rotation") && new.contains("gathered after rotation"));
        *LOGGER.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
