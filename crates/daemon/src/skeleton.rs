//! The daemon life cycle and event loop (see the crate documentation).
//!
//! Exits: 0 on SIGTERM, on master's death (the life pipe closes), after
//! `max_use` clients or `max_idle` idle time, after a reload the daemon
//! cannot apply in place once its last client is done; 1 with a `fatal:` log line on a
//! bad environment (not started by master, bad configuration, missing
//! mail_owner, failed privilege drop).

use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use config::Config;
use evloop::signals::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use evloop::{Clock, Signals, SystemClock};
use ipc::status::{self, ChildState, StatusRecord};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};

use crate::args::DaemonArgs;
use crate::{msg_fatal, msg_info, msg_warn};

const SIGNALS: Token = Token(0);
const LIFE: Token = Token(1);
const FIRST_LISTENER: usize = 2;
/// How often at most a changed use count alone is reported to master.
const USES_REPORT: Duration = Duration::from_secs(1);
/// Tokens below this are the skeleton's; daemons get theirs from [`Cx::token`].
const FIRST_DAEMON_TOKEN: usize = 1 << 16;

/// What the daemon knows about itself once configured.
#[derive(Debug)]
pub struct Context {
    /// The command line master gave it.
    pub args: DaemonArgs,
    /// main.cf with this service's overrides applied.
    pub config: Config,
    /// The configuration directory.
    pub config_dir: PathBuf,
    /// Whether it runs in the foreground (logs to stderr too).
    pub foreground: bool,
}

impl Context {
    /// The queue directory as this process sees it: `/` once chrooted
    /// into it (master.cf says so and it runs as root), else
    /// `queue_directory`.
    pub fn queue_root(&self) -> PathBuf {
        if self.args.chroot && sys::is_root() {
            PathBuf::from("/")
        } else {
            PathBuf::from(self.config.str("queue_directory"))
        }
    }
}

/// A newly accepted client.
#[derive(Debug)]
pub enum Conn {
    /// From an inet service.
    Tcp(mio::net::TcpStream, SocketAddr),
    /// From a unix service.
    Unix(mio::net::UnixStream),
}

/// What a daemon may use while handling an event.
pub struct Cx<'a> {
    /// Where to register the daemon's own sockets: a handle on the loop's
    /// poll that IPC endpoints keep a share of (one descriptor for the
    /// process, not one per endpoint) to watch for room to write only
    /// while output waits.
    pub registry: &'a Rc<Registry>,
    /// The time of this loop iteration.
    pub now: Instant,
    /// The event being handled says the peer closed its side (read-closed):
    /// for [`ipc::Endpoint::read_event`], which otherwise stops reading at
    /// the first short read.
    pub closed: bool,
    next_token: &'a mut usize,
}

impl<'a> Cx<'a> {
    /// A context outside the loop, for tests of the daemon-side servers.
    #[cfg(test)]
    pub(crate) fn for_test(registry: &'a Rc<Registry>, next_token: &'a mut usize) -> Self {
        Cx {
            registry,
            now: Instant::now(),
            closed: false,
            next_token,
        }
    }

    /// A fresh token for a socket the daemon registers.
    pub fn token(&mut self) -> Token {
        let t = Token(*self.next_token);
        *self.next_token += 1;
        t
    }
}

