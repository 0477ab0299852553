//! `sluice top` and the scheduler figures of `sluice status`: qmgr's
//! summary (queue sizes, delivery rates, the busiest destinations) as a
//! live terminal view, as text and as JSON.
//!
//! The view is plain text redrawn with two ANSI escapes (cursor home, clear
//! screen): it works on any terminal and over ssh, and needs no TUI crate.
//! `--once` prints one frame without escapes, for scripts.

use std::path::Path;
use std::time::Duration;

use ipc::queuectl::{json_str, Counter, QueueCtl, Request, Response, Summary, CLASSES};

use crate::{fail, load_config};

/// Destinations shown by `sluice status`.
pub const STATUS_TOP: u32 = 10;

/// How long qmgr may take to answer the handshake: it answers at once
/// when it runs, whatever the size of the queue.
const HELLO_DEADLINE: Duration = Duration::from_secs(2);

/// A connection to qmgr's control socket (`sluice queue`, `status`, `top`).
pub struct Qmgr {
    sock: std::path::PathBuf,
    timeout: Duration,
    client: Option<ipc::Client<QueueCtl>>,
}

impl Qmgr {
    /// For the queue of the configuration in `dir`; `timeout` per request.
    pub fn new(dir: &Path, timeout: Duration) -> Result<Qmgr, String> {
        let (cfg, _) = load_config(dir, true)?;
        Ok(Qmgr {
            sock: Path::new(&cfg.str("queue_directory")).join("private/qmgr"),
            timeout,
            client: None,
        })
    }

    /// Connects and shakes hands within `HELLO_DEADLINE`: master holds
    /// qmgr's socket, so a connect succeeds even while qmgr is down (or
    /// throttled after a crash), and only the missing answer tells.
    fn connect(&self) -> Result<ipc::Client<QueueCtl>, String> {
        let sock = self.sock.display();
        let hello = self.timeout.min(HELLO_DEADLINE);
        let c = ipc::Client::<QueueCtl>::connect(&self.sock, hello).map_err(|e| match e {
            ipc::IpcError::Timeout | ipc::IpcError::Closed => format!(
                "queue manager is not running or not answering at {sock} (see the mail log; `sluice status` shows the daemons)"
            ),
            ipc::IpcError::Io(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
                ) =>
            {
                format!("queue manager is not running: nothing listens at {sock} (is the mail system started?)")
            }
            e => format!("cannot reach the queue manager at {sock}: {e}"),
        })?;
        c.set_timeout(self.timeout)
            .map_err(|e| format!("queue manager at {sock}: {e}"))?;
        Ok(c)
    }

    /// Asks qmgr, reconnecting once if the last connection broke (qmgr restarted).
    pub fn call(&mut self, req: &Request) -> Result<Response, String> {
        for attempt in 0..2 {
            if self.client.is_none() {
                self.client = Some(self.connect()?);
            }
            let c = self.client.as_mut().expect("connected above");
            match c.call(req) {
                Ok(r) => return Ok(r),
                Err(e) => {
                    self.client = None;
                    if attempt == 1 {
                        return Err(format!("queue manager: {e}"));
                    }
                }
            }
        }
        Err("queue manager: no answer".into())
    }

    /// The summary with `top` destinations.
    pub fn summary(&mut self, top: u32) -> Result<Summary, String> {
        match self.call(&Request::Summary { top })? {
            Response::Summary(s) => Ok(*s),
            other => Err(format!("unexpected answer {other:?}")),
        }
    }
}

fn counter_json(c: &Counter) -> String {
    format!(
        "{{\"total\":{},\"last_10s\":{},\"last_60s\":{},\"rate_10s\":{:.2},\"rate_60s\":{:.2}}}",
        c.total,
        c.last_10s,
        c.last_60s,
        c.rate_10s(),
        c.rate_60s()
    )
}

