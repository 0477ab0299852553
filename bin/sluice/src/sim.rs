//! `sluice sim`: what the queue would do under a proposed configuration.
//!
//! Takes a snapshot of the live queue through qmgr's control socket, page
//! by page (messages, then destinations), while delivery goes on (or reads
//! one `--save` wrote), and replays it in the simulator
//! (`sched_sim::replay`, the queue manager and scheduler qmgr runs) under
//! the running configuration (the files in the configuration directory)
//! and under `--config DIR`, each routing by domain as its main.cf says
//! (`route::Router`, the router's code); prints both side by
//! side, or as JSON, with what the model assumed, and can plot the queue
//! draining as SVG. A saved snapshot is a sequence of frames (a 4-byte
//! big-endian length, then the page in the IPC encoding).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipc::queuectl::{json_str, Request, Response, SnapFrom, Snapshot};
use sched_sim::replay::{Arrival, Delays, Forecast, Replay, Routes};

use crate::fail;

/// Messages per snapshot page.
const PAGE: u32 = 2000;

/// The command line of `sluice sim`.
pub struct SimArgs {
    /// The proposed configuration directory.
    pub config: Option<PathBuf>,
    /// How much time to simulate at most.
    pub duration: String,
    /// JSON instead of the table.
    pub json: bool,
    /// Where to write the SVG plot.
    pub plot: Option<PathBuf>,
    /// Write the snapshot here and stop.
    pub save: Option<PathBuf>,
    /// Replay this saved snapshot instead of taking one.
    pub from: Option<PathBuf>,
    /// Extra arrivals.
    pub add: Vec<String>,
}

/// Parses `90`, `90s`, `15m`, `2h`, `1d`.
fn duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (num, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => t.split_at(i),
        None => (t, "s"),
    };
    let mult = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        "w" => 7.0 * 86400.0,
        _ => return Err(format!("--duration {text:?}: use s, m, h, d or w")),
    };
    num.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0 && x * mult < 1e9)
        .map(|x| Duration::from_secs_f64(x * mult))
        .ok_or_else(|| format!("--duration {text:?}: not a time"))
}

/// Every page of a snapshot from qmgr: the messages, then the destinations.
fn take(dir: &Path) -> Result<Vec<Snapshot>, String> {
    let mut q = crate::top::Qmgr::new(dir, Duration::from_secs(60))?;
    let mut pages = Vec::new();
    let mut from = SnapFrom::Messages(None);
    loop {
        let page = match q.call(&Request::Snapshot {
            from: from.clone(),
            max: PAGE,
        })? {
            Response::Snapshot(s) => *s,
            other => return Err(format!("unexpected answer {other:?}")),
        };
        // Where the next page starts; an empty page ends its part.
        let next = match &from {
            SnapFrom::Messages(_) => match page.messages.last() {
                Some(m) if page.more => SnapFrom::Messages(Some(m.id.clone())),
                _ => SnapFrom::Destinations(None),
            },
            SnapFrom::Destinations(_) => match page.destinations.last() {
                Some(d) if page.more => {
                    SnapFrom::Destinations(Some((d.transport.clone(), d.nexthop.clone())))
                }
                _ => {
                    pages.push(page);
                    return Ok(pages);
                }
            },
        };
        pages.push(page);
        from = next;
    }
}

fn save(path: &Path, pages: &[Snapshot]) -> Result<(), String> {
    let mut out = Vec::new();
    for p in pages {
        // A frame: its length, then the page.
        out.extend_from_slice(&ipc::encode(p));
    }
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))
}

fn load_snapshot(path: &Path) -> Result<Vec<Snapshot>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = || format!("{}: not a snapshot sluice sim --save wrote", path.display());
    let mut pages = Vec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>().ok_or_else(bad)?;
        let len = u32::from_be_bytes(*len) as usize;
        let body = tail.get(..len).ok_or_else(bad)?;
        pages.push(ipc::decode::<Snapshot>(body).map_err(|_| bad())?);
        rest = &tail[len..];
    }
    if pages.is_empty() {
        return Err(bad());
    }
    Ok(pages)
}

/// The scheduler configuration and the router of a configuration
/// directory; errors name the file and line.
fn load(dir: &Path) -> Result<(sched::SchedConfig, route::Router), String> {
    let (cfg, services) = crate::load_config(dir, true)?;
    let sched = queue_manager::schedconf::build(&cfg, &services, 1)?;
    let (settings, _) = route::Settings::load(&cfg).map_err(|e| e.to_string())?;
    Ok((sched, route::Router::new(settings)))
}

