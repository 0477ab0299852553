//! cleanup's clients and their messages in progress; the links to the
//! router (address mapping) and qmgr are in `links`. The clients' sockets,
//! handshake and framing are `daemon::ipcserver`'s; answers made later (a
//! commit, a mapping, a deadline) go out by the request's id.
//!
//! At `Begin`, the envelope sender and recipients go to the router in one
//! request (canonical and virtual alias mapping, when maps are set and
//! `receive_override_options` does not say `no_address_mappings`); its
//! answer normally arrives while the content streams. At `End` the message
//! waits for that answer if it has not come, then is committed with the
//! rewritten sender and recipients. A router
//! that cannot be reached, that goes away with answers owed, or that has
//! not answered `cleanup_router_timeout` after End, makes the message a
//! 451: never queued without its mapping.
//!
//! Every End is answered within deadlines. The message data is committed
//! (its envelope written and synced, which makes it a file qmgr's recovery
//! would adopt) only once a qmgr process has answered the link's hello: a
//! qmgr that is stopped, throttled by master or stuck in recovery leaves
//! the message uncommitted, and after `cleanup_qmgr_timeout` the draft is
//! removed and the client gets 451 4.3.0: nothing is queued behind its back.
//! Once `Arrived` is sent, qmgr may have it; if no `Committed` comes within
//! `cleanup_qmgr_timeout` the client gets 451 4.3.0 all the same, the data
//! stays (qmgr may journal it, or adopt it at recovery: a retrying client
//! then makes a duplicate, never a loss, as with Postfix), and the link is
//! dropped so that later messages wait for a live qmgr before committing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use daemon::ipcserver::{ClientId, Handler, Replies};
use daemon::{msg_info, msg_warn, Context, Cx};
use ipc::cleanup::{Cleanup, Origin, Request, Response, MAX_CHUNK};
use ipc::peer::PeerError;
use ipc::qmgr::Qmgr;
use ipc::router::{self, Router};
use ipc::Peer;
use mail::{Envelope, QueueId, QueueIdGen, Refusal, StatusCode, Timestamp};
use mio::Token;
use queue::{Draft, FileMode, MessageHead, Spool, SpoolConfig};
use sys::creds::PeerCred;

use crate::checks::{self, BodyScan, Checks, Verdict};
use crate::dkim::Dkim;
use crate::headers::{self, Fed, HeaderBuffer};
use crate::milter;
use crate::rewrite;

mod filter;
mod links;
mod write;
use filter::{Filter, Outcome};
use write::{
    check_hops, finish_signing, header_block, hold_content, scan_body, scan_body_end, scan_primary,
    start_signing, write, write_held, HeaderCtx,
};

/// Where a message's address mapping stands.
enum Mapping {
    /// Not asked for (no_address_mappings), or applied already.
    Off,
    /// Asked; the router's answer has not come.
    Waiting,
    /// The answer: the sender (when rewritten) and recipients to queue, or why not.
    Done(Result<(Option<String>, Vec<mail::Recipient>), Refusal>),
}

struct Msg {
    id: QueueId,
    envelope: Envelope,
    origin: Origin,
    hold: bool,
    headers: HeaderBuffer,
    draft: Option<Draft>,
    /// The first failure; reported at End.
    error: Option<Refusal>,
    arrival: SystemTime,
    mapping: Mapping,
    /// The id of the client's `End`, while it waits for the mapping, and
    /// when it stops waiting (`cleanup_router_timeout`).
    ended: Option<(u64, Instant)>,
    /// What the tenant and job headers said.
    ids: headers::Ids,
    /// The DKIM signature being made, its place reserved in the draft.
    sign: Option<::dkim::Signing>,
    /// Content held for the milters' changes (see `milter.rs`).
    held: Option<milter::Held>,
    /// `non_smtpd_milters` at work on a local submission.
    filter: Option<Filter>,
    /// The id of the client's `End` while the filter decides.
    filter_end: Option<u64>,
    /// Recipients the milters added and the sender they set, while the
    /// router maps them (the second mapping of the message).
    added: Option<(String, Vec<mail::Recipient>)>,
    /// The milters' envelope changes were mapped already.
    remapped: bool,
    /// header_checks and body_checks, as they were when the message began.
    checks: Option<Arc<Checks>>,
    /// What they decided so far.
    verdict: Verdict,
    /// The body lines on their way through body_checks.
    body_scan: BodyScan,
    /// `error` is header_checks' or body_checks' REJECT, logged already.
    check_rejected: bool,
}

