//! cleanup(8): the last stop before the queue.
//!
//! Receives messages from smtpd (and from sendmail(1) on the public
//! `submit` socket), prepends Received:, adds missing Message-ID:/Date:/From:
//! for local submissions (and for everyone with always_add_missing_headers),
//! writes the data once (inline for small messages, else a message file,
//! fdatasync'd), then hands the message to qmgr, whose journal commit is
//! what makes it queued. Only then does the client hear `Queued`.
//!
//! Signs with DKIM (`dkim_signing_table`, `dkim_key_table`) the mail of
//! the origins `dkim_signing_origins` names; the keys are read before
//! privileges are dropped, so they may be readable by root alone, and a
//! reload that finds DKIM configured retires the process so that the next
//! one reads them again.
//!
//! Applies `header_checks` and `body_checks` (see `checks.rs`): a table
//! that cannot be read or a bad pattern or action stops it at start, with
//! the parameter, file and line; a reload that meets one retires the
//! process, whose successor stops the same way (mail then waits, 4xx,
//! instead of passing unchecked).
//!
//! Logs `QUEUEID: message-id=<…>` as Postfix's cleanup does,
//! `QUEUEID: uid=N from=<…>` for local submissions, and
//! `QUEUEID: DKIM-Signature field added (s=…, d=…)` as opendkim does.
#![forbid(unsafe_code)]

mod checks;
mod dkim;
mod headers;
mod milter;
mod rewrite;
mod server;

fn main() {
    // Many clients per process, as smtpd: only max_idle applies.
    let opts = daemon::Options {
        honour_max_use: false,
        ..daemon::Options::default()
    };
    daemon::run(
        opts,
        // Tables are read before privileges are dropped, as Postfix's
        // cleanup opens them before its chroot.
        |ctx| {
            Ok((
                dkim::Dkim::from_config(&ctx.config)?,
                checks::Checks::from_config(&ctx.config)?,
            ))
        },
        |ctx, (dkim, checks)| {
            server::CleanupServer::new(ctx, dkim, checks).map(daemon::ipcserver::IpcServer::new)
        },
    )
}
