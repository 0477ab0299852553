//! From the cores' types to the router protocol's, and main.cf to settings.

use config::Config;
use ipc::router as proto;

/// A class as the protocol carries it.
pub fn class(c: route::Class) -> proto::Class {
    match c {
        route::Class::Local => proto::Class::Local,
        route::Class::Virtual => proto::Class::Virtual,
        route::Class::Relay => proto::Class::Relay,
        route::Class::Default => proto::Class::Default,
    }
}

/// A route as the protocol carries it.
pub fn route(r: route::Route) -> proto::Route {
    proto::Route {
        address: r.address,
        transport: r.transport,
        nexthop: r.nexthop,
        error: r.error,
        class: class(r.class),
        unknown: r.unknown,
        by_table: r.by_table,
    }
}

/// The answer to a resolve request.
pub fn resolved(
    r: Result<(route::Class, Vec<route::Route>), route::ResolveError>,
) -> proto::Response {
    match r {
        Ok((c, routes)) => proto::Response::Resolved {
            class: class(c),
            routes: routes.into_iter().map(route).collect(),
        },
        Err(e) => proto::Response::Failed {
            status: failure(&e),
        },
    }
}

/// A resolve or rewrite error as the protocol carries it: class 4 when a
/// retry may succeed.
fn failure(e: &route::ResolveError) -> mail::Status {
    if e.is_temporary() {
        mail::Status::new(mail::StatusCode::SYSTEM_TEMP, e.to_string())
    } else {
        mail::Status::new(
            mail::StatusCode::BAD_ADDRESS,
            format!("Bad recipient address syntax: {e}"),
        )
    }
}

/// cleanup's mapping of one address, as the protocol carries it.
pub fn rewrite(r: Result<Option<Vec<String>>, route::ResolveError>) -> proto::Rewrite {
    match r {
        Ok(None) => proto::Rewrite::Same,
        Ok(Some(v)) => proto::Rewrite::Into(v),
        Err(e) => proto::Rewrite::Failed {
            status: failure(&e),
        },
    }
}

/// The answer to a hosts request.
pub fn hosts(r: Result<dns::HostList, dns::DnsError>) -> proto::Response {
    match r {
        Ok(l) => proto::Response::Hosts(proto::HostList {
            nexthop: l.nexthop,
            from_mx: l.from_mx,
            ttl: l.ttl,
            authentic: l.authentic,
            hosts: l
                .hosts
                .into_iter()
                .map(|h| proto::Host {
                    name: h.name,
                    preference: h.preference,
                    port: h.port,
                    addrs: h.addrs,
                    error: h.error.map(|e| e.status()),
                    dane: dane(h.dane),
                })
                .collect(),
        }),
        Err(e) => proto::Response::Failed { status: e.status() },
    }
}

/// A host's DANE standing as the protocols carry it.
fn dane(d: dns::Dane) -> ipc::delivery::Dane {
    use ipc::delivery::{Dane, Tlsa};
    match d {
        dns::Dane::Insecure => Dane::Insecure,
        dns::Dane::NoRecords => Dane::NoRecords,
        dns::Dane::Records(r) => Dane::Records(
            r.into_iter()
                .map(|(usage, selector, matching, data)| Tlsa {
                    usage,
                    selector,
                    matching,
                    data,
                })
                .collect(),
        ),
        dns::Dane::Failed(e) => Dane::Failed(e.status()),
    }
}

/// The resolver and hosts() settings from main.cf.
pub fn dns_config(cfg: &Config, seed: u64) -> (dns::ResolverConfig, dns::HostsConfig, Vec<String>) {
    dns_params(cfg).build(seed)
}

/// The DNS parameters of main.cf.
pub fn dns_params(cfg: &Config) -> dns::Params {
    dns::Params {
        dns_servers: cfg.list("dns_servers"),
        timeout: cfg.time("dns_timeout"),
        attempts: cfg.int("dns_attempts"),
        cache_size: cfg.int("dns_cache_size"),
        inet_protocols: cfg.choice("inet_protocols").to_string(),
        address_preference: cfg.choice("smtp_address_preference").to_string(),
        host_lookup: cfg.list("smtp_host_lookup"),
        dnssec: cfg.choice("smtp_dns_support_level") == "dnssec",
    }
}
