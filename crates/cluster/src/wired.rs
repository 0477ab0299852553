//! The link to clusterd as an instance's event loop runs it: [`Conn`]
//! with the client's clock kept on the loop's monotonic instants (the
//! client counts milliseconds since the link was made), and the file
//! where the last instance count is kept for a restart (a few bytes,
//! written when the count changes, replaced whole: nothing here blocks
//! the loop for long). The client decides; this only converts time and
//! moves bytes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mio::{Registry, Token};

use crate::client::Client;
use crate::link::{Conn, Target};
use crate::Ms;

/// The link, its clock and its count file.
pub struct Wired {
    conn: Conn,
    clock: Clock,
    count_file: PathBuf,
}

/// The client's clock: milliseconds since `started`, on the loop's instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    started: Instant,
}

impl Clock {
    /// A clock whose zero is `started`.
    pub fn new(started: Instant) -> Self {
        Clock { started }
    }

    /// The client's time at the loop's instant `at`.
    pub fn ms(&self, at: Instant) -> Ms {
        at.saturating_duration_since(self.started).as_millis() as Ms
    }

    /// The loop's instant of the client's time `ms`.
    pub fn instant(&self, ms: Ms) -> Instant {
        self.started + Duration::from_millis(ms)
    }
}

impl Wired {
    /// The link to `target`, its clock starting at `started`, the count
    /// kept in `count_file`; an error names the file or parameter that
    /// is wrong.
    pub fn new(target: &Target, count_file: PathBuf, started: Instant) -> Result<Wired, String> {
        Ok(Wired {
            conn: Conn::new(target)?,
            clock: Clock::new(started),
            count_file,
        })
    }

    /// The client's time at the loop's instant `at`.
    pub fn ms(&self, at: Instant) -> Ms {
        self.clock.ms(at)
    }

    /// Whether `token` is the link's.
    pub fn owns(&self, token: Token) -> bool {
        self.conn.owns(token)
    }

    /// When [`Wired::timeout`] is next due for `client`.
    pub fn next_deadline(&self, client: &Client) -> Option<Instant> {
        Some(self.clock.instant(client.poll_timeout()?))
    }

    /// Time passed: the client's timers, and a connection when it wants one.
    pub fn timeout(
        &mut self,
        client: &mut Client,
        at: Instant,
        registry: &Registry,
        token: impl FnOnce() -> Token,
    ) {
        let ms = self.ms(at);
        self.conn.timeout(client, ms, registry, token);
    }

    /// The link's socket is ready (`closed`: its read-closed flag).
    pub fn ready(
        &mut self,
        client: &mut Client,
        at: Instant,
        registry: &Registry,
        readable: bool,
        closed: bool,
    ) {
        let ms = self.ms(at);
        self.conn.ready(client, ms, registry, readable, closed);
    }

    /// Sends one encoded message, if a connection is up.
    pub fn send(&mut self, client: &mut Client, at: Instant, registry: &Registry, frame: &[u8]) {
        let ms = self.ms(at);
        self.conn.send(client, ms, registry, frame);
    }

    /// Ends the connection, if any.
    pub fn close(&mut self, registry: &Registry) {
        self.conn.close(registry);
    }

    /// The count file's text, if it can be read.
    pub fn remembered(&self) -> Option<String> {
        read_count_file(&self.count_file)
    }

    /// Keeps `text` (the count) for a restart; the error is the line to log.
    pub fn save_count(&self, text: &str) -> Result<(), String> {
        save_count_file(&self.count_file, text)
    }
}

fn read_count_file(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn save_count_file(path: &Path, text: &str) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("cluster: {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_clock_maps_to_the_loops_instants_and_back() {
        let t0 = Instant::now();
        let c = Clock::new(t0);
        assert_eq!(c.ms(t0), 0);
        assert_eq!(c.ms(t0 + Duration::from_millis(1500)), 1500);
        assert_eq!(c.instant(2500), t0 + Duration::from_millis(2500));
        assert_eq!(c.ms(c.instant(42)), 42);
    }

    #[test]
    fn the_count_file_is_replaced_whole_and_a_failure_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cluster.instances");
        assert_eq!(read_count_file(&p), None);
        save_count_file(&p, "3\n").unwrap();
        save_count_file(&p, "4\n").unwrap();
        assert_eq!(read_count_file(&p).as_deref(), Some("4\n"));
        assert!(!dir.path().join("cluster.tmp").exists());
        let gone = dir.path().join("nonesuch/cluster.instances");
        let e = save_count_file(&gone, "1\n").unwrap_err();
        assert!(
            e.starts_with(&format!("cluster: {}: ", gone.display())),
            "{e}"
        );
    }
}
