//! Sans-IO tests: the resolver and hosts() against scripted replies, with
//! a virtual clock (no sockets, no sleeping).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RData;

use crate::wire::build::*;
use crate::*;

type Reply = (ResponseCode, Vec<(String, u32, RData)>);
type Zone = fn(&str, QType, bool) -> Option<Reply>;

/// A name server in a function: answers every queued message with
/// `zone(name, type, over TCP)`; `None` is silence, and servers in `down`
/// are silent too. A TTL of u32::MAX marks an answer to send truncated.
fn serve(dns: &mut Dns, zone: Zone, down: &[SocketAddr], now: Instant) {
    let mut more = true;
    while more {
        more = false;
        while let Some(tx) = dns.resolver.poll_transmit() {
            more = true;
            answer(dns, zone, down, tx, now);
        }
        dns.poll(now);
    }
}

fn answer(dns: &mut Dns, zone: Zone, down: &[SocketAddr], tx: Transmit, now: Instant) {
    {
        if down.contains(&tx.server) {
            return;
        }
        let q = Message::from_vec(&tx.payload).unwrap();
        assert!(q.edns.is_some(), "queries carry EDNS0");
        let name = q.queries[0]
            .name()
            .to_ascii()
            .trim_end_matches('.')
            .to_lowercase();
        let qt = match q.queries[0].query_type() {
            hickory_proto::rr::RecordType::A => QType::A,
            hickory_proto::rr::RecordType::AAAA => QType::Aaaa,
            hickory_proto::rr::RecordType::TLSA => QType::Tlsa,
            _ => QType::Mx,
        };
        let Some((rcode, answers)) = zone(&name, qt, tx.tcp) else {
            return;
        };
        let truncate = answers.iter().any(|(_, t, _)| *t == u32::MAX);
        let answers = if truncate {
            vec![]
        } else {
            answers
                .iter()
                .map(|(n, t, d)| (n.as_str(), *t, d.clone()))
                .collect()
        };
        let mut r = response(&tx.payload, rcode, answers, Some(60));
        if truncate {
            let mut m = Message::from_vec(&r).unwrap();
            m.metadata.truncation = true;
            r = m.to_vec().unwrap();
        }
        // The zone "sec.test" is signed: a validating resolver sets AD.
        if name.ends_with("sec.test") && rcode == ResponseCode::NoError {
            let mut m = Message::from_vec(&r).unwrap();
            m.metadata.authentic_data = true;
            r = m.to_vec().unwrap();
        }
        if tx.tcp {
            dns.resolver.handle_tcp(tx.query, &r, now);
        } else {
            dns.resolver.handle_udp(tx.server, &r, now);
        }
    }
}

fn rec(n: &str, ttl: u32, d: RData) -> (String, u32, RData) {
    (n.to_string(), ttl, d)
}

