//! The agent's callbacks: qmgr's delivery requests, one at a time.
//!
//! Served by the agent skeleton ([`agent::AgentServer`]) like smtp(8). A
//! "connection" here is only a name for qmgr's bookkeeping: `Open` always
//! succeeds (relay `local`), `Send` delivers every recipient at once, in
//! this process, before the next request is read (as Postfix's local, one
//! delivery at a time; run more processes for more parallelism), `Close`
//! forgets it. The message is opened once per transaction and read from
//! the spool for each target ([`crate::message`]), never held whole.
//! Aliases are reopened for every transaction so edits take effect without
//! a reload.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agent::{Agent, Answers, ConnId, OpenRequest};
use daemon::{msg_info, msg_warn, Context, Cx};
use ipc::delivery::{Handoff, RcptResult, Response, Transaction};
use mail::{Status, StatusCode};

use crate::deliver::{Delivery, Settings};
use crate::message::Message;

/// The local delivery agent.
pub struct LocalAgent {
    settings: Settings,
    queue_root: PathBuf,
    /// Where the delivered targets of deferred recipients are remembered.
    progress_dir: PathBuf,
    service: String,
}

impl LocalAgent {
    /// Reads the settings; sweeps what deliveries of messages now gone left.
    pub fn new(ctx: &Context) -> Result<Self, String> {
        let progress_dir = PathBuf::from(ctx.config.str("data_directory")).join("local");
        let lifetime = ctx
            .config
            .time("maximal_queue_lifetime")
            .max(ctx.config.time("bounce_queue_lifetime"));
        crate::progress::sweep(&progress_dir, lifetime + Duration::from_secs(86400));
        Ok(LocalAgent {
            progress_dir,
            settings: Settings::from(&ctx.config, &ctx.args.service),
            queue_root: PathBuf::from(ctx.config.str("queue_directory")),
            service: ctx.args.service.clone(),
        })
    }

    fn transaction(&self, txn: &Transaction) -> Vec<RcptResult> {
        let started = Instant::now();
        let wire = match Message::open(&txn.data, &self.queue_root) {
            Ok(w) => w,
            Err(e) => {
                let text = format!("cannot read the message: {e}");
                msg_info!("{}: {text}", txn.queue_id);
                return txn.results(&Status::new(StatusCode::SYSTEM_TEMP, text));
            }
        };
        let (aliases, alias_uids) = match self.aliases() {
            Ok(a) => a,
            Err(text) => {
                msg_warn!("{}: {text}", txn.queue_id);
                return txn.results(&Status::new(StatusCode::SYSTEM_TEMP, text));
            }
        };
        let d = Delivery {
            settings: &self.settings,
            aliases: &aliases,
            alias_uids: &alias_uids,
            txn,
            wire: &wire,
            started,
            orcpt: None,
            notify: mail::Notify::Default,
        };
        txn.recipients
            .iter()
            .map(|r| {
                let mut progress =
                    crate::progress::Progress::load(&self.progress_dir, &txn.queue_id, r.index);
                let d = Delivery {
                    orcpt: r.orcpt.as_deref(),
                    notify: r.notify,
                    ..d
                };
                let status = match d.deliver(&r.address, &mut progress) {
                    Ok(text) => Status::new(StatusCode::OK, text),
                    Err(f) => f.to_status(),
                };
                RcptResult {
                    index: r.index,
                    status,
                    remote: None,
                }
            })
            .collect()
    }

    /// Opens alias_maps; a table whose file cannot be read is kept aside
    /// (see [`tables::Tables::unavailable`]): a lookup that reaches it
    /// defers the recipient, as Postfix's "alias database unavailable".
    /// With each readable table, the uid owning its file (0 for root's and
    /// for tables that are not files): whose rights its commands and files
    /// get.
    fn aliases(&self) -> Result<(tables::Tables, Vec<u32>), String> {
        use std::os::unix::fs::MetadataExt;
        let refs = &self.settings.alias_maps;
        let tables = tables::Tables::open_tolerant(refs, &|_| Ok(()))
            .map_err(|e| format!("alias_maps: {e}"))?;
        let uids = refs
            .iter()
            .filter(|r| {
                let spec = r.to_string();
                !tables.unavailable().iter().any(|e| e.table == spec)
            })
            .map(|r| match std::fs::metadata(&r.name) {
                Ok(m) if r.name.starts_with('/') => m.uid(),
                _ => 0,
            })
            .collect();
        Ok((tables, uids))
    }
}

impl Agent for LocalAgent {
    fn open(
        &mut self,
        _cx: &mut Cx<'_>,
        out: &mut Answers,
        id: ConnId,
        request: u64,
        _: OpenRequest,
    ) {
        let relay = "local".to_string();
        out.answer(
            id,
            request,
            Response::Opened {
                conn: id.conn,
                relay,
            },
        );
    }

    fn send(
        &mut self,
        _cx: &mut Cx<'_>,
        out: &mut Answers,
        id: ConnId,
        request: u64,
        txn: Transaction,
    ) {
        let results = self.transaction(&txn);
        let sent = Response::Sent {
            conn: id.conn,
            results,
            conn_failed: false,
            handoff: Handoff::Final,
        };
        out.answer(id, request, sent);
    }

    fn close(&mut self, _cx: &mut Cx<'_>, out: &mut Answers, id: ConnId, request: u64) {
        out.answer(
            id,
            request,
            Response::Closed {
                conn: id.conn,
                reason: None,
            },
        );
    }

    fn abandon(&mut self, _cx: &mut Cx<'_>, _id: ConnId) {}

    fn reload(&mut self, _cx: &mut Cx<'_>, config: &config::Config) -> bool {
        // Deliveries run one at a time, so the next one sees the new settings.
        self.settings = Settings::from(config, &self.service);
        true
    }
}
