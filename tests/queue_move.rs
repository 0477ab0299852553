//! Moving mail between instances (issue 16): two full instances on
//! loopback, the receiver's transferd on mutual TLS (a test CA made with
//! openssl), mail deferred at the sender (its relay is down) and some of
//! it held, moved with `sluice queue move`, then delivered by the receiver
//! to Postfix's smtp-sink. Checked: every message arrives once, holds are
//! kept, arrival times are kept (so the expiry is), a retried move finds
//! nothing twice, and a peer without a certificate is refused.

use std::path::Path;
use std::process::Command;

use sluice_suite::{dumped, free_port, smtp_sink, wait_for, Instance};

fn openssl(args: &[&str], dir: &Path) {
    let st = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl(1) is installed by scripts/test");
    assert!(st.success(), "openssl {args:?}");
}

/// A CA and, per name, a certificate for DNS:name and IP:127.0.0.1.
fn pki(dir: &Path, names: &[&str]) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-days",
        "2",
        "-subj",
        "/CN=Test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&ca, dir);
    for n in names {
        let (key, csr, ext, pem) = (
            format!("{n}.key"),
            format!("{n}.csr"),
            format!("{n}.ext"),
            format!("{n}.pem"),
        );
        let subj = format!("/CN={n}");
        let mut req = vec!["req", "-new"];
        req.extend(ec);
        req.extend(["-subj", &subj, "-keyout", &key, "-out", &csr]);
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
    // The instances may run as nobody: the keys must be readable to them.
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir)
        .status()
        .unwrap();
}

fn tls(pki: &Path, name: &str) -> String {
    format!(
        "cluster_tls_cert_file = {d}/{name}.pem\ncluster_tls_key_file = {d}/{name}.key\n\
         cluster_tls_CAfile = {d}/ca.pem\n",
        d = pki.display()
    )
}

struct Pair {
    a: Instance,
    a_port: u16,
    b: Instance,
    tport: u16,
    sink: sluice_suite::Sink,
    _pki: tempfile::TempDir,
}

/// Instance A relays to a port where nothing listens (its mail defers);
/// instance B takes transfers and relays to smtp-sink.
fn pair() -> Pair {
    let pki_dir = tempfile::Builder::new()
        .prefix("sluice-pki")
        .tempdir()
        .unwrap();
    pki(pki_dir.path(), &["a.test", "b.test"]);
    let sink_port = free_port();
    let sink = smtp_sink(&format!("127.0.0.1:{sink_port}"), &[]);
    let dead = free_port();
    let services = |port: u16, extra: &str| {
        format!(
            "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
             qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n{extra}"
        )
    };
    let a_port = free_port();
    let mut a = Instance::new(
        &services(a_port, ""),
        &format!(
            "myhostname = a.test\nrelayhost = [127.0.0.1]:{dead}\nsmtpd_reject_unlisted_recipient = no\n\
             minimal_backoff_time = 300s\nmaximal_backoff_time = 600s\n{}",
            tls(pki_dir.path(), "a.test")
        ),
    );
    a.start();
    a.wait_port(a_port);
    let b_port = free_port();
    let tport = free_port();
    let mut b = Instance::new(
        &services(b_port, "transfer unix - - n 300 1 transferd\n"),
        &format!(
            "myhostname = b.test\nrelayhost = [127.0.0.1]:{sink_port}\nsmtpd_reject_unlisted_recipient = no\n\
             transfer_listen = 127.0.0.1:{tport}\n{}",
            tls(pki_dir.path(), "b.test")
        ),
    );
    b.start();
    b.wait_port(b_port);
    b.wait_log(20, "taking moved mail on 127.0.0.1");
    Pair {
        a,
        a_port,
        b,
        tport,
        sink,
        _pki: pki_dir,
    }
}

fn send(port: u16, n: u32, rcpts: u32) {
    let st = Command::new("smtp-source")
        .args(["-s", "5", "-m", &n.to_string(), "-r", &rcpts.to_string()])
        .args(["-f", "bulk@sender.example", "-t", "someone@far.example"])
        .arg(format!("127.0.0.1:{port}"))
        .status()
        .expect("smtp-source is installed by scripts/test");
    assert!(st.success(), "smtp-source");
}

