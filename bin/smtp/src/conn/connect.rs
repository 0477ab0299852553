//! The connect path of a connection: each address of the host in turn,
//! directly or through the egress proxies, until one is connected.
//!
//! Directly, the source address (the shaping policy's `localip`, else
//! `smtp_bind_address`) is bound here; a source that cannot be bound is
//! this host's problem, reported as a local failure (4.4.0) that does not
//! count against the destination.
//!
//! With `smtp_proxy` (see `crate::proxy`) nothing is bound here: the
//! connection goes to a proxy, in the order the agent gives, and opens
//! with a PROXY protocol v2 header naming the source address (an address
//! on the proxy; the unspecified address, the proxy's choice, when there
//! is none) and the host's address. A proxy that refuses or does not
//! answer within `smtp_connect_timeout` is the proxy's failure, never the
//! destination's: it is logged, reported to the agent (which counts it and
//! puts the proxy at the back for a while) and the next proxy is tried for
//! the same address. When none is left the connection fails as a local
//! failure naming the proxies (4.4.0): the destination is neither marked
//! dead nor its host skipped. HAProxy says that it could not reach the
//! host by closing the connection before any byte: that, and only that,
//! is the host address's failure, and the next address is tried through
//! the same proxy. The logged relay is the host's, whichever the path.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use daemon::{msg_info, msg_warn, Cx};
use ipc::delivery::{OpenFailure, Response};
use mail::{Status, StatusCode};
use mio::{Interest, Registry};
use smtp_proto::client_session::ClientSession;

use super::{unreached, Outcome, Phase, SmtpConn};
use crate::results::relay;

/// What the agent hears of the proxies a connection tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyEvent {
    /// It took the connection.
    Worked(SocketAddr),
    /// It could not be reached: why.
    Failed(SocketAddr, String),
}

impl SmtpConn {
    /// The current wait took too long.
    pub fn timed_out(&mut self, _now: Instant) {
        if matches!(self.phase, Phase::Connecting) {
            if let Some(proxy) = self.via {
                self.deadline = None;
                self.proxy_failed(proxy, "Connection timed out".into());
                // Off the loop at the next connect step (no registry here).
                self.stale.extend(self.stream.take());
                self.redial = true;
                return;
            }
        }
        let what = match self.phase {
            Phase::Connecting => {
                format!("connect to {}: Connection timed out", self.current_relay())
            }
            _ => format!(
                "conversation with {} timed out while {}",
                self.relay,
                self.stage_text()
            ),
        };
        self.deadline = None;
        if matches!(self.phase, Phase::Connecting) {
            self.connect_failed(what);
        } else {
            self.fail(what);
        }
    }

    /// Proxy outcomes for the agent since the last call.
    pub fn take_proxy_events(&mut self) -> Vec<ProxyEvent> {
        std::mem::take(&mut self.proxy_events)
    }

    /// The socket of an LMTP `unix:` next hop.
    pub(super) fn unix_path(&self) -> Option<std::path::PathBuf> {
        let path = self
            .nexthop
            .strip_prefix("unix:")
            .filter(|_| self.settings.lmtp)?;
        Some(self.settings.queue_root.join(path))
    }

    pub(super) fn current_relay(&self) -> String {
        if let Some(p) = self
            .nexthop
            .strip_prefix("unix:")
            .filter(|_| self.settings.lmtp)
        {
            // Postfix's lmtp names a socket's server after this host:
            // myhostname[path].
            return format!("{}[{p}]", self.settings.myhostname);
        }
        let i = self.next_addr.saturating_sub(1);
        self.addrs
            .get(i)
            .map(|a| relay(&self.host, *a))
            .unwrap_or_else(|| self.host.clone())
    }

