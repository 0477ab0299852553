//! Support for the workspace integration tests: a real Sluice instance in
//! a temporary directory, driven through the `sluice` command as a
//! postmaster would, and waits with deadlines instead of fixed sleeps.
//!
//! When the tests run as root (as in CI), the instance is started as an
//! unprivileged user (`SLUICE_TEST_USER`, default `nobody`) unless a test asks
//! for root, so that "unprivileged mode" is what is tested by default.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod dovecot;
pub mod fake_router;
pub mod haproxy;
pub mod netns;
pub mod pki;
pub mod postfix;
mod shaping_sink;
pub mod smtp_client;
pub mod test_milter;
pub mod testkit;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ipc::control::{Control, MasterStatus, Request, Response};
use ipc::Client;

/// Where the built programs are: `$SLUICE_BIN_DIR`, else next to the test binary.
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SLUICE_BIN_DIR") {
        return PathBuf::from(d);
    }
    // target/debug/deps/<test> → target/debug
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .to_path_buf();
    assert!(
        dir.join("master").is_file(),
        "{}/master not built: run `cargo build` for the bin/ packages first (scripts/test does)",
        dir.display()
    );
    dir
}

/// Polls `f` until it returns `Some` or `secs` pass; panics with `what` on timeout.
pub fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A Sluice instance in a temporary directory.
pub struct Instance {
    /// The temporary root (config in `etc/`, spool in `spool/`, log in `maillog`).
    pub dir: tempfile::TempDir,
    /// Run the `sluice` command (and so master) as this user; `None` = as we are.
    pub run_as: Option<(u32, u32)>,
    /// The network namespace (`ip netns` name) it runs in; `None`: ours.
    pub netns: Option<String>,
    started: bool,
}

impl Instance {
    /// Writes main.cf (defaults for a test plus `main_extra`) and `master_cf`.
    pub fn new(master_cf: &str, main_extra: &str) -> Instance {
        Self::with_identity(master_cf, main_extra, false)
    }

