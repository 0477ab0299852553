//! Forwarding to addresses that are not delivered here: a new message
//! through cleanup, as Postfix's local(8) does. It keeps the sender, the
//! DSN options and the content, with a `Delivered-To:` header on top so
//! that a copy coming back to this recipient is caught as a loop.

use std::path::Path;
use std::time::Duration;

use ipc::cleanup::Origin;
use ipc::delivery::Transaction;
use ipc::submission::Submission;
use mail::{Envelope, Recipient};

use crate::mailbox::Failure;

/// How long cleanup may take to answer one request.
const TIMEOUT: Duration = Duration::from_secs(300);

/// Queues `wire` (the stored content) for `to`, on behalf of recipient
/// `addr`, from the transaction's sender; the new queue id on success.
pub fn resubmit(
    socket: &Path,
    txn: &Transaction,
    wire: &[u8],
    addr: &str,
    to: &[String],
) -> Result<String, Failure> {
    let envelope = Envelope {
        sender: txn.sender.clone(),
        recipients: to.iter().map(|r| Recipient::new(r.as_str())).collect(),
        ret: txn.ret,
        envid: txn.envid.clone(),
        body_type: txn.body,
        smtputf8: txn.smtputf8,
        ..Envelope::default()
    };
    let mut content = format!("Delivered-To: {}\r\n", crate::deliver::clean(addr)).into_bytes();
    content.extend_from_slice(wire);
    submit(socket, envelope, false, &content)
}

/// Queues `content` (wire format) with `envelope` through cleanup: a
/// forwarded copy, or a non-delivery notice (`notice`: from
/// MAILER-DAEMON, as qmgr's). The new queue id on success.
pub fn submit(
    socket: &Path,
    envelope: Envelope,
    notice: bool,
    content: &[u8],
) -> Result<String, Failure> {
    let to: Vec<&str> = envelope
        .recipients
        .iter()
        .map(|r| r.address.as_str())
        .collect();
    let to = to.join(", ");
    let origin = if notice {
        Origin::Local {
            user: "MAILER-DAEMON".into(),
            full_name: Some("Mail Delivery System".into()),
        }
    } else {
        Origin::Local {
            user: String::new(),
            full_name: None,
        }
    };
    let queued = Submission::begin(socket, TIMEOUT, envelope, origin).and_then(|mut s| {
        s.data(content)?;
        s.end()
    });
    queued.map_err(|e| {
        if e.is_permanent() {
            Failure::bounce("5.3.0", format!("forwarding to {to}: {e}"))
        } else {
            Failure::defer("4.3.0", format!("forwarding to {to}: {e}"))
        }
    })
}
