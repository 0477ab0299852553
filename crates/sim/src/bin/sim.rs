//! `sim`: runs the scheduler simulator scenarios and the benchmark.
//!
//! Usage: `sim <scenario>|all [--quick] [--json] [--seed N] [--csv DIR]`,
//! `sim --bench [--dests N] [--recipients N]`. Tables go to stdout, CSV to
//! `DIR/<scenario>.csv` when `--csv` is given; `--json` prints one JSON
//! object per scenario instead of the table. Exits 2 on bad usage, 1 when a
//! scenario reports problems.
#![forbid(unsafe_code)]

use sched_sim::{bench, scenarios};
use std::time::Instant;

fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn usage() -> ! {
    eprintln!("usage: sim <{}|all> [--quick] [--json] [--seed N] [--csv DIR]\n       sim --bench [--dests N] [--recipients N]", scenarios::NAMES.join("|"));
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
            "--seed" => seed = num(&mut it),
            "--dests" => dests = num(&mut it) as u32,
            "--recipients" => rcpts = num(&mut it) as u32,
            "--csv" => csv = Some(it.next().cloned().unwrap_or_else(|| usage())),
            "all" => names.extend(scenarios::NAMES.iter().map(|s| s.to_string())),
            s if scenarios::NAMES.contains(&s) => names.push(s.to_string()),
            _ => usage(),
        }
    }
    if do_bench {
        let inputs = bench::inputs(dests);
        let before = rss_bytes().unwrap_or(0);
        let mut s = bench::scheduler(rcpts);
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
            "{{\"destinations\":{dests},\"recipients\":{rcpts},\"queued_recipients\":{queued},\"load_s\":{load_s:.3},\"drain_s\":{secs:.3},\"decisions\":{d},\"decisions_per_s\":{:.0},\"events\":{events},\"events_per_s\":{:.0},\"rss_bytes_per_recipient\":{:.1},\"est_bytes_per_recipient\":{:.1},\"left\":{}}}",
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
