//! transferd(8): takes mail moved here from other instances.
//!
//! Listens on `transfer_listen` with mutual TLS (the cluster's
//! certificates: `cluster_tls_cert_file`, `cluster_tls_key_file`,
//! `cluster_tls_CAfile`); a peer without a certificate of that CA fails
//! the handshake and is logged. With `transfer_listen` empty it listens on
//! nothing and waits. For each offer (crates/transfer's protocol):
//!
//! 1. a transfer id in the ledger, or among qmgr's unsettled imports, was
//!    taken before: it is accepted again under the same queue id, nothing
//!    is queued twice;
//! 2. otherwise the data goes into the spool as cleanup's does (inline in
//!    the journal record, or a pool slot synced), qmgr journals the
//!    message on hold with its state and answers once that is durable;
//! 3. the transfer id is appended to the ledger and synced (one sync for
//!    every import a loop turn completed), qmgr is told to settle the
//!    message (it joins delivery at its own retry time), and only then is
//!    the acceptance sent: the mover removes its copy after it.
//!
//! A crash anywhere leaves either nothing, or an unsettled import that a
//! retried offer finds by its transfer id. Input is bounded: one frame of
//! at most `message_size_limit` plus the envelope per peer, and
//! [`MAX_PEERS`] peers.
#![forbid(unsafe_code)]

mod peer;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use daemon::{msg_info, msg_warn, Conn, Context, Cx, Server};
use ipc::qmgr::{self, Qmgr};
use ipc::queuectl::Movable;
use ipc::Link;
use mail::{QueueId, QueueIdGen, Status, StatusCode};
use mio::net::TcpListener;
use mio::{Interest, Token};
use queue::{FileMode, MessageHead, Spool, SpoolConfig};
use transfer::ledger::Ledger;
use transfer::proto::{Offer, ToMover};

use crate::peer::{Got, Peer};

/// Peers served at once; more are refused at accept.
const MAX_PEERS: usize = 64;
/// Connections not through their handshake and hello within this are closed.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a transfer id stays in the ledger: far past any retry.
const LEDGER_KEEP: u64 = 30 * 86400;

/// How often the ledger drops what is past [`LEDGER_KEEP`].
const COMPACT_EVERY: Duration = Duration::from_secs(86400);

/// An import qmgr has not answered yet.
struct Waiting {
    peer: Token,
    transfer: String,
    id: QueueId,
    from: String,
}

