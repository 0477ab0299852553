//! The CPU cost of signing one message, as cleanup signs it: the header
//! block canonicalized, the body hashed as it streams (64 KiB chunks, as
//! cleanup's frames), the signature made and formatted; for 2 KiB and
//! 100 KiB messages with an RSA-2048 and an Ed25519 key.
//!
//! `cargo run --release -p dkim --bin dkim-bench [SECONDS]`: each case
//! runs for SECONDS (default 3) of wall time, three times; the line gives
//! the median and the range of CPU µs per message (user + system time of
//! the process, from getrusage, over the messages signed). The RSA key is
//! made by `openssl genpkey`, as `sluice dkim keygen` makes one.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dkim::{KeySpec, PrivateKey, Settings, Signing};

fn cpu_us() -> f64 {
    // /proc/self/stat fields 14 and 15: utime and stime in clock ticks
    // (USER_HZ, 100 on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let after = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 * 10_000.0
}

fn message(size: usize) -> (Vec<u8>, Vec<u8>) {
    let head = b"Received: from client.example (client.example [192.0.2.1])\r\n\tby mx.example (Sluice) with ESMTP id 1K14A0Z7KC500NQ300000;\r\n\tWed, 25 Nov 2026 10:00:00 +0000\r\n\
From: Alice Example <alice@example.com>\r\nTo: Bob Example <bob@example.org>\r\nSubject: A message of the kind that is signed\r\n\
Date: Wed, 25 Nov 2026 10:00:00 +0000\r\nMessage-ID: <1K14A0Z7KC500NQ300000@mx.example>\r\nMIME-Version: 1.0\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n"
        .to_vec();
    let mut body = b"\r\n".to_vec();
    let line = b"The quick brown fox jumps over the lazy dog,  twice\t and again.\r\n";
    while head.len() + body.len() < size {
        body.extend_from_slice(line);
    }
    body.truncate(size - head.len());
    (head, body)
}

fn one(spec: &KeySpec, settings: &Settings, head: &[u8], body: &[u8]) -> usize {
    let mut s = Signing::start(spec.clone(), settings, head, 1_764_064_800);
    for chunk in body[2..].chunks(64 * 1024) {
        s.body(chunk);
    }
    s.finish().expect("sign").len()
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("SECONDS"))
        .unwrap_or(3.0);
    let rsa = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .output()
        .expect("openssl (needed for the RSA key)");
    assert!(rsa.status.success(), "openssl genpkey failed");
    let keys = [
        (
            "RSA-2048",
            PrivateKey::from_pem(&rsa.stdout).expect("RSA key"),
        ),
        (
            "Ed25519",
            PrivateKey::from_pem(dkim::generate_ed25519().unwrap().as_bytes()).unwrap(),
        ),
    ];
    let settings = Settings::default();
    println!(
        "| key | message | CPU µs per message, median of 3 (min–max) | messages signed per run |"
    );
    println!("|---|---|---|---|");
    for (name, key) in keys {
        let spec = KeySpec {
            domain: "example.com".into(),
            selector: "s1".into(),
            key: Arc::new(key),
        };
        for size in [2 * 1024, 100 * 1024] {
            let (head, body) = message(size);
            let mut runs = Vec::new();
            let mut count = 0;
            for _ in 0..3 {
                let (c0, t0) = (cpu_us(), Instant::now());
                let mut n = 0u64;
                let mut sink = 0;
                while t0.elapsed() < Duration::from_secs_f64(secs) {
                    sink += one(&spec, &settings, &head, &body);
                    n += 1;
                }
                assert!(sink > 0);
                runs.push((cpu_us() - c0) / n as f64);
                count = n;
            }
            runs.sort_by(|a, b| a.total_cmp(b));
            println!(
                "| {name} | {} KiB | **{:.0}** ({:.0}–{:.0}) | {count} |",
                size / 1024,
                runs[1],
                runs[0],
                runs[2]
            );
        }
    }
}
