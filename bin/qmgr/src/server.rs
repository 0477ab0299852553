//! qmgr's clients (cleanup, and `sluice queue`), the journal and group commit.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use daemon::{msg_info, msg_warn, Conn, Context, Cx, Server};
use ipc::qmgr::{self, Qmgr};
use ipc::queuectl::{self, QueueCtl, QueuedMessage, QueuedRecipient};
use ipc::{Endpoint, Hello, HelloReply, Protocol, Tagged};
use mail::notice::Kind as NoticeKind;
use mail::QueueId;
use mio::Token;
use queue::{Record, Replay, Spool, SpoolConfig, Syncer};

use crate::deliver::{Deliver, Effect};
use crate::journal::{Ack, Event, Writer};
use sched::admission::Admission;
use sys::creds::PeerCred;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Unknown,
    Arrival,
    Control,
}

/// Destinations reported on the metrics endpoint.
const METRICS_TOP: usize = 20;

/// How long cleanup may leave notices unanswered before the link is
/// given up and the notices are built again later.
const NOTICE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// A non-delivery notice on its way to cleanup.
struct Notice {
    /// The failed message.
    orig: QueueId,
    /// The bounced recipients it reports.
    rcpts: Vec<u32>,
    /// Begin, Data..., End.
    reqs: Vec<ipc::cleanup::Request>,
    /// A failure or success notice settles the recipients it reports
    /// (`Notified`); a delay warning is journaled as `Warned`.
    kind: NoticeKind,
}

/// How notices are named in the log, as Postfix names them.
fn notice_word(kind: NoticeKind) -> &'static str {
    match kind {
        NoticeKind::Failure => "non-delivery",
        NoticeKind::Delay => "delay",
        NoticeKind::Success { .. } => "delivery status",
    }
}

struct Client {
    ep: Endpoint,
    peer: PeerCred,
    kind: Kind,
}

/// The queue manager.
pub struct QmgrServer {
    spool: Spool,
    /// The journal, group commit, and what waits for durability.
    writer: Writer,
    waker: Option<Arc<mio::Waker>>,
    waker_token: Token,
    /// Live messages and their done recipients, as replay left them and
    /// as arrivals and results keep them.
    state: Replay,
    clients: BTreeMap<Token, Client>,
    me: u32,
    /// Delivery: router, scheduler, agents.
    deliver: Deliver,
    /// Whether master.cf has any delivery agent at all.
    delivering: bool,
    /// Messages to hand to delivery as soon as the loop can, and as
    /// `qmgr_message_active_limit` allows.
    to_activate: Admission<u32, QueueId>,
    /// `qmgr_message_active_limit`.
    active_limit: usize,
    /// Messages a flush activated (defer_transports do not hold them).
    flushing: std::collections::HashSet<QueueId>,
    /// Deferred messages by retry time (seconds since the epoch).
    retry: BTreeSet<(u64, QueueId)>,
    /// `queue_run_delay`, for messages that left delivery with nothing due.
    run_delay: u64,
    /// When journal garbage was last collected.
    last_gc: std::time::Instant,
    /// The last deferral reason per message and recipient (not journaled
    /// across restarts beyond the Deferred records themselves).
    reasons: std::collections::HashMap<QueueId, BTreeMap<u32, String>>,
    /// The link to cleanup for delivery status notifications.
    notices: Option<ipc::Link<ipc::cleanup::Cleanup>>,
    /// Notices sent, waiting for cleanup's answer: End request id → notice.
    notices_pending: BTreeMap<u64, Notice>,
    /// Notices waiting for the cleanup link.
    notices_queue: VecDeque<Notice>,
    /// When cleanup last answered a notice, or was first waited for.
    notices_progress: std::time::Instant,
    /// Messages with a notice queued or sent: no second one until it is done.
    notices_owed: HashSet<QueueId>,
    /// Messages whose delay warning is on its way to cleanup.
    warnings: HashSet<QueueId>,
    /// `delay_warning_time` (zero: never).
    delay_warning: std::time::Duration,
    /// `maximal_queue_lifetime`, for a warning's Will-Retry-Until.
    lifetime: std::time::Duration,
    /// Messages with nothing left to deliver, removed once their notice is
    /// queued: the notice must be durable before the message goes.
    remove_after_notice: HashSet<QueueId>,
    /// myhostname, myorigin, 2bounce_notice_recipient.
    names: (String, String, String),
    queue_root: PathBuf,
    /// Where main.cf and master.cf are, for reloads.
    config_dir: PathBuf,
    /// `metrics_listen` as bound at start (a reload cannot bind again).
    metrics_listen: String,
    /// Recipient results since start, for `sluice status` and metrics.
    totals: crate::metrics::Totals,
    /// The `metrics_listen` socket, bound before privileges were dropped,
    /// until `start` registers it.
    metrics_socket: Option<std::net::TcpListener>,
    /// The metrics endpoint, once registered.
    http: Option<crate::metrics::Http>,
}

