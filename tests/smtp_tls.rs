//! The smtp agent's TLS security levels against a second Sluice whose smtpd
//! offers STARTTLS with a certificate for mx.example.test signed by a test
//! CA made with openssl(1). The test drives the agent as qmgr would, naming
//! the host (mx.example.test) and the next hop (example.test), so the names
//! matched are the ones an MX lookup would give.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ipc::delivery::{Data, Delivery, Request, Response, Transaction, TxnRecipient};
use ipc::Client;
use sluice_suite::{free_port, receive_master_cf, Instance, RECEIVE_MAIN_CF};

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl(1) is installed by scripts/test");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for mx.example.test signed by it, and a
/// second CA that signed nothing. Files are world-readable: the daemons
/// read them as the mail owner.
fn make_pki(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for ca in ["ca", "other-ca"] {
        let mut a = vec!["req", "-x509"];
        a.extend(ec);
        let subj = format!("/CN=Sluice test {ca}");
        let (key, crt) = (format!("{ca}.key"), format!("{ca}.pem"));
        a.extend([
            "-days",
            "2",
            "-subj",
            &subj,
            "-keyout",
            &key,
            "-out",
            &crt,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(&a, dir);
    }
    let mut a = vec!["req"];
    a.extend(ec);
    a.extend([
        "-subj",
        "/CN=mx.example.test",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    openssl(&a, dir);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:mx.example.test\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.pem",
        ],
        dir,
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    receiver: Instance,
    port: u16,
    sender: Instance,
}

/// The receiving Sluice (STARTTLS with the mx.example.test certificate)
/// and a sending one with an smtp agent per security level to test.
fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    make_pki(dir.path());
    let p = |f: &str| -> PathBuf { dir.path().join(f) };
    let port = free_port();
    let mut receiver = Instance::new(
        &receive_master_cf(port, ""),
        &format!(
            "{RECEIVE_MAIN_CF}smtpd_tls_security_level = may\nsmtpd_tls_cert_file = {}\nsmtpd_tls_key_file = {}\n",
            p("server.pem").display(),
            p("server.key").display()
        ),
    );
    receiver.start();
    receiver.wait_port(port);
    let ca = p("ca.pem").display().to_string();
    let other = p("other-ca.pem").display().to_string();
    let cf = format!(
        "verify unix - - n - - smtp -o smtp_tls_security_level=verify -o smtp_tls_CAfile={ca}\n\
         unknownca unix - - n - - smtp -o smtp_tls_security_level=verify -o smtp_tls_CAfile={other}\n\
         secure unix - - n - - smtp -o smtp_tls_security_level=secure -o smtp_tls_CAfile={ca}\n\
         may unix - - n - - smtp -o smtp_tls_security_level=may -o smtp_tls_CAfile={other}\n"
    );
    let mut sender = Instance::new(&cf, "smtp_helo_name = client.test.example\n");
    sender.start();
    Setup {
        _dir: dir,
        receiver,
        port,
        sender,
    }
}

impl Setup {
    fn agent(&self, service: &str) -> Client<Delivery> {
        let sock = self.sender.root().join("spool/private").join(service);
        Client::<Delivery>::connect(&sock, Duration::from_secs(30)).expect("connect to the agent")
    }

    /// Opens a connection to the receiver named `host` for `nexthop` and
    /// sends one message on it when it opens.
    fn deliver(&self, service: &str, host: &str, nexthop: &str, qid: &str) -> Response {
        let mut c = self.agent(service);
        let open = c
            .call(&Request::Open {
                conn: 1,
                host: host.into(),
                nexthop: nexthop.into(),
                addrs: vec![format!("127.0.0.1:{}", self.port).parse().unwrap()],
                source: None,
                dane: Default::default(),
            })
            .unwrap();
        if !matches!(open, Response::Opened { .. }) {
            return open;
        }
        let sent = c
            .call(&Request::Send {
                conn: 1,
                txn: txn(qid),
            })
            .unwrap();
        let _ = c.call(&Request::Close { conn: 1 });
        sent
    }
}

fn txn(qid: &str) -> Box<Transaction> {
    let data = format!("From: s@test.example\r\nSubject: {qid}\r\n\r\nhello\r\n").into_bytes();
    Box::new(Transaction {
        queue_id: qid.into(),
        sender: "s@test.example".into(),
        ret: None,
        envid: None,
        body: mail::BodyType::SevenBit,
        smtputf8: false,
        size: data.len() as u64,
        arrival_us: 0,
        recipients: vec![TxnRecipient {
            index: 0,
            address: format!("{}@mx.test.example", qid.to_lowercase()),
            notify: mail::Notify::Default,
            orcpt: None,
        }],
        data: Data::Inline(data),
    })
}

fn assert_sent(r: &Response) {
    match r {
        Response::Sent {
            results,
            conn_failed: false,
            ..
        } => assert!(
            results
                .iter()
                .all(|r| r.status.is_success() && r.status.text.contains("queued as")),
            "{results:?}"
        ),
        other => panic!("expected a delivery, got {other:?}"),
    }
}

/// The reason of a handshake failure, which qmgr turns into a deferral.
fn refused(r: Response) -> String {
    match r {
        Response::OpenFailed {
            failure: ipc::delivery::OpenFailure::Handshake,
            reason,
            ..
        } => reason.to_string(),
        other => panic!("expected a handshake failure, got {other:?}"),
    }
}

#[test]
fn verify_delivers_to_a_certificate_for_the_mx_name() {
    let s = setup();
    assert_sent(&s.deliver("verify", "mx.example.test", "example.test", "VOK"));
    s.sender.wait_log(
        5,
        &format!(
            "Verified TLS connection established to mx.example.test[127.0.0.1]:{}",
            s.port
        ),
    );
    s.sender.wait_log(5, "VOK: to=<vok@mx.test.example>");
    s.receiver.wait_log(10, "TLS connection established from");
}

#[test]
fn verify_defers_an_unknown_ca_and_a_name_mismatch() {
    let s = setup();
    let why = refused(s.deliver("unknownca", "mx.example.test", "example.test", "VCA"));
    assert!(
        why.starts_with(
            "4.7.5 Server certificate not trusted (unable to get local issuer certificate)"
        ),
        "{why}"
    );
    s.sender.wait_log(
        5,
        "server certificate verification failed for mx.example.test[127.0.0.1]",
    );
    s.sender
        .wait_log(5, "Untrusted TLS connection established to mx.example.test");
    // The chain is good, but the host qmgr named is not in the certificate.
    let why = refused(s.deliver("verify", "mail.example.test", "example.test", "VNM"));
    assert!(
        why.starts_with("4.7.5 Server certificate not verified (names [mx.example.test] do not match mail.example.test)"),
        "{why}"
    );
    s.sender
        .wait_log(5, "Trusted TLS connection established to mail.example.test");
    assert!(s.receiver.queue_json().is_empty(), "nothing was sent");
}

#[test]
fn secure_matches_the_next_hop_domain() {
    let s = setup();
    // dot-nexthop: mx.example.test is below example.test, whatever the MX
    // host was called.
    assert_sent(&s.deliver("secure", "relay.test", "example.test", "SOK"));
    s.sender
        .wait_log(5, "Verified TLS connection established to relay.test");
    // A relay named in brackets is its own next hop.
    assert_sent(&s.deliver("secure", "mx.example.test", "[mx.example.test]:25", "SBR"));
    let why = refused(s.deliver("secure", "mx.example.test", "example.org", "SNM"));
    assert!(
        why.contains("Server certificate not verified (names [mx.example.test] do not match example.org, .example.org)"),
        "{why}"
    );
    assert_eq!(s.receiver.queue_json().len(), 2);
}

#[test]
fn may_delivers_over_untrusted_tls() {
    let s = setup();
    assert_sent(&s.deliver("may", "mx.example.test", "example.test", "MOK"));
    s.sender
        .wait_log(5, "Untrusted TLS connection established to mx.example.test");
    s.receiver.wait_log(10, "TLS connection established from");
}

/// The whole path: swaks → Sluice (router, qmgr, smtp at `verify`) →
/// the receiver, its name found in DNS (dnsmasq) for the relay that the
/// transport map names; a relay whose name is not in the certificate gets
/// its mail deferred by qmgr with 4.7.5.
#[test]
fn verify_end_to_end_through_qmgr() {
    let s = setup();
    let (_dns, dns) = sluice_suite::dnsmasq(&[
        "--host-record=mx.example.test,127.0.0.1",
        "--host-record=mx.other.test,127.0.0.1",
    ]);
    let smtpd = free_port();
    let cf = format!(
        "127.0.0.1:{smtpd} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\n"
    );
    let ca = s._dir.path().join("ca.pem");
    let main = format!(
        "myhostname = out.test.example\nsmtpd_reject_unlisted_recipient = no\ndns_servers = {dns}\n\
         inet_protocols = ipv4\nminimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n\
         smtp_tls_security_level = verify\nsmtp_tls_CAfile = {}\n\
         transport_maps = inline:{{ example.test = smtp:[mx.example.test]:{port}, other.test = smtp:[mx.other.test]:{port} }}\n",
        ca.display(),
        port = s.port
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(smtpd);
    for to in ["user@example.test", "user@other.test"] {
        let (code, out) = sluice_suite::swaks(&[
            "--server",
            &format!("127.0.0.1:{smtpd}"),
            "--from",
            "a@out.test.example",
            "--to",
            to,
        ]);
        assert_eq!(code, 0, "{out}");
    }
    let sent = inst.wait_log(
        30,
        &format!(
            "to=<user@example.test>, relay=mx.example.test[127.0.0.1]:{}",
            s.port
        ),
    );
    assert!(sent.contains("status=sent"), "{sent}");
    inst.wait_log(5, "Verified TLS connection established to mx.example.test");
    let deferred = inst.wait_log(30, "to=<user@other.test>");
    assert!(
        deferred.contains("dsn=4.7.5")
            && deferred.contains("status=deferred")
            && deferred.contains("Server certificate not verified"),
        "{deferred}"
    );
    inst.stop();
}

#[test]
fn an_unreadable_ca_file_stops_the_agent_at_verify() {
    let mut inst = Instance::new(
        "smtp unix - - n - - smtp -o smtp_tls_security_level=verify -o smtp_tls_CAfile=/nonexistent/ca.pem\n",
        "",
    );
    inst.start();
    let sock = inst.root().join("spool/private/smtp");
    // Connecting starts the agent, which refuses to run.
    let _ = Client::<Delivery>::connect(&sock, Duration::from_secs(2));
    let line = inst.wait_log(20, "smtp_tls_CAfile: /nonexistent/ca.pem: ");
    assert!(
        line.contains("fatal") && line.contains("needed by smtp_tls_security_level = verify"),
        "{line}"
    );
}
