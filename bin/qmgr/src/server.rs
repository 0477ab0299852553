//! qmgr's loop: its clients (cleanup's arrivals, smtpd's verification
//! queries, `sluice queue`) served through `daemon::ipcserver`, the
//! journal's sync thread woken into the loop, the links, the metrics
//! endpoint, and the queue manager (crates/qmgr) that makes every
//! decision and words the queue's log lines.
//!
//! The clock is read once per loop turn (`daemon::later::Turn`) and
//! passed down; the queue manager's actions are carried out as soon as it
//! has them. Answers to clients wait in `owed` until a callback can write
//! them (a reload or the start has none to write with: the next turn, due
//! at once, does).

use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use daemon::ipcserver::{ClientId, Handler, Replies};
use daemon::later::{Owed, Soonest, Turn, Wake};
use daemon::{msg_warn, Context, Cx};
use mio::Token;
use queue::statefile;
use queue_manager::clustershare;
use queue_manager::startup::{self, Housekeeping};
use queue_manager::{Action, DiskStore, Event as QmEvent, QueueManager, Store, Time};
use sys::creds::PeerCred;

use crate::clients::Clients;
use crate::lines::{log, log_all};
use crate::links::Links;
use queue_manager::clients::{Kind, Request, Response};

/// The queue manager's shell.
pub struct QmgrServer {
    qm: QueueManager<DiskStore>,
    /// The sync thread's way to wake the loop.
    wake: Option<Wake>,
    /// Answers not yet handed to the client server.
    owed: Owed<Response>,
    me: u32,
    links: Links,
    /// The queue directory as this process sees it (`/` when chrooted).
    root: PathBuf,
    /// When journal garbage is collected.
    gc: Housekeeping,
    /// This loop turn's time: the loop's monotonic `now`, and the wall
    /// clock read once for it.
    turn: Turn,
    /// Where main.cf and master.cf are, for reloads.
    config_dir: PathBuf,
    /// `metrics_listen` as bound at start (a reload cannot bind again).
    metrics_listen: String,
    /// The `metrics_listen` socket, bound before privileges were dropped,
    /// until `start` registers it.
    metrics_socket: Option<std::net::TcpListener>,
    /// The metrics endpoint, once registered.
    http: Option<daemon::metrics_http::Http>,
    /// The link to clusterd (`cluster_server`).
    cluster: Option<crate::cluster::ClusterConn>,
    /// `address_verify_map`, as this process reaches it; `None`: not saved.
    verify_map: Option<PathBuf>,
    /// Whether arrivals were left unread (`reading`) since the last commit ended.
    arrivals_paused: Cell<bool>,
    /// The turns after a commit that ended with arrivals unread.
    resume: Resume,
}

/// Where the loop turns after a commit's end stand when arrivals were
/// left unread during it: the next commit starts only once what waited in
/// cleanup's sockets (announced by epoll in the turn after the one the
/// commit's end wakes) is read, from every client, so none of it waits
/// for the commit after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// Commits start as soon as one is due.
    No,
    /// This turn's sync-thread wakeup ended the commit; reading is put
    /// back at its end. No commit starts in it.
    Ending,
    /// The turn after: what waited is read; the commit starts at its end
    /// (`timeout`, due at once), with all of it.
    Reading,
}

/// Wall-clock milliseconds: the queue manager's time base, so retry and
/// expiry times survive a restart.
fn wall() -> Time {
    Time(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    )
}

