//! What every scenario uses: its [`Output`] (a table, figures and the
//! problems seen), the run of one simulation, and small helpers. The
//! scenarios themselves are in `scenarios`, `shaping`, `deadlive` and
//! `verify`.

use crate::engine::{Report, ServerModel, Sim, SimConfig, SimDest, SimMessage};
use sched::Policy;
use std::collections::BTreeMap;

/// A scenario's results.
#[derive(Clone, Debug, Default)]
pub struct Output {
    /// Scenario name.
    pub name: String,
    /// Table rows; the first is the header.
    pub table: Vec<Vec<String>>,
    /// Figures for `--json`, in insertion order.
    pub figures: Vec<(String, f64)>,
    /// Errors and invariant violations seen (must be empty).
    pub problems: Vec<String>,
    /// Trace hashes of the runs (determinism).
    pub traces: Vec<u64>,
}

impl Output {
    pub(crate) fn new(name: &str, header: &[&str]) -> Self {
        Output {
            name: name.into(),
            table: vec![header.iter().map(|s| s.to_string()).collect()],
            ..Output::default()
        }
    }

    pub(crate) fn fig(&mut self, k: &str, v: f64) {
        self.figures.push((k.to_string(), v));
    }

    pub(crate) fn row(&mut self, r: Vec<String>) {
        self.table.push(r);
    }

    pub(crate) fn check(&mut self, label: &str, r: &Report) {
        for e in &r.errors {
            self.problems.push(format!("{label}: {e}"));
        }
        if r.violations > 0 {
            self.problems.push(format!(
                "{label}: {} window/process limit violations",
                r.violations
            ));
        }
        if r.unfinished > 0 {
            self.problems
                .push(format!("{label}: {} recipients not final", r.unfinished));
        }
        self.traces.push(r.trace);
    }

    /// Looks a figure up.
    pub fn get(&self, k: &str) -> Option<f64> {
        self.figures.iter().find(|(n, _)| n == k).map(|(_, v)| *v)
    }

    /// The table as CSV.
    pub fn csv(&self) -> String {
        self.table
            .iter()
            .map(|r| r.join(","))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    }

    /// The figures as one JSON object.
    pub fn json(&self) -> String {
        let mut s = format!("{{\"scenario\":\"{}\"", self.name);
        for (k, v) in &self.figures {
            if v.is_finite() {
                s += &format!(",\"{k}\":{}", round(*v));
            } else {
                s += &format!(",\"{k}\":null");
            }
        }
        s += &format!(",\"problems\":{}}}", self.problems.len());
        s
    }

    /// The table aligned for a terminal.
    pub fn text(&self) -> String {
        let cols = self.table.iter().map(Vec::len).max().unwrap_or(0);
        let w: Vec<usize> = (0..cols)
            .map(|c| {
                self.table
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(String::len)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = format!("== {} ==\n", self.name);
        for r in &self.table {
            let cells: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c:>width$}", width = w[i]))
                .collect();
            out += &cells.join("  ");
            out.push('\n');
        }
        for p in &self.problems {
            out += &format!("PROBLEM: {p}\n");
        }
        out
    }
}

fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Percentile (nearest rank) of unsorted values; NaN when empty.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize;
    s[rank.min(s.len()) - 1]
}

pub(crate) fn f(v: f64) -> String {
    format!("{v:.2}")
}

pub(crate) fn dest(name: &str, hosts: Vec<Vec<String>>) -> SimDest {
    SimDest {
        transport: "smtp".into(),
        nexthop: name.into(),
        hosts,
    }
}

pub(crate) fn run(
    sc: SimConfig,
    policy: Box<dyn Policy>,
    d: Vec<SimDest>,
    s: BTreeMap<String, ServerModel>,
    m: Vec<SimMessage>,
) -> Report {
    match Sim::new(sc, policy, d, s, m) {
        Ok(sim) => sim.run(),
        Err(e) => Report {
            errors: vec![format!("config: {e}")],
            ..Report::default()
        },
    }
}