struct Transferd {
    tls: Option<Arc<rustls::ServerConfig>>,
    listener: Option<std::net::TcpListener>,
    listen_token: Option<Token>,
    mio_listener: Option<TcpListener>,
    peers: BTreeMap<Token, Peer>,
    spool: Spool,
    ids: QueueIdGen,
    ledger: Ledger,
    qmgr_path: PathBuf,
    qmgr: Option<Link<Qmgr>>,
    /// qmgr has told its unsettled imports.
    synced_with_qmgr: bool,
    /// Imports not settled, by transfer id (qmgr's list, then ours).
    unsettled: HashMap<String, QueueId>,
    waiting: BTreeMap<u64, Waiting>,
    unsettled_request: Option<u64>,
    max_frame: usize,
    retry_qmgr_at: Option<Instant>,
    /// When the ledger is next compacted (daily: transferd may run for months).
    compact_at: Instant,
    myhostname: String,
    /// Taken this turn, to accept once the ledger is synced.
    done: Vec<(Token, String, QueueId, bool)>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl Transferd {
    fn accept_all(&mut self, cx: &mut Cx<'_>) {
        let (Some(l), Some(tls)) = (self.mio_listener.as_ref(), self.tls.clone()) else {
            return;
        };
        loop {
            match l.accept() {
                Ok((sock, addr)) => {
                    if self.peers.len() >= MAX_PEERS {
                        msg_warn!("refused {addr}: {MAX_PEERS} movers connected already");
                        continue;
                    }
                    let token = cx.token();
                    match Peer::new(
                        sock,
                        addr,
                        tls.clone(),
                        self.max_frame,
                        self.myhostname.clone(),
                        cx,
                        token,
                    ) {
                        Ok(p) => {
                            self.peers.insert(token, p);
                        }
                        Err(e) => msg_warn!("connection from {addr}: {e}"),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    msg_warn!("accept on transfer_listen: {e}");
                    return;
                }
            }
        }
    }

    fn drop_peer(&mut self, cx: &mut Cx<'_>, token: Token, why: &str) {
        if let Some(mut p) = self.peers.remove(&token) {
            if !why.is_empty() {
                msg_info!("disconnect from {}: {why}", p.who());
            }
            p.close(cx.registry);
        }
    }

    /// Connects to qmgr and asks for its unsettled imports.
    fn link_qmgr(&mut self, cx: &mut Cx<'_>) {
        if self.qmgr.is_some() {
            return;
        }
        let token = cx.token();
        match Link::<Qmgr>::connect(&self.qmgr_path, cx.registry, token) {
            Ok(mut l) => match l.send(&qmgr::Request::Unsettled) {
                Ok(r) => {
                    self.unsettled_request = Some(r);
                    self.qmgr = Some(l);
                    self.retry_qmgr_at = None;
                }
                Err(e) => self.qmgr_failed(cx, &format!("{e}")),
            },
            Err(e) => self.qmgr_failed(cx, &format!("{}: {e}", self.qmgr_path.display())),
        }
    }

    /// The qmgr link broke: everything waiting on it is refused for now
    /// (the movers keep their copies and try again).
    fn qmgr_failed(&mut self, cx: &mut Cx<'_>, why: &str) {
        msg_warn!("qmgr link: {why}");
        if let Some(mut l) = self.qmgr.take() {
            l.deregister(cx.registry);
        }
        self.synced_with_qmgr = false;
        self.unsettled_request = None;
        for (_, w) in std::mem::take(&mut self.waiting) {
            self.answer(
                w.peer,
                ToMover::Refused {
                    transfer: w.transfer,
                    status: Status::new(
                        StatusCode::SYSTEM_TEMP,
                        "the queue manager is not reachable",
                    ),
                },
            );
        }
        self.retry_qmgr_at = Some(cx.now + Duration::from_secs(1));
    }

    fn answer(&mut self, peer: Token, msg: ToMover) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.send(&msg);
        }
    }

    /// One offer: taken again, imported, or refused.
    fn offer(&mut self, peer: Token, from: &str, offer: Offer) {
        let transfer = offer.transfer.clone();
        let refuse = |code, text: String| ToMover::Refused {
            transfer: transfer.clone(),
            status: Status::new(code, text),
        };
        if let Some(id) = self.ledger.get(&transfer) {
            let id = id.to_string();
            if let Some(q) = self.unsettled.remove(&transfer) {
                self.settle(q);
            }
            self.answer(
                peer,
                ToMover::Accepted {
                    transfer,
                    id,
                    again: true,
                },
            );
            return;
        }
        if !self.synced_with_qmgr {
            self.answer(
                peer,
                refuse(
                    StatusCode::SYSTEM_TEMP,
                    "the queue manager is not reachable yet".into(),
                ),
            );
            return;
        }
        if let Some(id) = self.unsettled.get(&transfer).copied() {
            // Imported before the ledger had it (a crash between the two).
            self.taken(peer, &transfer, id, true);
            return;
        }
        if offer.data.len() as u64 != offer.envelope.size {
            self.answer(
                peer,
                refuse(
                    StatusCode::known(5, 6, 0),
                    format!(
                        "{} bytes of data for an envelope of {}",
                        offer.data.len(),
                        offer.envelope.size
                    ),
                ),
            );
            return;
        }
        let id = self.ids.next(now_micros());
        let mut draft = self.spool.draft(id);
        let data = draft
            .append(&self.spool, &offer.data)
            .and_then(|_| draft.commit(&self.spool, &offer.envelope));
        let data = match data {
            Ok(d) => d,
            Err(e) => {
                msg_warn!("{id}: storing a moved message: {e}");
                self.answer(
                    peer,
                    refuse(
                        StatusCode::SYSTEM_TEMP,
                        format!("queue file write error: {e}"),
                    ),
                );
                return;
            }
        };
        let moved = Movable {
            head: MessageHead {
                id,
                envelope: offer.envelope,
                data,
            },
            remaining: offer.remaining,
            next_attempt: offer.next_attempt,
            attempts: offer.attempts,
            held: offer.held,
            warned: offer.warned,
            owed: offer.owed,
            data: ipc::delivery::Data::Inline(Vec::new()),
        };
        let sent = self.qmgr.as_mut().map(|l| {
            l.send(&qmgr::Request::Import {
                moved: Box::new(moved),
                transfer: transfer.clone(),
                from: from.to_string(),
            })
        });
        match sent {
            Some(Ok(r)) => {
                self.waiting.insert(
                    r,
                    Waiting {
                        peer,
                        transfer,
                        id,
                        from: from.to_string(),
                    },
                );
            }
            _ => self.answer(
                peer,
                refuse(
                    StatusCode::SYSTEM_TEMP,
                    "the queue manager is not reachable".into(),
                ),
            ),
        }
    }