impl QmgrServer {
    /// Recovers the spool and opens the journal.
    pub fn new(
        ctx: &Context,
        metrics_socket: Option<std::net::TcpListener>,
    ) -> Result<Self, String> {
        let chrooted = ctx.args.chroot && sys::is_root();
        let root = if chrooted {
            PathBuf::from("/")
        } else {
            PathBuf::from(ctx.config.str("queue_directory"))
        };
        let started = std::time::Instant::now();
        let rec = queue::recover(&root, SpoolConfig::default())
            .map_err(|e| format!("recovery of {}: {e}", root.display()))?;
        let r = &rec.report;
        for t in &rec.state.torn {
            msg_warn!(
                "journal segment {}: {} {} bytes of torn or corrupt tail at offset {} ({:?})",
                t.segment,
                if t.cut { "cut" } else { "ignored" },
                t.dropped,
                t.offset,
                t.cause
            );
        }
        for (p, why) in &r.left {
            msg_warn!("{}: left for the next recovery: {why}", p.display());
        }
        if let Some(e) = &r.commit_failed {
            msg_warn!("journal: adopted messages not yet durable: {e}; trying again");
        }
        for p in &r.partial {
            msg_info!("removed partial message file {}", p.display());
        }
        for (p, why) in &r.corrupt {
            msg_warn!("removed corrupt message file {}: {why}", p.display());
        }
        for id in &r.adopted {
            msg_info!("{id}: adopted a committed message file that was never announced");
        }
        for id in &r.missing {
            msg_warn!("{id}: message file is missing");
        }
        msg_info!(
            "recovered {} messages ({} deferred) from {} journal records in {} ms",
            rec.state.messages.len(),
            rec.state.deferred.len(),
            rec.state.records,
            started.elapsed().as_millis()
        );
        let services =
            config::load_master_cf(&ctx.config_dir.join("master.cf")).unwrap_or_default();
        let seed = u64::from(std::process::id()) ^ crate::deliver::now_ms().0;
        let scfg = crate::schedconf::build(&ctx.config, &services, seed);
        let active_limit = scfg.qmgr_message_active_limit as usize;
        let names: BTreeSet<String> = scfg.transports.iter().map(|t| t.name.clone()).collect();
        let delivering = !names.is_empty();
        if !delivering {
            msg_warn!(
                "no delivery agents (smtp, local) in master.cf: mail is queued, not delivered"
            );
        }
        let sched = if scfg.transports.is_empty() {
            // No delivery agents in master.cf: mail is kept, nothing is sent.
            sched::Scheduler::new(sched::SchedConfig::default())
        } else {
            sched::Scheduler::new(scfg)
        }
        .map_err(|e| format!("scheduler configuration: {e:?}"))?;
        let mut deliver = Deliver::new(sched, names, root.clone());
        deliver.set_defer_transports(ctx.config.list("defer_transports"));
        // Everything not held and due now is activated at start, in id
        // order; the rest waits for its retry time. Replay's deferred index
        // is in (time, id) order already, so a million deferred messages
        // make one bulk build here, not a sort and a million inserts.
        let now = crate::deliver::now_ms().0 / 1000;
        let mut to_activate = Admission::default();
        let mut due: Vec<QueueId> = rec.state.incoming.clone();
        let mut later = Vec::with_capacity(rec.state.deferred.len());
        for (at, id, _) in rec.state.deferred.iter() {
            if at <= now {
                due.push(id);
            } else {
                later.push((at, id));
            }
        }
        due.sort_unstable();
        for id in due {
            if let Some(m) = rec.state.messages.get(&id) {
                to_activate.push(id, m.sender_key);
            }
        }
        let retry: BTreeSet<(u64, QueueId)> = later.into_iter().collect();
        Ok(QmgrServer {
            spool: rec.spool,
            writer: Writer::new(rec.journal),
            waker: None,
            waker_token: Token(0),
            state: rec.state,
            clients: BTreeMap::new(),
            me: sys::current_ids().0,
            deliver,
            delivering,
            to_activate,
            active_limit,
            flushing: std::collections::HashSet::new(),
            retry,
            run_delay: ctx.config.time("queue_run_delay").as_secs().max(1),
            last_gc: std::time::Instant::now(),
            reasons: std::collections::HashMap::new(),
            notices: None,
            notices_pending: BTreeMap::new(),
            notices_queue: VecDeque::new(),
            notices_progress: std::time::Instant::now(),
            notices_owed: HashSet::new(),
            warnings: HashSet::new(),
            delay_warning: ctx.config.time("delay_warning_time"),
            lifetime: ctx.config.time("maximal_queue_lifetime"),
            remove_after_notice: HashSet::new(),
            names: notice_names(&ctx.config),
            queue_root: root.clone(),
            config_dir: ctx.config_dir.clone(),
            metrics_listen: ctx.config.str("metrics_listen"),
            totals: crate::metrics::Totals::default(),
            metrics_socket,
            http: None,
        })
    }

    fn serve(&mut self, token: Token) -> Result<bool, ipc::IpcError> {
        let Some(c) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        let open = c.ep.read_ready()?;
        if c.kind == Kind::Unknown {
            let Some(hello) = c.ep.recv::<Hello>()? else {
                return Ok(open);
            };
            let (kind, answer) = if hello.protocol == Qmgr::NAME {
                (Kind::Arrival, hello.answer::<Qmgr>())
            } else {
                (Kind::Control, hello.answer::<QueueCtl>())
            };
            c.ep.send(&answer)?;
            if answer != HelloReply::Accepted {
                return Err(ipc::IpcError::Refused {
                    wanted: "sluice-qmgr or sluice-queuectl".into(),
                    got: format!("{} {}", hello.protocol, hello.version),
                });
            }
            // Only the mail system announces mail.
            if kind == Kind::Arrival && c.peer.uid != 0 && c.peer.uid != self.me {
                return Err(ipc::IpcError::Refused {
                    wanted: "the mail system's uid".into(),
                    got: format!("uid {}", c.peer.uid),
                });
            }
            c.kind = kind;
        }
        loop {
            let Some(c) = self.clients.get_mut(&token) else {
                return Ok(false);
            };
            match c.kind {
                Kind::Arrival => {
                    let Some(req) = c.ep.recv::<Tagged<qmgr::Request>>()? else {
                        break;
                    };
                    self.arrived(token, req.id, req.body);
                }
                Kind::Control => {
                    let Some(req) = c.ep.recv::<Tagged<queuectl::Request>>()? else {
                        break;
                    };
                    let resp = self.control(req.body);
                    if let Some(c) = self.clients.get_mut(&token) {
                        c.ep.reply(req.id, &resp)?;
                    }
                }
                Kind::Unknown => break,
            }
        }
        let Some(c) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        c.ep.write_ready()?;
        Ok(!c.ep.is_eof() || c.ep.wants_write())
    }

    fn arrived(&mut self, token: Token, request: u64, req: qmgr::Request) {
        let qmgr::Request::Arrived { head, hold } = req;
        let id = head.id;
        if self.state.messages.contains_key(&id) {
            // Recovery adopted it first; it is queued already.
            self.reply(token, request, qmgr::Response::Committed);
            return;
        }
        let summary = format!(
            "{id}: from=<{}>, size={}, nrcpt={} (queue {})",
            head.envelope.sender,
            head.envelope.size,
            head.envelope.recipients.len(),
            if hold { "hold" } else { "active" }
        );
        let storage = head.data.storage();
        let arrived = Record::Arrived(head);
        let ack = Ack {
            end: queue::Lsn::default(),
            client: token,
            request,
            id,
            storage,
            summary,
            hold,
        };
        if let Err(r) = self.writer.arrive(ack, &arrived, &mut self.state) {
            if !r.taken_back {
                let _ = self.spool.remove_data(id, storage);
            }
            self.reply(
                token,
                request,
                qmgr::Response::Failed {
                    reason: r.reason,
                    disk_full: r.disk_full,
                },
            );
        }
    }

