//! The instance's end of the link to clusterd, for a mio event loop: a
//! nonblocking TCP connection, then TLS with the instance's certificate
//! (clusterd's checked against the cluster's CA), carrying [`proto`]
//! frames. The one part of this crate that does IO; the decisions stay in
//! the sans-IO [`Client`]: when to connect (and, after a loss, the
//! jittered back-off before connecting again), what to send, and what a
//! message or a loss means. [`Conn`] only tells it what happened on the
//! wire: connecting, connected (the handshake done), each message, lost
//! with the reason (the reasons are the log's words). Nothing blocks.
//!
//! [`proto`]: crate::proto

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use mio::{Interest, Registry, Token};

use crate::client::Client;
use crate::proto::{Decoder, ToInstance};
use crate::Ms;

/// The most read from clusterd in one event.
const READ_LIMIT: usize = 256 * 1024;

/// Where the link goes and the files of its mutual TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// clusterd's address (`cluster_server`).
    pub addr: SocketAddr,
    /// This instance's certificate chain (`cluster_tls_cert_file`).
    pub cert: PathBuf,
    /// Its key (`cluster_tls_key_file`).
    pub key: PathBuf,
    /// The cluster's CA, which clusterd's certificate must chain to
    /// (`cluster_tls_CAfile`).
    pub ca: PathBuf,
    /// The name clusterd's certificate must carry
    /// (`cluster_tls_server_name`, else the address).
    pub server_name: String,
}

/// The connection to clusterd, when there is one.
pub struct Conn {
    addr: SocketAddr,
    server_name: rustls::pki_types::ServerName<'static>,
    tls: Arc<rustls::ClientConfig>,
    stream: Option<tls::Stream>,
    token: Option<Token>,
    dec: Decoder,
}

impl Conn {
    /// A link to `target`, not yet connected; an error names the file or
    /// parameter that is wrong.
    pub fn new(target: &Target) -> Result<Conn, String> {
        let tls = tls::mutual_client_config(&target.cert, &target.key, &target.ca)
            .map_err(|e| e.to_string())?;
        let server_name = tls::server_name(&target.server_name).ok_or_else(|| {
            format!(
                "cluster_tls_server_name = {}: not a host name",
                target.server_name
            )
        })?;
        Ok(Conn {
            addr: target.addr,
            server_name,
            tls,
            stream: None,
            token: None,
            dec: crate::proto::decoder(),
        })
    }

    /// clusterd's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether `token` is the link's.
    pub fn owns(&self, token: Token) -> bool {
        self.token == Some(token)
    }

    /// Whether a connection is up (or being made).
    pub fn is_open(&self) -> bool {
        self.stream.is_some()
    }

    /// Time passed (`now` on the client's clock): the client's timers,
    /// and a connection started when it says so, registered under the
    /// token `token` gives.
    pub fn timeout(
        &mut self,
        client: &mut Client,
        now: Ms,
        registry: &Registry,
        token: impl FnOnce() -> Token,
    ) {
        client.handle_timeout(now);
        if client.should_connect(now) {
            self.connect(client, now, registry, token());
        }
    }

    fn connect(&mut self, client: &mut Client, now: Ms, registry: &Registry, token: Token) {
        client.connecting(now);
        let sock = match mio::net::TcpStream::connect(self.addr) {
            Ok(s) => s,
            Err(e) => {
                client.lost(now, &format!("connect to {}: {e}", self.addr));
                return;
            }
        };
        let mut stream = tls::Stream::plain(sock);
        if let Err(e) = stream.start_client_tls(self.tls.clone(), self.server_name.clone()) {
            client.lost(now, &format!("TLS: {e}"));
            return;
        }
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = registry.register(stream.socket(), token, interest) {
            client.lost(now, &format!("register: {e}"));
            return;
        }
        self.dec = crate::proto::decoder();
        self.stream = Some(stream);
        self.token = Some(token);
    }

    /// The link's socket is ready: reads what a `readable` event announced
    /// (`closed`: its read-closed flag), finishes the handshake, and hands
    /// the client the connection (once up) and each message; a failure
    /// or clusterd's close ends the connection and is the client's loss.
    pub fn ready(
        &mut self,
        client: &mut Client,
        now: Ms,
        registry: &Registry,
        readable: bool,
        closed: bool,
    ) {
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        let was = stream.is_handshaking();
        let mut msgs = Vec::new();
        let mut result: Result<bool, String> = Ok(false);
        if readable || closed {
            loop {
                let mut buf = Vec::new();
                match stream.read_event(&mut buf, READ_LIMIT, closed) {
                    Ok(st) => {
                        self.dec.push(&buf);
                        loop {
                            match self.dec.decode::<ToInstance>() {
                                Ok(Some(m)) => msgs.push(m),
                                Ok(None) => break,
                                Err(e) => {
                                    result = Err(format!("from clusterd: {e}"));
                                    break;
                                }
                            }
                        }
                        if st.eof {
                            result = result.and(Ok(true));
                            break;
                        }
                        if st.drained || st.bytes == 0 || result.is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        result = Err(if was {
                            format!("TLS handshake with clusterd at {}: {e}", self.addr)
                        } else {
                            e.to_string()
                        });
                        break;
                    }
                }
            }
        }
        if result.is_ok() {
            if let Err(e) = stream.flush() {
                result = Err(format!("connect to {}: {e}", self.addr));
            }
        }
        if was && !stream.is_handshaking() && result.is_ok() {
            client.connected(now);
        }
        for m in msgs {
            client.handle(now, m);
        }
        match result {
            Err(e) => self.fail(client, now, registry, &e),
            Ok(true) => self.fail(client, now, registry, "clusterd closed the connection"),
            Ok(false) => {}
        }
    }

    /// Sends one encoded message, if a connection is up; a failure ends
    /// it and is the client's loss.
    pub fn send(&mut self, client: &mut Client, now: Ms, registry: &Registry, frame: &[u8]) {
        let Some(s) = self.stream.as_mut() else {
            return;
        };
        if let Err(e) = s.write(frame).and_then(|_| s.flush().map(drop)) {
            self.fail(client, now, registry, &format!("to clusterd: {e}"));
        }
    }

    /// Ends the connection, if any (the client decided so, or it failed).
    pub fn close(&mut self, registry: &Registry) {
        if let Some(mut s) = self.stream.take() {
            s.close();
            let _ = registry.deregister(s.socket());
        }
        self.token = None;
    }

    fn fail(&mut self, client: &mut Client, now: Ms, registry: &Registry, why: &str) {
        self.close(registry);
        client.lost(now, why);
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
