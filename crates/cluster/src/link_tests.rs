//! The link against a real TLS server on loopback, with certificates made
//! by openssl(1) (installed by scripts/test; a missing one fails the test).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};

use super::{Conn, Target};
use crate::client::{Client, ClientConfig, Link};
use crate::proto::{self, ToCoord, ToInstance};

fn openssl(args: &[&str], dir: &Path) {
    let st = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("openssl(1) is needed by this test; scripts/test installs it");
    assert!(st.success(), "openssl {args:?}");
}

/// A CA and, signed by it, `clusterd` (for serving) and `mx1` (for
/// client authentication), both with 127.0.0.1 as subjectAltName.
fn pki(dir: &Path) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend(["-nodes", "-days", "2", "-subj", "/CN=Test CA"]);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(&ca, dir);
    for n in ["clusterd", "mx1"] {
        let (subj, key, csr, ext, pem) = (
            format!("/CN={n}"),
            format!("{n}.key"),
            format!("{n}.csr"),
            format!("{n}.ext"),
            format!("{n}.pem"),
        );
        let mut req = vec!["req", "-new"];
        req.extend(ec);
        req.extend(["-nodes", "-subj", &subj, "-keyout", &key, "-out", &csr]);
        openssl(&req, dir);
        std::fs::write(
            dir.join(&ext),
            format!(
                "subjectAltName=DNS:{n},IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
                 keyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
            ),
        )
        .unwrap();
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &ext,
                "-out",
                &pem,
            ],
            dir,
        );
    }
}

/// A clusterd that, on each of `conns` connections, reads the hello,
/// welcomes the instance and closes the connection when told to.
fn clusterd(
    dir: &Path,
    conns: usize,
) -> (
    std::net::SocketAddr,
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (close, told) = std::sync::mpsc::channel::<()>();
    let cfg = tls::mutual_server_config(
        &dir.join("clusterd.pem"),
        &dir.join("clusterd.key"),
        &dir.join("ca.pem"),
    )
    .unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        for _ in 0..conns {
            let (sock, _) = l.accept().unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let conn = rustls::ServerConnection::new(cfg.clone()).unwrap();
            let mut s = rustls::StreamOwned::new(conn, sock);
            let mut dec = proto::decoder();
            let hello = loop {
                if let Some(m) = dec.decode::<ToCoord>().unwrap() {
                    break m;
                }
                let mut buf = [0; 4096];
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "the instance closed before its hello");
                dec.push(&buf[..n]);
            };
            assert!(
                matches!(&hello, ToCoord::Hello { name, .. } if name == "mx1"),
                "{hello:?}"
            );
            let welcome = ToInstance::Welcome {
                version: proto::VERSION,
                instances: 2,
            };
            s.write_all(&proto::encode(&welcome)).unwrap();
            s.flush().unwrap();
            told.recv().unwrap();
            s.conn.send_close_notify();
            s.flush().unwrap();
            let _ = s.sock.shutdown(std::net::Shutdown::Write);
        }
    });
    (addr, close, t)
}

fn target(dir: &Path, addr: std::net::SocketAddr) -> Target {
    Target {
        addr,
        cert: dir.join("mx1.pem"),
        key: dir.join("mx1.key"),
        ca: dir.join("ca.pem"),
        server_name: "127.0.0.1".into(),
    }
}

/// Drives the link until the client's link state satisfies `done`; `ms`
/// is the client's clock, advanced by the real time spent.
fn drive(
    poll: &mut Poll,
    conn: &mut Conn,
    client: &mut Client,
    ms: &mut u64,
    done: impl Fn(Link) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut events = Events::with_capacity(8);
    let registry = poll.registry().try_clone().unwrap();
    while !done(client.link()) {
        assert!(
            Instant::now() < deadline,
            "link stuck at {:?}",
            client.link()
        );
        poll.poll(&mut events, Some(Duration::from_millis(50)))
            .unwrap();
        *ms += 50;
        for e in events.iter() {
            assert!(conn.owns(e.token()));
            conn.ready(client, *ms, &registry, e.is_readable(), e.is_read_closed());
        }
        while let Some(m) = client.poll_transmit() {
            conn.send(client, *ms, &registry, &proto::encode(&m));
        }
    }
}

