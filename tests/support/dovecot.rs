//! A private Dovecot (Debian's `dovecot-core`) that serves only
//! authentication: its own base directory, an auth socket for smtpd and a
//! `passwd-file` of test users, started in the foreground and killed when
//! dropped. No protocol (IMAP, POP3) is served and no port is opened.
//! Dovecot's own penalty for an address that keeps failing (up to 15 s a
//! login) is off, its socket closed to the auth process: the tests fail
//! logins on purpose from 127.0.0.1 and set `auth_failure_delay` themselves.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::wait_for;

/// The Dovecot binary `scripts/test` installs.
pub const DOVECOT: &str = "/usr/sbin/dovecot";

/// A running Dovecot.
pub struct Dovecot {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// The auth socket for smtpd (`smtpd_sasl_path`).
    pub socket: PathBuf,
}

impl Dovecot {
    /// Starts Dovecot with `users` as (name, password) and Dovecot's
    /// `auth_failure_delay` (it delays every failed login by it).
    pub fn start(users: &[(&str, &str)], failure_delay_secs: u32) -> Dovecot {
        assert!(
            Path::new(DOVECOT).exists(),
            "{DOVECOT} is missing: scripts/test installs dovecot-core (apt-get install dovecot-core)"
        );
        let dir = tempfile::Builder::new()
            .prefix("sluice-dovecot")
            .tempdir()
            .unwrap();
        let d = dir.path();
        // smtpd runs as the instance's user: it must reach the socket.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let passwd: String = users
            .iter()
            .map(|(u, p)| format!("{u}:{{PLAIN}}{p}\n"))
            .collect();
        std::fs::write(d.join("users"), passwd).unwrap();
        // As root, Dovecot's own unprivileged users (made by the package);
        // otherwise everything runs as we are.
        let (internal, login) = if sys::is_root() {
            ("dovecot".to_string(), "dovenull".to_string())
        } else {
            let (uid, _) = sys::current_ids();
            let me = sys::privilege::lookup_uid(uid).unwrap().unwrap().name;
            (me.clone(), me)
        };
        let socket = d.join("auth-sluice");
        let conf = format!(
            "base_dir = {d}/run\n\
             state_dir = {d}/state\n\
             log_path = {d}/dovecot.log\n\
             protocols = none\n\
             listen = 127.0.0.1\n\
             ssl = no\n\
             default_internal_user = {internal}\n\
             default_login_user = {login}\n\
             auth_mechanisms = plain login\n\
             disable_plaintext_auth = no\n\
             auth_failure_delay = {failure_delay_secs}s\n\
             auth_verbose = yes\n\
             passdb {{\n  driver = passwd-file\n  args = scheme=PLAIN username_format=%u {d}/users\n}}\n\
             userdb {{\n  driver = static\n  args = uid=65534 gid=65534 home={d}\n}}\n\
             service auth {{\n  unix_listener {socket} {{\n    mode = 0666\n  }}\n}}\n\
             service anvil {{\n  unix_listener anvil-auth-penalty {{\n    mode = 0\n  }}\n}}\n",
            d = d.display(),
            socket = socket.display(),
        );
        std::fs::write(d.join("dovecot.conf"), conf).unwrap();
        let mut dovecot = Dovecot {
            child: None,
            dir,
            socket,
        };
        dovecot.run();
        dovecot
    }

    /// Starts (again) the process and waits for its socket.
    pub fn run(&mut self) {
        assert!(self.child.is_none(), "dovecot is running");
        let _ = std::fs::remove_file(&self.socket);
        use std::os::unix::process::CommandExt;
        // Its own process group: stopping it takes its auth processes,
        // which would otherwise serve open connections a while longer.
        let child = Command::new(DOVECOT)
            .process_group(0)
            .arg("-F")
            .arg("-c")
            .arg(self.dir.path().join("dovecot.conf"))
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start dovecot");
        self.child = Some(child);
        let sock = self.socket.clone();
        wait_for(20, "dovecot's auth socket", || {
            std::os::unix::net::UnixStream::connect(&sock)
                .ok()
                .map(drop)
        });
    }

    /// Stops the process (a Dovecot that is down).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let group = -(c.id() as i32);
            let _ = sys::process::signal(group, 9);
            let _ = c.wait();
            wait_for(20, "dovecot's processes to exit", || {
                sys::process::signal(group, 0).is_err().then_some(())
            });
        }
        let sock = self.socket.clone();
        wait_for(20, "dovecot's auth socket to close", || {
            std::os::unix::net::UnixStream::connect(&sock)
                .is_err()
                .then_some(())
        });
    }

    /// Stops (SIGSTOP) every Dovecot process: connections are still
    /// accepted by the kernel, and nothing is answered.
    pub fn pause(&self) {
        self.signal_group(19);
    }

    /// Lets a paused Dovecot go on (SIGCONT).
    pub fn resume(&self) {
        self.signal_group(18);
    }

    fn signal_group(&self, sig: i32) {
        let c = self.child.as_ref().expect("dovecot is running");
        sys::process::signal(-(c.id() as i32), sig).expect("signal dovecot's process group");
    }

    /// Dovecot's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dovecot.log")).unwrap_or_default()
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- dovecot's log ---\n{}", self.log());
        }
        self.stop();
    }
}
