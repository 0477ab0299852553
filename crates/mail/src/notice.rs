//! Delivery status notifications (RFC 3464): the message itself.
//!
//! A `multipart/report; report-type=delivery-status` message: a human
//! part, the machine-readable `message/delivery-status` part
//! (Reporting-MTA, Original-Envelope-Id from ENVID, Arrival-Date, and per
//! recipient Final-Recipient, Original-Recipient from ORCPT, Action,
//! Status, Remote-MTA, Diagnostic-Code), and the original message
//! (`message/rfc822`) or only its headers (`text/rfc822-headers`) as RET
//! asks. Three kinds, as Postfix sends them: failures (the original as
//! RET asks), delay warnings and success reports (headers only). Shared by
//! qmgr (notices to the sender) and local (notices to an `owner-` alias). Everything is produced in wire format (CRLF; the
//! original is already dot-stuffed, and no generated line starts with a
//! dot).
//!
//! A message received with SMTPUTF8 gets RFC 6533's global report, as
//! Postfix decides (on the envelope's flag alone): the report part is
//! `message/global-delivery-status`, whose fields may hold UTF-8, an
//! address beyond ASCII is typed `utf-8` there (`rfc822` stays for an
//! ASCII one), the original returns as `message/global` or
//! `message/global-headers` (RFC 6532), and the human part is UTF-8. Its
//! sender then has to read it with SMTPUTF8: the caller queues the notice
//! with the flag set. In a plain report, which is ASCII, an address beyond
//! ASCII is `utf-8` in RFC 6533's `\x{HEX}` form.

use crate::Envelope;

/// One failed recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// Index in the envelope.
    pub index: u32,
    /// Enhanced status, e.g. `5.1.1`.
    pub status: crate::StatusCode,
    /// The reason as logged.
    pub reason: String,
}

/// What a notice reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Recipients failed for good (`Action: failed`).
    Failure,
    /// Recipients are still being retried (`Action: delayed`, `delay_warning_time`).
    Delay,
    /// Recipients were delivered here (`Action: delivered`) or relayed to a
    /// server without DSN (`Action: relayed`), and asked NOTIFY=SUCCESS.
    Success {
        /// `relayed` rather than `delivered`.
        relayed: bool,
    },
}

/// Where and when a notice is written.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// `myhostname`.
    pub hostname: &'a str,
    /// The notice's recipient.
    pub to: &'a str,
    /// Now, RFC 5322.
    pub date: &'a str,
    /// The failed message's arrival, RFC 5322.
    pub arrival: &'a str,
    /// For delay warnings: when retries stop (arrival + `maximal_queue_lifetime`), RFC 5322.
    pub retry_until: Option<&'a str>,
    /// The notice goes to the postmaster (a copy, or a failed notice):
    /// Postfix's `Postmaster-Subject:` then.
    pub postmaster: bool,
}

/// The failure notice, in wire format. `original` is the message as stored (wire format).
pub fn report(
    env: &Envelope,
    queue_id: &str,
    failed: &[&Failed],
    original: &[u8],
    cx: Context<'_>,
) -> Vec<u8> {
    report_of(Kind::Failure, env, queue_id, failed, original, cx)
}

/// A notice of any kind; `items` are the recipients it reports (for
/// `Delay` and `Success` their status and reason are the latest ones).
pub fn report_of(
    kind: Kind,
    env: &Envelope,
    queue_id: &str,
    items: &[&Failed],
    original: &[u8],
    cx: Context<'_>,
) -> Vec<u8> {
    let parts = parts_of(kind, env, queue_id, items, cx);
    let body = if parts.headers_only {
        header_section(original)
    } else {
        original
    };
    let mut bytes = parts.head.clone();
    bytes.extend_from_slice(body);
    bytes.extend(parts.tail(body.is_empty() || body.ends_with(b"\r\n")));
    bytes
}

/// A notice cut where the original goes, for a caller that writes a large
/// original between the parts without holding it (local's notices to an
/// alias owner): `head`, then the original ([`header_section`] of it when
/// `headers_only`), then [`Parts::tail`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parts {
    /// Everything before the original.
    pub head: Vec<u8>,
    /// Only the original's header section goes in.
    pub headers_only: bool,
    boundary: String,
}

impl Parts {
    /// Everything after the original; `ended` says whether what went in
    /// was empty or ended with CRLF (else a line end is added).
    pub fn tail(&self, ended: bool) -> Vec<u8> {
        let mut t = if ended { Vec::new() } else { b"\r\n".to_vec() };
        t.extend_from_slice(format!("\r\n--{}--\r\n", self.boundary).as_bytes());
        t
    }
}