/// (queue id, state, arrival) per message, from `queue list --json`.
fn listing(i: &Instance) -> Vec<(String, String, u64)> {
    i.queue_json()
        .iter()
        .map(|l| {
            let field = |k: &str| {
                l.split(&format!("\"{k}\":"))
                    .nth(1)
                    .map(|r| {
                        r.split([',', '}'])
                            .next()
                            .unwrap()
                            .trim_matches('"')
                            .to_string()
                    })
                    .unwrap()
            };
            (
                field("queue_id"),
                field("queue_name"),
                field("arrival_time").parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn deferred_and_held_mail_moves_with_its_state_and_is_delivered_once() {
    let mut p = pair();
    send(p.a_port, 60, 2);
    wait_for(60, "A deferred all 60", || {
        let l = listing(&p.a);
        (l.len() == 60 && l.iter().all(|m| m.1 == "deferred")).then_some(())
    });
    let before = listing(&p.a);
    // A third on hold: they must stay held at B.
    let held: Vec<String> = before.iter().step_by(3).map(|m| m.0.clone()).collect();
    let mut args = vec!["queue", "hold"];
    args.extend(held.iter().map(String::as_str));
    assert!(p.a.sluice(&args).status.success());
    let to = format!("127.0.0.1:{}", p.tport);
    let out =
        p.a.sluice(&["queue", "move", "--to", &to, "--all", "--progress"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "move: {err}");
    assert!(err.contains("60 of 60 message(s) moved"), "{err}");
    assert!(listing(&p.a).is_empty(), "A keeps nothing");
    let alog = p.a.log();
    assert_eq!(alog.matches(": moved to b.test as ").count(), 60, "{alog}");
    // At B: the same arrivals, the holds kept, the rest deferred (their
    // retry times from A are minutes away: nothing is delivered early).
    let after = wait_for(20, "B lists all 60", || {
        let l = listing(&p.b);
        (l.len() == 60 && l.iter().filter(|m| m.1 == "hold").count() == held.len()).then_some(l)
    });
    let mut arrivals_a: Vec<u64> = before.iter().map(|m| m.2).collect();
    let mut arrivals_b: Vec<u64> = after.iter().map(|m| m.2).collect();
    arrivals_a.sort();
    arrivals_b.sort();
    assert_eq!(arrivals_a, arrivals_b, "arrival times (and so expiry) kept");
    assert_eq!(
        after.iter().filter(|m| m.1 == "deferred").count(),
        60 - held.len(),
        "{after:?}"
    );
    assert_eq!(
        p.b.log().matches(": moved from a.test as a.test/").count(),
        60
    );
    assert_eq!(
        dumped(&p.sink),
        0,
        "retry times kept: nothing delivered early"
    );
    // A pflogsumm-style count: a move is not a delivery on either side.
    assert!(!alog.contains("status=sent"));
    // Released and flushed at B, every message arrives once.
    assert!(p.b.sluice(&["queue", "release", "--all"]).status.success());
    assert!(p.b.sluice(&["queue", "flush"]).status.success());
    wait_for(60, "the sink has all 60", || {
        (dumped(&p.sink) == 60).then_some(())
    });
    wait_for(20, "B's queue is empty", || {
        listing(&p.b).is_empty().then_some(())
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(dumped(&p.sink), 60, "none twice");
    p.a.stop();
    p.b.stop();
}

#[test]
fn a_move_with_no_certificate_is_refused_and_the_mail_stays() {
    let mut p = pair();
    send(p.a_port, 3, 1);
    wait_for(60, "A deferred 3", || {
        (listing(&p.a).len() == 3).then_some(())
    });
    // openssl s_client without a client certificate: the handshake fails
    // at transferd, which logs the refusal.
    let st = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{}", p.tport)])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    let _ = st;
    p.b.wait_log(20, "refused unknown[127.0.0.1]");
    // A receiver nobody listens on: nothing moves, the mail stays (held),
    // the exit status says so.
    let out = p.a.sluice(&[
        "queue",
        "move",
        "--to",
        &format!("127.0.0.1:{}", free_port()),
        "--all",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("0 of 3 message(s) moved"), "{err}");
    let l = listing(&p.a);
    assert_eq!(l.len(), 3);
    assert!(l.iter().all(|m| m.1 == "hold"), "{l:?}");
    // Released, they are A's to deliver again.
    assert!(p.a.sluice(&["queue", "release", "--all"]).status.success());
    assert!(listing(&p.a).iter().all(|m| m.1 != "hold"));
    p.a.stop();
    p.b.stop();
}