/// Where `router` sends queued mail of each domain, when to a transport
/// of `sched` (by a made-up local part: only what holds for the whole
/// domain is seen).
fn domain_routes(
    domains: &BTreeSet<String>,
    router: &route::Router,
    sched: &sched::SchedConfig,
) -> BTreeMap<String, (String, String)> {
    domains
        .iter()
        .filter_map(|d| {
            let r = router
                .resolve_queued(&format!("sluice-sim@{d}"), true)
                .ok()?;
            sched
                .transports
                .iter()
                .any(|t| t.name == r.transport)
                .then(|| (d.clone(), (r.transport, r.nexthop)))
        })
        .collect()
}

/// The routes of the running configuration and, with a proposal, the
/// proposal's: the domains it routes elsewhere are moved.
fn routes(
    pages: &[Snapshot],
    extra: &[Arrival],
    running: &(sched::SchedConfig, route::Router),
    proposed: Option<&(sched::SchedConfig, route::Router)>,
) -> (Routes, Option<Routes>) {
    let mut domains: BTreeSet<String> = pages
        .iter()
        .flat_map(|p| &p.messages)
        .flat_map(|m| &m.recipients)
        .map(|r| r.domain.clone())
        .collect();
    for a in extra {
        if let Some((_, d)) = a.recipient.rsplit_once('@') {
            domains.insert(d.to_ascii_lowercase());
        }
    }
    domains.remove("");
    let now = domain_routes(&domains, &running.1, &running.0);
    let proposal = proposed.map(|p| {
        let then = domain_routes(&domains, &p.1, &p.0);
        let moved = then
            .iter()
            .filter(|(d, to)| now.get(*d) != Some(*to))
            .map(|(d, to)| (d.clone(), to.clone()))
            .collect();
        Routes {
            unrouted: then,
            moved,
        }
    });
    (
        Routes {
            unrouted: now,
            moved: BTreeMap::new(),
        },
        proposal,
    )
}

/// `sluice sim`.
pub fn sim(dir: &Path, a: SimArgs) -> i32 {
    let limit = match duration(&a.duration) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("sluice: {e}");
            return 2;
        }
    };
    let extra: Vec<Arrival> = match a.add.iter().map(|s| Arrival::parse(s)).collect() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("sluice: {e}");
            return 2;
        }
    };
    // Both configurations first: a mistake in the proposal is said before
    // the snapshot is taken.
    let running = match load(dir) {
        Ok(c) => c,
        Err(e) => return fail(format!("the running configuration: {e}")),
    };
    let proposed = match &a.config {
        Some(p) => match load(p) {
            Ok(c) => Some(c),
            Err(e) => return fail(format!("the proposed configuration: {e}")),
        },
        None => None,
    };
    let pages = match &a.from {
        Some(f) => load_snapshot(f),
        None => take(dir),
    };
    let pages = match pages {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if let Some(path) = &a.save {
        if let Err(e) = save(path, &pages) {
            return fail(e);
        }
        let n: usize = pages.iter().map(|p| p.messages.len()).sum();
        println!(
            "sluice: sim: snapshot of {n} messages saved to {}",
            path.display()
        );
        return 0;
    }
    let (now_routes, new_routes) = routes(&pages, &extra, &running, proposed.as_ref());
    let replay = Replay::new(&pages, &extra, &running.0, &now_routes);
    let mut results = Vec::new();
    match replay.run(running.0.clone(), limit) {
        Ok(f) => results.push(("running".to_string(), f)),
        Err(e) => return fail(format!("running: {e}")),
    }
    if let (Some(dir), Some((cfg, _)), Some(routes)) = (&a.config, proposed, new_routes) {
        let name = format!("proposed ({})", dir.display());
        let theirs = Replay::new(&pages, &extra, &running.0, &routes);
        match theirs.run(cfg, limit) {
            Ok(mut f) => {
                // What the proposal's replay assumed beyond the running one's.
                let extra_notes = theirs
                    .assumptions
                    .iter()
                    .filter(|x| !replay.assumptions.contains(x))
                    .cloned();
                f.notes.splice(0..0, extra_notes);
                results.push((name, f));
            }
            Err(e) => return fail(format!("{name}: {e}")),
        }
    }
    if let Some(path) = &a.plot {
        if let Err(e) = std::fs::write(path, svg(&results)) {
            return fail(format!("{}: {e}", path.display()));
        }
    }
    let now = pages.first().map_or(0, |p| p.now_ms);
    if a.json {
        println!("{}", json(&replay, now, limit, &results));
    } else {
        print!("{}", table(&replay, now, limit, &results));
    }
    0
}

