//! qmgr's link to clusterd (`cluster_server`): the IO around the
//! instance side of crates/cluster.
//!
//! The [`cluster::client::Client`] is installed as the shaper's share, so
//! the scheduler asks it for this instance's part of every shared limit;
//! this module connects to clusterd (nonblocking TCP, then TLS with this
//! instance's certificate, clusterd's checked against
//! `cluster_tls_CAfile`), moves the client's messages, and tells the queue
//! manager when grants change. Losing clusterd is logged as a warning and
//! shows in `sluice status` and the metrics as `degraded`: the client
//! divides every limit by the last known count until it is back. That
//! count is kept in `state/cluster.instances` in the queue directory, so that an
//! instance restarted while clusterd is away divides by it too (one that
//! never heard a count takes 1 per key: see [`COUNT_FILE`]). Destination
//! news from other instances goes to the scheduler. Nothing here blocks
//! the loop (the count file is a few bytes, written when the count changes).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use cluster::client::{Client, ClientConfig, ClientEvent, Handle, Link};
use cluster::proto::{encode, Decoder, DestNews, ToInstance};
use daemon::{msg_info, msg_warn, Cx};
use ipc::queuectl::{ClusterKeyView, ClusterLink, ClusterView};
use mio::{Interest, Token};
use queue_manager::{QueueManager, Time};

use crate::store::Disk;

const READ_LIMIT: usize = 256 * 1024;

/// The last instance count heard, in the queue directory. Halon's
/// fallback divides by "the last number of known hosts"; an instance that
/// restarts while clusterd is away would otherwise know none and take 1
/// connection per key and 1 token per interval of each shared rate (the
/// safe floor: no limit of the cluster is exceeded by more than the
/// fallback's own at least 1 per instance, but a rate of 600/min becomes
/// 1/min). Saved without fsync: a count lost in a crash only means that
/// floor until clusterd answers.
pub const COUNT_FILE: &str = "state/cluster.instances";

/// The link.
pub struct ClusterConn {
    handle: Handle,
    addr: SocketAddr,
    server_name: rustls::pki_types::ServerName<'static>,
    tls: Arc<rustls::ClientConfig>,
    stream: Option<tls::Stream>,
    token: Option<Token>,
    dec: Decoder,
    started: Instant,
    /// Why the link is down, for the log and `sluice status`.
    down_since: Option<Instant>,
    /// Where the last count is kept ([`COUNT_FILE`]).
    count_file: std::path::PathBuf,
}

impl ClusterConn {
    /// The link configured by main.cf, or `None` without `cluster_server`;
    /// an error names the parameter that is wrong. `root` is the queue
    /// directory as qmgr sees it, where [`COUNT_FILE`] is.
    pub fn from_config(
        config: &config::Config,
        root: &std::path::Path,
    ) -> Result<Option<ClusterConn>, String> {
        let Some(addr) = config.listen("cluster_server") else {
            return Ok(None);
        };
        let param = |n: &str| {
            let v = config.str(n);
            if v.is_empty() {
                Err(format!(
                    "{n} is empty: the link to clusterd is mutual TLS only"
                ))
            } else {
                Ok(v)
            }
        };
        let (cert, key, ca) = (
            param("cluster_tls_cert_file")?,
            param("cluster_tls_key_file")?,
            param("cluster_tls_CAfile")?,
        );
        let tls = tls::mutual_client_config(
            std::path::Path::new(&cert),
            std::path::Path::new(&key),
            std::path::Path::new(&ca),
        )
        .map_err(|e| e.to_string())?;
        let name = config.str("cluster_tls_server_name");
        let name = if name.is_empty() {
            addr.ip().to_string()
        } else {
            name
        };
        let server_name = tls::server_name(&name)
            .ok_or_else(|| format!("cluster_tls_server_name = {name}: not a host name"))?;
        let seed = u64::from(std::process::id())
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
        let mut cfg = ClientConfig::new(&config.str("myhostname"), seed);
        cfg.heartbeat_ms = (config.time("cluster_heartbeat_interval").as_millis() as u64).max(100);
        cfg.shared_concurrency = config.bool("cluster_shared_concurrency");
        let mut client = Client::new(cfg);
        let count_file = root.join(COUNT_FILE);
        if let Some(n) = std::fs::read_to_string(&count_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        {
            client.remember_instances(n);
        }
        Ok(Some(ClusterConn {
            handle: Handle::new(client, false),
            addr,
            server_name,
            tls,
            stream: None,
            token: None,
            dec: cluster::proto::decoder(),
            started: Instant::now(),
            down_since: None,
            count_file,
        }))
    }

    fn ms(&self, at: Instant) -> u64 {
        at.duration_since(self.started).as_millis() as u64
    }

    /// Puts the client in force as the shaper's share (again after a
    /// reload, which may bring a new shaper or algorithm).
    pub fn install(&mut self, qm: &mut QueueManager<Disk>) {
        let Some(sh) = qm.shaper_mut() else {
            return;
        };
        let fixed = sh.policy().algorithm == shaping::RateAlgorithm::FixedWindow;
        self.handle.set_fixed_window(fixed);
        sh.set_share(Some(Box::new(self.handle.clone())));
    }

    /// Whether `token` is the link's.
    pub fn owns(&self, token: Token) -> bool {
        self.token == Some(token)
    }

    /// When [`ClusterConn::timeout`] is next due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.handle
            .lock()
            .poll_timeout()
            .map(|ms| self.started + std::time::Duration::from_millis(ms))
    }

