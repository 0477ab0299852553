//! Notices to senders: non-delivery, delay warnings and success reports
//! (Postfix's `qmgr_bounce`, `qmgr_defer` and trace), built by [`bounce`]
//! and queued through cleanup like any other mail.
//!
//! A message owes a notice while the journal holds results not yet
//! `Notified`: failures first, then success reports (delivered here, then
//! relayed), one at a time per message (after a crash too). A message with
//! nothing left to deliver is removed only once its notice is queued: the
//! notice must be durable before the message goes. A delay warning goes
//! once, after `delay_warning_time`, and is journaled as `Warned`. A notice
//! cleanup refuses for good (5xx) is settled; one it defers, or one lost
//! with the link (or left unanswered for [`NOTICE_TIMEOUT`]), is built
//! again from the journal when the message is next tried.
//!
//! Logs: `ID: sender non-delivery notification: NEWID`, and warnings for
//! notices refused, deferred or lost.

use std::collections::{BTreeMap, HashSet, VecDeque};

use ipc::cleanup;
use mail::notice::Kind as NoticeKind;
use mail::QueueId;
use queue::{MessageHead, Record};
use sched::Time;

use crate::bounce;
use crate::{system_time, Action, QueueManager, Store, NOTICE_TIMEOUT};

/// A notice on its way to cleanup.
struct Notice {
    /// The message it is about.
    orig: QueueId,
    /// The recipients it reports.
    rcpts: Vec<u32>,
    /// Begin, Data..., End; taken when sent.
    reqs: Vec<cleanup::Request>,
    /// A failure or success notice settles the recipients it reports
    /// (`Notified`); a delay warning is journaled as `Warned`.
    kind: NoticeKind,
    /// It goes to the postmaster (a notice about a notice, or a copy), not
    /// to the sender: so named in the log, as Postfix does.
    postmaster: bool,
    /// A postmaster copy (`notify_classes` bounce or delay): it settles
    /// nothing, and one that fails is only logged, as Postfix's.
    copy: bool,
    /// The postmaster copy to send once this notice is queued.
    then: Option<Vec<cleanup::Request>>,
}

impl Notice {
    /// A postmaster copy about `orig`.
    fn copy(orig: QueueId, kind: NoticeKind, reqs: Vec<cleanup::Request>) -> Notice {
        Notice {
            orig,
            rcpts: Vec::new(),
            reqs,
            kind,
            postmaster: true,
            copy: true,
            then: None,
        }
    }
}

/// Notices queued, sent and owed.
#[derive(Default)]
pub(crate) struct Notices {
    /// Waiting to be sent.
    queue: VecDeque<Notice>,
    /// Sent, waiting for cleanup's answer.
    pending: BTreeMap<u64, Notice>,
    /// When cleanup last answered, or was first waited for.
    since: Option<Time>,
    /// Messages with a notice queued or sent: no second one until it is done.
    owed: HashSet<QueueId>,
    /// Messages whose delay warning is on its way.
    warnings: HashSet<QueueId>,
    /// Messages with nothing left to deliver, removed once their notice is queued.
    remove_after: HashSet<QueueId>,
}

impl Notices {
    /// Whether `id` has a notice queued or sent.
    pub(crate) fn owes(&self, id: &QueueId) -> bool {
        self.owed.contains(id)
    }

    /// `id` is to be removed once its notice is queued.
    pub(crate) fn remove_after(&mut self, id: QueueId) {
        self.remove_after.insert(id);
    }

    /// When cleanup has left notices unanswered too long.
    pub(crate) fn deadline(&self) -> Option<Time> {
        if self.pending.is_empty() {
            return None;
        }
        self.since.map(|t| t + NOTICE_TIMEOUT)
    }
}

/// How notices are named in the log, as Postfix names them.
fn notice_word(kind: NoticeKind) -> &'static str {
    match kind {
        NoticeKind::Failure => "non-delivery",
        NoticeKind::Delay => "delay",
        NoticeKind::Success { .. } => "delivery status",
    }
}

/// How much of an original over bounce_size_limit is read for its header
/// section (Postfix's header_size_limit is 100 KiB).
const HEADERS_READ: u64 = 1 << 20;