impl Msg {
    /// Drops the uncommitted message file, if it has one.
    fn discard(&mut self, spool: &Spool) {
        if let Some(d) = self.draft.take() {
            let _ = d.abort(spool);
        }
    }
}

/// A client (smtpd, sendmail, local, qmgr's notices) and its message in
/// progress; its socket is `daemon::ipcserver`'s.
struct Client {
    peer: PeerCred,
    msg: Option<Msg>,
}

/// A message waiting for qmgr's commit.
struct Pending {
    client: ClientId,
    request: u64,
    id: QueueId,
    /// When the client gets 451 without it (`cleanup_qmgr_timeout`).
    deadline: Instant,
}

/// A complete message whose data is not committed yet because no qmgr
/// has answered the link's hello.
struct Parked {
    client: ClientId,
    request: u64,
    msg: Msg,
    deadline: Instant,
}

/// The cleanup service.
pub struct CleanupServer {
    spool: Spool,
    ids: QueueIdGen,
    clients: BTreeMap<ClientId, Client>,
    /// Answers made outside a request's own turn (a commit, a mapping, a
    /// deadline), sent at the end of the callback.
    outbox: Vec<(ClientId, u64, Response)>,
    /// The messages whose commit qmgr owes.
    qmgr: Peer<Qmgr, Pending>,
    /// The client and message each mapping asked is for.
    router: Peer<Router, (ClientId, QueueId)>,
    parked: Vec<Parked>,
    router_timeout: Duration,
    qmgr_timeout: Duration,
    address_mappings: bool,
    hostname: String,
    origin_domain: String,
    always_add: bool,
    size_limit: u64,
    /// `hopcount_limit` (see `HeaderCtx`).
    hop_limit: usize,
    /// `header_size_limit`.
    header_limit: usize,
    id_headers: headers::IdHeaders,
    /// `message_drop_headers`.
    drop_headers: Vec<String>,
    tenant_from_sasl: bool,
    me: u32,
    /// DKIM keys and settings, read before privileges were dropped.
    dkim: Option<Dkim>,
    /// `non_smtpd_milters`, for local submissions on a public service.
    non_smtpd: Option<std::sync::Arc<::milter::net::Settings>>,
    /// This service listens in public/ (sendmail(1)'s `submit`): its
    /// local mail is a user's submission, not mail Sluice made itself.
    public: bool,
    /// Which client's filter a milter socket belongs to.
    filter_owner: BTreeMap<Token, ClientId>,
    queue_root: PathBuf,
    /// `header_checks` and `body_checks`; None when neither is set.
    checks: Option<Arc<Checks>>,
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl CleanupServer {
    /// Opens the spool under the queue directory.
    pub fn new(ctx: &Context, dkim: Option<Dkim>, checks: Option<Checks>) -> Result<Self, String> {
        let chrooted = ctx.args.chroot && sys::is_root();
        let root = if chrooted {
            PathBuf::from("/")
        } else {
            PathBuf::from(ctx.config.str("queue_directory"))
        };
        // Small messages travel inline in qmgr's journal record; larger ones
        // go to a preallocated pool slot (claimed under a lock, committed
        // with one fdatasync, no file created): the hot path without file
        // creation. Slots that qmgr frees are found again by a rescan.
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
        Ok(CleanupServer {
            spool,
            ids: QueueIdGen::new(std::process::id()),
            clients: BTreeMap::new(),
            outbox: Vec::new(),
            qmgr: Peer::new(root.join("private/qmgr")),
            router: Peer::new(root.join("private/router")),
            parked: Vec::new(),
            router_timeout: ctx.config.time("cleanup_router_timeout"),
            qmgr_timeout: ctx.config.time("cleanup_qmgr_timeout"),
            address_mappings: address_mappings(&ctx.config),
            hostname: ctx.config.str("myhostname"),
            origin_domain: ctx.config.str("myorigin"),
            always_add: ctx.config.bool("always_add_missing_headers"),
            size_limit: ctx.config.size("message_size_limit"),
            hop_limit: hop_limit(&ctx.config),
            header_limit: checks::header_limit(&ctx.config),
            id_headers: headers::IdHeaders::from_config(&ctx.config),
            drop_headers: ctx.config.list("message_drop_headers"),
            tenant_from_sasl: ctx.config.bool("tenant_from_sasl"),
            me: sys::current_ids().0,
            dkim,
            non_smtpd: non_smtpd_milters(&ctx.config, &root)?,
            public: is_public(ctx),
            filter_owner: BTreeMap::new(),
            queue_root: root.clone(),
            checks: checks.map(Arc::new),
        })
    }

    fn trusted(&self, peer: &PeerCred) -> bool {
        peer.uid == 0 || peer.uid == self.me
    }

    fn handle(
        &mut self,
        cx: &mut Cx<'_>,
        token: ClientId,
        request: u64,
        req: Request,
    ) -> Option<Response> {
        let trusted = self
            .clients
            .get(&token)
            .map(|c| self.trusted(&c.peer))
            .unwrap_or(false);
        let peer = self.clients.get(&token).map(|c| c.peer)?;
        match req {
            Request::Begin {
                envelope,
                origin,
                hold,
                quiet,
            } => {
                let origin = match origin {
                    Origin::Smtp { .. } if !trusted => {
                        msg_warn!(
                            "uid {} (pid {}) claimed to be an SMTP server: refused",
                            peer.uid,
                            peer.pid
                        );
                        return Some(failed(Refusal::new(
                            550,
                            StatusCode::NOT_AUTHORIZED,
                            "Only the mail system may submit SMTP mail here",
                        )));
                    }
                    // Never trust the user name a client claims.
                    Origin::Local { full_name, .. } => Origin::Local {
                        user: user_name(peer.uid),
                        full_name,
                    },
                    o => o,
                };
                // smtpd's syntax keeps control characters out of an
                // envelope; a local client writing here directly is not
                // read by smtpd, and a CR LF would reach the log and the
                // header fields of its notices.
                let controlled = |a: &str| a.chars().any(char::is_control);
                if controlled(&envelope.sender)
                    || envelope.recipients.iter().any(|r| controlled(&r.address))
                {
                    msg_warn!(
                        "uid {} (pid {}): an envelope address with a control character: refused",
                        peer.uid,
                        peer.pid
                    );
                    return Some(failed(Refusal::new(
                        501,
                        StatusCode::known(5, 1, 3),
                        "Bad address syntax",
                    )));
                }
                let id = self.ids.next(now_micros());
                if matches!(origin, Origin::Local { .. }) {
                    msg_info!("{id}: uid={} from=<{}>", peer.uid, envelope.sender);
                }
                let draft = self.spool.draft(id);
                // Postfix filters a user's submission with
                // non_smtpd_milters, not bounces and forwarded mail
                // (internal_mail_filter_classes is empty by default).
                let filtered = self.public && matches!(origin, Origin::Local { .. });
                let non_smtpd = self.non_smtpd.clone().filter(|_| filtered);
                let held = (matches!(origin, Origin::Smtp { milters: true, .. })
                    || non_smtpd.is_some())
                .then(milter::Held::default);
                let filter = non_smtpd.map(|s| {
                    let tokens: Vec<Token> = s.milters.iter().map(|_| cx.token()).collect();
                    let rcpts: Vec<String> = envelope
                        .recipients
                        .iter()
                        .map(|r| r.address.clone())
                        .collect();
                    Filter::start(
                        cx.registry,
                        &tokens,
                        &s,
                        cx.now,
                        &id.to_string(),
                        &envelope.sender,
                        &rcpts,
                    )
                });
                if let Some(f) = &filter {
                    for t in f.tokens() {
                        self.filter_owner.insert(t, token);
                    }
                }
                if let Some(mut old) = self.clients.get_mut(&token)?.msg.take() {
                    self.drop_filter(cx, &mut old);
                    old.discard(&self.spool);
                }
                let c = self.clients.get_mut(&token)?;
                let mapping = if self.address_mappings {
                    Mapping::Waiting
                } else {
                    Mapping::Off
                };
                let ask = matches!(mapping, Mapping::Waiting).then(|| router::Request::Rewrite {
                    sender: envelope.sender.clone(),
                    addresses: envelope
                        .recipients
                        .iter()
                        .map(|r| r.address.clone())
                        .collect(),
                    smtputf8: envelope.smtputf8,
                });
                c.msg = Some(Msg {
                    id,
                    envelope: *envelope,
                    origin,
                    hold,
                    headers: HeaderBuffer::default(),
                    draft: Some(draft),
                    error: None,
                    arrival: SystemTime::now(),
                    mapping,
                    ended: None,
                    ids: headers::Ids::default(),
                    sign: None,
                    held,
                    filter,
                    filter_end: None,
                    added: None,
                    remapped: false,
                    checks: self.checks.clone(),
                    verdict: Verdict::default(),
                    body_scan: BodyScan::default(),
                    check_rejected: false,
                });
                self.log_filter(token);
                if let Some(ask) = ask {
                    self.ask_router(cx, token, id, &ask);
                }
                // A quiet Begin came with the content: the queue id goes
                // back with `Queued`, and an answer now would only wake smtpd.
                (!quiet).then(|| Response::Started {
                    queue_id: id.to_string(),
                })
            }
            Request::Data { bytes } => {
                if bytes.len() > MAX_CHUNK {
                    return Some(failed(Refusal::new(
                        451,
                        StatusCode::SYSTEM_TEMP,
                        "Error: oversized data frame",
                    )));
                }
                let c = self.clients.get_mut(&token)?;
                let m = c.msg.as_mut()?;
                if m.held.is_some() {
                    hold_content(m, &bytes, self.size_limit);
                    return None;
                }
                // Written as they come: the body is not copied again to
                // follow the header block in one buffer.
                match m.headers.feed(&bytes) {
                    Fed::Holding => {}
                    Fed::Through => {
                        let bytes = scan_body(m, &bytes);
                        if let Some(s) = m.sign.as_mut() {
                            s.body(&bytes);
                        }
                        write(&self.spool, m, &bytes, self.size_limit)
                    }
                    Fed::Complete { headers, rest } => {
                        let ctx = HeaderCtx {
                            hostname: &self.hostname,
                            origin_domain: &self.origin_domain,
                            always_add: self.always_add,
                            id_headers: &self.id_headers,
                            hop_limit: self.hop_limit,
                            drop: &self.drop_headers,
                            header_limit: self.header_limit,
                        };
                        let head = header_block(m, &headers, &ctx);
                        scan_primary(m, &headers);
                        let rest = scan_body(m, &rest);
                        start_signing(self.dkim.as_ref(), &self.spool, m, &head);
                        if let Some(s) = m.sign.as_mut() {
                            // The body starts after the empty line.
                            s.body(rest.strip_prefix(b"\r\n").unwrap_or(&rest));
                        }
                        write(&self.spool, m, &head, self.size_limit);
                        write(&self.spool, m, &rest, self.size_limit);
                    }
                }
                None
            }
            Request::End => {
                let c = self.clients.get_mut(&token)?;
                let Some(mut m) = c.msg.take() else {
                    return Some(failed(Refusal::new(
                        503,
                        StatusCode::INVALID_COMMAND,
                        "Error: no message in progress",
                    )));
                };
                scan_body_end(&self.spool, &mut m, self.size_limit);
                if m.error.is_none() && m.filter.is_some() {
                    let held = m.held.get_or_insert_with(milter::Held::default);
                    if held.headers.is_none() {
                        held.headers = m.headers.finish();
                    }
                    // Hops are counted as the message came, before the
                    // end of message of the milters cleanup runs
                    // (non_smtpd_milters), as Postfix's cleanup: a loop is
                    // refused without asking them.
                    let headers = held.headers.clone().unwrap_or_default();
                    check_hops(&mut m, &headers, self.hop_limit);
                }
                if m.error.is_none() {
                    if let Some(f) = m.filter.as_mut() {
                        let held = m.held.get_or_insert_with(milter::Held::default);
                        let mut wire = held.headers.clone().unwrap_or_default();
                        wire.extend_from_slice(&held.body);
                        f.end(cx.registry, cx.now, wire);
                        m.filter_end = Some(request);
                        c.msg = Some(m);
                        self.log_filter(token);
                        return self.filter_done(cx, token);
                    }
                }
                self.drop_filter(cx, &mut m);
                self.end_message(cx, token, request, m)
            }
            Request::Edits { edits } => {
                let c = self.clients.get_mut(&token)?;
                if let Some(h) = c.msg.as_mut().and_then(|m| m.held.as_mut()) {
                    h.edits.extend(edits);
                }
                None
            }
            Request::Abort => {
                let mut m = self.clients.get_mut(&token)?.msg.take()?;
                self.drop_filter(cx, &mut m);
                m.discard(&self.spool);
                None
            }
        }
    }

    /// The content is complete (and filtered): written with what cleanup
    /// adds, then committed once its mapping is known.
    fn end_message(
        &mut self,
        cx: &mut Cx<'_>,
        token: ClientId,
        request: u64,
        mut m: Msg,
    ) -> Option<Response> {
        let hostname = self.hostname.clone();
        let origin_domain = self.origin_domain.clone();
        let always_add = self.always_add;
        let size_limit = self.size_limit;
        let id_headers = self.id_headers.clone();
        let hop_limit = self.hop_limit;
        let drop = self.drop_headers.clone();
        let header_limit = self.header_limit;
        {
            let ctx = HeaderCtx {
                hostname: &hostname,
                origin_domain: &origin_domain,
                always_add,
                id_headers: &id_headers,
                hop_limit,
                drop: &drop,
                header_limit,
            };
            if m.held.is_some() {
                write_held(
                    &self.spool,
                    self.dkim.as_ref(),
                    self.size_limit,
                    &mut m,
                    &ctx,
                );
            } else if let Some(headers) = m.headers.finish() {
                // Content that ended inside the headers: a header
                // section with no body, which RFC 5322 allows.
                let out = header_block(&mut m, &headers, &ctx);
                start_signing(self.dkim.as_ref(), &self.spool, &mut m, &out);
                write(&self.spool, &mut m, &out, size_limit);
            }
        }
        if matches!(m.mapping, Mapping::Waiting) && m.error.is_none() {
            m.ended = Some((request, cx.now + self.router_timeout));
            self.clients.get_mut(&token)?.msg = Some(m);
            return None;
        }
        self.finish(cx, token, request, m)
    }

    /// Commits a message whose content is complete and whose mapping is
    /// known, and hands it to qmgr; or refuses it.
    fn finish(
        &mut self,
        cx: &mut Cx<'_>,
        token: ClientId,
        request: u64,
        mut m: Msg,
    ) -> Option<Response> {
        if m.error.is_none() {
            let second = m.added.take();
            match std::mem::replace(&mut m.mapping, Mapping::Off) {
                Mapping::Done(Ok((sender, rcpts))) => match second {
                    None => {
                        if let Some(s) = sender {
                            m.envelope.sender = s;
                        }
                        m.envelope.recipients = rcpts;
                    }
                    // The milters' sender and added recipients, mapped.
                    Some((given, _)) => {
                        m.envelope.sender = sender.unwrap_or(given);
                        for r in rcpts {
                            let known = m
                                .envelope
                                .recipients
                                .iter()
                                .any(|x| x.address.eq_ignore_ascii_case(&r.address));
                            if !known {
                                m.envelope.recipients.push(r);
                            }
                        }
                    }
                },
                Mapping::Done(Err(e)) => m.error = Some(e),
                Mapping::Waiting => m.error = Some(rewrite::unavailable()),
                Mapping::Off => {}
            }
            // Recipients a milter adds and the sender it sets go through
            // canonical and virtual alias mapping as any other (Postfix's
            // cleanup_add_rcpt, cleanup_chg_from): a second question to
            // the router.
            let changes = m
                .held
                .as_ref()
                .filter(|_| m.error.is_none() && !m.remapped && self.address_mappings)
                .and_then(|h| milter::mapped_changes(&m.envelope, &h.edits));
            if let Some((sender, added)) = changes {
                let ask = router::Request::Rewrite {
                    sender: sender.clone(),
                    addresses: added.iter().map(|r| r.address.clone()).collect(),
                    smtputf8: m.envelope.smtputf8,
                };
                m.remapped = true;
                m.added = Some((sender, added));
                m.mapping = Mapping::Waiting;
                m.ended = Some((request, cx.now + self.router_timeout));
                let id = m.id;
                self.clients.get_mut(&token)?.msg = Some(m);
                self.ask_router(cx, token, id, &ask);
                return None;
            }
            if let Some(h) = &m.held {
                milter::edit_envelope(&mut m.envelope, &h.edits, m.remapped);
                if let Some(reason) = h.hold_reason() {
                    msg_info!("{}: milter-hold: {reason}", m.id);
                    m.hold = true;
                }
                if m.envelope.recipients.is_empty() {
                    m.error = Some(Refusal::new(
                        554,
                        StatusCode::NOT_AUTHORIZED,
                        "Error: milters deleted every recipient",
                    ));
                }
            }
        }
        if m.error.is_none() {
            if let Some(s) = m.sign.take() {
                finish_signing(&mut m, s);
            }
        }
        if let Some(reply) = m.error.take() {
            m.discard(&self.spool);
            if !m.check_rejected {
                msg_info!("{}: reject: {reply}", m.id);
            }
            return Some(failed(reply));
        }
        if m.verdict.discard {
            // header_checks' or body_checks' DISCARD: logged when it
            // matched; the client hears 250 as for any message.
            m.discard(&self.spool);
            return Some(Response::Queued {
                queue_id: m.id.to_string(),
            });
        }
        m.hold |= m.verdict.hold;
        if !self.qmgr.is_greeted() {
            let registry = cx.registry;
            if let Err(PeerError::Connect(e) | PeerError::Send(e)) =
                self.qmgr.connect(registry, || cx.token())
            {
                msg_warn!("connect to qmgr: {}: {e}", self.qmgr.path().display());
                m.discard(&self.spool);
                return Some(failed(qmgr_unavailable()));
            }
            // Committed only once a qmgr answers: see the module header.
            self.parked.push(Parked {
                client: token,
                request,
                msg: m,
                deadline: cx.now + self.qmgr_timeout,
            });
            return None;
        }
        self.commit(cx, token, request, m)
    }

    /// Commits a message's data and announces it to qmgr (whose link is
    /// greeted).
    fn commit(
        &mut self,
        cx: &mut Cx<'_>,
        token: ClientId,
        request: u64,
        mut m: Msg,
    ) -> Option<Response> {
        let draft = m.draft.take()?;
        headers::settle_ids(&mut m.envelope, &m.ids, self.tenant_from_sasl);
        let ids: Vec<String> = [("tenant", &m.envelope.tenant), ("job", &m.envelope.job)]
            .iter()
            .filter_map(|(k, v)| Some(format!("{k}={}", v.as_deref()?)))
            .collect();
        if !ids.is_empty() {
            msg_info!("{}: {}", m.id, ids.join(", "));
        }
        m.envelope.size = draft.len();
        m.envelope.arrival = Timestamp::from_micros(
            m.arrival
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_micros() as u64)
                .unwrap_or(0),
        );
        let data = match draft.commit(&self.spool, &m.envelope) {
            Ok(d) => d,
            Err(e) => {
                msg_warn!("{}: {e}", m.id);
                return Some(failed(write_error(e.is_disk_full())));
            }
        };
        let head = MessageHead {
            id: m.id,
            envelope: m.envelope,
            data,
        };
        self.send_to_qmgr(cx, token, request, head, m.hold)
    }

