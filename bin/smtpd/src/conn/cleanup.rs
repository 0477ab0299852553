//! A session's side of its message's trip to cleanup: the start of the
//! message, its content and end on a link taken from the process's pool
//! (`pool.rs`), and cleanup's answers.
//!
//! Without milters (and without access DISCARD) DATA is answered 354 at
//! once: the start of the message (a quiet `Begin`) waits in the session
//! until content comes and goes out in one write with the content read in
//! that turn, and with the end of data for a message that came whole, so
//! cleanup wakes once for it and once for qmgr's commit. The link is taken
//! only then; a kept link whose cleanup has gone since fails that write,
//! and the same frames go out again on a new connection. The queue id
//! comes with `Queued`, and the `client=` line is logged then, before the
//! 250. Milters need the queue id from DATA on (macro `i`), and DISCARD
//! logs it: for them DATA waits for cleanup's `Started`, as it did before.
//!
//! A link that fails once content went out is closed and the end of data
//! answered 451 4.3.0: the client keeps the message and tries again.

use daemon::{msg_info, msg_warn, Cx};
use ipc::cleanup::{Cleanup, Origin, Request, Response, MAX_CHUNK};
use ipc::{IpcError, Link};
use mail::Envelope;
use smtp_proto::{Reply, StatusCode};

use super::{Conn, Held, Shared, Txn, Waiting};
use crate::pool::Pool;

/// A message's start and first content, not written to cleanup yet.
pub(super) struct Unsent {
    /// The quiet Begin.
    begin: Request,
    /// Content, in the order it came.
    chunks: Vec<Vec<u8>>,
    /// Part of the content went out on a link that failed: it cannot be
    /// sent again whole (see [`take_back`]).
    lost: bool,
}

impl Unsent {
    /// Queues the Begin and the content on `link` and writes them, with the
    /// End when `end`; gives the Begin's id and the End's. The content is
    /// lent to the link by reference (written from its own buffers, not
    /// copied into the frames) and taken back if the write fails, for
    /// another link.
    fn write(
        &mut self,
        link: &mut Link<Cleanup>,
        end: bool,
    ) -> Result<(u64, Option<u64>), IpcError> {
        if self.lost {
            return Err(IpcError::ContentLost);
        }
        let total: usize = self.chunks.iter().map(Vec::len).sum();
        let begin = link.send_later(&self.begin)?;
        let mut chunks = std::mem::take(&mut self.chunks).into_iter();
        let mut refused = None;
        for chunk in chunks.by_ref() {
            if let Err((e, chunk)) = queue_data(link, chunk) {
                refused = Some((e, chunk));
                break;
            }
        }
        let sent = match refused {
            Some((e, chunk)) => Err((e, Some(chunk))),
            None if end => link.send(&Request::End).map(Some).map_err(|e| (e, None)),
            None => link.flush().map(|()| None).map_err(|e| (e, None)),
        };
        match sent {
            Ok(end_id) => Ok((begin, end_id)),
            Err((e, chunk)) => match take_back(link, chunk.into_iter().chain(chunks), total) {
                // What the link holds never reached cleanup whole (see
                // `on_link`): all of it goes again, in order.
                Some(back) => {
                    self.chunks = back;
                    Err(e)
                }
                None => {
                    self.lost = true;
                    Err(IpcError::ContentLost)
                }
            },
        }
    }
}

/// The content lent to `link` that it gives back, then `rest`: the whole
/// of the `total` bytes lent, in order, or `None` when it is not exactly
/// that. A body the link wrote out whole before it failed is gone from
/// it, and one a message before left queued is not this message's; either
/// way the message cannot be sent again whole, and must be refused rather
/// than queued cut short or with another's text in front.
fn take_back(
    link: &mut Link<Cleanup>,
    rest: impl IntoIterator<Item = Vec<u8>>,
    total: usize,
) -> Option<Vec<Vec<u8>>> {
    let mut back = link.take_spliced();
    back.extend(rest);
    (back.iter().map(Vec::len).sum::<usize>() == total).then_some(back)
}