    /// The last deferral reason of each deferred recipient: this qmgr's own,
    /// else the message's latest `Deferred` record (after a restart).
    fn reasons_of(&self, id: &QueueId) -> BTreeMap<u32, String> {
        // What this qmgr appended includes the latest Deferred record.
        if let Some(mine) = self.reasons.get(id) {
            return mine.clone();
        }
        let mut out = BTreeMap::new();
        if let Some(lsn) = self.state.messages.get(id).and_then(|m| m.last_deferred) {
            if let Ok(Record::Deferred {
                id: of,
                rcpts,
                status,
                reason,
                ..
            }) = self.writer.read_at(lsn)
            {
                if of == *id {
                    for i in rcpts {
                        out.insert(i, format!("{status} {reason}"));
                    }
                }
            }
        }
        out
    }

    fn control(&mut self, req: queuectl::Request) -> queuectl::Response {
        match req {
            queuectl::Request::List => {
                let mut out: Vec<QueuedMessage> = Vec::new();
                for (id, m) in &self.state.messages {
                    let head = match self.writer.read_at(m.head) {
                        Ok(r) => r,
                        Err(e) => {
                            msg_warn!("{id}: reading its journal record: {e}");
                            continue;
                        }
                    };
                    let pending = self.state.pending(*id, &head);
                    let h = match &head {
                        Record::Arrived(h) | Record::Rewritten { head: h, .. } => h,
                        _ => continue,
                    };
                    let reasons = self.reasons_of(id);
                    out.push(QueuedMessage {
                        id: id.to_string(),
                        size: h.envelope.size,
                        arrival: h.envelope.arrival.secs,
                        sender: h.envelope.sender.clone(),
                        state: if m.held {
                            "hold"
                        } else if m.next_attempt > 0 {
                            "deferred"
                        } else {
                            "active"
                        }
                        .into(),
                        recipients: pending
                            .iter()
                            .filter_map(|i| {
                                let r = h.envelope.recipients.get(*i as usize)?;
                                let reason = reasons.get(i).cloned();
                                Some(QueuedRecipient {
                                    address: r.address.clone(),
                                    reason,
                                })
                            })
                            .collect(),
                    });
                }
                out.sort_by(|a, b| (a.arrival, &a.id).cmp(&(b.arrival, &b.id)));
                queuectl::Response::List(out)
            }
            queuectl::Request::Flush => {
                // Unreachable hosts and dead destinations are tried again too.
                self.deliver.flush();
                // Due now: like Postfix's flush, in memory only; a restart
                // returns deferred mail to its journaled schedule.
                let due: Vec<QueueId> = std::mem::take(&mut self.retry)
                    .into_iter()
                    .map(|(_, id)| id)
                    .collect();
                let n = due.len() as u64;
                // A flush also delivers what defer_transports holds back.
                self.flushing.extend(due.iter().copied());
                for id in due {
                    self.admit(id);
                }
                msg_info!("flush: {n} deferred messages made due");
                queuectl::Response::Flushed(n)
            }
            queuectl::Request::Show { id } => queuectl::Response::Shown(self.show(&id)),
            queuectl::Request::Summary { top } => {
                queuectl::Response::Summary(Box::new(self.summary(top.min(1000) as usize)))
            }
            queuectl::Request::Hold(sel) => {
                let ids: Vec<QueueId> = self
                    .select(&sel)
                    .into_iter()
                    .filter(|id| !self.is_held(id))
                    .collect();
                for id in &ids {
                    self.append(Record::Held { id: *id });
                    self.deliver.forget(id);
                    msg_info!("{id}: placed on hold");
                }
                queuectl::Response::Done(ids.len() as u64)
            }
            queuectl::Request::Release(sel) => {
                let ids: Vec<QueueId> = self
                    .select(&sel)
                    .into_iter()
                    .filter(|id| self.is_held(id))
                    .collect();
                for id in &ids {
                    self.append(Record::Released { id: *id });
                    msg_info!("{id}: released from hold");
                    self.admit(*id);
                }
                queuectl::Response::Done(ids.len() as u64)
            }
            queuectl::Request::Delete(sel) => {
                let ids = self.select(&sel);
                for id in &ids {
                    let storage = self.state.messages.get(id).map(|m| m.storage);
                    self.append(Record::Removed { id: *id });
                    self.deliver.forget(id);
                    msg_info!("{id}: removed by the administrator");
                    if let Some(st) = storage {
                        self.writer.remove_later(*id, st);
                    }
                }
                self.retry.retain(|(_, id)| !ids.contains(id));
                queuectl::Response::Done(ids.len() as u64)
            }
            queuectl::Request::Requeue(sel) => {
                let ids: Vec<QueueId> = self
                    .select(&sel)
                    .into_iter()
                    .filter(|id| !self.is_held(id))
                    .collect();
                self.retry.retain(|(_, id)| !ids.contains(id));
                for id in &ids {
                    msg_info!("{id}: requeued");
                    self.admit(*id);
                }
                queuectl::Response::Done(ids.len() as u64)
            }
        }
    }

    /// Queue sizes, delivery counters and the busiest destinations, from
    /// memory: one pass over the live messages, no journal reads.
    fn summary(&self, top: usize) -> queuectl::Summary {
        let now = crate::deliver::now_ms().0 / 1000;
        let (mut incoming, mut active, mut deferred, mut hold) = (0, 0, 0, 0);
        for (id, m) in &self.state.messages {
            if m.held {
                hold += 1;
            } else if self.deliver.is_active(id) {
                active += 1;
            } else if m.next_attempt > 0 {
                deferred += 1;
            } else {
                incoming += 1;
            }
        }
        queuectl::Summary {
            now,
            messages: self.state.messages.len() as u64,
            incoming,
            active,
            deferred,
            hold,
            active_recipients: self.deliver.active_recipients(),
            sent: self.totals.sent.counter(now),
            deferrals: self.totals.deferred.counter(now),
            bounced: self.totals.bounced.counter(now),
            transports: self.deliver.transport_summary(),
            destinations: self.deliver.destination_summary(top),
        }
    }

