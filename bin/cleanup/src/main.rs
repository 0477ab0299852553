//! cleanup(8): the last stop before the queue.
//!
//! Receives messages from smtpd (and from sendmail(1) on the public
//! `submit` socket), prepends Received:, adds missing Message-ID:/Date:/From:
//! for local submissions (and for everyone with always_add_missing_headers),
//! writes the data once (inline for small messages, else a message file,
//! fdatasync'd), then hands the message to qmgr, whose journal commit is
//! what makes it queued. Only then does the client hear `Queued`.
//!
//! Logs `QUEUEID: message-id=<…>` as Postfix's cleanup does, and
//! `QUEUEID: uid=N from=<…>` for local submissions.
#![forbid(unsafe_code)]

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
        |_ctx| Ok(()),
        |ctx, ()| server::CleanupServer::new(ctx).map(daemon::ipcserver::IpcServer::new),
    )
}