    fn answer(&mut self, client: ClientId, request: u64, resp: Response) {
        self.outbox.push((client, request, resp));
    }

    /// Sends what `answer` held back.
    fn send_answers(&mut self, out: &mut Replies<'_, Cleanup>) {
        for (client, request, resp) in self.outbox.drain(..) {
            out.send(client, request, &resp);
        }
    }

    /// Closes a message's milters, if it has any.
    fn drop_filter(&mut self, cx: &mut Cx<'_>, m: &mut Msg) {
        if let Some(mut f) = m.filter.take() {
            for t in f.tokens() {
                self.filter_owner.remove(&t);
            }
            f.close(cx.registry);
            for w in f.take_warnings() {
                msg_warn!("{}: {w}", m.id);
            }
        }
    }

    /// Logs what a client's filter has to say.
    fn log_filter(&mut self, token: ClientId) {
        let Some(m) = self.clients.get_mut(&token).and_then(|c| c.msg.as_mut()) else {
            return;
        };
        if let Some(f) = m.filter.as_mut() {
            for w in f.take_warnings() {
                msg_warn!("{}: {w}", m.id);
            }
        }
    }

    /// A message whose client waits at End for the milters: their
    /// decision carried out, once they have made it.
    fn filter_done(&mut self, cx: &mut Cx<'_>, token: ClientId) -> Option<Response> {
        let c = self.clients.get_mut(&token)?;
        let m = c.msg.as_mut()?;
        let request = m.filter_end?;
        let outcome = m.filter.as_mut()?.outcome()?;
        let mut m = c.msg.take()?;
        self.drop_filter(cx, &mut m);
        let from = format!("from=<{}>", m.envelope.sender);
        match outcome {
            Outcome::Accept(edits) => {
                if let Some(h) = m.held.as_mut() {
                    h.edits
                        .extend(edits.into_iter().map(ipc::cleanup::Edit::from));
                }
                self.end_message(cx, token, request, m)
            }
            Outcome::Refuse(reply) => {
                msg_info!(
                    "{}: milter-reject: END-OF-MESSAGE from localhost[127.0.0.1]: {} {}; {from}",
                    m.id,
                    reply.status,
                    reply.text
                );
                m.discard(&self.spool);
                Some(failed(reply))
            }
            Outcome::Discard => {
                msg_info!(
                    "{}: milter-discard: END-OF-MESSAGE from localhost[127.0.0.1]: milter triggers DISCARD action; {from}",
                    m.id
                );
                m.discard(&self.spool);
                Some(Response::Queued {
                    queue_id: m.id.to_string(),
                })
            }
        }
    }

