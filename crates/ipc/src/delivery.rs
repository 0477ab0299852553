//! The delivery-agent protocol: qmgr drives smtp (and any future agent).
//!
//! fanf's split: qmgr owns which connection carries which transaction; the
//! agent owns the protocol. qmgr asks the agent to `Open` a connection to
//! a host (with its addresses, resolved by the router), queues `Send`
//! transactions on it (several may wait: the connection's backlog), and
//! `Close`s it when the scheduler says so. The agent answers each request
//! with the same [`crate::Tagged`] id: `Opened`/`OpenFailed`, `Sent` with a
//! result per recipient, `Closed`. A connection the peer or a fault ends on
//! its own is reported with an unsolicited `Closed` tagged id 0.
//!
//! Message data travels by reference: the place of a small message's bytes
//! in the journal (segment, offset, length), or the path of the message
//! file relative to the queue directory; the agent opens either read-only
//! and streams it (it is already in wire format). It may also travel
//! inline. Results are typed ([`mail::Status`]: an enhanced status code
//! and its text), never a string to split again; a server's reply that
//! decided a result travels with it as the server sent it.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

/// Marker type for the delivery protocol.
#[derive(Debug)]
pub enum Delivery {}

impl crate::Protocol for Delivery {
    const NAME: &'static str = "sluice-delivery";
    const VERSION: u32 = 9;
    type Request = Request;
    type Response = Response;
}

/// What qmgr asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Open connection `conn` to `host`, trying `addrs` in order.
    Open {
        /// qmgr's connection id.
        conn: u64,
        /// The host name (for logs and TLS).
        host: String,
        /// The next-hop destination the host serves (the domain, or the
        /// relay as in `[name]:port`), for TLS's `secure` name check.
        nexthop: String,
        /// Its addresses with the port.
        addrs: Vec<SocketAddr>,
        /// The local address to bind before connecting (the shaping
        /// policy's source); `None`: `smtp_bind_address`, or the kernel's choice.
        source: Option<IpAddr>,
        /// The host's DANE standing, from the router's validated DNS.
        dane: Dane,
    },
    /// Run one transaction on connection `conn` once it is free.
    Send {
        /// The connection.
        conn: u64,
        /// The transaction.
        txn: Box<Transaction>,
    },
    /// QUIT and close connection `conn` once its queued transactions are done.
    Close {
        /// The connection.
        conn: u64,
    },
}

/// What DNSSEC-validated DNS says of a host's TLS (RFC 7672 2.2), as
/// the router found it; the agent's `smtp_tls_security_level` decides
/// what it means.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Dane {
    /// DNSSEC is not in use, or the MX or address records were not validated.
    #[default]
    Insecure,
    /// A validated host without validated TLSA records.
    NoRecords,
    /// The validated TLSA records of the host.
    Records(Vec<Tlsa>),
    /// A validated host whose address or TLSA lookup failed: the DNS
    /// status that says why (for the agent's log; its refusal is 4.7.5).
    Failed(mail::Status),
}

/// One TLSA record (RFC 6698).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tlsa {
    /// Certificate usage: 2 DANE-TA, 3 DANE-EE (0 and 1 are unusable for SMTP).
    pub usage: u8,
    /// 0 the whole certificate, 1 its public key.
    pub selector: u8,
    /// 0 exact, 1 SHA-256, 2 SHA-512.
    pub matching: u8,
    /// The certificate association data.
    pub data: Vec<u8>,
}

/// One message to some of its recipients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    /// Queue id, for log lines.
    pub queue_id: String,
    /// Envelope sender ("" for the null sender).
    pub sender: String,
    /// RET= for DSN-capable servers.
    pub ret: Option<mail::Ret>,
    /// ENVID=.
    pub envid: Option<String>,
    /// BODY=.
    pub body: mail::BodyType,
    /// The message needs SMTPUTF8.
    pub smtputf8: bool,
    /// Data size in bytes (SIZE=).
    pub size: u64,
    /// Arrival time, microseconds since the epoch (for delay=).
    pub arrival_us: u64,
    /// The recipients.
    pub recipients: Vec<TxnRecipient>,
    /// The content.
    pub data: Data,
}

/// One recipient of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRecipient {
    /// Index of the recipient in the message's envelope.
    pub index: u32,
    /// The address to use in RCPT TO.
    pub address: String,
    /// NOTIFY=.
    pub notify: mail::Notify,
    /// ORCPT= in `mail::Orcpt`'s stored form, `type;address` (decoded).
    pub orcpt: Option<String>,
}

impl Transaction {
    /// The same status for every recipient (a local problem, a lost
    /// connection: nothing was said about any one of them).
    pub fn results(&self, status: &mail::Status) -> Vec<RcptResult> {
        self.recipients
            .iter()
            .map(|r| RcptResult {
                index: r.index,
                status: status.clone(),
                remote: None,
            })
            .collect()
    }
}

/// Where the content is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Data {
    /// The wire-format bytes.
    Inline(Vec<u8>),
    /// A message file, relative to the queue directory.
    File(String),
    /// Inline data of a journal record, read from
    /// `journal/<segment>.log` under the queue directory; the segment
    /// stays while the delivery uses it.
    Journal(queue::DataSpan),
    /// No content: an address verification probe. The agent stops after
    /// the RCPTs (MAIL, RCPT, RSET; no DATA) and reports each recipient's
    /// RCPT reply.
    Probe,
}

