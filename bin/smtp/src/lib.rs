//! smtp(8) and lmtp(8): the Sluice SMTP and LMTP delivery agents.
//!
//! One process carries many connections on a mio loop. qmgr says which
//! connections to open and which transactions to run on each (the
//! `sluice-delivery` protocol); this program speaks SMTP on them with the
//! sans-IO `smtp_proto::client_session` engine: EHLO with HELO fallback,
//! STARTTLS per `smtp_tls_security_level` (certificates verified at
//! `verify` and `secure`, matched against DNSSEC-validated TLSA records at
//! `dane` and `dane-only`, RFC 7672), PIPELINING, many messages per
//! connection, content streamed from the spool (wire format) with DATA, or
//! with BDAT when the server offers CHUNKING.
//! It reports a result per recipient and per connection, and logs each
//! recipient as Postfix does (`to=<…>, relay=…, delay=…, dsn=…, status=…`).
//! The agent skeleton (`crates/agent`) serves qmgr; `server` holds the
//! connections, `conn` one connection's life, `results` what replies
//! mean, `settings` main.cf, `proxy` the egress proxies (`smtp_proxy`:
//! HAProxy with a PROXY protocol v2 header asking for the source address
//! and the host).
//!
//! lmtp(8) is the same program speaking LMTP (RFC 2033), as Postfix's
//! lmtp is its smtp: LHLO, one reply per recipient after DATA (each is
//! that recipient's outcome), connection reuse as for SMTP, no STARTTLS.
//! Its next hops are `unix:/path` (relative paths are under the queue
//! directory, as in Postfix) and `inet:host:port`; see `conn` for how a
//! Unix-domain socket is reached.
#![forbid(unsafe_code)]

mod conn;
mod dane;
mod proxy;
mod results;
mod server;
mod settings;
mod sts;

/// Runs the agent: SMTP, or LMTP when `lmtp`.
pub fn run(lmtp: bool) -> ! {
    daemon::run(
        daemon::Options::default(),
        move |ctx| {
            if lmtp {
                // No TLS over LMTP: no trust anchors to read.
                Ok(None)
            } else {
                settings::load_roots(ctx)
            }
        },
        move |ctx, roots| {
            let agent = server::SmtpAgent::new(ctx, roots, lmtp)?;
            Ok(agent::AgentServer::serve(agent, &ctx.args.service))
        },
    )
}