/// A daemon's callbacks.
pub trait Server {
    /// Called once before the first event, to register the daemon's own
    /// event sources (e.g. a waker for a helper thread).
    fn start(&mut self, _cx: &mut Cx<'_>) {}
    /// A client was accepted on one of the listening sockets.
    fn accept(&mut self, cx: &mut Cx<'_>, conn: Conn);
    /// A socket the daemon registered is ready.
    fn ready(&mut self, cx: &mut Cx<'_>, token: Token, readable: bool, writable: bool);
    /// The deadline returned by `next_deadline` has passed.
    fn timeout(&mut self, _cx: &mut Cx<'_>) {}
    /// The next time `timeout` should be called.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// Clients being served now.
    fn clients(&self) -> usize;
    /// main.cf was changed and master asked us to reload: apply it and
    /// return true, or return false and the process retires (it takes no
    /// new clients and exits when the last one is done; master starts a
    /// fresh one on demand), which is what Postfix's daemons do.
    fn reload(&mut self, _cx: &mut Cx<'_>, _config: &Config) -> bool {
        false
    }
    /// The process is about to exit.
    fn shutdown(&mut self) {}
}

/// How the skeleton treats this daemon.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Exit after `max_idle` with no clients (not for qmgr-like daemons).
    pub honour_max_idle: bool,
    /// Exit after serving `max_use` clients.
    pub honour_max_use: bool,
    /// Clients one process serves at once before it reports itself busy.
    pub max_clients: usize,
    /// TCP_NODELAY on the TCP listeners, which accepted connections
    /// inherit on Linux: one system call per process, not per client.
    pub tcp_nodelay: bool,
    /// The loop's info lines go out together before each wait
    /// (`log::batch`); off for a daemon whose loop may block (local
    /// running a command), where a line would wait with it.
    pub batch_log: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            honour_max_idle: true,
            honour_max_use: true,
            max_clients: usize::MAX,
            tcp_nodelay: false,
            batch_log: true,
        }
    }
}

/// Starts a daemon: configures, initialises with and without privileges,
/// and runs the event loop until it is time to exit. Never returns.
pub fn run<P, S, F, G>(opts: Options, privileged_init: F, init: G) -> !
where
    S: Server,
    F: FnOnce(&Context) -> Result<P, String>,
    G: FnOnce(&Context, P) -> Result<S, String>,
{
    let args = match DaemonArgs::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{}: {e}", program_name());
            std::process::exit(2)
        }
    };
    let foreground = std::env::var_os(status::FOREGROUND_ENV).is_some();
    let config_dir = std::env::var_os(status::CONFIG_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/sluice"));
    let config = load_config(&config_dir, &args);
    crate::log::init(&crate::log::LogSetup {
        service: program_name(),
        syslog_name: config.str("syslog_name"),
        maillog_file: config.str("maillog_file"),
        foreground,
    })
    .unwrap_or_else(|e| eprintln!("{}: warning: {e}", program_name()));

    let status_fd = sys::process::take_passed_fd(status::STATUS_FD).unwrap_or_else(|| {
        msg_fatal!("no status descriptor: this program is started by the Sluice master")
    });
    let life_fd = sys::process::take_passed_fd(status::LIFE_FD).unwrap_or_else(|| {
        msg_fatal!("no life descriptor: this program is started by the Sluice master")
    });
    let nlisten: i32 = std::env::var(status::LISTEN_FDS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let listen_fds: Vec<OwnedFd> = (0..nlisten)
        .map(|i| {
            sys::process::take_passed_fd(status::FIRST_LISTEN_FD + i).unwrap_or_else(|| {
                msg_fatal!(
                    "listening descriptor {} is not open",
                    status::FIRST_LISTEN_FD + i
                )
            })
        })
        .collect();

    let ctx = Context {
        args,
        config,
        config_dir,
        foreground,
    };
    let state = privileged_init(&ctx).unwrap_or_else(|e| msg_fatal!("{e}"));
    drop_privileges(&ctx);
    let server = init(&ctx, state).unwrap_or_else(|e| msg_fatal!("{e}"));
    let code = event_loop(
        ctx,
        opts,
        server,
        File::from(status_fd),
        life_fd,
        listen_fds,
    );
    crate::log::flush();
    std::process::exit(code)
}

fn program_name() -> String {
    std::env::args()
        .next()
        .as_deref()
        .map(Path::new)
        .and_then(|p| p.file_name())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "daemon".into())
}

fn load_config(config_dir: &Path, args: &DaemonArgs) -> Config {
    let services = config::load_master_cf(&config_dir.join("master.cf")).unwrap_or_default();
    let mut cfg = match Config::load_with_master(config_dir, &services) {
        Ok(l) => l.config,
        Err(e) => {
            eprintln!("{}: fatal: {e}", program_name());
            std::process::exit(1)
        }
    };
    for (k, v) in &args.overrides {
        if let Err(e) = cfg.set_override(k, v) {
            eprintln!("{}: fatal: service {}: {e}", program_name(), args.service);
            std::process::exit(1)
        }
    }
    cfg
}

