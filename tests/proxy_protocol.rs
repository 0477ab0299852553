//! smtpd behind a real HAProxy (Debian's) with `send-proxy` (v1) and
//! `send-proxy-v2`: the client address the header carries is the one
//! logged, checked against mynetworks, counted by anvil and written in
//! Received:. Clients connect from other loopback addresses (127.0.0.2,
//! 127.0.0.3) than HAProxy's own (127.0.0.1), so the two cannot be taken
//! for one another. A connection without a header, with a malformed one,
//! or silent past smtpd_upstream_proxy_timeout is dropped with a log line.
//! Dovecot, asked about an AUTH, hears of the client of the header too.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sluice_suite::dovecot::Dovecot;
use sluice_suite::haproxy::HaProxy;
use sluice_suite::{free_port, receive_master_cf, swaks, wait_for, Instance, RECEIVE_MAIN_CF};

/// HAProxy with two frontends to smtpd on `backend`: (v1 port, v2 port).
fn haproxy(dir: &Path, backend: u16) -> (HaProxy, u16, u16) {
    let (v1, v2) = (free_port(), free_port());
    let sections = format!(
        "frontend v1\n  bind 127.0.0.1:{v1}\n  default_backend smtpd_v1\n\
         frontend v2\n  bind 127.0.0.1:{v2}\n  default_backend smtpd_v2\n\
         backend smtpd_v1\n  server s 127.0.0.1:{backend} send-proxy\n\
         backend smtpd_v2\n  server s 127.0.0.1:{backend} send-proxy-v2\n"
    );
    (HaProxy::start(dir, "haproxy", &sections, &[v1, v2]), v1, v2)
}

fn instance(extra: &str) -> (Instance, u16) {
    let port = free_port();
    let main = format!(
        "{RECEIVE_MAIN_CF}smtpd_upstream_proxy_protocol = haproxy\n\
         smtpd_upstream_proxy_timeout = 2s\nmynetworks = 127.0.0.2/32\n{extra}"
    );
    let mut inst = Instance::new(&receive_master_cf(port, ""), &main);
    inst.start();
    inst.wait_port(port);
    (inst, port)
}

#[test]
fn the_client_address_comes_from_the_proxy_header() {
    let dir = tempfile::tempdir().unwrap();
    let (inst, port) = instance(
        "smtpd_client_connection_count_limit = 1\nsmtpd_client_event_limit_exceptions =\n",
    );
    // The frontends' probes above came without a header: each dropped.
    let (_haproxy, v1, v2) = haproxy(dir.path(), port);
    for (fe, version) in [(v1, "v1"), (v2, "v2")] {
        let server = format!("127.0.0.1:{fe}");
        let (code, t) = swaks(&[
            "--server",
            &server,
            "--local-interface",
            "127.0.0.2",
            "--from",
            &format!("{version}@test.example"),
            "--to",
            "far@remote.example",
        ]);
        assert_eq!(code, 0, "{version} from mynetworks: {t}");
        let (code, t) = swaks(&[
            "--server",
            &server,
            "--local-interface",
            "127.0.0.3",
            "--to",
            "far@remote.example",
        ]);
        assert_ne!(code, 0, "{version}: {t}");
        assert!(
            t.contains("554 5.7.1 <far@remote.example>: Relay access denied"),
            "{version}: {t}"
        );
    }
    let log = inst.log();
    assert!(log.contains("connect from unknown[127.0.0.2]"), "{log}");
    assert!(
        log.contains("NOQUEUE: reject: RCPT from unknown[127.0.0.3]: 554 5.7.1"),
        "{log}"
    );
    // Both messages name the client in Received:, not HAProxy.
    let ids = inst.queued_ids();
    assert_eq!(ids.len(), 2, "{ids:?}");
    for id in ids {
        let out = inst.sluice(&["queue", "show", &id]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("(unknown [127.0.0.2])"), "{text}");
    }
    // anvil counts the client of the header: a second connection from
    // 127.0.0.3 while one is open is over the limit of 1; 127.0.0.2 is not.
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import socket, sys\n\
             port = int(sys.argv[1])\n\
             def greet(src):\n\
             \x20   s = socket.create_connection(('127.0.0.1', port), timeout=30, source_address=(src, 0))\n\
             \x20   return s, s.makefile('rb').readline().decode().strip()\n\
             a, ga = greet('127.0.0.3')\n\
             b, gb = greet('127.0.0.3')\n\
             c, gc = greet('127.0.0.2')\n\
             print(ga[:3], gb, gc[:3], sep='\\n')\n",
        )
        .arg(v2.to_string())
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "220",
            "421 4.7.0 Error: too many connections from 127.0.0.3",
            "220"
        ],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    inst.wait_log(
        10,
        "Connection concurrency limit exceeded: 2 from unknown[127.0.0.3]",
    );
}

