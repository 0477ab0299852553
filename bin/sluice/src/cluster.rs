//! `sluice cluster status [--json]` and `sluice clusterd`.
//!
//! The status is qmgr's view of its link to clusterd: the coordinator, the
//! instances it announced, and per shared key the cluster's limit beside
//! this instance's share and use (Halon's "cluster's concurrency and rate /
//! effective concurrency and rate on this instance"). `sluice clusterd`
//! runs clusterd in the foreground without master, for a host of its own,
//! a systemd unit or a container: it gives clusterd the two descriptors
//! master would (status, life) and waits for it; when this process ends,
//! clusterd sees its life pipe close and leaves.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use ipc::queuectl::{json_str, ClusterView, Request, Response};

use crate::fail;

/// `sluice cluster status [--json]`.
pub fn status(dir: &Path, json: bool) -> i32 {
    let r = crate::top::Qmgr::new(dir, Duration::from_secs(10))
        .and_then(|mut q| q.call(&Request::Cluster));
    match r {
        Ok(Response::Cluster(Ok(v))) => {
            if json {
                println!("{}", view_json(&v));
            } else {
                print!("{}", view_text(&v));
            }
            0
        }
        Ok(Response::Cluster(Err(e))) => fail(e),
        Ok(other) => fail(format!("unexpected answer {other:?}")),
        Err(e) => fail(e),
    }
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".into(), |x| x.to_string())
}

fn view_text(v: &ClusterView) -> String {
    let l = &v.link;
    let mut out = format!(
        "coordinator: {} ({}), {} instance{}{}, link lost {} time{}\n",
        l.coordinator,
        l.state,
        l.instances,
        if l.instances == 1 { "" } else { "s" },
        if v.names.is_empty() {
            String::new()
        } else {
            format!(": {}", v.names.join(", "))
        },
        l.losses,
        if l.losses == 1 { "" } else { "s" }
    );
    out.push_str(&format!(
        "{:<48} {:>7} {:>7} {:>5}  {:>10} {:>12}\n",
        "key", "cluster", "share", "open", "rate", "share"
    ));
    for k in &v.keys {
        out.push_str(&format!(
            "{:<48} {:>7} {:>7} {:>5}  {:>10} {:>12}\n",
            k.key,
            opt(&k.concurrency),
            opt(&k.local_concurrency),
            k.connections,
            opt(&k.rate),
            opt(&k.local_rate)
        ));
    }
    out
}

fn json_opt_u32(v: Option<u32>) -> String {
    v.map_or("null".into(), |x| x.to_string())
}

fn json_opt_str(v: &Option<String>) -> String {
    v.as_deref().map_or("null".into(), json_str)
}

fn view_json(v: &ClusterView) -> String {
    let keys: Vec<String> = v
        .keys
        .iter()
        .map(|k| {
            format!(
                "{{\"key\":{},\"concurrency\":{},\"local_concurrency\":{},\"connections\":{},\"rate\":{},\"local_rate\":{}}}",
                json_str(&k.key),
                json_opt_u32(k.concurrency),
                json_opt_u32(k.local_concurrency),
                k.connections,
                json_opt_str(&k.rate),
                json_opt_str(&k.local_rate)
            )
        })
        .collect();
    let names: Vec<String> = v.names.iter().map(|n| json_str(n)).collect();
    format!(
        "{{\"coordinator\":{},\"state\":{},\"instances\":{},\"losses\":{},\"names\":[{}],\"keys\":[{}]}}",
        json_str(&v.link.coordinator),
        json_str(&v.link.state),
        v.link.instances,
        v.link.losses,
        names.join(","),
        keys.join(",")
    )
}

/// `sluice clusterd`: clusterd in the foreground.
pub fn clusterd(dir: &Path) -> i32 {
    let cfg = match config::Config::load(dir, &[]) {
        Ok(l) => l.config,
        Err(e) => return fail(e.to_string()),
    };
    let daemon_dir = PathBuf::from(cfg.str("daemon_directory"));
    let path = daemon_dir.join("clusterd");
    let (status_read, status_write) = match sys::process::pipe() {
        Ok(p) => p,
        Err(e) => return fail(format!("pipe: {e}")),
    };
    let (life_read, life_write) = match sys::process::pipe() {
        Ok(p) => p,
        Err(e) => return fail(format!("pipe: {e}")),
    };
    let mut cmd = Command::new(&path);
    cmd.args(["-n", "clusterd", "-t", "unix"])
        .env(ipc::status::CONFIG_DIR_ENV, dir)
        .env(ipc::status::LISTEN_FDS_ENV, "0")
        .env(ipc::status::FOREGROUND_ENV, "1")
        .stdin(Stdio::null());
    let child = sys::process::spawn_with_fds(&mut cmd, &[status_write.as_fd(), life_read.as_fd()]);
    drop(status_write);
    drop(life_read);
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return fail(format!("{}: {e}", path.display())),
    };
    // Its status records are master's business: read and drop them so it
    // never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut f = std::fs::File::from(status_read);
        let _ = std::io::copy(&mut f, &mut std::io::sink());
    });
    let code = match child.wait() {
        Ok(st) => st.code().unwrap_or(1),
        Err(e) => fail(format!("waiting for clusterd: {e}")),
    };
    drop(life_write);
    code
}
