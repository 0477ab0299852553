//! A real TLS handshake over loopback between the server and client sides of
//! `Stream`, with a certificate made by openssl(1), and the errors a
//! postmaster sees for bad certificate files.

use std::path::Path;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};

fn make_cert(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let st = std::process::Command::new("openssl")
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
            "/CN=mx.test",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl(1) is needed by this test; scripts/test installs it");
    assert!(st.success());
    (cert, key)
}

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok((s, _)) = l.accept() {
            return (s, c);
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn server_and_client_exchange_data_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = make_cert(dir.path());
    let scfg = tls::load_server_config(&cert, &key).unwrap();
    let (s, c) = pair();
    let mut server = tls::Stream::plain(s);
    let mut client = tls::Stream::plain(c);
    server.start_server_tls(scfg).unwrap();
    client
        .start_client_tls(
            tls::insecure_client_config(),
            tls::server_name("mx.test").unwrap(),
        )
        .unwrap();
    client.write(b"EHLO client\r\n").unwrap();
    let mut sbuf = Vec::new();
    let mut cbuf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut answered = false;
    while Instant::now() < deadline {
        client.flush().unwrap();
        server.read(&mut sbuf, 1 << 16).unwrap();
        if sbuf == b"EHLO client\r\n" && !answered {
            server.write(b"250 hello\r\n").unwrap();
            answered = true;
        }
        server.flush().unwrap();
        client.read(&mut cbuf, 1 << 16).unwrap();
        if cbuf == b"250 hello\r\n" {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(cbuf, b"250 hello\r\n");
    let info = server.tls_info().expect("handshake done");
    assert!(info.version.starts_with("TLSv1."), "{info:?}");
    assert!(!info.cipher.is_empty());
}

#[test]
fn read_respects_the_callers_bound() {
    let (s, c) = pair();
    let mut server = tls::Stream::plain(s);
    let mut client = tls::Stream::plain(c);
    client.write(&vec![b'x'; 100_000]).unwrap();
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while buf.len() < 1000 && Instant::now() < deadline {
        client.flush().unwrap();
        server.read(&mut buf, 1000).unwrap();
    }
    assert_eq!(buf.len(), 1000, "never more than the limit");
}

#[test]
fn bad_files_are_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let e = tls::load_server_config(&missing, &missing)
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.pem"), "{e}");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let e = tls::load_server_config(&junk, &junk)
        .unwrap_err()
        .to_string();
    assert!(e.contains("junk.pem"), "{e}");
    let (cert, _) = make_cert(dir.path());
    let e = tls::load_server_config(&cert, &junk)
        .unwrap_err()
        .to_string();
    assert!(e.contains("junk.pem"), "{e}");
}
