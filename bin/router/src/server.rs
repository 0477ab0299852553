//! The router's event-loop shell: requests, the DNS transport, reloads.
//! Clients, the handshake and framing are `daemon::ipcserver`'s.
//!
//! Resolve and rewrite requests are answered as they are read (tables are in memory);
//! hosts requests start a DNS job and are answered when it ends, in any
//! order, by request id, so a slow domain never holds up anything else.
//! A reload builds the new tables first and swaps them in only when they
//! all compiled: a bad table line is logged with file and line and the
//! running tables stay. Requests read before the swap were answered
//! already; DNS jobs in flight carry on.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use daemon::ipcserver::{ClientId, Handler, Replies};
use daemon::skeleton::Cx;
use daemon::{msg_info, msg_warn};
use dns::transport::Transport;
use dns::{Dns, JobId};
use ipc::router::{Request, Response, Router as Proto};
use mio::Token;
use sys::creds::PeerCred;

use crate::convert;

/// Where the router's answers go.
type Out<'a> = Replies<'a, Proto>;

/// What a finished system-resolver lookup sends back.
type NativeDone = (
    dns::NativeRequest,
    Result<Vec<std::net::IpAddr>, dns::DnsError>,
);

/// A domain and its MTA-STS policy, for the hosts answer.
type Policy = (String, Option<Arc<sts::Cached>>);

/// The router daemon's state.
pub struct RouterServer {
    router: route::Router,
    dns: Dns,
    transport: Transport,
    native_tx: Sender<NativeDone>,
    native_rx: Receiver<NativeDone>,
    waker: Option<(Arc<mio::Waker>, Token)>,
    /// DNS jobs and who waits for each, with the MTA-STS policy of the
    /// next hop's domain when one applies.
    jobs: HashMap<JobId, (ClientId, u64, Option<Policy>)>,
    sts: Option<crate::sts::Sts>,
    reports: Option<crate::tlsrpt::Reports>,
    config_dir: PathBuf,
    overrides: Vec<(String, String)>,
}

impl RouterServer {
    /// A server over loaded settings and DNS.
    pub fn new(
        router: route::Router,
        dns: Dns,
        config_dir: PathBuf,
        overrides: Vec<(String, String)>,
    ) -> RouterServer {
        let (native_tx, native_rx) = channel();
        let transport = Transport::new(dns.resolver.config().timeout);
        RouterServer {
            router,
            dns,
            transport,
            native_tx,
            native_rx,
            waker: None,
            jobs: HashMap::new(),
            sts: None,
            reports: None,
            config_dir,
            overrides,
        }
    }

    /// With MTA-STS and TLS reports (`crate::sts`, `crate::tlsrpt`).
    pub fn with_sts(
        mut self,
        sts: crate::sts::Sts,
        reports: Option<crate::tlsrpt::Reports>,
    ) -> RouterServer {
        self.sts = sts.enabled.then_some(sts);
        self.reports = reports;
        self
    }

    /// The waker of helper threads (system resolver, policy fetches),
    /// made on first use.
    fn waker(&mut self, cx: &mut Cx<'_>) -> Option<Arc<mio::Waker>> {
        if self.waker.is_none() {
            let t = cx.token();
            match mio::Waker::new(cx.registry, t) {
                Ok(w) => self.waker = Some((Arc::new(w), t)),
                Err(e) => msg_warn!("cannot make a waker: {e}"),
            }
        }
        self.waker.as_ref().map(|(w, _)| w.clone())
    }

    /// Starts the hosts lookup of a request, with the policy it got.
    fn start_hosts(
        &mut self,
        cx: &mut Cx<'_>,
        client: ClientId,
        id: u64,
        nexthop: &str,
        policy: Option<Policy>,
    ) {
        let job = self.dns.hosts(nexthop, cx.now);
        self.jobs.insert(job, (client, id, policy));
    }

    /// Hands single lookups that ended to MTA-STS, and fetches that ended.
    fn sts_progress(&mut self, cx: &mut Cx<'_>) {
        let Some(mut sts) = self.sts.take() else {
            return;
        };
        let waker = self.waker(cx);
        let mut go = Vec::new();
        while let Some((q, r)) = self.dns.poll_lookup() {
            if let Some(crate::sts::Next::Hosts(w, p)) = sts.lookup_done(q, r, waker.clone()) {
                go.push((w, p));
            }
        }
        while let Ok(f) = sts.rx.try_recv() {
            go.extend(sts.fetched(f));
        }
        self.sts = Some(sts);
        for (w, p) in go {
            self.start_hosts(cx, w.client, w.id, &w.nexthop, Some((w.domain, p)));
        }
    }