/// The summary as the members of a JSON object (without braces):
/// `queue`, `deliveries`, `transports`, `destinations`.
pub fn json_members(s: &Summary) -> String {
    let transports: Vec<String> = s
        .transports
        .iter()
        .map(|t| {
            let classes: Vec<String> = CLASSES
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    format!(
                        "{}:{{\"queued\":{},\"inflight\":{}}}",
                        json_str(c),
                        t.queued[i],
                        t.inflight[i]
                    )
                })
                .collect();
            format!(
                "{{\"name\":{},\"connections\":{},\"destinations\":{},\"dead\":{},\"queued\":{},\"inflight\":{},\"classes\":{{{}}}}}",
                json_str(&t.name),
                t.connections,
                t.destinations,
                t.dead,
                t.queued.iter().sum::<u64>(),
                t.inflight.iter().sum::<u64>(),
                classes.join(",")
            )
        })
        .collect();
    let dests: Vec<String> = s
        .destinations
        .iter()
        .map(|d| {
            format!(
                "{{\"transport\":{},\"destination\":{},\"queued\":{},\"inflight\":{},\"deferred\":{},\"window\":{},\"busy\":{},\"dead\":{},\"retry_at\":{},\"sent\":{}}}",
                json_str(&d.transport),
                json_str(&d.destination),
                d.queued,
                d.inflight,
                d.deferred,
                d.window,
                d.busy,
                d.dead,
                d.retry_at.map_or("null".to_string(), |t| t.to_string()),
                counter_json(&d.sent)
            )
        })
        .collect();
    format!(
        "\"queue\":{{\"messages\":{},\"incoming\":{},\"active\":{},\"deferred\":{},\"hold\":{},\"active_recipients\":{}}},\
         \"deliveries\":{{\"sent\":{},\"deferred\":{},\"bounced\":{}}},\"transports\":[{}],\"destinations\":[{}],\"cluster\":{}",
        s.messages,
        s.incoming,
        s.active,
        s.deferred,
        s.hold,
        s.active_recipients,
        counter_json(&s.sent),
        counter_json(&s.deferrals),
        counter_json(&s.bounced),
        transports.join(","),
        dests.join(","),
        s.cluster.as_ref().map_or("null".to_string(), |c| format!(
            "{{\"coordinator\":{},\"state\":{},\"instances\":{},\"losses\":{}}}",
            json_str(&c.coordinator),
            json_str(&c.state),
            c.instances,
            c.losses
        ))
    )
}

fn queue_line(s: &Summary) -> String {
    format!(
        "queue: {} messages (incoming {}, active {}, deferred {}, hold {}), {} active recipients",
        s.messages, s.incoming, s.active, s.deferred, s.hold, s.active_recipients
    )
}

fn rates_line(s: &Summary) -> String {
    format!(
        "deliveries/s over 10s/60s: sent {:.1}/{:.1}, deferred {:.1}/{:.1}, bounced {:.1}/{:.1}; since qmgr start: sent {}, deferred {}, bounced {}",
        s.sent.rate_10s(),
        s.sent.rate_60s(),
        s.deferrals.rate_10s(),
        s.deferrals.rate_60s(),
        s.bounced.rate_10s(),
        s.bounced.rate_60s(),
        s.sent.total,
        s.deferrals.total,
        s.bounced.total
    )
}

fn dead_text(d: &ipc::queuectl::DestSummary, now: u64) -> String {
    match (d.dead, d.retry_at) {
        (true, Some(t)) => format!("retry {}s", t.saturating_sub(now)),
        (true, None) => "dead".into(),
        _ => "-".into(),
    }
}

/// The short version for `sluice status`: queue, rates, dead destinations.
pub fn status_text(s: &Summary) -> String {
    let mut out = format!("{}\n{}\n", queue_line(s), rates_line(s));
    let dead: Vec<String> = s
        .destinations
        .iter()
        .filter(|d| d.dead)
        .map(|d| {
            format!(
                "{} ({}, {})",
                d.destination,
                d.transport,
                dead_text(d, s.now)
            )
        })
        .collect();
    if !dead.is_empty() {
        out.push_str(&format!("dead destinations: {}\n", dead.join(", ")));
    }
    if let Some(d) = s.destinations.first().filter(|d| d.queued + d.deferred > 0) {
        out.push_str(&format!(
            "busiest destination: {} ({}): {} queued, {} deferred, window {}, busy {}\n",
            d.destination, d.transport, d.queued, d.deferred, d.window, d.busy
        ));
    }
    if let Some(c) = &s.cluster {
        out.push_str(&cluster_line(c));
    }
    out
}

/// The link to clusterd in one line, for `sluice status` and `sluice top`.
pub fn cluster_line(c: &ipc::queuectl::ClusterLink) -> String {
    format!(
        "cluster: clusterd at {} {}{}, {} instance{}, link lost {} time{}\n",
        c.coordinator,
        c.state,
        if c.state == "degraded" {
            " (limits divided by the last known count)"
        } else {
            ""
        },
        c.instances,
        if c.instances == 1 { "" } else { "s" },
        c.losses,
        if c.losses == 1 { "" } else { "s" }
    )
}