fn drop_privileges(ctx: &Context) {
    if !sys::is_root() || !ctx.args.unpriv {
        return;
    }
    let owner = ctx.config.str("mail_owner");
    let who = match sys::privilege::lookup_user(&owner) {
        Ok(Some(u)) => u,
        Ok(None) => msg_fatal!("mail_owner {owner}: no such user"),
        Err(e) => msg_fatal!("mail_owner {owner}: {e}"),
    };
    if who.uid == 0 {
        msg_fatal!("mail_owner {owner} has uid 0: refusing to run a daemon as root");
    }
    let queue = PathBuf::from(ctx.config.str("queue_directory"));
    let chroot = ctx.args.chroot.then_some(queue.as_path());
    if let Err(e) = sys::privilege::drop_privileges(&who, chroot) {
        msg_fatal!("dropping privileges to {owner}: {e}");
    }
}

struct Listener {
    kind: ListenerKind,
}

enum ListenerKind {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener),
}

fn make_listeners(fds: Vec<OwnedFd>, kind: &str, nodelay: bool) -> Vec<Listener> {
    fds.into_iter()
        .map(|fd| {
            let kind = if kind == "inet" {
                let l = std::net::TcpListener::from(fd);
                let _ = l.set_nonblocking(true);
                if nodelay {
                    if let Err(e) = sys::net::set_tcp_nodelay(&l) {
                        msg_warn!("TCP_NODELAY on a listening socket: {e}");
                    }
                }
                ListenerKind::Tcp(mio::net::TcpListener::from_std(l))
            } else {
                let l = std::os::unix::net::UnixListener::from(fd);
                let _ = l.set_nonblocking(true);
                ListenerKind::Unix(mio::net::UnixListener::from_std(l))
            };
            Listener { kind }
        })
        .collect()
}

