//! A stub DNS resolver for mail routing, on hickory-proto's wire format.
//!
//! Three layers, as quinn splits proto from transport:
//! - [`resolver`]: sans-IO queries with retries across name servers,
//!   timeouts, TCP fallback on truncation, and a positive and negative
//!   cache (RFC 2308). Time is passed in; randomness is seeded.
//! - [`hosts`]: `hosts(nexthop)`, the question an SMTP client asks: MX
//!   records by preference (random order among equals), A/AAAA of each
//!   exchanger per `inet_protocols`, implicit MX, null MX (RFC 7505),
//!   `[host]:port` without MX lookup, NXDOMAIN (permanent) told apart from
//!   SERVFAIL and timeouts (temporary). Also sans-IO.
//! - [`transport`]: the mio shell (a fresh connected UDP socket per try,
//!   a TCP connection per truncated answer) and [`blocking`], a one-shot
//!   driver for tools. `smtp_host_lookup = native` hands exchangers'
//!   address lookups to the shell ([`Dns::poll_native`]), which runs
//!   getaddrinfo where blocking is allowed.
//!
//! Limits: no DNSSEC validation of its own: with `smtp_dns_support_level
//! = dnssec` it asks a validating resolver for the AD bit and trusts it
//! (as Postfix does), and looks up TLSA records for DANE; no
//! search domains (mail names are fully qualified), no `/etc/hosts`.
//! Nothing here panics on any input from the network.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod blocking;
pub mod hosts;
pub mod resolver;
pub mod transport;
pub mod wire;

pub use hosts::{Dane, Dns, Host, HostList, HostsConfig, JobId, NativeRequest, Protocols};
pub use resolver::{Answer, Lookup, QueryId, Resolver, ResolverConfig, Transmit};
pub use wire::{Data, QType};

use mail::{Status, StatusCode};
use std::net::{IpAddr, SocketAddr};

/// Why a lookup failed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum DnsError {
    /// NXDOMAIN: the name does not exist. Permanent.
    NotFound(String),
    /// The domain publishes a null MX: it accepts no mail. Permanent.
    NullMx(String),
    /// The name or next hop is not valid. Permanent.
    BadName(String),
    /// No exchanger of the domain has an address. Permanent.
    NoAddress(String),
    /// Every server failed (SERVFAIL, REFUSED, TCP failure). Temporary.
    ServFail(String),
    /// No server answered in time. Temporary.
    Timeout,
    /// No name server is configured. Temporary.
    NoServers,
    /// Too many CNAMEs in a row. Temporary (may be a transient mistake).
    CnameChain(String),
}

impl DnsError {
    /// Whether a later retry may succeed.
    pub fn is_temporary(&self) -> bool {
        matches!(
            self,
            DnsError::ServFail(_)
                | DnsError::Timeout
                | DnsError::NoServers
                | DnsError::CnameChain(_)
        )
    }

    /// The delivery status: an enhanced status code (class 4 exactly when
    /// [`DnsError::is_temporary`]) and its text.
    pub fn status(&self) -> Status {
        const NO_HOST: StatusCode = StatusCode::known(5, 1, 2);
        const NULL_MX: StatusCode = StatusCode::known(5, 1, 10);
        const DNS_TEMP: StatusCode = StatusCode::known(4, 4, 3);
        match self {
            DnsError::NotFound(n) => Status::new(
                NO_HOST,
                format!("Host or domain name not found: {n}: NXDOMAIN"),
            ),
            DnsError::NullMx(n) => {
                Status::new(NULL_MX, format!("Domain {n} does not accept mail (nullMX)"))
            }
            DnsError::BadName(n) => Status::new(
                NO_HOST,
                format!("Bad host or domain name \"{}\"", n.escape_debug()),
            ),
            DnsError::NoAddress(n) => Status::new(
                NO_HOST,
                format!("No address for the mail exchangers of {n}"),
            ),
            DnsError::ServFail(t) => Status::new(DNS_TEMP, format!("DNS server failure: {t}")),
            DnsError::Timeout => Status::new(DNS_TEMP, "DNS lookup timed out"),
            DnsError::NoServers => Status::new(DNS_TEMP, "No DNS servers configured"),
            DnsError::CnameChain(n) => {
                Status::new(DNS_TEMP, format!("CNAME chain too long for {n}"))
            }
        }
    }

    /// Text for a delivery status, with an enhanced status code.
    pub fn status_text(&self) -> String {
        self.status().to_string()
    }
}