fn zone(name: &str, qt: QType, tcp: bool) -> Option<Reply> {
    use QType::*;
    let ok = ResponseCode::NoError;
    Some(match (name, qt) {
        ("example.test", Mx) => (
            ok,
            vec![
                rec(name, 300, mx(20, "mx3.example.test")),
                rec(name, 300, mx(10, "mx1.example.test")),
                rec(name, 300, mx(10, "mx2.example.test")),
            ],
        ),
        ("mx1.example.test", A) => (ok, vec![rec(name, 300, a("192.0.2.1"))]),
        ("mx1.example.test", Aaaa) => (ok, vec![rec(name, 300, aaaa("2001:db8::1"))]),
        ("mx2.example.test", A) => (ok, vec![rec(name, 100, a("192.0.2.2"))]),
        ("mx3.example.test", A) => (
            ok,
            vec![
                rec(name, 300, cname("real.example.test")),
                rec("real.example.test", 300, a("192.0.2.3")),
            ],
        ),
        ("implicit.test", A) => (ok, vec![rec(name, 300, a("192.0.2.9"))]),
        ("sec.test", Mx) => (
            ok,
            vec![
                rec(name, 300, mx(10, "mx.sec.test")),
                rec(name, 300, mx(20, "bare.sec.test")),
                rec(name, 300, mx(30, "broken.sec.test")),
                rec(name, 300, mx(40, "mx1.example.test")),
            ],
        ),
        ("mx.sec.test" | "bare.sec.test" | "broken.sec.test", A) => {
            (ok, vec![rec(name, 300, a("192.0.2.10"))])
        }
        ("_25._tcp.mx.sec.test", Tlsa) => (ok, vec![rec(name, 300, tlsa(3, 1, 1, &[7; 32]))]),
        ("_25._tcp.broken.sec.test", Tlsa) => (ResponseCode::ServFail, vec![]),
        ("alias.sec.test", Mx) => (
            ok,
            vec![
                rec(name, 300, mx(10, "cn.sec.test")),
                rec(name, 300, mx(20, "cnbare.sec.test")),
            ],
        ),
        ("cn.sec.test", A) => (
            ok,
            vec![
                rec(name, 300, cname("real.sec.test")),
                rec("real.sec.test", 300, a("192.0.2.11")),
            ],
        ),
        ("cnbare.sec.test", A) => (
            ok,
            vec![
                rec(name, 300, cname("realbare.sec.test")),
                rec("realbare.sec.test", 300, a("192.0.2.12")),
            ],
        ),
        ("_25._tcp.cn.sec.test", Tlsa) => (ok, vec![rec(name, 300, tlsa(3, 1, 1, &[7; 32]))]),
        ("_25._tcp.real.sec.test", Tlsa) => (ok, vec![rec(name, 300, tlsa(3, 1, 1, &[9; 32]))]),
        ("_25._tcp.cnbare.sec.test", Tlsa) => (ok, vec![rec(name, 300, tlsa(3, 1, 1, &[8; 32]))]),
        ("insecure.test", Mx) => (ok, vec![rec(name, 300, mx(10, "mx.sec.test"))]),
        ("nullmx.test", Mx) => (ok, vec![rec(name, 300, mx(0, "."))]),
        ("servfail.test", _) => (ResponseCode::ServFail, vec![]),
        ("refused.test", _) => (ResponseCode::Refused, vec![]),
        ("silent.test", _) => return None,
        ("big.test", A) if !tcp => (ok, vec![]).truncated(),
        ("big.test", A) => (ok, vec![rec(name, 300, a("192.0.2.77"))]),
        ("noaddr.test", Mx) => (ok, vec![rec(name, 300, mx(10, "nxhost.test"))]),
        ("chain.test", A) => (ok, vec![rec(name, 300, cname("hop1.test"))]),
        ("hop1.test", A) => (ok, vec![rec(name, 300, a("192.0.2.50"))]),
        ("loop.test", A) => (ok, vec![rec(name, 300, cname("loop2.test"))]),
        ("loop2.test", A) => (ok, vec![rec(name, 300, cname("loop.test"))]),
        (n, _) if n.starts_with("nx") => (ResponseCode::NXDomain, vec![]),
        _ => (ok, vec![]),
    })
}

trait Truncated {
    fn truncated(self) -> Self;
}
impl Truncated for Reply {
    /// Marked by an impossible TTL, turned into the TC bit below.
    fn truncated(self) -> Self {
        (
            ResponseCode::NoError,
            vec![rec("big.test", u32::MAX, a("0.0.0.0"))],
        )
    }
}

fn servers() -> Vec<SocketAddr> {
    vec![
        "127.0.0.1:5301".parse().unwrap(),
        "127.0.0.1:5302".parse().unwrap(),
    ]
}

fn new_dns(seed: u64) -> Dns {
    let cfg = ResolverConfig {
        servers: servers(),
        timeout: Duration::from_secs(2),
        attempts: 2,
        cache_size: 100,
        seed,
        max_in_flight: 4,
        dnssec: false,
    };
    Dns::new(
        Resolver::new(cfg),
        HostsConfig {
            seed,
            ..HostsConfig::default()
        },
    )
}

/// Runs one hosts() job to its end, jumping the clock to each timeout.
fn run_hosts(
    dns: &mut Dns,
    nexthop: &str,
    down: &[SocketAddr],
    t0: Instant,
) -> (Result<HostList, DnsError>, Duration) {
    let id = dns.hosts(nexthop, t0);
    let mut now = t0;
    for _ in 0..100 {
        serve(dns, zone, down, now);
        if let Some((j, r)) = dns.poll_event() {
            assert_eq!(j, id);
            return (r, now - t0);
        }
        now = dns.resolver.poll_timeout().expect("something pending");
        dns.resolver.handle_timeout(now);
        dns.poll(now);
    }
    panic!("hosts({nexthop}) never finished");
}