/// One frame of `sluice top`.
pub fn frame(s: &Summary) -> String {
    let when = sys::time::rfc5322_date(std::time::UNIX_EPOCH + Duration::from_secs(s.now));
    let mut out = format!(
        "sluice top - {when}\n{}\n{}\n\n",
        queue_line(s),
        rates_line(s)
    );
    out.push_str(&format!(
        "{:<12} {:>5} {:>6} {:>5}  {:>15} {:>15} {:>15}\n",
        "TRANSPORT", "CONNS", "DESTS", "DEAD", "SMALL q/f", "MEDIUM q/f", "LARGE q/f"
    ));
    for t in &s.transports {
        let cls: Vec<String> = (0..3)
            .map(|i| format!("{}/{}", t.queued[i], t.inflight[i]))
            .collect();
        out.push_str(&format!(
            "{:<12} {:>5} {:>6} {:>5}  {:>15} {:>15} {:>15}\n",
            t.name, t.connections, t.destinations, t.dead, cls[0], cls[1], cls[2]
        ));
    }
    out.push_str(&format!(
        "\n{:<32} {:<10} {:>7} {:>6} {:>6} {:>6} {:>4}  {:<11} {:>7}\n",
        "DESTINATION", "TRANSPORT", "QUEUED", "INFLT", "DEFER", "WINDOW", "BUSY", "DEAD", "SENT/s"
    ));
    if s.destinations.is_empty() {
        out.push_str("(no destinations)\n");
    }
    for d in &s.destinations {
        out.push_str(&format!(
            "{:<32} {:<10} {:>7} {:>6} {:>6} {:>6} {:>4}  {:<11} {:>7.1}\n",
            d.destination,
            d.transport,
            d.queued,
            d.inflight,
            d.deferred,
            d.window,
            d.busy,
            dead_text(d, s.now),
            d.sent.rate_10s()
        ));
    }
    if !s.policy_keys.is_empty() || !s.holds.is_empty() {
        out.push_str(&format!(
            "\n{:<40} {:>5} {:>6} {:>10} {:>9}\n",
            "POLICY KEY", "CONNS", "LIMIT", "RATE", "MESSAGES"
        ));
        for k in &s.policy_keys {
            let limit = match (k.concurrency_now, k.concurrency) {
                (Some(0), _) => "held".to_string(),
                (Some(n), Some(c)) if n < c => format!("{n}<{c}"),
                (_, Some(c)) => c.to_string(),
                _ => "-".into(),
            };
            // In a cluster: this instance's share of the cluster's limit.
            let limit = match k.local_concurrency {
                Some(mine) => format!("{mine}/{limit}"),
                None => limit,
            };
            out.push_str(&format!(
                "{:<40} {:>5} {:>6} {:>10} {:>9}\n",
                k.key,
                k.connections,
                limit,
                k.rate_now.as_deref().unwrap_or("-"),
                k.transactions
            ));
        }
        for h in &s.holds {
            let left = h
                .remaining
                .map_or("until resumed".into(), |r| format!("{r}s"));
            out.push_str(&format!(
                "held: {} ({}, {}, {left}) id {}\n",
                h.when, h.action, h.origin, h.id
            ));
        }
    }
    if let Some(c) = &s.cluster {
        out.push('\n');
        out.push_str(&cluster_line(c));
    }
    out
}

/// `sluice top [--once] [--interval SECS] [--destinations N]`.
pub fn top(dir: &Path, once: bool, interval: f64, destinations: u32) -> i32 {
    if !(interval.is_finite() && interval >= 0.1) {
        eprintln!("sluice: --interval must be a number of seconds, at least 0.1");
        return 2;
    }
    let mut q = match Qmgr::new(dir, Duration::from_secs(10)) {
        Ok(q) => q,
        Err(e) => return fail(e),
    };
    loop {
        let s = match q.summary(destinations) {
            Ok(s) => s,
            Err(e) => return fail(e),
        };
        let text = frame(&s);
        if once {
            print!("{text}");
            return 0;
        }
        // Home, clear, draw: one write, so the screen never shows half a frame.
        let mut out = String::from("\x1b[H\x1b[2J");
        out.push_str(&text);
        out.push_str("\n(Ctrl-C to quit)");
        {
            use std::io::Write;
            let mut so = std::io::stdout().lock();
            if so
                .write_all(out.as_bytes())
                .and_then(|_| so.flush())
                .is_err()
            {
                return 0;
            }
        }
        std::thread::sleep(Duration::from_secs_f64(interval));
    }
}