    /// Time passed: heartbeats, a silent clusterd, reconnecting.
    pub fn timeout(&mut self, cx: &mut Cx<'_>, qm: &mut QueueManager<Disk>, now: Time) {
        let ms = self.ms(cx.now);
        let connect = {
            let mut c = self.handle.lock();
            c.handle_timeout(ms);
            c.should_connect(ms)
        };
        if connect {
            self.connect(cx);
        }
        self.pump(cx, qm, now);
    }

    fn connect(&mut self, cx: &mut Cx<'_>) {
        let ms = self.ms(cx.now);
        self.handle.lock().connecting(ms);
        let sock = match mio::net::TcpStream::connect(self.addr) {
            Ok(s) => s,
            Err(e) => {
                self.handle
                    .lock()
                    .lost(ms, &format!("connect to {}: {e}", self.addr));
                return;
            }
        };
        let mut stream = tls::Stream::plain(sock);
        if let Err(e) = stream.start_client_tls(self.tls.clone(), self.server_name.clone()) {
            self.handle.lock().lost(ms, &format!("TLS: {e}"));
            return;
        }
        let token = cx.token();
        if let Err(e) = cx.registry.register(
            stream.socket(),
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.handle.lock().lost(ms, &format!("register: {e}"));
            return;
        }
        self.dec = cluster::proto::decoder();
        self.stream = Some(stream);
        self.token = Some(token);
    }

    fn close(&mut self, cx: &mut Cx<'_>) {
        if let Some(mut s) = self.stream.take() {
            s.close();
            let _ = cx.registry.deregister(s.socket());
        }
        self.token = None;
    }

    fn fail(&mut self, cx: &mut Cx<'_>, why: String) {
        self.close(cx);
        let ms = self.ms(cx.now);
        self.handle.lock().lost(ms, &why);
    }