    fn is_held(&self, id: &QueueId) -> bool {
        self.state.messages.get(id).is_some_and(|m| m.held)
    }

    /// The head record (envelope and data) of a live message.
    fn head(&self, id: &QueueId) -> Option<(Record, queue::MessageHead)> {
        let m = self.state.messages.get(id)?;
        let rec = self.writer.read_at(m.head).ok()?;
        let h = match &rec {
            Record::Arrived(h) | Record::Rewritten { head: h, .. } => h.clone(),
            _ => return None,
        };
        Some((rec, h))
    }

    /// The live messages a selector names, oldest first.
    fn select(&self, sel: &queuectl::Selector) -> Vec<QueueId> {
        let mut ids: Vec<QueueId> = match sel {
            queuectl::Selector::Ids(v) => v
                .iter()
                .filter_map(|s| s.parse().ok())
                .filter(|id| self.state.messages.contains_key(id))
                .collect(),
            queuectl::Selector::All => self.state.messages.keys().copied().collect(),
            queuectl::Selector::Sender(want) => self
                .state
                .messages
                .keys()
                .filter(|id| {
                    self.head(id)
                        .is_some_and(|(_, h)| h.envelope.sender.eq_ignore_ascii_case(want))
                })
                .copied()
                .collect(),
            queuectl::Selector::Domain(want) => {
                let want = want.trim_start_matches('@').to_ascii_lowercase();
                self.state
                    .messages
                    .keys()
                    .filter(|id| {
                        self.head(id).is_some_and(|(rec, h)| {
                            self.state.pending(**id, &rec).iter().any(|i| {
                                h.envelope.recipients.get(*i as usize).is_some_and(|r| {
                                    r.address
                                        .rsplit_once('@')
                                        .is_some_and(|(_, d)| d.eq_ignore_ascii_case(&want))
                                })
                            })
                        })
                    })
                    .copied()
                    .collect()
            }
        };
        ids.sort();
        ids
    }

    /// `sluice queue show`: envelope, headers, and each recipient's state.
    fn show(&self, text: &str) -> Result<String, String> {
        let id: QueueId = text
            .parse()
            .map_err(|_| format!("{text}: not a queue id"))?;
        let (rec, h) = self
            .head(&id)
            .ok_or_else(|| format!("{id}: no such message in the queue"))?;
        let m = &self.state.messages[&id];
        let env = &h.envelope;
        let mut out = String::new();
        let state = if m.held {
            "hold"
        } else if m.next_attempt > 0 {
            "deferred"
        } else {
            "active"
        };
        out.push_str(&format!(
            "queue id: {id}
state: {state}
"
        ));
        if m.next_attempt > 0 {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(m.next_attempt);
            out.push_str(&format!(
                "next attempt: {}
",
                sys::time::rfc5322_date(at)
            ));
        }
        let arrival =
            std::time::UNIX_EPOCH + std::time::Duration::from_micros(env.arrival.as_micros());
        out.push_str(&format!(
            "arrival: {}
size: {}
sender: <{}>
",
            sys::time::rfc5322_date(arrival),
            env.size,
            env.sender
        ));
        if let Some(a) = &env.client_addr {
            out.push_str(&format!(
                "client: {}[{a}] helo={}
",
                env.client_name.as_deref().unwrap_or("unknown"),
                env.helo.as_deref().unwrap_or("")
            ));
        }
        if let Some(t) = &env.tls {
            out.push_str(&format!(
                "tls: {t}
"
            ));
        }
        if let Some(e) = &env.envid {
            out.push_str(&format!(
                "envid: {e}
"
            ));
        }
        let pending = self.state.pending(id, &rec);
        let reasons = self.reasons_of(&id);
        out.push_str(
            "recipients:
",
        );
        for (i, r) in env.recipients.iter().enumerate() {
            let i = i as u32;
            let st = if pending.contains(&i) {
                match reasons.get(&i) {
                    Some(why) => format!("deferred ({why})"),
                    None => "pending".to_string(),
                }
            } else {
                "done".to_string()
            };
            out.push_str(&format!(
                "  <{}>: {st}
",
                r.address
            ));
        }
        out.push_str(
            "headers:
",
        );
        if let Ok(mut d) = self.spool.open_data(id, &h.data) {
            let mut buf = vec![0u8; 64 * 1024];
            let n = std::io::Read::read(&mut d, &mut buf).unwrap_or(0);
            let text = String::from_utf8_lossy(&buf[..n]);
            for line in text.split("\r\n") {
                if line.is_empty() {
                    break;
                }
                out.push_str("  ");
                out.push_str(line);
                out.push('\n');
            }
        }
        Ok(out)
    }

    fn reply(&mut self, token: Token, request: u64, resp: qmgr::Response) {
        if let Some(c) = self.clients.get_mut(&token) {
            if let Err(e) = c.ep.reply(request, &resp) {
                msg_warn!("cleanup pid {}: {e}", c.peer.pid);
            }
        }
    }

    /// Everything appended in this pass goes into one commit.
    fn commit_pending(&mut self) {
        self.writer
            .commit(std::time::Instant::now(), &mut self.state);
        self.journal_events();
        for c in self.clients.values_mut() {
            let _ = c.ep.write_ready();
        }
    }

    /// The sync thread finished a commit.
    fn synced(&mut self) {
        self.writer
            .synced(std::time::Instant::now(), &mut self.state);
        self.journal_events();
    }