impl<S: Store> QueueManager<S> {
    /// Sends queued notices to cleanup.
    pub(crate) fn send_notices(&mut self) {
        while let Some(mut n) = self.notices.queue.pop_front() {
            if self.notices.pending.is_empty() {
                self.notices.since = Some(self.now);
            }
            let notice = self.request_id();
            let requests = std::mem::take(&mut n.reqs);
            self.notices.pending.insert(notice, n);
            self.actions
                .push_back(Action::ToCleanup { notice, requests });
        }
    }

    /// Cleanup answered a notice.
    pub(crate) fn cleanup_answer(&mut self, notice: u64, resp: cleanup::Response) {
        let Some(n) = self.notices.pending.remove(&notice) else {
            return;
        };
        self.notices.since = Some(self.now);
        match resp {
            cleanup::Response::Queued { queue_id } => {
                let line = format!(
                    "{}: {} {} notification: {queue_id}",
                    n.orig,
                    if n.postmaster { "postmaster" } else { "sender" },
                    notice_word(n.kind)
                );
                self.info(line);
                self.queue_copy(&n);
                self.notice_done(n);
            }
            cleanup::Response::Failed { reply } if reply.is_permanent() => {
                let line = format!(
                    "{}: the {} notification was refused: {reply}",
                    n.orig,
                    notice_word(n.kind)
                );
                self.warn(line);
                self.notice_done(n);
            }
            cleanup::Response::Failed { reply } => {
                let line = format!(
                    "{}: the {} notification was deferred: {reply}",
                    n.orig,
                    notice_word(n.kind)
                );
                self.warn(line);
                self.notice_retry(n);
            }
            cleanup::Response::Started { .. } => {
                self.notices.pending.insert(notice, n);
            }
        }
    }

    /// The cleanup link is gone: what was sent on it is never answered.
    pub(crate) fn cleanup_lost(&mut self) {
        self.actions
            .retain(|a| !matches!(a, Action::ToCleanup { .. }));
        for (_, n) in std::mem::take(&mut self.notices.pending) {
            self.warn(format!(
                "{}: cleanup went away before queueing the {} notification; trying again later",
                n.orig,
                notice_word(n.kind)
            ));
            self.notice_retry(n);
        }
    }

    /// A cleanup that holds the link open and never answers must not keep
    /// failed messages in the queue for ever.
    pub(crate) fn notices_timeout(&mut self) {
        if self.notices.deadline().is_some_and(|t| t <= self.now) {
            self.warn(format!(
                "cleanup link for notices: no answer for {}s",
                NOTICE_TIMEOUT.as_secs()
            ));
            self.actions.push_back(Action::DropCleanup);
            self.cleanup_lost();
        }
    }

    /// Warns the sender once that a message is delayed, after
    /// `delay_warning_time` (Postfix: off by default), about its recipients
    /// still pending that did not refuse delay notices.
    pub(crate) fn maybe_warn(&mut self, head: &MessageHead, pending: &[u32]) {
        let id = head.id;
        if !self.warning_due(id, &head.envelope) {
            return;
        }
        let reasons = self.reasons_of(&id);
        let items: Vec<bounce::Failed> = pending
            .iter()
            .map(|&i| {
                // The last deferral's status; a recipient not tried yet
                // (or after a restart without its record) is merely delayed.
                let (status, reason) = match reasons.get(&i) {
                    Some(s) if s.is_transient() => (s.code, s.text.clone()),
                    _ => (
                        mail::StatusCode::known(4, 0, 0),
                        "delivery temporarily suspended".to_string(),
                    ),
                };
                bounce::Failed {
                    index: i,
                    status,
                    reason,
                }
            })
            .collect();
        let rcpts: Vec<u32> = items.iter().map(|f| f.index).collect();
        let copy = self.postmaster_copy(head, &items, NoticeKind::Delay);
        match self.notice(head.clone(), items, NoticeKind::Delay) {
            Some(reqs) => {
                self.notices.warnings.insert(id);
                self.notices.queue.push_back(Notice {
                    orig: id,
                    rcpts,
                    reqs,
                    kind: NoticeKind::Delay,
                    postmaster: false,
                    copy: false,
                    then: copy,
                });
            }
            // Nobody wants one: do not look again (the postmaster's copy
            // goes all the same, as Postfix's ignores NOTIFY).
            None => {
                if let Some(reqs) = copy {
                    let n = Notice::copy(id, NoticeKind::Delay, reqs);
                    self.notices.queue.push_back(n);
                }
                self.append(Record::Warned { id });
            }
        }
    }

