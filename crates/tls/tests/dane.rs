//! DANE matching (RFC 7672) against certificates made by openssl(1), with
//! the TLSA data computed by openssl too (so the digests are checked by an
//! independent implementation), and a handshake that a mismatch ends.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use tls::dane::{dane_client_config, dane_failure, verify_dane, TlsaRecord};

fn openssl(args: &[&str], dir: &Path, input: Option<&[u8]>) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("openssl(1) is needed by this test; scripts/test installs it");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.unwrap_or_default()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

struct Pki {
    _dir: tempfile::TempDir,
    dir: std::path::PathBuf,
    ee: CertificateDer<'static>,
    ca: CertificateDer<'static>,
}

/// A CA and a server certificate for mx.dane.test signed by it.
fn pki() -> Pki {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_path_buf();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut a = vec!["req", "-x509", "-nodes"];
    a.extend(ec);
    a.extend([
        "-days",
        "2",
        "-subj",
        "/CN=DANE test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    openssl(&a, &dir, None);
    let mut a = vec!["req", "-nodes"];
    a.extend(ec);
    a.extend([
        "-subj",
        "/CN=mx.dane.test",
        "-keyout",
        "ee.key",
        "-out",
        "ee.csr",
    ]);
    openssl(&a, &dir, None);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:mx.dane.test\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            "ee.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "7",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "ee.pem",
        ],
        &dir,
        None,
    );
    let chain = [
        std::fs::read(dir.join("ee.pem")).unwrap(),
        std::fs::read(dir.join("ca.pem")).unwrap(),
    ]
    .concat();
    std::fs::write(dir.join("chain.pem"), chain).unwrap();
    let ee = CertificateDer::from_pem_file(dir.join("ee.pem")).unwrap();
    let ca = CertificateDer::from_pem_file(dir.join("ca.pem")).unwrap();
    Pki {
        _dir: d,
        dir,
        ee,
        ca,
    }
}

impl Pki {
    /// TLSA data for `cert` ("ee" or "ca") by selector and matching type,
    /// as openssl computes it.
    fn data(&self, cert: &str, selector: u8, matching: u8) -> Vec<u8> {
        let pem = format!("{cert}.pem");
        let der = if selector == 0 {
            openssl(&["x509", "-in", &pem, "-outform", "DER"], &self.dir, None)
        } else {
            let key = openssl(&["x509", "-in", &pem, "-noout", "-pubkey"], &self.dir, None);
            openssl(
                &["pkey", "-pubin", "-outform", "DER"],
                &self.dir,
                Some(&key),
            )
        };
        match matching {
            0 => der,
            1 => openssl(&["dgst", "-sha256", "-binary"], &self.dir, Some(&der)),
            _ => openssl(&["dgst", "-sha512", "-binary"], &self.dir, Some(&der)),
        }
    }

    fn record(&self, usage: u8, cert: &str, selector: u8, matching: u8) -> TlsaRecord {
        TlsaRecord {
            usage,
            selector,
            matching,
            data: self.data(cert, selector, matching),
        }
    }
}

fn names() -> Vec<String> {
    vec!["mx.dane.test".into(), "dane.test".into()]
}

#[test]
fn dane_ee_and_dane_ta_match_as_rfc_7672_says() {
    let p = pki();
    let chain = [p.ee.clone(), p.ca.clone()];
    let now = UnixTime::now();
    for (sel, mt) in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)] {
        let r = p.record(3, "ee", sel, mt);
        assert!(r.usable());
        let ok = verify_dane(&chain[..1], &[r], &names(), now);
        assert!(
            ok.as_ref().is_ok_and(|m| m.contains("DANE-EE")),
            "3 {sel} {mt}: {ok:?}"
        );
        let r = p.record(2, "ca", sel, mt);
        let ok = verify_dane(&chain, &[r], &names(), now);
        assert!(
            ok.as_ref()
                .is_ok_and(|m| m.contains("DANE-TA") && m.contains("depth 1")),
            "2 {sel} {mt}: {ok:?}"
        );
    }
    // DANE-EE ignores dates; DANE-TA checks them (a century later the
    // two-day certificates have long expired).
    let later = UnixTime::since_unix_epoch(Duration::from_secs(4_102_444_800));
    assert!(verify_dane(&chain, &[p.record(3, "ee", 1, 1)], &names(), later).is_ok());
    let e = verify_dane(&chain, &[p.record(2, "ca", 1, 1)], &names(), later).unwrap_err();
    assert!(e.0.contains("certificate has expired"), "{e}");
}

