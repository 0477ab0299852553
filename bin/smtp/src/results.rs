//! What the agent makes of a transaction and of the server's replies.
//!
//! The SMTP envelope a transaction is sent with (its DSN and BODY
//! parameters mapped by `smtp_proto::dsn`, the one mapping smtpd uses
//! too), each recipient's status from the reply that decided it, and the
//! texts of connection failures, worded as Postfix's smtp(8) words them.

use std::net::SocketAddr;

use ipc::delivery::{RcptResult, Transaction};
use mail::{Status, StatusCode};
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

/// Why the session failed, for the logs and the deferral.
pub fn describe(e: &ClientError, relay: &str) -> String {
    use smtp_proto::client_session::ClientError as E;
    match e {
        E::Greeting(r) => format!(
            "host {relay} refused to talk to me: {} {}",
            r.code,
            r.text()
        ),
        E::Helo(r) => format!(
            "host {relay} refused EHLO and HELO: {} {}",
            r.code,
            r.text()
        ),
        E::TlsUnavailable(_) => format!("TLS is required, but was not offered by host {relay}"),
        // With the enhanced code: 4.7.0 (a session limit) tells the postmaster more than 421.
        E::ServerClosing(r) => format!("host {relay} said: {r}"),
        E::BadReply(err) => format!("host {relay} sent a malformed reply: {err:?}"),
        E::Unexpected(r) => format!(
            "host {relay} sent an unexpected reply: {} {}",
            r.code,
            r.text()
        ),
        other => format!("host {relay}: {other:?}"),
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

/// The result for recipient `index` from the reply that decided it.
pub fn result_of(index: u32, r: &Reply) -> RcptResult {
    RcptResult {
        index,
        status: status_of(r),
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
    Ok(Envelope {
        from,
        params,
        recipients,
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
    fn statuses_of_replies() {
        let r = result_of(3, &Reply::new(550, None, "no such user"));
        assert_eq!((r.index, r.status.code.to_string()), (3, "5.0.0".into()));
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
