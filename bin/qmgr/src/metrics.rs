//! qmgr's figures for operators: the Prometheus text rendering of a
//! summary (the counters are the queue manager's, `queue_manager::figures`),
//! and the tiny HTTP responder that serves it on `metrics_listen`. The
//! summary is computed when someone asks (`sluice status`, `sluice top`, a
//! scrape).
//!
//! The HTTP side is HTTP/1.0 only: one request per connection, at most
//! [`MAX_REQUEST`] bytes of request head, [`HTTP_TIMEOUT`] for the whole
//! exchange, at most [`MAX_HTTP_CONNS`] at once, the answer and then close.
//! It runs inside qmgr's event loop, so a scrape costs one summary and never
//! blocks delivery.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use ipc::queuectl::{Summary, CLASSES};
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};

/// Escapes a Prometheus label value.
fn label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The summary in the Prometheus text exposition format, version 0.0.4.
pub fn prometheus(s: &Summary) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, u64)>| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, v) in samples {
            if labels.is_empty() {
                out.push_str(&format!("{name} {v}\n"));
            } else {
                out.push_str(&format!("{name}{{{labels}}} {v}\n"));
            }
        }
    };
    family(
        "sluice_queue_messages",
        "gauge",
        "Messages in the queue by state.",
        [
            ("incoming", s.incoming),
            ("active", s.active),
            ("deferred", s.deferred),
            ("hold", s.hold),
        ]
        .iter()
        .map(|(st, n)| (format!("state=\"{st}\""), *n))
        .collect(),
    );
    family(
        "sluice_active_recipients",
        "gauge",
        "Recipients of active messages in the scheduler's memory.",
        vec![(String::new(), s.active_recipients)],
    );
    family(
        "sluice_deliveries_total",
        "counter",
        "Recipient delivery results since qmgr started.",
        [
            ("sent", s.sent.total),
            ("deferred", s.deferrals.total),
            ("bounced", s.bounced.total),
        ]
        .iter()
        .map(|(st, n)| (format!("status=\"{st}\""), *n))
        .collect(),
    );
    let per_class = |f: fn(&ipc::queuectl::TransportSummary) -> [u64; 3]| {
        s.transports
            .iter()
            .flat_map(|t| {
                CLASSES.iter().enumerate().map(move |(i, c)| {
                    (
                        format!("transport=\"{}\",class=\"{c}\"", label(&t.name)),
                        f(t)[i],
                    )
                })
            })
            .collect::<Vec<_>>()
    };
    family(
        "sluice_class_queued",
        "gauge",
        "Entries waiting in the active queue by transport and scheduling class.",
        per_class(|t| t.queued),
    );
    family(
        "sluice_class_inflight",
        "gauge",
        "Entries on connections by transport and scheduling class.",
        per_class(|t| t.inflight),
    );
    family(
        "sluice_transport_connections",
        "gauge",
        "Connections open or opening by transport.",
        s.transports
            .iter()
            .map(|t| {
                (
                    format!("transport=\"{}\"", label(&t.name)),
                    u64::from(t.connections),
                )
            })
            .collect(),
    );
    let dest = |f: fn(&ipc::queuectl::DestSummary) -> u64| {
        s.destinations
            .iter()
            .map(|d| {
                (
                    format!(
                        "transport=\"{}\",destination=\"{}\"",
                        label(&d.transport),
                        label(&d.destination)
                    ),
                    f(d),
                )
            })
            .collect::<Vec<_>>()
    };
    family(
        "sluice_destination_queued",
        "gauge",
        "Entries in the active queue for the busiest destinations.",
        dest(|d| d.queued),
    );
    family(
        "sluice_destination_deferred",
        "gauge",
        "Messages deferred for the busiest destinations, waiting for their retry.",
        dest(|d| d.deferred),
    );
    family(
        "sluice_destination_concurrency_window",
        "gauge",
        "Concurrency window of the busiest destinations.",
        dest(|d| u64::from(d.window)),
    );
    family(
        "sluice_destination_inflight",
        "gauge",
        "Entries on connections to the busiest destinations.",
        dest(|d| d.inflight),
    );
    family(
        "sluice_destination_busy",
        "gauge",
        "Connections open or opening to the busiest destinations.",
        dest(|d| u64::from(d.busy)),
    );
    family(
        "sluice_destination_dead",
        "gauge",
        "1 when a busiest destination is dead (not tried until its retry time).",
        dest(|d| u64::from(d.dead)),
    );
    family(
        "sluice_destination_sent_total",
        "counter",
        "Recipients delivered to the busiest destinations since qmgr started.",
        dest(|d| d.sent.total),
    );
    let key = |f: fn(&ipc::queuectl::KeyView) -> Option<u64>| {
        s.policy_keys
            .iter()
            .filter_map(|k| Some((format!("key=\"{}\"", label(&k.key)), f(k)?)))
            .collect::<Vec<_>>()
    };
    family(
        "sluice_policy_connections",
        "gauge",
        "Connections open per shaping policy key (the busiest keys).",
        key(|k| Some(u64::from(k.connections))),
    );
    family(
        "sluice_policy_concurrency_limit",
        "gauge",
        "Concurrency a policy key is allowed now (0 while suspended).",
        key(|k| k.concurrency_now.map(u64::from)),
    );
    family(
        "sluice_policy_messages_total",
        "counter",
        "Messages started per shaping policy key since it was first seen.",
        key(|k| Some(k.transactions)),
    );
    family(
        "sluice_policy_held",
        "gauge",
        "1 for each suspension or back-off in force, by its key and action.",
        s.holds
            .iter()
            .map(|h| {
                (
                    format!(
                        "key=\"{}\",action=\"{}\",origin=\"{}\"",
                        label(&h.when),
                        label(&h.action),
                        label(&h.origin)
                    ),
                    1,
                )
            })
            .collect(),
    );
    family(
        "sluice_proxy_failures_total",
        "counter",
        "Connections an egress proxy (smtp_proxy) refused or let time out, by transport and proxy.",
        s.proxies
            .iter()
            .map(|p| {
                (
                    format!(
                        "transport=\"{}\",proxy=\"{}\"",
                        label(&p.transport),
                        label(&p.proxy)
                    ),
                    p.failures,
                )
            })
            .collect(),
    );
    if let Some(c) = &s.cluster {
        let who = format!("coordinator=\"{}\"", label(&c.coordinator));
        family(
            "sluice_cluster_degraded",
            "gauge",
            "1 while clusterd is out of reach and limits are divided by the last known count.",
            vec![(who.clone(), u64::from(c.state != "linked"))],
        );
        family(
            "sluice_cluster_instances",
            "gauge",
            "Instances connected to clusterd, as last announced.",
            vec![(who.clone(), u64::from(c.instances))],
        );
        family(
            "sluice_cluster_link_losses_total",
            "counter",
            "Times the link to clusterd was lost.",
            vec![(who, c.losses)],
        );
    }
    family(
        "sluice_policy_local_concurrency",
        "gauge",
        "This instance's share of a concurrency granted cluster-wide by clusterd.",
        key(|k| k.local_concurrency.map(u64::from)),
    );
    out
}

