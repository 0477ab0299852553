//! One instance's connection: `wire`'s mutual-TLS peer and what clusterd
//! keeps of it.
//!
//! Frames over `cluster::proto::MAX_FRAME` end the connection, and so does
//! a peer that leaves [`OUT_LIMIT`] bytes unread (clusterd drops it rather
//! than grow without bound).

use std::net::SocketAddr;
use std::sync::Arc;

use daemon::Cx;
use mio::net::TcpStream;
use mio::Token;

/// Bytes of frames a peer may leave unread before it is dropped: a few
/// full re-syncs of a thousand keys, far more than a peer that reads ever
/// has waiting.
pub const OUT_LIMIT: usize = 4 << 20;

/// An instance's connection.
pub struct Peer {
    /// The connection.
    pub wire: wire::Peer,
    /// The coordinator's number for it.
    pub id: u64,
    /// Handshake done and announced to the coordinator.
    pub joined: bool,
}

impl Peer {
    /// Wraps an accepted socket and starts the server side of TLS.
    pub fn new(
        sock: TcpStream,
        addr: SocketAddr,
        id: u64,
        cfg: Arc<rustls::ServerConfig>,
        cx: &mut Cx<'_>,
        token: Token,
    ) -> Result<Peer, String> {
        let wire = wire::Peer::accept(
            sock,
            addr,
            cfg,
            cluster::proto::MAX_FRAME,
            OUT_LIMIT,
            cx.registry,
            token,
            cx.now,
        )?;
        Ok(Peer {
            wire,
            id,
            joined: false,
        })
    }
}
