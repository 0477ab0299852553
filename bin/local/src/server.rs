//! The agent's clients (qmgr) and their delivery requests.
//!
//! Speaks `sluice-delivery` like smtp(8). A "connection" here is only a
//! name for qmgr's bookkeeping: `Open` always succeeds (relay `local`),
//! `Send` delivers every recipient at once, in this process, before the
//! next request is read (as Postfix's local, one delivery at a time; run
//! more processes for more parallelism), `Close` forgets it. The message
//! is opened once per transaction and read from the spool for each target
//! ([`crate::message`]), never held whole. Aliases are
//! reopened for every transaction so edits take effect without a reload.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use daemon::{msg_info, msg_warn, Conn as Accepted, Context, Cx, Server};
use ipc::delivery::{Delivery as Proto, RcptResult, Request, Response, Transaction};
use ipc::{Endpoint, Tagged};
use mio::Token;

use crate::deliver::{Delivery, Settings};
use crate::message::Message;

/// All of this process's clients.
pub struct LocalServer {
    settings: Settings,
    queue_root: PathBuf,
    /// Where the delivered targets of deferred recipients are remembered.
    progress_dir: PathBuf,
    clients: BTreeMap<Token, Endpoint>,
    conns: BTreeSet<(Token, u64)>,
    service: String,
}

impl LocalServer {
    /// Reads the settings.
    pub fn new(ctx: &Context, (): ()) -> Result<Self, String> {
        let progress_dir = PathBuf::from(ctx.config.str("data_directory")).join("local");
        let lifetime = ctx
            .config
            .time("maximal_queue_lifetime")
            .max(ctx.config.time("bounce_queue_lifetime"));
        crate::progress::sweep(&progress_dir, lifetime + Duration::from_secs(86400));
        Ok(LocalServer {
            progress_dir,
            settings: Settings::from(&ctx.config, &ctx.args.service),
            queue_root: PathBuf::from(ctx.config.str("queue_directory")),
            clients: BTreeMap::new(),
            conns: BTreeSet::new(),
            service: ctx.args.service.clone(),
        })
    }

    fn respond(&mut self, client: Token, id: u64, resp: Response) {
        if let Some(ep) = self.clients.get_mut(&client) {
            if let Err(e) = ep.reply(id, &resp) {
                msg_warn!("qmgr: {e}");
            }
        }
    }

    fn handle(&mut self, client: Token, req: Tagged<Request>) {
        let resp = match req.body {
            Request::Open { conn, .. } => {
                if self.conns.insert((client, conn)) {
                    Response::Opened {
                        conn,
                        relay: "local".into(),
                    }
                } else {
                    Response::OpenFailed {
                        conn,
                        handshake: false,
                        reason: format!("connection {conn} already exists"),
                    }
                }
            }
            Request::Send { conn, txn } => {
                let results = if self.conns.contains(&(client, conn)) {
                    self.transaction(&txn)
                } else {
                    all(&txn, 450, "4.4.0", "connection is not open")
                };
                Response::Sent {
                    conn,
                    results,
                    conn_failed: false,
                    handoff: ipc::delivery::Handoff::Final,
                }
            }
            Request::Close { conn } => {
                self.conns.remove(&(client, conn));
                Response::Closed {
                    conn,
                    reason: String::new(),
                }
            }
        };
        self.respond(client, req.id, resp);
    }