    /// Durable here: into the ledger (synced by the caller before
    /// `finish`), then settled and accepted.
    fn taken(&mut self, peer: Token, transfer: &str, id: QueueId, again: bool) {
        if let Err(e) = self.ledger.add(transfer, &id.to_string(), now_secs()) {
            msg_warn!("{id}: ledger: {e}");
        }
        self.unsettled.insert(transfer.to_string(), id);
        self.done.push((peer, transfer.to_string(), id, again));
    }

    fn settle(&mut self, id: QueueId) {
        if let Some(l) = self.qmgr.as_mut() {
            let _ = l.send(&qmgr::Request::Settle { id });
        }
    }

    /// Syncs the ledger once for everything taken this turn, then settles
    /// and accepts. A ledger that cannot be written refuses them for now:
    /// they stay unsettled here and the movers keep their copies.
    fn finish(&mut self) {
        if self.done.is_empty() {
            return;
        }
        let done = std::mem::take(&mut self.done);
        if let Err(e) = self.ledger.sync() {
            msg_warn!("ledger: {e}");
            for (peer, transfer, _, _) in done {
                self.answer(
                    peer,
                    ToMover::Refused {
                        transfer,
                        status: Status::new(
                            StatusCode::SYSTEM_TEMP,
                            format!("transfer ledger write error: {e}"),
                        ),
                    },
                );
            }
            return;
        }
        for (peer, transfer, id, again) in done {
            self.unsettled.remove(&transfer);
            self.settle(id);
            self.answer(
                peer,
                ToMover::Accepted {
                    transfer,
                    id: id.to_string(),
                    again,
                },
            );
        }
    }

