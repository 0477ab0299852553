//! Benchmarks of router(8) through its socket, as qmgr would use it
//! (run: `cargo test --release --test router_bench -- --ignored --nocapture`).
//!
//! - table-only resolution: pipelined Resolve requests, windows of 1,000
//!   in flight, against a site with transport, virtual and local tables;
//! - DNS: hosts() for 10,000 distinct domains served by dnsmasq on a
//!   loopback port (each an MX plus an A record), with a bounded number of
//!   requests in flight; reports throughput and p50/p99 latency.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ipc::router::{Request, Response, Router};
use ipc::{Client, Tagged};
use sluice_suite::{wait_for, Instance};

fn instance(extra: &str) -> Instance {
    let inst = Instance::new("router unix - - n - 1 router\n", "");
    let root = inst.root().to_path_buf();
    let transport: String = (0..1000)
        .map(|i| format!("dom{i}.test smtp:[192.0.2.{}]\n", i % 250 + 1))
        .collect();
    let virt: String = (0..1000)
        .map(|i| format!("alias{i}@example.test user{i}@example.test\n"))
        .collect();
    let users: String = (0..1000).map(|i| format!("user{i} x\n")).collect();
    std::fs::write(root.join("transport"), transport).unwrap();
    std::fs::write(root.join("virtual"), virt).unwrap();
    std::fs::write(root.join("users"), users).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(inst.etc().join("main.cf"))
        .unwrap();
    write!(
        f,
        "myhostname = mx.example.test\nmydestination = $myhostname, example.test\nrecipient_delimiter = +\n\
         transport_maps = hash:{r}/transport\nvirtual_alias_maps = hash:{r}/virtual\n\
         local_recipient_maps = hash:{r}/users\n{extra}\n",
        r = root.display()
    )
    .unwrap();
    inst
}

fn connect(inst: &Instance) -> Client<Router> {
    let sock = inst.root().join("spool/private/router");
    wait_for(20, "router socket", || sock.exists().then_some(()));
    Client::<Router>::connect(&sock, Duration::from_secs(60)).unwrap()
}

#[test]
#[ignore]
fn bench_table_resolution() {
    let mut inst = instance("dns_servers = 127.0.0.1:9\n");
    inst.start();
    let mut c = connect(&inst);
    let addrs: Vec<String> = (0..1000)
        .flat_map(|i| {
            [
                format!("alias{i}@example.test"),
                format!("user{i}+x@example.test"),
                format!("joe@dom{i}.test"),
                format!("x@far{i}.test"),
            ]
        })
        .collect();
    let total = 400_000;
    let window = 1000;
    let t0 = Instant::now();
    let mut sent = 0;
    while sent < total {
        let ids: Vec<u64> = (0..window)
            .map(|k| {
                c.send(&Request::Resolve {
                    address: addrs[(sent + k) % addrs.len()].clone(),
                    smtputf8: false,
                })
                .unwrap()
            })
            .collect();
        for id in ids {
            assert!(matches!(c.wait(id).unwrap(), Response::Resolved { .. }));
        }
        sent += window;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!("BENCH table-only: {total} resolutions in {secs:.2} s = {:.0}/s (one router process, one client, {window} in flight)", total as f64 / secs);
}

#[test]
#[ignore]
fn bench_dns_hosts() {
    let n = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("dnsmasq.conf");
    let mut text = String::new();
    // Two sets of n distinct domains: one per uncached round.
    for i in 0..2 * n {
        if i == 0 {
            text.push_str("host-record=ready.bench.test,10.255.0.1\n");
        }
        text.push_str(&format!("mx-host=d{i}.bench.test,mx{i}.bench.test,10\nhost-record=mx{i}.bench.test,10.{}.{}.{}\n", i / 65536, (i / 256) % 256, i % 256));
    }
    std::fs::write(&conf, text).unwrap();
    let port = loop {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = u.local_addr().unwrap().port();
        if TcpListener::bind(("127.0.0.1", p)).is_ok() {
            break p;
        }
    };
    let mut child = Command::new("/usr/sbin/dnsmasq")
        .args([
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
        ])
        .args([
            "--pid-file=",
            "--local=/test/",
            "--local-ttl=60",
            "--user=root",
            "--dns-forward-max=10000",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--conf-file={}", conf.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut inst = instance(&format!(
        "dns_servers = 127.0.0.1:{port}\ninet_protocols = ipv4\ndns_cache_size = 50000\n"
    ));
    inst.start();
    let mut c = connect(&inst);
    let mut raw =
        std::os::unix::net::UnixStream::connect(inst.root().join("spool/private/router")).unwrap();
    raw.write_all(&ipc::encode(&ipc::Hello::of::<Router>()))
        .unwrap();
    let mut frames = ipc::FrameBuf::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        if let Some(f) = frames.next_frame().unwrap() {
            assert_eq!(
                ipc::decode::<ipc::HelloReply>(&f).unwrap(),
                ipc::HelloReply::Accepted
            );
            break;
        }
        let k = raw.read(&mut buf).unwrap();
        frames.push(&buf[..k]);
    }
    wait_for(10, "dnsmasq", || {
        matches!(
            c.call(&Request::Hosts {
                nexthop: "ready.bench.test".into()
            })
            .unwrap(),
            Response::Hosts(_)
        )
        .then_some(())
    });
    for (round, window, first) in [
        ("uncached", 100usize, 0),
        ("uncached", 1000, n),
        ("cached", 1000, 0),
    ] {
        // Uncached rounds ask each name of their set once; the cached
        // round asks the first set again.
        let names: Vec<String> = (first..first + n)
            .map(|i| format!("d{i}.bench.test"))
            .collect();
        let mut lat = Vec::with_capacity(n);
        let mut started: HashMap<u64, Instant> = HashMap::new();
        let t0 = Instant::now();
        let mut next = 0;
        let mut errors = 0;
        let mut id = 0u64;
        while next < names.len() || !started.is_empty() {
            let mut out = Vec::new();
            while next < names.len() && started.len() < window {
                id += 1;
                out.extend(ipc::encode(&Tagged {
                    id,
                    body: Request::Hosts {
                        nexthop: names[next].clone(),
                    },
                }));
                started.insert(id, Instant::now());
                next += 1;
            }
            raw.write_all(&out).unwrap();
            // Take every answer that has arrived, stamped as it is read.
            loop {
                if let Some(f) = frames.next_frame().unwrap() {
                    let t: Tagged<Response> = ipc::decode(&f).unwrap();
                    if !matches!(t.body, Response::Hosts(_)) {
                        errors += 1;
                    }
                    lat.push(started.remove(&t.id).unwrap().elapsed());
                    if started.len() < window / 2 || started.is_empty() {
                        break;
                    }
                    continue;
                }
                let k = raw.read(&mut buf).unwrap();
                assert!(k > 0, "router closed the connection");
                frames.push(&buf[..k]);
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        lat.sort();
        let p = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize];
        let what = round;
        println!(
            "BENCH dns {what}: {} hosts() in {secs:.2} s = {:.0}/s, {window} requests in flight (at most 128 DNS queries on the wire), p50 {:?}, p99 {:?}, errors {errors}",
            lat.len(),
            lat.len() as f64 / secs,
            p(0.5),
            p(0.99)
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}