    pub(super) fn connect_step(&mut self, cx: &mut Cx<'_>) {
        if std::mem::take(&mut self.redial) {
            // A proxy failed, or the host's address failed behind one: the
            // socket is gone; start over from the address to try next.
            self.session = None;
            self.inbuf.clear();
            self.phase = Phase::Connecting;
            // The new socket says for itself when it is ready.
            (self.readable, self.writable, self.read_closed) = (false, false, false);
        }
        for mut s in self.stale.drain(..) {
            let _ = cx.registry.deregister(s.socket());
        }
        loop {
            if let Some(s) = self.stream.as_mut() {
                if !self.writable {
                    return;
                }
                self.writable = false;
                let sock = s.socket();
                match (sock.take_error(), sock.connected()) {
                    (Ok(None), Ok(_)) => {
                        if let Some(proxy) = self.via {
                            if !self.send_proxy_header(proxy, cx.registry) {
                                continue;
                            }
                        }
                        self.phase = Phase::Session;
                        self.relay = self.current_relay();
                        let mut client = self.settings.client.clone();
                        client.tls = self.policy.client_tls();
                        if let Some(sts) = &self.sts {
                            client.tls = sts.client_tls(client.tls);
                        }
                        self.session = Some(ClientSession::new(client, false));
                        self.deadline = Some(cx.now + self.settings.helo_timeout);
                        // "helo" once the greeting is in (see session_step).
                        self.stage = "connect";
                        self.readable = true;
                        return;
                    }
                    (Ok(Some(e)), _) | (Err(e), _) => self.connect_error(cx.registry, e),
                    (Ok(None), Err(e)) if e.kind() == std::io::ErrorKind::NotConnected => return,
                    (Ok(None), Err(e)) => self.connect_error(cx.registry, e),
                }
                if self.done {
                    return;
                }
            }
            if let Some(path) = self.unix_path() {
                if self.next_addr > 0 {
                    let reason = self.errors.join("; ");
                    self.connect_failed(reason);
                    return;
                }
                self.next_addr = 1;
                match mio::net::UnixStream::connect(&path) {
                    Ok(mut sock) => {
                        // Watched for writing only while output waits
                        // (`watch_writes`); a Unix connect is done at once.
                        self.watching_out = false;
                        if let Err(e) =
                            cx.registry
                                .register(&mut sock, self.token, Interest::READABLE)
                        {
                            self.errors.push(format!("register: {e}"));
                            continue;
                        }
                        self.stream = Some(tls::Stream::over(tls::Sock::Unix(sock)));
                        // Connected already: no writable event will say so.
                        self.writable = true;
                        self.connect_started = cx.now;
                        self.deadline = Some(cx.now + self.settings.connect_timeout);
                    }
                    Err(e) => self
                        .errors
                        .push(format!("connect to {}: {e}", self.current_relay())),
                }
                continue;
            }
            if self.next_addr == 0 {
                if let Some(why) = self.sts.as_mut().and_then(|s| s.host_refused()) {
                    self.tls_refused(why);
                    return;
                }
            }
            let Some(addr) = self.addrs.get(self.next_addr).copied() else {
                let reason = if self.errors.is_empty() {
                    format!("{}: no address", self.host)
                } else {
                    self.errors.join("; ")
                };
                // Every address was of the other family than the source
                // address configured: this side's doing, not the host's.
                if self.family_skips > 0 && self.family_skips == self.errors.len() {
                    self.local_failure(Status::new(StatusCode::NETWORK_TEMP, reason));
                    return;
                }
                self.connect_failed(reason);
                return;
            };
            self.next_addr += 1;
            // Through a proxy the source is named, not bound: smtp_bind_address
            // stands in for the policy's choice as it would here.
            let family_source = if self.proxies.is_empty() {
                self.source
            } else {
                self.source.or(self.settings.bind)
            };
            if let Some(src) = family_source.filter(|s| s.is_ipv4() != addr.is_ipv4()) {
                self.errors.push(format!(
                    "connect to {}: not tried from source address {src} of the other family",
                    relay(&self.host, addr)
                ));
                self.family_skips += 1;
                continue;
            }
            if !self.proxies.is_empty() {
                let Some(proxy) = self.proxies.get(self.proxy_at).copied() else {
                    self.proxies_down();
                    return;
                };
                // The same host address again, through the next proxy, if
                // this one fails.
                self.next_addr -= 1;
                self.via = Some(proxy);
                match sys::net::tcp_connect(proxy, None) {
                    Ok(std) => {
                        if self.watch(std, cx) {
                            return;
                        }
                        self.proxy_failed(proxy, "cannot watch the socket".into());
                    }
                    Err(e) => self.proxy_failed(proxy, e.to_string()),
                }
                continue;
            }
            let bind = self.source.or(self.settings.bind);
            match sys::net::tcp_connect(addr, bind) {
                Ok(std) => {
                    if self.watch(std, cx) {
                        return;
                    }
                    self.errors.push("register: cannot watch the socket".into());
                }
                // No other address can do better from the same source.
                Err(sys::net::ConnectError::Bind(e)) => {
                    let ip = bind.map(|b| b.to_string()).unwrap_or_default();
                    self.bind_failed(format!("cannot bind source address {ip}: {e}"));
                    return;
                }
                Err(e) => self
                    .errors
                    .push(format!("connect to {}: {e}", relay(&self.host, addr))),
            }
        }
    }

    /// Puts a connecting socket on the loop; false if it cannot be.
    fn watch(&mut self, std: std::net::TcpStream, cx: &mut Cx<'_>) -> bool {
        let mut sock = mio::net::TcpStream::from_std(std);
        let _ = sock.set_nodelay(true);
        if let Err(e) = cx.registry.register(
            &mut sock,
            self.token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            msg_warn!("register: {e}");
            return false;
        }
        self.stream = Some(tls::Stream::plain(sock));
        self.connect_started = cx.now;
        self.deadline = Some(cx.now + self.settings.connect_timeout);
        true
    }