    /// A milter socket of a client's filter is ready.
    fn filter_ready(&mut self, cx: &mut Cx<'_>, token: Token) {
        let Some(&client) = self.filter_owner.get(&token) else {
            return;
        };
        if let Some(f) = self
            .clients
            .get_mut(&client)
            .and_then(|c| c.msg.as_mut())
            .and_then(|m| m.filter.as_mut())
        {
            f.ready(cx.registry, cx.now, token);
        }
        self.filter_moved(cx, client);
    }

    /// After a filter moved: its log lines, and the answer to End if due.
    fn filter_moved(&mut self, cx: &mut Cx<'_>, client: ClientId) {
        self.log_filter(client);
        let request = self
            .clients
            .get(&client)
            .and_then(|c| c.msg.as_ref())
            .and_then(|m| m.filter_end);
        if let Some(resp) = self.filter_done(cx, client) {
            if let Some(request) = request {
                self.answer(client, request, resp);
            }
        }
    }

    fn drop_client(&mut self, token: ClientId) {
        let (gone, keep): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.client == token);
        self.parked = keep;
        for mut p in gone {
            p.msg.discard(&self.spool);
        }
        if let Some(mut c) = self.clients.remove(&token) {
            if let Some(mut m) = c.msg.take() {
                m.discard(&self.spool);
            }
        }
    }
}