/// Longest request head accepted.
pub const MAX_REQUEST: usize = 4096;
/// Time for a whole exchange.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed at once.
pub const MAX_HTTP_CONNS: usize = 16;

struct HttpConn {
    stream: TcpStream,
    head: Vec<u8>,
    out: Vec<u8>,
    sent: usize,
    deadline: Instant,
    /// The answer is in `out`.
    answered: bool,
    /// The answer is sent and our side shut down: what the client still
    /// sends is read and dropped until it closes, because closing with
    /// unread input would reset the connection and could lose the answer.
    draining: bool,
}

/// The metrics listener and its connections.
pub struct Http {
    listener: TcpListener,
    token: Token,
    conns: HashMap<Token, HttpConn>,
}

/// What a request asked for.
enum Asked {
    /// Not all of it is here yet.
    More,
    /// GET /metrics: the caller renders the page.
    Metrics,
    /// Anything else: this answer.
    Answer(&'static str, &'static str),
}

fn parse(head: &[u8]) -> Asked {
    let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n").or_else(|| {
        // Tolerate bare-LF clients (printf | nc).
        head.windows(2).position(|w| w == b"\n\n")
    }) else {
        return if head.len() >= MAX_REQUEST {
            Asked::Answer("431 Request Header Fields Too Large", "request too large\n")
        } else {
            Asked::More
        };
    };
    let text = String::from_utf8_lossy(&head[..end]);
    let line = text.lines().next().unwrap_or("");
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => Asked::Metrics,
        ("GET" | "HEAD", _) => Asked::Answer("404 Not Found", "only /metrics is served here\n"),
        _ => Asked::Answer("405 Method Not Allowed", "only GET /metrics\n"),
    }
}