    /// The link's socket is ready.
    pub fn ready(
        &mut self,
        cx: &mut Cx<'_>,
        qm: &mut QueueManager<Disk>,
        now: Time,
        readable: bool,
    ) {
        let ms = self.ms(cx.now);
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        let was = stream.is_handshaking();
        let mut msgs = Vec::new();
        let mut result: Result<bool, String> = Ok(false);
        if readable || cx.closed {
            loop {
                let mut buf = Vec::new();
                match stream.read_event(&mut buf, READ_LIMIT, cx.closed) {
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
        let established = was && !stream.is_handshaking() && result.is_ok();
        {
            let mut c = self.handle.lock();
            if established {
                c.connected(ms);
            }
            for m in msgs {
                c.handle(ms, m);
            }
        }
        match result {
            Err(e) => self.fail(cx, e),
            Ok(true) => self.fail(cx, "clusterd closed the connection".into()),
            Ok(false) => {}
        }
        self.pump(cx, qm, now);
    }

    /// Sends what the client has to say, logs its events, and wakes the
    /// scheduler when the limits changed.
    pub fn pump(&mut self, cx: &mut Cx<'_>, qm: &mut QueueManager<Disk>, now: Time) {
        let (events, out, changed) = {
            let mut c = self.handle.lock();
            let mut events = Vec::new();
            while let Some(e) = c.poll_event() {
                events.push(e);
            }
            let mut out = Vec::new();
            while let Some(m) = c.poll_transmit() {
                out.extend_from_slice(&encode(&m));
            }
            (events, out, c.take_changed())
        };
        for ev in events {
            match ev {
                ClientEvent::Linked { instances } => {
                    self.save_count(instances);
                    let was = self.down_since.take();
                    msg_info!(
                        "cluster: linked to clusterd at {}: {instances} instance{}{}",
                        self.addr,
                        if instances == 1 { "" } else { "s" },
                        was.map_or(String::new(), |t| format!(
                            " (after {}s degraded)",
                            cx.now.duration_since(t).as_secs()
                        ))
                    );
                }
                ClientEvent::Degraded { reason, instances } => {
                    self.down_since.get_or_insert(cx.now);
                    msg_warn!(
                        "cluster: clusterd at {} lost ({reason}): degraded, limits divided by {} instance{}",
                        self.addr,
                        instances.max(1),
                        if instances == 1 { "" } else { "s" }
                    );
                }
                ClientEvent::Close => self.close(cx),
                ClientEvent::Count { instances } => {
                    msg_info!("cluster: {instances} instances connected");
                    self.save_count(instances);
                }
                ClientEvent::News { from, news } => {
                    match news {
                        DestNews::Dead { dest, secs } => {
                            msg_info!(
                            "cluster: {from} says destination {dest} is not responding ({secs}s): its mail here waits too"
                        );
                            qm.dead_elsewhere(now, &dest, u64::from(secs));
                        }
                        // Another machine's own host is not this one's.
                        DestNews::HostRetry { host, .. } if local_host(&host) => {}
                        DestNews::HostRetry { host, secs } => {
                            msg_info!("cluster: {from} put host {host} in retry ({secs}s): skipped here too");
                            qm.host_retry_elsewhere(now, &host, u64::from(secs));
                        }
                    }
                }
            }
        }
        if !out.is_empty() {
            if let Some(s) = self.stream.as_mut() {
                let r = s.write(&out).and_then(|_| s.flush().map(drop));
                if let Err(e) = r {
                    self.fail(cx, format!("to clusterd: {e}"));
                }
            }
        }
        if changed {
            qm.limits_changed(now);
        }
    }

    /// Keeps the count for a restart (see [`COUNT_FILE`]); a failure is
    /// logged and costs only that.
    fn save_count(&self, instances: u32) {
        let tmp = self.count_file.with_extension("tmp");
        let r = std::fs::write(&tmp, format!("{instances}\n"))
            .and_then(|()| std::fs::rename(&tmp, &self.count_file));
        if let Err(e) = r {
            msg_warn!("cluster: {}: {e}", self.count_file.display());
        }
    }

    /// A host this instance could not reach: the others skip it too,
    /// unless it is this instance's own (a socket, localhost, a loopback
    /// address), which another instance's of that name is not.
    pub fn host_retry(&mut self, host: &str, secs: u64) {
        if local_host(host) {
            return;
        }
        self.handle.lock().news(DestNews::HostRetry {
            host: host.to_string(),
            secs: secs.min(u64::from(u32::MAX)) as u32,
        });
    }

    /// A destination this instance found dead: the others hear of it.
    pub fn dead(&mut self, nexthop: &str, secs: u64) {
        self.handle.lock().news(DestNews::Dead {
            dest: nexthop.to_string(),
            secs: secs.min(u64::from(u32::MAX)) as u32,
        });
    }

    /// The link for `sluice status` and the metrics.
    pub fn link(&self) -> ClusterLink {
        let c = self.handle.lock();
        let st = c.status();
        ClusterLink {
            coordinator: self.addr.to_string(),
            state: match st.link {
                Link::Linked => "linked",
                Link::Connecting { .. } | Link::Hello if st.losses == 0 => "connecting",
                _ => "degraded",
            }
            .into(),
            instances: st.instances,
            losses: st.losses,
        }
    }

    /// `sluice cluster status`: the link and every shared key in use.
    pub fn view(&self, qm: &mut QueueManager<Disk>, now: Time) -> ClusterView {
        let link = self.link();
        let names = self.handle.lock().status().names;
        let rate = |r: shaping::Rate| format!("{}/{}s", r.tokens, r.per.as_secs_f64());
        let keys = qm
            .shaper_mut()
            .map(|sh| sh.keys(now.0))
            .unwrap_or_default()
            .into_iter()
            .filter(|k| k.local_concurrency.is_some() || k.local_rate.is_some())
            .map(|k| ClusterKeyView {
                key: k.name.to_string(),
                concurrency: k.local_concurrency.and(k.props.concurrency),
                local_concurrency: k.local_concurrency,
                connections: k.connections,
                rate: k.local_rate.and(k.props.rate).map(rate),
                local_rate: k.local_rate.map(rate),
            })
            .collect();
        ClusterView { link, names, keys }
    }
}

/// Whether a host of qmgr's destination database is this machine's own:
/// an LMTP socket (`unix:PATH`), `localhost`, or a loopback literal
/// (`[127.0.0.1]`, `[::1]`, also as `name[address]`).
fn local_host(host: &str) -> bool {
    let lower = host.to_ascii_lowercase();
    if lower.starts_with("unix:") || lower == "localhost" || lower.starts_with("localhost[") {
        return true;
    }
    let literal = lower
        .rsplit_once('[')
        .and_then(|(_, rest)| rest.split(']').next())
        .and_then(|a| a.parse::<std::net::IpAddr>().ok());
    literal.is_some_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::local_host;

    #[test]
    fn hosts_of_this_machine_are_not_news_for_the_cluster() {
        for h in [
            "unix:private/dovecot-lmtp",
            "localhost",
            "[127.0.0.1]",
            "relay[::1]",
            "LocalHost[127.0.0.2]",
        ] {
            assert!(local_host(h), "{h}");
        }
        for h in [
            "mx1.example.com",
            "[192.0.2.1]",
            "mx.example[2001:db8::1]",
            "localhost.example.com",
        ] {
            assert!(!local_host(h), "{h}");
        }
    }
}