/// Queues content for cleanup by reference: the frame's head is encoded,
/// the bytes are written from `chunk` itself. Content over [`MAX_CHUNK`]
/// (bare LFs made CRLF) goes in pieces, copied. The chunk is given back
/// when it cannot be queued.
fn queue_data(link: &mut Link<Cleanup>, chunk: Vec<u8>) -> Result<(), (IpcError, Vec<u8>)> {
    let head = Request::Data { bytes: Vec::new() };
    if chunk.len() <= MAX_CHUNK {
        return link.send_later_spliced(&head, chunk, 0).map(drop);
    }
    for (i, piece) in chunk.chunks(MAX_CHUNK).enumerate() {
        if let Err((e, _)) = link.send_later_spliced(&head, piece.to_vec(), 0) {
            // The pieces queued before stay with the link; the rest comes back.
            return Err((e, chunk[i * MAX_CHUNK..].to_vec()));
        }
    }
    Ok(())
}

impl Conn {
    /// DATA or the first BDAT: a quiet start of message (354 now), or one
    /// sent at once whose `Started` answers the command.
    pub(super) fn begin_message(&mut self, cx: &mut Cx<'_>, shared: &Shared, pool: &mut Pool) {
        let quiet = self.milters.is_none() && !self.txn.discard;
        let begin = self.begin_request(shared, quiet);
        if quiet {
            self.unsent = Some(Unsent {
                begin,
                chunks: Vec::new(),
                lost: false,
            });
            let _ = self
                .session
                .decide(Reply::new(354, None, "End data with <CR><LF>.<CR><LF>"));
            return;
        }
        let deadline = cx.now + self.cleanup_timeout;
        let sent = self.on_link(cx, pool, |held| {
            let id = held.link.send(&begin)?;
            held.waiting = Some((id, Waiting::Started, deadline));
            Ok(())
        });
        if sent.is_none() {
            self.queue_write_error();
        }
    }

    /// The Begin of the transaction's message.
    fn begin_request(&self, shared: &Shared, quiet: bool) -> Request {
        let tls = self
            .stream
            .tls_info()
            .map(|i| format!("{} with cipher {}", i.version, i.cipher));
        // Postfix's words for the Received: header, A for authenticated.
        let protocol = match (
            self.session.is_esmtp(),
            tls.is_some(),
            self.sasl_login.is_some(),
        ) {
            (true, true, true) => "ESMTPSA",
            (true, false, true) => "ESMTPA",
            (true, true, false) => "ESMTPS",
            (true, false, false) => "ESMTP",
            (false, _, _) => "SMTP",
        };
        let envelope = Envelope {
            sender: self.txn.sender.clone(),
            recipients: self.txn.recipients.clone(),
            ret: self.txn.ret,
            envid: self.txn.envid.clone(),
            client_addr: Some(self.peer.ip().to_string()),
            client_name: Some("unknown".into()),
            helo: self.session.helo_name().map(str::to_string),
            tls,
            auth: self.sasl_login.as_ref().map(|(_, u)| u.clone()),
            body_type: self.txn.body,
            smtputf8: self.txn.smtputf8,
            tenant: self.txn.tenant.clone(),
            job: self.txn.job.clone(),
            ..Envelope::default()
        };
        Request::Begin {
            envelope: Box::new(envelope),
            origin: Origin::Smtp {
                protocol: protocol.into(),
                mynetworks: shared.settings.policy.in_mynetworks(self.peer.ip()),
                authenticated_sender: self
                    .sasl_login
                    .as_ref()
                    .filter(|_| self.sasl_header)
                    .map(|(_, u)| u.clone()),
                milters: self.milters.is_some(),
            },
            hold: self.txn.hold || self.milter_hold(),
            quiet,
        }
    }

    /// Runs `write` on the message's link, taken from the pool when it has
    /// none. A kept link whose cleanup has gone while it idled in the pool
    /// (its close not read yet) fails at once, before anything of this
    /// message reached it: all of it goes once more, on a new connection.
    /// None, logged, when cleanup cannot be reached or the write fails.
    fn on_link<T>(
        &mut self,
        cx: &mut Cx<'_>,
        pool: &mut Pool,
        mut write: impl FnMut(&mut Held) -> Result<T, IpcError>,
    ) -> Option<T> {
        let mut fresh = false;
        loop {
            if self.link.is_none() && !self.take_link(cx, pool, fresh) {
                return None;
            }
            let held = self.link.as_mut().expect("taken above");
            match write(held) {
                Ok(t) => return Some(t),
                Err(e) if held.kept && !fresh && !matches!(e, IpcError::ContentLost) => {
                    self.release_link_failed(cx, pool);
                    fresh = true;
                }
                Err(e) => {
                    msg_warn!("cleanup link: {e}");
                    self.release_link_failed(cx, pool);
                    return None;
                }
            }
        }
    }

