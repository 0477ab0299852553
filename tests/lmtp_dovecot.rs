//! The lmtp agent against Dovecot's LMTP server (Debian's dovecot-lmtpd),
//! delivering to Maildirs: over a Unix-domain socket (`lmtp:unix:PATH`)
//! and over TCP (`lmtp:inet:127.0.0.1:PORT`), one message to several
//! users with a reply per recipient after DATA: delivered, over quota
//! (552 5.2.2 after DATA: bounced, the others delivered), unknown user
//! (550 5.1.1 at RCPT); a second message reuses the connection, and a
//! 2.5 MB one goes through the Unix socket whole. The
//! Maildirs then hold exactly the messages delivered.
//!
//! Needs root (Dovecot's LMTP delivers as the mail user), dovecot-core and
//! dovecot-lmtpd (scripts/test installs them); without them it fails
//! saying so.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command};

use sluice_suite::{free_port, queued_id, swaks, wait_for, Instance};

const DOVECOT: &str = "/usr/sbin/dovecot";
const LMTP: &str = "/usr/lib/dovecot/lmtp";

/// A private Dovecot serving LMTP only, killed (with its process group) when dropped.
struct DovecotLmtp {
    child: Child,
    dir: tempfile::TempDir,
}

impl DovecotLmtp {
    fn start(port: u16) -> DovecotLmtp {
        assert!(
            sys::is_root(),
            "Dovecot's LMTP delivers as the mail user: run the test as root"
        );
        for bin in [DOVECOT, LMTP] {
            assert!(
                Path::new(bin).exists(),
                "{bin} is missing: scripts/test installs dovecot-core and dovecot-lmtpd"
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("sluice-lmtp")
            .tempdir()
            .unwrap();
        let d = dir.path();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mail = d.join("mail");
        std::fs::create_dir(&mail).unwrap();
        std::os::unix::fs::chown(&mail, Some(65534), Some(65534)).unwrap();
        // user:password:uid:gid:gecos:home:shell:extra userdb fields.
        let users = format!(
            "alice::65534:65534::{m}/alice::\nbob::65534:65534::{m}/bob::\n\
             full::65534:65534::{m}/full::userdb_quota_rule=*:storage=1\n",
            m = mail.display()
        );
        std::fs::write(d.join("users"), users).unwrap();
        let conf = format!(
            "base_dir = {d}/run\n\
             state_dir = {d}/state\n\
             log_path = {d}/dovecot.log\n\
             protocols = lmtp\n\
             listen = 127.0.0.1\n\
             ssl = no\n\
             default_internal_user = dovecot\n\
             default_login_user = dovenull\n\
             auth_username_format = %Ln\n\
             mail_location = maildir:~/Maildir\n\
             mail_plugins = quota\n\
             plugin {{\n  quota = maildir:User quota\n  quota_rule = *:storage=1G\n}}\n\
             passdb {{\n  driver = passwd-file\n  args = {d}/users\n}}\n\
             userdb {{\n  driver = passwd-file\n  args = {d}/users\n}}\n\
             service lmtp {{\n  unix_listener {d}/lmtp {{\n    mode = 0666\n  }}\n\
             \x20 inet_listener lmtp {{\n    address = 127.0.0.1\n    port = {port}\n  }}\n}}\n\
             service anvil {{\n  unix_listener anvil-auth-penalty {{\n    mode = 0\n  }}\n}}\n",
            d = d.display(),
        );
        std::fs::write(d.join("dovecot.conf"), conf).unwrap();
        use std::os::unix::process::CommandExt;
        let child = Command::new(DOVECOT)
            .process_group(0)
            .arg("-F")
            .arg("-c")
            .arg(d.join("dovecot.conf"))
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start dovecot");
        let dv = DovecotLmtp { child, dir };
        let sock = dv.socket();
        wait_for(20, "dovecot's LMTP socket and port", || {
            (std::os::unix::net::UnixStream::connect(&sock).is_ok()
                && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())
            .then_some(())
        });
        dv
    }

    fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("lmtp")
    }

    /// Messages in a user's Maildir/new.
    fn delivered(&self, user: &str) -> Vec<String> {
        let new = self.dir.path().join("mail").join(user).join("Maildir/new");
        let Ok(rd) = std::fs::read_dir(new) else {
            return vec![];
        };
        rd.map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dovecot.log")).unwrap_or_default()
    }
}

impl Drop for DovecotLmtp {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- dovecot's log ---\n{}", self.log());
        }
        let _ = sys::process::signal(-(self.child.id() as i32), 9);
        let _ = self.child.wait();
    }
}

fn send(port: u16, to: &[&str], subject: &str) -> String {
    let mut args = vec![
        "--server".to_string(),
        format!("127.0.0.1:{port}"),
        "--from".into(),
        "<>".into(),
        "--header".into(),
        format!("Subject: {subject}"),
        // Over the 1 KiB quota of user full.
        "--body".into(),
        "quota filler line\n".repeat(120),
    ];
    args.push("--to".into());
    args.push(to.join(","));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out) = swaks(&refs);
    assert_eq!(code, 0, "{out}");
    queued_id(&out)
}