/// Whether recipients go through canonical and virtual alias mapping:
/// only when there are maps (as Postfix's cleanup, which skips what is not
/// configured: mail then costs no router round trip), and not when
/// `receive_override_options` has `no_address_mappings` (the cleanup in
/// front of an after-queue content filter).
/// `hopcount_limit`, as a count; 0 or a negative value: no limit.
fn hop_limit(config: &config::Config) -> usize {
    usize::try_from(config.int("hopcount_limit")).unwrap_or(0)
}

fn address_mappings(config: &config::Config) -> bool {
    let maps = [
        "sender_canonical_maps",
        "recipient_canonical_maps",
        "canonical_maps",
        "virtual_alias_maps",
    ]
    .iter()
    .any(|p| !config.maps(p).is_empty());
    maps && !config
        .list("receive_override_options")
        .iter()
        .any(|o| o.eq_ignore_ascii_case("no_address_mappings"))
}

/// `non_smtpd_milters` and the `milter_*` settings; None when it is empty.
fn non_smtpd_milters(
    config: &config::Config,
    root: &std::path::Path,
) -> Result<Option<std::sync::Arc<::milter::net::Settings>>, String> {
    Ok(::milter::net::Settings::from_config(
        config,
        "non_smtpd_milters",
        root,
        config.size("message_size_limit"),
    )?
    .map(std::sync::Arc::new))
}

