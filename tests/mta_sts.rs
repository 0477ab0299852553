//! MTA-STS (RFC 8461) and TLS reports (RFC 8460) end to end.
//!
//! dnsmasq serves the MX, `_mta-sts` and `_smtp._tls` records of three
//! domains; Python's http.server over ssl serves their policies on
//! 127.0.0.1:443 (hence root) with a certificate from a test CA made with
//! openssl(1); a receiving Sluice offers STARTTLS with a certificate for
//! mx.sts.test from the same CA. The sending Sluice runs with
//! `smtp_tls_security_level = none`, so every TLS session below is the
//! policies' doing:
//! - good.test (enforce, MX mx.sts.test): delivered, a success;
//! - bad.test (enforce, MX mx.bad.test, the same server whose certificate
//!   does not name it): deferred with 4.7.5, a certificate-host-mismatch;
//! - try.test (testing, MX mx.try.test, likewise): delivered anyway, the
//!   mismatch logged and counted;
//! - plain.test (enforce, MX Postfix's smtp-sink, which offers no
//!   STARTTLS): deferred, a starttls-not-supported;
//! - nopolicy.test announces a policy the server does not have (404): a
//!   sts-policy-fetch-error, and its mail goes as without a policy.
//!
//! Then the smtp agents and the router are killed with kill -9 and one
//! more message goes to good.test: the counts from before and after are
//! in the same report. With `smtp_tls_report_interval = 30s`, the router
//! sends each domain's report to the rua of its `_smtp._tls` record; the
//! rua domain is routed to another smtp-sink, and the reports' JSON is
//! parsed with Python's json module.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};

use sluice_suite::{
    dumped, free_port, receive_master_cf, require_root, sent_dumps, sink_dump, smtp_sink, wait_for,
    Instance, Kill, RECEIVE_MAIN_CF,
};

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

