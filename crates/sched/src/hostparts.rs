//! Host names as the scheduler writes them, split back into a name and an
//! address (shaping counts by both).

use std::net::IpAddr;

/// A host's name and address as the scheduler names hosts: `mx.example`
/// (an MX name), `mx.example[192.0.2.1]` (one of its addresses, when a
/// policy counts by `remoteip`) or `[192.0.2.1]:25` (a literal); the
/// address is empty when the name does not say it.
pub fn host_parts(host: &str) -> (&str, &str) {
    let ip = |s: &str| s.parse::<IpAddr>().is_ok();
    match host.split_once('[') {
        Some((name, rest)) => {
            let addr = rest.split(']').next().unwrap_or("");
            let addr = if ip(addr) { addr } else { "" };
            (if name.is_empty() { host } else { name }, addr)
        }
        None => (host, ""),
    }
}