    fn qmgr_ready(&mut self, cx: &mut Cx<'_>, readable: bool) {
        let Some(l) = self.qmgr.as_mut() else {
            return;
        };
        let result = l.event(readable, cx.closed);
        let closed = l.is_closed();
        match result {
            Ok(answers) => {
                for (r, resp) in answers {
                    if Some(r) == self.unsettled_request {
                        if let qmgr::Response::Unsettled(v) = resp {
                            // Those in the ledger were accepted: the mover
                            // may have removed its copy, so nobody offers
                            // them again. Settle them now (the settlement
                            // was lost with a qmgr or transferd that died).
                            let (done, open): (Vec<_>, Vec<_>) = v
                                .into_iter()
                                .partition(|(t, _)| self.ledger.get(t).is_some());
                            for (_, id) in &done {
                                self.settle(*id);
                            }
                            if !done.is_empty() {
                                msg_info!(
                                    "{} moved message(s) accepted before a restart: settled now",
                                    done.len()
                                );
                            }
                            self.unsettled.extend(open);
                            self.synced_with_qmgr = true;
                            if !self.unsettled.is_empty() {
                                msg_info!(
                                    "{} moved message(s) wait for their transfer to be settled",
                                    self.unsettled.len()
                                );
                            }
                        }
                        self.unsettled_request = None;
                        continue;
                    }
                    let Some(w) = self.waiting.remove(&r) else {
                        continue;
                    };
                    match resp {
                        qmgr::Response::Committed => {
                            msg_info!("{}: moved from {} as {}", w.id, w.from, w.transfer);
                            self.taken(w.peer, &w.transfer, w.id, false)
                        }
                        qmgr::Response::Failed { reason, disk_full } => self.answer(
                            w.peer,
                            ToMover::Refused {
                                transfer: w.transfer,
                                status: Status::new(
                                    if disk_full {
                                        StatusCode::SYSTEM_FULL
                                    } else {
                                        StatusCode::SYSTEM_TEMP
                                    },
                                    reason,
                                ),
                            },
                        ),
                        qmgr::Response::Unsettled(_) => {}
                    }
                }
                if closed {
                    self.qmgr_failed(cx, "closed");
                }
            }
            Err(e) => self.qmgr_failed(cx, &e.to_string()),
        }
    }

    fn flush_all(&mut self, cx: &mut Cx<'_>) {
        let failed: Vec<(Token, String)> = self
            .peers
            .iter_mut()
            .filter_map(|(t, p)| p.flush().err().map(|e| (*t, e)))
            .collect();
        for (t, e) in failed {
            self.drop_peer(cx, t, &e);
        }
    }
}

impl Server for Transferd {
    fn start(&mut self, cx: &mut Cx<'_>) {
        let Some(l) = self.listener.take() else {
            msg_info!("transfer_listen is empty: not taking moved mail");
            return;
        };
        let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let _ = l.set_nonblocking(true);
        let mut l = TcpListener::from_std(l);
        let t = cx.token();
        match cx.registry.register(&mut l, t, Interest::READABLE) {
            Ok(()) => {
                msg_info!("taking moved mail on {addr} (mutual TLS)");
                self.listen_token = Some(t);
                self.mio_listener = Some(l);
            }
            Err(e) => daemon::msg_fatal!("transfer_listen {addr}: {e}"),
        }
        self.link_qmgr(cx);
    }

    fn accept(&mut self, _cx: &mut Cx<'_>, conn: Conn) {
        // master's unix socket for this service has no protocol.
        drop(conn);
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, readable: bool, writable: bool) {
        if Some(token) == self.listen_token {
            self.accept_all(cx);
            return;
        }
        if self.qmgr.as_ref().is_some_and(|l| l.token() == token) {
            self.qmgr_ready(cx, readable);
            self.finish();
            self.flush_all(cx);
            return;
        }
        let Some(p) = self.peers.get_mut(&token) else {
            return;
        };
        match p.ready(readable, writable, cx.closed) {
            Err(e) if p.name.is_none() => {
                msg_warn!("refused {}: {e}", p.who());
                self.drop_peer(cx, token, "");
            }
            Err(e) => self.drop_peer(cx, token, &e),
            Ok(Got { offers, eof, bad }) => {
                let from = p.name.clone().unwrap_or_default();
                for o in offers {
                    self.offer(token, &from, o);
                }
                if let Some(bad) = bad {
                    if let Some(p) = self.peers.get_mut(&token) {
                        p.send(&ToMover::Goodbye {
                            reason: bad.clone(),
                        });
                        let _ = p.flush();
                    }
                    self.drop_peer(cx, token, &bad);
                } else if eof {
                    self.drop_peer(cx, token, "");
                }
            }
        }
        self.finish();
        self.flush_all(cx);
    }

