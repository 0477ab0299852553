//! Listening addresses of inet services, from master.cf and main.cf.
//!
//! A service name is `port`, `host:port` or `[ipv6]:port`; the port is a
//! number or a services(5) name. Hosts must be addresses, except `localhost`,
//! which means the loopback addresses: Sluice does not resolve names at
//! start-up, so a typo cannot make it listen somewhere unexpected. Without a
//! host, `inet_interfaces` decides: `all` (0.0.0.0 and/or [::] per
//! `inet_protocols`), `loopback-only`, or explicit addresses. When both
//! wildcards are returned the caller must set IPV6_V6ONLY on the [::] socket.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use crate::config::Config;
use crate::error::{AddressProblem, ConfigError};
use crate::mastercf::ServiceDef;
use crate::services;

struct Protocols {
    v4: bool,
    v6: bool,
}

fn port(text: &str) -> Result<u16, AddressProblem> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return match text.parse::<u16>() {
            Ok(p) if p > 0 => Ok(p),
            _ => Err(AddressProblem::UnknownPort(text.to_string())),
        };
    }
    services::port_by_name(text).ok_or_else(|| AddressProblem::UnknownPort(text.to_string()))
}

/// Splits `host:port` / `[v6]:port` / `port`; the host is `None` for `port`.
fn split(name: &str) -> Result<(Option<&str>, &str), AddressProblem> {
    let bad = || AddressProblem::Syntax(name.to_string());
    if let Some(rest) = name.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = after.strip_prefix(':').ok_or_else(bad)?;
        return Ok((Some(host), port));
    }
    match name.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => Err(bad()),
        Some((host, port)) if !host.is_empty() => Ok((Some(host), port)),
        Some(_) => Err(bad()),
        None => Ok((None, name)),
    }
}

/// The addresses `host` stands for.
fn host_addresses(host: &str, protos: &Protocols) -> Result<Vec<IpAddr>, AddressProblem> {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.eq_ignore_ascii_case("localhost") || host.eq_ignore_ascii_case("loopback-only") {
        let mut v = Vec::new();
        if protos.v4 {
            v.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        if protos.v6 {
            v.push(IpAddr::V6(Ipv6Addr::LOCALHOST));
        }
        return Ok(v);
    }
    if host.eq_ignore_ascii_case("all") {
        let mut v = Vec::new();
        if protos.v4 {
            v.push(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        }
        if protos.v6 {
            v.push(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        }
        return Ok(v);
    }
    let ip: IpAddr = host
        .parse()
        .map_err(|_| AddressProblem::HostName(host.to_string()))?;
    if (ip.is_ipv4() && !protos.v4) || (ip.is_ipv6() && !protos.v6) {
        return Err(AddressProblem::ProtocolDisabled(host.to_string()));
    }
    Ok(vec![ip])
}

/// The socket addresses an inet service listens on, without duplicates.
pub fn inet_addresses(def: &ServiceDef, config: &Config) -> Result<Vec<SocketAddr>, ConfigError> {
    let err = |problem| ConfigError::Address {
        file: PathBuf::from(config.str("config_directory")).join("master.cf"),
        line: def.line,
        service: def.name.clone(),
        problem,
    };
    let protos = match config.choice("inet_protocols") {
        "ipv4" => Protocols {
            v4: true,
            v6: false,
        },
        "ipv6" => Protocols {
            v4: false,
            v6: true,
        },
        _ => Protocols { v4: true, v6: true },
    };
    let (host, port_text) = split(&def.name).map_err(err)?;
    let port = port(port_text).map_err(err)?;
    let mut ips = Vec::new();
    match host {
        Some("*") => ips.extend(host_addresses("all", &protos).map_err(err)?),
        Some(h) => ips.extend(host_addresses(h, &protos).map_err(err)?),
        None => {
            for item in config.list("inet_interfaces") {
                ips.extend(host_addresses(&item, &protos).map_err(err)?);
            }
        }
    }
    let mut out: Vec<SocketAddr> = Vec::new();
    for ip in ips {
        let sa = SocketAddr::new(ip, port);
        if !out.contains(&sa) {
            out.push(sa);
        }
    }
    Ok(out)
}
