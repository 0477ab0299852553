//! `sluice route ADDRESS...`: what the router decides for each address.
//!
//! The postmaster's `sendmail -bv` / `postmap -q` for routing: loads
//! main.cf and the same tables router(8) loads, resolves each address in
//! this process (so it works whether or not the mail system runs, and
//! shows what a reload would do), and prints one line per resulting
//! address. With `--hosts`, also asks DNS for the hosts of each next hop,
//! as the router would. Exit status: 0 when every address resolved (and,
//! with `--hosts`, every next hop has hosts), 1 otherwise or when the
//! configuration cannot be loaded.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// Resolves `addresses` and prints the result on stdout; see the module docs.
pub fn route(dir: &Path, addresses: &[String], hosts: bool) -> i32 {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    route_to(
        &mut stdout.lock(),
        &mut stderr.lock(),
        dir,
        addresses,
        hosts,
    )
}

/// [`route`] writing to the given streams (for tests).
pub fn route_to(
    out: &mut dyn Write,
    err: &mut dyn Write,
    dir: &Path,
    addresses: &[String],
    hosts: bool,
) -> i32 {
    let names: Vec<String> = config::load_master_cf(&dir.join("master.cf"))
        .map(|d| d.into_iter().map(|s| s.name).collect())
        .unwrap_or_default();
    let cfg = match config::Config::load(dir, &names) {
        Ok(l) => l.config,
        Err(e) => {
            let _ = writeln!(err, "sluice: fatal: {e}");
            return 1;
        }
    };
    let (settings, warnings) = match route::Settings::load(&cfg) {
        Ok(x) => x,
        Err(e) => {
            let _ = writeln!(err, "sluice: fatal: {e}");
            return 1;
        }
    };
    for w in warnings {
        let _ = writeln!(err, "sluice: warning: {w}");
    }
    let router = route::Router::new(settings);
    let mut driver = None;
    let mut code = 0;
    for raw in addresses {
        // A hostile address must not forge output lines.
        let address = raw.escape_debug().to_string();
        let routes = match router.resolve(raw, true) {
            Ok(r) => r,
            Err(e) => {
                let _ = writeln!(out, "{address}: error: {e}");
                code = 1;
                continue;
            }
        };
        for r in routes {
            let class = match r.class {
                route::Class::Local => "local",
                route::Class::Virtual => "virtual",
                route::Class::Relay => "relay",
                route::Class::Default => "default",
            };
            let mut flags = String::new();
            if r.unknown {
                flags.push_str(", unknown");
            }
            if r.by_table {
                flags.push_str(", transport_maps");
            }
            let _ = writeln!(
                out,
                "{address}: address={}, transport={}, nexthop={}, class={class}{flags}",
                r.address, r.transport, r.nexthop
            );
            if !hosts || r.transport == "error" || r.class == route::Class::Local {
                continue;
            }
            if driver.is_none() {
                let seed = std::process::id() as u64;
                let params = dns::Params {
                    dns_servers: cfg.list("dns_servers"),
                    timeout: cfg.time("dns_timeout"),
                    attempts: cfg.int("dns_attempts"),
                    cache_size: cfg.int("dns_cache_size"),
                    inet_protocols: cfg.choice("inet_protocols").to_string(),
                    address_preference: cfg.choice("smtp_address_preference").to_string(),
                    host_lookup: cfg.list("smtp_host_lookup"),
                    dnssec: cfg.choice("smtp_dns_support_level") == "dnssec",
                };
                let (rc, hc, warnings) = params.build(seed);
                for w in warnings {
                    let _ = writeln!(err, "sluice: warning: {w}");
                }
                match dns::blocking::Driver::new(dns::Dns::new(dns::Resolver::new(rc), hc)) {
                    Ok(d) => driver = Some(d),
                    Err(e) => {
                        let _ = writeln!(err, "sluice: fatal: DNS sockets: {e}");
                        return 1;
                    }
                }
            }
            let Some(d) = driver.as_mut() else { continue };
            let limit =
                cfg.time("dns_timeout") * (cfg.int("dns_attempts").clamp(1, 100) as u32) * 4
                    + Duration::from_secs(1);
            match d.hosts(&r.nexthop, limit) {
                Ok(l) => {
                    for h in &l.hosts {
                        let addrs: Vec<String> = h.addrs.iter().map(|a| a.to_string()).collect();
                        let port = if h.port == 0 {
                            String::new()
                        } else {
                            format!(":{}", h.port)
                        };
                        let mut note = h
                            .error
                            .as_ref()
                            .map(|e| format!(" ({e})"))
                            .unwrap_or_default();
                        // What the smtp agent's dane levels will make of it.
                        match &h.dane {
                            dns::Dane::Insecure => {}
                            dns::Dane::NoRecords => note += " dnssec=secure tlsa=none",
                            dns::Dane::Records(r) => {
                                let r: Vec<String> = r
                                    .iter()
                                    .map(|(u, s, m, _)| format!("{u} {s} {m}"))
                                    .collect();
                                note += &format!(" dnssec=secure tlsa=[{}]", r.join(", "));
                            }
                            dns::Dane::Failed(e) => {
                                note += &format!(" dnssec=secure tlsa=error ({e})")
                            }
                        }
                        let _ = writeln!(
                            out,
                            "  host {}{port} preference={} addresses={}{note}",
                            h.name,
                            h.preference,
                            addrs.join(",")
                        );
                    }
                }
                Err(e) => {
                    let _ = writeln!(out, "  hosts of {}: error: {e}", r.nexthop);
                    code = 1;
                }
            }
        }
    }
    code
}
