//! cluster-bench: load for a running clusterd, and the figures of
//! docs/benchmarks.md (issue 15): slot grant latency, coordinator
//! messages per key per instance per second, and (read by scripts/bench
//! from /proc) clusterd's CPU.
//!
//! `cluster-bench --server ADDR --pki DIR --instances N --keys K --secs S`
//! connects N instances (`bench1.test` … with `DIR/benchI.test.pem` and
//! `.key`, clusterd's certificate checked against `DIR/ca.pem` under the
//! name `clusterd.test`), each behaving as qmgr's link does at a steady
//! load: once a second (the instances spread over the second) a heartbeat
//! reporting its use of K shared rates
//! (the same K keys on every instance; each second a tenth of them
//! starved, the rest with a few tokens used), and reading every answer.
//! One more connection, the probe, asks for a slot of a fresh key every
//! 10 ms and times the grant (want written → grant read), then opens and
//! releases it. After S seconds it prints one line of `key=value` figures:
//! grant latency percentiles, and the frames and per-key items each way
//! per key per instance per second. A load generator, not a daemon: one
//! blocking thread per connection. Exits 1 naming what failed.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::proto::{encode, Decoder, RateUse, ToCoord, ToInstance, WireRate, VERSION};

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

struct Args {
    server: String,
    pki: PathBuf,
    instances: usize,
    keys: usize,
    secs: u64,
}

fn fail(msg: &str) -> ! {
    eprintln!("cluster-bench: {msg}");
    std::process::exit(1)
}

fn args() -> Args {
    let mut a = Args {
        server: String::new(),
        pki: PathBuf::new(),
        instances: 50,
        keys: 1000,
        secs: 30,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it
            .next()
            .unwrap_or_else(|| fail(&format!("{k} needs a value")));
        let num = |v: &str| -> u64 {
            v.parse()
                .unwrap_or_else(|_| fail(&format!("{k} {v}: not a number")))
        };
        match k.as_str() {
            "--server" => a.server = v,
            "--pki" => a.pki = PathBuf::from(v),
            "--instances" => a.instances = num(&v) as usize,
            "--keys" => a.keys = num(&v) as usize,
            "--secs" => a.secs = num(&v),
            _ => fail(&format!("unknown option {k}")),
        }
    }
    if a.server.is_empty() || a.pki.as_os_str().is_empty() {
        fail("usage: cluster-bench --server ADDR --pki DIR [--instances N] [--keys K] [--secs S]");
    }
    a
}

/// Connects as `name` and says hello.
/// Connects and says hello, naming `keys` (numbered 0, 1, …).
fn connect(a: &Args, name: &str, keys: Vec<(u32, String)>) -> Tls {
    let d: &Path = &a.pki;
    let cfg = tls::mutual_client_config(
        &d.join(format!("{name}.pem")),
        &d.join(format!("{name}.key")),
        &d.join("ca.pem"),
    )
    .unwrap_or_else(|e| fail(&format!("{name}'s certificate: {e}")));
    let conn = rustls::ClientConnection::new(cfg, "clusterd.test".try_into().unwrap())
        .unwrap_or_else(|e| fail(&format!("TLS: {e}")));
    let sock = TcpStream::connect(&a.server)
        .unwrap_or_else(|e| fail(&format!("connect to {}: {e}", a.server)));
    let _ = sock.set_nodelay(true);
    let mut s = rustls::StreamOwned::new(conn, sock);
    send(
        &mut s,
        &ToCoord::Hello {
            version: VERSION,
            name: name.to_string(),
            known: 0,
            keys,
            held: vec![],
            rates: vec![],
        },
    );
    s
}

fn send(s: &mut Tls, msg: &ToCoord) {
    send_all(s, std::slice::from_ref(msg));
}

/// Several messages in one write, as qmgr's link sends what is queued.
fn send_all(s: &mut Tls, msgs: &[ToCoord]) {
    let bytes: Vec<u8> = msgs.iter().flat_map(encode).collect();
    s.write_all(&bytes)
        .and_then(|()| s.flush())
        .unwrap_or_else(|e| fail(&format!("write to clusterd: {e}")));
}

/// Reads what is there (waiting at most the socket's read timeout).
fn read_some(s: &mut Tls, dec: &mut Decoder, buf: &mut [u8]) -> bool {
    match s.read(buf) {
        Ok(0) => fail("clusterd closed the connection"),
        Ok(n) => {
            dec.push(&buf[..n]);
            true
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            false
        }
        Err(e) => fail(&format!("read from clusterd: {e}")),
    }
}

/// Frames and per-key items each way, over all instances.
#[derive(Default)]
struct Counts {
    frames_out: AtomicU64,
    items_out: AtomicU64,
    frames_in: AtomicU64,
    items_in: AtomicU64,
}

fn key(i: usize) -> String {
    format!("localip=192.0.2.1,grouping=g{i}")
}