    /// Sends what DNS wants sent and answers the jobs that ended.
    fn pump(&mut self, cx: &mut Cx<'_>, out: &mut Out<'_>) {
        let (registry, now) = (cx.registry, cx.now);
        self.transport
            .flush(&mut self.dns, registry, &mut || cx.token(), now);
        while let Some(req) = self.dns.poll_native() {
            self.native_lookup(cx, req);
        }
        self.sts_progress(cx);
        // Hosts jobs just started may have been answered from the cache.
        let (registry, now) = (cx.registry, cx.now);
        self.transport
            .flush(&mut self.dns, registry, &mut || cx.token(), now);
        self.answer_jobs(out);
    }

    fn answer_jobs(&mut self, out: &mut Out<'_>) {
        while let Some((job, r)) = self.dns.poll_event() {
            if let Some((client, id, policy)) = self.jobs.remove(&job) {
                let r = convert::hosts(r);
                let r = match &policy {
                    Some((domain, p)) => crate::sts::apply(r, domain, p.as_deref()),
                    None => r,
                };
                out.send(client, id, &r);
            }
        }
    }

    /// smtp_host_lookup = native: getaddrinfo in a thread, so the loop
    /// never waits for it; the answer comes back through a channel and a waker.
    fn native_lookup(&mut self, cx: &mut Cx<'_>, req: dns::NativeRequest) {
        let Some(waker) = self.waker(cx) else {
            let r = Err(dns::DnsError::ServFail("cannot start a lookup".into()));
            self.dns.native_done(&req, r, cx.now);
            return;
        };
        let tx = self.native_tx.clone();
        std::thread::spawn(move || {
            let r = dns::native_addresses(&req.name);
            let _ = tx.send((req, r));
            let _ = waker.wake();
        });
    }

    fn reload_from(&mut self, cfg: &config::Config) {
        match route::Settings::load(cfg) {
            Ok((s, warnings)) => {
                for w in warnings {
                    msg_warn!("{w}");
                }
                self.router = route::Router::new(s);
                self.dns.resolver.clear_cache();
                msg_info!("tables reloaded");
            }
            Err(e) => msg_warn!("reload: {e}; keeping the running tables"),
        }
    }
}

impl Handler<Proto> for RouterServer {
    fn request(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Out<'_>,
        from: ClientId,
        id: u64,
        req: Request,
    ) {
        match req {
            Request::Resolve { address, smtputf8 } => {
                let r = self
                    .router
                    .classify(&address, smtputf8)
                    .and_then(|c| Ok((c, self.router.resolve(&address, smtputf8)?)));
                let r = convert::resolved(r);
                out.send(from, id, &r);
            }
            Request::ResolveQueued { address, smtputf8 } => {
                let r = self
                    .router
                    .classify(&address, smtputf8)
                    .and_then(|c| Ok((c, vec![self.router.resolve_queued(&address, smtputf8)?])));
                let r = convert::resolved(r);
                out.send(from, id, &r);
            }
            Request::Rewrite {
                sender,
                addresses,
                smtputf8,
            } => {
                let r = Response::Rewritten {
                    sender: convert::rewrite(
                        self.router
                            .rewrite_sender(&sender, smtputf8)
                            .map(|s| s.map(|s| vec![s])),
                    ),
                    recipients: addresses
                        .iter()
                        .map(|a| convert::rewrite(self.router.rewrite_recipient(a, smtputf8)))
                        .collect(),
                };
                out.send(from, id, &r);
            }
            Request::Hosts { nexthop } => {
                // LMTP's next hops (lmtp(8)): a socket path needs no
                // lookup; inet:host:port is that host without MX lookup.
                if let Some(list) = lmtp_unix_hosts(&nexthop) {
                    out.send(from, id, &Response::Hosts(list));
                    return;
                }
                let nexthop = match nexthop.strip_prefix("inet:") {
                    Some(hp) => lmtp_inet_nexthop(hp),
                    None => nexthop,
                };
                let domain = self.sts.as_ref().and_then(|s| s.domain_of(&nexthop));
                if let Some(domain) = domain {
                    let waker = self.waker(cx);
                    let w = crate::sts::Waiting {
                        client: from,
                        id,
                        nexthop,
                        domain,
                    };
                    if let Some(sts) = self.sts.as_mut() {
                        if let crate::sts::Next::Hosts(w, p) =
                            sts.begin(&mut self.dns, w, cx.now, waker)
                        {
                            self.start_hosts(cx, w.client, w.id, &w.nexthop, Some((w.domain, p)));
                        }
                    }
                } else {
                    self.start_hosts(cx, from, id, &nexthop, None);
                }
                self.pump(cx, out);
            }
            Request::Reload => {
                match config::Config::load(&self.config_dir, &[]) {
                    Ok(l) => {
                        // master.cf's -o overrides hold on reload, as at start.
                        let mut c = l.config;
                        for (k, v) in &self.overrides {
                            let _ = c.set_override(k, v);
                        }
                        self.reload_from(&c)
                    }
                    Err(e) => msg_warn!("reload: {e}; keeping the running tables"),
                }
                out.send(from, id, &Response::Reloaded);
            }
        }
    }