    fn transaction(&self, txn: &Transaction) -> Vec<RcptResult> {
        let started = Instant::now();
        let wire = match Message::open(&txn.data, &self.queue_root) {
            Ok(w) => w,
            Err(e) => {
                let text = format!("cannot read the message: {e}");
                msg_info!("{}: {text}", txn.queue_id);
                return all(txn, 450, "4.3.0", &text);
            }
        };
        let (aliases, alias_uids) = match self.aliases() {
            Ok(a) => a,
            Err(text) => {
                msg_warn!("{}: {text}", txn.queue_id);
                return all(txn, 450, "4.3.0", &text);
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
        };
        txn.recipients
            .iter()
            .map(|r| {
                let mut progress =
                    crate::progress::Progress::load(&self.progress_dir, &txn.queue_id, r.index);
                let d = Delivery {
                    orcpt: r.orcpt.as_deref(),
                    ..d
                };
                (r, d.deliver(&r.address, &mut progress))
            })
            .map(|(r, result)| match result {
                Ok(text) => RcptResult {
                    index: r.index,
                    code: 250,
                    enhanced: "2.0.0".into(),
                    text,
                },
                Err(f) => RcptResult {
                    index: r.index,
                    code: f.code,
                    enhanced: f.enhanced.into(),
                    text: f.text,
                },
            })
            .collect()
    }

    /// Opens alias_maps; a table whose file does not exist is skipped.
    /// With each table, the uid owning its file (0 for root's and for
    /// tables that are not files): whose rights its commands and files get.
    fn aliases(&self) -> Result<(tables::Tables, Vec<u32>), String> {
        use std::os::unix::fs::MetadataExt;
        let refs: Vec<_> = self
            .settings
            .alias_maps
            .iter()
            .filter(|r| tables::source_exists(r))
            .cloned()
            .collect();
        let uids = refs
            .iter()
            .map(|r| match std::fs::metadata(&r.name) {
                Ok(m) if r.name.starts_with('/') => m.uid(),
                _ => 0,
            })
            .collect();
        let tables = tables::Tables::open(&refs).map_err(|e| format!("alias_maps: {e}"))?;
        Ok((tables, uids))
    }

    fn serve(&mut self, token: Token) -> Result<bool, ipc::IpcError> {
        let Some(ep) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        let open = ep.read_ready()?;
        if !ep.accept_hello::<Proto>()? {
            return Ok(open);
        }
        loop {
            let Some(ep) = self.clients.get_mut(&token) else {
                return Ok(false);
            };
            let Some(req) = ep.recv::<Tagged<Request>>()? else {
                break;
            };
            self.handle(token, req);
        }
        let Some(ep) = self.clients.get_mut(&token) else {
            return Ok(false);
        };
        ep.write_ready()?;
        Ok(!ep.is_eof() || ep.wants_write())
    }

    fn drop_client(&mut self, cx: &mut Cx<'_>, token: Token) {
        if let Some(mut ep) = self.clients.remove(&token) {
            let _ = cx.registry.deregister(ep.stream());
        }
        self.conns.retain(|(c, _)| *c != token);
    }
}

/// The same result for every recipient.
pub fn all(txn: &Transaction, code: u16, enhanced: &str, text: &str) -> Vec<RcptResult> {
    txn.recipients
        .iter()
        .map(|r| RcptResult {
            index: r.index,
            code,
            enhanced: enhanced.into(),
            text: text.into(),
        })
        .collect()
}

impl Server for LocalServer {
    fn reload(&mut self, _cx: &mut Cx<'_>, config: &config::Config) -> bool {
        // Deliveries run one at a time, so the next one sees the new settings.
        self.settings = Settings::from(config, &self.service);
        true
    }

    fn accept(&mut self, cx: &mut Cx<'_>, conn: Accepted) {
        let Accepted::Unix(stream) = conn else { return };
        let token = cx.token();
        let Ok(ep) = Endpoint::registered(stream, cx.registry, token) else {
            return;
        };
        self.clients.insert(token, ep);
        self.ready(cx, token, true, true);
    }

    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, _readable: bool, _writable: bool) {
        match self.serve(token) {
            Ok(true) => {}
            Ok(false) => self.drop_client(cx, token),
            Err(e) => {
                msg_warn!("{}: qmgr link: {e}", self.service);
                self.drop_client(cx, token);
            }
        }
    }

    fn timeout(&mut self, _cx: &mut Cx<'_>) {}

    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    fn clients(&self) -> usize {
        self.clients.len()
    }
}
