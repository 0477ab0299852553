//! `sim`: runs the scheduler simulator scenarios and the benchmark.
//!
//! Usage: `sim <scenario>|all [--quick] [--json] [--seed N] [--csv DIR]`,
//! `sim --bench [--dests N] [--recipients N]`. Tables go to stdout, CSV to
//! `DIR/<scenario>.csv` when `--csv` is given; `--json` prints one JSON
//! object per scenario instead of the table. Exits 2 on bad usage, 1 when a
//! scenario reports problems.
#![forbid(unsafe_code)]

use sched_sim::{bench, policybench, scenarios};
use std::time::Instant;

fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Times a shaping policy's evaluation (a fresh binding's keys over every
/// condition) and the checks of one transaction (tokens of every rate,
/// all or none) and of one connection (slots), with `keys` keys.
fn policy_bench(keys: u32, conditions: u32) {
    use std::sync::Arc;
    let policy = Arc::new(policybench::policy(conditions));
    let bindings = policybench::bindings(keys);
    let mut s = shaping::Shaper::new(Arc::clone(&policy));
    let t0 = Instant::now();
    let ids: Vec<_> = bindings.iter().map(|b| s.bind(b)).collect();
    let bind_ns = t0.elapsed().as_nanos() as f64 / f64::from(keys);
    let n: u64 = 2_000_000;
    let t1 = Instant::now();
    let mut refused = 0u64;
    for i in 0..n {
        // A step through the bindings that is not a multiple of anything.
        let id = ids[(i.wrapping_mul(7_919) % ids.len() as u64) as usize];
        if s.may_send(i / 1000, id).is_err() {
            refused += 1;
        }
    }
    let send_ns = t1.elapsed().as_nanos() as f64 / n as f64;
    let t2 = Instant::now();
    for i in 0..n {
        let id = ids[(i.wrapping_mul(7_919) % ids.len() as u64) as usize];
        if s.may_open(i / 1000, id).is_ok() {
            s.opened(i / 1000, id);
            s.closed(id);
        }
    }
    let open_ns = t2.elapsed().as_nanos() as f64 / n as f64;
    let t3 = Instant::now();
    let mut evals = 0u64;
    for b in &bindings {
        for p in 0..policy.policies.len() {
            evals += u64::from(!policy.props(p, b).is_empty());
        }
    }
    let eval_ns = t3.elapsed().as_nanos() as f64 / f64::from(keys);
    println!(
        "{{\"keys\":{},\"conditions\":{conditions},\"bind_ns\":{bind_ns:.0},\"eval_ns_per_binding\":{eval_ns:.0},\"evaluations\":{evals},\"transaction_ns\":{send_ns:.0},\"connection_ns\":{open_ns:.0},\"refused\":{refused}}}",
        s.key_count()
    );
}

fn usage() -> ! {
    eprintln!("usage: sim <{}|all> [--quick] [--json] [--seed N] [--csv DIR]\n       sim --bench [--policy] [--dests N] [--recipients N] [--conditions N]\n       sim --bench-policy [--keys N] [--conditions N]", scenarios::NAMES.join("|"));
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut quick = false;
    let mut json = false;
    let mut do_bench = false;
    let mut seed = 1u64;
    let mut csv: Option<String> = None;
    let mut dests = 100_000u32;
    let mut rcpts = 1_000_000u32;
    let mut names = Vec::new();
    let (mut bench_policy, mut with_policy) = (false, false);
    let (mut keys, mut conditions) = (10_000u32, 1_000u32);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let num = |it: &mut std::slice::Iter<String>| {
            it.next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| usage())
        };
        match a.as_str() {
            "--quick" => quick = true,
            "--json" => json = true,
            "--bench" => do_bench = true,
            "--bench-policy" => bench_policy = true,
            "--policy" => with_policy = true,
            "--keys" => keys = num(&mut it) as u32,
            "--conditions" => conditions = num(&mut it) as u32,
            "--seed" => seed = num(&mut it),
            "--dests" => dests = num(&mut it) as u32,
            "--recipients" => rcpts = num(&mut it) as u32,
            "--csv" => csv = Some(it.next().cloned().unwrap_or_else(|| usage())),
            "all" => names.extend(scenarios::NAMES.iter().map(|s| s.to_string())),
            s if scenarios::NAMES.contains(&s) => names.push(s.to_string()),
            _ => usage(),
        }
    }
    if bench_policy {
        policy_bench(keys, conditions);
        return;
    }
    if do_bench {
        let inputs = bench::inputs(dests);
        let before = rss_bytes().unwrap_or(0);
        let mut s = if with_policy {
            policybench::scheduler(rcpts, policybench::policy(conditions))
        } else {
            bench::scheduler(rcpts)
        };
        let t0 = Instant::now();
        let pending = bench::load(&mut s, &inputs, rcpts);
        let load_s = t0.elapsed().as_secs_f64();
        let after = rss_bytes().unwrap_or(0);
        let est = s.memory_bytes();
        let queued = s.recipients_in_core();
        let t1 = Instant::now();
        let events = bench::drain(&mut s, pending);
        let secs = t1.elapsed().as_secs_f64();
        let d = s.stats().decisions;
        let out = format!(
            "{{\"policy\":{with_policy},\"destinations\":{dests},\"recipients\":{rcpts},\"queued_recipients\":{queued},\"load_s\":{load_s:.3},\"drain_s\":{secs:.3},\"decisions\":{d},\"decisions_per_s\":{:.0},\"events\":{events},\"events_per_s\":{:.0},\"rss_bytes_per_recipient\":{:.1},\"est_bytes_per_recipient\":{:.1},\"left\":{}}}",
            d as f64 / secs,
            events as f64 / secs,
            after.saturating_sub(before) as f64 / f64::from(queued.max(1)),
            est as f64 / f64::from(queued.max(1)),
            s.entries_in_memory()
        );
        println!("{out}");
        return;
    }
    if names.is_empty() {
        usage();
    }
    let mut bad = false;
    for n in names {
        let Some(o) = scenarios::run_scenario(&n, quick, seed) else {
            usage()
        };
        if json {
            println!("{}", o.json());
        } else {
            print!("{}", o.text());
        }
        if let Some(dir) = &csv {
            let _ = std::fs::create_dir_all(dir);
            if let Err(e) = std::fs::write(format!("{dir}/{n}.csv"), o.csv()) {
                eprintln!("sim: cannot write csv: {e}");
            }
        }
        bad |= !o.problems.is_empty();
    }
    if bad {
        std::process::exit(1);
    }
}