    /// Whether a delay warning is due for `id`, which arrived with
    /// `envelope`: warnings are on, none was sent or queued, and the
    /// message is older than `delay_warning_time`.
    pub(crate) fn warning_due(&self, id: QueueId, envelope: &mail::Envelope) -> bool {
        if self.settings.delay_warning.is_zero() || self.notices.warnings.contains(&id) {
            return false;
        }
        if self.state.messages.get(&id).is_none_or(|m| m.warned) {
            return false;
        }
        let arrival_ms = envelope.arrival.as_micros() / 1000;
        self.now.0.saturating_sub(arrival_ms) >= self.settings.delay_warning.as_millis() as u64
    }

    /// Whether [`QueueManager::owe_notice`] would queue a notice for `id`.
    pub(crate) fn owes_notice(&self, id: QueueId) -> bool {
        !self.notices.owed.contains(&id) && self.state.unnotified.contains_key(&id)
    }

    /// Queues the next notice a message owes: failures first, then
    /// success reports (delivered here, then relayed), one at a time (after
    /// a crash too: the journal keeps them until `Notified`).
    pub(crate) fn owe_notice(&mut self, head: MessageHead) {
        let id = head.id;
        if self.notices.owed.contains(&id) {
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
            let items: Vec<bounce::Failed> = owed
                .iter()
                .filter(|b| b.success == want)
                .map(|b| bounce::Failed {
                    index: b.index,
                    status: b.status,
                    reason: b.reason.clone(),
                })
                .collect();
            if items.is_empty() {
                continue;
            }
            let rcpts: Vec<u32> = items.iter().map(|f| f.index).collect();
            let postmaster = head.envelope.sender.is_empty();
            let copy = match kind {
                NoticeKind::Failure => self.postmaster_copy(&head, &items, kind),
                _ => None,
            };
            match self.notice(head.clone(), items, kind) {
                Some(reqs) => {
                    self.notices.owed.insert(id);
                    self.notices.queue.push_back(Notice {
                        orig: id,
                        rcpts,
                        reqs,
                        kind,
                        postmaster,
                        copy: false,
                        then: copy,
                    });
                    return;
                }
                // Nobody wants one: settled (the postmaster's copy goes
                // all the same, as Postfix's ignores NOTIFY).
                None => {
                    if let Some(reqs) = copy {
                        self.notices.queue.push_back(Notice::copy(id, kind, reqs));
                    }
                    self.append(Record::Notified { id, rcpts });
                }
            }
        }
    }

    /// Queues the postmaster copy that waited for `n` (Postfix sends it
    /// once the sender's notice is posted).
    fn queue_copy(&mut self, n: &Notice) {
        if let Some(reqs) = n.then.clone() {
            self.notices
                .queue
                .push_back(Notice::copy(n.orig, n.kind, reqs));
        }
    }

    /// A notice is queued (or refused for good): journal that, and remove
    /// the message if it was only waiting for this.
    fn notice_done(&mut self, n: Notice) {
        if n.copy {
            return;
        }
        if n.kind == NoticeKind::Delay {
            self.notices.warnings.remove(&n.orig);
            if self.state.messages.contains_key(&n.orig) {
                self.append(Record::Warned { id: n.orig });
            }
            return;
        }
        self.notices.owed.remove(&n.orig);
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
        if !self.notices.owed.contains(&n.orig) && self.notices.remove_after.remove(&n.orig) {
            self.remove_message(n.orig);
        }
    }

    /// A notice did not make it: the message is tried again later, which
    /// builds the notice again from the journal.
    fn notice_retry(&mut self, n: Notice) {
        if n.copy {
            return;
        }
        if n.kind == NoticeKind::Delay {
            // The next deferral of the message warns again.
            self.notices.warnings.remove(&n.orig);
            return;
        }
        self.notices.owed.remove(&n.orig);
        self.notices.remove_after.remove(&n.orig);
        // A message waiting for its retry builds the notice again then:
        // its pending recipients are not tried early for the notice's sake.
        let id = n.orig;
        if self.state.messages.contains_key(&id) && !self.retry.is_scheduled(&id) {
            self.retry.schedule(self.now + self.settings.run_delay, id);
        }
    }

