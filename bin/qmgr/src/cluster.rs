//! qmgr's link to clusterd (`cluster_server`): the IO around the
//! instance's share of the cluster (crates/qmgr's `clustershare`, which
//! decides what clusterd's news means and what to tell it).
//!
//! This module connects to clusterd (nonblocking TCP, then TLS with this
//! instance's certificate, clusterd's checked against
//! `cluster_tls_CAfile`), moves the messages, and keeps the last instance
//! count in `state/cluster.instances` in the queue directory, so that an
//! instance restarted while clusterd is away divides its limits by it too
//! (one that never heard a count takes 1 per key: see [`COUNT_FILE`]).
//! Nothing here blocks the loop (the count file is a few bytes, written
//! when the count changes).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use cluster::proto::{Decoder, ToInstance};
use daemon::{msg_info, msg_warn, Cx};
use ipc::queuectl::{ClusterLink, ClusterView};
use mio::{Interest, Token};
use queue_manager::clustershare::{Share, ShareAction};
use queue_manager::{Level, QueueManager, Time};

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
    share: Share,
    addr: SocketAddr,
    server_name: rustls::pki_types::ServerName<'static>,
    tls: Arc<rustls::ClientConfig>,
    stream: Option<tls::Stream>,
    token: Option<Token>,
    dec: Decoder,
    started: Instant,
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
        let count_file = root.join(COUNT_FILE);
        let remembered = std::fs::read_to_string(&count_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        Ok(Some(ClusterConn {
            share: Share::from_config(config, &addr.to_string(), seed, remembered),
            addr,
            server_name,
            tls,
            stream: None,
            token: None,
            dec: cluster::proto::decoder(),
            started: Instant::now(),
            count_file,
        }))
    }

    fn ms(&self, at: Instant) -> u64 {
        at.duration_since(self.started).as_millis() as u64
    }

    /// Puts the share in force (again after a reload).
    pub fn install(&mut self, qm: &mut QueueManager<Disk>) {
        self.share.install(qm);
    }

    /// Whether `token` is the link's.
    pub fn owns(&self, token: Token) -> bool {
        self.token == Some(token)
    }

    /// When [`ClusterConn::timeout`] is next due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.share
            .client()
            .poll_timeout()
            .map(|ms| self.started + std::time::Duration::from_millis(ms))
    }

    /// Time passed: heartbeats, a silent clusterd, reconnecting.
    pub fn timeout(&mut self, cx: &mut Cx<'_>, qm: &mut QueueManager<Disk>, now: Time) {
        let ms = self.ms(cx.now);
        let connect = {
            let mut c = self.share.client();
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
        self.share.client().connecting(ms);
        let sock = match mio::net::TcpStream::connect(self.addr) {
            Ok(s) => s,
            Err(e) => {
                self.share
                    .client()
                    .lost(ms, &format!("connect to {}: {e}", self.addr));
                return;
            }
        };
        let mut stream = tls::Stream::plain(sock);
        if let Err(e) = stream.start_client_tls(self.tls.clone(), self.server_name.clone()) {
            self.share.client().lost(ms, &format!("TLS: {e}"));
            return;
        }
        let token = cx.token();
        if let Err(e) = cx.registry.register(
            stream.socket(),
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.share.client().lost(ms, &format!("register: {e}"));
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
        self.share.client().lost(ms, &why);
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
            let mut c = self.share.client();
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

    /// Carries out what the share has to do: log, keep the count,
    /// close, send.
    pub fn pump(&mut self, cx: &mut Cx<'_>, qm: &mut QueueManager<Disk>, now: Time) {
        let ms = self.ms(cx.now);
        for a in self.share.pump(ms, qm, now) {
            match a {
                ShareAction::Log(Level::Info, l) => msg_info!("{l}"),
                ShareAction::Log(Level::Warn, l) => msg_warn!("{l}"),
                ShareAction::SaveCount(n) => self.save_count(n),
                ShareAction::Close => self.close(cx),
                ShareAction::Send(out) => {
                    if let Some(s) = self.stream.as_mut() {
                        let r = s.write(&out).and_then(|_| s.flush().map(drop));
                        if let Err(e) = r {
                            self.fail(cx, format!("to clusterd: {e}"));
                        }
                    }
                }
            }
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

    /// A host this instance could not reach, for the others.
    pub fn host_retry(&mut self, host: &str, secs: u64) {
        self.share.host_retry(host, secs);
    }

    /// A destination this instance found dead, for the others.
    pub fn dead(&mut self, nexthop: &str, secs: u64) {
        self.share.dead(nexthop, secs);
    }

    /// The link for `sluice status` and the metrics.
    pub fn link(&self) -> ClusterLink {
        self.share.link()
    }

    /// `sluice cluster status`: the link and every shared key in use.
    pub fn view(&self, qm: &mut QueueManager<Disk>, now: Time) -> ClusterView {
        self.share.view(qm, now)
    }
}
