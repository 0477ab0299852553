//! A session's side of its milters (`smtpd_milters`, run by
//! `milter::net::Milters`, one after another): which SMTP events they
//! hear with which macros, and what their verdicts make of the session's
//! replies.
//!
//! The milters are asked after smtpd's own checks have passed, as in
//! Postfix: MAIL FROM and RCPT TO wait for their verdict before the
//! reply; DATA, the headers and the body are told without waiting; the
//! end of the message waits for the verdict and the changes, which go to
//! cleanup (`Request::Edits`) before `End`, so the 250 covers the
//! changed message. A refusal at connect or HELO answers the next MAIL
//! FROM (and every later command the milters hear), as Postfix does.
//! Each event carries every macro value known at that point; the
//! `milter_*_macros` lists (or a milter's own) choose which are sent.
//! `i` (the queue id) is known from DATA on, since the queue file is made
//! at DATA here. Milters dropped are logged with the default action taken.

use daemon::{msg_info, msg_warn, Cx};
use ipc::cleanup::{Request, MAX_CHUNK};
use mail::{Recipient, Refusal};
use milter::Verdict;
use mio::Token;
use smtp_proto::{Reply, StatusCode};

use super::{Conn, Shared};
use crate::pool::Pool;

/// What a session waits for from its milters.
pub(super) enum MilterWait {
    /// MAIL FROM's verdict.
    Mail,
    /// RCPT TO's verdict, for this recipient.
    Rcpt(Recipient),
    /// The end of the message's verdict and changes.
    Eom,
    /// The verdict on a command smtpd does not know.
    Unknown,
}

type Macros = milter::chain::Macros;

impl Conn {
    /// Opens the session's milters (when `smtpd_milters` names any) and
    /// tells them of the connection; their sockets' tokens, to route events.
    pub fn start_milters(&mut self, cx: &mut Cx<'_>, shared: &Shared) -> Vec<Token> {
        let Some(s) = shared.settings.milters.clone() else {
            return Vec::new();
        };
        let local = self.local_ip();
        let tokens: Vec<Token> = s.milters.iter().map(|_| cx.token()).collect();
        let mut m = milter::net::Milters::open(cx.registry, &tokens, &s, cx.now);
        let macros: Macros = vec![
            ("j", s.myhostname.clone()),
            ("{daemon_name}", s.daemon_name.clone()),
            ("{daemon_addr}", local.to_string()),
            ("v", "Sluice".into()),
        ];
        self.milter_base = macros;
        let addr = self.peer.ip().to_string();
        let peer = milter::chain::Peer {
            name: format!("[{addr}]"),
            family: if self.peer.is_ipv4() { b'4' } else { b'6' },
            port: self.peer.port(),
            addr,
        };
        let known = self.milter_macros(Vec::new());
        m.connect(cx.registry, cx.now, known, peer);
        let tokens = m.tokens();
        self.milters = Some(m);
        self.log_milter_warnings();
        tokens
    }

    /// Every macro value known now, with `more` for the stage.
    fn milter_macros(&self, more: Macros) -> Macros {
        let ip = self.peer.ip();
        let mut m = self.milter_base.clone();
        m.extend([
            ("_", format!("[{ip}] [{ip}]")),
            ("{client_addr}", ip.to_string()),
            ("{client_port}", self.peer.port().to_string()),
            ("{client_name}", "unknown".to_string()),
            ("{client_ptr}", "unknown".to_string()),
        ]);
        if let Some(info) = self.stream.tls_info() {
            m.push(("{tls_version}", info.version.to_string()));
            m.push(("{cipher}", info.cipher.to_string()));
        }
        if let Some((mech, user)) = &self.sasl_login {
            m.push(("{auth_type}", mech.clone()));
            m.push(("{auth_authen}", user.clone()));
        }
        if let Some(q) = &self.txn.queue_id {
            m.push(("i", q.clone()));
        }
        m.extend(more);
        m
    }

    /// Logs the milters dropped since the last call.
    fn log_milter_warnings(&mut self) {
        if let Some(m) = self.milters.as_mut() {
            for w in m.take_warnings() {
                msg_warn!("{w}");
            }
        }
    }

    /// Whether the milters hold more input than they have taken.
    pub(super) fn milters_backlogged(&self) -> bool {
        self.milters.as_ref().is_some_and(|m| m.backlogged())
    }

    /// When a milter gives up.
    pub(super) fn milter_deadline(&self) -> Option<std::time::Instant> {
        self.milters.as_ref().and_then(|m| m.deadline())
    }

    /// Whether mail is to be held for a milter's sake.
    pub(super) fn milter_hold(&self) -> bool {
        self.milters.as_ref().is_some_and(|m| m.hold())
    }

