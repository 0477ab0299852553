//! master's event loop: spawning, reaping, reloading and stopping.
//!
//! Logs (Postfix's wording where Postfix has one): `daemon started`,
//! `reload -- version V, configuration DIR`, `terminating on signal N`,
//! `warning: process CMD pid N exit status S` / `killed by signal N`,
//! `warning: CMD: bad command startup -- throttling for Ns`,
//! `warning: service NAME: process limit M reached`,
//! `warning: service NAME: wakeup SOCKET: not accepted within 1s: ERROR`.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use config::{Config, ServiceDef, ServiceKind};
use daemon::{msg_info, msg_warn, DaemonArgs};
use evloop::signals::{SIGCHLD, SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use evloop::{Signals, Timers};
use ipc::control::{self, MasterStatus, ProcessStatus, ServiceStatus};
use ipc::status::{self, StatusRecord, RECORD_LEN};
use ipc::{Endpoint, Tagged};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};

use crate::listen::{self, Bind};
use crate::service::{Proc, ProcState, Service};

const SIGNALS: Token = Token(0);
const STATUS: Token = Token(1);
const CONTROL: Token = Token(2);
const FIRST_CONTROL_CLIENT: usize = 16;
const FIRST_LISTEN: usize = 1 << 20;
const SOCKS_PER_SERVICE: usize = 64;

/// What a timer is for.
#[derive(Debug)]
enum Timer {
    /// Send a wakeup to the service with this id.
    Wakeup(usize),
    /// A throttle of this service ends.
    Unthrottle(usize),
    /// Children had their chance to exit after SIGTERM.
    StopDeadline,
    /// Wakeup connections made this long ago are let go.
    ReleasePokes,
}

/// How long a wakeup's connection is held open: its service's process
/// accepts it by then (or starts, and then accepts it), and a TCP
/// handshake not done by then is reported.
const POKE_HOLD: Duration = Duration::from_secs(1);

/// Everything master loaded from the configuration directory.
pub struct Loaded {
    /// main.cf.
    pub config: Config,
    /// What loading found to warn about (unknown and unimplemented
    /// parameters), for [`Loaded::log_warnings`] once the log is open.
    pub warnings: Vec<config::Diagnostic>,
    /// master.cf.
    pub services: Vec<ServiceDef>,
}

impl Loaded {
    /// Logs the configuration's warnings: at start once the log is open
    /// (before, they went nowhere a postmaster looks), and at each reload.
    pub fn log_warnings(&self) {
        for w in &self.warnings {
            msg_warn!("{w}");
        }
    }
}

/// Loads main.cf and master.cf, keeping main.cf's warnings to log.
pub fn load(config_dir: &std::path::Path) -> Result<Loaded, String> {
    let services =
        config::load_master_cf(&config_dir.join("master.cf")).map_err(|e| e.to_string())?;
    let loaded = Config::load_with_master(config_dir, &services).map_err(|e| e.to_string())?;
    Ok(Loaded {
        config: loaded.config,
        warnings: loaded.warnings,
        services,
    })
}

/// master's state.
pub struct Supervisor {
    config_dir: PathBuf,
    loaded: Loaded,
    foreground: bool,
    services: BTreeMap<usize, Service>,
    /// Processes of services that were removed or redefined, by pid →
    /// (command, service name).
    retired: BTreeMap<i32, (String, String)>,
    next_service_id: usize,
    poll: Poll,
    /// A share of the poll's registry for the control clients' endpoints,
    /// which watch for room to write only while a reply waits.
    registry: Rc<Registry>,
    signals: Signals,
    status_read: std::fs::File,
    status_write: OwnedFd,
    status_buf: Vec<u8>,
    life_read: OwnedFd,
    _life_write: OwnedFd,
    control: std::os::unix::net::UnixListener,
    control_path: PathBuf,
    control_clients: BTreeMap<Token, Endpoint>,
    next_control_token: usize,
    timers: Timers<Timer>,
    /// Wakeup connections held open: made at, service name, socket.
    pokes: Vec<(Instant, String, String, listen::Poke)>,
    stopping: bool,
    started: SystemTime,
    owner: Option<sys::privilege::Identity>,
}

