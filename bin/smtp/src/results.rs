//! What the agent makes of a transaction and of the server's replies.
//!
//! The SMTP envelope a transaction is sent with (its DSN and BODY
//! parameters mapped by `smtp_proto::dsn`, the one mapping smtpd uses
//! too), each recipient's status from the reply that decided it, and the
//! texts of connection failures, worded as Postfix's smtp(8) words them.

use std::net::SocketAddr;

use ipc::delivery::{RcptResult, Transaction};
use mail::{RemoteReply, Said, Status, StatusCode};
use smtp_proto::client_session::{ClientError, Envelope};
use smtp_proto::command::{MailParams, RcptParams};
use smtp_proto::{Path, Reply};

/// The domain of a next hop as qmgr names it: `[name]:port`, `name:port`
/// or `name` → `name` (Postfix matches the bracketed name for relays).
pub fn nexthop_domain(nexthop: &str) -> &str {
    let n = nexthop.trim();
    if let Some(rest) = n.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    match n.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => n,
    }
}

/// `host[addr]:port`, as the logs name a server.
pub fn relay(host: &str, addr: SocketAddr) -> String {
    format!("{host}[{}]:{}", addr.ip(), addr.port())
}

/// A server's reply as it was sent, from `relay` (`host[addr]:port`).
pub fn remote_of(r: &Reply, relay: &str) -> RemoteReply {
    RemoteReply {
        relay: relay.to_string(),
        code: r.code,
        // As the reply parser takes it: only a code of the reply's class.
        enhanced: r.enhanced.filter(|e| u16::from(e.class()) == r.code / 100),
        text: r.text().replace('\n', " "),
    }
}

/// Why the session failed, for the logs and the deferral, with the
/// server's reply when one decided it.
pub fn describe(e: &ClientError, relay: &str) -> (String, Option<RemoteReply>) {
    use smtp_proto::client_session::ClientError as E;
    let said = |r: &Reply, when: Said| {
        let remote = remote_of(r, relay);
        (remote.reason(&when), Some(remote))
    };
    match e {
        E::Greeting(r) => said(r, Said::Greeting),
        E::Helo(r) => said(r, Said::Helo),
        // With the enhanced code: 4.7.0 (a session limit) tells the postmaster more than 421.
        E::ServerClosing(r) => said(r, Said::Closing),
        E::Unexpected(r) => said(r, Said::Unexpected),
        E::TlsUnavailable(_) => (
            format!("TLS is required, but was not offered by host {relay}"),
            None,
        ),
        E::BadReply(err) => (
            format!("host {relay} sent a malformed reply: {err:?}"),
            None,
        ),
        other => (format!("host {relay}: {other:?}"), None),
    }
}

/// The status a reply gives a recipient: its enhanced code when it has one
/// of the reply's class, else `class.0.0` (as Postfix's smtp(8) ignores an
/// enhanced code that contradicts the reply); the text on one line.
pub fn status_of(r: &Reply) -> Status {
    let code = r
        .enhanced
        .filter(|e| u16::from(e.class()) == r.code / 100)
        .unwrap_or_else(|| StatusCode::of_reply(r.code));
    Status::new(code, r.text().replace('\n', " "))
}

/// The result for recipient `index` from the reply `relay` sent at
/// `stage`: its text as Postfix logs it, the server's reply quoted as it
/// was sent (no enhanced code made up when it sent none).
pub fn result_of(index: u32, r: &Reply, relay: &str, stage: &str) -> RcptResult {
    let remote = remote_of(r, relay);
    let mut status = status_of(r);
    status.text = if r.code < 300 {
        remote.said()
    } else {
        remote.reason(&Said::InReplyTo(stage.to_string()))
    };
    RcptResult {
        index,
        status,
        remote: Some(remote),
    }
}