fn event_loop<S: Server>(
    ctx: Context,
    opts: Options,
    mut server: S,
    mut status_pipe: File,
    life_fd: OwnedFd,
    listen_fds: Vec<OwnedFd>,
) -> i32 {
    let clock = SystemClock;
    if opts.batch_log {
        crate::log::batch();
    }
    let mut poll = Poll::new().unwrap_or_else(|e| msg_fatal!("epoll: {e}"));
    let mut events = Events::with_capacity(256);
    let mut signals = Signals::new(
        poll.registry(),
        SIGNALS,
        &[SIGHUP, SIGTERM, SIGINT, SIGUSR1],
    )
    .unwrap_or_else(|e| msg_fatal!("signals: {e}"));
    let life_raw = life_fd.as_raw_fd();
    let mut life = File::from(life_fd);
    poll.registry()
        .register(&mut SourceFd(&life_raw), LIFE, Interest::READABLE)
        .unwrap_or_else(|e| msg_fatal!("register life pipe: {e}"));
    let mut listeners = make_listeners(listen_fds, &ctx.args.kind, opts.tcp_nodelay);
    let mut listening = true;
    set_listening(poll.registry(), &mut listeners, true);

    let max_use = if opts.honour_max_use {
        ctx.config.int("max_use").max(0) as u64
    } else {
        0
    };
    let max_idle = if opts.honour_max_idle {
        ctx.config.time("max_idle")
    } else {
        Duration::ZERO
    };
    let mut uses: u64 = 0;
    let mut next_token = FIRST_DAEMON_TOKEN;
    let registry = Rc::new(
        poll.registry()
            .try_clone()
            .unwrap_or_else(|e| msg_fatal!("epoll: {e}")),
    );
    let mut last_state: Option<(ChildState, u64)> = None;
    // The clock is read once per loop turn, when poll returns: everything
    // in the turn (events, timeouts, the next poll's timeout, reports to
    // master) goes by that time.
    let mut now = clock.now();
    let mut last_report = now;
    let pid = std::process::id() as i32;
    let mut idle_since = now;
    let mut retiring = false;
    {
        let mut cx = Cx {
            registry: &registry,
            now,
            closed: false,
            next_token: &mut next_token,
        };
        server.start(&mut cx);
    }

    loop {
        let clients = server.clients();
        let exhausted = retiring || (max_use > 0 && uses >= max_use);
        let state = if exhausted || clients >= opts.max_clients {
            ChildState::Busy
        } else {
            ChildState::Available
        };
        // Report changes of state at once, and of the use count (master
        // shows it, and a process that has served is no longer a failed
        // start) at once the first time, then at most once a second: a
        // record per accepted client cost master a wakeup per message.
        let report = match last_state {
            None => true,
            Some((s, _)) if s != state => true,
            Some((_, u)) if u == uses => false,
            Some((_, u)) => u == 0 || now >= last_report + USES_REPORT,
        };
        if report {
            let rec = StatusRecord {
                pid,
                state,
                uses: uses as u32,
            };
            if status_pipe.write_all(&rec.to_bytes()).is_err() {
                // master is gone; so are we.
                break;
            }
            last_state = Some((state, uses));
            last_report = now;
        }
        let want_listen = !exhausted && clients < opts.max_clients;
        if want_listen != listening {
            set_listening(poll.registry(), &mut listeners, want_listen);
            listening = want_listen;
        }
        if clients > 0 {
            idle_since = now;
        } else if exhausted {
            break;
        }
        // The daemon's deadline as it sized this wait: once the wait is
        // over it is due, even if asked again it says later (a daemon that
        // wants to run again at once may answer with a clock read of its own).
        let waited_for = server.next_deadline();
        let mut deadline = waited_for;
        if last_state.is_some_and(|(_, u)| u != uses) {
            // A use count not reported yet goes out within the second.
            let due = last_report + USES_REPORT;
            deadline = Some(deadline.map_or(due, |d| d.min(due)));
        }
        if !max_idle.is_zero() && clients == 0 {
            let idle_end = idle_since + max_idle;
            if idle_end <= now {
                break;
            }
            deadline = Some(deadline.map_or(idle_end, |d| d.min(idle_end)));
        }
        crate::log::flush();
        if let Err(e) = evloop::poll(&mut poll, &mut events, poll_timeout(deadline, now)) {
            msg_fatal!("poll: {e}");
        }
        now = clock.now();
        let mut cx = Cx {
            registry: &registry,
            now,
            closed: false,
            next_token: &mut next_token,
        };
        for ev in events.iter() {
            match ev.token() {
                SIGNALS => {
                    for sig in signals.drain() {
                        if sig == SIGUSR1 {
                            // master passes on `sluice reload` and logrotate's
                            // SIGUSR1, once it has let mail_owner append to the
                            // new file. Still unable to open it (chrooted), leave
                            // when idle: the next process opens it as root.
                            if let Err(e) = crate::log::reopen() {
                                msg_info!("{e}: leaving when idle");
                                retiring = true;
                            }
                        } else if sig == SIGHUP {
                            let services =
                                config::load_master_cf(&ctx.config_dir.join("master.cf"))
                                    .unwrap_or_default();
                            match Config::load_with_master(&ctx.config_dir, &services) {
                                Ok(l) => {
                                    let mut c = l.config;
                                    for (k, v) in &ctx.args.overrides {
                                        let _ = c.set_override(k, v);
                                    }
                                    if server.reload(&mut cx, &c) {
                                        msg_info!("reloaded configuration");
                                    } else {
                                        // Postfix: "running processes terminate
                                        // at their earliest convenience".
                                        msg_info!("configuration changed: leaving when idle");
                                        retiring = true;
                                    }
                                }
                                Err(e) => {
                                    msg_warn!("reload: {e}; keeping the running configuration")
                                }
                            }
                        } else {
                            server.shutdown();
                            return 0;
                        }
                    }
                }
                LIFE => {
                    // Readable on a pipe nobody writes to means end-of-file:
                    // master is gone, and a daemon without master must not linger.
                    let mut b = [0u8; 1];
                    if matches!(life.read(&mut b), Ok(0) | Err(_)) {
                        server.shutdown();
                        return 0;
                    }
                }
                // A process that decided in this batch to leave (a reload it
                // cannot take in place, e.g. new TLS settings) accepts no
                // more: the clients wait in the backlog for a fresh one.
                Token(t) if (FIRST_LISTENER..FIRST_LISTENER + listeners.len()).contains(&t) => {
                    if !retiring {
                        uses += accept_all(
                            &mut listeners[t - FIRST_LISTENER],
                            &mut server,
                            &mut cx,
                            max_use,
                            uses,
                        );
                    }
                }
                t => {
                    cx.closed = ev.is_read_closed() || ev.is_error();
                    server.ready(
                        &mut cx,
                        t,
                        ev.is_readable() || ev.is_read_closed(),
                        ev.is_writable(),
                    );
                    cx.closed = false;
                }
            }
        }
        let due = |d: Option<Instant>| d.is_some_and(|d| d <= now);
        if due(waited_for) || due(server.next_deadline()) {
            server.timeout(&mut cx);
        }
    }
    server.shutdown();
    0
}