    /// Builds a notice about a message: cleanup requests, or `None` when
    /// nobody is to get one. Only failures of notices go to the postmaster;
    /// delay warnings and success reports go to a real sender only.
    fn notice(
        &mut self,
        head: MessageHead,
        failed: Vec<bounce::Failed>,
        kind: NoticeKind,
    ) -> Option<Vec<cleanup::Request>> {
        let env = &head.envelope;
        let wanted = bounce::wanted(env, &failed, kind);
        if wanted.is_empty() {
            return None;
        }
        let s = &self.settings;
        let (to, from, postmaster) = match bounce::who(&env.sender, &s.postmaster, &s.double_bounce)
        {
            bounce::Notify::Sender(x) => (x, String::new(), false),
            _ if kind != NoticeKind::Failure => return None,
            // Postfix tells the postmaster of a failed notice only when
            // notify_classes asks for it (bounce or 2bounce; not by
            // default): else the notice is dropped, as there.
            bounce::Notify::Postmaster { .. } if !s.notify_postmaster_of_bounces => return None,
            bounce::Notify::Postmaster { to, from } => (to, from, true),
            bounce::Notify::Nobody => {
                self.warn(format!(
                    "{}: undeliverable double-bounce discarded",
                    head.id
                ));
                return None;
            }
        };
        let to = Recipient {
            to,
            from,
            postmaster,
        };
        Some(self.build(&head, &wanted, kind, to, false))
    }

    /// The postmaster's copy of a non-delivery notice or a delay warning
    /// about `items`, when notify_classes asks for it (bounce, delay):
    /// headers only, every recipient whatever its NOTIFY, from the
    /// double-bounce sender (its failure is only logged), as Postfix's
    /// bounce_notify_service and bounce_warn_service. None for mail from
    /// the null sender (its notice already goes to the postmaster) or when
    /// the sender is that recipient.
    fn postmaster_copy(
        &mut self,
        head: &MessageHead,
        items: &[bounce::Failed],
        kind: NoticeKind,
    ) -> Option<Vec<cleanup::Request>> {
        let s = &self.settings;
        let to = match kind {
            NoticeKind::Failure => s.bounce_copy_to.clone()?,
            NoticeKind::Delay => s.delay_copy_to.clone()?,
            NoticeKind::Success { .. } => return None,
        };
        let sender = &head.envelope.sender;
        if sender.is_empty()
            || sender.eq_ignore_ascii_case(&s.double_bounce)
            || sender.eq_ignore_ascii_case(&to)
            || items.is_empty()
        {
            return None;
        }
        let from = s.double_bounce.clone();
        let all: Vec<&bounce::Failed> = items.iter().collect();
        let to = Recipient {
            to,
            from,
            postmaster: true,
        };
        Some(self.build(head, &all, kind, to, true))
    }

