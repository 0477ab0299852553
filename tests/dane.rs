//! DANE (RFC 7672) end to end, against a real DNSSEC chain on loopback:
//! zones signed with ldns-signzone, served by nsd, validated by unbound
//! (the test zone's DS as its only trust anchor, stub zones to nsd), which
//! is the sending Sluice's `dns_servers` with `smtp_dns_support_level =
//! dnssec` and `smtp_tls_security_level = dane` (and a `dane-only`
//! transport). The receiver is a second Sluice offering STARTTLS with a
//! certificate (and its CA in the chain) made by openssl(1), which also
//! computes the TLSA data. Mail goes swaks → Sluice → MX lookup → receiver.
//!
//! Each domain's MX host is the receiver; what differs is its TLSA record:
//! a DANE-EE and a DANE-TA record that match (delivered, `Verified`), a
//! DANE-EE record that does not (deferred with the reason), a PKIX-EE
//! record only (unusable: mandatory unauthenticated TLS), no record
//! (opportunistic), a mismatching record in an unsigned zone (insecure:
//! ignored, delivered as `may`, and refused by `dane-only`), and a TLSA
//! record altered after signing, which unbound finds bogus and answers
//! SERVFAIL for (deferred 4.7.5 "TLSA lookup error for host:port", as
//! Postfix, with DNS's status in the agent's log only).
//!
//! nsd, unbound and ldnsutils are Debian packages that scripts/test
//! installs; without them the test fails saying so.

use std::path::Path;
use std::process::{Command, Stdio};

use sluice_suite::{free_port, receive_master_cf, wait_for, Instance, Kill, RECEIVE_MAIN_CF};

fn tool(path: &str) -> &str {
    assert!(
        Path::new(path).exists(),
        "{path} is not installed (scripts/test installs nsd, unbound and ldnsutils)"
    );
    path
}

fn run(cmd: &str, args: &[&str], dir: &Path, input: Option<&[u8]>) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new(cmd)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd}: {e} (scripts/test installs it)"));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.unwrap_or_default()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The MX hosts: all are the receiver, all are in its certificate.
const HOSTS: [&str; 6] = [
    "mx.good.dane.test",
    "mx.ta.dane.test",
    "mx.bad.dane.test",
    "mx.pkix.dane.test",
    "mx.none.dane.test",
    "mx.plain.test",
];