/// Connects straight to smtpd (no HAProxy), sends `bytes`, and reads
/// until smtpd closes; what it answered.
fn straight(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

#[test]
fn a_missing_or_malformed_header_drops_the_connection() {
    let (inst, port) = instance("");
    // SMTP instead of a header.
    assert_eq!(straight(port, b"EHLO client\r\n"), b"");
    inst.wait_log(
        10,
        "haproxy read: no PROXY protocol header: connection from [127.0.0.1] dropped",
    );
    // A v1 line that goes on past 107 bytes.
    let long = format!("PROXY TCP4 {}", "1".repeat(200));
    assert_eq!(straight(port, long.as_bytes()), b"");
    inst.wait_log(10, "PROXY v1 header longer than 107 bytes");
    // Malformed v1 and v2 headers.
    assert_eq!(
        straight(port, b"PROXY TCP4 192.0.2.7 nowhere 1 25\r\n"),
        b""
    );
    inst.wait_log(
        10,
        "malformed PROXY v1 header \"PROXY TCP4 192.0.2.7 nowhere 1 25\"",
    );
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v2.extend_from_slice(&[0x21, 0x11, 0x00, 0x04, 1, 2, 3, 4]);
    assert_eq!(straight(port, &v2), b"");
    inst.wait_log(
        10,
        "malformed PROXY v2 header: too short for IPv4 addresses",
    );
    // Nothing at all: dropped once smtpd_upstream_proxy_timeout (2s) is over.
    assert_eq!(straight(port, b""), b"");
    inst.wait_log(10, "time limit exceeded (smtpd_upstream_proxy_timeout)");
    // None of them was greeted or counted as a session.
    assert!(!inst.log().contains("connect from"), "{}", inst.log());
    // A good header with SMTP right behind it in the same segment.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"PROXY TCP6 2001:db8::7 2001:db8::1 40000 25\r\nEHLO early\r\nQUIT\r\n")
        .unwrap();
    let mut got = String::new();
    let _ = s.read_to_string(&mut got);
    assert!(got.starts_with("220 "), "{got}");
    assert!(got.contains("250-mx.test.example"), "{got}");
    assert!(got.ends_with("221 2.0.0 Bye\r\n"), "{got}");
    inst.wait_log(10, "connect from unknown[2001:db8::7]");
}

#[test]
fn dovecot_hears_of_the_client_of_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let dovecot = Dovecot::start(&[("alice", "secret")], 0);
    let (inst, port) = instance(&format!(
        "smtpd_sasl_auth_enable = yes\nsmtpd_tls_auth_only = no\nsmtpd_sasl_path = {}\n",
        dovecot.socket.display()
    ));
    let (_haproxy, v1, _v2) = haproxy(dir.path(), port);
    let server = format!("127.0.0.1:{v1}");
    let (code, t) = swaks(&[
        "--server",
        &server,
        "--local-interface",
        "127.0.0.3",
        "--auth",
        "PLAIN",
        "--auth-user",
        "alice",
        "--auth-password",
        "wrong",
        "--to",
        "far@remote.example",
    ]);
    assert_ne!(code, 0, "{t}");
    assert!(t.contains("535 5.7.8"), "{t}");
    inst.wait_log(
        10,
        "warning: unknown[127.0.0.3]: SASL PLAIN authentication failed",
    );
    wait_for(10, "Dovecot's log of the failure", || {
        dovecot
            .log()
            .contains("passwd-file(alice,127.0.0.3): Password mismatch")
            .then_some(())
    });
    // The right password: the session is the user's, logged as such.
    let (code, t) = swaks(&[
        "--server",
        &server,
        "--local-interface",
        "127.0.0.3",
        "--auth",
        "PLAIN",
        "--auth-user",
        "alice",
        "--auth-password",
        "secret",
        "--to",
        "someone@mx.test.example",
    ]);
    assert_eq!(code, 0, "{t}");
    inst.wait_log(10, "sasl_method=PLAIN, sasl_username=alice");
}