    /// Answers arrivals, frees data, and logs the journal's state changes.
    fn journal_events(&mut self) {
        for ev in self.writer.take_events() {
            match ev {
                Event::Committed(a) => {
                    msg_info!("{}", a.summary);
                    self.reply(a.client, a.request, qmgr::Response::Committed);
                    if !a.hold {
                        self.admit(a.id);
                    }
                }
                Event::Refused(a, r) => self.reply(
                    a.client,
                    a.request,
                    qmgr::Response::Failed {
                        reason: r.reason,
                        disk_full: r.disk_full,
                    },
                ),
                Event::Remove(id, storage) => {
                    if let Err(e) = self.spool.remove_data(id, storage) {
                        msg_warn!("{id}: removing its data: {e}");
                    }
                }
                Event::Stalled(r) => msg_warn!(
                    "journal: {}; mail is refused and delivery paused, results kept in memory, until it can be written (trying every {} s)",
                    r.reason,
                    crate::journal::RETRY.as_secs()
                ),
                Event::Resumed(d) => msg_info!(
                    "journal: writable again after {:.1} s; accepting mail",
                    d.as_secs_f64()
                ),
            }
        }
    }

    /// Appends a record and applies it to the in-memory state.
    fn append(&mut self, rec: Record) {
        match &rec {
            // The last reason is what mailq shows under a deferred recipient.
            Record::Deferred {
                id,
                rcpts,
                status,
                reason,
                ..
            } if self.state.messages.contains_key(id) => {
                let r = self.reasons.entry(*id).or_default();
                for i in rcpts {
                    r.insert(*i, format!("{status} {reason}"));
                }
            }
            Record::Removed { id } => {
                self.reasons.remove(id);
            }
            _ => {}
        }
        // Every recipient result passes here once, whoever decided it.
        let now = crate::deliver::now_ms().0 / 1000;
        match &rec {
            Record::Delivered { rcpts, .. } => self.totals.sent.add(now, rcpts.len() as u64),
            Record::Deferred { rcpts, .. } => self.totals.deferred.add(now, rcpts.len() as u64),
            Record::Bounced { rcpts, .. } => self.totals.bounced.add(now, rcpts.len() as u64),
            _ => {}
        }
        self.write(rec);
    }

    /// Appends a record without counting it as a result (a restatement).
    ///
    /// Appending needs no disk (the writer keeps what it cannot write
    /// yet); it fails only for a record too large to encode, which is then
    /// not kept: the delivery it reports is done again later.
    fn write(&mut self, rec: Record) {
        if let Err(e) = self.writer.append(&rec, &mut self.state) {
            msg_warn!("journal: {e}; record not kept");
        }
    }

    /// Carries out what delivery asked for.
    fn apply_effects(&mut self) {
        for e in self.deliver.take_effects() {
            match e {
                Effect::Journal(rec) => self.append(*rec),
                Effect::Finished { id, next_attempt } => {
                    let Some(m) = self.state.messages.get(&id) else {
                        continue;
                    };
                    let head_lsn = m.head;
                    let (pending, head) = match self.writer.read_at(head_lsn) {
                        Ok(rec) => (self.state.pending(id, &rec), rec),
                        Err(e) => {
                            msg_warn!("{id}: reading its journal record: {e}; trying again later");
                            let now = crate::deliver::now_ms().0 / 1000;
                            self.retry.insert((now + self.run_delay, id));
                            continue;
                        }
                    };
                    if let Record::Arrived(h) | Record::Rewritten { head: h, .. } = head {
                        if !pending.is_empty() {
                            self.maybe_warn(&h, &pending);
                        }
                        self.owe_notice(h);
                    }
                    if pending.is_empty() {
                        if self.notices_owed.contains(&id) {
                            self.remove_after_notice.insert(id);
                        } else {
                            self.remove_message(id);
                        }
                    } else {
                        let now = crate::deliver::now_ms().0 / 1000;
                        let at = next_attempt.unwrap_or(now + self.run_delay);
                        self.retry.insert((at, id));
                    }
                }
            }
        }
    }

    /// Removes a message with nothing left to do; its data goes once the
    /// Removed record is durable.
    fn remove_message(&mut self, id: QueueId) {
        let Some(m) = self.state.messages.get(&id) else {
            return;
        };
        let storage = m.storage;
        self.append(Record::Removed { id });
        self.deliver.forget(&id);
        msg_info!("{id}: removed");
        self.writer.remove_later(id, storage);
    }

    /// Warns the sender once that a message is delayed, after
    /// `delay_warning_time` (Postfix: off by default), about its recipients
    /// still pending that did not refuse delay notices.
    fn maybe_warn(&mut self, head: &queue::MessageHead, pending: &[u32]) {
        let id = head.id;
        if self.delay_warning.is_zero() || self.warnings.contains(&id) {
            return;
        }
        if self.state.messages.get(&id).is_none_or(|m| m.warned) {
            return;
        }
        let arrival = std::time::UNIX_EPOCH
            + std::time::Duration::from_micros(head.envelope.arrival.as_micros());
        if arrival.elapsed().unwrap_or_default() < self.delay_warning {
            return;
        }
        let reasons = self.reasons_of(&id);
        let items: Vec<crate::bounce::Failed> = pending
            .iter()
            .map(|&i| {
                let last = reasons.get(&i).cloned().unwrap_or_default();
                // "4.4.1 connect to ..." as appended: status, then the reason.
                let (status, reason) = match last.split_once(' ') {
                    Some((s, r)) if s.starts_with('4') => (s.to_string(), r.to_string()),
                    _ => (
                        "4.0.0".to_string(),
                        "delivery temporarily suspended".to_string(),
                    ),
                };
                crate::bounce::Failed {
                    index: i,
                    status,
                    reason,
                }
            })
            .collect();
        let rcpts: Vec<u32> = items.iter().map(|f| f.index).collect();
        match self.notice(head.clone(), items, NoticeKind::Delay) {
            Some(reqs) => {
                self.warnings.insert(id);
                self.notices_queue.push_back(Notice {
                    orig: id,
                    rcpts,
                    reqs,
                    kind: NoticeKind::Delay,
                });
            }
            // Nobody wants one: do not look again.
            None => self.append(Record::Warned { id }),
        }
    }

