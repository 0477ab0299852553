//! DKIM signing checked by independent verifiers: keys made by `sluice
//! dkim keygen` (RSA-2048 and Ed25519), their TXT records served by
//! dnsmasq, messages (plain, 8-bit, SMTPUTF8, multipart) signed by
//! cleanup and relayed through a real Postfix, then verified as Postfix
//! holds them by Python's dkimpy and by opendkim in test mode, both
//! looking the keys up in that DNS; one message is past the size kept
//! inline, so its signature is written into its message file after the
//! body. A message changed after signing
//! fails both, so the verifiers are seen to check. Mail from a client
//! outside mynetworks that did not authenticate is not signed; mail from
//! one that authenticated (SASL through Dovecot) and mail submitted with
//! sendmail(1) are. A key that cannot be read is named by `sluice check`
//! (with main.cf's line) and stops cleanup.
//!
//! Needs root (Postfix), dnsmasq, python3-dkim, opendkim and openssl
//! (scripts/test installs them); without one the test fails saying which.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sluice_suite::dovecot::Dovecot;
use sluice_suite::postfix::{Postfix, PostfixOptions};
use sluice_suite::{
    dnsmasq, free_port, queued_id, receive_master_cf, swaks, Instance, RECEIVE_MAIN_CF,
};

const PYTHON: &str = "/usr/bin/python3";

/// Sends `msg` with smtplib; `options` are MAIL FROM options.
fn send(port: u16, from: &str, to: &str, options: &[&str], msg: &[u8]) {
    let script = "import smtplib,sys\n\
                  s=smtplib.SMTP('127.0.0.1',int(sys.argv[1]))\n\
                  s.sendmail(sys.argv[2],[sys.argv[3]],sys.stdin.buffer.read(),mail_options=sys.argv[4:])\n\
                  s.quit()\n";
    let mut child = Command::new(PYTHON)
        .args(["-c", script, &port.to_string(), from, to])
        .args(options)
        .stdin(Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(msg).unwrap();
    assert!(child.wait().unwrap().success(), "smtplib send to {to}");
}

/// dkimpy's verdict, the key fetched from dnsmasq at `dns`.
fn dkimpy(dns: std::net::SocketAddr, msg: &Path) -> (bool, String) {
    let script = "import sys, dkim, dns.resolver\n\
        r = dns.resolver.Resolver(configure=False)\n\
        r.nameservers = [sys.argv[1]]\n\
        r.port = int(sys.argv[2])\n\
        def txt(name, timeout=5):\n\
        \x20   a = r.resolve(name.decode().rstrip('.'), 'TXT')\n\
        \x20   return b''.join(a[0].strings)\n\
        m = open(sys.argv[3], 'rb').read()\n\
        d = dkim.DKIM(m)\n\
        ok = d.verify(dnsfunc=txt)\n\
        print('pass' if ok else 'fail', d.signature_fields.get(b'd', b'').decode(), d.signature_fields.get(b'a', b'').decode())\n";
    let out = Command::new(PYTHON)
        .args(["-c", script, &dns.ip().to_string(), &dns.port().to_string()])
        .arg(msg)
        .output()
        .expect("python3 with dkimpy");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && text.starts_with("pass"), text)
}

/// opendkim's verdict in test mode, resolving through libunbound
/// forwarded to dnsmasq (unbound answers for `test.` itself unless told
/// not to, as RFC 6761 allows).
fn opendkim(dir: &Path, dns: std::net::SocketAddr, msg: &Path) -> (bool, String) {
    let unbound = dir.join("unbound.conf");
    std::fs::write(
        &unbound,
        format!(
            "server:\n  do-not-query-localhost: no\n  local-zone: \"test.\" nodefault\nforward-zone:\n  name: \".\"\n  forward-addr: {}@{}\n",
            dns.ip(),
            dns.port()
        ),
    )
    .unwrap();
    let conf = dir.join("opendkim.conf");
    std::fs::write(
        &conf,
        format!(
            "Mode v\nResolverConfiguration {}\nSyslog no\nUserID root\n",
            unbound.display()
        ),
    )
    .unwrap();
    let out = Command::new("opendkim")
        .arg("-x")
        .arg(&conf)
        .arg("-vv")
        .arg("-t")
        .arg(msg)
        .output()
        .expect("opendkim (scripts/test installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.success() && text.contains("verification") && text.contains("succeeded"),
        text,
    )
}