impl QmgrServer {
    /// Recovers the spool and opens the journal.
    pub fn new(
        ctx: &Context,
        metrics_socket: Option<std::net::TcpListener>,
    ) -> Result<Self, String> {
        let root = ctx.queue_root();
        let started = Instant::now();
        let rec = queue::recover(&root, startup::spool_config(&ctx.config))
            .map_err(|e| format!("recovery of {}: {e}", root.display()))?;
        log_all(queue_manager::recovery_lines(
            &rec.state,
            &rec.report,
            started.elapsed(),
        ));
        let services =
            config::load_master_cf(&ctx.config_dir.join("master.cf")).unwrap_or_default();
        let now = wall();
        let seed = u64::from(std::process::id()) ^ now.0;
        let disk = DiskStore::new(rec.spool, rec.journal);
        let mut qm = startup::open(&ctx.config, &services, now, seed, disk, rec.state)?;
        let verify_map =
            queue_manager::verify_map_path(&root, &ctx.config.str("address_verify_map"))?;
        let holds = startup::holds_files(&root);
        let saved = |r: std::io::Result<String>| r.map_err(|e| e.to_string());
        let verify = verify_map
            .as_deref()
            .map(|p| (p, saved(statefile::read(&[p]))));
        log_all(qm.restore_saved(now, (&holds[0], saved(statefile::read(&holds))), verify));
        let mut cluster = crate::cluster::ClusterConn::from_config(&ctx.config, &root)?;
        if let Some(w) = cluster.as_mut().and_then(|c| c.share.start(&mut qm)) {
            msg_warn!("{w}");
        }
        Ok(QmgrServer {
            qm,
            wake: None,
            owed: Owed::default(),
            me: sys::current_ids().0,
            links: Links::new(&root),
            root,
            gc: Housekeeping::new(now),
            turn: Turn::new(started, now.0),
            config_dir: ctx.config_dir.clone(),
            metrics_listen: ctx.config.str("metrics_listen"),
            metrics_socket,
            http: None,
            cluster,
            verify_map,
            arrivals_paused: Cell::new(false),
            resume: Resume::No,
        })
    }

    /// The time of this loop turn: the wall clock is read once per turn.
    fn now(&mut self, at: Instant) -> Time {
        Time(self.turn.now(at, || wall().0))
    }

    /// Carries out the queue manager's actions, feeding back the links it
    /// lost; the router and agent requests they made go out at the end,
    /// one write per link.
    fn act(&mut self, cx: &mut Cx<'_>) {
        loop {
            while let Some(a) = self.qm.poll_action() {
                if let Some(ev) = self.carry_out(a, Some(cx)) {
                    let now = Time(self.turn.wall_ms());
                    self.qm.handle(now, ev);
                }
            }
            let lost = self.links.flush(cx.registry);
            if lost.is_empty() {
                return;
            }
            let now = Time(self.turn.wall_ms());
            for ev in lost {
                self.qm.handle(now, ev);
            }
        }
    }

    /// Carries out one action; the link it lost, if any. Without a loop
    /// (`cx`, at exit) nothing goes out on a link.
    fn carry_out(&mut self, a: Action, cx: Option<&mut Cx<'_>>) -> Option<QmEvent> {
        let a = match queue_manager::clients::answer(a) {
            Ok((client, request, mut body)) => {
                clustershare::annotate(self.cluster.as_ref().map(|c| &c.share), &mut body);
                self.owed.push(ClientId::from_number(client), request, body);
                return None;
            }
            Err(a) => a,
        };
        let now = Time(self.turn.wall_ms());
        match clustershare::take(self.cluster.as_mut().map(|c| &mut c.share), a, now)? {
            Action::Log(level, text) => log(level, &text),
            Action::ToRouter { request, body } => {
                return self.links.send_router(cx?, &body, request);
            }
            Action::ToAgent {
                transport,
                request,
                body,
            } => return self.links.send_agent(cx?, &transport, &body, request),
            Action::ToCleanup { notice, requests } => {
                return self.links.send_cleanup(cx?, &requests, notice);
            }
            Action::DropCleanup => self.links.drop_cleanup(cx?.registry),
            // Owed and taken above.
            Action::Reply { .. } | Action::Answer { .. } | Action::VerifyAnswer { .. } => {}
            Action::DestinationDead { .. } | Action::HostRetry { .. } => {}
            Action::RemoveData { id, storage } => {
                if let Err(e) = self.qm.store().spool.remove_data(id, storage) {
                    msg_warn!("{id}: removing its data: {e}");
                }
            }
            Action::SaveHolds { text } => {
                let [path, _] = startup::holds_files(&self.root);
                if let Err(e) = statefile::replace_synced(&path, &text) {
                    msg_warn!("{}: {e}", path.display());
                }
            }
            Action::SaveVerify { text } => {
                if let Some(path) = self.verify_map.as_ref() {
                    if let Err(e) = statefile::replace(path, &text) {
                        msg_warn!("address_verify_map {}: {e}", path.display());
                    }
                }
            }
        }
        None
    }

