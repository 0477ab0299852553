//! qmgr's one listener for three protocols: cleanup's arrivals (`Qmgr`),
//! smtpd's address verification queries (`Verify`) and `sluice queue`'s
//! control (`QueueCtl`), told apart by the client's hello and served by
//! one `daemon::ipcserver`.

use daemon::ipcserver::Service;
use ipc::qmgr::{self, Qmgr};
use ipc::queuectl::{self, QueueCtl};
use ipc::verify::{self, Verify};
use ipc::{Endpoint, Hello, HelloReply, IpcError, Protocol, Tagged};

/// qmgr's listener: cleanup's arrivals and `sluice queue`'s control, told
/// apart by the hello.
#[derive(Debug)]
pub enum Clients {}

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

/// A request of either protocol.
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

/// An answer of either protocol.
#[derive(Debug)]
pub enum Response {
    /// To cleanup.
    Arrival(qmgr::Response),
    /// To `sluice queue`.
    Control(queuectl::Response),
    /// To smtpd.
    Verify(verify::Response),
}

impl Service for Clients {
    const LOG_NAME: &'static str = "qmgr";
    type Request = Request;
    type Response = Response;
    type Kind = Kind;

    fn choose(hello: &Hello) -> Result<Kind, HelloReply> {
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

    fn recv(ep: &mut Endpoint, kind: Kind) -> Result<Option<Tagged<Request>>, IpcError> {
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

    fn queue_reply(ep: &mut Endpoint, id: u64, resp: &Response) -> Result<(), IpcError> {
        match resp {
            Response::Arrival(r) => ep.queue_reply(id, r),
            Response::Control(r) => ep.queue_reply(id, r),
            Response::Verify(r) => ep.queue_reply(id, r),
        }
    }
}