/// How long to wait for events before `deadline`, from the turn's `now`.
///
/// Under a millisecond is not waited for: epoll rounds a timeout up to the
/// next millisecond, and a deadline that is "now" by a clock read after the
/// turn's (the smtp agent asks to be driven again that way) would cost a
/// millisecond's sleep; polling without waiting brings the next turn, which
/// finds it due.
fn poll_timeout(deadline: Option<Instant>, now: Instant) -> Option<Duration> {
    evloop::poll_timeout(deadline, now).map(|d| {
        if d < Duration::from_millis(1) {
            Duration::ZERO
        } else {
            d
        }
    })
}

fn set_listening(registry: &Registry, listeners: &mut [Listener], on: bool) {
    for (i, l) in listeners.iter_mut().enumerate() {
        let token = Token(FIRST_LISTENER + i);
        let r = match (&mut l.kind, on) {
            (ListenerKind::Tcp(s), true) => registry.register(s, token, Interest::READABLE),
            (ListenerKind::Unix(s), true) => registry.register(s, token, Interest::READABLE),
            (ListenerKind::Tcp(s), false) => registry.deregister(s),
            (ListenerKind::Unix(s), false) => registry.deregister(s),
        };
        if let Err(e) = r {
            msg_warn!("listening socket: {e}");
        }
    }
}

fn accept_all<S: Server>(
    l: &mut Listener,
    server: &mut S,
    cx: &mut Cx<'_>,
    max_use: u64,
    used: u64,
) -> u64 {
    let mut n = 0;
    loop {
        if max_use > 0 && used + n >= max_use {
            return n;
        }
        let conn = match &mut l.kind {
            ListenerKind::Tcp(s) => s.accept().map(|(c, a)| Conn::Tcp(c, a)),
            ListenerKind::Unix(s) => s.accept().map(|(c, _)| Conn::Unix(c)),
        };
        match conn {
            Ok(c) => {
                n += 1;
                server.accept(cx, c);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // Another process sharing the socket took the client, or the
            // client left before we got to it: nothing to do.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => continue,
            Err(e) => {
                msg_warn!("accept: {e}");
                return n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_directory_is_the_root_only_once_chrooted_as_root() {
        let config = Config::parse(
            "queue_directory = /var/spool/sluice\n",
            std::path::Path::new("main.cf"),
            &[],
        )
        .unwrap()
        .config;
        let mut ctx = Context {
            args: DaemonArgs::default(),
            config,
            config_dir: PathBuf::from("/etc/sluice"),
            foreground: true,
        };
        assert_eq!(ctx.queue_root(), PathBuf::from("/var/spool/sluice"));
        ctx.args.chroot = true;
        // An unprivileged daemon cannot chroot: it reaches the queue by name.
        let chrooted = if sys::is_root() {
            "/"
        } else {
            "/var/spool/sluice"
        };
        assert_eq!(ctx.queue_root(), PathBuf::from(chrooted));
    }
}