    /// Takes a link from the pool (a new connection when `fresh`); false,
    /// logged, when cleanup cannot be reached.
    fn take_link(&mut self, cx: &mut Cx<'_>, pool: &mut Pool, fresh: bool) -> bool {
        match pool.take(cx, self.token, fresh) {
            Ok((link, kept)) => {
                self.link = Some(Held {
                    link,
                    kept,
                    waiting: None,
                    quiet: None,
                });
                true
            }
            Err(e) => {
                msg_warn!("connect to cleanup service: {e}");
                false
            }
        }
    }

    /// Writes the message's start and the content that waits with it (and
    /// the End when `end`). Nothing to write, or cleanup out of reach:
    /// the end of data then finds no link and is answered 451.
    pub(super) fn push_unsent(&mut self, cx: &mut Cx<'_>, pool: &mut Pool, end: bool) {
        let Some(mut unsent) = self.unsent.take() else {
            return;
        };
        let deadline = cx.now + self.cleanup_timeout;
        let sent = self.on_link(cx, pool, |held| {
            let (begin, end_id) = unsent.write(&mut held.link, end)?;
            held.quiet = Some(begin);
            if let Some(id) = end_id {
                held.waiting = Some((id, Waiting::Queued, deadline));
            }
            Ok(())
        });
        if sent.is_some() {
            return;
        }
        if end {
            self.queue_write_error();
            self.txn = Txn::default();
        }
    }

    /// The turn is over: content read in it goes out now, with the
    /// message's start if that has not gone yet.
    pub(super) fn flush_link(&mut self, cx: &mut Cx<'_>, pool: &mut Pool) {
        if self.unsent.as_ref().is_some_and(|u| !u.chunks.is_empty()) {
            self.push_unsent(cx, pool, false);
        }
        if let Some(held) = self.link.as_mut().filter(|h| h.link.pending_output() > 0) {
            if let Err(e) = held.link.flush() {
                msg_warn!("cleanup link: {e}");
                self.break_link(cx, pool);
            }
        }
    }

    /// 451 4.3.0 for the message in progress.
    fn queue_write_error(&mut self) {
        let _ = self.session.decide(Reply::enhanced(
            451,
            StatusCode::SYSTEM_TEMP,
            "Error: queue file write error",
        ));
    }

    /// Whether a message is on its way to cleanup (started, not answered).
    pub(super) fn in_message(&self) -> bool {
        self.txn.queue_id.is_some() || self.unsent.is_some() || self.link.is_some()
    }

    /// Content for cleanup. A link that fails here is closed; the end of
    /// data then finds no link and is answered 451.
    pub(super) fn send_data(&mut self, cx: &mut Cx<'_>, pool: &mut Pool, bytes: Vec<u8>) {
        if let Some(u) = self.unsent.as_mut() {
            u.chunks.push(bytes);
            return;
        }
        let Some(held) = self.link.as_mut() else {
            return;
        };
        // Queued only: the end of data (or the end of this turn) writes
        // it, so a small message's content and End go in one write.
        let large = bytes.len() > MAX_CHUNK;
        let mut sent = queue_data(&mut held.link, bytes).map_err(|(e, _)| e);
        if large && sent.is_ok() {
            // Pieces of a large chunk go now, as before: bounded output.
            sent = held.link.flush();
        }
        if let Err(e) = sent {
            msg_warn!("cleanup link: {e}");
            self.break_link(cx, pool);
        }
    }

    /// The end of the content: cleanup answers once the message is durable.
    pub(super) fn send_end(&mut self, cx: &mut Cx<'_>, pool: &mut Pool) {
        if self.unsent.is_some() {
            return self.push_unsent(cx, pool, true);
        }
        let Some(held) = self.link.as_mut() else {
            return;
        };
        let deadline = cx.now + self.cleanup_timeout;
        match held.link.send(&Request::End) {
            Ok(id) => held.waiting = Some((id, Waiting::Queued, deadline)),
            Err(e) => {
                msg_warn!("cleanup link: {e}");
                // Owed an answer that will not come: answered 451 now.
                held.waiting = Some((0, Waiting::Queued, deadline));
                self.break_link(cx, pool);
            }
        }
    }

