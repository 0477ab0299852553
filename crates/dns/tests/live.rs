//! The resolver over real sockets: dnsmasq on a loopback port for MX, A,
//! AAAA, CNAME, NXDOMAIN and null MX; a scripted responder built on
//! hickory-proto for SERVFAIL and truncation (TCP fallback); a silent
//! socket for timeouts. Nothing leaves 127.0.0.1.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dns::blocking::Driver;
use dns::{Dns, DnsError, HostsConfig, Protocols, QType, Resolver, ResolverConfig};
use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record};

const DNSMASQ: &str = "/usr/sbin/dnsmasq";

/// dnsmasq on 127.0.0.1 and a free port, killed on drop.
struct Dnsmasq {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    // Both protocols must be free: dnsmasq binds UDP and TCP.
    loop {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = u.local_addr().unwrap().port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn dnsmasq(extra: &[String]) -> Option<Dnsmasq> {
    if !std::path::Path::new(DNSMASQ).exists() {
        eprintln!("skipped: {DNSMASQ} is not installed");
        return None;
    }
    let port = free_port();
    let child = Command::new(DNSMASQ)
        .args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
        ])
        .args([
            "--listen-address=127.0.0.1",
            "--pid-file=",
            "--local=/test/",
            "--local-ttl=60",
            "--user=root",
        ])
        .arg(format!("--port={port}"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dnsmasq");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let d = Dnsmasq { child, addr };
    // Ready when it answers.
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    probe
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut q = Message::query();
    q.add_query(hickory_proto::op::Query::query(
        Name::from_ascii("probe.test.").unwrap(),
        hickory_proto::rr::RecordType::A,
    ));
    let bytes = q.to_vec().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 512];
    while Instant::now() < deadline {
        let _ = probe.send_to(&bytes, addr);
        if probe.recv_from(&mut buf).is_ok() {
            return Some(d);
        }
    }
    panic!("dnsmasq did not start on {addr}");
}

fn site_args() -> Vec<String> {
    [
        "--mx-host=example.test,mx1.example.test,10",
        "--mx-host=example.test,mx2.example.test,10",
        "--mx-host=example.test,mx3.example.test,20",
        "--host-record=mx1.example.test,192.0.2.1,2001:db8::1",
        "--host-record=mx2.example.test,192.0.2.2",
        "--host-record=real.example.test,192.0.2.3",
        "--cname=mx3.example.test,real.example.test",
        "--mx-host=nullmx.test,.,0",
        "--host-record=implicit.test,192.0.2.9",
        "--mx-host=noaddr.test,nowhere.test,10",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn driver(servers: Vec<SocketAddr>, protocols: Protocols, timeout: Duration) -> Driver {
    let cfg = ResolverConfig {
        servers,
        timeout,
        attempts: 2,
        cache_size: 1000,
        seed: 42,
        max_in_flight: 64,
        dnssec: false,
    };
    Driver::new(Dns::new(
        Resolver::new(cfg),
        HostsConfig {
            protocols,
            prefer_ipv6: false,
            seed: 42,
            native: false,
        },
    ))
    .unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn dnsmasq_answers_every_case() {
    let Some(d) = dnsmasq(&site_args()) else {
        return;
    };
    let mut drv = driver(vec![d.addr], Protocols::All, Duration::from_secs(2));
    let limit = Duration::from_secs(10);

    let l = drv.hosts("example.test", limit).unwrap();
    assert!(l.from_mx);
    let names: Vec<&str> = l.hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names.len(), 3);
    assert_eq!(names[2], "mx3.example.test");
    let mx1 = l
        .hosts
        .iter()
        .find(|h| h.name == "mx1.example.test")
        .unwrap();
    assert_eq!(mx1.addrs, vec![ip("192.0.2.1"), ip("2001:db8::1")]);
    assert_eq!(l.hosts[2].addrs, vec![ip("192.0.2.3")], "CNAME followed");
    assert!(l.ttl > 0 && l.ttl <= 60);
    assert!(!l.authentic);

    let l = drv.hosts("implicit.test", limit).unwrap();
    assert!(!l.from_mx);
    assert_eq!(l.hosts[0].addrs, vec![ip("192.0.2.9")]);

    assert_eq!(
        drv.hosts("nullmx.test", limit),
        Err(DnsError::NullMx("nullmx.test".into()))
    );
    let e = drv.hosts("nosuch.test", limit).unwrap_err();
    assert_eq!(e, DnsError::NotFound("nosuch.test".into()));
    assert!(!e.is_temporary());
    let e = drv.hosts("noaddr.test", limit).unwrap_err();
    assert!(!e.is_temporary(), "{e}");

    let l = drv.hosts("[mx1.example.test]:2525", limit).unwrap();
    assert_eq!((l.hosts[0].port, l.hosts[0].addrs.len()), (2525, 2));

    let mut v4 = driver(vec![d.addr], Protocols::Ipv4, Duration::from_secs(2));
    let l = v4.hosts("[mx1.example.test]", limit).unwrap();
    assert_eq!(l.hosts[0].addrs, vec![ip("192.0.2.1")]);

    assert!(
        matches!(drv.lookup("mx1.example.test", QType::Aaaa, limit), Ok(a) if a.data.len() == 1)
    );
    let sent = drv.dns.resolver.stats.sent;
    drv.hosts("example.test", limit).unwrap();
    assert_eq!(
        drv.dns.resolver.stats.sent, sent,
        "second time from the cache"
    );
}

#[test]
fn many_queries_in_flight_at_once() {
    let args: Vec<String> = (0..200)
        .map(|i| format!("--host-record=h{i}.test,10.0.{}.{}", i / 250, i % 250 + 1))
        .collect();
    let Some(d) = dnsmasq(&args) else { return };
    let mut drv = driver(vec![d.addr], Protocols::Ipv4, Duration::from_secs(2));
    let now = Instant::now();
    let jobs: Vec<_> = (0..200)
        .map(|i| drv.dns.hosts(&format!("h{i}.test"), now))
        .collect();
    assert_eq!(
        drv.dns.resolver.in_flight(),
        200,
        "all 200 queries are taken"
    );
    assert_eq!(
        drv.dns.resolver.queued(),
        200 - 64,
        "64 on the wire, the rest wait"
    );
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while done < jobs.len() && Instant::now() < deadline {
        drv.turn(Instant::now() + Duration::from_millis(100))
            .unwrap();
        while let Some((_, r)) = drv.dns.poll_event() {
            assert_eq!(r.unwrap().hosts[0].addrs.len(), 1);
            done += 1;
        }
    }
    assert_eq!(done, jobs.len());
}

/// A scripted name server: SERVFAIL for `servfail.*`, a truncated UDP
/// answer and a full TCP one for `big.*`, silence for `silent.*`.
struct Scripted {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Source ports of the UDP queries received.
    ports: Arc<std::sync::Mutex<Vec<u16>>>,
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn answer(query: &[u8], tcp: bool) -> Option<Vec<u8>> {
    let q = Message::from_vec(query).ok()?;
    let question = q.queries.first()?.clone();
    let name = question.name().to_ascii().to_lowercase();
    let mut r = Message::response(q.metadata.id, OpCode::Query);
    r.add_query(question.clone());
    if name.starts_with("silent.") {
        return None;
    } else if name.starts_with("servfail.") {
        r.metadata.response_code = ResponseCode::ServFail;
    } else if name.starts_with("big.") && !tcp {
        r.metadata.truncation = true;
    } else if name.starts_with("big.") && question.query_type() == hickory_proto::rr::RecordType::A
    {
        for i in 1..=100u8 {
            r.add_answer(Record::from_rdata(
                question.name().clone(),
                60,
                RData::A(A::new(198, 51, 100, i)),
            ));
        }
    }
    r.to_vec().ok()
}

fn scripted() -> Scripted {
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = udp.local_addr().unwrap();
    let tcp = TcpListener::bind(addr).unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    tcp.set_nonblocking(true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let ports = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = ports.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while !s.load(Ordering::SeqCst) {
            if let Ok((n, from)) = udp.recv_from(&mut buf) {
                seen.lock().unwrap().push(from.port());
                if let Some(r) = answer(&buf[..n], false) {
                    let _ = udp.send_to(&r, from);
                }
            }
            while let Ok((mut c, _)) = tcp.accept() {
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut len = [0u8; 2];
                if c.read_exact(&mut len).is_err() {
                    continue;
                }
                let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
                if c.read_exact(&mut msg).is_err() {
                    continue;
                }
                if let Some(r) = answer(&msg, true) {
                    let mut out = (r.len() as u16).to_be_bytes().to_vec();
                    out.extend_from_slice(&r);
                    // Split the reply to exercise reassembly.
                    let (a, b) = out.split_at(out.len() / 2);
                    let _ = c.write_all(a);
                    let _ = c.flush();
                    std::thread::sleep(Duration::from_millis(5));
                    let _ = c.write_all(b);
                }
            }
        }
    });
    Scripted { addr, stop, ports }
}

#[test]
fn servfail_is_temporary_and_truncation_uses_tcp() {
    let s = scripted();
    let mut drv = driver(vec![s.addr], Protocols::Ipv4, Duration::from_secs(1));
    let limit = Duration::from_secs(10);
    let e = drv.hosts("servfail.test", limit).unwrap_err();
    assert!(
        matches!(e, DnsError::ServFail(_)) && e.is_temporary(),
        "{e}"
    );
    let l = drv.hosts("[big.test]", limit).unwrap();
    assert_eq!(l.hosts[0].addrs.len(), 100, "the whole answer, over TCP");
}

#[test]
fn silent_server_times_out_and_the_next_one_answers() {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let mut drv = driver(
        vec![silent_addr],
        Protocols::Ipv4,
        Duration::from_millis(200),
    );
    let t0 = Instant::now();
    let e = drv
        .hosts("anything.test", Duration::from_secs(10))
        .unwrap_err();
    assert_eq!(e, DnsError::Timeout);
    assert!(e.is_temporary());
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "2 attempts x 200 ms, took {took:?}"
    );

    let s = scripted();
    let mut drv = driver(
        vec![silent_addr, s.addr],
        Protocols::Ipv4,
        Duration::from_millis(200),
    );
    let l = drv.hosts("[big.test]", Duration::from_secs(10)).unwrap();
    assert_eq!(l.hosts[0].addrs.len(), 100);
}

#[test]
fn native_lookup_uses_the_system_resolver() {
    // No name server at all: the literal host goes to getaddrinfo only.
    let cfg = ResolverConfig {
        servers: vec![],
        ..ResolverConfig::default()
    };
    let hc = HostsConfig {
        protocols: Protocols::Ipv4,
        native: true,
        ..HostsConfig::default()
    };
    let mut drv = Driver::new(Dns::new(Resolver::new(cfg), hc)).unwrap();
    let l = drv
        .hosts("[localhost]:2525", Duration::from_secs(10))
        .unwrap();
    assert_eq!(l.hosts[0].addrs, vec![ip("127.0.0.1")]);
    assert_eq!(l.hosts[0].port, 2525);
}

#[test]
fn each_try_uses_a_fresh_port_and_refusal_fails_fast() {
    let s = scripted();
    let mut drv = driver(vec![s.addr], Protocols::Ipv4, Duration::from_secs(1));
    for i in 0..5 {
        let _ = drv.hosts(&format!("[host{i}.test]"), Duration::from_secs(10));
    }
    let ports = s.ports.lock().unwrap().clone();
    let mut distinct = ports.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        ports.len() >= 5 && distinct.len() > ports.len() / 2,
        "source ports {ports:?}"
    );

    // Nothing listens there: ICMP port unreachable ends each try at once.
    let closed = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut drv = driver(vec![closed], Protocols::Ipv4, Duration::from_secs(5));
    let t0 = Instant::now();
    let e = drv.hosts("x.test", Duration::from_secs(20)).unwrap_err();
    assert!(
        matches!(e, DnsError::ServFail(_)) && e.is_temporary(),
        "{e}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t0.elapsed()
    );
}
