//! clusterd(8): the cluster's coordinator.
//!
//! Listens on `cluster_listen` with mutual TLS (`cluster_tls_cert_file`,
//! `cluster_tls_key_file`, `cluster_tls_CAfile`): a peer whose certificate
//! the CA did not sign, or that shows none, fails the handshake and is
//! logged. Each instance's qmgr connects and says hello; the coordinator
//! of crates/cluster decides everything (slots, rates, the count, the
//! recovery window after a start), and this program moves its messages
//! and logs its events, reading the clock once per loop turn. Started by
//! master where master.cf has it, or by `sluice clusterd` in the
//! foreground. Exits 1 with a `fatal:` line when `cluster_listen` is empty
//! or its TLS files are unusable.
#![forbid(unsafe_code)]

mod conn;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::coordinator::{Config as CoordConfig, Coordinator, Event};
use cluster::proto::ToCoord;
use cluster::rates::Division;
use daemon::{msg_info, msg_warn, Conn, Context, Cx, Server};
use mio::net::TcpListener;
use mio::{Interest, Token};

use crate::conn::Peer;

/// Connections not through their handshake and hello within this are closed.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

struct Clusterd {
    coord: Coordinator,
    started: Instant,
    tls: Arc<rustls::ServerConfig>,
    listener: Option<std::net::TcpListener>,
    listen_token: Option<Token>,
    mio_listener: Option<TcpListener>,
    peers: BTreeMap<Token, Peer>,
    next_id: u64,
    ids: BTreeMap<u64, Token>,
}

impl Clusterd {
    fn ms(&self, now: Instant) -> u64 {
        now.duration_since(self.started).as_millis() as u64
    }

    fn accept_all(&mut self, cx: &mut Cx<'_>) {
        let Some(l) = self.mio_listener.as_ref() else {
            return;
        };
        loop {
            match l.accept() {
                Ok((sock, addr)) => {
                    let token = cx.token();
                    self.next_id += 1;
                    match Peer::new(sock, addr, self.next_id, self.tls.clone(), cx, token) {
                        Ok(p) => {
                            self.ids.insert(self.next_id, token);
                            self.peers.insert(token, p);
                        }
                        Err(e) => msg_warn!("connection from {addr}: {e}"),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    msg_warn!("accept on cluster_listen: {e}");
                    return;
                }
            }
        }
    }

    fn drop_peer(&mut self, cx: &mut Cx<'_>, token: Token, why: &str) {
        if let Some(mut p) = self.peers.remove(&token) {
            self.ids.remove(&p.id);
            if p.joined {
                self.coord.disconnect(self.ms(cx.now), p.id);
            }
            if !why.is_empty() {
                msg_info!("disconnect from {}: {why}", p.wire.who());
            }
            p.wire.close(cx.registry);
        }
    }

    /// Carries out what the coordinator has to say.
    fn pump(&mut self, cx: &mut Cx<'_>) {
        while let Some(ev) = self.coord.poll_event() {
            match ev {
                Event::Joined {
                    name,
                    instances,
                    resumed,
                } => msg_info!(
                    "instance {name} {}: {instances} instance{} connected",
                    if resumed { "is back" } else { "joined" },
                    if instances == 1 { "" } else { "s" }
                ),
                Event::Left { name, instances } => msg_info!(
                    "instance {name} left: {instances} connected; its slots stay until its lease ends"
                ),
                Event::Expired { name, slots } => {
                    msg_info!("instance {name}: lease ended, {slots} slot(s) returned")
                }
                Event::Refused { conn, reason } => {
                    let who = self.ids.get(&conn).and_then(|t| self.peers.get(t));
                    let who = who.map_or_else(String::new, |p| p.wire.who());
                    msg_warn!("refused {who}: {reason}");
                    if let Some(&t) = self.ids.get(&conn) {
                        self.flush_one(cx, t);
                        self.drop_peer(cx, t, "");
                    }
                }
                Event::Close { conn } => {
                    if let Some(&t) = self.ids.get(&conn) {
                        self.drop_peer(cx, t, "superseded or silent");
                    }
                }
                Event::Recovered { instances } => msg_info!(
                    "recovery window over: granting slots to {instances} instance{}",
                    if instances == 1 { "" } else { "s" }
                ),
            }
        }
        let mut touched = Vec::new();
        let mut stuck = Vec::new();
        while let Some((conn, msg)) = self.coord.poll_transmit() {
            if let Some(&t) = self.ids.get(&conn) {
                if let Some(p) = self.peers.get_mut(&t) {
                    match p.wire.send(&msg) {
                        Ok(()) => touched.push(t),
                        Err(e) => stuck.push((t, e)),
                    }
                }
            }
        }
        touched.sort();
        touched.dedup();
        for t in touched {
            self.flush_one(cx, t);
        }
        // A peer that stopped reading is dropped with what it left
        // unread: its slots wait out their lease as a killed instance's
        // do, and it re-syncs when it connects again.
        if !stuck.is_empty() {
            for (t, why) in stuck {
                if self.peers.contains_key(&t) {
                    self.drop_peer(cx, t, &why);
                }
            }
            // What the coordinator says of their leaving (the new count).
            self.pump(cx);
        }
    }

    fn flush_one(&mut self, cx: &mut Cx<'_>, t: Token) {
        let failed = match self.peers.get_mut(&t) {
            Some(p) => p.wire.flush().err(),
            None => None,
        };
        if let Some(e) = failed {
            self.drop_peer(cx, t, &e);
        }
    }
}

impl Server for Clusterd {
    fn start(&mut self, cx: &mut Cx<'_>) {
        if let Some(l) = self.listener.take() {
            let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
            let _ = l.set_nonblocking(true);
            let mut l = TcpListener::from_std(l);
            let t = cx.token();
            match cx.registry.register(&mut l, t, Interest::READABLE) {
                Ok(()) => {
                    msg_info!("coordinating on {addr} (mutual TLS); recovery window open");
                    self.listen_token = Some(t);
                    self.mio_listener = Some(l);
                }
                Err(e) => daemon::msg_fatal!("cluster_listen {addr}: {e}"),
            }
        }
    }