    /// The end of data, without milters: to cleanup, or answered here.
    pub(super) fn message_end(&mut self, cx: &mut Cx<'_>, pool: &mut Pool) {
        if let Some(reply) = self.txn.refused.take() {
            // cleanup refused the quiet start of this message.
            let _ = self.session.decide(reply);
            self.txn = Txn::default();
            return;
        }
        if self.link.is_none() && self.unsent.is_none() {
            self.queue_write_error();
            return;
        }
        if self.txn.discard {
            // access DISCARD: claim success, keep nothing.
            let qid = self.txn.queue_id.clone().unwrap_or_default();
            msg_info!(
                "{qid}: discard: END-OF-MESSAGE from {}: {}",
                self.client_label(),
                "discarded by access table"
            );
            self.abort_link_txn(cx, pool);
            let _ = self.session.decide(Reply::enhanced(
                250,
                StatusCode::OK,
                format!("Ok: queued as {qid}"),
            ));
            return;
        }
        self.end_of_message(cx, pool);
    }

    /// Postfix's `QUEUEID: client=…` line.
    fn log_client(&self, queue_id: &str) {
        let sasl = match &self.sasl_login {
            Some((method, user)) => format!(", sasl_method={method}, sasl_username={user}"),
            None => String::new(),
        };
        msg_info!(
            "{queue_id}: client={}{sasl}",
            format_args!("unknown[{}]", self.peer.ip())
        );
    }

    /// An event on the cleanup link this session holds.
    pub fn link_ready(&mut self, cx: &mut Cx<'_>, pool: &mut Pool, readable: bool) {
        let Some(held) = self.link.as_mut() else {
            return;
        };
        let answers = match held.link.event(readable, cx.closed) {
            Ok(a) => a,
            Err(e) => {
                msg_warn!("cleanup link: {e}");
                self.break_link(cx, pool);
                return;
            }
        };
        let mut done = false;
        for (id, resp) in answers {
            let Some(held) = self.link.as_mut() else {
                break;
            };
            if held.quiet == Some(id) {
                // Only a refusal answers a quiet Begin.
                if let Response::Failed { reply } = resp {
                    // As a refusal at the end of data is logged (smtpd(8)).
                    msg_info!(
                        "NOQUEUE: reject: END-OF-MESSAGE from unknown[{}]: {reply}",
                        self.peer.ip()
                    );
                    self.quiet_refused(cx, pool, reply.into());
                    return;
                }
                continue;
            }
            // Answers to anything else (nothing else is owed) are dropped.
            let Some((wid, what, _)) = held.waiting.filter(|w| w.0 == id) else {
                continue;
            };
            held.waiting = None;
            let quiet = held.quiet.is_some();
            match (what, resp) {
                (Waiting::Started, Response::Started { queue_id }) => {
                    self.log_client(&queue_id);
                    self.txn.queue_id = Some(queue_id);
                    let _ = self.session.decide(Reply::new(
                        354,
                        None,
                        "End data with <CR><LF>.<CR><LF>",
                    ));
                }
                (Waiting::Queued, Response::Queued { queue_id }) => {
                    if quiet {
                        self.log_client(&queue_id);
                    }
                    let text = format!("Ok: queued as {queue_id}");
                    let _ = self
                        .session
                        .decide(Reply::enhanced(250, StatusCode::OK, text));
                    self.txn = Txn::default();
                    done = true;
                }
                (_, Response::Failed { reply }) => {
                    // A quiet message's queue id is not known here.
                    let qid = self
                        .txn
                        .queue_id
                        .as_deref()
                        .or((quiet && what == Waiting::Queued).then_some("NOQUEUE"));
                    if let Some(q) = qid {
                        msg_info!(
                            "{q}: reject: END-OF-MESSAGE from unknown[{}]: {reply}",
                            self.peer.ip()
                        );
                    }
                    let _ = self.session.decide(reply.into());
                    self.txn = Txn::default();
                    done = true;
                }
                (_, other) => {
                    msg_warn!("cleanup link: unexpected cleanup answer {other:?} to request {wid}");
                    // Answered as if the link had failed: nothing was acknowledged.
                    if let Some(h) = self.link.as_mut() {
                        h.waiting = Some((wid, what, cx.now));
                    }
                    self.break_link(cx, pool);
                    return;
                }
            }
        }
        if done {
            self.release_link(cx, pool);
        } else if self.link.as_ref().is_some_and(|h| h.link.is_closed()) {
            msg_warn!("cleanup link: {}", ipc::IpcError::Closed);
            self.break_link(cx, pool);
        }
    }

