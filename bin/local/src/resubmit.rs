//! Forwarding to addresses that are not delivered here: a new message
//! through cleanup, as Postfix's local(8) does. It keeps the sender, the
//! DSN options and the content, with a `Delivered-To:` header on top so
//! that a copy coming back to this recipient is caught as a loop.

use std::path::Path;
use std::time::Duration;

use ipc::cleanup::{Cleanup, Origin, Request, Response, MAX_CHUNK};
use ipc::delivery::Transaction;
use mail::{Envelope, Recipient};

use crate::mailbox::Failure;

/// How long cleanup may take to answer one request.
const TIMEOUT: Duration = Duration::from_secs(300);

/// Queues `wire` (the stored content) for `to`, on behalf of recipient
/// `addr`; the new queue id on success.
pub fn resubmit(
    socket: &Path,
    txn: &Transaction,
    wire: &[u8],
    addr: &str,
    to: &[String],
) -> Result<String, Failure> {
    let fail =
        |what: String| Failure::defer("4.3.0", format!("forwarding to {}: {what}", to.join(", ")));
    let mut client = ipc::Client::<Cleanup>::connect(socket, TIMEOUT)
        .map_err(|e| fail(format!("connect to {}: {e}", socket.display())))?;
    let envelope = Envelope {
        sender: txn.sender.clone(),
        recipients: to.iter().map(|r| Recipient::new(r.as_str())).collect(),
        ret: txn.ret,
        envid: txn.envid.clone(),
        body_type: txn.body,
        smtputf8: txn.smtputf8,
        ..Envelope::default()
    };
    let begin = Request::Begin {
        envelope: Box::new(envelope),
        origin: Origin::Local {
            user: String::new(),
            full_name: None,
        },
        hold: false,
    };
    let answer = |r: Result<Response, ipc::IpcError>| match r {
        Ok(Response::Failed {
            code,
            enhanced,
            text,
        }) if code >= 500 => Err(Failure::bounce(
            "5.3.0",
            format!("forwarding to {}: {code} {enhanced} {text}", to.join(", ")),
        )),
        Ok(Response::Failed {
            code,
            enhanced,
            text,
        }) => Err(fail(format!("{code} {enhanced} {text}"))),
        Ok(other) => Ok(other),
        Err(e) => Err(fail(format!("cleanup: {e}"))),
    };
    match answer(client.call(&begin))? {
        Response::Started { .. } => {}
        other => return Err(fail(format!("unexpected answer from cleanup: {other:?}"))),
    }
    let mut content = format!("Delivered-To: {}\r\n", crate::deliver::clean(addr)).into_bytes();
    content.extend_from_slice(wire);
    for chunk in content.chunks(MAX_CHUNK) {
        client
            .send(&Request::Data {
                bytes: chunk.to_vec(),
            })
            .map_err(|e| fail(format!("cleanup: {e}")))?;
    }
    match answer(client.call(&Request::End))? {
        Response::Queued { queue_id } => Ok(queue_id),
        other => Err(fail(format!("unexpected answer from cleanup: {other:?}"))),
    }
}