    /// Like `new`; `as_root` keeps root's identity when the tests run as root.
    pub fn with_identity(master_cf: &str, main_extra: &str, as_root: bool) -> Instance {
        let dir = tempfile::Builder::new()
            .prefix("sluice-test")
            .tempdir()
            .expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        let run_as = if sys::is_root() && !as_root {
            let name = std::env::var("SLUICE_TEST_USER").unwrap_or_else(|_| "nobody".into());
            let u = sys::privilege::lookup_user(&name)
                .ok()
                .flatten()
                .expect("test user exists");
            Some((u.uid, u.gid))
        } else {
            None
        };
        let main = format!(
            "queue_directory = {root}/spool\n\
             daemon_directory = {bin}\n\
             data_directory = {root}/data\n\
             maillog_file = {root}/maillog\n\
             mail_owner = nobody\n\
             master_stop_timeout = 5s\n\
             {main_extra}\n",
            root = root.display(),
            bin = bin_dir().display()
        );
        std::fs::write(root.join("etc/main.cf"), main).unwrap();
        std::fs::write(root.join("etc/master.cf"), master_cf).unwrap();
        if let Some((uid, gid)) = run_as {
            // The temporary directory is root's 0700; the instance's user
            // must be able to reach and write it.
            for p in [root.to_path_buf(), root.join("etc")] {
                std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
            }
        }
        Instance {
            dir,
            run_as,
            netns: None,
            started: false,
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The configuration directory.
    pub fn etc(&self) -> PathBuf {
        self.root().join("etc")
    }

    /// Runs `sluice -c etc ARGS...` and returns its output.
    pub fn sluice(&self, args: &[&str]) -> Output {
        let mut cmd = self.command(&bin_dir().join("sluice"));
        cmd.arg("-c").arg(self.etc()).args(args);
        cmd.output().expect("run sluice")
    }

    /// A command for `program` as the instance's user, in its network
    /// namespace when it has one (nsenter(1) enters it as root, then
    /// takes the user's ids).
    fn command(&self, program: &Path) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut cmd = Command::new("nsenter");
                cmd.arg(format!("--net=/run/netns/{ns}"));
                if let Some((uid, gid)) = self.run_as {
                    cmd.arg(format!("--setuid={uid}"))
                        .arg(format!("--setgid={gid}"));
                }
                cmd.arg("--").arg(program);
                cmd
            }
            None => {
                let mut cmd = Command::new(program);
                if let Some((uid, gid)) = self.run_as {
                    cmd.uid(uid).gid(gid);
                }
                cmd
            }
        }
    }

    /// `sluice start`, asserting success.
    pub fn start(&mut self) {
        let out = self.sluice(&["start"]);
        self.started_ok(out);
    }

    /// `sluice start` with the open-files limit (RLIMIT_NOFILE) at `n`, the
    /// limit most systems give a service; master and its children inherit it.
    pub fn start_with_open_files(&mut self, n: u64) {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
            .arg(bin_dir().join("sluice"))
            .arg("-c")
            .arg(self.etc())
            .arg("start");
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        let out = cmd.output().expect("run sh");
        self.started_ok(out);
    }

    fn started_ok(&mut self, out: Output) {
        assert!(
            out.status.success(),
            "sluice start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.started = true;
    }

    /// The mail log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root().join("maillog")).unwrap_or_default()
    }

    /// Waits until a log line contains `needle`; returns that line.
    pub fn wait_log(&self, secs: u64, needle: &str) -> String {
        wait_for(secs, &format!("log line containing {needle:?}"), || {
            self.log()
                .lines()
                .find(|l| l.contains(needle))
                .map(str::to_string)
        })
    }

    /// Asks master for its status over the control socket.
    pub fn status(&self) -> MasterStatus {
        let sock = self.root().join("spool/pid/master.sock");
        let mut c = Client::<Control>::connect(&sock, Duration::from_secs(5))
            .expect("connect control socket");
        match c.call(&Request::Status).expect("status call") {
            Response::Status(s) => s,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// The pids of a service's processes.
    pub fn pids(&self, service: &str) -> Vec<i32> {
        self.status()
            .services
            .iter()
            .find(|s| s.name == service)
            .map(|s| s.processes.iter().map(|p| p.pid).collect())
            .unwrap_or_default()
    }

    /// Waits until a service has a process whose pid is not in `not`.
    pub fn wait_pid(&self, service: &str, not: &[i32]) -> i32 {
        wait_for(20, &format!("a new {service} process"), || {
            self.pids(service).into_iter().find(|p| !not.contains(p))
        })
    }

    /// master's pid from the pid file.
    pub fn master_pid(&self) -> i32 {
        sys::lock::read_pid(&self.root().join("spool/pid/master.pid")).expect("master.pid")
    }

    /// `sluice stop`, asserting success.
    pub fn stop(&mut self) {
        let out = self.sluice(&["stop"]);
        assert!(
            out.status.success(),
            "sluice stop failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.started = false;
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- mail log of the failed test's instance ---\n{}",
                self.log()
            );
        }
        if self.started {
            let pid = sys::lock::read_pid(&self.root().join("spool/pid/master.pid"));
            let _ = self.sluice(&["stop"]);
            if let Some(pid) = pid {
                let _ = sys::process::signal(pid, 9);
            }
        }
    }
}

/// An instance with a small tmpfs mounted inside its directory (the
/// full-disk tests; root only). Dropping it stops the instance first and
/// unmounts after, so a failing test leaves neither daemons nor a mount.
pub struct OnTmpfs {
    inst: Option<Instance>,
    mnt: PathBuf,
}

impl OnTmpfs {
    /// Mounts a tmpfs of `mb` MB on `sub` under the instance's root;
    /// fails saying why when not root or when mount(8) fails.
    pub fn mount(inst: Instance, sub: &str, mb: u32) -> OnTmpfs {
        assert!(
            sys::is_root(),
            "this test mounts a tmpfs for a full disk and needs root: run it as root (scripts/test does in CI)"
        );
        let mnt = inst.root().join(sub);
        std::fs::create_dir_all(&mnt).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mb}m,mode=0777"),
                "tmpfs",
            ])
            .arg(&mnt)
            .output()
            .expect("run mount(8)");
        assert!(
            out.status.success(),
            "mount a tmpfs on {}: {}",
            mnt.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        OnTmpfs {
            inst: Some(inst),
            mnt,
        }
    }

    /// Where the tmpfs is mounted.
    pub fn mnt(&self) -> &Path {
        &self.mnt
    }
}

