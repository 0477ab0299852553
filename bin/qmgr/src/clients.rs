//! qmgr's one listener, served by `daemon::ipcserver`: the three
//! protocols it speaks are crates/qmgr's `clients`.

use daemon::ipcserver::Service;
use ipc::{Endpoint, Hello, HelloReply, IpcError, Tagged};
use queue_manager::clients::{self, Kind, Request, Response};

/// qmgr's listener: cleanup's arrivals, smtpd's verification queries and
/// `sluice queue`'s control, told apart by the hello.
#[derive(Debug)]
pub enum Clients {}

impl Service for Clients {
    const LOG_NAME: &'static str = "qmgr";
    type Request = Request;
    type Response = Response;
    type Kind = Kind;

    fn choose(hello: &Hello) -> Result<Kind, HelloReply> {
        clients::choose(hello)
    }

    fn recv(ep: &mut Endpoint, kind: Kind) -> Result<Option<Tagged<Request>>, IpcError> {
        clients::recv(ep, kind)
    }

    fn queue_reply(ep: &mut Endpoint, id: u64, resp: &Response) -> Result<(), IpcError> {
        clients::queue_reply(ep, id, resp)
    }
}