    /// Everything appended in this pass goes into one commit, when the
    /// queue manager says one is due (not while a stalled journal waits
    /// for its next try, nor before arrivals left unread are read:
    /// `Resume`); `at_end`: called at the end of a loop turn (`timeout`).
    fn commit_pending(&mut self, cx: &mut Cx<'_>, at_end: bool) {
        match (self.resume, at_end) {
            (Resume::No, _) => {}
            (Resume::Ending, true) => {
                self.resume = Resume::Reading;
                return;
            }
            (Resume::Reading, true) => self.resume = Resume::No,
            (Resume::Ending | Resume::Reading, false) => return,
        }
        let now = self.now(cx.now);
        // Committing inline (no sync thread), what a commit's outcome
        // appended is committed in turn, a few rounds at most.
        for _ in 0..4 {
            if !self.qm.commit_when_due(now) {
                return;
            }
            self.act(cx);
        }
    }

    /// A metrics connection is ready; a complete GET /metrics gets the
    /// summary of the busiest destinations in Prometheus text.
    fn metrics_ready(&mut self, cx: &mut Cx<'_>, token: Token) {
        let Some(mut h) = self.http.take() else {
            return;
        };
        let now = self.now(cx.now);
        let share = self.cluster.as_ref().map(|c| &c.share);
        h.serve(cx, token, || {
            clustershare::metrics_page(&self.qm, share, now)
        });
        self.http = Some(h);
    }

    /// Journal segments with nothing live go, once a minute.
    fn collect_garbage(&mut self, cx: &mut Cx<'_>) {
        let now = self.now(cx.now);
        if !self.gc.due(now) {
            return;
        }
        self.qm.prune_figures(now);
        let (disk, state) = self.qm.parts_mut();
        let r = queue::collect_garbage(&disk.spool, disk.writer.journal_mut(), state);
        log_all(Housekeeping::outcome(r));
    }
}

impl Handler<Clients> for QmgrServer {
    fn request(
        &mut self,
        cx: &mut Cx<'_>,
        _out: &mut Replies<'_, Clients>,
        from: ClientId,
        id: u64,
        req: Request,
    ) {
        let now = self.now(cx.now);
        let share = self.cluster.as_ref().map(|c| &c.share);
        if let Some(answer) = clustershare::answer_now(share, &mut self.qm, now, &req) {
            self.owed.push(from, id, answer);
            return;
        }
        let ev = req.event(from.number(), id);
        self.qm.handle(now, ev);
        self.act(cx);
    }

    fn requests_done(&mut self, cx: &mut Cx<'_>, out: &mut Replies<'_, Clients>) {
        self.commit_pending(cx, false);
        self.owed.pay(out);
    }

    const PAUSES: bool = true;

    fn reading(&self, kind: Kind) -> bool {
        // Arrivals read while a commit runs would only wait for the next
        // one: left in the socket, they cost no wakeup of their own, and
        // are read as soon as the commit is done.
        let paused = kind == Kind::Arrival && self.qm.store().committing();
        if paused {
            self.arrivals_paused.set(true);
        }
        !paused
    }

    fn admit(&self, peer: &PeerCred, kind: Kind) -> bool {
        queue_manager::admits(kind == Kind::Control, peer.uid, self.me)
    }