/// The [`Parts`] of a notice of any kind (see [`report_of`]).
pub fn parts_of(
    kind: Kind,
    env: &Envelope,
    queue_id: &str,
    items: &[&Failed],
    cx: Context<'_>,
) -> Parts {
    let failed = items;
    let Context {
        hostname,
        to,
        date,
        arrival,
        retry_until,
        postmaster,
    } = cx;
    let boundary = format!("{queue_id}.{}/{hostname}", env.arrival.secs);
    let global = env.smtputf8;
    let mut out = String::new();
    let mut line = |s: &str| {
        out.push_str(s);
        out.push_str("\r\n");
    };
    line(&format!(
        "From: MAILER-DAEMON@{hostname} (Mail Delivery System)"
    ));
    line(&format!("To: {}", printable(to)));
    line(match (kind, postmaster) {
        (Kind::Failure, false) => "Subject: Undelivered Mail Returned to Sender",
        (Kind::Failure, true) => "Subject: Postmaster Copy: Undelivered Mail",
        (Kind::Delay, false) => "Subject: Delayed Mail (still being retried)",
        (Kind::Delay, true) => "Subject: Postmaster Warning: Delayed Mail",
        (Kind::Success { .. }, _) => "Subject: Successful Mail Delivery Report",
    });
    line(&format!("Date: {date}"));
    line("Auto-Submitted: auto-replied");
    line("MIME-Version: 1.0");
    line(&format!(
        "Content-Type: multipart/report; report-type=delivery-status;\r\n\tboundary=\"{boundary}\""
    ));
    line("Content-Transfer-Encoding: 8bit");
    line("");
    line("This is a MIME-encapsulated message.");
    line("");
    line(&format!("--{boundary}"));
    line("Content-Description: Notification");
    // The recipients' addresses below may be UTF-8.
    if global {
        line("Content-Type: text/plain; charset=utf-8");
        // UTF-8 is 8-bit data and must say so (Postfix does).
        line("Content-Transfer-Encoding: 8bit");
    } else {
        line("Content-Type: text/plain; charset=us-ascii");
    }
    line("");
    line(&format!("This is the mail system at host {hostname}."));
    line("");
    // Postfix's texts, so that people and their filters recognise them.
    match kind {
        Kind::Failure => {
            line("I'm sorry to have to inform you that your message could not");
            line("be delivered to one or more recipients. It's attached below.");
            line("");
            line("For further assistance, please send mail to postmaster.");
            line("");
            line("If you do so, please include this problem report. You can");
            line("delete your own text from the attached returned message.");
        }
        Kind::Delay => {
            line("####################################################################");
            line("# THIS IS A WARNING ONLY.  YOU DO NOT NEED TO RESEND YOUR MESSAGE. #");
            line("####################################################################");
            line("");
            line("Your message could not be delivered for more than the delay");
            line("warning time. It will be retried until it is too old.");
            line("");
            line("For further assistance, please send mail to postmaster.");
        }
        Kind::Success { .. } => {
            line("Your message was successfully delivered to the destination(s)");
            line("listed below. If the message was delivered to mailbox you will");
            line("receive no further notifications. Otherwise you may still receive");
            line("notifications of mail delivery errors from other systems.");
        }
    }
    line("");
    line("                   The mail system");
    line("");
    for f in failed {
        let addr = env
            .recipients
            .get(f.index as usize)
            .map(|r| r.address.as_str())
            .unwrap_or("");
        line(&format!("<{}>: {}", printable(addr), one_line(&f.reason)));
    }
    line("");
    line(&format!("--{boundary}"));
    line("Content-Description: Delivery report");
    if global {
        line("Content-Type: message/global-delivery-status");
        line("Content-Transfer-Encoding: 8bit");
    } else {
        line("Content-Type: message/delivery-status");
    }
    line("");
    line(&format!("Reporting-MTA: dns; {hostname}"));
    line(&format!("X-Sluice-Queue-ID: {queue_id}"));
    line(&format!(
        "X-Sluice-Sender: {}",
        typed("rfc822", &env.sender, global)
    ));
    if let Some(envid) = &env.envid {
        line(&format!("Original-Envelope-Id: {}", xtext_safe(envid)));
    }
    line(&format!("Arrival-Date: {arrival}"));
    for f in failed {
        let r = env.recipients.get(f.index as usize);
        let addr = r.map(|r| r.address.as_str()).unwrap_or("");
        line("");
        line(&format!(
            "Final-Recipient: {}",
            typed("rfc822", addr, global)
        ));
        if let Some(o) = r.and_then(crate::Recipient::orcpt) {
            line(&format!(
                "Original-Recipient: {}",
                typed(o.addr_type(), o.addr(), global)
            ));
        }
        line(match kind {
            Kind::Failure => "Action: failed",
            Kind::Delay => "Action: delayed",
            Kind::Success { relayed: true } => "Action: relayed",
            Kind::Success { relayed: false } => "Action: delivered",
        });
        let (remote, host) = remote_of(&f.reason);
        // A success's journal record keeps no status, only the reply
        // quoted exactly (RemoteReply::reason): its enhanced code is the
        // status the agent gave (a 250 2.6.0 is 2.6.0, as in Postfix).
        let status = match (kind, &remote) {
            (Kind::Success { .. }, Some(r)) => r
                .enhanced
                .filter(|e| u16::from(e.class()) == 2)
                .unwrap_or(f.status),
            _ => f.status,
        };
        line(&format!("Status: {status}"));
        if let Some(h) = host.filter(|h| !h.is_empty()) {
            line(&format!("Remote-MTA: dns; {}", xtext_safe(h)));
        }
        line(&format!(
            "Diagnostic-Code: {}",
            diagnostic(remote.as_ref(), &f.reason)
        ));
        if kind == Kind::Delay {
            if let Some(until) = retry_until {
                line(&format!("Will-Retry-Until: {until}"));
            }
        }
    }
    line("");
    line(&format!("--{boundary}"));
    let headers_only = env.ret == Some(crate::Ret::Hdrs) || kind != Kind::Failure;
    line(match (kind, headers_only) {
        (Kind::Failure, true) => "Content-Description: Undelivered Message Headers",
        (Kind::Failure, false) => "Content-Description: Undelivered Message",
        _ => "Content-Description: Message Headers",
    });
    line(match (global, headers_only) {
        (false, true) => "Content-Type: text/rfc822-headers",
        (false, false) => "Content-Type: message/rfc822",
        (true, true) => "Content-Type: message/global-headers",
        (true, false) => "Content-Type: message/global",
    });
    line("Content-Transfer-Encoding: 8bit");
    line("");
    Parts {
        head: out.into_bytes(),
        headers_only,
        boundary,
    }
}

