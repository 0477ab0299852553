//! The tiny HTTP responder a daemon's metrics are scraped from: HTTP/1.0
//! only, one request per connection, at most [`MAX_REQUEST`] bytes of
//! request head, [`HTTP_TIMEOUT`] for the whole exchange, at most
//! [`MAX_HTTP_CONNS`] at once, the answer and then close. It runs inside
//! the daemon's event loop (the page is rendered by the caller when a
//! complete `GET /metrics` has arrived), so a scrape never blocks it.
//! [`bind`] makes its socket while the daemon is still privileged (any
//! port, before a chroot) and [`start`] registers it; either failing
//! turns metrics off with a warning: a daemon matters more than its
//! statistics.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};

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

/// The socket for main.cf's parameter `param` (`metrics_listen`), if set
/// and it can be bound.
pub fn bind(config: &config::Config, param: &str) -> Option<std::net::TcpListener> {
    let addr = config.listen(param)?;
    std::net::TcpListener::bind(addr)
        .map_err(|e| crate::msg_warn!("{param} = {addr}: {e}; metrics are off"))
        .ok()
}

/// Serves on `sock`, bound by [`bind`] for `param`, under `token`; says
/// where in the log.
pub fn start(
    sock: std::net::TcpListener,
    param: &str,
    registry: &Registry,
    token: Token,
) -> Option<Http> {
    let addr = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
    match Http::new(sock, registry, token) {
        Ok(h) => {
            crate::msg_info!("serving metrics at http://{addr}/metrics");
            Some(h)
        }
        Err(e) => {
            crate::msg_warn!("{param} {addr}: {e}; metrics are off");
            None
        }
    }
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

    /// As [`Http::ready`], in the loop's callback `cx`.
    pub fn serve(&mut self, cx: &mut crate::Cx<'_>, token: Token, render: impl FnOnce() -> String) {
        let (registry, now) = (cx.registry, cx.now);
        self.ready(registry, token, now, || cx.token(), render);
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

    fn config(main_cf: &str) -> config::Config {
        config::Config::parse(main_cf, std::path::Path::new("main.cf"), &[])
            .unwrap()
            .config
    }

    #[test]
    fn metrics_are_off_unless_set_and_served_where_bound() {
        assert!(bind(&config(""), "metrics_listen").is_none());
        // A free loopback port (main.cf refuses port 0).
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let cfg = config(&format!("metrics_listen = {addr}\n"));
        let sock = bind(&cfg, "metrics_listen").expect("a loopback port binds");
        // The port is taken now: a second bind to it turns metrics off.
        assert!(bind(&cfg, "metrics_listen").is_none());
        let poll = mio::Poll::new().unwrap();
        let h = start(sock, "metrics_listen", poll.registry(), Token(7)).expect("registered");
        assert!(h.owns(Token(7)) && !h.owns(Token(8)));
        assert_eq!(h.next_deadline(), None);
    }

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
}