    fn accept(&mut self, _cx: &mut Cx<'_>, conn: Conn) {
        // master's unix socket for this service has no protocol yet.
        drop(conn);
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, readable: bool, writable: bool) {
        let now = self.ms(cx.now);
        if Some(token) == self.listen_token {
            self.accept_all(cx);
            return;
        }
        let Some(p) = self.peers.get_mut(&token) else {
            return;
        };
        let outcome = p.wire.ready::<ToCoord>(readable, writable, cx.closed);
        let id = p.id;
        match outcome {
            Err(e) if !p.joined => {
                // A handshake that fails is a peer without a certificate
                // of the cluster's CA (or not speaking TLS): refused.
                msg_warn!("refused {}: {e}", p.wire.who());
                self.drop_peer(cx, token, "");
            }
            Err(e) => self.drop_peer(cx, token, &e),
            Ok(got) => {
                if got.established {
                    msg_info!("connect from {}", p.wire.who());
                    p.joined = true;
                    self.coord.connect(now, id);
                }
                for msg in got.msgs {
                    self.coord.handle(now, id, msg);
                }
                if let Some(bad) = got.bad {
                    self.drop_peer(cx, token, &bad);
                } else if got.eof {
                    self.drop_peer(cx, token, "connection closed");
                }
            }
        }
        self.pump(cx);
    }

    fn timeout(&mut self, cx: &mut Cx<'_>) {
        let now = self.ms(cx.now);
        self.coord.handle_timeout(now);
        let stale: Vec<Token> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.joined && cx.now.duration_since(p.wire.since) >= HELLO_TIMEOUT)
            .map(|(&t, _)| t)
            .collect();
        for t in stale {
            self.drop_peer(cx, t, "no TLS handshake in time");
        }
        self.pump(cx);
    }

    fn next_deadline(&self) -> Option<Instant> {
        let coord = self
            .coord
            .poll_timeout()
            .map(|ms| self.started + Duration::from_millis(ms));
        let hello = self
            .peers
            .values()
            .filter(|p| !p.joined)
            .map(|p| p.wire.since + HELLO_TIMEOUT)
            .min();
        match (coord, hello) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn clients(&self) -> usize {
        self.peers.len()
    }

    fn reload(&mut self, _cx: &mut Cx<'_>, _config: &config::Config) -> bool {
        // Its state is soft but a restart opens a recovery window: keep
        // running and say that new settings need a restart.
        msg_warn!("reload: clusterd settings take effect when it restarts");
        true
    }
}

/// The listening socket, bound while still privileged.
fn bind(ctx: &Context) -> Result<std::net::TcpListener, String> {
    let addr = ctx
        .config
        .listen("cluster_listen")
        .ok_or("cluster_listen is empty: clusterd has nothing to listen on")?;
    std::net::TcpListener::bind(addr).map_err(|e| format!("cluster_listen = {addr}: {e}"))
}

fn tls_files(ctx: &Context) -> Result<Arc<rustls::ServerConfig>, String> {
    let cert = ctx.config.str("cluster_tls_cert_file");
    let key = ctx.config.str("cluster_tls_key_file");
    let ca = ctx.config.str("cluster_tls_CAfile");
    for (name, v) in [
        ("cluster_tls_cert_file", &cert),
        ("cluster_tls_key_file", &key),
        ("cluster_tls_CAfile", &ca),
    ] {
        if v.is_empty() {
            return Err(format!(
                "{name} is empty: the cluster link is mutual TLS only"
            ));
        }
    }
    tls::mutual_server_config(Path::new(&cert), Path::new(&key), Path::new(&ca))
        .map_err(|e| e.to_string())
}

fn main() {
    // clusterd holds the cluster's state: it never exits on idle or use count.
    let opts = daemon::Options {
        honour_max_idle: false,
        honour_max_use: false,
        max_clients: usize::MAX,
        ..daemon::Options::default()
    };
    daemon::run(
        opts,
        |ctx| Ok((bind(ctx)?, tls_files(ctx)?)),
        |ctx, (listener, tls)| {
            let heartbeat = ctx.config.time("cluster_heartbeat_interval").as_millis() as u64;
            let lease = ctx.config.time("cluster_lease_time").as_millis() as u64;
            let division = match ctx.config.str("cluster_rate_division").as_str() {
                "equal" => Division::Equal,
                _ => Division::Backlog,
            };
            let cfg = CoordConfig::new(heartbeat.max(100), lease.max(heartbeat), division);
            Ok(Clusterd {
                coord: Coordinator::new(cfg, 0),
                started: Instant::now(),
                tls,
                listener: Some(listener),
                listen_token: None,
                mio_listener: None,
                peers: BTreeMap::new(),
                next_id: 0,
                ids: BTreeMap::new(),
            })
        },
    )
}
