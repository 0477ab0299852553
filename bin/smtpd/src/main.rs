//! smtpd(8): the Sluice SMTP server.
//!
//! One process serves many sessions on a mio loop. The protocol is
//! `smtp_proto::server::Session` (sans-IO); the access policy is the
//! `policy` crate; content streams to cleanup as it arrives and the 250
//! after DATA is sent only when cleanup says the message is durable. TLS
//! (STARTTLS, or implicit with `smtpd_tls_wrappermode = yes`) uses rustls.
//! The certificate and key are read before privileges are dropped.
#![forbid(unsafe_code)]

mod conn;
mod router;
mod server;
mod settings;
mod space;

fn main() {
    // One process serves many sessions: max_use (counted in clients) would
    // restart it every hundred connections, so only max_idle applies.
    let opts = daemon::Options {
        honour_max_use: false,
        ..daemon::Options::default()
    };
    daemon::run(
        opts,
        |ctx| settings::load_tls(&ctx.config),
        server::SmtpServer::new,
    )
}