    /// Queues the next notice a message owes: failures first, then
    /// success reports (delivered here, then relayed), one at a time (after
    /// a crash too: the journal keeps them until `Notified`).
    fn owe_notice(&mut self, head: queue::MessageHead) {
        let id = head.id;
        if self.notices_owed.contains(&id) {
            return;
        }
        for kind in [
            NoticeKind::Failure,
            NoticeKind::Success { relayed: false },
            NoticeKind::Success { relayed: true },
        ] {
            let Some(owed) = self.state.unnotified.get(&id) else {
                return;
            };
            let want = match kind {
                NoticeKind::Success { relayed } => Some(relayed),
                _ => None,
            };
            let items: Vec<crate::bounce::Failed> = owed
                .iter()
                .filter(|b| b.success == want)
                .map(|b| crate::bounce::Failed {
                    index: b.index,
                    status: b.status.to_string(),
                    reason: b.reason.clone(),
                })
                .collect();
            if items.is_empty() {
                continue;
            }
            let rcpts: Vec<u32> = items.iter().map(|f| f.index).collect();
            match self.notice(head.clone(), items, kind) {
                Some(reqs) => {
                    self.notices_owed.insert(id);
                    self.notices_queue.push_back(Notice {
                        orig: id,
                        rcpts,
                        reqs,
                        kind,
                    });
                    return;
                }
                // Nobody wants one: settled.
                None => self.append(Record::Notified { id, rcpts }),
            }
        }
    }

    /// A notice is queued (or refused for good): journal that, and remove
    /// the message if it was only waiting for this.
    fn notice_done(&mut self, n: Notice) {
        if n.kind == NoticeKind::Delay {
            self.warnings.remove(&n.orig);
            if self.state.messages.contains_key(&n.orig) {
                self.append(Record::Warned { id: n.orig });
            }
            return;
        }
        self.notices_owed.remove(&n.orig);
        self.append(Record::Notified {
            id: n.orig,
            rcpts: n.rcpts,
        });
        // Another kind of notice may be owed (failures and successes).
        if self.state.unnotified.contains_key(&n.orig) {
            if let Some((_, h)) = self.head(&n.orig) {
                self.owe_notice(h);
            }
        }
        if !self.notices_owed.contains(&n.orig) && self.remove_after_notice.remove(&n.orig) {
            self.remove_message(n.orig);
        }
    }

    /// A notice did not make it: the message is tried again later, which
    /// builds the notice again from the journal.
    fn notice_retry(&mut self, n: Notice) {
        if n.kind == NoticeKind::Delay {
            // The next deferral of the message warns again.
            self.warnings.remove(&n.orig);
            return;
        }
        self.notices_owed.remove(&n.orig);
        self.remove_after_notice.remove(&n.orig);
        if self.state.messages.contains_key(&n.orig) {
            let now = crate::deliver::now_ms().0 / 1000;
            self.retry.insert((now + self.run_delay, n.orig));
        }
    }

    /// Builds a notice about a message: cleanup requests, or `None` when
    /// nobody is to get one. Only failures of notices go to the postmaster;
    /// delay warnings and success reports go to a real sender only.
    fn notice(
        &mut self,
        head: queue::MessageHead,
        failed: Vec<crate::bounce::Failed>,
        kind: NoticeKind,
    ) -> Option<Vec<ipc::cleanup::Request>> {
        use crate::bounce;
        let env = &head.envelope;
        let wanted = bounce::wanted(env, &failed, kind);
        if wanted.is_empty() {
            return None;
        }
        let (hostname, origin, postmaster) = &self.names;
        let (to, from) = match bounce::who(&env.sender, postmaster, origin) {
            bounce::Notify::Sender(s) => (s, String::new()),
            _ if kind != NoticeKind::Failure => return None,
            bounce::Notify::Postmaster { to, from } => (to, from),
            bounce::Notify::Nobody => {
                msg_warn!("{}: undeliverable double-bounce discarded", head.id);
                return None;
            }
        };
        let original = match self.spool.open_data(head.id, &head.data) {
            Ok(mut d) => {
                let mut v = Vec::new();
                if let Err(e) = std::io::Read::read_to_end(&mut d, &mut v) {
                    msg_warn!("{}: reading the message for its notice: {e}", head.id);
                }
                v
            }
            Err(e) => {
                msg_warn!("{}: reading the message for its notice: {e}", head.id);
                Vec::new()
            }
        };
        let now = std::time::SystemTime::now();
        let arrival =
            std::time::UNIX_EPOCH + std::time::Duration::from_micros(env.arrival.as_micros());
        let (date, arrived) = (
            sys::time::rfc5322_date(now),
            sys::time::rfc5322_date(arrival),
        );
        let until = sys::time::rfc5322_date(arrival + self.lifetime);
        let cx = bounce::Context {
            hostname,
            to: &to,
            date: &date,
            arrival: &arrived,
            retry_until: (kind == NoticeKind::Delay).then_some(until.as_str()),
        };
        let bytes =
            mail::notice::report_of(kind, env, &head.id.to_string(), &wanted, &original, cx);
        let envelope = mail::Envelope {
            sender: from,
            recipients: vec![mail::Recipient::new(to)],
            ..mail::Envelope::default()
        };
        let mut reqs = vec![ipc::cleanup::Request::Begin {
            envelope: Box::new(envelope),
            origin: ipc::cleanup::Origin::Local {
                user: "MAILER-DAEMON".into(),
                full_name: Some("Mail Delivery System".into()),
            },
            hold: false,
        }];
        for chunk in bytes.chunks(ipc::cleanup::MAX_CHUNK) {
            reqs.push(ipc::cleanup::Request::Data {
                bytes: chunk.to_vec(),
            });
        }
        reqs.push(ipc::cleanup::Request::End);
        Some(reqs)
    }