fn now_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Supervisor {
    /// Sets up the loop around already-opened sockets.
    pub fn new(
        config_dir: PathBuf,
        loaded: Loaded,
        foreground: bool,
        control: std::os::unix::net::UnixListener,
        control_path: PathBuf,
        owner: Option<sys::privilege::Identity>,
    ) -> Result<Supervisor, String> {
        let poll = Poll::new().map_err(|e| format!("epoll: {e}"))?;
        let signals = Signals::new(
            poll.registry(),
            SIGNALS,
            &[SIGCHLD, SIGHUP, SIGTERM, SIGINT, SIGUSR1],
        )
        .map_err(|e| format!("signals: {e}"))?;
        let (sr, sw) = sys::process::pipe().map_err(|e| e.to_string())?;
        let (lr, lw) = sys::process::pipe().map_err(|e| e.to_string())?;
        let status_read = std::fs::File::from(sr);
        set_nonblocking(&status_read)?;
        poll.registry()
            .register(
                &mut SourceFd(&std::os::fd::AsRawFd::as_raw_fd(&status_read)),
                STATUS,
                Interest::READABLE,
            )
            .map_err(|e| format!("register status pipe: {e}"))?;
        poll.registry()
            .register(
                &mut SourceFd(&std::os::fd::AsRawFd::as_raw_fd(&control)),
                CONTROL,
                Interest::READABLE,
            )
            .map_err(|e| format!("register control socket: {e}"))?;
        Ok(Supervisor {
            config_dir,
            loaded,
            foreground,
            services: BTreeMap::new(),
            retired: BTreeMap::new(),
            next_service_id: 0,
            registry: Rc::new(
                poll.registry()
                    .try_clone()
                    .map_err(|e| format!("epoll: {e}"))?,
            ),
            poll,
            signals,
            status_read,
            status_write: sw,
            status_buf: Vec::new(),
            life_read: lr,
            _life_write: lw,
            control,
            control_path,
            control_clients: BTreeMap::new(),
            next_control_token: FIRST_CONTROL_CLIENT,
            timers: Timers::new(),
            pokes: Vec::new(),
            stopping: false,
            started: SystemTime::now(),
            owner,
        })
    }

    fn default_limit(&self) -> u32 {
        self.loaded
            .config
            .int("default_process_limit")
            .clamp(0, u32::MAX as i64) as u32
    }

    fn socket_owner(&self) -> Option<(u32, u32)> {
        self.owner.as_ref().map(|o| (o.uid, o.gid))
    }

    /// Opens the sockets of every service in master.cf.
    pub fn start_services(&mut self) -> Result<(), String> {
        let defs = self.loaded.services.clone();
        for def in defs {
            self.add_service(def, None)?;
        }
        Ok(())
    }

    fn add_service(
        &mut self,
        def: ServiceDef,
        socks: Option<(Bind, Vec<ListenSock>)>,
    ) -> Result<(), String> {
        let (bind, socks) = match socks {
            Some(s) => s,
            None => {
                let bind = listen::endpoint_of(&def, &self.loaded.config)
                    .map_err(|e| format!("service {}: {e}", def.name))?;
                let socks = listen::open(&bind, self.socket_owner())
                    .map_err(|e| format!("service {}: {e}", def.name))?;
                (bind, socks)
            }
        };
        if socks.len() > SOCKS_PER_SERVICE {
            return Err(format!(
                "service {}: more than {SOCKS_PER_SERVICE} addresses",
                def.name
            ));
        }
        let id = self.next_service_id;
        self.next_service_id += 1;
        let wakeup_timer =
            (def.wakeup > 0).then(|| self.timers.set(Instant::now(), Timer::Wakeup(id)));
        self.services.insert(
            id,
            Service {
                def,
                bind,
                socks,
                procs: BTreeMap::new(),
                watching: false,
                bad_starts: 0,
                throttled_until: None,
                id,
                wakeup_timer,
            },
        );
        Ok(())
    }

    /// Runs until stopped; returns the exit code.
    pub fn run(&mut self) -> i32 {
        let mut events = Events::with_capacity(256);
        loop {
            self.update_watches();
            if self.stopping
                && self.services.values().all(|s| s.procs.is_empty())
                && self.retired.is_empty()
            {
                msg_info!("stopped");
                return 0;
            }
            let now = Instant::now();
            let timeout = evloop::poll_timeout(self.timers.next_deadline(), now);
            if let Err(e) = evloop::poll(&mut self.poll, &mut events, timeout) {
                msg_warn!("poll: {e}");
                return 1;
            }
            for ev in events.iter() {
                match ev.token() {
                    SIGNALS => {
                        for sig in self.signals.drain() {
                            match sig {
                                SIGCHLD => self.reap(),
                                SIGHUP => self.reload(),
                                SIGUSR1 => self.reopen_logs(),
                                _ => self.begin_stop(Some(sig)),
                            }
                        }
                    }
                    STATUS => self.read_status(),
                    CONTROL => self.accept_control(),
                    Token(t) if t >= FIRST_LISTEN => {
                        let id = (t - FIRST_LISTEN) / SOCKS_PER_SERVICE;
                        self.client_waiting(id);
                    }
                    t => self.serve_control(t),
                }
            }
            // SIGCHLD can coalesce; reaping on every pass costs one syscall.
            self.reap();
            let now = Instant::now();
            while let Some(t) = self.timers.pop_expired(now) {
                match t {
                    Timer::Wakeup(id) => self.wakeup(id),
                    Timer::Unthrottle(id) => {
                        if let Some(s) = self.services.get_mut(&id) {
                            s.throttled_until = None;
                            if s.def.wakeup > 0 && s.procs.is_empty() {
                                self.wake_at(id, now);
                            }
                        }
                    }
                    Timer::StopDeadline => self.kill_remaining(),
                    Timer::ReleasePokes => self.release_pokes(now),
                }
            }
        }
    }

    fn update_watches(&mut self) {
        let now = Instant::now();
        let limit = self.default_limit();
        let registry = self.poll.registry();
        for s in self.services.values_mut() {
            let want = !self.stopping && s.wants_watch(now, limit);
            if want == s.watching {
                continue;
            }
            for (i, sock) in s.socks.iter().enumerate() {
                let raw = sock.raw();
                let token = Token(FIRST_LISTEN + s.id * SOCKS_PER_SERVICE + i);
                let r = if want {
                    registry.register(&mut SourceFd(&raw), token, Interest::READABLE)
                } else {
                    registry.deregister(&mut SourceFd(&raw))
                };
                if let Err(e) = r {
                    msg_warn!("service {}: {e}", s.def.name);
                }
            }
            s.watching = want;
        }
    }

    fn client_waiting(&mut self, id: usize) {
        let limit = self.default_limit();
        let Some(s) = self.services.get(&id) else {
            return;
        };
        if self.stopping || s.available() > 0 {
            return;
        }
        if !s.may_spawn(Instant::now(), limit) {
            if s.throttled_until.is_none() {
                msg_warn!(
                    "service {}: process limit {} reached: clients wait; consider raising maxproc in master.cf",
                    s.def.name,
                    s.limit(limit)
                );
            }
            return;
        }
        self.spawn(id);
    }

    fn spawn(&mut self, id: usize) {
        let daemon_dir = PathBuf::from(self.loaded.config.str("daemon_directory"));
        let Some(s) = self.services.get_mut(&id) else {
            return;
        };
        let path = daemon_dir.join(&s.def.command);
        let args = DaemonArgs {
            service: s.def.name.clone(),
            kind: match s.def.kind {
                ServiceKind::Inet => "inet".into(),
                ServiceKind::Unix => "unix".into(),
            },
            unpriv: s.def.unpriv,
            chroot: s.def.chroot,
            verbose: false,
            overrides: s.def.overrides.clone(),
            rest: s.def.args.clone(),
        };
        let mut cmd = Command::new(&path);
        cmd.args(args.to_args())
            .env(status::CONFIG_DIR_ENV, &self.config_dir)
            .env(status::LISTEN_FDS_ENV, s.socks.len().to_string())
            .stdin(Stdio::null());
        if self.foreground {
            cmd.env(status::FOREGROUND_ENV, "1");
        } else {
            cmd.env_remove(status::FOREGROUND_ENV);
        }
        let mut fds = vec![self.status_write.as_fd(), self.life_read.as_fd()];
        fds.extend(s.socks.iter().map(|l| l.fd()));
        match sys::process::spawn_with_fds(&mut cmd, &fds) {
            Ok(child) => {
                let pid = child.id() as i32;
                // We reap with waitpid(-1) ourselves; the handle is not needed.
                drop(child);
                s.procs.insert(
                    pid,
                    Proc {
                        state: ProcState::Starting,
                        uses: 0,
                        started: SystemTime::now(),
                    },
                );
            }
            Err(e) => {
                let max = self.loaded.config.time("service_throttle_time");
                s.bad_starts = s.bad_starts.saturating_add(1);
                let wait = crate::service::backoff(s.bad_starts, max);
                s.throttled_until = Some(Instant::now() + wait);
                msg_warn!(
                    "spawn command {}: {e} -- throttling for {}s",
                    path.display(),
                    wait.as_secs()
                );
                self.timers
                    .set(Instant::now() + wait, Timer::Unthrottle(id));
            }
        }
    }

    fn reap(&mut self) {
        loop {
            let (pid, how) = match sys::process::reap_any() {
                Ok(Some(x)) => x,
                Ok(None) => return,
                Err(e) => {
                    msg_warn!("{e}");
                    return;
                }
            };
            if let Some((cmd, name)) = self.retired.remove(&pid) {
                if !how.is_success() && !self.stopping {
                    log_exit(&cmd, pid, how);
                }
                self.wake_successor(&name);
                continue;
            }
            let max = self.loaded.config.time("service_throttle_time");
            let daemon_dir = self.loaded.config.str("daemon_directory");
            let now = Instant::now();
            let stopping = self.stopping;
            let Some((id, s)) = self
                .services
                .iter_mut()
                .find(|(_, s)| s.procs.contains_key(&pid))
            else {
                continue;
            };
            let id = *id;
            let proc = s.procs.remove(&pid).expect("checked above");
            if stopping || how.is_success() {
                continue;
            }
            let cmd = format!("{daemon_dir}/{}", s.def.command);
            log_exit(&cmd, pid, how);
            if let Some(wait) = s.died_badly(&proc, now, max) {
                msg_warn!(
                    "{cmd}: bad command startup -- throttling for {}s",
                    wait.as_secs().max(1)
                );
                self.timers.set(now + wait, Timer::Unthrottle(id));
            } else if s.def.wakeup > 0 {
                // A service that is meant to run gets its process back now.
                self.wake_at(id, now);
            }
        }
    }

    fn read_status(&mut self) {
        let mut buf = [0u8; RECORD_LEN * 64];
        loop {
            match self.status_read.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.status_buf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let whole = self.status_buf.len() / RECORD_LEN * RECORD_LEN;
        let records: Vec<u8> = self.status_buf.drain(..whole).collect();
        for chunk in records.chunks_exact(RECORD_LEN) {
            let arr: &[u8; RECORD_LEN] = chunk.try_into().expect("chunks_exact");
            let Some(rec) = StatusRecord::from_bytes(arr) else {
                msg_warn!("garbled status record from a child");
                continue;
            };
            for s in self.services.values_mut() {
                if s.report(rec.pid, rec.state, rec.uses) {
                    break;
                }
            }
        }
    }

    /// A redefined service's old process has exited. It shared the
    /// listening socket with the new definition and may have accepted the
    /// wakeup meant to start the new one's process (it was told to stop
    /// moments before): a service meant to run wakes again now, rather
    /// than a whole wakeup interval later.
    fn wake_successor(&mut self, name: &str) {
        if self.stopping {
            return;
        }
        let now = Instant::now();
        let due = self.services.iter().find(|(_, s)| {
            s.def.name == name
                && s.def.wakeup > 0
                && s.procs.is_empty()
                && s.throttled_until.is_none_or(|t| t <= now)
        });
        if let Some((&id, _)) = due {
            self.wake_at(id, now);
        }
    }

    /// Moves service `id`'s wakeup to `at` (each wakeup arms the next one
    /// interval later: a second timer would double them for good).
    fn wake_at(&mut self, id: usize, at: Instant) {
        let Some(s) = self.services.get_mut(&id) else {
            return;
        };
        if let Some(old) = s.wakeup_timer.take() {
            self.timers.cancel(old);
        }
        s.wakeup_timer = Some(self.timers.set(at, Timer::Wakeup(id)));
    }

    fn wakeup(&mut self, id: usize) {
        if self.stopping {
            return;
        }
        let Some(s) = self.services.get(&id) else {
            return;
        };
        let interval = Duration::from_secs(u64::from(s.def.wakeup));
        // A wakeup is a client that connects and leaves: the service's
        // process starts on demand if none runs, as in Postfix.
        let now = Instant::now();
        if s.throttled_until.is_none_or(|t| t <= now) {
            for sock in &s.socks {
                match sock.poke() {
                    Ok(p) => self
                        .pokes
                        .push((now, s.def.name.clone(), sock.describe(), p)),
                    Err(e) => msg_warn!("service {}: wakeup {}: {e}", s.def.name, sock.describe()),
                }
            }
            if !self.pokes.is_empty() {
                self.timers.set(now + POKE_HOLD, Timer::ReleasePokes);
            }
        }
        if s.def.wakeup > 0 {
            self.wake_at(id, Instant::now() + interval);
        }
    }

    /// Lets go of the wakeup connections held for [`POKE_HOLD`], and
    /// reports those that never reached their service.
    fn release_pokes(&mut self, now: Instant) {
        self.pokes.retain(|(at, name, sock, p)| {
            if now < *at + POKE_HOLD {
                return true;
            }
            if let Some(e) = p.failure() {
                msg_warn!("service {name}: wakeup {sock}: not accepted within 1s: {e}");
            }
            false
        });
    }

    /// Opens `maillog_file` again (logrotate moved it) and has every child
    /// do the same; a child for which the file did not move does nothing.
    fn reopen_logs(&mut self) {
        match daemon::log::reopen() {
            Ok(true) => {
                msg_info!("reopened the mail log");
                self.share_log_file();
            }
            Ok(false) => {}
            Err(e) => msg_warn!("{e}"),
        }
        // A child that has not reported yet may not handle SIGUSR1 yet
        // (its default action is to exit); it opened the log moments ago.
        let started = self.services.values().flat_map(|s| {
            s.procs
                .iter()
                .filter(|(_, p)| p.state != ProcState::Starting)
                .map(|(pid, _)| *pid)
        });
        let pids: Vec<i32> = started.chain(self.retired.keys().copied()).collect();
        for pid in pids {
            let _ = sys::process::signal(pid, SIGUSR1);
        }
    }

    /// Lets the daemons that run as mail_owner open the new log file
    /// themselves, as they opened the old one as root before dropping
    /// privileges: mail_owner's group may append to it. Each of them holds
    /// a descriptor that writes the log already, so this gives them nothing
    /// new; without it qmgr, which is never idle, would have to restart.
    fn share_log_file(&self) {
        use std::os::unix::fs::PermissionsExt;
        let Some(owner) = &self.owner else {
            return;
        };
        let path = self.loaded.config.str("maillog_file");
        let shared = std::os::unix::fs::chown(&path, None, Some(owner.gid)).and_then(|()| {
            let mode = std::fs::metadata(&path)?.permissions().mode() & 0o7777;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | 0o020))
        });
        if let Err(e) = shared {
            msg_warn!(
                "maillog_file {path}: group {} may not write it: {e}",
                owner.gid
            );
        }
    }

    fn reload(&mut self) {
        if self.stopping {
            return;
        }
        self.reopen_logs();
        let new = match load(&self.config_dir) {
            Ok(l) => l,
            Err(e) => {
                msg_warn!("reload: {e}; keeping the running configuration");
                return;
            }
        };
        msg_info!(
            "reload -- version {}, configuration {}",
            env!("CARGO_PKG_VERSION"),
            self.config_dir.display()
        );
        new.log_warnings();
        let old_config = std::mem::replace(&mut self.loaded, new);
        let mut keep = Vec::new();
        let ids: Vec<usize> = self.services.keys().copied().collect();
        for id in ids {
            let s = &self.services[&id];
            let new_def = self
                .loaded
                .services
                .iter()
                .find(|d| d.name == s.def.name && d.kind == s.def.kind)
                .cloned();
            let new_bind = new_def
                .as_ref()
                .and_then(|d| listen::endpoint_of(d, &self.loaded.config).ok());
            let same_def = new_def.as_ref().is_some_and(|d| same_service(d, &s.def));
            let same_bind = new_bind.as_ref() == Some(&s.bind);
            if same_def && same_bind {
                // Every process hears of a reload, main.cf changed or not:
                // a table, certificate or policy file may have, and only
                // the daemon knows what it read (Postfix's reload, too,
                // reaches every process).
                for pid in s.procs.keys() {
                    let _ = sys::process::signal(*pid, SIGHUP);
                }
                keep.push(s.def.name.clone());
                continue;
            }
            let mut s = self.services.remove(&id).expect("id from keys");
            self.unwatch(&mut s);
            let cmd = format!(
                "{}/{}",
                old_config.config.str("daemon_directory"),
                s.def.command
            );
            for pid in s.procs.keys() {
                let _ = sys::process::signal(*pid, SIGTERM);
                self.retired.insert(*pid, (cmd.clone(), s.def.name.clone()));
            }
            match new_def {
                Some(def) => {
                    msg_info!("service {}: definition changed, restarting", def.name);
                    let socks = if same_bind {
                        Some((s.bind, s.socks))
                    } else {
                        None
                    };
                    if let Err(e) = self.add_service(def.clone(), socks) {
                        msg_warn!("reload: {e}");
                    }
                    keep.push(def.name.clone());
                }
                None => msg_info!("service {}: removed", s.def.name),
            }
        }
        let defs = self.loaded.services.clone();
        for def in defs {
            if !keep.contains(&def.name) {
                msg_info!("service {}: added", def.name);
                if let Err(e) = self.add_service(def, None) {
                    msg_warn!("reload: {e}");
                }
            }
        }
    }

    fn unwatch(&mut self, s: &mut Service) {
        if s.watching {
            for sock in &s.socks {
                let _ = self.poll.registry().deregister(&mut SourceFd(&sock.raw()));
            }
            s.watching = false;
        }
    }

    /// Starts the graceful stop: SIGTERM to every child, SIGKILL after
    /// `master_stop_timeout`.
    pub fn begin_stop(&mut self, sig: Option<i32>) {
        if self.stopping {
            return;
        }
        match sig {
            Some(sig) => msg_info!("terminating on signal {sig}"),
            None => msg_info!("terminating on request"),
        }
        self.stopping = true;
        for pid in self.all_pids() {
            let _ = sys::process::signal(pid, SIGTERM);
        }
        let wait = self.loaded.config.time("master_stop_timeout");
        self.timers.set(Instant::now() + wait, Timer::StopDeadline);
    }

    fn all_pids(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self
            .services
            .values()
            .flat_map(|s| s.procs.keys().copied())
            .collect();
        v.extend(self.retired.keys().copied());
        v
    }

    fn kill_remaining(&mut self) {
        let pids = self.all_pids();
        for pid in &pids {
            msg_warn!("process {pid} did not stop: sending SIGKILL");
            let _ = sys::process::signal(*pid, 9);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !self.all_pids().is_empty() {
            self.reap();
            std::thread::sleep(Duration::from_millis(20));
        }
        for s in self.services.values_mut() {
            s.procs.clear();
        }
        self.retired.clear();
    }

    fn accept_control(&mut self) {
        loop {
            let stream = match self.control.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    msg_warn!("control socket: {e}");
                    return;
                }
            };
            let Ok(cred) = sys::creds::peer_cred(&stream) else {
                continue;
            };
            let me = sys::current_ids().0;
            let owner = self.owner.as_ref().map(|o| o.uid);
            if cred.uid != 0 && cred.uid != me && Some(cred.uid) != owner {
                msg_warn!(
                    "control socket: refusing uid {} (pid {})",
                    cred.uid,
                    cred.pid
                );
                continue;
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let mut ep = Endpoint::new(mio::net::UnixStream::from_std(stream));
            let token = Token(self.next_control_token);
            self.next_control_token += 1;
            if FIRST_CONTROL_CLIENT + self.next_control_token >= FIRST_LISTEN {
                self.next_control_token = FIRST_CONTROL_CLIENT;
            }
            if ep.register(&self.registry, token).is_err() {
                continue;
            }
            self.control_clients.insert(token, ep);
            self.serve_control(token);
        }
    }

    fn serve_control(&mut self, token: Token) {
        let Some(mut ep) = self.control_clients.remove(&token) else {
            return;
        };
        let result = (|| -> Result<bool, ipc::IpcError> {
            // A reply larger than the socket took goes on as room comes.
            ep.write_ready()?;
            let open = ep.read_ready()?;
            if !ep.accept_hello::<control::Control>()? {
                return Ok(open);
            }
            while let Some(req) = ep.recv::<Tagged<control::Request>>()? {
                let resp = match req.body {
                    control::Request::Status => control::Response::Status(self.status()),
                    control::Request::Reload => {
                        self.reload();
                        control::Response::Done
                    }
                    control::Request::Stop => {
                        self.begin_stop(None);
                        control::Response::Done
                    }
                };
                ep.reply(req.id, &resp)?;
            }
            Ok(!ep.is_eof())
        })();
        match result {
            Ok(true) => {
                self.control_clients.insert(token, ep);
            }
            Ok(false) => {
                let _ = self.poll.registry().deregister(ep.stream());
            }
            Err(e) => {
                msg_warn!("control client: {e}");
                let _ = self.poll.registry().deregister(ep.stream());
            }
        }
    }

    fn status(&self) -> MasterStatus {
        let now = Instant::now();
        let limit = self.default_limit();
        MasterStatus {
            pid: std::process::id() as i32,
            started: now_secs(self.started),
            config_directory: self.config_dir.display().to_string(),
            queue_directory: self.loaded.config.str("queue_directory"),
            unprivileged: !sys::is_root(),
            services: self
                .services
                .values()
                .map(|s| ServiceStatus {
                    name: s.def.name.clone(),
                    kind: match s.def.kind {
                        ServiceKind::Inet => "inet".into(),
                        ServiceKind::Unix => "unix".into(),
                    },
                    command: s.def.command.clone(),
                    listen: s.socks.iter().map(|l| l.describe()).collect(),
                    maxproc: s.limit(limit),
                    throttled_for: s
                        .throttled_until
                        .map(|t| t.saturating_duration_since(now).as_secs())
                        .unwrap_or(0),
                    processes: s
                        .procs
                        .iter()
                        .map(|(pid, p)| ProcessStatus {
                            pid: *pid,
                            state: match p.state {
                                ProcState::Starting => "starting".into(),
                                ProcState::Available => "available".into(),
                                ProcState::Busy => "busy".into(),
                            },
                            uses: p.uses,
                            started: now_secs(p.started),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// Removes the control socket; called on the way out.
    pub fn cleanup(&self) {
        let _ = std::fs::remove_file(&self.control_path);
    }
}

use crate::listen::ListenSock;

/// Whether two definitions run the same thing (equality ignores line numbers).
fn same_service(a: &ServiceDef, b: &ServiceDef) -> bool {
    a == b
}

fn log_exit(cmd: &str, pid: i32, how: sys::process::ExitKind) {
    match how {
        sys::process::ExitKind::Exited(code) => {
            msg_warn!("process {cmd} pid {pid} exit status {code}")
        }
        sys::process::ExitKind::Signaled(sig) => {
            msg_warn!("process {cmd} pid {pid} killed by signal {sig}")
        }
    }
}

fn set_nonblocking(f: &std::fs::File) -> Result<(), String> {
    sys::process::set_nonblocking(f.as_fd()).map_err(|e| e.to_string())
}
