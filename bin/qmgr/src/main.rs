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
//! meaning of main.cf's parameters and of a reload that fails, who may
//! announce mail, the wording of the queue's log lines, and this
//! instance's share of a cluster (where its link goes, what clusterd's
//! news means, the count kept for a restart). This program is its I/O
//! only: the links (`links.rs`, over `ipc::Peer`), the journal's sync
//! thread (started for `queue::JournalWriter`, which the queue manager's
//! `DiskStore` holds), the files of saved state (through
//! `queue::statefile`), the clients served through
//! `daemon::ipcserver` (`clients.rs`), the metrics listener and one clock
//! read per loop turn (`server.rs`), and the link to clusterd when
//! `cluster_server` is set (`cluster.rs`, over crates/cluster's
//! `link::Conn`).
#![forbid(unsafe_code)]

mod clients;
mod cluster;
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
