//! Forwarding to addresses that are not delivered here: a new message
//! through cleanup, as Postfix's local(8) does. It keeps the sender, the
//! DSN options (the recipient's NOTIFY and ORCPT as the caller passes
//! them on) and the content, with a `Delivered-To:` header on top so
//! that a copy coming back to this recipient is caught as a loop.
//!
//! The content goes to cleanup as it is read from the spool, in `Data`
//! frames of at most `MAX_CHUNK` bytes (cleanup takes frames cut anywhere,
//! even inside a header), over a blocking socket whose buffer is the only
//! backlog; a message that cannot be read midway is abandoned by closing
//! the connection without `End`, which makes cleanup discard the draft.

use mail::StatusCode;
use std::path::Path;
use std::time::Duration;

use ipc::cleanup::Origin;
use ipc::delivery::Transaction;
use ipc::submission::{Submission, SubmitError};
use mail::{Envelope, Recipient};

use crate::mailbox::Failure;
use crate::message::Message;

/// How long cleanup may take to answer one request.
const TIMEOUT: Duration = Duration::from_secs(300);

/// A piece of the content handed to cleanup, wire format.
#[derive(Debug, Clone, Copy)]
pub enum Piece<'a> {
    /// Bytes made here (a header, a notice's text).
    Bytes(&'a [u8]),
    /// The message being delivered, read a chunk at a time.
    Message(&'a Message),
}

/// The DSN options of a forwarded copy: its recipients' and its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dsn {
    /// NOTIFY=.
    pub notify: mail::Notify,
    /// ORCPT in its stored form.
    pub orcpt: Option<String>,
    /// RET= and ENVID= of the copy.
    pub ret: Option<mail::Ret>,
    /// ENVID=, decoded.
    pub envid: Option<String>,
}

/// Queues `wire` (the stored content) for `to`, on behalf of recipient
/// `addr`, from the transaction's sender, each with `dsn`; the new queue
/// id on success.
pub fn resubmit(
    socket: &Path,
    txn: &Transaction,
    wire: &Message,
    addr: &str,
    to: &[String],
    dsn: Dsn,
) -> Result<String, Failure> {
    let envelope = Envelope {
        sender: txn.sender.clone(),
        recipients: to
            .iter()
            .map(|r| Recipient {
                address: r.clone(),
                notify: dsn.notify,
                orcpt: dsn.orcpt.clone(),
            })
            .collect(),
        ret: dsn.ret,
        envid: dsn.envid,
        body_type: txn.body,
        smtputf8: txn.smtputf8,
        ..Envelope::default()
    };
    let delivered = format!("Delivered-To: {}\r\n", crate::content::clean(addr)).into_bytes();
    submit(
        socket,
        envelope,
        false,
        &[Piece::Bytes(&delivered), Piece::Message(wire)],
    )
}

/// Why a submission failed.
enum Failed {
    Submit(SubmitError),
    Read(std::io::Error),
}

/// Queues `content` (wire format, the pieces in order) with `envelope`
/// through cleanup: a forwarded copy, or a non-delivery notice (`notice`:
/// from MAILER-DAEMON, as qmgr's). The new queue id on success.
pub fn submit(
    socket: &Path,
    envelope: Envelope,
    notice: bool,
    content: &[Piece<'_>],
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
    let queued = Submission::begin(socket, TIMEOUT, envelope, origin)
        .map_err(Failed::Submit)
        .and_then(|mut s| {
            for piece in content {
                match piece {
                    Piece::Bytes(b) => s.data(b).map_err(Failed::Submit)?,
                    Piece::Message(m) => m.chunks(|c| s.data(c)).map_err(|e| match e {
                        Ok(read) => Failed::Read(read),
                        Err(e) => Failed::Submit(e),
                    })?,
                }
            }
            s.end().map_err(Failed::Submit)
        });
    queued.map_err(|e| failure(&to, e))
}

/// What a failed submission of a copy for `to` means for the recipient.
fn failure(to: &str, e: Failed) -> Failure {
    match e {
        // cleanup's own code says why (a milter's 5.7.1, a size's 5.3.4,
        // a full disk's 4.3.1), as Postfix's local passes cleanup's status on.
        Failed::Submit(SubmitError::Refused(r)) if r.status.is_permanent() == r.is_permanent() => {
            let text = format!("forwarding to {to}: {}", r.text);
            if r.is_permanent() {
                Failure::bounce(r.status, text)
            } else {
                Failure::defer(r.status, text)
            }
        }
        Failed::Submit(e) if e.is_permanent() => Failure::bounce(
            StatusCode::known(5, 3, 0),
            format!("forwarding to {to}: {e}"),
        ),
        Failed::Submit(e) => Failure::defer(
            StatusCode::known(4, 3, 0),
            format!("forwarding to {to}: {e}"),
        ),
        Failed::Read(e) => Failure::defer(
            StatusCode::known(4, 3, 0),
            format!("forwarding to {to}: cannot read the message: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mail::Refusal;

    #[test]
    fn a_refused_copy_fails_with_cleanups_own_status() {
        let too_big = Refusal::new(
            552,
            StatusCode::MESSAGE_TOO_BIG,
            "Message size exceeds fixed limit",
        );
        let f = failure(
            "x@far.example",
            Failed::Submit(SubmitError::Refused(too_big)),
        );
        assert_eq!(f.status, StatusCode::MESSAGE_TOO_BIG);
        assert_eq!(
            f.text,
            "forwarding to x@far.example: Message size exceeds fixed limit"
        );
        let full = Refusal::new(
            452,
            StatusCode::known(4, 3, 1),
            "Insufficient system storage",
        );
        let f = failure("x@far.example", Failed::Submit(SubmitError::Refused(full)));
        assert_eq!(
            (f.status, f.is_permanent()),
            (StatusCode::known(4, 3, 1), false)
        );
        // A link that broke says nothing of the message: try again.
        let f = failure(
            "x@far.example",
            Failed::Submit(SubmitError::Link("reset".into())),
        );
        assert_eq!(
            (f.status, f.is_permanent()),
            (StatusCode::known(4, 3, 0), false)
        );
    }
}