impl std::fmt::Display for DnsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.status_text())
    }
}

impl std::error::Error for DnsError {}

/// A small seeded generator (xorshift64*): DNS ids and MX shuffles.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced: xorshift needs a non-zero state).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// getaddrinfo for one host name (blocks: call it where that is allowed).
pub fn native_addresses(name: &str) -> Result<Vec<IpAddr>, DnsError> {
    use std::net::ToSocketAddrs;
    match (name, 0u16).to_socket_addrs() {
        Ok(it) => {
            let mut ips: Vec<IpAddr> = Vec::new();
            for a in it {
                if !ips.contains(&a.ip()) {
                    ips.push(a.ip());
                }
            }
            Ok(ips)
        }
        // getaddrinfo does not say NXDOMAIN from SERVFAIL portably: retry later.
        Err(e) => Err(DnsError::ServFail(e.to_string())),
    }
}

/// Parses a `dns_servers` item: `192.0.2.1`, `192.0.2.1:5353`, `::1`, `[::1]:5353`.
pub fn parse_server(item: &str) -> Option<SocketAddr> {
    if let Ok(sa) = item.parse::<SocketAddr>() {
        return Some(sa);
    }
    let bare = item
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(item);
    bare.parse::<IpAddr>()
        .ok()
        .map(|ip| SocketAddr::new(ip, 53))
}

/// The `nameserver` lines of a resolv.conf text.
pub fn servers_from_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("nameserver")).then(|| w.next()).flatten()
        })
        // A scope id (fe80::1%eth0) cannot be used by a SocketAddr parse; skip it.
        .filter_map(|s| s.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53)))
        .collect()
}

#[cfg(test)]
mod tests;

/// The main.cf parameters the resolver reads, as plain values, so that
/// router(8) and `sluice route` build the same resolver.
#[derive(Debug, Clone, Default)]
pub struct Params {
    /// `dns_servers`; empty means /etc/resolv.conf.
    pub dns_servers: Vec<String>,
    /// `dns_timeout`.
    pub timeout: std::time::Duration,
    /// `dns_attempts`.
    pub attempts: i64,
    /// `dns_cache_size`.
    pub cache_size: i64,
    /// `inet_protocols`: `ipv4`, `ipv6` or `all`.
    pub inet_protocols: String,
    /// `smtp_address_preference`: `ipv4`, `ipv6` or `any`.
    pub address_preference: String,
    /// `smtp_host_lookup`: `dns`, `native` (addresses from the system
    /// resolver, MX still from DNS) or both (DNS wins).
    pub host_lookup: Vec<String>,
    /// `smtp_dns_support_level = dnssec`: trust the AD bit, look up TLSA.
    pub dnssec: bool,
}

impl Params {
    /// The resolver and hosts() settings, with warnings for unusable
    /// servers; reads /etc/resolv.conf when `dns_servers` is empty.
    pub fn build(&self, seed: u64) -> (ResolverConfig, HostsConfig, Vec<String>) {
        let mut warnings = Vec::new();
        let servers = if self.dns_servers.is_empty() {
            match std::fs::read_to_string("/etc/resolv.conf") {
                Ok(t) => servers_from_resolv_conf(&t),
                Err(e) => {
                    warnings.push(format!("/etc/resolv.conf: {e}"));
                    vec![]
                }
            }
        } else {
            self.dns_servers
                .iter()
                .filter_map(|s| {
                    let p = parse_server(s);
                    if p.is_none() {
                        warnings.push(format!(
                            "dns_servers: ignoring \"{}\": not an address or address:port",
                            s.escape_debug()
                        ));
                    }
                    p
                })
                .collect()
        };
        let r = ResolverConfig {
            servers,
            timeout: self.timeout.max(std::time::Duration::from_millis(10)),
            attempts: self.attempts.clamp(1, 100) as u32,
            cache_size: self.cache_size.max(0) as usize,
            seed,
            max_in_flight: resolver::MAX_IN_FLIGHT,
            dnssec: self.dnssec,
        };
        let protocols = match self.inet_protocols.as_str() {
            "ipv4" => Protocols::Ipv4,
            "ipv6" => Protocols::Ipv6,
            _ => Protocols::All,
        };
        let h = HostsConfig {
            protocols,
            prefer_ipv6: self.address_preference == "ipv6",
            native: self.host_lookup.iter().any(|x| x == "native")
                && !self.host_lookup.iter().any(|x| x == "dns"),
            seed: seed.rotate_left(17),
        };
        (r, h, warnings)
    }
}