/// The header lines of a wire-format message (without the empty line).
pub fn header_section(msg: &[u8]) -> &[u8] {
    if msg.starts_with(b"\r\n") {
        return &[];
    }
    match msg.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => &msg[..i + 2],
        None => msg,
    }
}

/// A reason as one line of US-ASCII, as the report declares its parts: a
/// server's reply may hold any byte (ESC, NUL, invalid UTF-8 read as
/// U+FFFD), so control characters become spaces and the rest beyond
/// ASCII `?`.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            c if c.is_control() => ' ',
            c if c.is_ascii() => c,
            _ => '?',
        })
        .collect()
}

/// An envelope address as a report's field shows it: smtpd's syntax
/// keeps control characters out, but a local submission's envelope is
/// not read by smtpd; one would add fields to the report (Postfix's
/// bounce writes `?` for it, as here).
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// An address field's value, `type; address`, as [`printable`] shows the
/// address. An address beyond ASCII is a `utf-8` one (RFC 6533), whatever
/// type named it: as it is in a global report, in the `\x{HEX}` form in a
/// plain one, which must stay ASCII (a `utf-8` address there is in that
/// form even when it is ASCII, its `+`, `=` and `\` escaped).
fn typed(addr_type: &str, addr: &str, global: bool) -> String {
    let utf8 = !addr.is_ascii() || addr_type.eq_ignore_ascii_case("utf-8");
    match (utf8, global) {
        (false, _) => format!("{addr_type}; {}", printable(addr)),
        (true, true) => format!("utf-8; {}", printable(addr)),
        (true, false) => format!("utf-8; {}", crate::orcpt::uxtext_encode(addr)),
    }
}

fn xtext_safe(s: &str) -> String {
    s.chars().filter(|c| c.is_ascii_graphic()).collect()
}

/// Where the reason of expired mail begins: the last attempt's status and
/// reason follow it, after ": ".
pub const EXPIRED: &str = "message expired (maximal_queue_lifetime)";

/// The server's reply a reason quotes, and the server: a reason the smtp
/// agent worded from a reply, alone or as the last attempt's behind
/// [`EXPIRED`] (Postfix's notice of expired mail quotes the last reply
/// too); for the agent's other session errors ("host X sent a malformed
/// reply: ..."), the server alone, as Postfix names the remote MTA of
/// any session it had.
fn remote_of(reason: &str) -> (Option<crate::RemoteReply>, Option<&str>) {
    let last = reason
        .strip_prefix(EXPIRED)
        .and_then(|r| r.strip_prefix(": "))
        .map(|r| match r.split_once(' ') {
            Some((code, rest)) if code.parse::<crate::StatusCode>().is_ok() => rest,
            _ => r,
        })
        .unwrap_or(reason);
    let host = last
        .strip_prefix("host ")
        .or_else(|| last.strip_prefix("delivery via "))
        .and_then(|r| r.split_once(' '))
        .and_then(|(relay, _)| relay.split_once('['))
        .map(|(h, _)| h)
        // A DNS name, or an IPv6 literal's address (relayhost = [ipv6:...]).
        .filter(|h| {
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
        });
    match crate::RemoteReply::parse_reason(last) {
        Some((r, _)) => (Some(r), host),
        None => (None, host),
    }
}