#[test]
fn mismatches_and_unusable_records_do_not_verify() {
    let p = pki();
    let chain = [p.ee.clone(), p.ca.clone()];
    let now = UnixTime::now();
    let mut wrong = p.record(3, "ee", 1, 1);
    wrong.data[0] ^= 1;
    let e = verify_dane(&chain, &[wrong], &names(), now).unwrap_err();
    assert_eq!(e.0, "no TLSA record matched the certificate chain");
    // The CA's hash as DANE-EE: it is not the server's certificate.
    assert!(verify_dane(&chain, &[p.record(3, "ca", 1, 1)], &names(), now).is_err());
    // DANE-TA whose anchor the server did not send.
    assert!(verify_dane(&chain[..1], &[p.record(2, "ca", 0, 1)], &names(), now).is_err());
    // DANE-TA with a certificate not for the names asked.
    let e = verify_dane(
        &chain,
        &[p.record(2, "ca", 0, 1)],
        &["mx.other.test".into()],
        now,
    )
    .unwrap_err();
    assert!(
        e.0.contains("names [mx.dane.test] do not match mx.other.test"),
        "{e}"
    );
    // PKIX-TA(0) and PKIX-EE(1) are unusable for SMTP, as are unknown
    // selectors and matching types and digests of the wrong length.
    for r in [
        p.record(1, "ee", 1, 1),
        p.record(0, "ca", 0, 1),
        TlsaRecord {
            selector: 2,
            ..p.record(3, "ee", 1, 1)
        },
        TlsaRecord {
            matching: 3,
            ..p.record(3, "ee", 1, 1)
        },
        TlsaRecord {
            data: vec![1; 31],
            ..p.record(3, "ee", 1, 1)
        },
    ] {
        assert!(!r.usable(), "{r}");
        assert!(verify_dane(&chain, &[r], &names(), now).is_err());
    }
    assert_eq!(
        verify_dane(&[], &[p.record(3, "ee", 1, 1)], &names(), now)
            .unwrap_err()
            .0,
        "no certificate presented"
    );
}

/// Runs a handshake in memory; the client's error, if any.
fn handshake(
    client: std::sync::Arc<rustls::ClientConfig>,
    dir: &Path,
) -> Result<(), rustls::Error> {
    let scfg = tls::load_server_config(&dir.join("chain.pem"), &dir.join("ee.key")).unwrap();
    let mut s = rustls::ServerConnection::new(scfg).unwrap();
    let mut c =
        rustls::ClientConnection::new(client, tls::server_name("mx.dane.test").unwrap()).unwrap();
    for _ in 0..20 {
        let mut buf = Vec::new();
        c.write_tls(&mut buf).unwrap();
        s.read_tls(&mut &buf[..]).unwrap();
        // The server's view does not matter here: it fails after the client.
        let _ = s.process_new_packets();
        let mut buf = Vec::new();
        s.write_tls(&mut buf).unwrap();
        c.read_tls(&mut &buf[..]).unwrap();
        c.process_new_packets()?;
        if !c.is_handshaking() {
            return Ok(());
        }
    }
    panic!("the handshake neither finished nor failed");
}

#[test]
fn the_verifier_ends_a_handshake_with_a_mismatch_and_says_why() {
    let p = pki();
    let good = dane_client_config(vec![p.record(3, "ee", 1, 1)], names());
    handshake(good, &p.dir).expect("a matching DANE-EE record");
    let ta = dane_client_config(vec![p.record(2, "ca", 1, 2)], names());
    handshake(ta, &p.dir).expect("a matching DANE-TA record (the CA is in the chain)");
    let mut wrong = p.record(3, "ee", 0, 1);
    wrong.data[5] ^= 0x40;
    let e = handshake(dane_client_config(vec![wrong], names()), &p.dir).unwrap_err();
    let io = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    assert_eq!(
        dane_failure(&io).as_deref(),
        Some("no TLSA record matched the certificate chain")
    );
    let other = std::io::Error::new(std::io::ErrorKind::InvalidData, "something else");
    assert_eq!(dane_failure(&other), None);
}