/// Whether this cleanup serves a public socket (master.cf's private = n),
/// where sendmail(1) submits; the private one takes mail Sluice makes
/// itself (bounces, local(8) forwarding) and smtpd's.
fn is_public(ctx: &Context) -> bool {
    let services = config::load_master_cf(&ctx.config_dir.join("master.cf")).unwrap_or_default();
    services
        .iter()
        .find(|s| s.name == ctx.args.service && s.kind == config::ServiceKind::Unix)
        .is_some_and(|s| !s.private)
}

fn remove_data(spool: &Spool, head: &MessageHead) {
    let _ = spool.remove_data(head.id, head.data.storage());
}

fn failed(reply: Refusal) -> Response {
    Response::Failed { reply }
}

/// A write to the spool failed: 452 4.3.1 when the disk is full, else
/// 451 4.3.0 (Postfix's words for both).
fn write_error(disk_full: bool) -> Refusal {
    if disk_full {
        Refusal::new(452, StatusCode::SYSTEM_FULL, "Insufficient system storage")
    } else {
        Refusal::new(
            451,
            StatusCode::SYSTEM_TEMP,
            "Error: queue file write error",
        )
    }
}

/// 451 4.3.0: qmgr could not be told of the message.
fn qmgr_unavailable() -> Refusal {
    Refusal::new(
        451,
        StatusCode::SYSTEM_TEMP,
        "Error: queue manager unavailable",
    )
}