impl std::ops::Deref for OnTmpfs {
    type Target = Instance;
    fn deref(&self) -> &Instance {
        self.inst
            .as_ref()
            .expect("the instance lives as long as its tmpfs")
    }
}

impl std::ops::DerefMut for OnTmpfs {
    fn deref_mut(&mut self) -> &mut Instance {
        self.inst
            .as_mut()
            .expect("the instance lives as long as its tmpfs")
    }
}

impl Drop for OnTmpfs {
    fn drop(&mut self) {
        // The instance's pid files may be on the tmpfs: stop it while they are there.
        if let Some(inst) = self.inst.as_mut() {
            if inst.started {
                let pid = sys::lock::read_pid(&inst.root().join("spool/pid/master.pid"))
                    .or_else(|| sys::lock::read_pid(&self.mnt.join("spool/pid/master.pid")));
                let _ = inst.sluice(&["stop"]);
                if let Some(pid) = pid {
                    let _ = sys::process::signal(pid, 9);
                }
                inst.started = false;
            }
        }
        // Lazily: a daemon that has not exited yet may still hold a file.
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        // Now its temporary directory can go, the mount point included.
        drop(self.inst.take());
    }
}

/// Whether a process is alive and not a zombie.
pub fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    // Below the kernel's ephemeral range (32768 and up by default): a port
    // the kernel hands out for bind(0) or as a connection's source port can
    // be taken again between this call and the test's own bind, so that the
    // test then talks to some other process. Each test process walks its
    // own stretch of the range, and a port in use is skipped.
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 12000;
    const SPAN: u32 = 20000;
    let base = (std::process::id() * 997) % SPAN;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (base + n) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// master.cf for a receiving instance: smtpd on 127.0.0.1:`port`, cleanup,
/// qmgr, anvil and the sendmail submission socket.
pub fn receive_master_cf(port: u16, smtpd_args: &str) -> String {
    format!(
        "127.0.0.1:{port} inet n - n - - smtpd {smtpd_args}\n\
         anvil unix - - n - 1 anvil\n\
         cleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\n\
         submit unix n - n - - cleanup\n"
    )
}

/// main.cf lines every receiving test uses.
/// (Recipient validation is off: these tests use made-up local users; the
/// router test turns it on.)
pub const RECEIVE_MAIN_CF: &str =
    "myhostname = mx.test.example\nmydomain = test.example\nsmtpd_reject_unlisted_recipient = no\n";