    /// Sends queued notices to cleanup; reads its answers.
    fn notices_ready(&mut self, cx: &mut Cx<'_>) {
        let mut lost = false;
        if let Some(link) = self.notices.as_mut() {
            let answers = match link.ready() {
                Ok(a) => a,
                Err(e) => {
                    msg_warn!("cleanup link for notices: {e}");
                    lost = true;
                    Vec::new()
                }
            };
            for (id, resp) in answers {
                let Some(n) = self.notices_pending.remove(&id) else {
                    continue;
                };
                self.notices_progress = std::time::Instant::now();
                match resp {
                    ipc::cleanup::Response::Queued { queue_id } => {
                        msg_info!(
                            "{}: sender {} notification: {queue_id}",
                            n.orig,
                            notice_word(n.kind)
                        );
                        self.notice_done(n);
                    }
                    ipc::cleanup::Response::Failed {
                        code,
                        enhanced,
                        text,
                    } if code >= 500 => {
                        msg_warn!(
                            "{}: the {} notification was refused: {code} {enhanced} {text}",
                            n.orig,
                            notice_word(n.kind)
                        );
                        self.notice_done(n);
                    }
                    ipc::cleanup::Response::Failed {
                        code,
                        enhanced,
                        text,
                    } => {
                        msg_warn!(
                            "{}: the {} notification was deferred: {code} {enhanced} {text}",
                            n.orig,
                            notice_word(n.kind)
                        );
                        self.notice_retry(n);
                    }
                    ipc::cleanup::Response::Started { .. } => {
                        self.notices_pending.insert(id, n);
                    }
                }
            }
            lost |= self.notices.as_ref().is_some_and(|l| l.is_closed());
            // A cleanup that holds the link open and never answers must not
            // keep failed messages in the queue for ever.
            if !self.notices_pending.is_empty() && self.notices_progress.elapsed() >= NOTICE_TIMEOUT
            {
                msg_warn!(
                    "cleanup link for notices: no answer for {}s",
                    NOTICE_TIMEOUT.as_secs()
                );
                lost = true;
            }
        }
        if lost {
            if let Some(mut l) = self.notices.take() {
                l.deregister(cx.registry);
            }
            for (_, n) in std::mem::take(&mut self.notices_pending) {
                msg_warn!(
                    "{}: cleanup went away before queueing the non-delivery notification; trying again later",
                    n.orig
                );
                self.notice_retry(n);
            }
        }
        if self.notices_queue.is_empty() {
            return;
        }
        if self.notices.is_none() {
            let t = cx.token();
            match ipc::Link::<ipc::cleanup::Cleanup>::connect(
                &self.queue_root.join("private/cleanup"),
                cx.registry,
                t,
            ) {
                Ok(l) => self.notices = Some(l),
                Err(e) => {
                    msg_warn!("connect to cleanup for notices: {e}");
                    for n in std::mem::take(&mut self.notices_queue) {
                        self.notice_retry(n);
                    }
                    return;
                }
            }
        }
        let link = self.notices.as_mut().expect("connected above");
        while let Some(n) = self.notices_queue.pop_front() {
            let mut last = None;
            for r in &n.reqs {
                match link.send(r) {
                    Ok(id) => last = Some(id),
                    Err(e) => {
                        msg_warn!("cleanup link for notices: {e}");
                        last = None;
                        break;
                    }
                }
            }
            match last {
                Some(id) => {
                    if self.notices_pending.is_empty() {
                        self.notices_progress = std::time::Instant::now();
                    }
                    self.notices_pending.insert(id, n);
                }
                None => {
                    // Start again on a fresh link next time; what was sent
                    // on this one is never answered now.
                    self.notices_queue.push_front(n);
                    if let Some(mut l) = self.notices.take() {
                        l.deregister(cx.registry);
                    }
                    for (_, p) in std::mem::take(&mut self.notices_pending) {
                        self.notice_retry(p);
                    }
                    return;
                }
            }
        }
    }

    /// Queues a message for delivery, in its sender's line.
    fn admit(&mut self, id: QueueId) {
        let key = self.state.messages.get(&id).map_or(0, |m| m.sender_key);
        self.to_activate.push(id, key);
    }

    /// Hands waiting messages to delivery.
    fn activate_waiting(&mut self, cx: &mut Cx<'_>) {
        if !self.delivering {
            self.to_activate.clear();
            return;
        }
        // Results could not be journaled: start nothing new until they can.
        if self.writer.stalled().is_some() {
            return;
        }
        let now = crate::deliver::now_ms().0 / 1000;
        while let Some(&(at, id)) = self.retry.first() {
            if at > now {
                break;
            }
            self.retry.pop_first();
            self.admit(id);
        }
        // Bounded per pass so a big backlog does not stall the loop.
        for _ in 0..1000 {
            if self.deliver.active() >= self.active_limit {
                break;
            }
            let Some(id) = self.to_activate.pop() else {
                break;
            };
            // Taken whether or not it is activated now, so it cannot linger.
            let flush = self.flushing.remove(&id);
            if self.deliver.is_active(&id) {
                continue;
            }
            let Some(m) = self.state.messages.get(&id) else {
                continue;
            };
            if m.held {
                continue;
            }
            let (head_lsn, next) = (m.head, m.next_attempt);
            let rec = match self.writer.read_at(head_lsn) {
                Ok(r) => r,
                Err(e) => {
                    msg_warn!("{id}: reading its journal record: {e}; trying again later");
                    self.retry.insert((now + self.run_delay, id));
                    continue;
                }
            };
            let pending = self.state.pending(id, &rec);
            // A retried message is restated at the head of the journal, so
            // the segments holding its older records can go.
            if next > 0 {
                // Restatements are not new results: written, not counted.
                for r in self.state.restatement(id, &rec, 0).unwrap_or_default() {
                    self.write(r);
                }
            }
            let head = match rec {
                Record::Arrived(h) | Record::Rewritten { head: h, .. } => h,
                _ => continue,
            };
            self.deliver.activate(cx, head, pending, 0, flush);
        }
        self.apply_effects();
    }

    /// A metrics connection is ready; a complete GET /metrics gets the
    /// summary of the busiest destinations in Prometheus text.
    fn metrics_ready(&mut self, cx: &mut Cx<'_>, token: Token) {
        let Some(mut h) = self.http.take() else {
            return;
        };
        let registry = cx.registry;
        h.ready(
            registry,
            token,
            || cx.token(),
            || crate::metrics::prometheus(&self.summary(METRICS_TOP)),
        );
        self.http = Some(h);
    }
}

/// myhostname, myorigin and 2bounce_notice_recipient (qualified), for notices.
fn notice_names(config: &config::Config) -> (String, String, String) {
    let origin = config.str("myorigin");
    let pm = config.str("2bounce_notice_recipient");
    let pm = if pm.contains('@') {
        pm
    } else {
        format!("{pm}@{origin}")
    };
    (config.str("myhostname"), origin, pm)
}

