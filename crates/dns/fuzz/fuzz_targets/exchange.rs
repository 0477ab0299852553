//! A whole hosts() exchange: every query the resolver sends is answered in
//! turn from the input (its own header and question echoed, so the answer is
//! taken, with fuzzed flags, rcode and records), or left to time out. The
//! records are either raw bytes or built from a few names of one zone (MX,
//! CNAME, A, AAAA, SOA), so MX lists, CNAME chains and loops, null MX and the
//! address lookups of each exchanger are reached. No panic, and the job
//! always ends, exactly once, once time passes.
#![no_main]

use std::time::{Duration, Instant};

use dns::{Dns, HostsConfig, Protocols, Resolver, ResolverConfig};
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 6] = [
    "example.test",
    "mx1.example.test",
    "mx2.example.test",
    "alias.example.test",
    "",
    "other.test",
];
const NEXTHOPS: [&str; 4] = [
    "example.test",
    "[mx1.example.test]",
    "alias.example.test:2525",
    "mx2.example.test",
];

fn name(out: &mut Vec<u8>, n: &str) {
    for label in n.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
}

/// Takes `n` bytes from the input, zero-padded.
fn take<'a>(input: &mut &'a [u8], n: usize) -> Vec<u8> {
    let k = n.min(input.len());
    let mut v = input[..k].to_vec();
    *input = &input[k..];
    v.resize(n, 0);
    v
}

/// Records built from the input: (answer count, authority count, bytes).
fn records(input: &mut &[u8]) -> (u16, u16, Vec<u8>) {
    let count = take(input, 1)[0] % 6;
    let (mut an, mut ns, mut out) = (0u16, 0u16, Vec::new());
    let mut soa = Vec::new();
    for _ in 0..count {
        let sel = take(input, 1)[0];
        let mut rr = Vec::new();
        if sel & 0x80 == 0 {
            rr.extend_from_slice(&[0xc0, 0x0c]); // the question's name
        } else {
            name(&mut rr, NAMES[usize::from(sel >> 4 & 7) % NAMES.len()]);
        }
        let ttl = u32::from(take(input, 1)[0]) * 60;
        let (rtype, rdata): (u16, Vec<u8>) = match sel & 7 {
            0 => (1, take(input, 4)),
            1 => (28, take(input, 16)),
            2 | 3 => {
                let b = take(input, 2);
                let mut d = vec![0, b[0] % 4];
                name(&mut d, NAMES[usize::from(b[1]) % NAMES.len()]);
                (15, d)
            }
            4 => {
                let mut d = Vec::new();
                name(&mut d, NAMES[usize::from(take(input, 1)[0]) % NAMES.len()]);
                (5, d)
            }
            _ => {
                let mut d = Vec::new();
                name(&mut d, "ns.example.test");
                name(&mut d, "hostmaster.example.test");
                d.extend_from_slice(&[0, 0, 0, 1, 0, 0, 14, 16, 0, 0, 3, 132, 0, 9, 58, 128]);
                d.extend_from_slice(&ttl.to_be_bytes());
                (6, d)
            }
        };
        rr.extend_from_slice(&rtype.to_be_bytes());
        rr.extend_from_slice(&1u16.to_be_bytes());
        rr.extend_from_slice(&ttl.to_be_bytes());
        rr.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        rr.extend_from_slice(&rdata);
        if rtype == 6 {
            ns += 1;
            soa.extend_from_slice(&rr);
        } else {
            an += 1;
            out.extend_from_slice(&rr);
        }
    }
    out.extend_from_slice(&soa);
    (an, ns, out)
}

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    let head = take(&mut input, 2);
    let cfg = ResolverConfig {
        servers: vec!["127.0.0.1:53".parse().expect("fuzz: literal")],
        ..ResolverConfig::default()
    };
    let protocols = [Protocols::All, Protocols::Ipv4, Protocols::Ipv6][usize::from(head[0] % 3)];
    let hosts = HostsConfig {
        protocols,
        prefer_ipv6: head[0] & 4 != 0,
        ..HostsConfig::default()
    };
    let mut d = Dns::new(Resolver::new(cfg), hosts);
    let mut now = Instant::now();
    let job = d.hosts(NEXTHOPS[usize::from(head[1]) % NEXTHOPS.len()], now);
    let mut ended = 0;
    let check = |d: &mut Dns, ended: &mut usize| {
        while let Some((id, _)) = d.poll_event() {
            assert_eq!(id, job);
            *ended += 1;
        }
    };
    check(&mut d, &mut ended);
    // Answer from the input while it lasts; then only time passes.
    for _ in 0..200 {
        let Some(tx) = d.resolver.poll_transmit() else {
            if ended > 0 || d.jobs() == 0 {
                break;
            }
            now += Duration::from_secs(6);
            d.resolver.handle_timeout(now);
            d.poll(now);
            check(&mut d, &mut ended);
            continue;
        };
        let ctl = if input.is_empty() {
            0xff
        } else {
            take(&mut input, 1)[0]
        };
        if ctl == 0xff {
            continue; // lost: the resolver's timeout must see to it
        }
        let mut reply = if ctl & 0x40 != 0 {
            // Raw bytes after our id.
            let n = usize::from(take(&mut input, 1)[0]);
            let mut r = tx.wire_id.to_be_bytes().to_vec();
            r.extend_from_slice(&take(&mut input, n));
            r
        } else {
            let mut r = tx.payload.clone();
            if r.len() < 12 {
                continue;
            }
            r[2] |= 0x80; // a response
            r[2] = (r[2] & !0x02) | (ctl & 0x02); // TC
            r[3] = (r[3] & 0x5f) | (ctl & 0x20) | (ctl & 0x0f) % 6; // AD, rcode 0..5
            let (an, ns, rrs) = records(&mut input);
            r[6..8].copy_from_slice(&an.to_be_bytes());
            r[8..10].copy_from_slice(&ns.to_be_bytes());
            r[10..12].copy_from_slice(&[0, 0]);
            r.extend_from_slice(&rrs);
            r
        };
        if ctl & 0x80 != 0 {
            reply.truncate(reply.len().saturating_sub(1));
        }
        if tx.tcp {
            d.resolver.handle_tcp(tx.query, &reply, now);
        } else {
            d.resolver.handle_udp(tx.server, &reply, now);
        }
        d.poll(now);
        check(&mut d, &mut ended);
    }
    assert_eq!(ended, 1, "hosts() ended {ended} times");
});