    /// A milter socket is ready.
    pub fn milter_ready(&mut self, cx: &mut Cx<'_>, pool: &mut Pool, token: Token) {
        let v = self
            .milters
            .as_mut()
            .and_then(|m| m.ready(cx.registry, cx.now, token));
        self.log_milter_warnings();
        if let Some(v) = v {
            self.milter_decided(cx, pool, v);
        }
    }

    /// Milters past their deadline; true if one was.
    pub(super) fn milters_expired(&mut self, cx: &mut Cx<'_>, pool: &mut Pool) -> bool {
        if self.milter_deadline().is_none_or(|d| d > cx.now) {
            return false;
        }
        let v = self
            .milters
            .as_mut()
            .and_then(|m| m.expired(cx.registry, cx.now));
        self.log_milter_warnings();
        if let Some(v) = v {
            self.milter_decided(cx, pool, v);
        }
        true
    }

    /// MAIL FROM passed smtpd's checks: the milters' turn, or 250.
    pub(super) fn sender_accepted(
        &mut self,
        cx: &mut Cx<'_>,
        pool: &mut Pool,
        from: &str,
        params: &[String],
    ) {
        if self.milters.is_none() {
            let _ = self
                .session
                .decide(Reply::enhanced(250, StatusCode::SENDER_OK, "Ok"));
            return;
        }
        let helo = self.session.helo_name().unwrap_or("").to_string();
        let helo_macros = self.milter_macros(Vec::new());
        let macros = self.milter_macros(vec![
            ("{mail_addr}", from.to_string()),
            ("{mail_host}", domain(from)),
            (
                "{mail_mailer}",
                if from.is_empty() { "local" } else { "smtp" }.into(),
            ),
        ]);
        let mut args = vec![format!("<{from}>")];
        args.extend(params.iter().cloned());
        self.milter_wait = Some(MilterWait::Mail);
        let m = self.milters.as_mut().expect("checked above");
        // HELO once per name, just before the MAIL FROM it precedes.
        if self.milter_helo.as_deref() != Some(helo.as_str()) {
            m.helo(cx.registry, cx.now, helo_macros, &helo);
            self.milter_helo = Some(helo);
        }
        let v = m.mail(cx.registry, cx.now, macros, args);
        self.log_milter_warnings();
        if let Some(v) = v {
            self.milter_decided(cx, pool, v);
        }
    }

    /// A recipient passed smtpd's checks: the milters' turn, or 250.
    pub(super) fn recipient_accepted(&mut self, cx: &mut Cx<'_>, pool: &mut Pool, rcpt: Recipient) {
        if self.milters.is_none() {
            self.txn.recipients.push(rcpt);
            let _ = self
                .session
                .decide(Reply::enhanced(250, StatusCode::RECIPIENT_OK, "Ok"));
            return;
        }
        let macros = self.milter_macros(vec![
            ("{rcpt_addr}", rcpt.address.clone()),
            ("{rcpt_host}", domain(&rcpt.address)),
            ("{rcpt_mailer}", "smtp".into()),
        ]);
        let mut args = vec![format!("<{}>", rcpt.address)];
        args.extend(rcpt_args(&rcpt));
        let m = self.milters.as_mut().expect("checked above");
        let v = m.rcpt(cx.registry, cx.now, macros, args);
        self.log_milter_warnings();
        self.milter_wait = Some(MilterWait::Rcpt(rcpt));
        if let Some(v) = v {
            self.milter_decided(cx, pool, v);
        }
    }

    /// A command smtpd does not know: the milters hear it and a
    /// temporary refusal of theirs replaces the 502, as Postfix does
    /// (a permanent one does not: smtpd's own 502 is the more precise).
    pub(super) fn unknown_command(&mut self, cx: &mut Cx<'_>, pool: &mut Pool, line: &str) {
        if self.milters.is_none() {
            let _ = self.session.decide(unrecognized());
            return;
        }
        let macros = self.milter_macros(Vec::new());
        let m = self.milters.as_mut().expect("checked above");
        let v = m.unknown(cx.registry, cx.now, macros, line);
        self.log_milter_warnings();
        self.milter_wait = Some(MilterWait::Unknown);
        if let Some(v) = v {
            self.milter_decided(cx, pool, v);
        }
    }

    /// DATA: the milters hear of it (their verdict counts at the end).
    pub(super) fn milter_data(&mut self, cx: &mut Cx<'_>) {
        if self.milters.is_none() {
            return;
        }
        let macros = self.milter_macros(Vec::new());
        if let Some(m) = self.milters.as_mut() {
            m.data(cx.registry, cx.now, &macros);
        }
        self.log_milter_warnings();
    }

