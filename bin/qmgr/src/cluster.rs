//! qmgr's link to clusterd (`cluster_server`): wiring only. crates/qmgr's
//! `clustershare` decides what clusterd's news means, what to tell it,
//! where the link goes and what the count file holds; crates/cluster's
//! `link::Conn` moves the bytes (TCP, mutual TLS, frames) and its client
//! decides when to connect again. Here are the client's clock (this
//! process's monotonic milliseconds), the token, the log, and the count
//! file itself (`state/cluster.instances`, a few bytes, written when the
//! count changes: nothing here blocks the loop).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cluster::link::Conn;
use daemon::{msg_info, msg_warn, Cx};
use ipc::queuectl::{ClusterLink, ClusterView};
use mio::Token;
use queue_manager::clustershare::{self, Share, ShareAction};
use queue_manager::{DiskStore, Level, QueueManager, Time};

/// The link.
pub struct ClusterConn {
    share: Share,
    conn: Conn,
    started: Instant,
    /// Where the last count is kept (`clustershare::COUNT_FILE`).
    count_file: PathBuf,
}

impl ClusterConn {
    /// The link configured by main.cf, or `None` without `cluster_server`;
    /// an error names the parameter or file that is wrong. `root` is the
    /// queue directory as qmgr sees it, where the count file is.
    pub fn from_config(
        config: &config::Config,
        root: &std::path::Path,
    ) -> Result<Option<ClusterConn>, String> {
        let Some(target) = clustershare::target(config)? else {
            return Ok(None);
        };
        let conn = Conn::new(&target)?;
        let seed = u64::from(std::process::id())
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
        let count_file = root.join(clustershare::COUNT_FILE);
        let remembered = std::fs::read_to_string(&count_file)
            .ok()
            .and_then(|t| clustershare::read_count(&t));
        let coordinator = target.addr.to_string();
        Ok(Some(ClusterConn {
            share: Share::from_config(config, &coordinator, seed, remembered),
            conn,
            started: Instant::now(),
            count_file,
        }))
    }

    fn ms(&self, at: Instant) -> u64 {
        at.duration_since(self.started).as_millis() as u64
    }

    /// Puts the share in force (again after a reload).
    pub fn install(&mut self, qm: &mut QueueManager<DiskStore>) {
        self.share.install(qm);
    }

    /// Whether `token` is the link's.
    pub fn owns(&self, token: Token) -> bool {
        self.conn.owns(token)
    }

    /// When [`ClusterConn::timeout`] is next due.
    pub fn next_deadline(&self) -> Option<Instant> {
        let ms = self.share.client().poll_timeout()?;
        Some(self.started + Duration::from_millis(ms))
    }

    /// Time passed: heartbeats, a silent clusterd, reconnecting.
    pub fn timeout(&mut self, cx: &mut Cx<'_>, qm: &mut QueueManager<DiskStore>, now: Time) {
        let ms = self.ms(cx.now);
        let registry = cx.registry;
        self.conn
            .timeout(&mut self.share.client(), ms, registry, || cx.token());
        self.pump(cx, qm, now);
    }

    /// The link's socket is ready.
    pub fn ready(
        &mut self,
        cx: &mut Cx<'_>,
        qm: &mut QueueManager<DiskStore>,
        now: Time,
        readable: bool,
    ) {
        let ms = self.ms(cx.now);
        let mut client = self.share.client();
        self.conn
            .ready(&mut client, ms, cx.registry, readable, cx.closed);
        drop(client);
        self.pump(cx, qm, now);
    }

    /// Carries out what the share has to do: log, keep the count,
    /// close, send.
    pub fn pump(&mut self, cx: &mut Cx<'_>, qm: &mut QueueManager<DiskStore>, now: Time) {
        let ms = self.ms(cx.now);
        for a in self.share.pump(ms, qm, now) {
            match a {
                ShareAction::Log(Level::Info, l) => msg_info!("{l}"),
                ShareAction::Log(Level::Warn, l) => msg_warn!("{l}"),
                ShareAction::SaveCount(n) => self.save_count(n),
                ShareAction::Close => self.conn.close(cx.registry),
                ShareAction::Send(out) => {
                    let mut client = self.share.client();
                    self.conn.send(&mut client, ms, cx.registry, &out);
                }
            }
        }
    }

    /// Keeps the count for a restart; a failure is logged and costs only
    /// that.
    fn save_count(&self, instances: u32) {
        let tmp = self.count_file.with_extension("tmp");
        let r = std::fs::write(&tmp, clustershare::count_text(instances))
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
    pub fn view(&self, qm: &mut QueueManager<DiskStore>, now: Time) -> ClusterView {
        self.share.view(qm, now)
    }
}