    /// cleanup refused a quiet start of message: the refusal answers the
    /// end of data (now, if it has come). What else comes on the link for
    /// this message is an End's 503, so the link is closed.
    fn quiet_refused(&mut self, cx: &mut Cx<'_>, pool: &mut Pool, reply: Reply) {
        let Some(held) = self.link.take() else {
            return;
        };
        pool.give_back(cx, held.link, false);
        if held.waiting.is_some() {
            let _ = self.session.decide(reply);
            self.txn = Txn::default();
        } else {
            self.txn.refused = Some(reply);
        }
    }

    /// Gives the link back to the pool: for the next message if nothing is
    /// owed on it, else to be closed (cleanup then drops a message it has
    /// not handed to qmgr yet).
    fn release_link(&mut self, cx: &mut Cx<'_>, pool: &mut Pool) {
        if let Some(held) = self.link.take() {
            let clean = held.waiting.is_none();
            pool.give_back(cx, held.link, clean);
        }
    }

    fn release_link_failed(&mut self, cx: &mut Cx<'_>, pool: &mut Pool) {
        if let Some(held) = self.link.take() {
            pool.give_back(cx, held.link, false);
        }
    }

    /// The link failed: closed, and a session waiting on it answered 451.
    pub(super) fn break_link(&mut self, cx: &mut Cx<'_>, pool: &mut Pool) {
        let Some(held) = self.link.take() else {
            return;
        };
        pool.give_back(cx, held.link, false);
        if held.waiting.is_some() {
            // The session is waiting on cleanup: answer for it. Nothing was
            // acknowledged, so the client keeps the message and retries.
            self.queue_write_error();
            self.txn = Txn::default();
        }
    }

    /// Ends the message in progress, if any: cleanup is told to drop it
    /// and the link goes back to the pool.
    pub(super) fn abort_link_txn(&mut self, cx: &mut Cx<'_>, pool: &mut Pool) {
        // Not written yet: nothing to take back.
        self.unsent = None;
        let started = self.txn.queue_id.is_some();
        if let Some(held) = self.link.as_mut() {
            if (started || held.quiet.is_some()) && held.link.send(&Request::Abort).is_err() {
                // Not usable for the next message either.
                held.waiting = Some((0, Waiting::Queued, cx.now));
            }
        }
        self.txn = Txn::default();
        self.release_link(cx, pool);
    }

    pub(super) fn link_backlogged(&self) -> bool {
        self.link
            .as_ref()
            .is_some_and(|h| h.link.pending_output() > LINK_BACKLOG)
            || self.milters_backlogged()
    }
}

