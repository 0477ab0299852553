//! A dead primary MX with a live secondary, served by a real DNS server
//! (dnsmasq on a loopback port): the router finds both, the scheduler moves
//! to the secondary after the primary refuses, and the message is delivered
//! there. Needs root, to listen on port 25 of a loopback address.

use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};

use sluice_suite::{free_port, swaks, wait_for, Instance};

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn dead_primary_mx_falls_back_to_the_secondary() {
    if !sys::is_root() {
        eprintln!("skipped: needs root to listen on port 25");
        return;
    }
    // The secondary MX: Postfix's smtp-sink on 127.0.0.3:25.
    let dump = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dump.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let _sink = Kill(
        Command::new("smtp-sink")
            .args([
                "-u",
                "nobody",
                "-d",
                &format!("{}/%H%M%S.", dump.path().display()),
                "127.0.0.3:25",
                "16",
            ])
            .spawn()
            .expect("smtp-sink"),
    );
    wait_for(10, "smtp-sink on 127.0.0.3:25", || {
        std::net::TcpStream::connect("127.0.0.3:25").ok().map(drop)
    });
    // DNS: dest.test has MX 10 mx1 (127.0.0.2, nothing listens) and MX 20 mx2.
    let port = loop {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = u.local_addr().unwrap().port();
        if TcpListener::bind(("127.0.0.1", p)).is_ok() {
            break p;
        }
    };
    let _dns = Kill(
        Command::new("dnsmasq")
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
                "--user=root",
            ])
            .arg(format!("--port={port}"))
            .args([
                "--mx-host=dest.test,mx1.dest.test,10",
                "--mx-host=dest.test,mx2.dest.test,20",
                "--host-record=mx1.dest.test,127.0.0.2",
                "--host-record=mx2.dest.test,127.0.0.3",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsmasq is installed by scripts/test"),
    );
    let smtpd = free_port();
    let cf = format!(
        "127.0.0.1:{smtpd} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nsmtpd_reject_unlisted_recipient = no\ndns_servers = 127.0.0.1:{port}\n\
         inet_protocols = ipv4\nminimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n"
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(smtpd);
    // dnsmasq may still be starting; the router retries, and so does qmgr.
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{smtpd}"),
        "--from",
        "a@example.com",
        "--to",
        "user@dest.test",
    ]);
    assert_eq!(code, 0, "{out}");
    let id = out
        .lines()
        .find_map(|l| l.split("queued as ").nth(1))
        .unwrap()
        .trim()
        .to_string();
    let sent = inst.wait_log(
        30,
        &format!("{id}: to=<user@dest.test>, relay=mx2.dest.test[127.0.0.3]:25"),
    );
    assert!(sent.contains("status=sent"), "{sent}");
    assert!(
        inst.log()
            .contains("connect to mx1.dest.test[127.0.0.2]:25"),
        "the primary was tried first:\n{}",
        inst.log()
    );
    wait_for(10, "the dump at the secondary", || {
        std::fs::read_dir(dump.path()).ok()?.next().map(drop)
    });
    inst.stop();
}