fn user_name(uid: u32) -> String {
    sys::privilege::lookup_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| format!("uid{uid}"))
}

impl Handler<Cleanup> for CleanupServer {
    fn reload(&mut self, _cx: &mut Cx<'_>, config: &config::Config) -> bool {
        // Keys may be readable by root alone: a fresh process reads them.
        if self.dkim.is_some() || Dkim::configured(config) {
            return false;
        }
        match Checks::from_config(config) {
            Ok(c) => self.checks = c.map(Arc::new),
            // Perhaps a file only root may read: a fresh process opens it
            // before dropping privileges, or stops on the error; either
            // way no mail passes unchecked under the old tables.
            Err(e) => {
                msg_warn!("{e}; retiring this process");
                return false;
            }
        }
        // Messages being received keep what they were accepted under; the
        // next ones get the new values.
        self.hostname = config.str("myhostname");
        self.origin_domain = config.str("myorigin");
        self.always_add = config.bool("always_add_missing_headers");
        self.size_limit = config.size("message_size_limit");
        self.hop_limit = hop_limit(config);
        self.header_limit = checks::header_limit(config);
        self.id_headers = headers::IdHeaders::from_config(config);
        self.drop_headers = config.list("message_drop_headers");
        self.tenant_from_sasl = config.bool("tenant_from_sasl");
        self.address_mappings = address_mappings(config);
        match non_smtpd_milters(config, &self.queue_root) {
            Ok(m) => self.non_smtpd = m,
            Err(e) => {
                msg_warn!("{e}; keeping the milters in use");
            }
        }
        self.router_timeout = config.time("cleanup_router_timeout");
        self.qmgr_timeout = config.time("cleanup_qmgr_timeout");
        true
    }

