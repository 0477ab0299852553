//! Writing a message's content to its draft: the header block cleanup
//! makes (Received:, the missing headers), content held for milters and
//! written at End with their changes, and the DKIM signature's place.

use std::borrow::Cow;
use std::time::{SystemTime, UNIX_EPOCH};

use daemon::{msg_info, msg_warn};
use ipc::cleanup::Origin;
use mail::{Refusal, StatusCode};
use queue::Spool;

use super::{write_error, Msg};
use crate::checks;
use crate::dkim::Dkim;
use crate::headers::{self, Fed};
use crate::milter;

/// What `header_block` needs of the server's settings.
pub(super) struct HeaderCtx<'a> {
    pub(super) hostname: &'a str,
    pub(super) origin_domain: &'a str,
    pub(super) always_add: bool,
    pub(super) id_headers: &'a headers::IdHeaders,
    /// `hopcount_limit`: Received: headers (ours included) that make a
    /// message a loop; 0: no limit.
    pub(super) hop_limit: usize,
    /// `message_drop_headers`: removed from every message.
    pub(super) drop: &'a [String],
    /// `header_size_limit`: longer headers are cut.
    pub(super) header_limit: usize,
}

/// Writes a held message (see `milter.rs`): its headers as the milters
/// changed them behind Received:, then its body or their replacement,
/// signed as the milters left it when DKIM signing applies.
pub(super) fn write_held(
    spool: &Spool,
    dkim: Option<&Dkim>,
    size_limit: u64,
    m: &mut Msg,
    ctx: &HeaderCtx<'_>,
) {
    let Some(mut held) = m.held.take() else {
        return;
    };
    let section = held
        .headers
        .take()
        .or_else(|| m.headers.finish())
        .unwrap_or_default();
    let section = milter::edit_headers(&section, &held.edits);
    let head = header_block(m, &section, ctx);
    start_signing(dkim, spool, m, &head);
    write(spool, m, &head, size_limit);
    let body = match held.replacement() {
        Some(b) => milter::wire_body(&b),
        None => std::mem::take(&mut held.body),
    };
    if let Some(s) = m.sign.as_mut() {
        // As when streamed: the body starts after the empty line.
        s.body(body.strip_prefix(b"\r\n").unwrap_or(&body));
    }
    write(spool, m, &body, size_limit);
    // Kept for the envelope changes, made after the address mapping.
    held.body = Vec::new();
    held.edits
        .retain(|e| !matches!(e, ipc::cleanup::Edit::ReplaceBody { .. }));
    m.held = Some(held);
}

/// Holds content of a message the milters may change, within the size limit.
pub(super) fn hold_content(m: &mut Msg, bytes: &[u8], size_limit: u64) {
    let Some(h) = m.held.as_mut() else { return };
    if m.error.is_some() {
        return;
    }
    let held = h.body.len() + h.headers.as_ref().map_or(0, Vec::len) + bytes.len();
    if size_limit > 0 && held as u64 > size_limit + 64 * 1024 {
        m.error = Some(Refusal::new(
            552,
            StatusCode::MESSAGE_TOO_BIG,
            "Message size exceeds fixed limit",
        ));
        return;
    }
    match m.headers.feed(bytes) {
        Fed::Holding => {}
        Fed::Through => {
            let bytes = scan(m, bytes);
            if let Some(h) = m.held.as_mut() {
                h.body.extend_from_slice(&bytes);
            }
        }
        Fed::Complete { headers, rest } => {
            scan_primary(m, &headers);
            let rest = scan(m, &rest).into_owned();
            if let Some(h) = m.held.as_mut() {
                h.headers = Some(headers);
                h.body.extend_from_slice(&rest);
            }
        }
    }
    settle_checks(m);
}

/// The primary headers as they came, for the MIME walk of the body when
/// content checks are set.
pub(super) fn scan_primary(m: &mut Msg, headers: &[u8]) {
    if let Some(c) = &m.checks {
        m.body_scan.primary(c, headers);
    }
}

/// Body content through the content checks, when set; the bytes as they
/// are else.
fn scan<'a>(m: &mut Msg, bytes: &'a [u8]) -> Cow<'a, [u8]> {
    match &m.checks {
        Some(c) => m.body_scan.feed(c, bytes, &mut m.verdict),
        _ => bytes.into(),
    }
}