/// What the agent reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The connection is up and ready for transactions.
    Opened {
        /// The connection.
        conn: u64,
        /// `host[addr]:port` as logged.
        relay: String,
    },
    /// The connection could not be set up.
    OpenFailed {
        /// The connection.
        conn: u64,
        /// Whose failure it was, for the destination's feedback.
        failure: OpenFailure,
        /// Why, for the deferral of what waited for it.
        reason: mail::Status,
        /// The server's reply that refused the connection (at the
        /// greeting, EHLO, or a 421), as it was sent: for the traffic
        /// shaping's reply rules.
        remote: Option<mail::RemoteReply>,
    },
    /// A transaction finished.
    Sent {
        /// The connection.
        conn: u64,
        /// A result for every recipient of the transaction.
        results: Vec<RcptResult>,
        /// The connection failed during the transaction (the results are
        /// deferrals made up by the agent).
        conn_failed: bool,
        /// Where delivered recipients went, for NOTIFY=SUCCESS (RFC 3461).
        handoff: Handoff,
    },
    /// An egress proxy (`smtp_proxy`) could not be reached while the
    /// connection was being set up; the connection tries the next one.
    /// For the proxy's failure count: it says nothing of the destination.
    ProxyFailed {
        /// The connection.
        conn: u64,
        /// The proxy.
        proxy: SocketAddr,
    },
    /// The connection is closed.
    Closed {
        /// The connection.
        conn: u64,
        /// Why, when it was not asked for.
        reason: Option<mail::Status>,
    },
}

impl Response {
    /// The connection the answer is about.
    pub fn conn(&self) -> u64 {
        match self {
            Response::Opened { conn, .. }
            | Response::OpenFailed { conn, .. }
            | Response::Sent { conn, .. }
            | Response::ProxyFailed { conn, .. }
            | Response::Closed { conn, .. } => *conn,
        }
    }
}

/// Why a connection could not be set up, as the scheduler counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpenFailure {
    /// No address of the host could be reached (the host is skipped for
    /// a while, negative feedback).
    Unreachable,
    /// An address was reached and the greeting, EHLO or TLS failed
    /// (negative feedback).
    Handshake,
    /// This side failed before the host was tried: the source address
    /// cannot be bound, or no egress proxy could be reached. Nothing
    /// counts against the destination or its hosts.
    Local,
}

/// What became of delivered recipients, for success notices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Handoff {
    /// Final delivery here (mailbox, command, file): `Action: delivered`.
    Final,
    /// Relayed to a server that took the DSN parameters: it reports.
    RelayedWithDsn,
    /// Relayed to a server without DSN: `Action: relayed`, from us.
    Relayed,
}

/// The outcome for one recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RcptResult {
    /// Index of the recipient in the envelope.
    pub index: u32,
    /// Its class decides: 2 delivered, 4 deferred, 5 bounced. The text is
    /// the server's reply (or the agent's reason), one line, as logged.
    pub status: mail::Status,
    /// The server's reply that decided it, as it was sent (its own
    /// enhanced code or none), when a server's reply did.
    pub remote: Option<mail::RemoteReply>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode, Tagged};

    #[test]
    fn typed_results_and_journal_spans_cross_the_wire() {
        let txn = Transaction {
            queue_id: "4Q".into(),
            sender: "a@example.org".into(),
            ret: Some(mail::Ret::Hdrs),
            envid: Some("E1".into()),
            body: mail::BodyType::EightBitMime,
            smtputf8: false,
            size: 42,
            arrival_us: 1_700_000_000_000_000,
            recipients: vec![TxnRecipient {
                index: 3,
                address: "b@example.net".into(),
                notify: mail::Notify::Never,
                orcpt: Some("rfc822;c@example.net".into()),
            }],
            data: Data::Journal(queue::DataSpan {
                segment: 7,
                offset: 4096,
                len: 42,
            }),
        };
        let req = Tagged {
            id: 9,
            body: Request::Send {
                conn: 1,
                txn: Box::new(txn.clone()),
            },
        };
        let f = encode(&req);
        assert_eq!(decode::<Tagged<Request>>(&f[4..]).unwrap(), req);
        let lost = mail::Status::new(mail::StatusCode::CONNECTION_LOST, "lost connection");
        let results = txn.results(&lost);
        assert_eq!(
            results,
            vec![RcptResult {
                index: 3,
                status: lost.clone(),
                remote: None,
            }]
        );
        let mut results = results;
        results.push(RcptResult {
            index: 4,
            status: mail::Status::new(mail::StatusCode::of_reply(550), "refused"),
            remote: Some(mail::RemoteReply {
                relay: "mx[192.0.2.1]:25".into(),
                code: 550,
                enhanced: None,
                text: "no such user".into(),
            }),
        });
        let resp = Tagged {
            id: 9,
            body: Response::Sent {
                conn: 1,
                results,
                conn_failed: true,
                handoff: Handoff::Relayed,
            },
        };
        let f = encode(&resp);
        assert_eq!(decode::<Tagged<Response>>(&f[4..]).unwrap(), resp);
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = decode::<Tagged<Request>>(&bytes);
            let _ = decode::<Tagged<Response>>(&bytes);
        }
    }
}