#[test]
fn lmtp_delivers_to_dovecot_maildirs_with_a_reply_per_recipient() {
    let lmtp_port = free_port();
    let dv = DovecotLmtp::start(lmtp_port);
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nlmtp unix - - n - - lmtp\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nsmtpd_reject_unlisted_recipient = no\n\
         lmtp_lhlo_name = lhlo.test.example\nsmtp_helo_name = helo.test.example\n\
         transport_maps = inline:{{ mailbox.test = lmtp:unix:{sock}, inet.test = lmtp:inet:127.0.0.1:{lmtp_port}, \
         gone.test = lmtp:unix:/nonexistent/lmtp }}\n",
        sock = dv.socket().display()
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);

    // A socket that is not there defers its mail; it is a host of its own,
    // so the other socket's mail is not held back by its retry.
    let gone = send(port, &["carol@gone.test"], "zeroth");
    let line = inst.wait_log(30, &format!("{gone}: to=<carol@gone.test>"));
    assert!(
        line.contains("status=deferred") && line.contains("mx.test.example[/nonexistent/lmtp]"),
        "{line}"
    );

    // One message, four recipients: two delivered, one over quota after
    // DATA, one unknown at RCPT.
    let id = send(
        port,
        &[
            "alice@mailbox.test",
            "full@mailbox.test",
            "nosuchuser@mailbox.test",
            "bob@mailbox.test",
        ],
        "first",
    );
    let relay = format!("relay=mx.test.example[{}]", dv.socket().display());
    for (rcpt, want) in [
        ("alice", "status=sent (250 2.0.0"),
        ("bob", "status=sent (250 2.0.0"),
        ("full", "status=bounced (host mx.test.example["),
        ("nosuchuser", "status=bounced (host mx.test.example["),
    ] {
        let line = inst.wait_log(30, &format!("{id}: to=<{rcpt}@mailbox.test>"));
        assert!(line.contains(want) && line.contains(&relay), "{line}");
    }
    let full = inst.wait_log(5, &format!("{id}: to=<full@mailbox.test>"));
    assert!(
        full.contains("552 5.2.2") && full.contains("(in reply to end of DATA command)"),
        "{full}"
    );
    let unknown = inst.wait_log(5, &format!("{id}: to=<nosuchuser@mailbox.test>"));
    assert!(
        unknown.contains("550 5.1.1") && unknown.contains("(in reply to RCPT TO command)"),
        "{unknown}"
    );

    // The next message for the socket goes over the same connection.
    let id2 = send(port, &["alice@mailbox.test"], "second");
    let line = inst.wait_log(30, &format!("{id2}: to=<alice@mailbox.test>"));
    assert!(
        line.contains("status=sent") && line.contains("conn_use=2"),
        "{line}"
    );

    // A message far larger than the Unix socket's buffer: the agent
    // writes it as Dovecot takes it (watching the socket for room only
    // while output waits), and Dovecot stores it whole.
    let lines = 60_000;
    let script = "import smtplib,sys\n\
                  n=int(sys.argv[2])\n\
                  msg=b'From: big@example.com\\r\\nSubject: big\\r\\n\\r\\n'+b''.join(b'%08d big line of the large message\\r\\n' % i for i in range(n))\n\
                  s=smtplib.SMTP('127.0.0.1',int(sys.argv[1]))\n\
                  s.mail('big@example.com'); s.rcpt('bob@mailbox.test')\n\
                  print(s.data(msg)[1].decode())\n\
                  s.quit()\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script, &port.to_string(), &lines.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let reply = String::from_utf8_lossy(&out.stdout).to_string();
    let big_id = reply.split("queued as ").nth(1).unwrap().trim().to_string();
    let line = inst.wait_log(30, &format!("{big_id}: to=<bob@mailbox.test>"));
    assert!(
        line.contains("status=sent") && line.contains(&relay),
        "{line}"
    );
    let big = wait_for(30, "the large message in bob's Maildir", || {
        dv.delivered("bob")
            .into_iter()
            .find(|m| m.contains("Subject: big"))
    });
    let body: Vec<&str> = big.lines().filter(|l| l.contains(" big line of")).collect();
    assert_eq!(body.len(), lines);
    assert!(body
        .iter()
        .enumerate()
        .all(|(i, l)| l.starts_with(&format!("{i:08} "))));

    // Over TCP.
    let id3 = send(port, &["bob@inet.test"], "third");
    let line = inst.wait_log(30, &format!("{id3}: to=<bob@inet.test>"));
    assert!(
        line.contains("status=sent (250 2.0.0")
            && line.contains(&format!("relay=127.0.0.1[127.0.0.1]:{lmtp_port}")),
        "{line}"
    );

    let alice = dv.delivered("alice");
    let bob = dv.delivered("bob");
    assert_eq!(alice.len(), 2, "alice's Maildir: {alice:?}");
    assert_eq!(bob.len(), 3, "bob's Maildir: {} messages", bob.len());
    assert!(dv.delivered("full").is_empty());
    assert!(alice.iter().any(|m| m.contains("Subject: first")));
    assert!(alice.iter().any(|m| m.contains("Subject: second")));
    assert!(bob.iter().any(|m| m.contains("Subject: third")));
    assert!(alice.iter().all(|m| m.contains("quota filler line")));
    // lmtp(8) reads lmtp_lhlo_name, not smtp_helo_name: Dovecot's
    // Received: header names what LHLO said.
    assert!(
        alice
            .iter()
            .chain(&bob)
            .all(|m| m.contains("Received: from lhlo.test.example")),
        "{alice:?}"
    );
}
