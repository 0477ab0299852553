//! `sluice queue`: the queue as qmgr sees it.

use std::path::Path;
use std::time::Duration;

use ipc::queuectl::{self, Request, Response};

use crate::fail;

/// Asks qmgr over its socket.
fn ask(dir: &Path, req: Request) -> Result<Response, String> {
    crate::top::Qmgr::new(dir, Duration::from_secs(30))?.call(&req)
}

/// `sluice queue list [--json]`.
pub fn list(dir: &Path, json: bool) -> i32 {
    match ask(dir, Request::List) {
        Ok(Response::List(l)) => {
            print!(
                "{}",
                if json {
                    queuectl::json_lines(&l)
                } else {
                    queuectl::mailq(&l)
                }
            );
            0
        }
        Ok(other) => fail(format!("unexpected answer {other:?}")),
        Err(e) => fail(e),
    }
}

/// `sluice queue shape`.
pub fn shape(dir: &Path, o: crate::shape::Options) -> i32 {
    if let Some(bad) = o
        .states
        .iter()
        .find(|s| !["active", "deferred", "hold"].contains(&s.as_str()))
    {
        eprintln!("sluice: unknown queue state {bad:?}: use active, deferred or hold");
        return 2;
    }
    if !(1..=100_000).contains(&o.minutes) {
        eprintln!("sluice: -t {}: between 1 and 100000 minutes", o.minutes);
        return 2;
    }
    if !(2..=32).contains(&o.buckets) {
        eprintln!("sluice: -b {}: between 2 and 32 buckets", o.buckets);
        return 2;
    }
    match ask(dir, Request::List) {
        Ok(Response::List(l)) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            print!("{}", crate::shape::shape(&l, now, &o));
            0
        }
        Ok(other) => fail(format!("unexpected answer {other:?}")),
        Err(e) => fail(e),
    }
}

/// `sluice queue flush`.
pub fn flush(dir: &Path) -> i32 {
    match ask(dir, Request::Flush) {
        Ok(Response::Flushed(n)) => {
            eprintln!("sluice: {n} deferred message(s) scheduled for delivery now");
            0
        }
        Ok(other) => fail(format!("unexpected answer {other:?}")),
        Err(e) => fail(e),
    }
}

/// `sluice queue show ID`.
pub fn show(dir: &Path, id: &str) -> i32 {
    match ask(dir, Request::Show { id: id.to_string() }) {
        Ok(Response::Shown(Ok(text))) => {
            print!("{text}");
            0
        }
        Ok(Response::Shown(Err(e))) => fail(e),
        Ok(other) => fail(format!("unexpected answer {other:?}")),
        Err(e) => fail(e),
    }
}

/// `sluice queue hold|release|delete|requeue`.
pub fn operate(dir: &Path, what: &str, sel: Result<queuectl::Selector, String>) -> i32 {
    let sel = match sel {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: {e}");
            return 2;
        }
    };
    let req = match what {
        "hold" => Request::Hold(sel),
        "release" => Request::Release(sel),
        "delete" => Request::Delete(sel),
        _ => Request::Requeue(sel),
    };
    match ask(dir, req) {
        Ok(Response::Done(n)) => {
            eprintln!("sluice: {what}: {n} message(s)");
            0
        }
        Ok(other) => fail(format!("unexpected answer {other:?}")),
        Err(e) => fail(e),
    }
}
