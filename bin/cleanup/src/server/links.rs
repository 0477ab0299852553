//! cleanup's two links: the router, which maps a message's addresses
//! (its answers settle the messages waiting for them), and qmgr, which
//! journals a committed message (its `Committed` is the client's 250).
//! Either link breaking answers everything it owed: a mapping becomes a
//! temporary failure, a commit a 451, and parked messages are dropped.

use std::collections::BTreeMap;

use daemon::ipcserver::ClientId;
use daemon::{msg_info, msg_warn, Cx};
use ipc::cleanup::Response;
use ipc::qmgr::{self, Qmgr};
use ipc::router::{self, Router};
use ipc::Link;
use mail::{QueueId, Refusal};
use queue::{DataRef, MessageHead};

use super::{
    failed, qmgr_unavailable, remove_data, write_error, CleanupServer, Mapping, Parked, Pending,
    QmgrLink, RouterLink,
};
use crate::rewrite;

impl CleanupServer {
    /// Sends a message's recipients to the router; a router that cannot
    /// be reached settles the mapping as a temporary failure.
    pub(super) fn ask_router(
        &mut self,
        cx: &mut Cx<'_>,
        client: ClientId,
        id: QueueId,
        ask: &router::Request,
    ) {
        if self.router.is_none() {
            let t = cx.token();
            match Link::<Router>::connect(&self.router_path, cx.registry, t) {
                Ok(link) => {
                    self.router = Some(RouterLink {
                        link,
                        waiting: BTreeMap::new(),
                    })
                }
                Err(e) => {
                    msg_warn!("connect to router {}: {e}", self.router_path.display());
                    self.settle(cx, client, id, Err(rewrite::unavailable()));
                    return;
                }
            }
        }
        let r = self.router.as_mut().expect("connected above");
        match r.link.send(ask) {
            Ok(req) => {
                r.waiting.insert(req, (client, id));
            }
            Err(e) => {
                msg_warn!("router link: {e}");
                self.settle(cx, client, id, Err(rewrite::unavailable()));
                self.break_router(cx);
            }
        }
    }

    /// Records a message's mapping; finishes the message if its client is
    /// waiting at End.
    pub(super) fn settle(
        &mut self,
        cx: &mut Cx<'_>,
        client: ClientId,
        id: QueueId,
        result: Result<(Option<String>, Vec<mail::Recipient>), Refusal>,
    ) {
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        // The answer may be for a message the client has since abandoned.
        let Some(m) = c.msg.as_mut().filter(|m| m.id == id) else {
            return;
        };
        m.mapping = Mapping::Done(result);
        let Some((request, _)) = m.ended else { return };
        let m = c.msg.take().expect("checked above");
        if let Some(resp) = self.finish(cx, client, request, m) {
            self.answer(client, request, resp);
        }
    }

    pub(super) fn router_ready(&mut self, cx: &mut Cx<'_>) {
        let Some(r) = self.router.as_mut() else {
            return;
        };
        let answers = match r.link.event(true, cx.closed) {
            Ok(a) => a,
            Err(e) => {
                msg_warn!("router link: {e}");
                self.break_router(cx);
                return;
            }
        };
        for (req, resp) in answers {
            let Some((client, id)) = self.router.as_mut().and_then(|r| r.waiting.remove(&req))
            else {
                continue;
            };
            let Some(m) = self
                .clients
                .get(&client)
                .and_then(|c| c.msg.as_ref())
                .filter(|m| m.id == id)
            else {
                continue;
            };
            // The second question is about the milters' changes alone.
            let (given, asked) = match &m.added {
                Some((s, added)) => (s, added),
                None => (&m.envelope.sender, &m.envelope.recipients),
            };
            let result = match resp {
                router::Response::Rewritten { sender, recipients } => {
                    rewrite::sender(given, sender)
                        .and_then(|s| Ok((s, rewrite::apply(asked, recipients)?)))
                }
                other => {
                    msg_warn!("{id}: router: unexpected answer {other:?}");
                    Err(rewrite::unavailable())
                }
            };
            self.settle(cx, client, id, result);
        }
        if self.router.as_ref().is_some_and(|r| r.link.is_closed()) {
            msg_warn!("router link: closed");
            self.break_router(cx);
        }
    }

    pub(super) fn break_router(&mut self, cx: &mut Cx<'_>) {
        let Some(mut r) = self.router.take() else {
            return;
        };
        r.link.deregister(cx.registry);
        for (_, (client, id)) in std::mem::take(&mut r.waiting) {
            self.settle(cx, client, id, Err(rewrite::unavailable()));
        }
    }