    /// The cleanup requests of a notice about `wanted` to `to`; the
    /// original as its headers only when `headers_only` (or when over
    /// bounce_size_limit).
    fn build(
        &mut self,
        head: &MessageHead,
        wanted: &[&bounce::Failed],
        kind: NoticeKind,
        to: Recipient,
        headers_only: bool,
    ) -> Vec<cleanup::Request> {
        let Recipient {
            to,
            from,
            postmaster,
        } = to;
        let env = &head.envelope;
        let s = &self.settings;
        // An original over bounce_size_limit comes back as its headers
        // only (Postfix's bounce_original), and is never read whole: one
        // byte past the limit says it is over, and its header section is
        // read up to HEADERS_READ.
        let limit = s.bounce_size_limit;
        let read = if headers_only {
            Some(HEADERS_READ as usize)
        } else {
            (limit > 0).then(|| {
                usize::try_from(limit.max(HEADERS_READ).saturating_add(1)).unwrap_or(usize::MAX)
            })
        };
        let mut original = match self.store.read_data(head.id, &head.data, read) {
            Ok(v) => v,
            Err(e) => {
                self.warn(format!(
                    "{}: reading the message for its notice: {e}",
                    head.id
                ));
                Vec::new()
            }
        };
        let mut over = mail::Envelope::default();
        let env = if headers_only || (limit > 0 && original.len() as u64 > limit) {
            let mut h = mail::notice::header_section(&original).len();
            if h == original.len() {
                // No end of the headers in what was read: up to its last
                // whole line.
                h = original
                    .windows(2)
                    .rposition(|w| w == b"\r\n")
                    .map_or(0, |i| i + 2);
            }
            original.truncate(h);
            over.clone_from(env);
            over.ret = Some(mail::Ret::Hdrs);
            &over
        } else {
            env
        };
        let s = &self.settings;
        let arrival =
            std::time::UNIX_EPOCH + std::time::Duration::from_micros(env.arrival.as_micros());
        let (date, arrived) = (
            sys::time::rfc5322_date(system_time(self.now)),
            sys::time::rfc5322_date(arrival),
        );
        let until = sys::time::rfc5322_date(arrival + s.lifetime);
        let cx = bounce::Context {
            hostname: &s.hostname,
            to: &to,
            date: &date,
            arrival: &arrived,
            retry_until: (kind == NoticeKind::Delay).then_some(until.as_str()),
            postmaster,
        };
        let bytes = mail::notice::report_of(kind, env, &head.id.to_string(), wanted, &original, cx);
        // A report about SMTPUTF8 mail holds UTF-8 (RFC 6533) in its body,
        // as a returned 8-bit original does: 8BITMIME is enough for those.
        // SMTPUTF8 of the next hop is needed only when the notice's own
        // envelope or header is UTF-8, its recipient here (Postfix's
        // DELIVERY_REQUIRES_SMTPUTF8): an ASCII sender of SMTPUTF8 mail
        // still gets its notice through a next hop without SMTPUTF8.
        let envelope = mail::Envelope {
            sender: from,
            smtputf8: !to.is_ascii(),
            recipients: vec![mail::Recipient::new(to)],
            body_type: if bytes.is_ascii() {
                mail::BodyType::default()
            } else {
                mail::BodyType::EightBitMime
            },
            ..mail::Envelope::default()
        };
        let mut reqs = vec![cleanup::Request::Begin {
            envelope: Box::new(envelope),
            origin: cleanup::Origin::Local {
                user: "MAILER-DAEMON".into(),
                full_name: Some("Mail Delivery System".into()),
            },
            hold: false,
            quiet: false,
        }];
        for chunk in bytes.chunks(cleanup::MAX_CHUNK) {
            reqs.push(cleanup::Request::Data {
                bytes: chunk.to_vec(),
            });
        }
        reqs.push(cleanup::Request::End);
        reqs
    }
}

/// Who a notice goes to, and from which sender.
struct Recipient {
    /// The notice's one recipient.
    to: String,
    /// Its envelope sender (empty: the null sender).
    from: String,
    /// `to` is the postmaster: Postfix's postmaster subject.
    postmaster: bool,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ipc::cleanup;
    use queue::Record;

    use crate::testkit::{settings, World};
    use crate::{Event, Settings, NOTICE_TIMEOUT};

