//! The links to cleanup, shared by the sessions of this process.
//!
//! A session takes a link when its DATA or first BDAT starts a message and
//! gives it back once cleanup has answered the message's end (or once it
//! sent Abort); the next message, of this session or another, goes out on
//! the same connection, so a message costs no connect, handshake or close.
//! A link is only ever one session's at a time: cleanup keeps one message
//! per connection, and the link's answers go to its holder only.
//!
//! How shared links stall sessions, and what keeps that from happening:
//! an answer that the wrong reader takes off the socket is lost, and with
//! edge-triggered polling nothing announces it again, so the session owed
//! it waits for smtpd_cleanup_timeout (under load, when links change hands
//! often). So every link's events go to whoever holds it now, by the map
//! this pool keeps at each take and give (`owners`), never by a map the
//! server brings up to date after the session ran (as it did for the
//! per-session links), and an idle link's events are read by the pool. A link that a session gives back while it is
//! still owed an answer, or whose connection failed, is closed instead of
//! kept. Idle links are closed after `ipc_idle` (so cleanup processes can
//! still exit when mail stops) and when cleanup closes them (a cleanup that
//! exits or dies); a take that finds the kept link dead opens a new one.
//! Idle links are bounded: with `max_idle` kept, a process never holds more
//! links than it has had messages in progress at once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use daemon::{msg_warn, Cx};
use ipc::cleanup::Cleanup;
use ipc::Link;
use mio::Token;

/// Idle links kept at most; more are closed when given back.
const MAX_IDLE: usize = 64;

/// The links of one smtpd process.
pub struct Pool {
    path: PathBuf,
    /// Links no session holds, the most recently used last.
    idle: Vec<(Link<Cleanup>, Instant)>,
    /// Link token → the session holding it.
    owners: BTreeMap<Token, Token>,
    /// `ipc_idle`.
    ttl: Duration,
}

impl Pool {
    /// No links yet; they are opened on demand to cleanup's socket under
    /// `queue_root`.
    pub fn new(queue_root: &std::path::Path, ttl: Duration) -> Self {
        Pool {
            path: queue_root.join("private/cleanup"),
            idle: Vec::new(),
            owners: BTreeMap::new(),
            ttl,
        }
    }

    /// Applies a reloaded `ipc_idle`.
    pub fn set_ttl(&mut self, ttl: Duration) {
        self.ttl = ttl;
    }

    /// A link for `session`: the one used last if it is still open, or a
    /// new connection. The bool says whether it was kept from earlier (its
    /// peer may have gone since: see [`Pool::take`]'s callers).
    pub fn take(
        &mut self,
        cx: &mut Cx<'_>,
        session: Token,
        fresh: bool,
    ) -> Result<(Link<Cleanup>, bool), String> {
        if !fresh {
            while let Some((mut link, _)) = self.idle.pop() {
                if link.is_closed() {
                    link.deregister(cx.registry);
                    continue;
                }
                self.owners.insert(link.token(), session);
                return Ok((link, true));
            }
        }
        let token = cx.token();
        let link = Link::<Cleanup>::connect(&self.path, cx.registry, token)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        self.owners.insert(token, session);
        Ok((link, false))
    }

    /// A session is done with `link`; `clean` when no answer is owed on it
    /// and it has not failed, so the next message may use it.
    pub fn give_back(&mut self, cx: &mut Cx<'_>, mut link: Link<Cleanup>, clean: bool) {
        self.owners.remove(&link.token());
        // A link with output still queued would hand it to the next
        // message (and to `take_spliced` as if it were that message's).
        if clean && !link.is_closed() && link.pending_output() == 0 && self.idle.len() < MAX_IDLE {
            self.idle.push((link, cx.now));
        } else {
            link.deregister(cx.registry);
        }
    }

    /// The session holding the link registered under `token`.
    pub fn owner(&self, token: Token) -> Option<Token> {
        self.owners.get(&token).copied()
    }

    /// An event on an idle link, if `token` is one: it is read (nothing is
    /// owed on it, so whatever comes is dropped) and closed if cleanup
    /// closed it. False when `token` is not an idle link.
    pub fn idle_event(&mut self, cx: &mut Cx<'_>, token: Token, readable: bool) -> bool {
        let Some(i) = self.idle.iter().position(|(l, _)| l.token() == token) else {
            return false;
        };
        let link = &mut self.idle[i].0;
        let ok = match link.event(readable, cx.closed) {
            Ok(late) => {
                if !late.is_empty() {
                    msg_warn!(
                        "cleanup link: {} unexpected answers on an idle link",
                        late.len()
                    );
                }
                !link.is_closed()
            }
            Err(_) => false,
        };
        if !ok {
            let (mut link, _) = self.idle.swap_remove(i);
            link.deregister(cx.registry);
        }
        true
    }

    /// Closes the links idle for `ipc_idle`.
    pub fn expire(&mut self, cx: &mut Cx<'_>) {
        let ttl = self.ttl;
        let now = cx.now;
        self.idle.retain_mut(|(link, since)| {
            let keep = *since + ttl > now;
            if !keep {
                link.deregister(cx.registry);
            }
            keep
        });
    }

    /// When the oldest idle link is due to close.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.idle.iter().map(|(_, since)| *since + self.ttl).min()
    }
}