/// Body content through body_checks, with what they decided logged.
pub(super) fn scan_body<'a>(m: &mut Msg, bytes: &'a [u8]) -> Cow<'a, [u8]> {
    let out = scan(m, bytes);
    settle_checks(m);
    out
}

/// At the end of the content: the last line body_checks held back for
/// its line end, checked and written (or held, for milters).
pub(super) fn scan_body_end(spool: &Spool, m: &mut Msg, size_limit: u64) {
    let tail = match &m.checks {
        Some(c) => m.body_scan.finish(c, &mut m.verdict),
        _ => return,
    };
    settle_checks(m);
    if tail.is_empty() {
        return;
    }
    if let Some(h) = m.held.as_mut() {
        h.body.extend_from_slice(&tail);
        return;
    }
    if let Some(s) = m.sign.as_mut() {
        s.body(&tail);
    }
    write(spool, m, &tail, size_limit);
}

/// Logs what header_checks and body_checks matched, as Postfix's cleanup
/// does, and makes a REJECT the message's error.
fn settle_checks(m: &mut Msg) {
    if m.verdict.hits.is_empty() {
        return;
    }
    let env = &m.envelope;
    let origin = match &m.origin {
        Origin::Smtp { .. } => format!(
            "{}[{}]",
            env.client_name.as_deref().unwrap_or("unknown"),
            env.client_addr.as_deref().unwrap_or("unknown")
        ),
        Origin::Local { .. } => "local".to_string(),
    };
    let mut tail = format!("from=<{}>", env.sender);
    if let Some(r) = env.recipients.first() {
        tail.push_str(&format!(" to=<{}>", r.address));
    }
    if let Origin::Smtp { protocol, .. } = &m.origin {
        tail.push_str(&format!(" proto={protocol}"));
    }
    if let Some(helo) = &env.helo {
        tail.push_str(&format!(" helo=<{helo}>"));
    }
    for hit in m.verdict.hits.drain(..) {
        // A `$n` result in the action's text is the client's too.
        let text = if hit.text.is_empty() {
            String::new()
        } else {
            let t: String = hit
                .text
                .chars()
                .map(|c| if c.is_control() { '?' } else { c })
                .collect();
            format!(": {t}")
        };
        // The line is the client's: no control character reaches the log.
        let line: String = hit
            .line
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        let entry = format!(
            "{}: {}: {} {line} from {origin}; {tail}{text}",
            m.id, hit.action, hit.class
        );
        if hit.warning {
            msg_warn!("{entry}");
        } else {
            msg_info!("{entry}");
        }
    }
    if m.error.is_none() {
        if let Some(r) = &m.verdict.reject {
            m.error = Some(r.clone());
            m.check_rejected = true;
        }
    }
}

/// Appends content to the draft, remembering the first failure.
pub(super) fn write(spool: &Spool, m: &mut Msg, bytes: &[u8], size_limit: u64) {
    if m.error.is_some() {
        return;
    }
    let Some(d) = m.draft.as_mut() else { return };
    if size_limit > 0 && d.len() + bytes.len() as u64 > size_limit + 64 * 1024 {
        // smtpd enforces the limit on what the client sends; this catches
        // local submissions, with room for the headers cleanup adds.
        m.error = Some(Refusal::new(
            552,
            StatusCode::MESSAGE_TOO_BIG,
            "Message size exceeds fixed limit",
        ));
        return;
    }
    if let Err(e) = d.append(spool, bytes) {
        msg_warn!("{}: {e}", m.id);
        m.error = Some(write_error(e.is_disk_full()));
    }
}

/// Starts the message's DKIM signature over its final header block, when
/// it is to be signed, and reserves the signature's place at the front.
pub(super) fn start_signing(dkim: Option<&Dkim>, spool: &Spool, m: &mut Msg, head: &[u8]) {
    let Some(dkim) = dkim else { return };
    if m.error.is_some() {
        return;
    }
    let time = m
        .arrival
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let Some(sign) = dkim.start(m.id, &m.origin, &m.envelope, head, time) else {
        return;
    };
    let Some(draft) = m.draft.as_mut() else {
        return;
    };
    if let Err(e) = draft.reserve(spool, sign.len()) {
        msg_warn!("{}: {e}", m.id);
        m.error = Some(write_error(e.is_disk_full()));
        return;
    }
    m.sign = Some(sign);
}

