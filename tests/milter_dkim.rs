//! opendkim (Debian's) as an smtpd milter, signing mail; the signature on
//! the message the next hop receives is verified by an independent
//! verifier, Python's dkimpy, with the public key published as a TXT
//! record by dnsmasq — and a copy changed after signing fails to verify;
//! and cleanup's own signer behind a milter that changes the message,
//! its signature over what the milter left.

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

/// cleanup's own signer (`dkim_signing_table`) behind a milter that
/// changes the headers and replaces the body: the signature covers the
/// message as the milter left it, for mail from smtpd (`smtpd_milters`)
/// and from sendmail(1) (`non_smtpd_milters`), and dkimpy verifies it
/// against the key `sluice dkim keygen` made, published by dnsmasq.
#[test]
fn cleanups_signature_covers_what_a_milter_changed() {
    let milter = sluice_suite::test_milter::TestMilter::start();
    let sink = ScriptedSink::start();
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let keys = dir.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    let port = sluice_suite::free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         submit unix n - n - - cleanup\nqmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\n\
         smtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let m = format!("unix:{}", milter.socket().display());
    let main = format!(
        "myhostname = mx.test.example\nmyorigin = test.example\nrelayhost = [127.0.0.1]:{}\n\
         smtpd_reject_unlisted_recipient = no\nsmtpd_milters = {m}\nnon_smtpd_milters = {m}\n\
         dkim_signing_table = texthash:{k}/signing\ndkim_key_table = texthash:{k}/keys\n",
        sink.port,
        k = keys.display()
    );
    let mut inst = sluice_suite::Instance::new(&cf, &main);
    if let Some((uid, gid)) = inst.run_as {
        std::os::unix::fs::chown(&keys, Some(uid), Some(gid)).unwrap();
    }
    let out = inst.sluice(&[
        "dkim",
        "keygen",
        "-D",
        keys.to_str().unwrap(),
        "test.example",
        "sel",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let txt: String = String::from_utf8(out.stdout)
        .unwrap()
        .split('"')
        .skip(1)
        .step_by(2)
        .collect();
    std::fs::write(keys.join("signing"), "test.example k\n").unwrap();
    std::fs::write(
        keys.join("keys"),
        format!("k test.example:sel:{}/sel.private\n", keys.display()),
    )
    .unwrap();
    let strings: Vec<String> = txt
        .as_bytes()
        .chunks(250)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let record = format!(
        "--txt-record=sel._domainkey.test.example,{}",
        strings.join(",")
    );
    let (_dns, dns_addr) = dnsmasq(&[&record]);
    inst.start();
    inst.wait_port(port);

    // From smtpd: the client is in mynetworks (loopback), so it is signed.
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@test.example",
        "--to",
        "bob@remote.example",
        "--header",
        "From: alice@test.example",
        "--header",
        "Subject: please rewrite over smtp",
        "--add-header",
        "X-Remove: this goes",
        "--body",
        "Original body.\n",
    ]);
    assert_eq!(code, 0, "{out}");
    // From sendmail(1).
    let mut cmd = Command::new(sluice_suite::bin_dir().join("sendmail"));
    cmd.args(["-f", "alice@test.example", "carol@remote.example"])
        .env("SLUICE_CONFIG_DIR", inst.etc())
        .stdin(Stdio::piped());
    if let Some((uid, gid)) = inst.run_as {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(gid);
    }
    let mut child = cmd.spawn().expect("sendmail");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"From: alice@test.example\nSubject: please rewrite, add-header\nX-Remove: gone\n\nOriginal body.\n")
        .unwrap();
    assert!(child.wait().unwrap().success());

    let verify = |path: &Path| {
        let v = Command::new("/usr/bin/python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/dkim_verify.py"))
            .arg(path)
            .arg(dns_addr.ip().to_string())
            .arg(dns_addr.port().to_string())
            .output()
            .expect("python3");
        let said =
            String::from_utf8_lossy(&v.stdout).into_owned() + &String::from_utf8_lossy(&v.stderr);
        (v.status.success(), said)
    };
    for rcpt in ["bob@remote.example", "carol@remote.example"] {
        let msg = wait_for(20, &format!("the message for {rcpt}"), || {
            sink.messages()
                .into_iter()
                .find(|m| m.rcpts.iter().any(|r| r == rcpt))
        });
        // The milter's changes are in the message, under the signature.
        assert!(msg.data.starts_with("DKIM-Signature: v=1;"), "{}", msg.data);
        assert!(
            msg.data.contains("Subject: changed by the test milter\r\n")
                && msg.data.contains("X-First: inserted\r\n")
                && !msg.data.contains("X-Remove")
                && msg.data.contains("The test milter replaced this body."),
            "{}",
            msg.data
        );
        let file = dir.path().join(format!("{rcpt}.eml"));
        std::fs::write(&file, &msg.data).unwrap();
        let (ok, said) = verify(&file);
        assert!(ok, "dkimpy: {said}\n{}\n{}", msg.data, inst.log());
        assert!(said.contains("pass d=test.example s=sel"), "{said}");
        // The original body does not verify: the signature is over the
        // milter's body.
        let orig = dir.path().join(format!("{rcpt}.orig.eml"));
        let body_at = msg.data.find("\r\n\r\n").unwrap() + 4;
        std::fs::write(&orig, format!("{}Original body.\r\n", &msg.data[..body_at])).unwrap();
        assert!(!verify(&orig).0, "the original body verifies too");
    }
    assert!(milter.log().contains("connect localhost 127.0.0.1"));
}