/// One instance at a steady load until `stop`.
fn instance(
    a: &Args,
    name: &str,
    seed: u64,
    counts: &Counts,
    stop: &AtomicBool,
    measuring: &AtomicBool,
) {
    let names = (0..a.keys).map(|i| (i as u32, key(i))).collect();
    let mut s = connect(a, name, names);
    let _ = s.sock.set_read_timeout(Some(Duration::from_millis(20)));
    let limit = WireRate {
        tokens: 600,
        per_ms: 60_000,
        fixed_window: false,
    };
    let mut dec = cluster::proto::decoder();
    let mut buf = vec![0u8; 64 * 1024];
    // Instances started together would beat together; real ones are
    // spread over the second, as their starts are.
    let mut next_beat =
        Instant::now() + Duration::from_millis(1000 * seed / a.instances.max(1) as u64);
    let mut round = seed;
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= next_beat {
            next_beat += Duration::from_secs(1);
            round += 1;
            let rates: Vec<RateUse> = (0..a.keys)
                .map(|i| {
                    let starved = (i as u64 + round).is_multiple_of(10);
                    RateUse {
                        key: i as u32,
                        limit,
                        used: if starved { 0 } else { 1 + (i as u32 % 3) },
                        starved,
                    }
                })
                .collect();
            let items = rates.len() as u64;
            send(&mut s, &ToCoord::Heartbeat { rates });
            if measuring.load(Ordering::Relaxed) {
                counts.frames_out.fetch_add(1, Ordering::Relaxed);
                counts.items_out.fetch_add(items, Ordering::Relaxed);
            }
        }
        if read_some(&mut s, &mut dec, &mut buf) {
            while let Some(m) = dec
                .decode::<ToInstance>()
                .unwrap_or_else(|e| fail(&format!("a frame from clusterd: {e}")))
            {
                if measuring.load(Ordering::Relaxed) {
                    counts.frames_in.fetch_add(1, Ordering::Relaxed);
                    if matches!(m, ToInstance::Allot { .. } | ToInstance::Grant { .. }) {
                        counts.items_in.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// The probe: a fresh key's slot every 10 ms, timed; the latencies in µs.
fn probe(a: &Args, stop: &AtomicBool, measuring: &AtomicBool) -> Vec<u64> {
    let mut s = connect(a, "probe.test", vec![]);
    let mut dec = cluster::proto::decoder();
    let mut buf = vec![0u8; 64 * 1024];
    let mut lat = Vec::new();
    let mut next_beat = Instant::now();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= next_beat {
            next_beat += Duration::from_secs(1);
            send(&mut s, &ToCoord::Heartbeat { rates: vec![] });
        }
        // Each probe key is fresh: named, then wanted, in one write.
        let id = n as u32;
        n += 1;
        let k = format!("localip=192.0.2.9,grouping=probe{n}");
        let mut theirs = None;
        let t0 = Instant::now();
        send_all(
            &mut s,
            &[
                ToCoord::Key {
                    id,
                    name: k.clone(),
                },
                ToCoord::Want { key: id, limit: 2 },
            ],
        );
        // Short reads, so that heartbeats go on while it waits: a probe
        // silent for 3 s would be closed as a lost instance.
        let _ = s.sock.set_read_timeout(Some(Duration::from_millis(100)));
        let granted = 'wait: loop {
            if t0.elapsed() > Duration::from_secs(5) {
                break 'wait false;
            }
            if Instant::now() >= next_beat {
                next_beat += Duration::from_secs(1);
                send(&mut s, &ToCoord::Heartbeat { rates: vec![] });
            }
            if !read_some(&mut s, &mut dec, &mut buf) {
                continue;
            }
            while let Some(m) = dec
                .decode::<ToInstance>()
                .unwrap_or_else(|e| fail(&format!("a frame from clusterd: {e}")))
            {
                match &m {
                    ToInstance::Key { id, name } if *name == k => theirs = Some(*id),
                    ToInstance::Grant { key, slots, .. } if Some(*key) == theirs && *slots > 0 => {
                        break 'wait true;
                    }
                    _ => {}
                }
            }
        };
        let took = t0.elapsed();
        if !granted {
            // In the recovery window nothing is granted: wait it out.
            if measuring.load(Ordering::Relaxed) {
                fail("no grant within 5 s");
            }
            continue;
        }
        if measuring.load(Ordering::Relaxed) {
            lat.push(took.as_micros() as u64);
        }
        send(&mut s, &ToCoord::Opened { key: id });
        send(&mut s, &ToCoord::Release { key: id });
        std::thread::sleep(Duration::from_millis(10));
    }
    lat
}

fn pct(v: &[u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1000.0
}

fn main() {
    let a = Arc::new(args());
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let mut threads = Vec::new();
    for i in 1..=a.instances {
        let (a, stop, m, c) = (a.clone(), stop.clone(), measuring.clone(), counts.clone());
        threads.push(std::thread::spawn(move || {
            instance(&a, &format!("bench{i}.test"), i as u64, &c, &stop, &m)
        }));
    }
    let p = {
        let (a, stop, m) = (a.clone(), stop.clone(), measuring.clone());
        std::thread::spawn(move || probe(&a, &stop, &m))
    };
    // Past clusterd's recovery window and the first division of every key.
    std::thread::sleep(Duration::from_secs(5));
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    println!("measuring");
    let _ = std::io::stdout().flush();
    std::thread::sleep(Duration::from_secs(a.secs));
    measuring.store(false, Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut lat = p.join().unwrap_or_default();
    for t in threads {
        let _ = t.join();
    }
    lat.sort_unstable();
    let per = |x: &AtomicU64| {
        x.load(Ordering::Relaxed) as f64 / (a.keys as f64 * a.instances as f64 * secs)
    };
    println!(
        "instances={} keys={} secs={secs:.1} grants={} grant_p50_ms={:.3} grant_p99_ms={:.3} \
         grant_max_ms={:.3} to_coord_items_per_key_inst_s={:.3} to_coord_frames_per_inst_s={:.3} \
         to_inst_items_per_key_inst_s={:.3} to_inst_frames_per_key_inst_s={:.3}",
        a.instances,
        a.keys,
        lat.len(),
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat.last().map_or(f64::NAN, |&m| m as f64 / 1000.0),
        per(&counts.items_out),
        counts.frames_out.load(Ordering::Relaxed) as f64 / (a.instances as f64 * secs),
        per(&counts.items_in),
        per(&counts.frames_in),
    );
}