    /// Only the mail system's own processes: root, or our own uid
    /// (mail_owner, or the invoking user when unprivileged).
    fn allow(&self, peer: &PeerCred) -> bool {
        peer.uid == 0 || peer.uid == sys::current_ids().0
    }

    fn gone(&mut self, _cx: &mut Cx<'_>, client: ClientId) {
        // Jobs for it run on (their answers fill the cache) but answer nobody.
        self.jobs.retain(|_, (c, _, _)| *c != client);
    }

    fn ready(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Out<'_>,
        token: Token,
        _readable: bool,
        _writable: bool,
    ) {
        if self.waker.as_ref().is_some_and(|(_, t)| *t == token) {
            while let Ok((req, r)) = self.native_rx.try_recv() {
                self.dns.native_done(&req, r, cx.now);
            }
            self.pump(cx, out);
            return;
        }
        if self
            .transport
            .ready(token, &mut self.dns, cx.registry, cx.now)
        {
            self.pump(cx, out);
        }
    }

    fn timeout(&mut self, cx: &mut Cx<'_>, out: &mut Out<'_>) {
        if let Some(r) = self.reports.as_mut() {
            if r.deadline(cx.now) <= cx.now {
                r.tick();
            }
        }
        self.dns.resolver.handle_timeout(cx.now);
        self.transport.expire(&mut self.dns, cx.registry, cx.now);
        self.dns.poll(cx.now);
        self.pump(cx, out);
    }

    fn next_deadline(&self) -> Option<Instant> {
        let now = Instant::now();
        [
            self.dns.resolver.poll_timeout(),
            self.transport.next_deadline(),
            self.reports.as_ref().map(|r| r.deadline(now)),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn reload(&mut self, _cx: &mut Cx<'_>, config: &config::Config) -> bool {
        self.reload_from(config);
        true
    }
}

/// The host list of an LMTP `unix:PATH` next hop: one host named after the
/// next hop (each socket its own host in qmgr's destination database: one
/// that fails must not put every other socket in retry), with a placeholder
/// address (qmgr's host lists hold IP addresses; the lmtp agent connects to
/// the path the next hop names).
fn lmtp_unix_hosts(nexthop: &str) -> Option<ipc::router::HostList> {
    nexthop.strip_prefix("unix:").filter(|p| !p.is_empty())?;
    Some(ipc::router::HostList {
        nexthop: nexthop.to_string(),
        from_mx: false,
        hosts: vec![ipc::router::Host {
            name: nexthop.to_string(),
            preference: 0,
            port: 0,
            addrs: vec![std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)],
            error: None,
            dane: ipc::delivery::Dane::Insecure,
        }],
        ttl: 3600,
        authentic: false,
    })
}

/// `inet:host:port` (port 24, LMTP's, when not given) as the SMTP next hop
/// `[host]:port`: the host's addresses, never its MX records.
fn lmtp_inet_nexthop(host_port: &str) -> String {
    let (host, port) = match host_port.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((h, after)) => (h, after.strip_prefix(':').unwrap_or("24")),
            None => (rest, "24"),
        },
        None => match host_port.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() => (h, p),
            _ => (host_port, "24"),
        },
    };
    format!("[{host}]:{port}")
}

#[cfg(test)]
mod lmtp_tests {
    use super::*;

    #[test]
    fn lmtp_next_hops() {
        assert_eq!(lmtp_inet_nexthop("127.0.0.1:2424"), "[127.0.0.1]:2424");
        assert_eq!(lmtp_inet_nexthop("mailbox.example"), "[mailbox.example]:24");
        assert_eq!(lmtp_inet_nexthop("[::1]:24"), "[::1]:24");
        assert_eq!(lmtp_inet_nexthop("[::1]"), "[::1]:24");
        let l = lmtp_unix_hosts("unix:private/dovecot-lmtp").unwrap();
        assert_eq!(l.hosts.len(), 1);
        assert_eq!(
            l.hosts[0].name, "unix:private/dovecot-lmtp",
            "a host per socket"
        );
        assert!(lmtp_unix_hosts("unix:").is_none());
        assert!(lmtp_unix_hosts("example.com").is_none());
    }
}
