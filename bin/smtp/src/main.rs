//! smtp(8): the Sluice SMTP delivery agent.
//!
//! One process carries many connections on a mio loop. qmgr says which
//! connections to open and which transactions to run on each (the
//! `sluice-delivery` protocol); this program speaks SMTP on them with the
//! sans-IO `smtp_proto::client_session` engine: EHLO with HELO fallback,
//! STARTTLS per `smtp_tls_security_level` (certificates verified at
//! `verify` and `secure`), PIPELINING, many messages per
//! connection, content streamed from the spool (wire format) with DATA, or
//! with BDAT when the server offers CHUNKING.
//! It reports a result per recipient and per connection, and logs each
//! recipient as Postfix does (`to=<…>, relay=…, delay=…, dsn=…, status=…`).
//! The agent skeleton (`crates/agent`) serves qmgr; `server` holds the
//! connections, `conn` one connection's life, `results` what replies
//! mean, `settings` main.cf.
#![forbid(unsafe_code)]

mod conn;
mod results;
mod server;
mod settings;

fn main() {
    daemon::run(
        daemon::Options::default(),
        settings::load_roots,
        |ctx, roots| {
            let smtp = server::SmtpAgent::new(ctx, roots)?;
            Ok(agent::AgentServer::serve(smtp, &ctx.args.service))
        },
    )
}
