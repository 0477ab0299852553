//! opendkim (Debian's) as an smtpd milter, signing mail; the signature on
//! the message the next hop receives is verified by an independent
//! verifier, Python's dkimpy, with the public key published as a TXT
//! record by dnsmasq — and a copy changed after signing fails to verify.

use std::path::Path;
use std::process::{Command, Stdio};

use sluice_suite::testkit::ScriptedSink;
use sluice_suite::{dnsmasq, relay_instance, swaks, wait_for, Kill};

/// The strings of opendkim-genkey's TXT record file, joined.
fn txt_value(record_file: &Path) -> String {
    let text = std::fs::read_to_string(record_file).unwrap();
    text.split('"').skip(1).step_by(2).collect()
}

#[test]
fn opendkim_signs_and_dkimpy_verifies() {
    for tool in ["/usr/sbin/opendkim", "/usr/sbin/opendkim-genkey"] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: scripts/test installs opendkim and opendkim-tools"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let keys = dir.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    let gen = Command::new("/usr/sbin/opendkim-genkey")
        .args(["-b", "2048", "-d", "test.example", "-s", "sel", "-D"])
        .arg(&keys)
        .output()
        .unwrap();
    assert!(
        gen.status.success(),
        "{}",
        String::from_utf8_lossy(&gen.stderr)
    );

    // The public key in DNS, in strings of at most 255 bytes (dnsmasq
    // takes them comma-separated, without quotes; the key has no comma).
    let value = txt_value(&keys.join("sel.txt"));
    let strings: Vec<String> = value
        .as_bytes()
        .chunks(250)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let record = format!(
        "--txt-record=sel._domainkey.test.example,{}",
        strings.join(",")
    );
    let (_dns, dns_addr) = dnsmasq(&[&record]);

    let socket = dir.path().join("opendkim.sock");
    let conf = dir.path().join("opendkim.conf");
    std::fs::write(
        &conf,
        format!(
            // The test's files are under /tmp, which opendkim calls unsafe.
            "Syslog no\nBackground no\nMode s\nDomain test.example\nSelector sel\n\
             KeyFile {}\nSocket local:{}\nUMask 000\nCanonicalization relaxed/relaxed\n\
             InternalHosts 127.0.0.1\nPidFile {}\n\
             RequireSafeKeys false\n",
            keys.join("sel.private").display(),
            socket.display(),
            dir.path().join("opendkim.pid").display()
        ),
    )
    .unwrap();
    let opendkim = Kill(
        Command::new("/usr/sbin/opendkim")
            .arg("-f")
            .arg("-x")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start opendkim"),
    );
    wait_for(20, "opendkim's socket", || {
        std::os::unix::net::UnixStream::connect(&socket)
            .ok()
            .map(drop)
    });

    let sink = ScriptedSink::start();
    let (inst, port) = relay_instance(
        sink.port,
        &format!("smtpd_milters = unix:{}\n", socket.display()),
    );
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@test.example",
        "--to",
        "bob@remote.example",
        "--header",
        "Subject: signed by opendkim",
        "--body",
        "A body to sign.\n.A line with a leading dot.\n\nLast line.\n",
    ]);
    assert_eq!(code, 0, "{out}");
    let msg = wait_for(20, "the signed message at the sink", || {
        sink.messages().into_iter().next()
    });
    assert!(
        msg.data.contains("DKIM-Signature: v=1;"),
        "no signature: {}\n{}",
        msg.data,
        inst.log()
    );
    let file = dir.path().join("signed.eml");
    std::fs::write(&file, &msg.data).unwrap();
    let verify = |path: &Path| {
        Command::new("/usr/bin/python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/dkim_verify.py"))
            .arg(path)
            .arg(dns_addr.ip().to_string())
            .arg(dns_addr.port().to_string())
            .output()
            .expect("python3")
    };
    let v = verify(&file);
    let said =
        String::from_utf8_lossy(&v.stdout).into_owned() + &String::from_utf8_lossy(&v.stderr);
    assert!(v.status.success(), "dkimpy: {said}\n{}", msg.data);
    assert!(said.contains("pass d=test.example s=sel"), "{said}");

    // The same message with its body changed no longer verifies.
    let tampered = dir.path().join("tampered.eml");
    std::fs::write(&tampered, msg.data.replace("Last line.", "Last line!")).unwrap();
    let v = verify(&tampered);
    assert!(
        !v.status.success(),
        "a changed body still verifies: {}",
        String::from_utf8_lossy(&v.stdout)
    );
    drop(opendkim);
}