/// `sluice dkim keygen`; the TXT record's text.
fn keygen(inst: &Instance, dir: &Path, args: &[&str]) -> String {
    let mut a = vec!["dkim", "keygen", "-D", dir.to_str().unwrap()];
    a.extend_from_slice(args);
    let out = inst.sluice(&a);
    assert!(
        out.status.success(),
        "keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let zone = String::from_utf8(out.stdout).unwrap();
    zone.split('"').skip(1).step_by(2).collect()
}

/// The held message for `rcpt` as Postfix stores it, CRLF line ends.
fn held(pf: &Postfix, rcpt: &str, dir: &Path) -> PathBuf {
    let qid = pf.wait_queued(rcpt);
    let text = pf.postcat("-bhq", &qid);
    let mut crlf = Vec::with_capacity(text.len() + 1024);
    for &b in &text {
        if b == b'\n' {
            crlf.push(b'\r');
        }
        crlf.push(b);
    }
    let path = dir.join(format!("{rcpt}.eml"));
    std::fs::write(&path, &crlf).unwrap();
    path
}

#[test]
fn signatures_verify_with_dkimpy_and_opendkim_after_a_postfix_relay() {
    let pf_port = free_port();
    let tmp = tempfile::Builder::new()
        .prefix("sluice-dkim")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let pf = Postfix::start(tmp.path(), pf_port, &PostfixOptions::default());
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let keys = tmp.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    // The tables refer to files written below, before the instance starts.
    let main = format!(
        "myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{pf_port}\nsmtpd_reject_unlisted_recipient = no\n\
         dkim_signing_table = texthash:{k}/signing\ndkim_key_table = texthash:{k}/keys\n",
        k = keys.display()
    );
    let mut inst = Instance::new(&cf, &main);
    if let Some((uid, gid)) = inst.run_as {
        std::os::unix::fs::chown(&keys, Some(uid), Some(gid)).unwrap();
    }
    let rsa_txt = keygen(&inst, &keys, &["rsa.test", "s2048"]);
    let ed_txt = keygen(&inst, &keys, &["-a", "ed25519", "ed.test", "e1"]);
    assert!(rsa_txt.starts_with("v=DKIM1; k=rsa; p=MIIB"), "{rsa_txt}");
    assert!(ed_txt.starts_with("v=DKIM1; k=ed25519; p="), "{ed_txt}");
    std::fs::write(keys.join("signing"), "rsa.test rsa\ned.test ed\n").unwrap();
    std::fs::write(
        keys.join("keys"),
        format!(
            "rsa rsa.test:s2048:{k}/s2048.private\ned ed.test:e1:{k}/e1.private\n",
            k = keys.display()
        ),
    )
    .unwrap();
    // dnsmasq takes a TXT record's strings separated by commas.
    let cut = |t: &str| {
        t.as_bytes()
            .chunks(200)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect::<Vec<_>>()
            .join(",")
    };
    let records = [
        format!("--txt-record=s2048._domainkey.rsa.test,{}", cut(&rsa_txt)),
        format!("--txt-record=e1._domainkey.ed.test,{}", cut(&ed_txt)),
    ];
    let refs: Vec<&str> = records.iter().map(String::as_str).collect();
    let (_dns_guard, dns) = dnsmasq(&refs);
    inst.start();
    inst.wait_port(port);

    let plain = b"From: Alice <alice@rsa.test>\r\nTo: bob@dest.test.example\r\nSubject: plain\r\n\
        Date: Wed, 25 Nov 2026 10:00:00 +0000\r\nMessage-ID: <plain@rsa.test>\r\n\r\n\
        Hello,  this   has  runs of spaces  \r\n.a line with a leading dot\r\n..two dots\r\n\r\n\r\n";
    let eightbit = "From: alice@rsa.test\r\nTo: carol@dest.test.example\r\nSubject: 8bit\r\n\
        MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n\
        Gr\u{fc}\u{df}e aus K\u{f6}ln \u{2014} \u{e9}t\u{e9}\t \r\n\r\n";
    let utf8 = "From: J\u{f6}rg <j\u{f6}rg@ed.test>\r\nTo: d\u{e9}d\u{e9}@dest.test.example\r\n\
        Subject: gr\u{fc}\u{df}e\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n\
        \u{4f60}\u{597d}\r\n";
    let multipart = "From: alice@ed.test\r\nTo: erin@dest.test.example\r\nTo: frank@dest.test.example\r\n\
        Subject: multipart\r\nMIME-Version: 1.0\r\n\
        Content-Type: multipart/alternative;\r\n\tboundary=\"b1\"\r\n\r\n\
        preamble\r\n--b1\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\nplain part\r\n\
        --b1\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
        <p>html =C3=A9</p>\r\n--b1--\r\n";
    send(port, "alice@rsa.test", "bob@dest.test.example", &[], plain);
    send(
        port,
        "alice@rsa.test",
        "carol@dest.test.example",
        &["BODY=8BITMIME"],
        eightbit.as_bytes(),
    );
    send(
        port,
        "j\u{f6}rg@ed.test",
        "d\u{e9}d\u{e9}@dest.test.example",
        &["SMTPUTF8", "BODY=8BITMIME"],
        utf8.as_bytes(),
    );
    send(
        port,
        "alice@ed.test",
        "erin@dest.test.example",
        &[],
        multipart.as_bytes(),
    );
    // Past the 64 KiB kept inline: the signature's place is reserved in a
    // message file and filled at the end.
    let mut large =
        b"From: alice@rsa.test\r\nTo: heidi@dest.test.example\r\nSubject: large\r\n\r\n".to_vec();
    while large.len() < 150 * 1024 {
        large
            .extend_from_slice(b"A line of a large message,  with  runs of spaces\t and tabs.\r\n");
    }
    send(
        port,
        "alice@rsa.test",
        "heidi@dest.test.example",
        &[],
        &large,
    );

    inst.wait_log(20, "DKIM-Signature field added (s=s2048, d=rsa.test)");
    inst.wait_log(20, "DKIM-Signature field added (s=e1, d=ed.test)");
    for (rcpt, d, a) in [
        ("bob@dest.test.example", "rsa.test", "rsa-sha256"),
        ("carol@dest.test.example", "rsa.test", "rsa-sha256"),
        (
            "d\u{e9}d\u{e9}@dest.test.example",
            "ed.test",
            "ed25519-sha256",
        ),
        ("erin@dest.test.example", "ed.test", "ed25519-sha256"),
        ("heidi@dest.test.example", "rsa.test", "rsa-sha256"),
    ] {
        let msg = held(&pf, rcpt, tmp.path());
        let text = std::fs::read(&msg).unwrap();
        assert!(
            text.starts_with(b"Received: from mx.test.example"),
            "Postfix's Received: first: {}",
            String::from_utf8_lossy(&text)
        );
        let (ok, why) = dkimpy(dns, &msg);
        assert!(
            ok,
            "dkimpy on {rcpt}: {why}\n{}",
            String::from_utf8_lossy(&text)
        );
        assert!(why.contains(d) && why.contains(a), "{why}");
        let (ok, why) = opendkim(tmp.path(), dns, &msg);
        assert!(ok, "opendkim on {rcpt}: {why}");
        // One byte changed in the body: both verifiers must now refuse.
        let mut bad = text.clone();
        let at = bad.len() - 4;
        bad[at] ^= 0x01;
        let bad_path = tmp.path().join("tampered.eml");
        std::fs::write(&bad_path, &bad).unwrap();
        let (ok, why) = dkimpy(dns, &bad_path);
        assert!(!ok, "dkimpy passed a changed message: {why}");
        let (ok, why) = opendkim(tmp.path(), dns, &bad_path);
        assert!(
            !ok && why.contains("verification"),
            "opendkim on a changed message: {why}"
        );
    }

    // After a reload that leaves 127.0.0.1 out of mynetworks (cleanup
    // retires and its successor reads the keys again), a client that did
    // not authenticate gets its mail relayed unsigned.
    for set in ["mynetworks=192.0.2.0/24", "smtpd_relay_restrictions=permit"] {
        let out = inst.sluice(&["config", set]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = inst.sluice(&["reload"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let outsider =
        b"From: alice@rsa.test\r\nTo: grace@dest.test.example\r\nSubject: outside\r\n\r\nbody\r\n";
    sluice_suite::wait_for(20, "smtpd's reload", || {
        inst.log()
            .lines()
            .any(|l| l.contains("/smtpd[") && l.contains("reloaded configuration"))
            .then_some(())
    });
    send(
        port,
        "alice@rsa.test",
        "grace@dest.test.example",
        &[],
        outsider,
    );
    let msg = std::fs::read(held(&pf, "grace@dest.test.example", tmp.path())).unwrap();
    let text = String::from_utf8_lossy(&msg);
    assert!(text.contains("Subject: outside"), "{text}");
    assert!(
        !text.contains("DKIM-Signature"),
        "signed for an outsider: {text}"
    );
}

#[test]
fn authenticated_and_local_mail_is_signed_and_a_strangers_is_not() {
    let dovecot = Dovecot::start(&[("alice", "secret")], 0);
    let port = free_port();
    let keys_dir = tempfile::Builder::new()
        .prefix("sluice-dkim-keys")
        .tempdir()
        .unwrap();
    let keys = keys_dir.path();
    std::fs::set_permissions(keys, std::fs::Permissions::from_mode(0o755)).unwrap();
    let main = format!(
        "{RECEIVE_MAIN_CF}mynetworks = 192.0.2.0/24\nsmtpd_relay_restrictions = permit\n\
         smtpd_sasl_auth_enable = yes\nsmtpd_sasl_type = dovecot\nsmtpd_sasl_path = {}\n\
         smtpd_tls_auth_only = no\n\
         dkim_signing_table = inline:{{ ed.test = ed }}\ndkim_key_table = texthash:{k}/keys\n",
        dovecot.socket.display(),
        k = keys.display()
    );
    let mut inst = Instance::new(&receive_master_cf(port, ""), &main);
    if let Some((uid, gid)) = inst.run_as {
        std::os::unix::fs::chown(keys, Some(uid), Some(gid)).unwrap();
    }
    keygen(&inst, keys, &["-a", "ed25519", "ed.test", "e1"]);
    std::fs::write(
        keys.join("keys"),
        format!("ed ed.test:e1:{}/e1.private\n", keys.display()),
    )
    .unwrap();
    inst.start();
    inst.wait_port(port);
    let server = format!("127.0.0.1:{port}");
    let queued = |out: &str| queued_id(out);

    // Outside mynetworks, not authenticated: accepted (relaying is open
    // here) and not signed.
    let (code, out) = swaks(&[
        "--server",
        &server,
        "--from",
        "x@ed.test",
        "--to",
        "a@remote.example",
    ]);
    assert_eq!(code, 0, "{out}");
    let stranger = queued(&out);
    // Authenticated: signed.
    let (code, out) = swaks(&[
        "--server",
        &server,
        "--auth",
        "PLAIN",
        "--auth-user",
        "alice",
        "--auth-password",
        "secret",
        "--from",
        "alice@ed.test",
        "--to",
        "b@remote.example",
    ]);
    assert_eq!(code, 0, "{out}");
    let authenticated = queued(&out);
    // Submitted with sendmail(1): signed.
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(sluice_suite::bin_dir().join("sendmail"));
    cmd.arg("c@remote.example")
        .env("SLUICE_CONFIG_DIR", inst.etc());
    if let Some((uid, gid)) = inst.run_as {
        cmd.uid(uid).gid(gid);
    }
    let mut child = cmd.stdin(Stdio::piped()).spawn().expect("sendmail");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"From: alice@ed.test\nSubject: local\n\nhi\n")
        .unwrap();
    assert!(child.wait().unwrap().success());
    let local = inst.wait_log(20, "uid=");
    let local = local
        .split(": uid=")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .unwrap()
        .to_string();

    for id in [&authenticated, &local] {
        inst.wait_log(
            20,
            &format!("{id}: DKIM-Signature field added (s=e1, d=ed.test)"),
        );
    }
    let log = inst.log();
    assert!(log.contains(&format!("{stranger}: message-id=")), "{log}");
    assert!(
        !log.contains(&format!("{stranger}: DKIM-Signature")),
        "a stranger's mail was signed: {log}"
    );
}

#[test]
fn a_key_that_cannot_be_read_is_named_by_sluice_check_and_by_cleanup() {
    let port = free_port();
    let main = format!(
        "{RECEIVE_MAIN_CF}dkim_signing_table = inline:{{ ed.test = ed }}\n\
         dkim_key_table = inline:{{ ed = ed.test:e1:/nonexistent/e1.private }}\n"
    );
    let mut inst = Instance::new(&receive_master_cf(port, ""), &main);
    let out = inst.sluice(&["check"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("main.cf, line")
            && err.contains("dkim_key_table")
            && err.contains("key ed: /nonexistent/e1.private: No such file or directory"),
        "{err}"
    );
    // Started anyway: cleanup, started when smtpd first needs it (DATA), stops
    // at once naming the key (master then throttles it); it never runs
    // without the keys it was told to sign with.
    inst.start();
    inst.wait_port(port);
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@ed.test",
        "--to",
        "b@remote.example",
        "--timeout",
        "3",
    ]);
    // smtpd starts cleanup at DATA; the message is not accepted.
    assert_ne!(code, 0, "{out}");
    let fatal = inst.wait_log(20, "fatal: dkim_key_table");
    assert!(
        fatal.contains("cleanup[") && fatal.contains("key ed: /nonexistent/e1.private"),
        "{fatal}"
    );
    assert!(!inst.log().contains("DKIM-Signature field added"));
    assert!(inst.queue_json().is_empty(), "{:?}", inst.queue_json());
}