    fn timeout(&mut self, cx: &mut Cx<'_>) {
        if self.retry_qmgr_at.is_some_and(|t| cx.now >= t) && self.mio_listener.is_some() {
            self.link_qmgr(cx);
        }
        if cx.now >= self.compact_at {
            self.compact_at = cx.now + COMPACT_EVERY;
            match self.ledger.compact(now_secs(), LEDGER_KEEP) {
                Ok(0) => {}
                Ok(n) => msg_info!("ledger: {n} transfer ids past 30 days dropped"),
                Err(e) => msg_warn!("ledger: {e}"),
            }
        }
        let stale: Vec<Token> = self
            .peers
            .iter()
            .filter(|(_, p)| p.name.is_none() && cx.now.duration_since(p.since()) >= HELLO_TIMEOUT)
            .map(|(&t, _)| t)
            .collect();
        for t in stale {
            self.drop_peer(cx, t, "no TLS handshake and hello in time");
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let hello = self
            .peers
            .values()
            .filter(|p| p.name.is_none())
            .map(|p| p.since() + HELLO_TIMEOUT)
            .min();
        [self.retry_qmgr_at, hello, Some(self.compact_at)]
            .into_iter()
            .flatten()
            .min()
    }

    fn clients(&self) -> usize {
        self.peers.len()
    }

    fn reload(&mut self, _cx: &mut Cx<'_>, _config: &config::Config) -> bool {
        // The listener and the ledger are this process's own: keep them.
        msg_warn!("reload: transferd settings take effect when it restarts");
        true
    }
}

/// The listening socket (when `transfer_listen` is set) and the TLS
/// configuration, made while still privileged (keys may be root's).
type Bound = (
    Option<std::net::TcpListener>,
    Option<Arc<rustls::ServerConfig>>,
);

fn bind(ctx: &Context) -> Result<Bound, String> {
    let Some(addr) = ctx.config.listen("transfer_listen") else {
        return Ok((None, None));
    };
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
                "{name} is empty: transfers between instances are mutual TLS only"
            ));
        }
    }
    let tls = tls::mutual_server_config(Path::new(&cert), Path::new(&key), Path::new(&ca))
        .map_err(|e| e.to_string())?;
    let l =
        std::net::TcpListener::bind(addr).map_err(|e| format!("transfer_listen = {addr}: {e}"))?;
    Ok((Some(l), Some(tls)))
}

fn main() {
    // transferd keeps the ledger open and imports in flight: it does not
    // exit on idle or use count.
    let opts = daemon::Options {
        honour_max_idle: false,
        honour_max_use: false,
        max_clients: usize::MAX,
        ..daemon::Options::default()
    };
    daemon::run(opts, bind, |ctx, (listener, tls)| {
        let root = PathBuf::from(ctx.config.str("queue_directory"));
        let cfg = SpoolConfig {
            file_mode: FileMode::Pool,
            ..SpoolConfig::default()
        };
        let spool =
            Spool::open(&root, cfg).map_err(|e| format!("spool {}: {e}", root.display()))?;
        spool
            .pool()
            .scan_free()
            .map_err(|e| format!("pool {}: {e}", root.display()))?;
        // state/ is mail_owner's (master makes it; the queue directory
        // itself is root's when master runs privileged).
        let state = root.join("state");
        std::fs::create_dir_all(&state).map_err(|e| format!("{}: {e}", state.display()))?;
        let ledger = Ledger::open(&state.join("transfer.ledger"), now_secs(), LEDGER_KEEP)?;
        let limit = ctx.config.size("message_size_limit") as usize;
        Ok(Transferd {
            tls,
            listener,
            listen_token: None,
            mio_listener: None,
            peers: BTreeMap::new(),
            spool,
            ids: QueueIdGen::new(std::process::id()),
            ledger,
            qmgr_path: root.join("private/qmgr"),
            qmgr: None,
            synced_with_qmgr: false,
            unsettled: HashMap::new(),
            waiting: BTreeMap::new(),
            unsettled_request: None,
            max_frame: limit.saturating_add(transfer::proto::MAX_OVERHEAD),
            retry_qmgr_at: None,
            compact_at: Instant::now() + COMPACT_EVERY,
            done: Vec::new(),
            myhostname: ctx.config.str("myhostname"),
        })
    })
}
