//! sendmail(1): submit mail from the command line, as Postfix's sendmail does.
//!
//! `sendmail [-t] [-i|-oi] [-f sender] [-F name] [-N dsn] [-R ret] [-V envid]
//! [-C config_dir] [--] recipients...` reads a message on stdin (less any
//! leading mbox `From ` lines) and submits it to cleanup over
//! `$queue_directory/public/submit`; cleanup learns who we are from the
//! socket (SO_PEERCRED), not from us. `-bs` speaks SMTP on stdin/stdout,
//! `-bp` lists the queue (mailq), `-q` makes deferred mail due now, `-bi`
//! checks the aliases (newaliases). Invoked as `mailq` or `newaliases` (the
//! package's links to it) it does what that name says.
//!
//! Exit codes (sysexits.h): 0 queued; 64 usage; 65 bad input; 67 bad
//! recipient; 75 the mail system is not running or refused temporarily —
//! the message is not lost silently: the caller keeps it and is told.
#![forbid(unsafe_code)]

mod args;
mod message;
mod smtp;
mod submit;

use std::path::PathBuf;

use args::{Args, Mode};

/// sysexits.h codes.
pub mod ex {
    /// Bad usage.
    pub const USAGE: i32 = 64;
    /// Bad input data.
    pub const DATAERR: i32 = 65;
    /// Bad recipient.
    pub const NOUSER: i32 = 67;
    /// Internal error.
    pub const SOFTWARE: i32 = 70;
    /// Temporary failure: try again later.
    pub const TEMPFAIL: i32 = 75;
}

/// Prints `sendmail: fatal: …` and returns the code.
pub fn fatal(code: i32, msg: impl std::fmt::Display) -> i32 {
    eprintln!("sendmail: fatal: {msg}");
    code
}

fn main() {
    let name = std::env::args()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let args = match Args::parse_as(&name, std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => std::process::exit(fatal(ex::USAGE, e)),
    };
    for w in &args.warnings {
        eprintln!("sendmail: warning: {w}");
    }
    let dir = args
        .config_dir
        .clone()
        .or_else(|| std::env::var_os(ipc::status::CONFIG_DIR_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/etc/sluice"));
    let services = config::load_master_cf(&dir.join("master.cf")).unwrap_or_default();
    let cfg = match config::Config::load_with_master(&dir, &services) {
        Ok(l) => l.config,
        Err(e) => std::process::exit(fatal(ex::TEMPFAIL, e)),
    };
    let code = match args.mode {
        Mode::Deliver => submit::deliver(&cfg, &args),
        Mode::Smtp => smtp::run(&cfg),
        Mode::ListQueue => submit::list_queue(&cfg),
        Mode::Flush => submit::flush(&cfg),
        Mode::Newaliases => submit::newaliases(&dir),
    };
    std::process::exit(code)
}