    /// Content as it streams to cleanup.
    pub(super) fn milter_content(&mut self, cx: &mut Cx<'_>, bytes: &[u8]) {
        if self.milters.is_none() {
            return;
        }
        let macros = self.milter_macros(Vec::new());
        if let Some(m) = self.milters.as_mut() {
            m.content(cx.registry, cx.now, &macros, bytes);
        }
        self.log_milter_warnings();
    }

    /// The end of the content: the milters' verdict first, if any.
    pub(super) fn end_of_message(&mut self, cx: &mut Cx<'_>, pool: &mut Pool) {
        if self.milters.is_none() {
            self.send_end(cx, pool);
            return;
        }
        let macros = self.milter_macros(Vec::new());
        let m = self.milters.as_mut().expect("checked above");
        let v = m.end_of_message(cx.registry, cx.now, macros);
        self.log_milter_warnings();
        self.milter_wait = Some(MilterWait::Eom);
        if let Some(v) = v {
            self.milter_decided(cx, pool, v);
        }
    }

    /// The transaction was abandoned.
    pub(super) fn milter_abort(&mut self, cx: &mut Cx<'_>) {
        self.milter_wait = None;
        if let Some(m) = self.milters.as_mut() {
            m.abort(cx.registry, cx.now);
        }
        self.log_milter_warnings();
    }

    /// The session ends.
    pub(super) fn close_milters(&mut self, cx: &mut Cx<'_>) {
        if let Some(m) = self.milters.as_mut() {
            m.close(cx.registry);
        }
    }

    /// The milters' verdict on what the session waits for.
    fn milter_decided(&mut self, cx: &mut Cx<'_>, pool: &mut Pool, v: Verdict) {
        match self.milter_wait.take() {
            Some(MilterWait::Mail) => self.mail_verdict(v),
            Some(MilterWait::Rcpt(r)) => self.rcpt_verdict(r, v),
            Some(MilterWait::Eom) => self.eom_verdict(cx, pool, v),
            Some(MilterWait::Unknown) => {
                let reply = match v {
                    Verdict::Tempfail(_) => refusal(&v),
                    _ => unrecognized(),
                };
                let _ = self.session.decide(reply);
            }
            None => {}
        }
    }

    fn mail_verdict(&mut self, v: Verdict) {
        match v {
            Verdict::Continue | Verdict::Accept => {
                let _ = self
                    .session
                    .decide(Reply::enhanced(250, StatusCode::SENDER_OK, "Ok"));
            }
            Verdict::Discard => {
                self.txn.discard = true;
                let _ = self
                    .session
                    .decide(Reply::enhanced(250, StatusCode::SENDER_OK, "Ok"));
            }
            refused => {
                let reply = refusal(&refused);
                self.log_refusal("MAIL", &reply, None);
                let _ = self.session.decide(reply);
            }
        }
    }

    fn rcpt_verdict(&mut self, rcpt: Recipient, v: Verdict) {
        match v {
            Verdict::Continue | Verdict::Accept | Verdict::Discard => {
                self.txn.discard |= v == Verdict::Discard;
                self.txn.recipients.push(rcpt);
                let _ = self
                    .session
                    .decide(Reply::enhanced(250, StatusCode::RECIPIENT_OK, "Ok"));
            }
            refused => {
                let reply = refusal(&refused);
                self.log_refusal("RCPT", &reply, Some(&rcpt.address));
                let _ = self.session.decide(reply);
            }
        }
    }

    fn eom_verdict(&mut self, cx: &mut Cx<'_>, pool: &mut Pool, v: Verdict) {
        let qid = self.txn.queue_id.clone().unwrap_or_default();
        match v {
            Verdict::Continue | Verdict::Accept => {
                let edits: Vec<ipc::cleanup::Edit> = self
                    .milters
                    .as_mut()
                    .map(|m| m.take_edits())
                    .unwrap_or_default()
                    .into_iter()
                    .map(ipc::cleanup::Edit::from)
                    .collect();
                if !edits.is_empty() && !self.send_edits(cx, pool, edits) {
                    return;
                }
                self.send_end(cx, pool);
            }
            Verdict::Discard => {
                msg_info!(
                    "{qid}: milter-discard: END-OF-MESSAGE from {}: milter triggers DISCARD action; from=<{}>",
                    self.client_label(),
                    self.txn.sender
                );
                self.abort_link_txn(cx, pool);
                let _ = self.session.decide(Reply::enhanced(
                    250,
                    StatusCode::OK,
                    format!("Ok: queued as {qid}"),
                ));
            }
            refused => {
                let reply = refusal(&refused);
                self.log_refusal("END-OF-MESSAGE", &reply, None);
                self.abort_link_txn(cx, pool);
                let _ = self.session.decide(reply);
            }
        }
    }