fn secs(x: f64) -> String {
    if x >= 3600.0 {
        format!("{:.1} h", x / 3600.0)
    } else if x >= 60.0 {
        format!("{:.1} min", x / 60.0)
    } else {
        format!("{x:.2} s")
    }
}

fn delays(d: &Delays) -> String {
    if d.messages == 0 {
        "-".into()
    } else {
        format!("{} / {} ({})", secs(d.p50), secs(d.p99), d.messages)
    }
}

/// The side-by-side table.
fn table(r: &Replay, now_ms: u64, limit: Duration, res: &[(String, Forecast)]) -> String {
    let mut out = String::new();
    let when = std::time::UNIX_EPOCH + Duration::from_millis(now_ms);
    let _ = writeln!(
        out,
        "sluice sim: {} messages ({} recipients) from {} senders, snapshot of {}",
        r.queued.0,
        r.queued.1,
        r.senders.len(),
        sys::time::rfc5322_date(when)
    );
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&Forecast) -> String| {
        rows.push((name.to_string(), res.iter().map(|(_, x)| f(x)).collect()));
    };
    row("time to drain", &|f| match f.drain_secs {
        Some(s) => secs(s),
        None => format!(
            "not within {} ({} left)",
            secs(limit.as_secs_f64()),
            f.unfinished
        ),
    });
    row("deliveries per minute", &|f| format!("{:.0}", f.per_minute));
    row("delivered", &|f| f.delivered.to_string());
    row("deferrals", &|f| f.deferrals.to_string());
    row("bounces", &|f| f.bounces.to_string());
    row("destinations declared dead", &|f| {
        if f.dead.is_empty() {
            "0".into()
        } else {
            format!("{} ({})", f.dead.len(), f.dead.join(", "))
        }
    });
    row("policy limits hit", &|f| f.limited.to_string());
    for c in 0..3 {
        let name = ["small", "medium", "large"][c];
        row(&format!("class {name}: p50 / p99 (msgs)"), &|f| {
            delays(&f.classes[c])
        });
    }
    let top: Vec<String> = res
        .first()
        .map(|(_, f)| f.senders.iter().take(10).map(|s| s.name.clone()).collect())
        .unwrap_or_default();
    for s in &top {
        let s2 = s.clone();
        row(&format!("<{s}>: p50 / p99 (msgs)"), &move |f| {
            f.senders
                .iter()
                .find(|x| x.name == s2)
                .map_or("-".into(), delays)
        });
        let s3 = s.clone();
        row(&format!("<{s}>: last delivery"), &move |f| {
            f.senders
                .iter()
                .find(|x| x.name == s3)
                .and_then(|x| x.last)
                .map_or("-".into(), secs)
        });
    }
    let w0 = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0).max(10);
    let widths: Vec<usize> = (0..res.len())
        .map(|i| {
            rows.iter()
                .map(|(_, v)| v[i].len())
                .chain([res[i].0.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let _ = write!(out, "{:w0$}", "");
    for (i, (name, _)) in res.iter().enumerate() {
        let _ = write!(out, "  {:>w$}", name, w = widths[i]);
    }
    out.push('\n');
    for (name, vals) in &rows {
        let _ = write!(out, "{name:w0$}");
        for (i, v) in vals.iter().enumerate() {
            let _ = write!(out, "  {:>w$}", v, w = widths[i]);
        }
        out.push('\n');
    }
    out.push_str("assumed:\n");
    out.push_str("  the snapshot's queue only, besides --add arrivals\n");
    for a in &r.assumptions {
        let _ = writeln!(out, "  {a}");
    }
    for (name, f) in res {
        for n in &f.notes {
            let _ = writeln!(out, "  {name}: {n}");
        }
    }
    for (name, f) in res {
        for e in &f.errors {
            let _ = writeln!(out, "{name}: scheduler error: {e}");
        }
    }
    out
}

fn json_delays(d: &Delays) -> String {
    format!(
        "{{\"name\":{},\"messages\":{},\"p50_s\":{:.3},\"p99_s\":{:.3},\"last_delivery_s\":{}}}",
        json_str(&d.name),
        d.messages,
        d.p50,
        d.p99,
        d.last.map_or("null".into(), |x| format!("{x:.3}"))
    )
}

fn json_forecast(name: &str, f: &Forecast) -> String {
    let list = |v: &[Delays]| v.iter().map(json_delays).collect::<Vec<_>>().join(",");
    format!(
        "{{\"configuration\":{},\"drain_s\":{},\"delivered\":{},\"deliveries_per_minute\":{:.1},\"deferrals\":{},\"bounces\":{},\"dead\":[{}],\"policy_limits_hit\":{},\"unfinished\":{},\"classes\":[{}],\"senders\":[{}],\"notes\":[{}],\"errors\":[{}]}}",
        json_str(name),
        f.drain_secs.map_or("null".into(), |x| format!("{x:.3}")),
        f.delivered,
        f.per_minute,
        f.deferrals,
        f.bounces,
        f.dead.iter().map(|d| json_str(d)).collect::<Vec<_>>().join(","),
        f.limited,
        f.unfinished,
        list(&f.classes),
        list(&f.senders),
        f.notes.iter().map(|d| json_str(d)).collect::<Vec<_>>().join(","),
        f.errors.iter().map(|d| json_str(d)).collect::<Vec<_>>().join(","),
    )
}

/// One JSON object: the snapshot's figures, the assumptions, one forecast per configuration.
fn json(r: &Replay, now_ms: u64, limit: Duration, res: &[(String, Forecast)]) -> String {
    format!(
        "{{\"snapshot_ms\":{now_ms},\"messages\":{},\"recipients\":{},\"held_messages\":{},\"senders\":{},\"duration_s\":{},\"assumptions\":[{}],\"forecasts\":[{}]}}",
        r.queued.0,
        r.queued.1,
        r.held.0,
        r.senders.len(),
        limit.as_secs(),
        r.assumptions.iter().map(|a| json_str(a)).collect::<Vec<_>>().join(","),
        res.iter()
            .map(|(n, f)| json_forecast(n, f))
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// The queue draining under each configuration, as an SVG line plot.
fn svg(res: &[(String, Forecast)]) -> String {
    let (w, h, l, r, t, b) = (720.0, 400.0, 70.0, 20.0, 40.0, 50.0);
    let xmax = res
        .iter()
        .flat_map(|(_, f)| f.drain.iter().map(|p| p.0))
        .fold(1e-3, f64::max);
    let ymax = res
        .iter()
        .flat_map(|(_, f)| f.drain.iter().map(|p| p.1 as f64))
        .fold(1.0, f64::max);
    let x = |v: f64| l + (w - l - r) * v / xmax;
    let y = |v: f64| h - b - (h - t - b) * v / ymax;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(s, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{l}\" y=\"20\" font-size=\"14\">sluice sim: messages left in the queue</text>"
    );
    let _ = writeln!(
        s,
        "<path d=\"M{l},{t} L{l},{} L{},{}\" stroke=\"black\" fill=\"none\"/>",
        h - b,
        w - r,
        h - b
    );
    for i in 0..=5 {
        let (vx, vy) = (xmax * f64::from(i) / 5.0, ymax * f64::from(i) / 5.0);
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            x(vx),
            h - b + 18.0,
            secs(vx)
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.0}</text>",
            l - 6.0,
            y(vy) + 4.0,
            vy
        );
        let _ = writeln!(
            s,
            "<path d=\"M{l},{:.1} L{},{:.1}\" stroke=\"#ddd\"/>",
            y(vy),
            w - r,
            y(vy)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time after the snapshot</text>",
        (l + w - r) / 2.0,
        h - 10.0
    );
    for (i, (name, f)) in res.iter().enumerate() {
        let colour = ["#1f77b4", "#d62728"][i % 2];
        let pts: Vec<String> = f
            .drain
            .iter()
            .map(|(a, n)| format!("{:.1},{:.1}", x(*a), y(*n as f64)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>",
            pts.join(" ")
        );
        let ly = t + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            "<path d=\"M{},{ly} L{},{ly}\" stroke=\"{colour}\" stroke-width=\"2\"/><text x=\"{}\" y=\"{}\">{}</text>",
            w - r - 260.0,
            w - r - 235.0,
            w - r - 228.0,
            ly + 4.0,
            xml(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_refuse_nonsense() {
        assert_eq!(duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(duration("1d").unwrap(), Duration::from_secs(86400));
        assert!(duration("5x").unwrap_err().contains("use s, m, h, d or w"));
        assert!(duration("-3s").is_err());
    }
}