impl Instance {
    /// Waits until something accepts TCP connections on 127.0.0.1:`port`.
    pub fn wait_port(&self, port: u16) {
        wait_for(20, &format!("port {port}"), || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(drop)
        });
    }

    /// The queue ids of the queued messages.
    pub fn queued_ids(&self) -> std::collections::BTreeSet<String> {
        self.queue_json()
            .iter()
            .filter_map(|l| {
                l.split("\"queue_id\":\"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .map(str::to_string)
            })
            .collect()
    }

    /// The queue as `sluice queue list --json` prints it, one line per message.
    pub fn queue_json(&self) -> Vec<String> {
        let out = self.sluice(&["queue", "list", "--json"]);
        assert!(
            out.status.success(),
            "queue list: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Runs a script in tests/scripts with python3 and returns its output.
    pub fn python(&self, script: &str, args: &[&str]) -> Output {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/scripts")
            .join(script);
        Command::new("python3")
            .arg(path)
            .args(args)
            .output()
            .expect("python3")
    }
}

/// The user a test instance (and so its local delivery) runs as: as root
/// `$SLUICE_TEST_USER` (default `nobody`), otherwise the current user.
pub fn instance_user() -> String {
    if sys::is_root() {
        std::env::var("SLUICE_TEST_USER").unwrap_or_else(|_| "nobody".into())
    } else {
        let (uid, _) = sys::current_ids();
        sys::privilege::lookup_uid(uid).unwrap().unwrap().name
    }
}

/// Sends the message in file `data` (ASCII text, LF or CRLF line ends)
/// from `from` to `to` with Python's smtplib, which sends it with CRLF and
/// dot-stuffs it, asserting it was accepted.
pub fn smtplib_send(port: u16, from: &str, to: &str, data: &Path) {
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import smtplib, sys\n\
             s = smtplib.SMTP('127.0.0.1', int(sys.argv[1]), timeout=300)\n\
             s.sendmail(sys.argv[2], [sys.argv[3]], open(sys.argv[4]).read())\n\
             s.quit()\n",
        )
        .arg(port.to_string())
        .arg(from)
        .arg(to)
        .arg(data)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "smtplib: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs swaks with `args`, returning (exit status, transcript).
pub fn swaks(args: &[&str]) -> (i32, String) {
    let out = Command::new("swaks")
        .args(args)
        .output()
        .expect("swaks is installed by scripts/test");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Sends one message with swaks to 127.0.0.1:`port` (`extra`: more swaks
/// arguments); fails the test unless it is queued; its queue id.
pub fn swaks_queued(port: u16, from: &str, to: &str, extra: &[&str]) -> String {
    let server = format!("127.0.0.1:{port}");
    let mut args = vec!["--server", &server, "--from", from, "--to", to];
    args.extend_from_slice(extra);
    let (code, out) = swaks(&args);
    assert_eq!(code, 0, "{out}");
    queued_id(&out)
}

/// The queue id a client's transcript (swaks, smtplib) shows after
/// "queued as "; fails the test, with the transcript, when there is none.
pub fn queued_id(transcript: &str) -> String {
    transcript
        .lines()
        .find_map(|l| l.split("queued as ").nth(1))
        .unwrap_or_else(|| panic!("no queue id in:\n{transcript}"))
        .trim()
        .to_string()
}

/// Makes a self-signed certificate and key (PEM) in `dir` with openssl(1).
pub fn make_cert(dir: &Path) -> (PathBuf, PathBuf) {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=mx.test.example",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl(1) is installed by scripts/test");
    assert!(st.success());
    (cert, key)
}

/// A child process killed when dropped (smtp-sink, dnsmasq).
pub struct Kill(pub std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Postfix's smtp-sink on 127.0.0.1:`port` (or `addr` given with a host),
/// dumping every transaction into its own file under `dir`.
pub struct Sink {
    /// The process.
    pub child: Kill,
    /// Its port.
    pub port: u16,
    /// Where it dumps messages.
    pub dir: tempfile::TempDir,
}

/// Starts smtp-sink on `addr` (e.g. `127.0.0.1:2525`) with extra options.
pub fn smtp_sink(addr: &str, extra: &[&str]) -> Sink {
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let template = format!("{}/%H%M%S.", dir.path().display());
    let child = Command::new("smtp-sink")
        .args(["-u", "nobody", "-d", &template])
        .args(extra)
        .arg(addr)
        .arg("64")
        .spawn()
        .expect("smtp-sink is installed by scripts/test");
    let mut child = child;
    wait_for(10, "smtp-sink", || {
        // Listening, and it is ours: a sink that could not bind has exited.
        let up = std::net::TcpStream::connect(addr).is_ok();
        (up && matches!(child.try_wait(), Ok(None))).then_some(())
    });
    let port = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    Sink {
        child: Kill(child),
        port,
        dir,
    }
}

/// The number of messages a sink has dumped, or begun to: smtp-sink
/// creates the file at MAIL FROM. To read one, see [`sink_dump`].
pub fn dumped(sink: &Sink) -> usize {
    std::fs::read_dir(sink.dir.path())
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A message smtp-sink dumped, whole.
#[derive(Debug, Clone)]
pub struct Dump {
    /// Its file.
    pub path: PathBuf,
    /// Its text: smtp-sink's `X-` lines and Received:, then the message, with LF line ends.
    pub text: String,
    /// The queue id of the topmost Sluice Received: line (the instance that sent it).
    pub queue_id: String,
    /// Its transaction's recipients (`X-Rcpt-Args:`), without the brackets.
    pub rcpts: Vec<String>,
}

impl Dump {
    /// Reads a dump; `None` when it has not got as far as its Sluice Received: line.
    fn read(path: PathBuf) -> Option<Dump> {
        let text = String::from_utf8_lossy(&std::fs::read(&path).ok()?).into_owned();
        let rcpts = text
            .lines()
            .take_while(|l| l.starts_with("X-"))
            .filter_map(|l| l.strip_prefix("X-Rcpt-Args: <"))
            .filter_map(|a| a.split_once('>').map(|(a, _)| a.to_string()))
            .collect();
        // "by HOST (Sluice) with ESMTP id QID" from smtpd, or
        // "by HOST (Sluice, from userid N)\n\tid QID" for local mail and
        // notices; smtp-sink's own Received: comes first and is skipped.
        let mut words = text.split("(Sluice").nth(1)?.split_whitespace();
        words.find(|w| *w == "id")?;
        let queue_id = words
            .next()?
            .trim_end_matches(';')
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        Some(Dump {
            path,
            text,
            queue_id,
            rcpts,
        })
    }
}

/// The messages at `sink` that `inst` has logged as sent there, each whole.
///
/// smtp-sink creates a dump at MAIL FROM and writes it through a buffer as
/// DATA comes, so a dump that exists may be empty or hold part of the
/// message; it closes the dump before it answers the final dot, and Sluice
/// logs `QUEUEID: to=<RCPT>, ... status=sent` only after that answer. A
/// dump counts when that line is in the log for its queue id, one of its
/// recipients and the sink's port; dumps still being written are left out,
/// and so are those without a Sluice Received: line to name their queue id.
pub fn sent_dumps(sink: &Sink, inst: &Instance) -> Vec<Dump> {
    let port = format!("]:{},", sink.port);
    let log = inst.log();
    let sent: std::collections::HashSet<(&str, &str)> = log
        .lines()
        .filter(|l| l.contains("status=sent") && l.contains(&port))
        .filter_map(|l| {
            let (head, rest) = l.split_once(": to=<")?;
            Some((head.rsplit(' ').next()?, rest.split_once('>')?.0))
        })
        .collect();
    let Ok(dir) = std::fs::read_dir(sink.dir.path()) else {
        return Vec::new();
    };
    dir.filter_map(|e| Dump::read(e.ok()?.path()))
        .filter(|d| {
            d.rcpts
                .iter()
                .any(|r| sent.contains(&(d.queue_id.as_str(), r.as_str())))
        })
        .collect()
}

/// Waits up to 30 s until `inst` has logged message `id` as sent to `rcpt`
/// at `sink`, and returns its dump there, whole (see [`sent_dumps`]).
/// Fails naming the message, with what the log says of it.
pub fn sink_dump(sink: &Sink, inst: &Instance, id: &str, rcpt: &str) -> Dump {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(d) = sent_dumps(sink, inst)
            .into_iter()
            .find(|d| d.queue_id == id && d.rcpts.iter().any(|r| r == rcpt))
        {
            return d;
        }
        if Instant::now() >= deadline {
            let log = inst.log();
            let said: Vec<&str> = log.lines().filter(|l| l.contains(id)).collect();
            panic!(
                "timed out after 30s waiting for {id} to <{rcpt}> sent to the sink on port {} \
                 and dumped whole there ({} files there); the log has of {id}:\n{}",
                sink.port,
                dumped(sink),
                said.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// dnsmasq answering on a free 127.0.0.1 port (UDP and TCP) with `records`
/// (`--mx-host=…`, `--host-record=…`). Nothing but the given records: no
/// upstream, no hosts file. Fails the test when dnsmasq is not installed
/// (scripts/test installs it): a test never passes by skipping.
pub fn dnsmasq(records: &[&str]) -> (Kill, std::net::SocketAddr) {
    let bin = "/usr/sbin/dnsmasq";
    assert!(
        Path::new(bin).exists(),
        "{bin} is not installed (scripts/test installs dnsmasq-base)"
    );
    let port = loop {
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = u.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            break p;
        }
    };
    let child = Command::new(bin)
        .args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
        ])
        .args([
            "--listen-address=127.0.0.1",
            "--pid-file=",
            "--local=/test/",
            "--local-ttl=60",
            "--user=root",
        ])
        .arg(format!("--port={port}"))
        .args(records)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start dnsmasq");
    (Kill(child), format!("127.0.0.1:{port}").parse().unwrap())
}

/// A relaying instance: smtpd on a free port, every service, and
/// `relayhost = [127.0.0.1]:sink_port`; `extra` is appended to main.cf.
pub fn relay_instance(sink_port: u16, extra: &str) -> (Instance, u16) {
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{sink_port}\nsmtpd_reject_unlisted_recipient = no\n{extra}"
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);
    (inst, port)
}

/// [`relay_instance`] that also takes local submissions (`public/submit`),
/// with no SMTP service; `extra` is appended to main.cf.
pub fn submit_relay_instance(sink_port: u16, extra: &str) -> Instance {
    let cf = "anvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
              submit unix n - n - - cleanup\nqmgr unix - - n 300 1 qmgr\n\
              router unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n";
    let main =
        format!("myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{sink_port}\n{extra}");
    let mut inst = Instance::new(cf, &main);
    inst.start();
    let submit = inst.dir.path().join("spool/public/submit");
    wait_for(20, "the submit socket", || submit.exists().then_some(()));
    inst
}

/// Runs sendmail(1) as `inst`'s user with `args`, `input` on its stdin.
pub fn run_sendmail(inst: &Instance, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(bin_dir().join("sendmail"));
    cmd.args(args).env("SLUICE_CONFIG_DIR", inst.etc());
    if let Some((uid, gid)) = inst.run_as {
        cmd.uid(uid).gid(gid);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // sendmail may refuse before reading its input (bad arguments).
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait_with_output().unwrap()
}

/// Fails the test, saying why, when it does not run as root (CI does): a
/// test that needs root never passes by skipping.
pub fn require_root(why: &str) {
    assert!(sys::is_root(), "this test needs root: {why}");
}

#[cfg(test)]
mod tests {
    use super::Dump;

    /// Dumps as smtp-sink writes them (LF line ends), whole or begun.
    #[test]
    fn a_dump_is_named_by_its_topmost_sluice_received_line() {
        let sink = "X-Client-Addr: 127.0.0.1\nX-Client-Proto: ESMTP\nX-Helo-Args: mx.test.example\n\
                    X-Mail-Args: <a@example.com>\nX-Rcpt-Args: <x@remote.example> ORCPT=rfc822;y@v.example\n\
                    X-Rcpt-Args: <z@remote.example>\nReceived: from mx.test.example ([127.0.0.1])\n\
                    \tby sink.test (smtp-sink) with ESMTP id 6f637299;\n\tFri, 27 Nov 2026 02:00:00 +0000 (UTC)\n";
        let cases: &[(&str, Option<&str>)] = &[
            (
                "Received: from c (c [127.0.0.1])\n\tby mx (Sluice) with ESMTP id 1K1AAA0;\n\tdate\n\
                 Received: by a (Sluice, from userid 0)\n\tid 1K1BBB0; date\n\nbody\n\n",
                Some("1K1AAA0"),
            ),
            (
                "Received: by mx (Sluice, from userid 65534)\n\tid 1K1CCC0\n\tfor <x@remote.example>; date\n\nbody\n\n",
                Some("1K1CCC0"),
            ),
            ("", None),
            ("Received: by bench (spool-bench) with ESMTP id 1K1DDD0;\n", None),
        ];
        let dir = tempfile::tempdir().unwrap();
        for (n, (message, want)) in cases.iter().enumerate() {
            let path = dir.path().join(n.to_string());
            std::fs::write(&path, format!("{sink}{message}")).unwrap();
            let got = Dump::read(path);
            assert_eq!(
                got.as_ref().map(|d| d.queue_id.as_str()),
                *want,
                "{message}"
            );
            if let Some(d) = got {
                assert_eq!(d.rcpts, ["x@remote.example", "z@remote.example"]);
            }
        }
        assert!(Dump::read(dir.path().join("none")).is_none());
    }
}
