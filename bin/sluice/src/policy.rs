//! `sluice queue suspend | resume | suspensions` and `sluice policy show`:
//! traffic shaping as qmgr applies it.

use std::path::Path;
use std::time::Duration;

use ipc::queuectl::{json_str, HoldView, PolicyView, Request, Response};

use crate::fail;

fn ask(dir: &Path, req: Request) -> Result<Response, String> {
    crate::top::Qmgr::new(dir, Duration::from_secs(30))?.call(&req)
}

/// `sluice queue suspend FIELD=VALUE… [--for T] [--tag TEXT]`.
pub fn suspend(dir: &Path, values: &[String], for_time: Option<&str>, tag: Option<String>) -> i32 {
    let mut when = Vec::new();
    for v in values {
        match v.split_once('=') {
            Some((k, x)) if !k.trim().is_empty() && !x.trim().is_empty() => {
                when.push((k.trim().to_string(), x.trim().to_string()))
            }
            _ => {
                eprintln!("sluice: {v:?}: expected FIELD=VALUE, e.g. grouping=yahoo");
                return 2;
            }
        }
    }
    let for_secs = match for_time {
        None => None,
        Some(t) => match config::parse_time(t, config::TimeUnit::Seconds) {
            Ok(d) if !d.is_zero() => Some(d.as_secs().max(1)),
            _ => {
                eprintln!("sluice: --for {t:?}: a time such as 30s, 10m or 2h");
                return 2;
            }
        },
    };
    if tag.as_deref().is_some_and(|t| t.contains(['\n', '\t'])) {
        eprintln!("sluice: --tag: one line of text");
        return 2;
    }
    match ask(
        dir,
        Request::Suspend {
            when,
            for_secs,
            tag,
        },
    ) {
        Ok(Response::Suspended(Ok(id))) => {
            println!("{id}");
            0
        }
        Ok(Response::Suspended(Err(e))) => fail(e),
        Ok(other) => fail(format!("unexpected answer {other:?}")),
        Err(e) => fail(e),
    }
}

/// `sluice queue resume ID`.
pub fn resume(dir: &Path, id: u64) -> i32 {
    match ask(dir, Request::Resume { id }) {
        Ok(Response::Resumed(true)) => 0,
        Ok(Response::Resumed(false)) => fail(format!(
            "no suspension or back-off {id} (see sluice queue suspensions; those of the policy file end when it drops them)"
        )),
        Ok(other) => fail(format!("unexpected answer {other:?}")),
        Err(e) => fail(e),
    }
}

/// `sluice queue suspensions`.
pub fn suspensions(dir: &Path) -> i32 {
    match ask(dir, Request::Suspensions) {
        Ok(Response::Holds(Ok(h))) => {
            print!("{}", holds_text(&h));
            0
        }
        Ok(Response::Holds(Err(e))) => fail(e),
        Ok(other) => fail(format!("unexpected answer {other:?}")),
        Err(e) => fail(e),
    }
}

/// `sluice policy show [--json]`.
pub fn show(dir: &Path, json: bool) -> i32 {
    match ask(dir, Request::Policy) {
        Ok(Response::Policy(Ok(p))) => {
            if json {
                println!("{}", policy_json(&p));
            } else {
                print!("{}", policy_text(&p));
            }
            0
        }
        Ok(Response::Policy(Err(e))) => fail(e),
        Ok(other) => fail(format!("unexpected answer {other:?}")),
        Err(e) => fail(e),
    }
}

fn remaining(h: &HoldView) -> String {
    match (h.remaining, h.ramping) {
        (_, true) => "ramping".into(),
        (Some(s), _) => format!("{s}s"),
        (None, _) => "until resumed".into(),
    }
}

fn holds_text(h: &[HoldView]) -> String {
    if h.is_empty() {
        return "no suspensions or back-offs\n".into();
    }
    let mut out = format!(
        "{:>4}  {:<14} {:<36} {:<28} {:<14} {}\n",
        "ID", "ORIGIN", "KEY", "ACTION", "REMAINING", "TAG"
    );
    for x in h {
        out.push_str(&format!(
            "{:>4}  {:<14} {:<36} {:<28} {:<14} {}\n",
            x.id,
            x.origin,
            x.when,
            x.action,
            remaining(x),
            x.tag
        ));
    }
    out
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".into(), |x| x.to_string())
}

fn policy_text(p: &PolicyView) -> String {
    let mut out = format!("rate algorithm: {}\n\n", p.algorithm);
    if p.keys.is_empty() {
        out.push_str("no policy key in use\n");
    } else {
        out.push_str(&format!(
            "{:<40} {:>6} {:>6} {:>10} {:>10} {:>5} {:>9} {}\n",
            "KEY", "CONC", "NOW", "RATE", "NOW", "CONN", "MESSAGES", "OTHER"
        ));
        for k in &p.keys {
            let mut other = k.other.clone();
            if !k.local.is_empty() {
                other.push_str(&format!(" cluster:false({})", k.local));
            }
            out.push_str(&format!(
                "{:<40} {:>6} {:>6} {:>10} {:>10} {:>5} {:>9} {}\n",
                k.key,
                opt(&k.concurrency),
                opt(&k.concurrency_now),
                opt(&k.rate),
                opt(&k.rate_now),
                k.connections,
                k.transactions,
                other.trim()
            ));
        }
    }
    out.push('\n');
    out.push_str(&holds_text(&p.holds));
    out
}

fn json_opt_u32(v: Option<u32>) -> String {
    v.map_or("null".into(), |x| x.to_string())
}

fn json_opt_str(v: &Option<String>) -> String {
    v.as_deref().map_or("null".into(), json_str)
}

fn policy_json(p: &PolicyView) -> String {
    let keys: Vec<String> = p
        .keys
        .iter()
        .map(|k| {
            format!(
                "{{\"key\":{},\"concurrency\":{},\"concurrency_now\":{},\"rate\":{},\"rate_now\":{},\"other\":{},\"cluster_false\":{},\"connections\":{},\"connections_opened\":{},\"messages\":{}}}",
                json_str(&k.key),
                json_opt_u32(k.concurrency),
                json_opt_u32(k.concurrency_now),
                json_opt_str(&k.rate),
                json_opt_str(&k.rate_now),
                json_str(&k.other),
                json_str(&k.local),
                k.connections,
                k.opened,
                k.transactions
            )
        })
        .collect();
    let holds: Vec<String> = p
        .holds
        .iter()
        .map(|h| {
            format!(
                "{{\"id\":{},\"origin\":{},\"key\":{},\"action\":{},\"remaining\":{},\"ramping\":{},\"tag\":{}}}",
                h.id,
                json_str(&h.origin),
                json_str(&h.when),
                json_str(&h.action),
                h.remaining.map_or("null".into(), |s| s.to_string()),
                h.ramping,
                json_str(&h.tag)
            )
        })
        .collect();
    format!(
        "{{\"algorithm\":{},\"keys\":[{}],\"holds\":[{}]}}",
        json_str(&p.algorithm),
        keys.join(","),
        holds.join(",")
    )
}
