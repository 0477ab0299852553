//! A throw-away Postfix instance (Debian's) as a receiving MTA on a
//! loopback port: it accepts mail into its hold queue, so `postqueue -j`
//! and `postcat` show what Sluice gave it. Needs root (Postfix's master
//! runs as root) and modifies /etc/postfix/main.cf only to list the
//! instance's directory in alternate_config_directories, as Postfix
//! requires for `postfix -c`; dropping the handle stops the instance and
//! removes that line again.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::wait_for;

/// A running Postfix instance.
pub struct Postfix {
    /// Its configuration directory (for `postqueue -c`, `postcat -c`).
    pub etc: PathBuf,
    /// Its mail log.
    pub maillog: PathBuf,
    /// The loopback port its smtpd listens on.
    pub port: u16,
}

/// How the instance is set up beyond the defaults.
#[derive(Default)]
pub struct PostfixOptions {
    /// STARTTLS with this certificate and key (PEM).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// `message_size_limit`, when not Postfix's default (10240000).
    pub message_size_limit: Option<u64>,
    /// More main.cf lines, after the others (a later line wins in Postfix).
    pub main_extra: String,
}

impl Drop for Postfix {
    fn drop(&mut self) {
        let _ = Command::new("postfix")
            .arg("-c")
            .arg(&self.etc)
            .arg("stop")
            .output();
        // Leave /etc/postfix/main.cf as it was.
        let main = Path::new("/etc/postfix/main.cf");
        if let Ok(text) = std::fs::read_to_string(main) {
            let dir = self.etc.display().to_string();
            let cleaned = text
                .replace(&format!(", {dir}"), "")
                .replace(&format!("alternate_config_directories = {dir}\n"), "");
            let _ = std::fs::write(main, cleaned);
        }
    }
}

fn allow_config_dir(etc: &Path) {
    let main = Path::new("/etc/postfix/main.cf");
    let text = std::fs::read_to_string(main).unwrap_or_default();
    let dir = etc.display().to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("alternate_config_directories"));
    let new = match line {
        Some(l) if l.contains(&dir) => return,
        Some(l) => text.replace(l, &format!("{l}, {dir}")),
        None => format!("{text}\nalternate_config_directories = {dir}\n"),
    };
    std::fs::write(main, new).unwrap();
}

impl Postfix {
    /// Starts Postfix's smtpd on 127.0.0.1:`port` with its files under
    /// `root`, holding every message it accepts. Panics, naming what is
    /// missing, when it cannot (not root, Postfix not installed).
    pub fn start(root: &Path, port: u16, opts: &PostfixOptions) -> Postfix {
        assert!(
            sys::is_root(),
            "a Postfix instance needs root (its master runs as root)"
        );
        assert!(
            Command::new("postfix").arg("-h").output().is_ok(),
            "postfix is not installed (scripts/test installs it)"
        );
        let etc = root.join("pf-etc");
        let data = root.join("pf-data");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let postfix = sys::privilege::lookup_user("postfix")
            .unwrap()
            .expect("postfix user");
        std::os::unix::fs::chown(&data, Some(postfix.uid), Some(postfix.gid)).unwrap();
        let spool = root.join("pf-spool");
        std::fs::create_dir_all(&spool).unwrap();
        // Postfix's daemons (user postfix) must reach their directories.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let maillog = root.join("pf-maillog");
        let mut main = format!(
            "compatibility_level = 3.6\nqueue_directory = {spool}\ndata_directory = {data}\nmail_owner = postfix\n\
             setgid_group = postdrop\nmyhostname = pf.test.example\nmydestination = dest.test.example\n\
             local_recipient_maps =\nalias_maps =\nalias_database =\ninet_interfaces = 127.0.0.1\ninet_protocols = ipv4\n\
             mynetworks = 127.0.0.0/8\nsmtpd_end_of_data_restrictions = check_client_access static:HOLD\n\
             maillog_file = {log}\nmaillog_file_prefixes = {root}\n",
            spool = spool.display(),
            data = data.display(),
            log = maillog.display(),
            root = root.display()
        );
        if let Some((cert, key)) = &opts.tls {
            main.push_str(&format!(
                "smtpd_tls_security_level = may\nsmtpd_tls_cert_file = {}\nsmtpd_tls_key_file = {}\n",
                cert.display(),
                key.display()
            ));
        }
        if let Some(limit) = opts.message_size_limit {
            main.push_str(&format!("message_size_limit = {limit}\n"));
        }
        main.push_str(&opts.main_extra);
        std::fs::write(etc.join("main.cf"), main).unwrap();
        std::fs::write(
            etc.join("master.cf"),
            format!(
                "127.0.0.1:{port} inet n - n - - smtpd\ncleanup unix n - n - 0 cleanup\nqmgr unix n - n 300 1 qmgr\n\
                 rewrite unix - - n - - trivial-rewrite\nbounce unix - - n - 0 bounce\ndefer unix - - n - 0 bounce\n\
                 trace unix - - n - 0 bounce\nshowq unix n - n - - showq\nanvil unix - - n - 1 anvil\n\
                 proxymap unix - - n - - proxymap\npostlog unix-dgram n - n - 1 postlogd\n\
                 tlsmgr unix - - n 1000? 1 tlsmgr\n"
            ),
        )
        .unwrap();
        allow_config_dir(&etc);
        let out = Command::new("postfix")
            .arg("-c")
            .arg(&etc)
            .arg("start")
            .output()
            .unwrap();
        let pf = Postfix { etc, maillog, port };
        assert!(
            out.status.success(),
            "postfix start: {}{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&pf.maillog).unwrap_or_default()
        );
        wait_for(20, "Postfix's smtpd", || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(drop)
        });
        pf
    }

    /// `postqueue -j`: one JSON object per queued message.
    pub fn queue_json(&self) -> String {
        let out = Command::new("postqueue")
            .arg("-c")
            .arg(&self.etc)
            .arg("-j")
            .output()
            .expect("postqueue");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The queue id of the held message for `rcpt`, once it is there.
    pub fn wait_queued(&self, rcpt: &str) -> String {
        wait_for(30, &format!("{rcpt}'s message in Postfix's queue"), || {
            self.queue_json()
                .lines()
                .find(|l| l.contains(rcpt))
                .and_then(|l| l.split("\"queue_id\":").nth(1))
                .and_then(|r| r.trim_start().split('"').nth(1))
                .map(str::to_string)
        })
    }

    /// `postcat` of a queued message with `flags` (e.g. `-bq`: the body).
    pub fn postcat(&self, flags: &str, qid: &str) -> Vec<u8> {
        let out = Command::new("postcat")
            .arg("-c")
            .arg(&self.etc)
            .args([flags, qid])
            .output()
            .expect("postcat");
        assert!(
            out.status.success(),
            "postcat: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Postfix's mail log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.maillog).unwrap_or_default()
    }
}