/// Makes the signature and writes it into its reserved place.
pub(super) fn finish_signing(m: &mut Msg, sign: ::dkim::Signing) {
    let (s, d) = (sign.key().selector.clone(), sign.key().domain.clone());
    let field = match sign.finish() {
        Ok(f) => f,
        Err(e) => {
            msg_warn!("{}: DKIM signing (s={s}, d={d}): {e}", m.id);
            m.error = Some(Refusal::new(
                451,
                StatusCode::SYSTEM_TEMP,
                "Error: DKIM signing failed",
            ));
            return;
        }
    };
    let Some(draft) = m.draft.as_mut() else {
        return;
    };
    match draft.fill(&field) {
        Ok(()) => msg_info!("{}: DKIM-Signature field added (s={s}, d={d})", m.id),
        Err(e) => {
            msg_warn!("{}: {e}", m.id);
            m.error = Some(write_error(e.is_disk_full()));
        }
    }
}

/// Refuses a message whose header section holds `hopcount_limit`
/// Received: headers with the one cleanup adds (a mail loop).
pub(super) fn check_hops(m: &mut Msg, headers: &[u8], hop_limit: usize) {
    check_hop_count(m, headers::inspect(headers).received, hop_limit);
}

/// Postfix's cleanup counts the Received: header its smtpd added too:
/// with the one cleanup writes, the limit is reached at `hop_limit`.
fn check_hop_count(m: &mut Msg, received: usize, hop_limit: usize) {
    if hop_limit > 0 && received + 1 >= hop_limit && m.error.is_none() {
        msg_warn!("{}: message rejected: hopcount exceeded", m.id);
        m.error = Some(Refusal::new(
            554,
            StatusCode::known(5, 4, 0),
            "Error: too many hops",
        ));
    }
}

/// A full name (`sendmail -F`, the password file's) as a From: phrase:
/// control characters out, quoted when it holds RFC 5322 specials, RFC 2047
/// encoded when it holds UTF-8, as Postfix's cleanup writes it; `None` when
/// nothing is left.
fn display_name(name: &str) -> Option<String> {
    let clean: String = name
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let clean = clean.trim();
    if clean.is_empty() {
        return None;
    }
    if !clean.is_ascii() {
        // Encoded words of at most 75 characters (RFC 2047 §2): 45 bytes
        // of text each, cut between characters.
        let mut words = Vec::new();
        let mut chunk = String::new();
        for c in clean.chars() {
            if chunk.len() + c.len_utf8() > 45 {
                words.push(std::mem::take(&mut chunk));
            }
            chunk.push(c);
        }
        words.push(chunk);
        let encoded: Vec<String> = words
            .iter()
            .map(|w| format!("=?UTF-8?B?{}?=", dkim::base64::encode(w.as_bytes())))
            .collect();
        return Some(encoded.join(" "));
    }
    const SPECIALS: &[char] = &[
        '(', ')', '<', '>', '[', ']', ':', ';', '@', '\\', ',', '.', '"',
    ];
    if !clean.contains(SPECIALS) {
        return Some(clean.to_string());
    }
    let escaped = clean.replace('\\', "\\\\").replace('"', "\\\"");
    Some(format!("\"{escaped}\""))
}

