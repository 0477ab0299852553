//! Any bytes as the reply to a hosts() query, over UDP and TCP, with our
//! DNS id patched in so the parser gets past the first check: must never panic.
#![no_main]

use std::time::Instant;

use dns::{Dns, HostsConfig, Resolver, ResolverConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let cfg = ResolverConfig { servers: vec!["127.0.0.1:53".parse().expect("fuzz: literal")], ..ResolverConfig::default() };
    let mut d = Dns::new(Resolver::new(cfg), HostsConfig::default());
    d.hosts("example.test", t0);
    let Some(tx) = d.resolver.poll_transmit() else { return };
    let mut b = data.to_vec();
    if b.len() >= 2 {
        b[..2].copy_from_slice(&tx.wire_id.to_be_bytes());
    }
    d.resolver.handle_udp(tx.server, &b, t0);
    d.resolver.handle_tcp(tx.query, &b, t0);
    d.poll(t0);
    while d.resolver.poll_transmit().is_some() {}
});