/// A CA and the receiver's certificate for every MX host, signed by it.
fn make_pki(dir: &Path) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut a = vec!["req", "-x509", "-nodes"];
    a.extend(ec);
    a.extend([
        "-days",
        "2",
        "-subj",
        "/CN=Sluice DANE test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    run("openssl", &a, dir, None);
    let mut a = vec!["req", "-nodes"];
    a.extend(ec);
    a.extend([
        "-subj",
        "/CN=mx.good.dane.test",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    run("openssl", &a, dir, None);
    let sans: Vec<String> = HOSTS.iter().map(|h| format!("DNS:{h}")).collect();
    std::fs::write(
        dir.join("ext.cnf"),
        format!(
            "subjectAltName={}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
            sans.join(",")
        ),
    )
    .unwrap();
    run(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "9",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.pem",
        ],
        dir,
        None,
    );
    let chain = [
        std::fs::read(dir.join("server.pem")).unwrap(),
        std::fs::read(dir.join("ca.pem")).unwrap(),
    ]
    .concat();
    std::fs::write(dir.join("chain.pem"), chain).unwrap();
}

/// SHA-256 of a certificate's public key (selector 1) or of the whole
/// certificate (selector 0), by openssl.
fn digest(dir: &Path, pem: &str, selector: u8) -> String {
    let der = if selector == 0 {
        run(
            "openssl",
            &["x509", "-in", pem, "-outform", "DER"],
            dir,
            None,
        )
    } else {
        let key = run(
            "openssl",
            &["x509", "-in", pem, "-noout", "-pubkey"],
            dir,
            None,
        );
        run(
            "openssl",
            &["pkey", "-pubin", "-outform", "DER"],
            dir,
            Some(&key),
        )
    };
    hex(&run(
        "openssl",
        &["dgst", "-sha256", "-binary"],
        dir,
        Some(&der),
    ))
}

/// A port free for both UDP and TCP on 127.0.0.1.
fn dns_port() -> u16 {
    loop {
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = u.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

struct Dns {
    _nsd: Kill,
    _unbound: Kill,
    /// unbound's address, for dns_servers.
    resolver: String,
}

/// Signs dane.test, leaves plain.test unsigned, serves both with nsd and
/// validates with unbound; `port` is the receiver's (TLSA names carry it).
fn start_dns(dir: &Path, port: u16) -> Dns {
    let (nsd, unbound) = (tool("/usr/sbin/nsd"), tool("/usr/sbin/unbound"));
    let (keygen, signzone) = (tool("/usr/bin/ldns-keygen"), tool("/usr/bin/ldns-signzone"));
    let ee = digest(dir, "server.pem", 1);
    let ca = digest(dir, "ca.pem", 0);
    let wrong = hex(&[0x5a; 32]);
    let mut zone = String::from(
        "$ORIGIN dane.test.\n$TTL 300\n\
         @ SOA ns.dane.test. hostmaster.dane.test. 1 3600 600 86400 300\n\
         @ NS ns.dane.test.\nns A 127.0.0.1\n",
    );
    for (label, tlsa) in [
        ("good", Some(format!("3 1 1 {ee}"))),
        ("ta", Some(format!("2 0 1 {ca}"))),
        ("bad", Some(format!("3 1 1 {wrong}"))),
        ("pkix", Some(format!("1 1 1 {ee}"))),
        ("none", None),
        ("broken", Some(format!("3 1 1 {}", hex(&[0x6b; 32])))),
    ] {
        zone += &format!("{label} MX 10 mx.{label}.dane.test.\nmx.{label} A 127.0.0.1\n");
        if let Some(t) = tlsa {
            zone += &format!("_{port}._tcp.mx.{label} TLSA {t}\n");
        }
    }
    std::fs::write(dir.join("dane.test.zone"), zone).unwrap();
    std::fs::write(
        dir.join("plain.test.zone"),
        format!(
            "$ORIGIN plain.test.\n$TTL 300\n\
             @ SOA ns.plain.test. hostmaster.plain.test. 1 3600 600 86400 300\n\
             @ NS ns.plain.test.\nns A 127.0.0.1\n@ MX 10 mx.plain.test.\nmx A 127.0.0.1\n\
             _{port}._tcp.mx TLSA 3 1 1 {wrong}\n"
        ),
    )
    .unwrap();
    let key = String::from_utf8(run(
        keygen,
        &["-a", "ECDSAP256SHA256", "-k", "dane.test"],
        dir,
        None,
    ))
    .unwrap();
    let key = key.trim();
    run(signzone, &["dane.test.zone", key], dir, None);
    // broken's TLSA record no longer matches its signature: bogus.
    let signed = dir.join("dane.test.zone.signed");
    let text = std::fs::read_to_string(&signed).unwrap();
    let altered = text.replace(&hex(&[0x6b; 32]), &hex(&[0x6c; 32]));
    assert_ne!(text, altered, "broken's TLSA record in the signed zone");
    std::fs::write(&signed, altered).unwrap();

    let d = dir.display();
    let (auth, val) = (dns_port(), dns_port());
    std::fs::write(
        dir.join("nsd.conf"),
        format!(
            "server:\n  ip-address: 127.0.0.1@{auth}\n  username: \"\"\n  chroot: \"\"\n  zonesdir: \"{d}\"\n\
             \x20 database: \"\"\n  zonelistfile: \"{d}/zone.list\"\n  xfrdfile: \"{d}/xfrd.state\"\n\
             \x20 pidfile: \"{d}/nsd.pid\"\n  verbosity: 1\nremote-control:\n  control-enable: no\n\
             zone:\n  name: dane.test\n  zonefile: dane.test.zone.signed\n\
             zone:\n  name: plain.test\n  zonefile: plain.test.zone\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("unbound.conf"),
        format!(
            "server:\n  interface: 127.0.0.1@{val}\n  do-daemonize: no\n  username: \"\"\n  chroot: \"\"\n\
             \x20 directory: \"{d}\"\n  pidfile: \"\"\n  use-syslog: no\n  logfile: \"{d}/unbound.log\"\n\
             \x20 verbosity: 1\n  val-log-level: 2\n  access-control: 127.0.0.0/8 allow\n  do-ip6: no\n\
             \x20 do-not-query-localhost: no\n  local-zone: \"test.\" nodefault\n\
             \x20 trust-anchor-file: \"{d}/{key}.ds\"\n\
             stub-zone:\n  name: \"dane.test\"\n  stub-addr: 127.0.0.1@{auth}\n\
             stub-zone:\n  name: \"plain.test\"\n  stub-addr: 127.0.0.1@{auth}\n"
        ),
    )
    .unwrap();
    let spawn = |bin: &str, args: &[&str]| {
        let name = Path::new(bin).file_name().unwrap().to_string_lossy();
        Kill(
            Command::new(bin)
                .args(args)
                .current_dir(dir)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap())
                .spawn()
                .unwrap_or_else(|e| panic!("{bin}: {e}")),
        )
    };
    let conf = |f: &str| dir.join(f).display().to_string();
    let nsd = spawn(nsd, &["-d", "-c", &conf("nsd.conf")]);
    let unbound = spawn(unbound, &["-d", "-c", &conf("unbound.conf")]);
    for p in [auth, val] {
        wait_for(20, &format!("DNS server on port {p}"), || {
            std::net::TcpStream::connect(("127.0.0.1", p))
                .ok()
                .map(drop)
        });
    }
    Dns {
        _nsd: nsd,
        _unbound: unbound,
        resolver: format!("127.0.0.1:{val}"),
    }
}

/// The delivery log line of `rcpt`, once there is one.
fn outcome(inst: &Instance, rcpt: &str) -> String {
    inst.wait_log(60, &format!("to=<{rcpt}>, relay="))
}

#[test]
fn dane_verifies_defers_and_falls_back_as_rfc_7672_says() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    make_pki(d);
    for f in ["chain.pem", "server.key"] {
        std::fs::set_permissions(d.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let port = free_port();
    let mut receiver = Instance::new(
        &receive_master_cf(port, ""),
        &format!(
            "{RECEIVE_MAIN_CF}smtpd_tls_security_level = may\nsmtpd_tls_cert_file = {}\nsmtpd_tls_key_file = {}\n",
            d.join("chain.pem").display(),
            d.join("server.key").display()
        ),
    );
    receiver.start();
    receiver.wait_port(port);
    let dns = start_dns(d, port);

    let smtpd = free_port();
    let cf = format!(
        "127.0.0.1:{smtpd} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\n\
         daneonly unix - - n - - smtp -o smtp_tls_security_level=dane-only\n"
    );
    let routes: Vec<String> = ["good", "ta", "bad", "pkix", "none", "broken"]
        .iter()
        .map(|l| format!("{l}.dane.test = smtp:{l}.dane.test:{port}"))
        .chain([
            format!("plain.test = smtp:plain.test:{port}"),
            format!("strict-plain.example = daneonly:plain.test:{port}"),
            format!("strict-good.example = daneonly:good.dane.test:{port}"),
        ])
        .collect();
    let main = format!(
        "myhostname = out.test.example\nsmtpd_reject_unlisted_recipient = no\n\
         dns_servers = {}\nsmtp_dns_support_level = dnssec\nsmtp_tls_security_level = dane\n\
         inet_protocols = ipv4\nminimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n\
         transport_maps = inline:{{ {} }}\n",
        dns.resolver,
        routes.join(", ")
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(smtpd);
    let rcpts = [
        "u@good.dane.test",
        "u@ta.dane.test",
        "u@bad.dane.test",
        "u@pkix.dane.test",
        "u@none.dane.test",
        "u@plain.test",
        "u@strict-plain.example",
        "u@strict-good.example",
        "u@broken.dane.test",
    ];
    for to in rcpts {
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
    let relay = |host: &str| format!("{host}[127.0.0.1]:{port}");
    let log_has = |what: &str| inst.wait_log(30, what);

    // Usable records that match: TLS is verified by them.
    for (rcpt, host) in [
        ("u@good.dane.test", "mx.good.dane.test"),
        ("u@ta.dane.test", "mx.ta.dane.test"),
        ("u@strict-good.example", "mx.good.dane.test"),
    ] {
        let line = outcome(&inst, rcpt);
        assert!(
            line.contains(&relay(host)) && line.contains("status=sent"),
            "{line}"
        );
    }
    log_has(&format!(
        "Verified TLS connection established to {}",
        relay("mx.good.dane.test")
    ));
    log_has(&format!(
        "Verified TLS connection established to {}",
        relay("mx.ta.dane.test")
    ));

    // A DANE-EE record that does not match: deferred, with the reason.
    let line = outcome(&inst, "u@bad.dane.test");
    assert!(
        line.contains("dsn=4.7.5")
            && line.contains("status=deferred")
            && line.contains("TLSA certificate verification failed: no TLSA record matched the certificate chain"),
        "{line}"
    );
    log_has(&format!(
        "server certificate verification failed for {}: no TLSA record matched the certificate chain",
        relay("mx.bad.dane.test")
    ));

    // Only a PKIX-EE record: unusable for SMTP, so TLS is mandatory but
    // not authenticated; no record at all: opportunistic TLS.
    for (rcpt, host) in [
        ("u@pkix.dane.test", "mx.pkix.dane.test"),
        ("u@none.dane.test", "mx.none.dane.test"),
    ] {
        let line = outcome(&inst, rcpt);
        assert!(line.contains("status=sent"), "{line}");
        log_has(&format!(
            "Untrusted TLS connection established to {}",
            relay(host)
        ));
    }

    // The unsigned zone's mismatching record is not believed: `may`.
    let line = outcome(&inst, "u@plain.test");
    assert!(
        line.contains(&relay("mx.plain.test")) && line.contains("status=sent"),
        "{line}"
    );
    log_has(&format!(
        "Untrusted TLS connection established to {}",
        relay("mx.plain.test")
    ));
    // ... and dane-only will not deliver there at all.
    let line = inst.wait_log(30, "to=<u@strict-plain.example>");
    assert!(
        line.contains("dsn=4.7.5")
            && line.contains("status=deferred")
            && line.contains("no DNSSEC-validated MX and address records for mx.plain.test"),
        "{line}"
    );

    // A TLSA lookup that fails (SERVFAIL from a bogus RRset): deferred
    // before any connection, with Postfix's reason and nothing nested in it.
    let line = outcome(&inst, "u@broken.dane.test");
    let reason = format!("(TLSA lookup error for mx.broken.dane.test:{port})");
    assert!(
        line.contains("dsn=4.7.5") && line.contains(&format!("status=deferred {reason}")),
        "{line}"
    );
    // DNS's own status is the agent's to log.
    log_has(&format!(
        "mx.broken.dane.test: TLSA lookup error for mx.broken.dane.test:{port} (4.4.3 DNS server failure"
    ));

    // good, ta, strict-good, pkix, none, plain: six messages arrived.
    let arrived = wait_for(30, "six messages at the receiver", || {
        let q = receiver.queue_json();
        (q.len() >= 6).then_some(q)
    });
    assert_eq!(arrived.len(), 6, "{arrived:?}");
    assert!(
        arrived
            .iter()
            .all(|m| !m.contains("bad.dane.test") && !m.contains("strict-plain")),
        "{arrived:?}"
    );
    inst.stop();
    receiver.stop();
}