/// Received: plus the client's headers plus what is missing.
pub(super) fn header_block(m: &mut Msg, headers: &[u8], ctx: &HeaderCtx<'_>) -> Vec<u8> {
    let HeaderCtx {
        hostname,
        origin_domain,
        always_add,
        id_headers,
        hop_limit,
        drop,
        header_limit,
    } = *ctx;
    let headers = &*checks::truncate_headers(headers, header_limit);
    // header_checks first: a header it deletes is not there for what
    // follows (a Message-ID: it drops is added again, as in Postfix).
    let checked;
    let headers = match m.checks.clone() {
        Some(c) => {
            checked = checks::check_headers(&c, headers, &mut m.verdict);
            settle_checks(m);
            &*checked
        }
        None => headers,
    };
    // After header_checks and before the milters, as Postfix's cleanup.
    let kept = headers::drop_named(headers, drop);
    let (headers, ids) = headers::take_ids(&kept, id_headers);
    let headers = &*headers;
    for (what, v) in [("tenant", &ids.tenant), ("job", &ids.job)] {
        if let Some(Err(bad)) = v {
            msg_info!(
                "{}: ignoring {what} id header value \"{bad}\" (empty, over {} bytes, or with control characters)",
                m.id,
                mail::MAX_SHAPING_ID
            );
        }
    }
    m.ids = ids;
    let seen = headers::inspect(headers);
    check_hop_count(m, seen.received, hop_limit);
    let date = sys::time::rfc5322_date(m.arrival);
    let mut out = Vec::with_capacity(headers.len() + 512);
    let env = &m.envelope;
    let for_rcpt = match env.recipients.as_slice() {
        [one] => format!("\r\n\tfor <{}>", one.address),
        _ => String::new(),
    };
    match &m.origin {
        Origin::Smtp {
            protocol,
            authenticated_sender,
            ..
        } => {
            let helo = env.helo.as_deref().unwrap_or("unknown");
            let name = env.client_name.as_deref().unwrap_or("unknown");
            let addr = env.client_addr.as_deref().unwrap_or("unknown");
            let tls = env
                .tls
                .as_deref()
                .map(|t| format!("\r\n\t(using {t})"))
                .unwrap_or_default();
            // smtpd_sasl_authenticated_header, in Postfix's words.
            let auth = authenticated_sender
                .as_deref()
                .map(|u| format!("\r\n\t(Authenticated sender: {u})"))
                .unwrap_or_default();
            out.extend_from_slice(
                format!(
                    "Received: from {helo} ({name} [{addr}]){auth}\r\n\tby {hostname} (Sluice) with {protocol} id {}{tls}{for_rcpt};\r\n\t{date}\r\n",
                    m.id
                )
                .as_bytes(),
            );
        }
        Origin::Local { user, .. } => {
            let uid = sys::privilege::lookup_user(user)
                .ok()
                .flatten()
                .map(|u| u.uid.to_string())
                .unwrap_or_default();
            out.extend_from_slice(
                format!("Received: by {hostname} (Sluice, from userid {uid})\r\n\tid {}{for_rcpt}; {date}\r\n", m.id)
                    .as_bytes(),
            );
        }
    }
    out.extend_from_slice(headers);
    let local = matches!(m.origin, Origin::Local { .. });
    if local || always_add {
        if seen.message_id.is_none() {
            let mid = format!("<{}.{}@{hostname}>", compact_time(m.arrival), m.id);
            out.extend_from_slice(format!("Message-Id: {mid}\r\n").as_bytes());
            msg_info!("{}: message-id={mid}", m.id);
        }
        if !seen.date {
            out.extend_from_slice(format!("Date: {date}\r\n").as_bytes());
        }
        if !seen.from {
            // The envelope sender, as Postfix's cleanup writes it (sendmail
            // -f sets it; the login name only gives the full name's owner).
            let sender = if env.sender.contains('@') {
                env.sender.clone()
            } else {
                format!("{}@{origin_domain}", env.sender)
            };
            let from = match (&m.origin, env.sender.is_empty()) {
                (_, true) => format!("MAILER-DAEMON@{origin_domain}"),
                (
                    Origin::Local {
                        full_name: Some(n), ..
                    },
                    false,
                ) => match display_name(n) {
                    Some(n) => format!("{n} <{sender}>"),
                    None => sender,
                },
                (_, false) => sender,
            };
            out.extend_from_slice(format!("From: {from}\r\n").as_bytes());
        }
    }
    if let Some(mid) = &seen.message_id {
        msg_info!("{}: message-id={mid}", m.id);
    } else if !(local || always_add) {
        msg_info!("{}: message-id=<>", m.id);
    }
    out
}

pub(super) fn compact_time(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{secs}")
}

#[cfg(test)]
mod tests {
    use super::display_name;

    #[test]
    fn a_full_name_becomes_a_safe_phrase() {
        assert_eq!(display_name("Bob Builder").as_deref(), Some("Bob Builder"));
        assert_eq!(
            display_name("Doe, John").as_deref(),
            Some("\"Doe, John\""),
            "a comma would make two mailboxes"
        );
        assert_eq!(
            display_name("a \"q\" \\ b.").as_deref(),
            Some("\"a \\\"q\\\" \\\\ b.\"")
        );
        assert_eq!(
            display_name("Bob\r\nBcc: evil@example.net").as_deref(),
            Some("\"Bob  Bcc: evil@example.net\""),
            "no header line can be injected"
        );
        assert_eq!(display_name(" \t\r\n"), None);
        assert_eq!(
            display_name("J\u{f6}rg").as_deref(),
            Some("=?UTF-8?B?SsO2cmc=?=")
        );
        let long = display_name(&"\u{e9}".repeat(60)).unwrap();
        assert!(long.split(' ').all(|w| w.len() <= 75), "{long}");
    }
}
