//! router(8): address resolution, lookup tables and DNS for qmgr and smtpd.
//!
//! Serves the router protocol (`ipc::router`) on `private/router`: resolve
//! a recipient to (transport, next hop, rewritten address, flags) from the
//! tables named in main.cf, and list the hosts of a next hop from DNS (or
//! the system resolver with `smtp_host_lookup = native`). Tables are
//! compiled at start; a table that does not compile is fatal at start
//! (with file and line) and keeps the running tables on reload (SIGHUP or
//! a `Reload` request). Logs table warnings and reloads; never a line per
//! request.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod convert;
mod server;
mod sts;
mod tlsrpt;

use daemon::msg_warn;

fn main() {
    // Like Postfix's trivial-rewrite: many clients, one process, which
    // may retire when idle (its state is only a cache).
    let opts = daemon::Options::default();
    daemon::run(
        opts,
        |_ctx| Ok(()),
        |ctx, ()| {
            let (settings, warnings) =
                route::Settings::load(&ctx.config).map_err(|e| e.to_string())?;
            for w in warnings {
                msg_warn!("{w}");
            }
            let seed = std::process::id() as u64
                ^ std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
            let (rcfg, hcfg, warnings) = convert::dns_config(&ctx.config, seed);
            for w in warnings {
                msg_warn!("{w}");
            }
            if rcfg.servers.is_empty() {
                msg_warn!("no DNS servers (dns_servers is empty and /etc/resolv.conf names none): DNS lookups will fail");
            }
            let dns = dns::Dns::new(dns::Resolver::new(rcfg), hcfg);
            Ok(daemon::ipcserver::IpcServer::new(
                server::RouterServer::new(
                    route::Router::new(settings),
                    dns,
                    ctx.config_dir.clone(),
                    ctx.args.overrides.clone(),
                )
                .with_sts(
                    sts::Sts::new(&ctx.config),
                    tlsrpt::Reports::new(&ctx.config),
                ),
            ))
        },
    )
}