    /// The notice's text (Data requests joined).
    fn text(reqs: &[cleanup::Request]) -> String {
        let mut out = Vec::new();
        for r in reqs {
            if let cleanup::Request::Data { bytes } = r {
                out.extend_from_slice(bytes);
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    fn notified(w: &World, id: mail::QueueId) -> bool {
        w.records(id)
            .iter()
            .any(|r| matches!(r, Record::Notified { .. }))
    }

    /// bounce_size_limit: an original over it comes back as its headers
    /// only (text/rfc822-headers, as Postfix's bounce_original); one within
    /// it whole.
    #[test]
    fn an_original_over_bounce_size_limit_comes_back_as_headers_only() {
        for (limit, whole) in [(10, false), (23, true), (0, true)] {
            let mut w = World::new(Settings {
                bounce_size_limit: limit,
                ..settings()
            });
            w.arrive("alice@a.example", &["r@b.example"]);
            w.route_all(&[]);
            w.deliver_all(|_| 550);
            let (_, reqs) = w.cleanup.pop_front().expect("a notice");
            let t = text(&reqs);
            assert!(t.contains("Subject: test\r\n"), "{limit}: {t}");
            assert_eq!(
                (
                    t.contains("Content-Type: message/rfc822\r\n"),
                    t.contains("Content-Type: text/rfc822-headers\r\n"),
                    t.contains("\r\nbody\r\n"),
                ),
                (whole, !whole, whole),
                "limit {limit}: {t}"
            );
        }
    }

    #[test]
    fn a_bounce_tells_the_sender_and_the_message_goes_once_it_is_queued() {
        let mut w = World::new(settings());
        let id = w.arrive("alice@a.example", &["r@b.example"]);
        w.route_all(&[]);
        w.deliver_all(|_| 550);
        let (notice, reqs) = w.cleanup.pop_front().expect("a notice");
        let cleanup::Request::Begin { envelope, .. } = &reqs[0] else {
            panic!("Begin first");
        };
        assert_eq!(envelope.sender, "", "a notice has the null sender");
        assert_eq!(envelope.recipients[0].address, "alice@a.example");
        assert!(text(&reqs).contains("Final-Recipient: rfc822; r@b.example"));
        assert!(w.live(id), "kept until the notice is queued");
        w.handle(Event::CleanupAnswer {
            notice,
            response: cleanup::Response::Queued {
                queue_id: "N1".into(),
            },
        });
        assert!(w.logged(&format!("{id}: sender non-delivery notification: N1")));
        assert!(notified(&w, id));
        assert!(!w.live(id));
    }

    /// A notice about SMTPUTF8 mail is RFC 6533's global report, queued
    /// with 8BITMIME, and with SMTPUTF8 (so that the smtp client asks the
    /// next hop for it) only when its recipient is a UTF-8 address: an
    /// ASCII sender's notice can go through a next hop without SMTPUTF8.
    /// One about plain mail stays plain.
    #[test]
    fn a_notice_about_smtputf8_mail_is_queued_with_smtputf8() {
        let mut w = World::new(settings());
        w.arrive_smtputf8("\u{e5}lice@a.example", &["d\u{e4}ve@b.example"]);
        w.arrive_smtputf8("carol@a.example", &["d\u{e4}ve@c.example"]);
        w.arrive("bob@a.example", &["r@b.example"]);
        w.route_all(&[]);
        w.deliver_all(|_| 550);
        let mut seen = Vec::new();
        while let Some((_, reqs)) = w.cleanup.pop_front() {
            let cleanup::Request::Begin { envelope, .. } = &reqs[0] else {
                panic!("Begin first");
            };
            seen.push((
                envelope.recipients[0].address.clone(),
                envelope.smtputf8,
                envelope.body_type,
                text(&reqs),
            ));
        }
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        let [(bob, false, mail::BodyType::SevenBit, plain), (carol, false, mail::BodyType::EightBitMime, ascii_global), (alice, true, mail::BodyType::EightBitMime, global)] =
            &seen[..]
        else {
            panic!("{seen:?}");
        };
        assert_eq!(
            (bob.as_str(), carol.as_str(), alice.as_str()),
            ("bob@a.example", "carol@a.example", "\u{e5}lice@a.example")
        );
        assert!(
            ascii_global.contains("Content-Type: message/global-delivery-status\r\n"),
            "{ascii_global}"
        );
        assert!(
            plain.contains("Content-Type: message/delivery-status\r\n"),
            "{plain}"
        );
        assert!(
            global.contains("Content-Type: message/global-delivery-status\r\n")
                && global.contains("Final-Recipient: utf-8; d\u{e4}ve@b.example\r\n"),
            "{global}"
        );
    }

    #[test]
    fn a_notice_lost_with_cleanup_is_built_again_at_the_next_run() {
        let mut w = World::new(settings());
        let id = w.arrive("alice@a.example", &["r@b.example"]);
        w.route_all(&[]);
        w.deliver_all(|_| 550);
        assert_eq!(w.cleanup.len(), 1);
        w.cleanup.clear();
        w.handle(Event::CleanupLost);
        assert!(w.logged("cleanup went away"));
        assert!(w.live(id) && !notified(&w, id));
        w.wait(settings().run_delay);
        assert_eq!(w.queue_notices(), 1, "the notice again, from the journal");
        assert!(notified(&w, id));
        assert!(!w.live(id));
    }

    #[test]
    fn a_cleanup_that_never_answers_is_given_up() {
        let mut w = World::new(settings());
        let id = w.arrive("alice@a.example", &["r@b.example"]);
        w.route_all(&[]);
        w.deliver_all(|_| 550);
        assert_eq!(w.cleanup.len(), 1);
        w.wait(NOTICE_TIMEOUT - Duration::from_millis(1));
        assert_eq!(w.cleanup_dropped, 0);
        w.wait(Duration::from_millis(1));
        assert_eq!(w.cleanup_dropped, 1);
        assert!(w.logged("no answer for 300s"));
        assert!(w.live(id));
    }

    #[test]
    fn a_refused_notice_is_settled_and_a_deferred_one_tried_again() {
        let mut w = World::new(settings());
        let a = w.arrive("alice@a.example", &["r@b.example"]);
        let b = w.arrive("bob@a.example", &["r@c.example"]);
        w.route_all(&[]);
        w.deliver_all(|_| 550);
        let answers = [
            (500, mail::StatusCode::NOT_AUTHORIZED),
            (451, mail::StatusCode::SYSTEM_TEMP),
        ];
        for (code, status) in answers {
            let (notice, _) = w.cleanup.pop_front().unwrap();
            w.handle(Event::CleanupAnswer {
                notice,
                response: cleanup::Response::Failed {
                    reply: mail::Refusal::new(code, status, "no"),
                },
            });
        }
        assert!(!w.live(a) && notified(&w, a), "refused for good: settled");
        assert!(w.live(b) && !notified(&w, b), "deferred: owed still");
        w.wait(settings().run_delay);
        w.queue_notices();
        assert!(!w.live(b));
    }

    #[test]
    fn a_delay_warning_goes_once_after_delay_warning_time() {
        let mut w = World::new(Settings {
            delay_warning: Duration::from_secs(600),
            ..settings()
        });
        let id = w.arrive("alice@a.example", &["r@b.example"]);
        w.settle(|_| 450);
        assert!(w.cleanup.is_empty(), "too early to warn");
        let mut warnings = Vec::new();
        for _ in 0..3 {
            w.wait(Duration::from_secs(900));
            w.route_all(&[]);
            w.deliver_all(|_| 450);
            // Cleanup queues each notice at once.
            while let Some((notice, reqs)) = w.cleanup.pop_front() {
                warnings.push(reqs);
                w.handle(Event::CleanupAnswer {
                    notice,
                    response: cleanup::Response::Queued {
                        queue_id: "W1".into(),
                    },
                });
            }
        }
        assert_eq!(warnings.len(), 1, "one warning");
        assert!(text(&warnings[0]).contains("Action: delayed"));
        assert!(w
            .records(id)
            .iter()
            .any(|r| matches!(r, Record::Warned { .. })));
        assert!(w.logged(&format!("{id}: sender delay notification: W1")));
    }

    /// A notice that fails (its message has the null sender) goes to the
    /// postmaster only when notify_classes asks for it (2bounce or bounce),
    /// logged as a postmaster notification; by default it is dropped, as
    /// Postfix's bounce daemon does.
    #[test]
    fn a_failed_notice_reaches_the_postmaster_only_when_notify_classes_asks() {
        for tell in [false, true] {
            let mut w = World::new(Settings {
                notify_postmaster_of_bounces: tell,
                ..settings()
            });
            let id = w.arrive("", &["alice@b.example"]);
            w.route_all(&[]);
            w.deliver_all(|_| 550);
            match w.cleanup.pop_front() {
                None => {
                    assert!(!tell);
                    assert!(!w.live(id), "dropped: nothing owed");
                }
                Some((notice, reqs)) => {
                    assert!(tell);
                    let cleanup::Request::Begin { envelope, .. } = &reqs[0] else {
                        panic!("Begin first");
                    };
                    assert_eq!(envelope.sender, "double-bounce@test");
                    assert_eq!(envelope.recipients[0].address, "postmaster@test");
                    w.handle(Event::CleanupAnswer {
                        notice,
                        response: cleanup::Response::Queued {
                            queue_id: "P1".into(),
                        },
                    });
                    assert!(w.logged(&format!("{id}: postmaster non-delivery notification: P1")));
                }
            }
        }
    }

    #[test]
    fn a_failed_double_bounce_is_only_logged() {
        let mut w = World::new(settings());
        let id = w.arrive("double-bounce@test", &["r@b.example"]);
        w.route_all(&[]);
        w.deliver_all(|_| 550);
        assert!(w.cleanup.is_empty());
        assert!(w.logged(&format!("{id}: undeliverable double-bounce discarded")));
        assert!(!w.live(id));
    }

    /// The sender and envelope recipient of a notice's requests.
    fn envelope_of(reqs: &[cleanup::Request]) -> (String, String) {
        let cleanup::Request::Begin { envelope, .. } = &reqs[0] else {
            panic!("Begin first");
        };
        (
            envelope.sender.clone(),
            envelope.recipients[0].address.clone(),
        )
    }

    /// Answers the next notice cleanup got with Queued as `qid`; its requests.
    fn queue_next(w: &mut World, qid: &str) -> Vec<cleanup::Request> {
        let (notice, reqs) = w.cleanup.pop_front().expect("a notice");
        w.handle(Event::CleanupAnswer {
            notice,
            response: cleanup::Response::Queued {
                queue_id: qid.into(),
            },
        });
        reqs
    }

    /// notify_classes = bounce: once the sender's notice is queued, the
    /// postmaster (bounce_notice_recipient) gets a copy with the original's
    /// headers only, from the double-bounce sender, as Postfix's
    /// bounce_notify_service; without the class, nothing.
    #[test]
    fn notify_classes_bounce_sends_the_postmaster_a_copy_of_each_bounce() {
        for copy in [false, true] {
            let mut w = World::new(Settings {
                bounce_copy_to: copy.then(|| "postmaster@test".to_string()),
                ..settings()
            });
            let id = w.arrive("alice@a.example", &["r@b.example"]);
            w.route_all(&[]);
            w.deliver_all(|_| 550);
            let sender = queue_next(&mut w, "N1");
            assert_eq!(envelope_of(&sender).1, "alice@a.example");
            assert!(text(&sender).contains("Subject: Undelivered Mail Returned to Sender"));
            assert!(
                text(&sender).contains("\r\nbody\r\n"),
                "the sender gets it whole"
            );
            if !copy {
                assert!(w.cleanup.is_empty(), "no copy by default");
                assert!(!w.live(id));
                continue;
            }
            let pm = queue_next(&mut w, "P1");
            assert_eq!(
                envelope_of(&pm),
                (
                    "double-bounce@test".to_string(),
                    "postmaster@test".to_string()
                )
            );
            let t = text(&pm);
            for needle in [
                "To: postmaster@test",
                "Subject: Postmaster Copy: Undelivered Mail",
                "Content-Type: text/rfc822-headers",
                "Subject: test",
                "<r@b.example>: 550 reply",
            ] {
                assert!(t.contains(needle), "{needle}: {t}");
            }
            assert!(!t.contains("\r\nbody\r\n"), "headers only: {t}");
            assert!(w.logged(&format!("{id}: sender non-delivery notification: N1")));
            assert!(w.logged(&format!("{id}: postmaster non-delivery notification: P1")));
            assert!(!w.live(id));
            assert!(w.cleanup.is_empty(), "one copy");
        }
    }

    /// A copy cleanup refuses or defers is only logged: the message is
    /// settled by its sender's notice, never tried again for the copy.
    #[test]
    fn a_failed_postmaster_copy_settles_nothing() {
        let mut w = World::new(Settings {
            bounce_copy_to: Some("postmaster@test".into()),
            ..settings()
        });
        let id = w.arrive("alice@a.example", &["r@b.example"]);
        w.route_all(&[]);
        w.deliver_all(|_| 550);
        queue_next(&mut w, "N1");
        let (notice, _) = w.cleanup.pop_front().expect("the copy");
        w.handle(Event::CleanupAnswer {
            notice,
            response: cleanup::Response::Failed {
                reply: mail::Refusal::new(451, mail::StatusCode::SYSTEM_TEMP, "try later"),
            },
        });
        assert!(!w.live(id), "settled by the sender's notice");
        w.wait(Duration::from_secs(3600));
        w.queue_notices();
        assert!(w.cleanup.is_empty(), "the copy is not sent again");
    }

    /// notify_classes = delay: the delay warning's copy goes to
    /// delay_notice_recipient, even when the sender asked for no warning
    /// (Postfix's copy ignores NOTIFY).
    #[test]
    fn notify_classes_delay_sends_the_postmaster_a_copy_of_each_warning() {
        let mut w = World::new(Settings {
            delay_warning: Duration::from_secs(600),
            delay_copy_to: Some("ops@test".into()),
            ..settings()
        });
        let id = w.arrive("alice@a.example", &["r@b.example"]);
        w.settle(|_| 450);
        w.wait(Duration::from_secs(900));
        w.route_all(&[]);
        w.deliver_all(|_| 450);
        let warning = queue_next(&mut w, "W1");
        assert_eq!(envelope_of(&warning).1, "alice@a.example");
        let pm = queue_next(&mut w, "W2");
        assert_eq!(
            envelope_of(&pm),
            ("double-bounce@test".to_string(), "ops@test".to_string())
        );
        assert!(text(&pm).contains("Subject: Postmaster Warning: Delayed Mail"));
        assert!(text(&pm).contains("Action: delayed"));
        assert!(w.logged(&format!("{id}: postmaster delay notification: W2")));
        assert!(w.live(id), "still being retried");
    }
}
