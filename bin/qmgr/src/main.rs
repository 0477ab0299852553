//! qmgr(8): the queue manager, sole writer of the journal.
//!
//! At start it recovers the spool (replays the journal, cuts torn tails,
//! removes partial files, adopts committed files nobody announced) and logs
//! what it found. Then it accepts `Arrived` announcements from cleanup,
//! appends them to the journal and answers each only after the group commit
//! (one fdatasync on a helper thread for everything appended meanwhile)
//! that made it durable. `sluice queue` asks it for the queue;
//! `sluice status`, `sluice top` and the `metrics_listen` endpoint for its
//! figures (rendered by `queue_manager::prometheus`, served by
//! `daemon::metrics_http`).
//!
//! Every decision about the queued mail is made by the sans-IO queue
//! manager of crates/qmgr (`queue_manager`): admission, resolution,
//! scheduling and dispatch to the delivery agents, retries, notices,
//! queue control, address verification, what waits for the group commit,
//! a journal that cannot be written and what is left to do at exit, the
//! meaning of main.cf's parameters, start-up, a reload and when journal
//! garbage goes (`startup`), who may announce mail and what each client's
//! request is (`clients`), the wording of every log line the queue and its
//! links make (`links`), and this instance's share of a cluster
//! (`clustershare`). The journal's group commit is `queue::JournalWriter`
//! (inside the queue manager's `DiskStore`), the files of saved state
//! `queue::statefile`, the link to clusterd `cluster::wired::Wired`.
//!
//! This program is the rest, I/O only: the mio loop's callbacks, one
//! clock read per loop turn, the answers owed to clients and the soonest
//! deadline (`server.rs`, over `daemon::later`), the listener's `Service`
//! (`clients.rs`), the links to the router, the agents and cleanup
//! (`links.rs`, over `ipc::Peer`), the sync thread's waker, the metrics
//! listener (`daemon::metrics_http`, bound here while privileged), and the
//! cluster share's actions carried out when `cluster_server` is set
//! (`cluster.rs`), and the queue manager's worded lines logged at their
//! level (`lines.rs`).
#![forbid(unsafe_code)]

mod clients;
mod cluster;
mod lines;
mod links;
mod server;

fn main() {
    // qmgr owns state the whole system relies on: it never exits on idle or use count.
    let opts = daemon::Options {
        honour_max_idle: false,
        honour_max_use: false,
        max_clients: usize::MAX,
        ..daemon::Options::default()
    };
    // metrics_listen is bound while still privileged (any port, before a chroot).
    let metrics =
        |ctx: &daemon::Context| Ok(daemon::metrics_http::bind(&ctx.config, "metrics_listen"));
    daemon::run(opts, metrics, |ctx, sock| {
        server::QmgrServer::new(ctx, sock).map(daemon::ipcserver::IpcServer::new)
    })
}