    fn reload(&mut self, cx: &mut Cx<'_>, config: &config::Config) -> bool {
        let now = self.now(cx.now);
        let seed = u64::from(std::process::id()) ^ now.0;
        let master_cf = config::load_master_cf(&self.config_dir.join("master.cf"));
        let (ev, lines) = startup::reload(config, master_cf, seed, &self.metrics_listen);
        log_all(lines);
        let Some(ev) = ev else {
            return true;
        };
        self.qm.handle(now, ev);
        if let Some(c) = self.cluster.as_mut() {
            // A new policy may bring a new shaper: the share goes with it.
            c.share.install(&mut self.qm);
        }
        self.act(cx);
        self.commit_pending(cx, false);
        true
    }

    fn start(&mut self, cx: &mut Cx<'_>) {
        match Wake::new(cx) {
            Ok(w) => {
                if let Err(e) = self.qm.store_mut().writer.spawn_syncer(w.notifier()) {
                    msg_warn!("journal sync thread: {e}; committing inline");
                }
                self.wake = Some(w);
            }
            Err(e) => msg_warn!("waker: {e}; committing inline"),
        }
        if let Some(sock) = self.metrics_socket.take() {
            let t = cx.token();
            self.http = daemon::metrics_http::start(sock, "metrics_listen", cx.registry, t);
        }
        if let Some(c) = self.cluster.as_mut() {
            let now = Time(self.turn.wall_ms());
            c.timeout(cx, &mut self.qm, now);
        }
        self.act(cx);
        self.commit_pending(cx, false);
    }

    fn ready(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Replies<'_, Clients>,
        token: Token,
        readable: bool,
        _writable: bool,
    ) {
        let now = self.now(cx.now);
        if self.wake.as_ref().is_some_and(|w| w.owns(token)) {
            let (news, ahead) = self.qm.synced(now);
            if news {
                self.act(cx);
            }
            if !self.qm.store().committing() && self.arrivals_paused.replace(false) {
                self.resume = Resume::Ending;
            }
            if let Some(w) = ahead {
                msg_warn!("{w}");
            }
        } else if self.links.owns(token) {
            for ev in self.links.ready(cx.registry, token, readable, cx.closed) {
                self.qm.handle(now, ev);
            }
            self.act(cx);
        } else if self.http.as_ref().is_some_and(|h| h.owns(token)) {
            self.metrics_ready(cx, token);
        } else if let Some(c) = self.cluster.as_mut().filter(|c| c.owns(token)) {
            c.ready(cx, &mut self.qm, now, readable);
            self.act(cx);
        }
        self.commit_pending(cx, false);
        self.owed.pay(out);
    }

    fn timeout(&mut self, cx: &mut Cx<'_>, out: &mut Replies<'_, Clients>) {
        let now = self.now(cx.now);
        if let Some(h) = self.http.as_mut() {
            h.expire(cx.registry, cx.now);
        }
        if self.qm.poll_timeout().is_some_and(|t| t <= now) {
            self.qm.handle_timeout(now);
            self.act(cx);
        }
        if let Some(c) = self.cluster.as_mut() {
            if c.next_deadline().is_some_and(|t| t <= cx.now) {
                c.timeout(cx, &mut self.qm, now);
                self.act(cx);
            }
        }
        self.collect_garbage(cx);
        self.commit_pending(cx, true);
        self.owed.pay(out);
    }

    fn next_deadline(&self) -> Option<Instant> {
        // Answers made where none could be written (start, reload) are due at once.
        Soonest::default()
            .at(self.owed.deadline(self.turn.instant()))
            // The turn after a commit's end is due at once (see `Resume`).
            .at((self.resume != Resume::No).then(|| self.turn.instant()))
            .at(self.qm.poll_timeout().map(|t| self.turn.instant_of(t.0)))
            .at(Some(self.turn.instant_of(self.gc.next().0)))
            .at(self.http.as_ref().and_then(|h| h.next_deadline()))
            .at(self.cluster.as_ref().and_then(|c| c.next_deadline()))
            .get()
    }

    fn closing(&mut self, out: &mut Replies<'_, Clients>) {
        let now = Time(self.turn.wall_ms());
        for a in self.qm.close_journal(now) {
            self.carry_out(a, None);
        }
        self.owed.pay(out);
    }
}