    /// The socket did not connect: through a proxy, that proxy failed;
    /// directly, this address of the host did.
    fn connect_error(&mut self, registry: &Registry, e: std::io::Error) {
        if let Some(mut s) = self.stream.take() {
            let _ = registry.deregister(s.socket());
        }
        match self.via {
            Some(proxy) => self.proxy_failed(proxy, e.to_string()),
            None => {
                let why = format!("connect to {}: {e}", self.current_relay());
                msg_info!("{why}");
                self.errors.push(why);
            }
        }
    }

    /// Connected to `proxy`: the header asks it for the host's address
    /// from the source address. False (the proxy failed) if it cannot be
    /// written.
    fn send_proxy_header(&mut self, proxy: SocketAddr, registry: &Registry) -> bool {
        // The address the proxy was connected for (connect_step's choice).
        let Some(dst) = self.addrs.get(self.next_addr).copied() else {
            return false;
        };
        let ip = self
            .source
            .or(self.settings.bind)
            .unwrap_or(match dst.ip() {
                IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            });
        // The families agree: addresses of the other family were skipped.
        let header = smtp_proto::proxy::encode_v2(SocketAddr::new(ip, 0), dst)
            .expect("smtp: proxy header of one family");
        let Some(s) = self.stream.as_mut() else {
            return false;
        };
        if let Err(e) = s.write(&header).and_then(|()| s.flush().map(drop)) {
            self.connect_error(registry, e);
            return false;
        }
        self.proxy_events.push(ProxyEvent::Worked(proxy));
        // The host's address is the one in use from here on.
        self.next_addr += 1;
        self.header_sent = true;
        true
    }

    /// `proxy` could not be reached: logged, told to the agent, and the
    /// next proxy is tried for the same address.
    pub(super) fn proxy_failed(&mut self, proxy: SocketAddr, why: String) {
        // Failed after its header went out (a reset or no greeting): the
        // same address again, through the next proxy, not the next address
        // (with one address there was none, and the host was wrongly
        // counted as unreachable with "no address").
        if std::mem::take(&mut self.header_sent) {
            self.next_addr = self.next_addr.saturating_sub(1);
        }
        let text = format!("connect to proxy {proxy}: {why}");
        match self.addrs.get(self.next_addr) {
            Some(a) => msg_warn!("{text} (for {})", relay(&self.host, *a)),
            None => msg_warn!("{text}"),
        }
        self.proxy_events.push(ProxyEvent::Failed(proxy, why));
        self.proxy_errors.push(text);
        self.proxy_at += 1;
        self.via = None;
    }

    /// Behind a proxy, the connection closed before any byte: HAProxy's
    /// way of saying that the host's address did not answer. The next
    /// address is tried through the same proxy.
    pub(super) fn unreached_behind_proxy(&mut self) {
        let Some(proxy) = self.via else {
            return;
        };
        let why = format!(
            "connect to {} via proxy {proxy}: closed by the proxy before the greeting (the host did not answer it)",
            self.relay
        );
        msg_info!("{why}");
        self.errors.push(why);
        self.stale.extend(self.stream.take());
        self.via = None;
        // This address was not reached: the next one, through the same proxy.
        self.header_sent = false;
        self.redial = true;
    }

    /// No proxy could be reached: a local failure (4.4.0) naming them,
    /// which does not count against the destination.
    fn proxies_down(&mut self) {
        let reason = format!(
            "no egress proxy could be reached: {}",
            self.proxy_errors.join("; ")
        );
        self.local_failure(Status::new(StatusCode::NETWORK_TEMP, reason));
    }

    /// The source address cannot be bound: a local problem (4.4.0), not
    /// the destination's, so it is not counted against the destination's
    /// addresses.
    fn bind_failed(&mut self, reason: String) {
        self.local_failure(Status::new(StatusCode::NETWORK_TEMP, reason));
    }

    fn local_failure(&mut self, status: Status) {
        msg_warn!("{}: {}", self.host, status.text);
        self.outcomes.push(Outcome {
            request: self.open_request,
            response: Response::OpenFailed {
                conn: self.id.conn,
                failure: OpenFailure::Local,
                reason: status.clone(),
                remote: None,
            },
        });
        self.fail_queued_with(&status);
        self.done = true;
    }

    /// No address could be used: the destination was not reached.
    fn connect_failed(&mut self, reason: String) {
        if !self.errors.contains(&reason) {
            msg_info!("{reason}");
        }
        self.outcomes.push(Outcome {
            request: self.open_request,
            response: Response::OpenFailed {
                conn: self.id.conn,
                failure: OpenFailure::Unreachable,
                reason: unreached(reason.clone()),
                remote: None,
            },
        });
        self.fail_queued(&reason);
        self.done = true;
    }
}
