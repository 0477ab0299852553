//! qmgr's link to clusterd (`cluster_server`): wiring only. crates/qmgr's
//! `clustershare` decides what clusterd's news means, what to tell it,
//! where the link goes and what the count file holds; crates/cluster's
//! `wired::Wired` moves the bytes (TCP, mutual TLS, frames) on the loop's
//! clock and keeps the count file, and its client decides when to
//! connect again. Here the share's actions are carried out.

use std::time::Instant;

use cluster::wired::Wired;
use daemon::Cx;
use queue_manager::clustershare::{self, Share, ShareAction};
use queue_manager::{DiskStore, QueueManager, Time};

/// The link and this instance's share.
pub struct ClusterConn {
    /// What the share means to the queue manager.
    pub share: Share,
    wired: Wired,
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
        let count_file = root.join(clustershare::COUNT_FILE);
        let wired = Wired::new(&target, count_file, Instant::now())?;
        let seed = u64::from(std::process::id())
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
        let remembered = wired
            .remembered()
            .and_then(|t| clustershare::read_count(&t));
        let coordinator = target.addr.to_string();
        let share = Share::from_config(config, &coordinator, seed, remembered);
        Ok(Some(ClusterConn { share, wired }))
    }

    /// Whether `token` is the link's.
    pub fn owns(&self, token: mio::Token) -> bool {
        self.wired.owns(token)
    }

    /// When [`ClusterConn::timeout`] is next due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.wired.next_deadline(&self.share.client())
    }

    /// Time passed: heartbeats, a silent clusterd, reconnecting.
    pub fn timeout(&mut self, cx: &mut Cx<'_>, qm: &mut QueueManager<DiskStore>, now: Time) {
        let registry = cx.registry;
        let mut client = self.share.client();
        self.wired
            .timeout(&mut client, cx.now, registry, || cx.token());
        drop(client);
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
        let mut client = self.share.client();
        self.wired
            .ready(&mut client, cx.now, cx.registry, readable, cx.closed);
        drop(client);
        self.pump(cx, qm, now);
    }

    /// Carries out what the share has to do: log, keep the count,
    /// close, send.
    fn pump(&mut self, cx: &mut Cx<'_>, qm: &mut QueueManager<DiskStore>, now: Time) {
        for a in self.share.pump(self.wired.ms(cx.now), qm, now) {
            match a {
                ShareAction::Log(level, l) => crate::lines::log(level, &l),
                ShareAction::SaveCount(n) => {
                    // A failure costs only the count after a restart.
                    if let Err(e) = self.wired.save_count(&clustershare::count_text(n)) {
                        daemon::msg_warn!("{e}");
                    }
                }
                ShareAction::Close => self.wired.close(cx.registry),
                ShareAction::Send(out) => {
                    let mut client = self.share.client();
                    self.wired.send(&mut client, cx.now, cx.registry, &out);
                }
            }
        }
    }
}