/// `smtp; 550 5.1.1 text` (the reply as the server sent it, without the
/// command it answered, as Postfix's bounce(8) writes it) when the smtp
/// agent worded the reason from a server's reply, else `X-Sluice; reason`.
fn diagnostic(remote: Option<&crate::RemoteReply>, reason: &str) -> String {
    match remote {
        Some(r) => format!("smtp; {}", one_line(&r.said())),
        None => format!("X-Sluice; {}", one_line(reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Notify as N, Recipient};

    /// The context every test reports in, to alice.
    fn cx() -> Context<'static> {
        Context {
            hostname: "mx.test.example",
            to: "alice@example.com",
            date: "now",
            arrival: "then",
            retry_until: None,
            postmaster: false,
        }
    }

    fn env() -> Envelope {
        Envelope {
            sender: "alice@example.com".into(),
            recipients: vec![
                Recipient {
                    address: "bob@remote.example".into(),
                    notify: N::Default,
                    orcpt: Some("rfc822;bob@orig.example".into()),
                },
                Recipient {
                    address: "quiet@remote.example".into(),
                    notify: N::Never,
                    orcpt: None,
                },
            ],
            envid: Some("ENV123".into()),
            ret: Some(crate::Ret::Hdrs),
            ..Envelope::default()
        }
    }

    #[test]
    fn the_report_has_its_fields() {
        let e = env();
        let failed = Failed {
            index: 0,
            status: crate::StatusCode::known(5, 1, 1),
            reason: "host mx.remote.example[192.0.2.1]:25 said: 550 5.1.1 no such user (in reply to RCPT TO command)".into(),
        };
        let w = [&failed];
        let msg = b"Subject: hi\r\nFrom: alice@example.com\r\n\r\nbody line\r\n";
        let r = String::from_utf8(report(&e, "QID1", &w, msg, cx())).unwrap();
        for needle in [
            "Content-Type: multipart/report; report-type=delivery-status;",
            "Reporting-MTA: dns; mx.test.example",
            "Original-Envelope-Id: ENV123",
            "Final-Recipient: rfc822; bob@remote.example",
            "Original-Recipient: rfc822; bob@orig.example",
            "Action: failed",
            "Status: 5.1.1",
            "Remote-MTA: dns; mx.remote.example",
            "Diagnostic-Code: smtp; 550 5.1.1 no such user",
            "Content-Type: text/rfc822-headers",
            "Subject: hi",
        ] {
            assert!(r.contains(needle), "missing {needle:?} in\n{r}");
        }
        assert!(!r.contains("body line"), "RET=HDRS returns headers only");
        assert!(r.ends_with("--\r\n"));
        assert!(
            !r.lines().any(|l| l.starts_with('.')),
            "no line needs dot-stuffing"
        );
    }

    /// A server's reply holding control characters and bytes beyond
    /// ASCII reaches the report's human-readable part and Diagnostic-Code
    /// as one line of printable US-ASCII.
    #[test]
    fn a_hostile_reply_is_quoted_as_printable_ascii() {
        let e = env();
        let failed = Failed {
            index: 0,
            status: crate::StatusCode::known(5, 1, 1),
            reason: "host mx.remote.example[192.0.2.1]:25 said: 550 5.1.1 no\u{1b}[2J such\u{0} us\u{e9}r\u{fffd} (in reply to RCPT TO command)".into(),
        };
        let r = String::from_utf8(report(
            &e,
            "QID1",
            &[&failed],
            b"Subject: hi\r\n\r\nbody\r\n",
            cx(),
        ))
        .unwrap();
        assert!(
            r.contains("Diagnostic-Code: smtp; 550 5.1.1 no [2J such  us?r?"),
            "{r}"
        );
        for l in r.split("\r\n") {
            assert!(
                l.chars().all(|c| c == '\t' || !c.is_control()) && l.is_ascii(),
                "{l:?}"
            );
        }
    }

    /// An envelope address holding CR LF (a local submission's, which
    /// smtpd never read) adds no field to the report, nor to its header.
    #[test]
    fn a_hostile_envelope_address_adds_no_field() {
        let mut e = env();
        e.sender = "alice@example.com\r\nX-Injected: sender".into();
        e.recipients[0].address = "bob\r\nAction: delivered\r\nX-Injected: rcpt@r.example".into();
        let failed = Failed {
            index: 0,
            status: crate::StatusCode::known(5, 1, 1),
            reason: "no such user".into(),
        };
        // The notice goes to the sender: its To: field too.
        let cx = Context {
            to: "alice@example.com\r\nBcc: x@evil.example",
            ..cx()
        };
        let r =
            String::from_utf8(report(&e, "QID1", &[&failed], b"Subject: hi\r\n\r\n", cx)).unwrap();
        assert!(
            !r.split("\r\n").any(|l| l.starts_with("X-Injected")
                || l.starts_with("Bcc:")
                || l == "Action: delivered"),
            "{r}"
        );
        assert!(
            r.contains(
                "Final-Recipient: rfc822; bob??Action: delivered??X-Injected: rcpt@r.example"
            ),
            "{r}"
        );
    }

    /// An ORCPT holding CR LF (in an old journal, from before smtpd refused
    /// it) must not add fields to the report: it is left out.
    #[test]
    fn a_hostile_orcpt_adds_no_field() {
        let mut e = env();
        e.recipients[0].orcpt = Some("rfc822;bob@orig.example\r\nX-Injected: yes".into());
        let failed = Failed {
            index: 0,
            status: crate::StatusCode::known(5, 1, 1),
            reason: "no such user".into(),
        };
        let cx = cx();
        let r = String::from_utf8(report_of(Kind::Failure, &e, "Q", &[&failed], b"", cx)).unwrap();
        assert!(
            r.contains("Final-Recipient: rfc822; bob@remote.example"),
            "{r}"
        );
        assert!(
            !r.contains("X-Injected") && !r.contains("Original-Recipient"),
            "{r}"
        );
    }

    /// A success report quotes the reply that accepted the recipient as
    /// Postfix's does: its server, its code as the Status, the reply as the
    /// Diagnostic-Code. A local delivery's reason is no server's reply.
    #[test]
    fn a_success_report_quotes_the_servers_acceptance() {
        let fields = |reason: &str| {
            let ok = Failed {
                index: 0,
                // What the journal's Succeeded record gives back: no status.
                status: crate::StatusCode::OK,
                reason: reason.into(),
            };
            let cx = cx();
            let kind = Kind::Success { relayed: true };
            let r = String::from_utf8(report_of(kind, &env(), "Q", &[&ok], b"\r\n", cx)).unwrap();
            r.split("\r\n")
                .filter(|l| {
                    ["<bob@", "Status:", "Remote-MTA:", "Diagnostic-Code:"]
                        .iter()
                        .any(|p| l.starts_with(p))
                })
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            fields("delivery via mx.remote.example[192.0.2.1]:25: 250 2.6.0 queued as 4Q"),
            [
                "<bob@remote.example>: delivery via mx.remote.example[192.0.2.1]:25: 250 2.6.0 queued as 4Q",
                "Status: 2.6.0",
                "Remote-MTA: dns; mx.remote.example",
                "Diagnostic-Code: smtp; 250 2.6.0 queued as 4Q",
            ]
        );
        assert_eq!(
            fields("delivery via mx.remote.example[192.0.2.1]:25: 250 Ok"),
            [
                "<bob@remote.example>: delivery via mx.remote.example[192.0.2.1]:25: 250 Ok",
                "Status: 2.0.0",
                "Remote-MTA: dns; mx.remote.example",
                "Diagnostic-Code: smtp; 250 Ok",
            ]
        );
        assert_eq!(
            fields("delivered to mailbox"),
            [
                "<bob@remote.example>: delivered to mailbox",
                "Status: 2.0.0",
                "Diagnostic-Code: X-Sluice; delivered to mailbox",
            ]
        );
    }

    /// The Remote-MTA and Diagnostic-Code lines of a failure notice for `reason`.
    fn remote_fields(reason: &str) -> Vec<String> {
        let failed = Failed {
            index: 0,
            status: crate::StatusCode::known(5, 0, 0),
            reason: reason.into(),
        };
        let cx = cx();
        let r = String::from_utf8(report(&env(), "Q", &[&failed], b"\r\n", cx)).unwrap();
        r.split("\r\n")
            .filter(|l| l.starts_with("Remote-MTA:") || l.starts_with("Diagnostic-Code:"))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_diagnostic_code_is_the_servers_reply_as_sent() {
        let table: [(&str, &[&str]); 8] = [
            (
                "host mx.remote.example[192.0.2.1]:25 said: 550 5.1.1 no such user (in reply to RCPT TO command)",
                &["Remote-MTA: dns; mx.remote.example", "Diagnostic-Code: smtp; 550 5.1.1 no such user"],
            ),
            // No enhanced code sent: none made up in the quote.
            (
                "host mx.remote.example[192.0.2.1]:25 said: 550 no such user (in reply to end of DATA command)",
                &["Remote-MTA: dns; mx.remote.example", "Diagnostic-Code: smtp; 550 no such user"],
            ),
            (
                "host mx.remote.example[192.0.2.1]:25 refused to talk to me: 554 5.7.1 [TS01] go away",
                &["Remote-MTA: dns; mx.remote.example", "Diagnostic-Code: smtp; 554 5.7.1 [TS01] go away"],
            ),
            // A local reason that quotes a server is not a server's reply.
            (
                "Command died with status 1: \"/bin/fwd\". Command output: host x[192.0.2.9]:25 said: 550 no",
                &["Diagnostic-Code: X-Sluice; Command died with status 1: \"/bin/fwd\". Command output: host x[192.0.2.9]:25 said: 550 no"],
            ),
            (
                "connect to mx.remote.example[192.0.2.1]:25: Connection refused",
                &["Diagnostic-Code: X-Sluice; connect to mx.remote.example[192.0.2.1]:25: Connection refused"],
            ),
            // Expired mail quotes the last attempt's reply, as Postfix's notice does.
            (
                "message expired (maximal_queue_lifetime): 4.7.0 host mx.remote.example[192.0.2.1]:25 said: 421 4.7.0 [TS04] try later (in reply to RCPT TO command)",
                &["Remote-MTA: dns; mx.remote.example", "Diagnostic-Code: smtp; 421 4.7.0 [TS04] try later"],
            ),
            // A relayhost given as an IPv6 literal is named by its address.
            (
                "host 2001:db8::1[2001:db8::1]:25 said: 550 5.1.1 no such user (in reply to RCPT TO command)",
                &["Remote-MTA: dns; 2001:db8::1", "Diagnostic-Code: smtp; 550 5.1.1 no such user"],
            ),
            // A session error that is not a reply still names the server.
            (
                "host mx.remote.example[192.0.2.1]:25 sent a malformed reply: 2x0 hi",
                &["Remote-MTA: dns; mx.remote.example", "Diagnostic-Code: X-Sluice; host mx.remote.example[192.0.2.1]:25 sent a malformed reply: 2x0 hi"],
            ),
        ];
        for (reason, want) in table {
            assert_eq!(remote_fields(reason), want, "{reason}");
        }
    }

    #[test]
    fn delay_and_success_reports_carry_headers_only() {
        let mut e = env();
        e.ret = Some(crate::Ret::Full);
        let item = Failed {
            index: 0,
            status: crate::StatusCode::known(4, 4, 1),
            reason: "connect to mx.remote.example[192.0.2.1]:25: Connection refused".into(),
        };
        let msg = b"Subject: hi\r\nFrom: alice@example.com\r\n\r\nbody line\r\n";
        let cx = Context {
            retry_until: Some("later"),
            ..cx()
        };
        let delay = String::from_utf8(report_of(Kind::Delay, &e, "Q", &[&item], msg, cx)).unwrap();
        for needle in [
            "Subject: Delayed Mail (still being retried)",
            "THIS IS A WARNING ONLY",
            "Action: delayed",
            "Status: 4.4.1",
            "Will-Retry-Until: later",
            "Content-Type: text/rfc822-headers",
        ] {
            assert!(delay.contains(needle), "missing {needle:?} in\n{delay}");
        }
        assert!(
            !delay.contains("body line"),
            "a warning returns headers only"
        );
        let ok = Failed {
            status: crate::StatusCode::known(2, 0, 0),
            reason: "delivered to mailbox".into(),
            ..item
        };
        for (relayed, action) in [(true, "Action: relayed"), (false, "Action: delivered")] {
            let r = String::from_utf8(report_of(
                Kind::Success { relayed },
                &e,
                "Q",
                &[&ok],
                msg,
                cx,
            ))
            .unwrap();
            assert!(
                r.contains("Subject: Successful Mail Delivery Report"),
                "{r}"
            );
            assert!(r.contains(action) && r.contains("Status: 2.0.0"), "{r}");
            assert!(
                !r.contains("body line") && !r.contains("Will-Retry-Until"),
                "{r}"
            );
        }
    }

    /// An SMTPUTF8 message's envelope: a sender, a recipient and an ORCPT
    /// beyond ASCII, and an ASCII recipient beside them.
    fn utf8_env() -> Envelope {
        Envelope {
            sender: "\u{e5}lice@example.com".into(),
            recipients: vec![
                Recipient {
                    address: "d\u{e4}ve@b\u{fc}cher.example".into(),
                    notify: N::Default,
                    orcpt: Some("utf-8;d\u{e4}ve+x@orig.example".into()),
                },
                Recipient {
                    address: "bob@remote.example".into(),
                    notify: N::Default,
                    orcpt: Some("rfc822;bob@orig.example".into()),
                },
            ],
            ret: Some(crate::Ret::Full),
            smtputf8: true,
            ..Envelope::default()
        }
    }

    /// A failure of both recipients of `e`, as text.
    fn failure_of(e: &Envelope, msg: &[u8]) -> String {
        let failed: Vec<Failed> = (0..2)
            .map(|index| Failed {
                index,
                status: crate::StatusCode::known(5, 1, 1),
                reason: "host mx.remote.example[192.0.2.1]:25 said: 550 5.1.1 no such user (in reply to RCPT TO command)".into(),
            })
            .collect();
        let w: Vec<&Failed> = failed.iter().collect();
        String::from_utf8(report(e, "Q", &w, msg, cx())).unwrap()
    }

    /// Mail received with SMTPUTF8 gets RFC 6533's global report, as
    /// Postfix's: UTF-8 addresses typed `utf-8` as they are, ASCII ones
    /// `rfc822`, the original as message/global (whole) or
    /// message/global-headers.
    #[test]
    fn smtputf8_mail_gets_a_global_report() {
        let msg = "Subject: gr\u{fc}\u{df}e\r\nFrom: \u{e5}lice@example.com\r\n\r\nbody line\r\n";
        let r = failure_of(&utf8_env(), msg.as_bytes());
        let lines: Vec<&str> = r.split("\r\n").collect();
        for want in [
            "Content-Type: multipart/report; report-type=delivery-status;",
            "Content-Type: text/plain; charset=utf-8",
            "<d\u{e4}ve@b\u{fc}cher.example>: host mx.remote.example[192.0.2.1]:25 said: 550 5.1.1 no such user (in reply to RCPT TO command)",
            "Content-Type: message/global-delivery-status",
            "X-Sluice-Sender: utf-8; \u{e5}lice@example.com",
            "Final-Recipient: utf-8; d\u{e4}ve@b\u{fc}cher.example",
            "Original-Recipient: utf-8; d\u{e4}ve+x@orig.example",
            "Final-Recipient: rfc822; bob@remote.example",
            "Original-Recipient: rfc822; bob@orig.example",
            "Content-Description: Undelivered Message",
            "Content-Type: message/global",
            "Subject: gr\u{fc}\u{df}e",
            "body line",
        ] {
            assert!(lines.contains(&want), "missing {want:?} in\n{r}");
        }
        for old in [
            "Content-Type: message/delivery-status",
            "Content-Type: message/rfc822",
            "Content-Type: text/plain; charset=us-ascii",
        ] {
            assert!(!lines.contains(&old), "{old:?} in\n{r}");
        }
        let mut e = utf8_env();
        e.ret = Some(crate::Ret::Hdrs);
        let r = failure_of(&e, msg.as_bytes());
        assert!(
            r.contains("\r\nContent-Type: message/global-headers\r\n"),
            "{r}"
        );
        assert!(
            !r.contains("body line") && !r.contains("text/rfc822-headers"),
            "{r}"
        );
        // Delay warnings and success reports return the headers only.
        let item = Failed {
            index: 0,
            status: crate::StatusCode::known(4, 4, 1),
            reason: "connect to mx.remote.example[192.0.2.1]:25: Connection refused".into(),
        };
        for kind in [Kind::Delay, Kind::Success { relayed: true }] {
            let r = report_of(kind, &utf8_env(), "Q", &[&item], msg.as_bytes(), cx());
            let r = String::from_utf8(r).unwrap();
            assert!(
                r.contains("\r\nContent-Type: message/global-delivery-status\r\n")
                    && r.contains("\r\nFinal-Recipient: utf-8; d\u{e4}ve@b\u{fc}cher.example\r\n")
                    && r.contains("\r\nContent-Type: message/global-headers\r\n"),
                "{kind:?}: {r}"
            );
        }
    }

    /// Plain mail's report is the RFC 3464 one whatever its addresses
    /// (Postfix decides on the SMTPUTF8 flag alone): the global report of
    /// the same ASCII envelope differs in the three content types only,
    /// and the 8-bit transfer encoding its UTF-8 parts declare.
    #[test]
    fn plain_mail_keeps_the_plain_report() {
        let mut e = env();
        e.ret = Some(crate::Ret::Full);
        let msg = b"Subject: hi\r\n\r\nbody line\r\n";
        let plain = failure_of(&e, msg);
        e.smtputf8 = true;
        let global = failure_of(&e, msg);
        // The global report's two UTF-8 parts declare their 8-bit data:
        // one line more after each of their Content-Type lines.
        let mut global_lines: Vec<&str> = Vec::new();
        let mut lines = global.split("\r\n");
        while let Some(l) = lines.next() {
            global_lines.push(l);
            if l == "Content-Type: text/plain; charset=utf-8"
                || l == "Content-Type: message/global-delivery-status"
            {
                assert_eq!(lines.next(), Some("Content-Transfer-Encoding: 8bit"));
            }
        }
        let differ: Vec<(&str, &str)> = plain
            .split("\r\n")
            .zip(global_lines)
            .filter(|(p, g)| p != g)
            .collect();
        assert_eq!(
            differ,
            [
                (
                    "Content-Type: text/plain; charset=us-ascii",
                    "Content-Type: text/plain; charset=utf-8"
                ),
                (
                    "Content-Type: message/delivery-status",
                    "Content-Type: message/global-delivery-status"
                ),
                (
                    "Content-Type: message/rfc822",
                    "Content-Type: message/global"
                ),
            ]
        );
        assert_eq!(
            plain.split("\r\n").count() + 2,
            global.split("\r\n").count()
        );
    }

    /// A plain report is ASCII: an address beyond ASCII in it (a local
    /// submission's, or a `utf-8` ORCPT given without SMTPUTF8) is a
    /// `utf-8` one in RFC 6533's `\x{HEX}` form.
    #[test]
    fn a_plain_report_gives_utf8_addresses_escaped() {
        let mut e = utf8_env();
        e.smtputf8 = false;
        let r = failure_of(&e, b"Subject: hi\r\n\r\n");
        for want in [
            "Content-Type: message/delivery-status",
            "X-Sluice-Sender: utf-8; \\x{E5}lice@example.com",
            "Final-Recipient: utf-8; d\\x{E4}ve@b\\x{FC}cher.example",
            "Original-Recipient: utf-8; d\\x{E4}ve\\x{2B}x@orig.example",
            "Final-Recipient: rfc822; bob@remote.example",
        ] {
            assert!(
                r.split("\r\n").any(|l| l == want),
                "missing {want:?} in\n{r}"
            );
        }
        let ds = r
            .split("Content-Type: message/delivery-status")
            .nth(1)
            .and_then(|p| p.split("\r\n--").next())
            .unwrap();
        assert!(ds.is_ascii(), "{ds}");
    }

    /// In a global report UTF-8 is allowed, control characters still are
    /// not: an address holding CR LF or a C1 control adds no field.
    #[test]
    fn a_hostile_utf8_address_adds_no_field_to_a_global_report() {
        let mut e = utf8_env();
        e.recipients[0].address =
            "d\u{e4}ve\r\nAction: delivered\u{85}X-Injected: y@b.example".into();
        e.sender = "\u{e5}lice\r\nX-Injected: sender@example.com".into();
        let r = failure_of(&e, b"Subject: hi\r\n\r\n");
        assert!(
            r.contains("\r\nFinal-Recipient: utf-8; d\u{e4}ve??Action: delivered?X-Injected: y@b.example\r\n"),
            "{r}"
        );
        assert!(
            !r.split("\r\n")
                .any(|l| l.starts_with("X-Injected") || l == "Action: delivered"),
            "{r}"
        );
        assert!(!r.contains('\u{85}'), "{r}");
    }

    /// The parts a caller streams the original between give the report's
    /// bytes, whether the original ends with a line end or not.
    #[test]
    fn parts_around_the_original_make_the_report() {
        let mut e = env();
        e.ret = Some(crate::Ret::Full);
        let failed = Failed {
            index: 0,
            status: crate::StatusCode::known(5, 3, 0),
            reason: "Command died with status 1".into(),
        };
        let cx = Context {
            to: "owner@example.com",
            ..cx()
        };
        for msg in [
            &b"Subject: hi\r\n\r\nbody\r\n"[..],
            b"Subject: hi\r\n\r\nno end",
            b"",
        ] {
            let whole = report_of(Kind::Failure, &e, "Q", &[&failed], msg, cx);
            let parts = parts_of(Kind::Failure, &e, "Q", &[&failed], cx);
            assert!(!parts.headers_only);
            let ended = msg.is_empty() || msg.ends_with(b"\r\n");
            let streamed = [parts.head.clone(), msg.to_vec(), parts.tail(ended)].concat();
            assert_eq!(streamed, whole);
            let text = String::from_utf8(whole).unwrap();
            assert!(text.contains("Content-Type: message/rfc822\r\n"), "{text}");
            let end = "\r\n\r\n--Q.0/mx.test.example--\r\n";
            assert!(
                text.ends_with(&format!("{}{end}", String::from_utf8_lossy(msg).trim_end())),
                "{text:?}"
            );
        }
        e.ret = Some(crate::Ret::Hdrs);
        assert!(parts_of(Kind::Failure, &e, "Q", &[&failed], cx).headers_only);
        assert_eq!(header_section(b"A: b\r\n\r\nbody\r\n"), b"A: b\r\n");
    }
}
