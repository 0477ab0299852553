//! The mio shell: moves the resolver's messages over UDP and TCP.
//!
//! Every UDP try gets a fresh socket on a random port, connected to the
//! server it asks, so that a forged answer must guess the port as well as
//! the 16-bit id (RFC 5452), and the kernel drops datagrams from anyone
//! else. The socket closes when the answer is in, when the try is
//! superseded or when the query ends. A truncated answer gets a TCP
//! connection of its own, closed likewise or after a deadline. Buffers are
//! bounded: a TCP reply cannot exceed 64 KiB (the length prefix is 16
//! bits). Tokens come from the caller, so the transport fits into any
//! event loop. Loopback servers are asked from loopback addresses, so tests
//! never send from a routable address.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use mio::net::{TcpStream, UdpSocket};
use mio::{Interest, Registry, Token};

use crate::hosts::Dns;
use crate::resolver::{QueryId, Transmit};

enum Sock {
    Udp(UdpSocket),
    Tcp {
        stream: TcpStream,
        out: Vec<u8>,
        sent: usize,
        input: Vec<u8>,
    },
}

struct Conn {
    query: QueryId,
    wire_id: u16,
    tcp: bool,
    sock: Sock,
    deadline: Instant,
}

/// The sockets of one resolver.
pub struct Transport {
    conns: HashMap<Token, Conn>,
    by_query: HashMap<QueryId, Token>,
    timeout: Duration,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("sockets", &self.conns.len())
            .finish()
    }
}

fn local_for(server: SocketAddr) -> SocketAddr {
    let ip = match (server.ip(), server.ip().is_loopback()) {
        (IpAddr::V4(_), true) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        (IpAddr::V4(_), false) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (IpAddr::V6(_), true) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        (IpAddr::V6(_), false) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, 0)
}

impl Transport {
    /// A transport whose sockets live at most `timeout` past their try.
    pub fn new(timeout: Duration) -> Transport {
        Transport {
            conns: HashMap::new(),
            by_query: HashMap::new(),
            timeout,
        }
    }

    /// Open sockets (UDP and TCP).
    pub fn sockets(&self) -> usize {
        self.conns.len()
    }

    /// Sends everything the resolver has queued.
    pub fn flush(
        &mut self,
        dns: &mut Dns,
        registry: &Registry,
        token: &mut dyn FnMut() -> Token,
        now: Instant,
    ) {
        while let Some(tx) = dns.resolver.poll_transmit() {
            // A new try of the same query supersedes the old socket.
            if let Some(old) = self.by_query.remove(&tx.query) {
                self.close(old, registry);
            }
            let tok = token();
            match self.open(&tx, registry, tok) {
                Ok(sock) => {
                    let deadline = now + self.timeout;
                    let conn = Conn {
                        query: tx.query,
                        wire_id: tx.wire_id,
                        tcp: tx.tcp,
                        sock,
                        deadline,
                    };
                    self.conns.insert(tok, conn);
                    self.by_query.insert(tx.query, tok);
                }
                Err(_) => dns
                    .resolver
                    .handle_transport_error(tx.query, tx.wire_id, now),
            }
        }
        dns.poll(now);
    }

    fn open(&self, tx: &Transmit, registry: &Registry, tok: Token) -> std::io::Result<Sock> {
        if tx.tcp {
            let mut out = Vec::with_capacity(tx.payload.len() + 2);
            out.extend_from_slice(&(tx.payload.len() as u16).to_be_bytes());
            out.extend_from_slice(&tx.payload);
            let mut stream = TcpStream::connect(tx.server)?;
            registry.register(&mut stream, tok, Interest::READABLE | Interest::WRITABLE)?;
            return Ok(Sock::Tcp {
                stream,
                out,
                sent: 0,
                input: vec![],
            });
        }
        let mut s = UdpSocket::bind(local_for(tx.server))?;
        s.connect(tx.server)?;
        s.send(&tx.payload)?;
        registry.register(&mut s, tok, Interest::READABLE)?;
        Ok(Sock::Udp(s))
    }

    /// Handles readiness of `token`; false when the token is not ours.
    pub fn ready(
        &mut self,
        token: Token,
        dns: &mut Dns,
        registry: &Registry,
        now: Instant,
    ) -> bool {
        let Some(c) = self.conns.get_mut(&token) else {
            return false;
        };
        let done = match &mut c.sock {
            Sock::Udp(s) => {
                let mut buf = [0u8; 4096];
                loop {
                    match s.recv(&mut buf) {
                        // Connected: only the server's datagrams arrive here.
                        Ok(n) => match s.peer_addr() {
                            Ok(from) => dns.resolver.handle_udp(from, &buf[..n], now),
                            Err(_) => break,
                        },
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        // ICMP port unreachable and the like: this try failed.
                        Err(_) => {
                            dns.resolver.handle_transport_error(c.query, c.wire_id, now);
                            break;
                        }
                    }
                }
                !dns.resolver.wants_socket(c.query, c.wire_id, false)
            }
            Sock::Tcp {
                stream,
                out,
                sent,
                input,
            } => match drive_tcp(stream, out, sent, input) {
                Ok(Some(msg)) => {
                    dns.resolver.handle_tcp(c.query, &msg, now);
                    true
                }
                Ok(None) => false,
                Err(()) => {
                    dns.resolver.handle_transport_error(c.query, c.wire_id, now);
                    true
                }
            },
        };
        if done {
            self.close(token, registry);
        }
        dns.poll(now);
        true
    }

    /// Closes sockets that are past their deadline or no longer wanted.
    pub fn expire(&mut self, dns: &mut Dns, registry: &Registry, now: Instant) {
        let stale: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.deadline <= now || !dns.resolver.wants_socket(c.query, c.wire_id, c.tcp)
            })
            .map(|(t, _)| *t)
            .collect();
        for t in stale {
            self.close(t, registry);
        }
    }

    /// The earliest socket deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.conns.values().map(|c| c.deadline).min()
    }

    fn close(&mut self, token: Token, registry: &Registry) {
        if let Some(c) = self.conns.remove(&token) {
            if self.by_query.get(&c.query) == Some(&token) {
                self.by_query.remove(&c.query);
            }
            let _ = match c.sock {
                Sock::Udp(mut s) => registry.deregister(&mut s),
                Sock::Tcp { mut stream, .. } => registry.deregister(&mut stream),
            };
        }
    }
}

/// Writes what is pending and reads what has come; a whole reply ends it.
fn drive_tcp(
    stream: &mut TcpStream,
    out: &[u8],
    sent: &mut usize,
    input: &mut Vec<u8>,
) -> Result<Option<Vec<u8>>, ()> {
    while *sent < out.len() {
        match stream.write(&out[*sent..]) {
            Ok(0) => return Err(()),
            Ok(n) => *sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::NotConnected => {
                return Ok(None)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Err(()),
        }
    }
    let mut buf = [0u8; 8192];
    loop {
        if input.len() >= 2 {
            let len = u16::from_be_bytes([input[0], input[1]]) as usize;
            if input.len() >= 2 + len {
                return Ok(Some(input[2..2 + len].to_vec()));
            }
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err(()),
            Ok(n) => input.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Err(()),
        }
    }
}