impl Server for QmgrServer {
    fn reload(&mut self, _cx: &mut Cx<'_>, config: &config::Config) -> bool {
        // In place: qmgr holds the active queue, and the journal replay a
        // restart costs is not needed for new parameter values.
        let services = match config::load_master_cf(&self.config_dir.join("master.cf")) {
            Ok(s) => s,
            Err(e) => {
                msg_warn!("reload: {e}; keeping the running configuration");
                return true;
            }
        };
        let seed = u64::from(std::process::id()) ^ crate::deliver::now_ms().0;
        let scfg = crate::schedconf::build(config, &services, seed);
        let limit = scfg.qmgr_message_active_limit as usize;
        match self.deliver.reconfigure(scfg) {
            // qmgr's admission and the scheduler must agree on the limit.
            Ok(()) => self.active_limit = limit,
            Err(e) => msg_warn!(
                "reload: scheduler: {e}; those changes need a restart (sluice stop; sluice start)"
            ),
        }
        if config.str("metrics_listen") != self.metrics_listen {
            msg_warn!("reload: metrics_listen changed: it takes effect when qmgr restarts");
        }
        self.deliver
            .set_defer_transports(config.list("defer_transports"));
        self.run_delay = config.time("queue_run_delay").as_secs().max(1);
        self.names = notice_names(config);
        self.delay_warning = config.time("delay_warning_time");
        self.lifetime = config.time("maximal_queue_lifetime");
        true
    }

    fn start(&mut self, cx: &mut Cx<'_>) {
        let token = cx.token();
        match mio::Waker::new(cx.registry, token) {
            Ok(w) => {
                let w = Arc::new(w);
                let notify = w.clone();
                match Syncer::spawn(move || {
                    let _ = notify.wake();
                }) {
                    Ok(s) => self.writer.set_syncer(s),
                    Err(e) => msg_warn!("journal sync thread: {e}; committing inline"),
                }
                self.waker = Some(w);
                self.waker_token = token;
            }
            Err(e) => msg_warn!("waker: {e}; committing inline"),
        }
        if let Some(sock) = self.metrics_socket.take() {
            let addr = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
            let t = cx.token();
            match crate::metrics::Http::new(sock, cx.registry, t) {
                Ok(h) => {
                    msg_info!("serving metrics at http://{addr}/metrics");
                    self.http = Some(h);
                }
                Err(e) => msg_warn!("metrics_listen {addr}: {e}; metrics are off"),
            }
        }
        self.activate_waiting(cx);
        self.commit_pending();
    }

    fn accept(&mut self, cx: &mut Cx<'_>, conn: Conn) {
        let Conn::Unix(stream) = conn else { return };
        let token = cx.token();
        let Ok(ep) = Endpoint::registered(stream, cx.registry, token) else {
            return;
        };
        // Dropping the endpoint closes it, which also leaves the poll set.
        let Ok(peer) = ep.peer() else { return };
        self.clients.insert(
            token,
            Client {
                ep,
                peer,
                kind: Kind::Unknown,
            },
        );
        self.ready(cx, token, true, true);
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, _readable: bool, _writable: bool) {
        if token == self.waker_token && self.waker.is_some() {
            self.synced();
        } else if self.deliver.owns(token) {
            self.deliver.ready(cx, token);
        } else if self.notices.as_ref().is_some_and(|l| l.token() == token) {
            self.notices_ready(cx);
        } else if self.http.as_ref().is_some_and(|h| h.owns(token)) {
            self.metrics_ready(cx, token);
        } else {
            match self.serve(token) {
                Ok(true) => {}
                Ok(false) => {
                    if let Some(mut c) = self.clients.remove(&token) {
                        let _ = cx.registry.deregister(c.ep.stream());
                    }
                }
                Err(e) => {
                    if let Some(mut c) = self.clients.remove(&token) {
                        msg_warn!("client pid {}: {e}", c.peer.pid);
                        let _ = cx.registry.deregister(c.ep.stream());
                    }
                }
            }
        }
        self.apply_effects();
        self.activate_waiting(cx);
        self.notices_ready(cx);
        self.commit_pending();
    }

    fn timeout(&mut self, cx: &mut Cx<'_>) {
        if let Some(h) = self.http.as_mut() {
            h.expire(cx.registry);
        }
        self.deliver.timeout(cx);
        self.apply_effects();
        self.activate_waiting(cx);
        self.notices_ready(cx);
        if self.last_gc.elapsed() >= std::time::Duration::from_secs(60) {
            self.last_gc = std::time::Instant::now();
            self.deliver.prune_figures();
            match queue::collect_garbage(&self.spool, self.writer.journal_mut(), &self.state) {
                Ok(gone) if !gone.is_empty() => msg_info!(
                    "journal: deleted {} segment(s) with nothing live",
                    gone.len()
                ),
                Ok(_) => {}
                Err(e) => msg_warn!("journal garbage collection: {e}"),
            }
        }
        self.commit_pending();
    }

    fn next_deadline(&self) -> Option<std::time::Instant> {
        let now_i = std::time::Instant::now();
        let now = crate::deliver::now_ms().0;
        let mut d: Option<std::time::Instant> = None;
        let mut at =
            |t: std::time::Instant| d = Some(d.map_or(t, |x: std::time::Instant| x.min(t)));
        if let Some(t) = self.deliver.next_timeout() {
            at(now_i + std::time::Duration::from_millis(t.0.saturating_sub(now)));
        }
        if let Some(&(secs, _)) = self.retry.first() {
            at(now_i + std::time::Duration::from_millis((secs * 1000).saturating_sub(now)));
        }
        if !self.to_activate.is_empty() && self.deliver.active() < self.active_limit {
            at(now_i);
        }
        // Journal garbage collection, once a minute.
        at(self.last_gc + std::time::Duration::from_secs(60));
        // A stalled journal is tried again.
        if let Some(t) = self.writer.next_deadline() {
            at(t);
        }
        if let Some(t) = self.http.as_ref().and_then(|h| h.next_deadline()) {
            at(t);
        }
        d
    }

    fn clients(&self) -> usize {
        self.clients.len()
    }

    fn shutdown(&mut self) {
        self.writer
            .shutdown(std::time::Instant::now(), &mut self.state);
        self.journal_events();
        for c in self.clients.values_mut() {
            let _ = c.ep.write_ready();
        }
    }
}