/// A CA and one server certificate signed by it, naming mx.sts.test and
/// the policy hosts of the test domains.
fn make_pki(dir: &Path) {
    openssl(
        &[
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
            "/CN=Sluice MTA-STS test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
        dir,
    );
    openssl(
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=mx.sts.test",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
        dir,
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:mx.sts.test,DNS:mta-sts.good.test,DNS:mta-sts.bad.test,DNS:mta-sts.try.test,DNS:mta-sts.nopolicy.test,DNS:mta-sts.plain.test\n\
         extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
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

/// The policy server on 127.0.0.1:443, serving `policies/<host>.txt`.
fn https_server(dir: &Path) -> Kill {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/mta_sts_https.py");
    let mut child = Command::new("python3")
        .arg(script)
        .args(["127.0.0.1", "443"])
        .arg(dir.join("server.pem"))
        .arg(dir.join("server.key"))
        .arg(dir.join("policies"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    let out = child.stdout.take().unwrap();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        "ready",
        "the HTTPS server did not start (is 443 taken?)"
    );
    Kill(child)
}

fn policy(mode: &str, mx: &str) -> String {
    format!("version: STSv1\r\nmode: {mode}\r\nmx: {mx}\r\nmax_age: 86400\r\n")
}

#[test]
fn policies_are_enforced_tested_and_reported() {
    require_root("the policy server must listen on port 443, as RFC 8461 fixes it");
    let dir = tempfile::tempdir().unwrap();
    make_pki(dir.path());
    let pol = dir.path().join("policies");
    std::fs::create_dir(&pol).unwrap();
    std::fs::write(
        pol.join("mta-sts.good.test.txt"),
        policy("enforce", "mx.sts.test"),
    )
    .unwrap();
    std::fs::write(
        pol.join("mta-sts.bad.test.txt"),
        policy("enforce", "*.bad.test"),
    )
    .unwrap();
    std::fs::write(
        pol.join("mta-sts.try.test.txt"),
        policy("testing", "mx.try.test"),
    )
    .unwrap();
    std::fs::write(
        pol.join("mta-sts.plain.test.txt"),
        policy("enforce", "mx.plain.test"),
    )
    .unwrap();
    let _https = https_server(dir.path());

    // The receiver: STARTTLS with the mx.sts.test certificate.
    let port = free_port();
    let mut receiver = Instance::new(
        &receive_master_cf(port, ""),
        &format!(
            "{RECEIVE_MAIN_CF}smtpd_tls_security_level = may\nsmtpd_tls_cert_file = {}\nsmtpd_tls_key_file = {}\n",
            dir.path().join("server.pem").display(),
            dir.path().join("server.key").display()
        ),
    );
    receiver.start();
    receiver.wait_port(port);
    // Where the reports go.
    let sink_port = free_port();
    let sink = smtp_sink(&format!("127.0.0.1:{sink_port}"), &[]);
    // An MX without STARTTLS.
    let plain_port = free_port();
    let plain = smtp_sink(&format!("127.0.0.1:{plain_port}"), &[]);

    let mut records = vec![
        "--host-record=mx.sts.test,127.0.0.1".to_string(),
        "--host-record=mx.bad.test,127.0.0.1".to_string(),
        "--host-record=mx.try.test,127.0.0.1".to_string(),
        "--host-record=mx.nopolicy.test,127.0.0.1".to_string(),
        "--host-record=mx.plain.test,127.0.0.1".to_string(),
        "--mx-host=plain.test,mx.plain.test,10".to_string(),
        "--mx-host=good.test,mx.sts.test,10".to_string(),
        "--mx-host=bad.test,mx.bad.test,10".to_string(),
        "--mx-host=try.test,mx.try.test,10".to_string(),
        "--mx-host=nopolicy.test,mx.nopolicy.test,10".to_string(),
    ];
    for d in ["good", "bad", "try", "nopolicy", "plain"] {
        records.push(format!("--host-record=mta-sts.{d}.test,127.0.0.1"));
        records.push(format!(
            "--txt-record=_mta-sts.{d}.test,v=STSv1; id=2026{d};"
        ));
        records.push(format!(
            "--txt-record=_smtp._tls.{d}.test,v=TLSRPTv1; rua=mailto:tlsrpt@reports.test"
        ));
    }
    let args: Vec<&str> = records.iter().map(String::as_str).collect();
    let (_dns, dns) = sluice_suite::dnsmasq(&args);

    let smtpd = free_port();
    let cf = format!(
        "127.0.0.1:{smtpd} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\n"
    );
    let main = format!(
        "myhostname = out.test.example\nsmtpd_reject_unlisted_recipient = no\ndns_servers = {dns}\n\
         inet_protocols = ipv4\nminimal_backoff_time = 5s\nmaximal_backoff_time = 10s\n\
         smtp_mta_sts = yes\nsmtp_tls_CAfile = {ca}\nsmtp_tls_report_interval = 30s\n\
         smtp_tls_report_organization = sluice-test\n\
         transport_maps = inline:{{ good.test = smtp:good.test:{port}, bad.test = smtp:bad.test:{port}, \
         try.test = smtp:try.test:{port}, nopolicy.test = smtp:nopolicy.test:{port}, \
         plain.test = smtp:plain.test:{plain_port}, \
         reports.test = smtp:[127.0.0.1]:{sink_port} }}\n",
        ca = dir.path().join("ca.pem").display(),
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(smtpd);
    let send = |to: &str| {
        let (code, out) = sluice_suite::swaks(&[
            "--server",
            &format!("127.0.0.1:{smtpd}"),
            "--from",
            "s@out.test.example",
            "--to",
            to,
        ]);
        assert_eq!(code, 0, "{out}");
    };
    for to in [
        "a@good.test",
        "b@bad.test",
        "c@try.test",
        "d@nopolicy.test",
        "e@plain.test",
    ] {
        send(to);
    }

    // enforce, matching certificate: sent over verified TLS.
    let good = inst.wait_log(30, "to=<a@good.test>");
    assert!(good.contains("status=sent"), "{good}");
    inst.wait_log(5, "Verified TLS connection established to mx.sts.test");
    // enforce, certificate for another name: deferred, never sent.
    let bad = inst.wait_log(30, "to=<b@bad.test>");
    assert!(
        bad.contains("status=deferred")
            && bad.contains("dsn=4.7.5")
            && bad.contains("MTA-STS policy of bad.test: server certificate names [mx.sts.test")
            && bad.contains("do not match mx.bad.test"),
        "{bad}"
    );
    // testing: delivered anyway, the failure logged.
    let tried = inst.wait_log(30, "to=<c@try.test>");
    assert!(tried.contains("status=sent"), "{tried}");
    inst.wait_log(
        5,
        "MTA-STS policy of try.test (testing): server certificate names",
    );
    // A policy that cannot be fetched: logged, and the mail goes as
    // without one (no TLS is asked for at level none).
    let fetch = inst.wait_log(
        30,
        "mta-sts: nopolicy.test: policy id 2026nopolicy not fetched",
    );
    assert!(fetch.contains("HTTP status \"HTTP/1.0 404"), "{fetch}");
    let nop = inst.wait_log(30, "to=<d@nopolicy.test>");
    assert!(nop.contains("status=sent"), "{nop}");
    // The router logged the policies it fetched, and cached them.
    inst.wait_log(
        5,
        "mta-sts: good.test: policy id 2026good, mode enforce, max_age 86400, mx mx.sts.test",
    );
    assert!(inst.root().join("spool/sts/policy/try.test").is_file());
    // enforce, no STARTTLS: deferred, nothing sent.
    let p = inst.wait_log(30, "to=<e@plain.test>");
    assert!(
        p.contains("status=deferred") && p.contains("TLS is required, but was not offered"),
        "{p}"
    );
    assert_eq!(dumped(&plain), 0);
    let queued = receiver.queue_json();
    assert_eq!(
        queued.len(),
        3,
        "good, try and nopolicy arrived: {queued:?}"
    );

    // The counts are on disk, not in the processes that made them.
    let mut killed = inst.pids("smtp");
    killed.extend(inst.pids("router"));
    assert!(!killed.is_empty());
    for pid in &killed {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    wait_for(10, "the killed processes gone", || {
        killed
            .iter()
            .all(|p| !sluice_suite::running(*p))
            .then_some(())
    });
    send("f@good.test");
    let again = inst.wait_log(30, "to=<f@good.test>");
    assert!(again.contains("status=sent"), "{again}");

    // The reports: one per domain, each with its counts, read once each
    // is at the sink whole (a dump exists, empty, from MAIL FROM on).
    for d in ["good", "bad", "try", "nopolicy", "plain"] {
        let line = inst.wait_log(90, &format!("tlsrpt: {d}.test: report "));
        let qid = line
            .rsplit("queued as ")
            .next()
            .unwrap_or_else(|| panic!("no queue id in {line}"))
            .trim();
        sink_dump(&sink, &inst, qid, "tlsrpt@reports.test");
    }
    let files: Vec<String> = sent_dumps(&sink, &inst)
        .iter()
        .map(|d| d.path.display().to_string())
        .collect();
    let mut args: Vec<&str> = Vec::new();
    args.extend(files.iter().map(String::as_str));
    let out = inst.python("tlsrpt_json.py", &args);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |d: &str| -> String {
        text.lines()
            .find(|l| l.starts_with(&format!("{d} ")))
            .unwrap_or_else(|| panic!("no report for {d} in:\n{text}"))
            .to_string()
    };
    let field = |l: &str, k: &str| -> String {
        l.split(' ')
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k} in {l}"))
            .to_string()
    };
    let num = |l: &str, k: &str| -> u64 { field(l, k).parse().unwrap() };

    let g = line("good.test");
    assert_eq!(field(&g, "header"), "good.test");
    assert_eq!(field(&g, "type"), "sts");
    assert_eq!(field(&g, "mx"), "mx.sts.test");
    // Before and after the kill -9.
    assert_eq!((num(&g, "ok"), num(&g, "failed")), (2, 0), "{g}");
    assert_eq!(field(&g, "org"), "sluice-test", "{g}");

    let b = line("bad.test");
    assert_eq!(num(&b, "ok"), 0, "{b}");
    assert!(num(&b, "failed") >= 1, "{b}");
    assert_eq!(num(&b, "failed"), num(&b, "detail_sum"), "{b}");
    assert_eq!(field(&b, "results"), "certificate-host-mismatch", "{b}");

    let t = line("try.test");
    assert_eq!((num(&t, "ok"), num(&t, "failed")), (0, 1), "{t}");
    assert_eq!(field(&t, "results"), "certificate-host-mismatch", "{t}");
    assert_eq!(field(&t, "mx"), "mx.try.test");

    let n = line("nopolicy.test");
    assert_eq!(field(&n, "type"), "no-policy-found", "{n}");
    assert_eq!(num(&n, "ok"), 0, "{n}");
    assert!(num(&n, "failed") >= 1, "{n}");
    assert_eq!(field(&n, "results"), "sts-policy-fetch-error", "{n}");

    let p = line("plain.test");
    assert_eq!(num(&p, "ok"), 0, "{p}");
    assert!(num(&p, "failed") >= 1, "{p}");
    assert_eq!(field(&p, "results"), "starttls-not-supported", "{p}");
    inst.stop();
}
