//! qmgr's one listener for three protocols: cleanup's arrivals (`Qmgr`),
//! smtpd's address verification queries (`Verify`) and `sluice queue`'s
//! control (`QueueCtl`), told apart by the client's hello. Here are the
//! choice, the decoding and encoding of each protocol's frames (the
//! shell's `daemon::ipcserver::Service` calls them), what each request
//! means to the queue manager ([`Request::event`]) and which actions are
//! answers to clients ([`answer`]).

use ipc::qmgr::{self, Qmgr};
use ipc::queuectl::{self, QueueCtl};
use ipc::verify::{self, Verify};
use ipc::{Endpoint, Hello, HelloReply, IpcError, Protocol, Tagged};

use crate::{Action, Event};

/// The protocol a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// cleanup's `Qmgr`.
    Arrival,
    /// `sluice queue`'s `QueueCtl`.
    Control,
    /// smtpd's `Verify`.
    Verify,
}

/// A request of any of the three protocols.
// Arrivals, the large variant, are nearly every request: boxing them would
// cost an allocation per message to save bytes on the rare control one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Request {
    /// cleanup announces a message.
    Arrival(qmgr::Request),
    /// `sluice queue` asks.
    Control(queuectl::Request),
    /// smtpd asks about an address.
    Verify(verify::Request),
}

/// An answer of any of the three protocols.
#[derive(Debug)]
pub enum Response {
    /// To cleanup.
    Arrival(qmgr::Response),
    /// To `sluice queue`.
    Control(queuectl::Response),
    /// To smtpd.
    Verify(verify::Response),
}

/// The protocol a client's hello asks for, or the refusal to send it.
pub fn choose(hello: &Hello) -> Result<Kind, HelloReply> {
    // Anything not an arrival is answered as a control client, so an
    // old `sluice queue` hears which version it should be.
    let (kind, answer) = if hello.protocol == Qmgr::NAME {
        (Kind::Arrival, hello.answer::<Qmgr>())
    } else if hello.protocol == Verify::NAME {
        (Kind::Verify, hello.answer::<Verify>())
    } else {
        (Kind::Control, hello.answer::<QueueCtl>())
    };
    match answer {
        HelloReply::Accepted => Ok(kind),
        refused => Err(refused),
    }
}

/// The next whole request of a client speaking `kind`, if one has arrived.
pub fn recv(ep: &mut Endpoint, kind: Kind) -> Result<Option<Tagged<Request>>, IpcError> {
    Ok(match kind {
        Kind::Arrival => ep.recv::<Tagged<qmgr::Request>>()?.map(|t| Tagged {
            id: t.id,
            body: Request::Arrival(t.body),
        }),
        Kind::Control => ep.recv::<Tagged<queuectl::Request>>()?.map(|t| Tagged {
            id: t.id,
            body: Request::Control(t.body),
        }),
        Kind::Verify => ep.recv::<Tagged<verify::Request>>()?.map(|t| Tagged {
            id: t.id,
            body: Request::Verify(t.body),
        }),
    })
}

/// Queues the answer to request `id`.
pub fn queue_reply(ep: &mut Endpoint, id: u64, resp: &Response) -> Result<(), IpcError> {
    match resp {
        Response::Arrival(r) => ep.queue_reply(id, r),
        Response::Control(r) => ep.queue_reply(id, r),
        Response::Verify(r) => ep.queue_reply(id, r),
    }
}

impl Request {
    /// The event request `request` of `client` is to the queue manager.
    pub fn event(self, client: u64, request: u64) -> Event {
        match self {
            // Answered after the group commit that follows.
            Request::Arrival(qmgr::Request::Arrived { head, hold }) => Event::Arrived {
                client,
                request,
                head: Box::new(head),
                hold,
            },
            Request::Arrival(body) => Event::Transfer {
                client,
                request,
                body,
            },
            Request::Verify(verify::Request::Query { address, wait_ms }) => Event::Verify {
                client,
                request,
                address,
                wait_ms,
            },
            Request::Control(body) => Event::Control {
                client,
                request,
                body,
            },
        }
    }
}

/// An action that answers a client: to whom (client, request id) and
/// what; any other action is handed back.
// Any other action goes back as it came, by value: boxing it would cost
// an allocation for every action the shell carries out.
#[allow(clippy::result_large_err)]
pub fn answer(a: Action) -> Result<(u64, u64, Response), Action> {
    match a {
        Action::Reply {
            client,
            request,
            body,
        } => Ok((client, request, Response::Control(body))),
        Action::Answer {
            client,
            request,
            response,
        } => Ok((client, request, Response::Arrival(response))),
        Action::VerifyAnswer {
            client,
            request,
            response,
        } => Ok((client, request, Response::Verify(response))),
        other => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello<P: Protocol>(version: u32) -> Hello {
        Hello {
            protocol: P::NAME.to_string(),
            version,
        }
    }

    #[test]
    fn the_hello_chooses_the_protocol_and_a_stranger_hears_queuectls_version() {
        assert_eq!(choose(&hello::<Qmgr>(Qmgr::VERSION)), Ok(Kind::Arrival));
        assert_eq!(choose(&hello::<Verify>(Verify::VERSION)), Ok(Kind::Verify));
        assert_eq!(
            choose(&hello::<QueueCtl>(QueueCtl::VERSION)),
            Ok(Kind::Control)
        );
        let old = choose(&hello::<Qmgr>(Qmgr::VERSION + 1));
        assert!(
            matches!(old, Err(HelloReply::Refused { ref protocol, .. }) if protocol == Qmgr::NAME)
        );
        let stranger = Hello {
            protocol: "nonesuch".into(),
            version: 1,
        };
        assert_eq!(
            choose(&stranger),
            Err(HelloReply::Refused {
                protocol: QueueCtl::NAME.to_string(),
                version: QueueCtl::VERSION,
            })
        );
    }

    #[test]
    fn requests_become_events_and_answers_go_back_to_their_client() {
        let ev = Request::Verify(verify::Request::Query {
            address: "a@example.net".into(),
            wait_ms: 5,
        })
        .event(4, 9);
        assert!(matches!(
            ev,
            Event::Verify { client: 4, request: 9, ref address, wait_ms: 5 } if address == "a@example.net"
        ));
        let ev = Request::Control(queuectl::Request::Cluster).event(2, 3);
        assert!(matches!(
            ev,
            Event::Control {
                client: 2,
                request: 3,
                body: queuectl::Request::Cluster
            }
        ));

        let a = Action::Answer {
            client: 4,
            request: 9,
            response: qmgr::Response::Committed,
        };
        assert!(matches!(
            answer(a),
            Ok((4, 9, Response::Arrival(qmgr::Response::Committed)))
        ));
        assert!(matches!(
            answer(Action::DropCleanup),
            Err(Action::DropCleanup)
        ));
    }
}
