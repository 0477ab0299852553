//! Interoperation with a real Postfix (Debian's) as the receiving MTA:
//! Sluice relays to a throw-away Postfix instance on a loopback port,
//! which accepts the mail into its hold queue; `postqueue -j` then shows
//! the message with the envelope Sluice gave it; a body with dot lines and
//! 8-bit text goes with BDAT (Postfix offers CHUNKING) and `postcat` shows
//! it unchanged. Needs root (Postfix's master runs as root) and modifies
//! /etc/postfix/main.cf only to list the instance's directory in
//! alternate_config_directories, as Postfix requires for `postfix -c`.

use std::path::Path;
use std::process::Command;

use sluice_suite::{free_port, swaks, wait_for, Instance};

struct Postfix {
    etc: std::path::PathBuf,
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

fn start_postfix(root: &Path, port: u16) -> Option<Postfix> {
    if Command::new("postfix").arg("-h").output().is_err() {
        eprintln!("skipped: postfix is not installed");
        return None;
    }
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
    std::fs::write(
        etc.join("main.cf"),
        format!(
            "compatibility_level = 3.6\nqueue_directory = {spool}\ndata_directory = {data}\nmail_owner = postfix\n\
             setgid_group = postdrop\nmyhostname = pf.test.example\nmydestination = dest.test.example\n\
             local_recipient_maps =\nalias_maps =\nalias_database =\ninet_interfaces = 127.0.0.1\ninet_protocols = ipv4\n\
             mynetworks = 127.0.0.0/8\nsmtpd_end_of_data_restrictions = check_client_access static:HOLD\n\
             maillog_file = {root}/pf-maillog\nmaillog_file_prefixes = {root}\n",
            spool = spool.display(),
            data = data.display(),
            root = root.display()
        ),
    )
    .unwrap();
    std::fs::write(
        etc.join("master.cf"),
        format!(
            "127.0.0.1:{port} inet n - n - - smtpd\ncleanup unix n - n - 0 cleanup\nqmgr unix n - n 300 1 qmgr\n\
             rewrite unix - - n - - trivial-rewrite\nbounce unix - - n - 0 bounce\ndefer unix - - n - 0 bounce\n\
             trace unix - - n - 0 bounce\nshowq unix n - n - - showq\nanvil unix - - n - 1 anvil\n\
             proxymap unix - - n - - proxymap\npostlog unix-dgram n - n - 1 postlogd\n"
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
    assert!(
        out.status.success(),
        "postfix start: {}{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(root.join("pf-maillog")).unwrap_or_default()
    );
    let pf = Postfix { etc };
    wait_for(20, "Postfix's smtpd", || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .ok()
            .map(drop)
    });
    Some(pf)
}

#[test]
fn mail_relayed_to_a_real_postfix_arrives_there() {
    if !sys::is_root() {
        eprintln!("skipped: needs root to run a Postfix instance");
        return;
    }
    let pf_port = free_port();
    let tmp = tempfile::Builder::new()
        .prefix("sluice-pf")
        .tempdir()
        .unwrap();
    let Some(pf) = start_postfix(tmp.path(), pf_port) else {
        return;
    };
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{pf_port}\nsmtpd_reject_unlisted_recipient = no\n"
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@example.com",
        "--to",
        "bob@dest.test.example",
        "--header",
        "Subject: interop",
    ]);
    assert_eq!(code, 0, "{out}");
    let id = out
        .lines()
        .find_map(|l| l.split("queued as ").nth(1))
        .unwrap()
        .trim()
        .to_string();
    let sent = inst.wait_log(20, &format!("{id}: to=<bob@dest.test.example>"));
    assert!(
        sent.contains("status=sent") && sent.contains(&format!("[127.0.0.1]:{pf_port}")),
        "{sent}"
    );
    // Postfix has it, on hold, with Sluice's envelope.
    let json = wait_for(20, "the message in Postfix's queue", || {
        let out = Command::new("postqueue")
            .arg("-c")
            .arg(&pf.etc)
            .arg("-j")
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("bob@dest.test.example").then_some(text)
    });
    assert!(
        json.contains("\"sender\": \"alice@example.com\"")
            || json.contains("\"sender\":\"alice@example.com\""),
        "{json}"
    );
    assert!(
        json.contains("\"queue_name\": \"hold\"") || json.contains("\"queue_name\":\"hold\""),
        "{json}"
    );
    // Postfix's smtpd offers CHUNKING: a body with dot lines and 8-bit
    // text goes with BDAT, and Postfix stores it unchanged.
    let body = ".leading dot\r\n.\r\n..two\r\nmid.line\r\n\u{e9}t\u{e9}\r\nlast\r\n";
    let msg = format!("From: alice@example.com\r\nSubject: chunks\r\n\r\n{body}");
    let script = "import smtplib,sys\n\
                  s=smtplib.SMTP('127.0.0.1',int(sys.argv[1]))\n\
                  s.sendmail('alice@example.com',['carol@dest.test.example'],sys.stdin.buffer.read(),mail_options=['BODY=8BITMIME'])\n\
                  s.quit()\n";
    let mut child = Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(msg.as_bytes())
            .unwrap();
    }
    assert!(child.wait().unwrap().success());
    let sent = inst.wait_log(20, "to=<carol@dest.test.example>");
    assert!(sent.contains("status=sent"), "{sent}");
    let maillog = tmp.path().join("pf-maillog");
    // Postfix's smtpd counts the BDAT commands it took in its disconnect line.
    wait_for(20, "Postfix's smtpd to log BDAT", || {
        let log = std::fs::read_to_string(&maillog).ok()?;
        log.lines()
            .any(|l| l.contains("disconnect from") && l.contains("bdat="))
            .then_some(())
    });
    let qid = wait_for(20, "carol's message in Postfix's queue", || {
        let out = Command::new("postqueue")
            .arg("-c")
            .arg(&pf.etc)
            .arg("-j")
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.contains("carol@dest.test.example"))
            .and_then(|l| l.split("\"queue_id\":").nth(1))
            .and_then(|r| r.trim_start().split('"').nth(1))
            .map(str::to_string)
    });
    let out = Command::new("postcat")
        .arg("-c")
        .arg(&pf.etc)
        .args(["-bq", &qid])
        .output()
        .unwrap();
    // postcat -b starts at the empty line after the headers.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("\n{}", body.replace("\r\n", "\n")),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    inst.stop();
}