#[test]
fn the_link_says_hello_is_welcomed_and_is_made_again_after_clusterds_close() {
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let (addr, close, server) = clusterd(dir.path(), 2);
    let mut conn = Conn::new(&target(dir.path(), addr)).unwrap();
    assert_eq!(conn.addr(), addr);
    let mut client = Client::new(ClientConfig::new("mx1", 7));
    let mut poll = Poll::new().unwrap();
    let registry = poll.registry().try_clone().unwrap();
    let mut ms = 0;
    conn.timeout(&mut client, ms, &registry, || Token(1));
    assert!(conn.is_open() && conn.owns(Token(1)));
    assert!(matches!(client.link(), Link::Connecting { .. }));
    drive(&mut poll, &mut conn, &mut client, &mut ms, |l| {
        l == Link::Linked
    });
    assert_eq!(client.instances(), 2);
    close.send(()).unwrap();
    // clusterd closes: the link is down until the client's back-off.
    drive(&mut poll, &mut conn, &mut client, &mut ms, |l| {
        matches!(l, Link::Down { .. })
    });
    assert!(!conn.is_open() && !conn.owns(Token(1)));
    let Link::Down { retry_at } = client.link() else {
        unreachable!()
    };
    conn.timeout(&mut client, retry_at.saturating_sub(1), &registry, || {
        Token(2)
    });
    assert!(!conn.is_open(), "connected again before the back-off ended");
    ms = retry_at;
    conn.timeout(&mut client, ms, &registry, || Token(2));
    assert!(conn.owns(Token(2)));
    drive(&mut poll, &mut conn, &mut client, &mut ms, |l| {
        l == Link::Linked
    });
    close.send(()).unwrap();
    conn.close(&registry);
    server.join().unwrap();
}

#[test]
fn a_clusterd_whose_certificate_names_another_host_is_a_loss() {
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let cfg = tls::mutual_server_config(
        &dir.path().join("clusterd.pem"),
        &dir.path().join("clusterd.key"),
        &dir.path().join("ca.pem"),
    )
    .unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (sock, _) = l.accept().unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let conn = rustls::ServerConnection::new(cfg).unwrap();
        let mut s = rustls::StreamOwned::new(conn, sock);
        // The instance refuses the certificate: the handshake fails here.
        assert!(s.read(&mut [0; 64]).is_err());
    });
    let mut t = target(dir.path(), addr);
    t.server_name = "elsewhere.example".into();
    let mut conn = Conn::new(&t).unwrap();
    let mut client = Client::new(ClientConfig::new("mx1", 7));
    let mut poll = Poll::new().unwrap();
    let registry = poll.registry().try_clone().unwrap();
    let mut ms = 0;
    conn.timeout(&mut client, ms, &registry, || Token(1));
    drive(&mut poll, &mut conn, &mut client, &mut ms, |l| {
        matches!(l, Link::Down { .. })
    });
    assert!(!conn.is_open());
    assert!(!client.should_connect(ms), "no back-off after the loss");
    server.join().unwrap();
}

#[test]
fn bad_files_and_names_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let addr = "127.0.0.1:1".parse().unwrap();
    let mut t = target(dir.path(), addr);
    t.ca = dir.path().join("absent.pem");
    let e = Conn::new(&t).err().expect("a missing CA file");
    assert!(e.contains("absent.pem"), "{e}");
    let mut t = target(dir.path(), addr);
    t.server_name = "not a name".into();
    let e = Conn::new(&t).err().expect("a bad name");
    assert_eq!(e, "cluster_tls_server_name = not a name: not a host name");
}