    pub(super) fn send_to_qmgr(
        &mut self,
        cx: &mut Cx<'_>,
        client: ClientId,
        request: u64,
        head: MessageHead,
        hold: bool,
    ) -> Option<Response> {
        let Some(link) = self.qmgr.as_mut() else {
            // Gone since the message was parked or committed: nothing was sent.
            remove_data(&self.spool, &head);
            return Some(failed(qmgr_unavailable()));
        };
        let qid = head.id;
        let mut head = head;
        let sent = match &mut head.data {
            // Inline data goes from the draft's buffer to the socket as it
            // is (`writev`), not copied into the frame.
            DataRef::Inline(b) => {
                let body = std::mem::take(b);
                let req = qmgr::Request::Arrived { head, hold };
                link.link
                    .send_later_spliced(&req, body, qmgr::ARRIVED_AFTER_DATA)
                    .map_err(|(e, _)| e)
                    .and_then(|id| link.link.flush().map(|()| id))
            }
            _ => link.link.send(&qmgr::Request::Arrived { head, hold }),
        };
        let id = match sent {
            Ok(id) => id,
            Err(e) => {
                msg_warn!("qmgr link: {e}");
                self.break_qmgr(cx);
                return Some(failed(qmgr_unavailable()));
            }
        };
        link.pending.insert(
            id,
            Pending {
                client,
                request,
                id: qid,
                deadline: cx.now + self.qmgr_timeout,
            },
        );
        None
    }

    pub(super) fn break_qmgr(&mut self, cx: &mut Cx<'_>) {
        let Some(mut link) = self.qmgr.take() else {
            return;
        };
        link.link.deregister(cx.registry);
        for (_, p) in std::mem::take(&mut link.pending) {
            msg_info!(
                "{}: reject: 451 4.3.0 Error: queue manager unavailable",
                p.id
            );
            // The data may be durable, but without its Arrived record the
            // message is not queued as far as the client knows. If qmgr
            // wrote the record before dying, recovery keeps the message and
            // the client's retry makes a duplicate: at-least-once, never lost.
            self.answer(p.client, p.request, failed(qmgr_unavailable()));
        }
        // Messages never committed: their drafts go, nothing was handed over.
        for p in std::mem::take(&mut self.parked) {
            self.unpark_failed(p);
        }
    }

    pub(super) fn unpark_failed(&mut self, mut p: Parked) {
        p.msg.discard(&self.spool);
        msg_info!(
            "{}: reject: 451 4.3.0 Error: queue manager unavailable",
            p.msg.id
        );
        self.answer(p.client, p.request, failed(qmgr_unavailable()));
    }

    /// qmgr answered the hello: the parked messages are committed and sent.
    pub(super) fn unpark(&mut self, cx: &mut Cx<'_>) {
        for p in std::mem::take(&mut self.parked) {
            if let Some(resp) = self.commit(cx, p.client, p.request, p.msg) {
                self.answer(p.client, p.request, resp);
            }
        }
    }

    pub(super) fn qmgr_ready(&mut self, cx: &mut Cx<'_>, readable: bool) {
        let was_greeted = self.qmgr.as_ref().is_some_and(|l| l.link.is_greeted());
        let result = match self.qmgr.as_mut() {
            Some(l) => l.link.event(readable, cx.closed),
            None => return,
        };
        match result {
            Ok(answers) => {
                if !was_greeted && self.qmgr.as_ref().is_some_and(|l| l.link.is_greeted()) {
                    self.unpark(cx);
                }
                for (id, resp) in answers {
                    let Some(p) = self.qmgr.as_mut().and_then(|l| l.pending.remove(&id)) else {
                        continue;
                    };
                    let r = match resp {
                        qmgr::Response::Committed => Response::Queued {
                            queue_id: p.id.to_string(),
                        },
                        qmgr::Response::Unsettled(_) => {
                            // An answer to transferd's question, never to cleanup's.
                            msg_warn!("{}: qmgr: an answer cleanup never asks for", p.id);
                            failed(write_error(false))
                        }
                        qmgr::Response::Failed { reason, disk_full } => {
                            msg_warn!("{}: qmgr: {reason}", p.id);
                            failed(write_error(disk_full))
                        }
                    };
                    self.answer(p.client, p.request, r);
                }
                if self.qmgr.as_ref().is_some_and(|l| l.link.is_closed()) {
                    msg_warn!("qmgr link: {}", ipc::IpcError::Closed);
                    self.break_qmgr(cx);
                }
            }
            Err(e) => {
                msg_warn!("qmgr link: {e}");
                self.break_qmgr(cx);
            }
        }
    }
}

pub(super) fn open_qmgr(cx: &mut Cx<'_>, path: &std::path::Path) -> Result<QmgrLink, String> {
    let token = cx.token();
    let link = Link::<Qmgr>::connect(path, cx.registry, token)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(QmgrLink {
        link,
        pending: BTreeMap::new(),
    })
}