    /// The milters' changes to cleanup, in frames within its limits; false
    /// (the session answered 451) if the link failed.
    fn send_edits(
        &mut self,
        cx: &mut Cx<'_>,
        pool: &mut Pool,
        edits: Vec<ipc::cleanup::Edit>,
    ) -> bool {
        use ipc::cleanup::Edit;
        let mut frames: Vec<Vec<Edit>> = vec![Vec::new()];
        let mut size = 0;
        for e in edits {
            let pieces = match e {
                Edit::ReplaceBody { bytes } if bytes.len() > MAX_CHUNK => bytes
                    .chunks(MAX_CHUNK)
                    .map(|c| Edit::ReplaceBody { bytes: c.to_vec() })
                    .collect(),
                e => vec![e],
            };
            for p in pieces {
                let n = match &p {
                    Edit::ReplaceBody { bytes } => bytes.len(),
                    Edit::Header(h) => h.size(),
                    _ => 256,
                };
                if size + n > MAX_CHUNK && !frames.last().is_some_and(Vec::is_empty) {
                    frames.push(Vec::new());
                    size = 0;
                }
                size += n;
                frames.last_mut().expect("one frame at least").push(p);
            }
        }
        let Some(held) = self.link.as_mut() else {
            return false;
        };
        for edits in frames {
            if let Err(e) = held.link.send_later(&Request::Edits { edits }) {
                daemon::msg_warn!("cleanup link: {e}");
                held.waiting = Some((0, super::Waiting::Queued, cx.now));
                self.break_link(cx, pool);
                return false;
            }
        }
        true
    }

    fn log_refusal(&self, stage: &str, reply: &Reply, to: Option<&str>) {
        let enh = reply.enhanced.map(|e| format!(" {e}")).unwrap_or_default();
        let to = to.map(|t| format!(" to=<{t}>")).unwrap_or_default();
        msg_info!(
            "{}: milter-reject: {stage} from {}: {}{enh} {}; from=<{}>{to} proto={} helo=<{}>",
            self.txn.queue_id.as_deref().unwrap_or("NOQUEUE"),
            self.client_label(),
            reply.code,
            reply.text(),
            self.txn.sender,
            if self.session.is_esmtp() {
                "ESMTP"
            } else {
                "SMTP"
            },
            self.session.helo_name().unwrap_or("")
        );
    }
}

/// MAIL FROM's ESMTP parameters as milters get them: every one the client
/// gave (Postfix hands a milter the command's arguments), in the form
/// Sluice's SMTP client sends them on.
pub(super) fn mail_args(p: &smtp_proto::command::MailParams) -> Vec<String> {
    let mut s = String::new();
    smtp_proto::client::write_mail_params(p, &mut s);
    s.split_whitespace().map(String::from).collect()
}

/// RCPT TO's ESMTP parameters (NOTIFY, ORCPT) as milters get them.
fn rcpt_args(r: &Recipient) -> Vec<String> {
    let mut s = String::new();
    let p = smtp_proto::command::RcptParams::of(r.notify, r.orcpt.as_deref());
    smtp_proto::client::write_rcpt_params(&p, &mut s);
    s.split_whitespace().map(String::from).collect()
}

/// smtpd's answer to a command it does not know.
fn unrecognized() -> Reply {
    smtp_proto::CommandError::Unrecognized.reply()
}

/// The domain part of an address (the `{mail_host}` and `{rcpt_host}` macros).
fn domain(address: &str) -> String {
    address
        .rsplit_once('@')
        .map(|(_, d)| d.to_string())
        .unwrap_or_default()
}

/// The SMTP reply for a milter's refusal: its own, or Postfix's words.
fn refusal(v: &Verdict) -> Reply {
    let (own, code, enh, text) = match v {
        Verdict::Tempfail(own) => (
            own,
            451,
            StatusCode::known(4, 7, 1),
            "Service unavailable - try again later",
        ),
        Verdict::Reject(own) => (own, 550, StatusCode::known(5, 7, 1), "Command rejected"),
        _ => panic!("smtpd::milter: {v:?} is no refusal"),
    };
    // The same parser as cleanup's, so a verdict reads the same at RCPT
    // and at the end of data.
    match own
        .as_deref()
        .and_then(|own| Refusal::from_milter_reply(own, (7, 1)))
    {
        Some(r) => Reply::from(r),
        None => Reply::enhanced(code, enh, text),
    }
}