/// Unsent bytes on the link past which no more client input is fed.
const LINK_BACKLOG: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixListener;

    fn begin() -> Request {
        Request::Begin {
            envelope: Box::default(),
            origin: Origin::Local {
                user: "u".into(),
                full_name: None,
            },
            hold: false,
            quiet: true,
        }
    }

    /// Content lent to a link whose cleanup has gone comes back whole and
    /// in order, and goes on the next link as the frames cleanup reads.
    #[test]
    fn content_lent_to_a_dead_link_comes_back_and_goes_whole_on_the_next() {
        let dir = std::env::temp_dir().join(format!("smtpd-unsent-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cleanup");
        let listener = UnixListener::bind(&path).unwrap();
        let poll = mio::Poll::new().unwrap();
        let chunks: Vec<Vec<u8>> = vec![
            b"Subject: x\r\n\r\n".to_vec(),
            vec![b'a'; 3000],
            // Over MAX_CHUNK: bare LFs made CRLF can make a chunk so long.
            (0..MAX_CHUNK + 100).map(|i| (i % 200) as u8).collect(),
            b"last\r\n".to_vec(),
        ];
        let mut unsent = Unsent {
            begin: begin(),
            chunks: chunks.clone(),
            lost: false,
        };

        // The first cleanup has gone: its end is closed before we write.
        let mut dead = Link::<Cleanup>::connect(
            &path,
            &std::rc::Rc::new(poll.registry().try_clone().unwrap()),
            mio::Token(1),
        )
        .unwrap();
        drop(listener.accept().unwrap());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(unsent.write(&mut dead, true).is_err());
        let back: Vec<u8> = unsent.chunks.concat();
        assert_eq!(back, chunks.concat(), "the content came back whole");

        let mut live = Link::<Cleanup>::connect(
            &path,
            &std::rc::Rc::new(poll.registry().try_clone().unwrap()),
            mio::Token(2),
        )
        .unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        let (_, end) = unsent.write(&mut live, true).unwrap();
        assert!(end.is_some());
        while live.pending_output() > 0 {
            live.flush().unwrap();
        }
        drop(live);
        let mut wire = Vec::new();
        peer.read_to_end(&mut wire).unwrap();
        let mut frames = ipc::FrameBuf::new();
        frames.push(&wire);
        let hello: ipc::Hello = ipc::decode(frames.next_payload().unwrap().unwrap()).unwrap();
        assert_eq!(hello, ipc::Hello::of::<Cleanup>());
        let mut got = Vec::new();
        let mut content = Vec::new();
        while let Some(p) = frames.next_payload().unwrap() {
            let t: ipc::Tagged<Request> = ipc::decode(p).unwrap();
            match t.body {
                Request::Data { bytes } => {
                    assert!(bytes.len() <= MAX_CHUNK);
                    content.extend_from_slice(&bytes);
                    got.push("Data");
                }
                Request::Begin { .. } => got.push("Begin"),
                Request::End => got.push("End"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got.first(), Some(&"Begin"));
        assert_eq!(got.last(), Some(&"End"));
        assert_eq!(content, chunks.concat());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Content that left a link whole before the link failed, or content a
    /// message before left queued on it, is not given back as this
    /// message's: the message is refused, not queued cut short or with
    /// another's text in front, and it is not tried again on a new link.
    #[test]
    fn content_that_left_a_failed_link_is_not_sent_again_cut_short() {
        let dir = std::env::temp_dir().join(format!("smtpd-lost-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cleanup");
        let listener = UnixListener::bind(&path).unwrap();
        let poll = mio::Poll::new().unwrap();
        let head = Request::Data { bytes: Vec::new() };

        // Two bodies written out whole: the link has nothing to give back.
        let mut link = Link::<Cleanup>::connect(
            &path,
            &std::rc::Rc::new(poll.registry().try_clone().unwrap()),
            mio::Token(1),
        )
        .unwrap();
        let (_peer, _) = listener.accept().unwrap();
        for body in [vec![b'a'; 1000], vec![b'b'; 1000]] {
            link.send_later_spliced(&head, body, 0).unwrap();
        }
        while link.pending_output() > 0 {
            link.flush().unwrap();
        }
        assert!(take_back(&mut link, vec![vec![b'c'; 10]], 2010).is_none());

        // A body left queued by a message before: more than was lent.
        let mut link = Link::<Cleanup>::connect(
            &path,
            &std::rc::Rc::new(poll.registry().try_clone().unwrap()),
            mio::Token(2),
        )
        .unwrap();
        let (_peer, _) = listener.accept().unwrap();
        link.send_later_spliced(&head, b"someone else's".to_vec(), 0)
            .unwrap();
        assert!(take_back(&mut link, vec![vec![b'd'; 10]], 10).is_none());

        // Nothing of it went: all of it comes back, in order.
        let mut link = Link::<Cleanup>::connect(
            &path,
            &std::rc::Rc::new(poll.registry().try_clone().unwrap()),
            mio::Token(3),
        )
        .unwrap();
        let (_peer, _) = listener.accept().unwrap();
        link.send_later_spliced(&head, b"mine".to_vec(), 0).unwrap();
        let back = take_back(&mut link, vec![b" and more".to_vec()], 13).unwrap();
        assert_eq!(back.concat(), b"mine and more");

        // An Unsent that lost content refuses every later write at once.
        let mut unsent = Unsent {
            begin: begin(),
            chunks: vec![b"x".to_vec()],
            lost: true,
        };
        let e = unsent.write(&mut link, true).unwrap_err();
        assert!(matches!(e, IpcError::ContentLost), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
