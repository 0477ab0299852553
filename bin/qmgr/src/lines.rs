//! The queue manager's worded log lines, written at their level: shared by
//! the loop (`server.rs`) and the cluster link (`cluster.rs`).

use daemon::{msg_info, msg_warn};
use queue_manager::Level;

/// Logs a line the queue manager worded.
pub fn log(level: Level, text: &str) {
    match level {
        Level::Info => msg_info!("{text}"),
        Level::Warn => msg_warn!("{text}"),
    }
}

/// Logs lines the queue manager worded.
pub fn log_all(lines: impl IntoIterator<Item = (Level, String)>) {
    lines.into_iter().for_each(|(level, l)| log(level, &l));
}