fn names(l: &HostList) -> Vec<(&str, u16)> {
    l.hosts
        .iter()
        .map(|h| (h.name.as_str(), h.preference))
        .collect()
}

#[test]
fn mx_sorted_with_addresses_and_cname() {
    let mut dns = new_dns(7);
    let (r, _) = run_hosts(&mut dns, "Example.TEST", &[], Instant::now());
    let l = r.unwrap();
    assert!(l.from_mx);
    let n = names(&l);
    assert_eq!(n[2], ("mx3.example.test", 20));
    assert!(
        n[..2].contains(&("mx1.example.test", 10)) && n[..2].contains(&("mx2.example.test", 10))
    );
    let mx1 = l
        .hosts
        .iter()
        .find(|h| h.name == "mx1.example.test")
        .unwrap();
    assert_eq!(
        mx1.addrs,
        vec![
            "192.0.2.1".parse::<std::net::IpAddr>().unwrap(),
            "2001:db8::1".parse().unwrap()
        ]
    );
    assert_eq!(
        l.hosts[2].addrs,
        vec!["192.0.2.3".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(
        l.ttl, 60,
        "the smallest TTL (the NODATA AAAA answers' SOA minimum)"
    );
}

#[test]
fn equal_preferences_are_shuffled_by_seed() {
    let mut firsts = std::collections::BTreeSet::new();
    for seed in 1..40 {
        let mut dns = new_dns(seed);
        let (r, _) = run_hosts(&mut dns, "example.test", &[], Instant::now());
        let l = r.unwrap();
        firsts.insert(l.hosts[0].name.clone());
        assert_eq!(l.hosts[2].name, "mx3.example.test");
    }
    assert_eq!(
        firsts.len(),
        2,
        "both preference-10 hosts come first for some seed"
    );
    let a = run_hosts(&mut new_dns(5), "example.test", &[], Instant::now())
        .0
        .unwrap();
    let b = run_hosts(&mut new_dns(5), "example.test", &[], Instant::now())
        .0
        .unwrap();
    assert_eq!(names(&a), names(&b), "same seed, same order");
}

#[test]
fn implicit_null_nx_and_failures() {
    let t0 = Instant::now();
    let mut dns = new_dns(1);
    let l = run_hosts(&mut dns, "implicit.test", &[], t0).0.unwrap();
    assert!(!l.from_mx);
    assert_eq!(names(&l), vec![("implicit.test", 0)]);

    assert_eq!(
        run_hosts(&mut dns, "nullmx.test", &[], t0).0,
        Err(DnsError::NullMx("nullmx.test".into()))
    );
    let e = run_hosts(&mut dns, "nxdomain.test", &[], t0).0.unwrap_err();
    assert_eq!(e, DnsError::NotFound("nxdomain.test".into()));
    assert!(!e.is_temporary());
    let e = run_hosts(&mut dns, "noaddr.test", &[], t0).0.unwrap_err();
    assert_eq!(e, DnsError::NoAddress("noaddr.test".into()));
    assert!(!e.is_temporary());

    let (e, took) = run_hosts(&mut dns, "servfail.test", &[], t0);
    assert!(matches!(e, Err(DnsError::ServFail(_))));
    assert_eq!(
        took,
        Duration::ZERO,
        "SERVFAIL moves to the next server at once"
    );
    assert!(matches!(
        run_hosts(&mut dns, "refused.test", &[], t0).0,
        Err(DnsError::ServFail(_))
    ));

    let (e, took) = run_hosts(&mut dns, "silent.test", &[], t0);
    assert_eq!(e, Err(DnsError::Timeout));
    assert_eq!(took, Duration::from_secs(8), "2 servers x 2 attempts x 2 s");
}

#[test]
fn second_server_answers_when_first_is_down() {
    let mut dns = new_dns(1);
    let (r, took) = run_hosts(&mut dns, "implicit.test", &[servers()[0]], Instant::now());
    assert_eq!(r.unwrap().hosts[0].addrs.len(), 1);
    // MX, then A and AAAA in parallel: each query waits once for the first server.
    assert_eq!(
        took,
        Duration::from_secs(4),
        "one timeout per query, then the second server"
    );
}

#[test]
fn truncation_falls_back_to_tcp() {
    let mut dns = new_dns(1);
    let l = run_hosts(&mut dns, "[big.test]:2525", &[], Instant::now())
        .0
        .unwrap();
    assert_eq!(l.hosts[0].port, 2525);
    assert_eq!(
        l.hosts[0].addrs,
        vec!["192.0.2.77".parse::<std::net::IpAddr>().unwrap()]
    );
}

#[test]
fn literals_skip_mx_and_cnames_are_followed() {
    let t0 = Instant::now();
    let mut dns = new_dns(1);
    let l = run_hosts(&mut dns, "[192.0.2.5]:26", &[], t0).0.unwrap();
    assert_eq!(
        (l.hosts[0].port, l.hosts[0].addrs.len(), l.from_mx),
        (26, 1, false)
    );
    assert_eq!(dns.resolver.stats.sent, 0);
    let l = run_hosts(&mut dns, "[chain.test]", &[], t0).0.unwrap();
    assert_eq!(
        l.hosts[0].addrs,
        vec!["192.0.2.50".parse::<std::net::IpAddr>().unwrap()]
    );
    assert!(matches!(
        run_hosts(&mut dns, "[loop.test]", &[], t0).0,
        Err(DnsError::CnameChain(_))
    ));
    for bad in ["[", "[x]junk", "host:notaport", "[x]:99999", "", "a..b"] {
        assert!(
            matches!(
                run_hosts(&mut dns, bad, &[], t0).0,
                Err(DnsError::BadName(_))
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn cache_answers_and_expires() {
    let t0 = Instant::now();
    let mut dns = new_dns(1);
    run_hosts(&mut dns, "example.test", &[], t0).0.unwrap();
    let sent = dns.resolver.stats.sent;
    run_hosts(&mut dns, "example.test", &[], t0 + Duration::from_secs(30))
        .0
        .unwrap();
    assert_eq!(dns.resolver.stats.sent, sent, "all from the cache");
    run_hosts(&mut dns, "nxdomain.test", &[], t0).0.unwrap_err();
    let sent = dns.resolver.stats.sent;
    run_hosts(&mut dns, "nxdomain.test", &[], t0 + Duration::from_secs(59))
        .0
        .unwrap_err();
    assert_eq!(
        dns.resolver.stats.sent, sent,
        "negative answers are cached (SOA minimum 60 s)"
    );
    run_hosts(&mut dns, "nxdomain.test", &[], t0 + Duration::from_secs(61))
        .0
        .unwrap_err();
    assert!(dns.resolver.stats.sent > sent, "and expire");
    // Server failures are not cached.
    run_hosts(&mut dns, "servfail.test", &[], t0).0.unwrap_err();
    let sent = dns.resolver.stats.sent;
    run_hosts(&mut dns, "servfail.test", &[], t0).0.unwrap_err();
    assert!(dns.resolver.stats.sent > sent);
}

#[test]
fn cache_size_is_bounded() {
    let cfg = ResolverConfig {
        servers: servers(),
        cache_size: 3,
        ..ResolverConfig::default()
    };
    let mut dns = Dns::new(Resolver::new(cfg), HostsConfig::default());
    let t0 = Instant::now();
    for i in 0..10 {
        run_hosts(&mut dns, &format!("[h{i}.test]"), &[], t0)
            .0
            .unwrap_err();
    }
    assert!(dns.resolver.cache_len() <= 3);
}

#[test]
fn spoofed_and_stray_replies_are_ignored() {
    let t0 = Instant::now();
    let mut dns = new_dns(1);
    let id = dns.hosts("[implicit.test]", t0);
    let tx = dns.resolver.poll_transmit().unwrap();
    let good = response(
        &tx.payload,
        ResponseCode::NoError,
        vec![("implicit.test", 5, a("192.0.2.9"))],
        None,
    );
    dns.resolver
        .handle_udp("127.0.0.1:9999".parse().unwrap(), &good, t0);
    dns.resolver.handle_udp(tx.server, b"\x00", t0);
    dns.resolver.handle_udp(tx.server, &[0xff; 40], t0);
    dns.poll(t0);
    assert!(
        dns.poll_event().is_none(),
        "wrong source and garbage change nothing"
    );
    dns.resolver.handle_udp(tx.server, &good, t0);
    while let Some(tx) = dns.resolver.poll_transmit() {
        let r = response(&tx.payload, ResponseCode::NoError, vec![], Some(5));
        dns.resolver.handle_udp(tx.server, &r, t0);
    }
    dns.poll(t0);
    let (j, r) = dns.poll_event().unwrap();
    assert_eq!(j, id);
    assert_eq!(r.unwrap().hosts[0].addrs.len(), 1);
}

#[test]
fn queries_for_the_same_name_are_joined() {
    let t0 = Instant::now();
    let mut dns = new_dns(1);
    let a = dns.hosts("implicit.test", t0);
    let b = dns.hosts("implicit.test", t0);
    assert_eq!(dns.resolver.in_flight(), 1, "one MX query for both");
    serve(&mut dns, zone, &[], t0);
    let got: Vec<JobId> = std::iter::from_fn(|| dns.poll_event())
        .map(|(j, r)| {
            assert!(r.is_ok());
            j
        })
        .collect();
    assert_eq!(got, vec![a, b]);
}

#[test]
fn native_addresses_come_from_the_shell() {
    let t0 = Instant::now();
    let cfg = ResolverConfig {
        servers: servers(),
        ..ResolverConfig::default()
    };
    let mut dns = Dns::new(
        Resolver::new(cfg),
        HostsConfig {
            native: true,
            ..HostsConfig::default()
        },
    );
    let id = dns.hosts("example.test", t0);
    serve(&mut dns, zone, &[], t0);
    let reqs: Vec<NativeRequest> = std::iter::from_fn(|| dns.poll_native()).collect();
    assert_eq!(reqs.len(), 3, "one per exchanger, MX still from DNS");
    for (i, r) in reqs.iter().enumerate() {
        let answer = if i == 0 {
            Err(DnsError::ServFail("resolver down".into()))
        } else {
            Ok(vec!["192.0.2.8".parse().unwrap()])
        };
        dns.native_done(r, answer, t0);
    }
    let (j, l) = dns.poll_event().unwrap();
    assert_eq!(j, id);
    let l = l.unwrap();
    assert_eq!(l.hosts.iter().filter(|h| h.addrs.is_empty()).count(), 1);
    assert!(l
        .hosts
        .iter()
        .any(|h| h.error.as_ref().is_some_and(DnsError::is_temporary)));
}

#[test]
fn at_most_max_in_flight_on_the_wire() {
    let t0 = Instant::now();
    let mut dns = new_dns(1);
    for i in 0..10 {
        dns.hosts(&format!("d{i}.test"), t0);
    }
    let sent = std::iter::from_fn(|| dns.resolver.poll_transmit()).count();
    assert_eq!((sent, dns.resolver.queued()), (4, 6));
    // Time out the first four: the next four go out.
    let t1 = dns.resolver.poll_timeout().unwrap();
    dns.resolver.handle_timeout(t1);
    assert_eq!(
        std::iter::from_fn(|| dns.resolver.poll_transmit()).count(),
        4,
        "retries of the same four"
    );
    assert_eq!(dns.resolver.queued(), 6);
}

#[test]
fn servers_and_nexthops_parse() {
    assert_eq!(
        parse_server("192.0.2.1"),
        Some("192.0.2.1:53".parse().unwrap())
    );
    assert_eq!(
        parse_server("127.0.0.1:5353"),
        Some("127.0.0.1:5353".parse().unwrap())
    );
    assert_eq!(parse_server("::1"), Some("[::1]:53".parse().unwrap()));
    assert_eq!(
        parse_server("[::1]:5353"),
        Some("[::1]:5353".parse().unwrap())
    );
    assert_eq!(parse_server("nonsense"), None);
    let rc = "# c\nnameserver 10.0.0.1\nsearch x\nnameserver ::1\nnameserver fe80::1%eth0\n";
    assert_eq!(servers_from_resolv_conf(rc).len(), 2);
    assert_eq!(
        hosts::parse_nexthop("[IPv6:2001:db8::1]:25").unwrap(),
        ("2001:db8::1".into(), 25, true)
    );
    assert_eq!(
        hosts::parse_nexthop("Example.COM:587").unwrap(),
        ("example.com".into(), 587, false)
    );
}

proptest::proptest! {
    #[test]
    fn any_reply_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        let t0 = Instant::now();
        let mut dns = new_dns(1);
        dns.hosts("example.test", t0);
        let tx = dns.resolver.poll_transmit().unwrap();
        let mut b = bytes.clone();
        if b.len() >= 2 {
            b[..2].copy_from_slice(&tx.wire_id.to_be_bytes());
        }
        dns.resolver.handle_udp(tx.server, &b, t0);
        dns.resolver.handle_tcp(tx.query, &b, t0);
        dns.poll(t0);
    }

    #[test]
    fn any_nexthop_never_panics(s in "(?s).{0,80}") {
        let mut dns = new_dns(1);
        dns.hosts(&s, Instant::now());
        dns.poll(Instant::now());
    }
}

#[test]
fn dnssec_classes_hosts_for_dane() {
    let cfg = ResolverConfig {
        servers: servers(),
        dnssec: true,
        ..ResolverConfig::default()
    };
    let mut dns = Dns::new(Resolver::new(cfg), HostsConfig::default());
    let (r, _) = run_hosts(&mut dns, "sec.test", &[], Instant::now());
    let l = r.unwrap();
    let dane = |n: &str| l.hosts.iter().find(|h| h.name == n).unwrap().dane.clone();
    assert_eq!(
        dane("mx.sec.test"),
        Dane::Records(vec![(3, 1, 1, vec![7; 32])])
    );
    assert_eq!(dane("bare.sec.test"), Dane::NoRecords, "secure, no TLSA");
    assert!(
        matches!(dane("broken.sec.test"), Dane::Failed(DnsError::ServFail(_))),
        "a failed TLSA lookup of a secure host is not 'no records'"
    );
    assert_eq!(
        dane("mx1.example.test"),
        Dane::Insecure,
        "unsigned address records"
    );
    assert!(!l.authentic);
    // An unsigned MX answer makes every exchanger insecure, signed or not.
    let (r, _) = run_hosts(&mut dns, "insecure.test", &[], Instant::now());
    assert_eq!(r.unwrap().hosts[0].dane, Dane::Insecure);
    // A configured [host] needs no MX: its own records decide.
    let (r, _) = run_hosts(&mut dns, "[mx.sec.test]", &[], Instant::now());
    assert!(matches!(r.unwrap().hosts[0].dane, Dane::Records(_)));
    // An alias: the TLSA records at its target come first; a target
    // without any leaves the alias's own.
    let (r, _) = run_hosts(&mut dns, "alias.sec.test", &[], Instant::now());
    let l = r.unwrap();
    let dane = |n: &str| l.hosts.iter().find(|h| h.name == n).unwrap().dane.clone();
    assert_eq!(
        dane("cn.sec.test"),
        Dane::Records(vec![(3, 1, 1, vec![9; 32])])
    );
    assert_eq!(
        dane("cnbare.sec.test"),
        Dane::Records(vec![(3, 1, 1, vec![8; 32])])
    );
    // Without DNSSEC the AD bit is not believed and TLSA is not asked.
    let mut plain = new_dns(3);
    let (r, _) = run_hosts(&mut plain, "sec.test", &[], Instant::now());
    let l = r.unwrap();
    assert!(!l.authentic && l.hosts.iter().all(|h| h.dane == Dane::Insecure));
}

#[test]
fn a_failure_is_transient_exactly_when_it_is_temporary() {
    for e in [
        DnsError::NotFound("a.test".into()),
        DnsError::NullMx("a.test".into()),
        DnsError::BadName("a..test".into()),
        DnsError::NoAddress("a.test".into()),
        DnsError::ServFail("SERVFAIL".into()),
        DnsError::Timeout,
        DnsError::NoServers,
        DnsError::CnameChain("a.test".into()),
    ] {
        let s = e.status();
        assert_eq!(s.is_transient(), e.is_temporary(), "{e}");
        assert_eq!(s.is_permanent(), !e.is_temporary(), "{e}");
    }
    assert_eq!(
        DnsError::NullMx("a.test".into()).status_text(),
        "5.1.10 Domain a.test does not accept mail (nullMX)"
    );
}
