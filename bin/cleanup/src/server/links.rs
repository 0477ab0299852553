//! cleanup's two links: the router, which maps a message's addresses
//! (its answers settle the messages waiting for them), and qmgr, which
//! journals a committed message (its `Committed` is the client's 250).
//! Either link breaking answers everything it owed: a mapping becomes a
//! temporary failure, a commit a 451, and parked messages are dropped.

use daemon::ipcserver::ClientId;
use daemon::{msg_info, msg_warn, Cx};
use ipc::cleanup::Response;
use ipc::peer::{Lost, PeerError, Unsent};
use ipc::qmgr;
use ipc::router;
use mail::{QueueId, Refusal};
use queue::{DataRef, MessageHead};

use super::{
    failed, qmgr_unavailable, remove_data, write_error, CleanupServer, Mapping, Parked, Pending,
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
        let registry = cx.registry;
        let sent = self.router.send(
            registry,
            || cx.token(),
            std::slice::from_ref(ask),
            (client, id),
        );
        if let Err(Unsent { error, owed }) = sent {
            match error {
                PeerError::Connect(e) => {
                    msg_warn!("connect to router {}: {e}", self.router.path().display())
                }
                PeerError::Send(e) => msg_warn!("router link: {e}"),
            }
            self.settle(cx, client, id, Err(rewrite::unavailable()));
            self.router_lost(cx, owed);
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

    pub(super) fn router_ready(&mut self, cx: &mut Cx<'_>, readable: bool) {
        let heard = self.router.event(cx.registry, readable, cx.closed);
        for (tag, resp) in heard.answers {
            let Some((client, id)) = tag else {
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
        match heard.lost {
            None => return,
            Some(Lost::Closed) => msg_warn!("router link: closed"),
            Some(Lost::Failed(e)) => msg_warn!("router link: {e}"),
        }
        self.router_lost(cx, heard.owed);
    }

    /// Settles the mappings a lost router link owed as temporary failures.
    fn router_lost(&mut self, cx: &mut Cx<'_>, owed: Vec<(ClientId, QueueId)>) {
        for (client, id) in owed {
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
        if !self.qmgr.is_connected() {
            // Gone since the message was parked or committed: nothing was sent.
            remove_data(&self.spool, &head);
            return Some(failed(qmgr_unavailable()));
        }
        let pending = Pending {
            client,
            request,
            id: head.id,
            deadline: cx.now + self.qmgr_timeout,
        };
        let registry = cx.registry;
        let mut head = head;
        let sent = match &mut head.data {
            // Inline data goes from the draft's buffer to the socket as it
            // is (`writev`), not copied into the frame.
            DataRef::Inline(b) => {
                let body = std::mem::take(b);
                let req = qmgr::Request::Arrived { head, hold };
                self.qmgr.send_spliced(
                    registry,
                    || cx.token(),
                    &req,
                    body,
                    qmgr::ARRIVED_AFTER_DATA,
                    pending,
                )
            }
            _ => self.qmgr.send(
                registry,
                || cx.token(),
                &[qmgr::Request::Arrived { head, hold }],
                pending,
            ),
        };
        match sent {
            Ok(()) => None,
            Err(Unsent { error, owed }) => {
                match error {
                    PeerError::Connect(e) | PeerError::Send(e) => msg_warn!("qmgr link: {e}"),
                }
                self.qmgr_lost(owed);
                Some(failed(qmgr_unavailable()))
            }
        }
    }

    /// Drops the qmgr link and answers what it owed (see `qmgr_lost`).
    pub(super) fn break_qmgr(&mut self, cx: &mut Cx<'_>) {
        let owed = self.qmgr.close(cx.registry);
        self.qmgr_lost(owed);
    }

    /// A lost qmgr link's commits are 451s, and the parked messages go.
    fn qmgr_lost(&mut self, owed: Vec<Pending>) {
        for p in owed {
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
        let was_greeted = self.qmgr.is_greeted();
        let heard = self.qmgr.event(cx.registry, readable, cx.closed);
        if !was_greeted && self.qmgr.is_greeted() {
            self.unpark(cx);
        }
        for (tag, resp) in heard.answers {
            let Some(p) = tag else {
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
        match heard.lost {
            None => return,
            Some(Lost::Closed) => msg_warn!("qmgr link: {}", ipc::IpcError::Closed),
            Some(Lost::Failed(e)) => msg_warn!("qmgr link: {e}"),
        }
        self.qmgr_lost(heard.owed);
    }
}
