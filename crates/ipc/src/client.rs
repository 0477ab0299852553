//! The blocking client used by tools (`sluice`, `sendmail`) and by daemons
//! that ask a quick question of another service.
//!
//! `call` sends one request and waits for the response with the same id;
//! responses to other ids that arrive first are kept for their own `call`.

use std::collections::BTreeMap;
use std::io::Write;
use std::marker::PhantomData;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::{decode, encode, FrameBuf, Hello, HelloReply, IpcError, Protocol, Tagged};

/// A blocking connection to a server of protocol `P`.
#[derive(Debug)]
pub struct Client<P: Protocol> {
    stream: UnixStream,
    frames: FrameBuf,
    next_id: u64,
    early: BTreeMap<u64, P::Response>,
    _p: PhantomData<P>,
}

impl<P: Protocol> Client<P> {
    /// Connects to the socket at `path` and does the handshake.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Self, IpcError> {
        let stream = UnixStream::connect(path)?;
        Self::over(stream, timeout)
    }

    /// Does the handshake over an already connected stream.
    pub fn over(stream: UnixStream, timeout: Duration) -> Result<Self, IpcError> {
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut c = Client {
            stream,
            frames: FrameBuf::new(),
            next_id: 1,
            early: BTreeMap::new(),
            _p: PhantomData,
        };
        c.stream.write_all(&encode(&Hello::of::<P>()))?;
        match c.read_frame::<HelloReply>()? {
            HelloReply::Accepted => Ok(c),
            HelloReply::Refused { protocol, version } => Err(IpcError::Refused {
                wanted: format!("{} {}", P::NAME, P::VERSION),
                got: format!("{protocol} {version}"),
            }),
        }
    }

    /// Waits at most `timeout` for each read or write from now on (e.g. a
    /// short deadline for the handshake, a longer one for the requests).
    pub fn set_timeout(&self, timeout: Duration) -> Result<(), IpcError> {
        self.stream.set_read_timeout(Some(timeout))?;
        self.stream.set_write_timeout(Some(timeout))?;
        Ok(())
    }

    /// Sends a request without waiting; returns its id.
    pub fn send(&mut self, req: &P::Request) -> Result<u64, IpcError> {
        let id = self.next_id;
        self.next_id += 1;
        self.stream.write_all(&encode(&Tagged { id, body: req }))?;
        Ok(id)
    }

    /// Waits for the response to request `id`.
    pub fn wait(&mut self, id: u64) -> Result<P::Response, IpcError> {
        if let Some(r) = self.early.remove(&id) {
            return Ok(r);
        }
        loop {
            let t: Tagged<P::Response> = self.read_frame()?;
            if t.id == id {
                return Ok(t.body);
            }
            self.early.insert(t.id, t.body);
        }
    }

    /// Sends a request and waits for its response.
    pub fn call(&mut self, req: &P::Request) -> Result<P::Response, IpcError> {
        let id = self.send(req)?;
        self.wait(id)
    }

    fn read_frame<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, IpcError> {
        loop {
            if let Some(payload) = self.frames.next_payload()? {
                return decode(payload);
            }
            if self.frames.read_from(&mut self.stream)?.bytes == 0 {
                return Err(IpcError::Closed);
            }
        }
    }
}