    fn request(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Replies<'_, Cleanup>,
        from: ClientId,
        id: u64,
        req: Request,
    ) {
        if let std::collections::btree_map::Entry::Vacant(e) = self.clients.entry(from) {
            let Some(peer) = out.peer(from).copied() else {
                return;
            };
            e.insert(Client { peer, msg: None });
        }
        if let Some(resp) = self.handle(cx, from, id, req) {
            self.answer(from, id, resp);
        }
        self.send_answers(out);
    }

    fn gone(&mut self, cx: &mut Cx<'_>, client: ClientId) {
        if let Some(mut m) = self.clients.get_mut(&client).and_then(|c| c.msg.take()) {
            self.drop_filter(cx, &mut m);
            m.discard(&self.spool);
        }
        self.drop_client(client);
    }

    fn ready(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Replies<'_, Cleanup>,
        token: Token,
        readable: bool,
        _writable: bool,
    ) {
        if self.qmgr.owns(token) {
            self.qmgr_ready(cx, readable);
        } else if self.router.owns(token) {
            self.router_ready(cx, readable);
        } else if self.filter_owner.contains_key(&token) {
            self.filter_ready(cx, token);
        }
        self.send_answers(out);
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mapping = self
            .clients
            .values()
            .filter_map(|c| c.msg.as_ref().and_then(|m| m.ended).map(|(_, d)| d));
        let parked = self.parked.iter().map(|p| p.deadline);
        let filters = self.clients.values().filter_map(|c| {
            c.msg
                .as_ref()
                .and_then(|m| m.filter.as_ref())
                .and_then(Filter::deadline)
        });
        let pending = self.qmgr.waiting().map(|p| p.deadline);
        mapping.chain(parked).chain(pending).chain(filters).min()
    }

    fn timeout(&mut self, cx: &mut Cx<'_>, out: &mut Replies<'_, Cleanup>) {
        let now = cx.now;
        // Milters late with their answers.
        let late: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| {
                c.msg
                    .as_ref()
                    .and_then(|m| m.filter.as_ref())
                    .and_then(Filter::deadline)
                    .is_some_and(|d| d <= now)
            })
            .map(|(t, _)| *t)
            .collect();
        for client in late {
            if let Some(f) = self
                .clients
                .get_mut(&client)
                .and_then(|c| c.msg.as_mut())
                .and_then(|m| m.filter.as_mut())
            {
                f.expired(cx.registry, now);
            }
            self.filter_moved(cx, client);
        }
        // Mappings the router did not give in time.
        let late: Vec<(ClientId, QueueId)> = self
            .clients
            .iter()
            .filter_map(|(t, c)| {
                let m = c.msg.as_ref()?;
                m.ended.filter(|(_, d)| *d <= now).map(|_| (*t, m.id))
            })
            .collect();
        for (client, id) in late {
            msg_warn!(
                "{id}: router did not answer the address mapping within cleanup_router_timeout ({}s)",
                self.router_timeout.as_secs()
            );
            self.settle(cx, client, id, Err(rewrite::unavailable()));
        }
        // Messages no qmgr has said hello for: never committed.
        let (late, keep): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.deadline <= now);
        self.parked = keep;
        for p in late {
            msg_warn!(
                "{}: no queue manager answered within cleanup_qmgr_timeout ({}s)",
                p.msg.id,
                self.qmgr_timeout.as_secs()
            );
            self.unpark_failed(p);
        }
        // Announced messages qmgr did not commit in time.
        let stalled = self.qmgr.waiting().any(|p| p.deadline <= now);
        if stalled {
            msg_warn!(
                "qmgr did not commit within cleanup_qmgr_timeout ({}s): dropping the link; \
                 the messages it owes may still be queued",
                self.qmgr_timeout.as_secs()
            );
            self.break_qmgr(cx);
        }
        self.send_answers(out);
    }
}
