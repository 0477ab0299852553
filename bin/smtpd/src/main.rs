//! smtpd(8): the Sluice SMTP server.
//!
//! One process serves many sessions on a mio loop. The protocol is
//! `smtp_proto::server::Session` (sans-IO); the access policy is the
//! `policy` crate; content streams to cleanup as it arrives and the 250
//! after DATA is sent only when cleanup says the message is durable. TLS
//! (STARTTLS, or implicit with `smtpd_tls_wrappermode = yes`) uses rustls.
//! The certificate and key are read before privileges are dropped.
#![forbid(unsafe_code)]

mod anvil;
mod conn;
mod misconfigured;
mod pool;
mod proxy;
mod router;
mod sasl;
mod server;
mod settings;
mod space;
mod tagged;
mod verify;

/// Descriptors a process needs besides its sessions: stdio, log, epoll,
/// master's pipes, listeners, anvil, router, with room to spare.
const FIXED_FDS: u64 = 64;

fn main() {
    // One process serves many sessions: max_use (counted in clients) would
    // restart it every hundred connections, so only max_idle applies.
    // A session holds its socket and, while it sends a message, a link to
    // cleanup (idle links are kept for the next message, no more than
    // sessions have had at once).
    // Past the open-file limit accept() fails and clients wait unanswered in
    // the listen queue (at the usual 1024, about a thousand sessions): a full
    // process says it is busy instead, and master starts another, up to the
    // service's process limit.
    let max_clients = sys::process::open_files_limit().map_or(usize::MAX, |n| {
        usize::try_from((n.saturating_sub(FIXED_FDS) / 2).max(1)).unwrap_or(usize::MAX)
    });
    let opts = daemon::Options {
        honour_max_use: false,
        max_clients,
        // Replies go out whole: Nagle would only hold a pipelined reply back.
        tcp_nodelay: true,
        ..daemon::Options::default()
    };
    daemon::run(
        opts,
        // A certificate that does not load is a configuration error like
        // any other: answered 451 4.3.5, not an exit at each connection.
        |ctx| Ok(settings::load_tls(&ctx.config)),
        |ctx, tls| {
            let server = tls.and_then(|tls| server::SmtpServer::new(ctx, tls));
            Ok(misconfigured::Smtpd::new(server))
        },
    )
}