/// The SMTP envelope of `txn`, or why an address cannot be sent.
pub fn envelope(txn: &Transaction) -> Result<Envelope, String> {
    let from = if txn.sender.is_empty() {
        Path::Null
    } else {
        let text = format!("<{}>", txn.sender);
        match smtp_proto::address::parse_path(&text, txn.smtputf8) {
            Ok((p, "")) => p,
            _ => return Err(format!("bad sender address syntax: {}", txn.sender)),
        }
    };
    let mut recipients = Vec::new();
    for r in &txn.recipients {
        let text = format!("<{}>", r.address);
        let mailbox = match smtp_proto::address::parse_path(&text, txn.smtputf8) {
            Ok((Path::Mailbox(m), "")) => m,
            _ => return Err(format!("bad recipient address syntax: {}", r.address)),
        };
        recipients.push((mailbox, RcptParams::of(r.notify, r.orcpt.as_deref())));
    }
    let params = MailParams::of(
        txn.size,
        txn.body,
        txn.smtputf8,
        txn.ret,
        txn.envid.as_deref(),
    );
    // Postfix's SMTPUTF8_FLAG_SENDER and _RECIPIENT; the header section is
    // the caller's to look at (it has the content).
    let utf8_required =
        !txn.sender.is_ascii() || txn.recipients.iter().any(|r| !r.address.is_ascii());
    Ok(Envelope {
        from,
        params,
        recipients,
        utf8_required,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nexthop_domains() {
        assert_eq!(nexthop_domain("example.com"), "example.com");
        assert_eq!(nexthop_domain("[mx.example.com]:2525"), "mx.example.com");
        assert_eq!(nexthop_domain("[mx.example.com]"), "mx.example.com");
        assert_eq!(nexthop_domain("example.com:587"), "example.com");
        assert_eq!(nexthop_domain("[ipv6:::1]:25"), "ipv6:::1");
    }

    #[test]
    fn a_reply_is_quoted_as_the_server_sent_it() {
        let relay = "mx.example.net[192.0.2.1]:25";
        let table = [
            // No enhanced code sent: Sluice acts on 5.0.0 but quotes none.
            (
                Reply::new(550, None, "no such user"),
                "5.0.0",
                "host mx.example.net[192.0.2.1]:25 said: 550 no such user (in reply to RCPT TO command)",
            ),
            (
                Reply::enhanced(550, StatusCode::known(5, 1, 1), "no such user"),
                "5.1.1",
                "host mx.example.net[192.0.2.1]:25 said: 550 5.1.1 no such user (in reply to RCPT TO command)",
            ),
            (
                Reply::multiline(452, None, vec!["first".into(), "second".into()]),
                "4.0.0",
                "host mx.example.net[192.0.2.1]:25 said: 452 first second (in reply to RCPT TO command)",
            ),
            (
                Reply::new(250, None, "queued as X"),
                "2.0.0",
                "250 queued as X",
            ),
        ];
        for (reply, code, text) in table {
            let r = result_of(3, &reply, relay, "RCPT TO");
            assert_eq!(
                (r.status.code.to_string().as_str(), r.status.text.as_str()),
                (code, text)
            );
            let remote = r.remote.expect("a server's reply");
            assert_eq!((remote.code, remote.enhanced), (reply.code, reply.enhanced));
            assert_eq!(remote.relay, relay);
        }
    }

    #[test]
    fn a_refusal_at_the_greeting_is_a_servers_reply() {
        use smtp_proto::client_session::ClientError as E;
        let relay = "mx.example.net[192.0.2.1]:25";
        // Yahoo's TS03 comes at the greeting, as a 421 there does (smtp-proto
        // calls a 421 later ServerClosing, below).
        let r = Reply::enhanced(
            554,
            StatusCode::known(5, 7, 1),
            "[TS03] All messages from x will be permanently deferred",
        );
        let (why, remote) = describe(&E::Greeting(r), relay);
        assert_eq!(
            why,
            "host mx.example.net[192.0.2.1]:25 refused to talk to me: 554 5.7.1 [TS03] All messages from x will be permanently deferred"
        );
        assert_eq!(
            remote.expect("a reply").said(),
            "554 5.7.1 [TS03] All messages from x will be permanently deferred"
        );
        let (why, remote) = describe(&E::ServerClosing(Reply::new(421, None, "bye")), relay);
        assert_eq!(why, "host mx.example.net[192.0.2.1]:25 said: 421 bye");
        assert!(remote.is_some());
    }

    #[test]
    fn statuses_of_replies() {
        let r = status_of(&Reply::enhanced(550, StatusCode::known(5, 1, 1), "unknown"));
        assert_eq!(
            (r.code.to_string(), r.text.as_str()),
            ("5.1.1".into(), "unknown")
        );
        // An enhanced code of another class than the reply's is not believed.
        let r = status_of(&Reply::enhanced(250, StatusCode::known(5, 1, 1), "odd"));
        assert!(r.is_success(), "{r}");
        assert_eq!(
            status_of(&Reply::new(421, None, "bye")).to_string(),
            "4.0.0 bye"
        );
    }
}