fn response(status: &str, content_type: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

impl Http {
    /// Serves on `listener` (bound before privileges were dropped).
    pub fn new(
        listener: std::net::TcpListener,
        registry: &Registry,
        token: Token,
    ) -> std::io::Result<Http> {
        listener.set_nonblocking(true)?;
        let mut listener = TcpListener::from_std(listener);
        registry.register(&mut listener, token, Interest::READABLE)?;
        Ok(Http {
            listener,
            token,
            conns: HashMap::new(),
        })
    }

    /// Whether `token` is the listener's or one of its connections'.
    pub fn owns(&self, token: Token) -> bool {
        token == self.token || self.conns.contains_key(&token)
    }

    /// Handles readiness; `render` makes the metrics page when a complete
    /// GET /metrics has arrived.
    pub fn ready(
        &mut self,
        registry: &Registry,
        token: Token,
        now: Instant,
        mut new_token: impl FnMut() -> Token,
        render: impl FnOnce() -> String,
    ) {
        if token == self.token {
            self.accept(registry, now, &mut new_token);
            return;
        }
        let Some(c) = self.conns.get_mut(&token) else {
            return;
        };
        if c.draining {
            self.drain(registry, token);
            return;
        }
        let mut keep = true;
        if !c.answered {
            let mut buf = [0u8; 1024];
            loop {
                match c.stream.read(&mut buf) {
                    Ok(0) => {
                        keep = false;
                        break;
                    }
                    Ok(n) => {
                        let room = MAX_REQUEST - c.head.len();
                        c.head.extend_from_slice(&buf[..n.min(room)]);
                        if c.head.len() >= MAX_REQUEST {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        keep = false;
                        break;
                    }
                }
            }
            let head_only = c.head.starts_with(b"HEAD ");
            match parse(&c.head) {
                Asked::More => {}
                Asked::Metrics => {
                    c.out = response(
                        "200 OK",
                        "text/plain; version=0.0.4; charset=utf-8",
                        &render(),
                        head_only,
                    );
                    c.answered = true;
                    keep = true;
                }
                Asked::Answer(status, body) => {
                    c.out = response(status, "text/plain; charset=utf-8", body, head_only);
                    c.answered = true;
                    keep = true;
                }
            }
        }
        if c.answered {
            while c.sent < c.out.len() {
                match c.stream.write(&c.out[c.sent..]) {
                    Ok(0) => break,
                    Ok(n) => c.sent += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        c.sent = c.out.len();
                        break;
                    }
                }
            }
            if c.sent >= c.out.len() {
                c.draining = c.stream.shutdown(std::net::Shutdown::Write).is_ok();
                keep = c.draining;
            }
        }
        if !keep {
            self.close(registry, token);
        } else if self.conns.get(&token).is_some_and(|c| c.draining) {
            // Input may be waiting already, and edge-triggered readiness
            // will not report it again.
            self.drain(registry, token);
        }
    }

    /// Reads and drops input until the client closes.
    fn drain(&mut self, registry: &Registry, token: Token) {
        let Some(c) = self.conns.get_mut(&token) else {
            return;
        };
        let mut buf = [0u8; 1024];
        loop {
            match c.stream.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        self.close(registry, token);
    }

    fn accept(&mut self, registry: &Registry, now: Instant, new_token: &mut impl FnMut() -> Token) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    if self.conns.len() >= MAX_HTTP_CONNS {
                        // Dropped: closed at once; scrapers retry.
                        continue;
                    }
                    let t = new_token();
                    if registry
                        .register(&mut stream, t, Interest::READABLE | Interest::WRITABLE)
                        .is_err()
                    {
                        continue;
                    }
                    self.conns.insert(
                        t,
                        HttpConn {
                            stream,
                            head: Vec::new(),
                            out: Vec::new(),
                            sent: 0,
                            deadline: now + HTTP_TIMEOUT,
                            answered: false,
                            draining: false,
                        },
                    );
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    }

    fn close(&mut self, registry: &Registry, token: Token) {
        if let Some(mut c) = self.conns.remove(&token) {
            let _ = registry.deregister(&mut c.stream);
        }
    }

    /// The earliest connection deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.conns.values().map(|c| c.deadline).min()
    }

    /// Closes connections past their deadline at `now`.
    pub fn expire(&mut self, registry: &Registry, now: Instant) {
        let late: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(t, _)| *t)
            .collect();
        for t in late {
            self.close(registry, t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::queuectl::Counter;

    #[test]
    fn requests_are_parsed_with_bounds() {
        assert!(matches!(
            parse(b"GET /metrics HTTP/1.0\r\n\r\n"),
            Asked::Metrics
        ));
        assert!(matches!(
            parse(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            Asked::Metrics
        ));
        assert!(matches!(parse(b"GET /metrics HTTP/1.0\r\n"), Asked::More));
        assert!(matches!(
            parse(b"GET / HTTP/1.0\r\n\r\n"),
            Asked::Answer(s, _) if s.starts_with("404")
        ));
        assert!(matches!(
            parse(b"POST /metrics HTTP/1.0\r\n\r\n"),
            Asked::Answer(s, _) if s.starts_with("405")
        ));
        let big = vec![b'a'; MAX_REQUEST];
        assert!(matches!(parse(&big), Asked::Answer(s, _) if s.starts_with("431")));
    }

    #[test]
    fn prometheus_text_escapes_and_types() {
        let s = Summary {
            now: 0,
            messages: 3,
            incoming: 0,
            active: 1,
            deferred: 2,
            hold: 0,
            active_recipients: 1,
            sent: Counter {
                total: 7,
                ..Counter::default()
            },
            deferrals: Counter::default(),
            bounced: Counter::default(),
            transports: vec![ipc::queuectl::TransportSummary {
                name: "smtp".into(),
                queued: [1, 0, 0],
                inflight: [0, 0, 0],
                connections: 0,
                destinations: 1,
                dead: 1,
            }],
            destinations: vec![ipc::queuectl::DestSummary {
                transport: "smtp".into(),
                destination: "[a\"b]:25".into(),
                queued: 1,
                inflight: 0,
                deferred: 2,
                window: 0,
                busy: 0,
                dead: true,
                retry_at: Some(10),
                sent: Counter::default(),
            }],
            policy_keys: vec![ipc::queuectl::KeyView {
                key: "localip=127.0.0.2,grouping=orange".into(),
                concurrency: Some(2),
                concurrency_now: Some(2),
                rate: Some("10/1s".into()),
                rate_now: Some("10/1s".into()),
                other: String::new(),
                local: String::new(),
                local_concurrency: Some(1),
                local_rate: None,
                connections: 2,
                opened: 3,
                transactions: 40,
            }],
            holds: vec![ipc::queuectl::HoldView {
                id: 1,
                origin: "operator".into(),
                when: "grouping=yahoo".into(),
                remaining: Some(30),
                action: "suspend".into(),
                ramping: false,
                tag: String::new(),
            }],
            proxies: vec![ipc::queuectl::ProxySummary {
                transport: "smtp".into(),
                proxy: "[2001:db8::1]:3025".into(),
                failures: 4,
            }],
            cluster: Some(ipc::queuectl::ClusterLink {
                coordinator: "192.0.2.9:4650".into(),
                state: "degraded".into(),
                instances: 5,
                losses: 1,
            }),
        };
        let text = prometheus(&s);
        assert!(
            text.contains("sluice_cluster_degraded{coordinator=\"192.0.2.9:4650\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("sluice_cluster_instances{coordinator=\"192.0.2.9:4650\"} 5\n"));
        assert!(
            text.contains("# TYPE sluice_deliveries_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("sluice_deliveries_total{status=\"sent\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("sluice_queue_messages{state=\"deferred\"} 2\n"),
            "{text}"
        );
        assert!(text.contains(
            "sluice_destination_dead{transport=\"smtp\",destination=\"[a\\\"b]:25\"} 1\n"
        ));
        assert!(text.contains("sluice_class_queued{transport=\"smtp\",class=\"small\"} 1\n"));
        assert!(text.contains(
            "sluice_proxy_failures_total{transport=\"smtp\",proxy=\"[2001:db8::1]:3025\"} 4\n"
        ));
        assert!(text
            .contains("sluice_policy_connections{key=\"localip=127.0.0.2,grouping=orange\"} 2\n"));
        assert!(text.contains(
            "sluice_policy_held{key=\"grouping=yahoo\",action=\"suspend\",origin=\"operator\"} 1\n"
        ));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let v = line.rsplit(' ').next().unwrap();
            assert!(v.parse::<u64>().is_ok(), "{line}");
        }
    }
}
