//! Moving mail between instances (issue 16): two full instances on
//! loopback, the receiver's transferd on mutual TLS (a test CA made with
//! openssl), mail deferred at the sender (its relay is down) and some of
//! it held, moved with `sluice queue move`, then delivered by the receiver
//! to Postfix's smtp-sink. Checked: every message arrives once, holds are
//! kept, arrival times are kept (so the expiry is), a retried move finds
//! nothing twice, and a peer without a certificate is refused.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use sluice_suite::{dumped, free_port, smtp_sink, wait_for, Instance};

/// The test CA and certificates (DNS:name, IP:127.0.0.1), readable by
/// the instances' user.
fn pki(dir: &Path, names: &[&str]) {
    sluice_suite::pki::pki(dir, names);
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
    pki: tempfile::TempDir,
}

/// Instance A relays to a port where nothing listens (its mail defers);
/// instance B takes transfers and relays to smtp-sink.
fn pair() -> Pair {
    pair_with(
        "minimal_backoff_time = 300s\nmaximal_backoff_time = 600s\n",
        "",
    )
}

/// `pair` with lines added to A's and B's main.cf.
fn pair_with(a_extra: &str, b_extra: &str) -> Pair {
    let pki_dir = tempfile::Builder::new()
        .prefix("sluice-pki")
        .tempdir()
        .unwrap();
    pki(pki_dir.path(), &["a.test", "b.test", "c.test"]);
    let sink_port = free_port();
    let sink = smtp_sink(&format!("127.0.0.1:{sink_port}"), &[]);
    let dead = free_port();
    let services = |port: u16, extra: &str| {
        format!(
            "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
             qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n{extra}"
        )
    };
    let a_extra = a_extra
        .replace("{SINK}", &sink_port.to_string())
        .replace("{DEAD}", &dead.to_string());
    let b_extra = b_extra
        .replace("{SINK}", &sink_port.to_string())
        .replace("{DEAD}", &dead.to_string());
    let a_port = free_port();
    let mut a = Instance::new(
        &services(a_port, ""),
        &format!(
            "myhostname = a.test\nrelayhost = [127.0.0.1]:{dead}\nsmtpd_reject_unlisted_recipient = no\n\
             {a_extra}{}",
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
             transfer_listen = 127.0.0.1:{tport}\n{b_extra}{}",
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
        pki: pki_dir,
    }
}

fn send(port: u16, n: u32, rcpts: u32) {
    let st = source(port, n, 5, rcpts)
        .status()
        .expect("smtp-source is installed by scripts/test");
    assert!(st.success(), "smtp-source");
}

/// smtp-source sending `n` messages of `rcpts` recipients over `sessions`.
fn source(port: u16, n: u32, sessions: u32, rcpts: u32) -> Command {
    let mut c = Command::new("smtp-source");
    c.args(["-s", &sessions.to_string(), "-m", &n.to_string()])
        .args(["-r", &rcpts.to_string()])
        .args(["-f", "bulk@sender.example", "-t", "someone@far.example"])
        .arg(format!("127.0.0.1:{port}"));
    c
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

const N: usize = 10_000;

#[test]
fn ten_thousand_deferred_and_held_messages_move_with_their_state_and_are_delivered_once() {
    let mut p = pair();
    send(p.a_port, N as u32, 2);
    wait_for(240, "A deferred them all", || {
        let l = listing(&p.a);
        (l.len() == N && l.iter().all(|m| m.1 == "deferred")).then_some(())
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
    assert!(
        err.contains(&format!("{N} of {N} message(s) moved")),
        "{err}"
    );
    assert!(listing(&p.a).is_empty(), "A keeps nothing");
    let alog = p.a.log();
    assert_eq!(alog.matches(": moved to b.test as ").count(), N);
    // At B: the same arrivals, the holds kept, the rest deferred (their
    // retry times from A are minutes away: nothing is delivered early).
    let after = wait_for(60, "B lists them all", || {
        let l = listing(&p.b);
        (l.len() == N && l.iter().filter(|m| m.1 == "hold").count() == held.len()).then_some(l)
    });
    let mut arrivals_a: Vec<u64> = before.iter().map(|m| m.2).collect();
    let mut arrivals_b: Vec<u64> = after.iter().map(|m| m.2).collect();
    arrivals_a.sort();
    arrivals_b.sort();
    assert_eq!(arrivals_a, arrivals_b, "arrival times (and so expiry) kept");
    assert_eq!(
        after.iter().filter(|m| m.1 == "deferred").count(),
        N - held.len()
    );
    assert_eq!(
        p.b.log().matches(": moved from a.test as a.test/").count(),
        N
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
    wait_for(300, "the sink has them all", || {
        (dumped(&p.sink) == N).then_some(())
    });
    wait_for(60, "B's queue is empty", || {
        listing(&p.b).is_empty().then_some(())
    });
    let got = arrivals_at_sink(&p.sink);
    assert_eq!(got.len(), N, "each once");
    assert!(got.values().all(|n| *n == 1));
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
    // sluice check loads transferd's certificates as transferd does.
    let out = p.b.sluice(&["check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let main = p.b.etc().join("main.cf");
    let text = std::fs::read_to_string(&main).unwrap();
    std::fs::write(
        &main,
        format!("{text}cluster_tls_key_file = /nonexistent/b.key\n"),
    )
    .unwrap();
    let out = p.b.sluice(&["check"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("/nonexistent/b.key"),
        "{err}"
    );
    std::fs::write(&main, text).unwrap();
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

/// pflogsumm's report on an instance's log.
fn pflogsumm(i: &Instance) -> String {
    let out = Command::new("pflogsumm")
        .args(["--syslog_name=sluice", "--detail=0"])
        .arg(i.root().join("maillog"))
        .output()
        .expect("pflogsumm is installed by scripts/test");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A total from pflogsumm's "Grand Totals".
fn total(summary: &str, what: &str) -> u64 {
    summary
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            let n = words.next()?.parse().ok()?;
            (words.next()? == what).then_some(n)
        })
        .unwrap_or_else(|| panic!("no {what:?} total in:\n{summary}"))
}

/// The sender's queue id of every message the sink got (from the
/// Received: line A's cleanup wrote), and how many times each came.
fn arrivals_at_sink(sink: &sluice_suite::Sink) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(sink.dir.path()).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap_or_default();
        // "by a.test (Sluice) with SMTP id …" (ESMTP for an EHLO client).
        let id_part = text
            .split("by a.test (Sluice) with ")
            .nth(1)
            .and_then(|r| r.split_once(" id "))
            .map(|(_, r)| r);
        if let Some(rest) = id_part {
            let id: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            *out.entry(id).or_default() += 1;
        }
    }
    out
}

fn spawn_move(a: &Instance, args: &[&str]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(sluice_suite::bin_dir().join("sluice"));
    cmd.arg("-c")
        .arg(a.etc())
        .args(["queue", "move"])
        .args(args);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    if let Some((uid, gid)) = a.run_as {
        cmd.uid(uid).gid(gid);
    }
    cmd.spawn().expect("run sluice")
}

/// A small deterministic generator, seeded from the clock and printed,
/// for the kill moments.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn kill_9_of_mover_sender_or_receiver_mid_move_loses_and_doubles_nothing() {
    // A's mail is deferred for minutes (its relay is down): idle, so
    // every message can move at once; B is flushed at the end.
    let mut p = pair();
    const N: usize = 5000;
    let st = source(p.a_port, N as u32, 20, 1)
        .status()
        .expect("smtp-source is installed by scripts/test");
    assert!(st.success());
    wait_for(120, "A deferred all of them", || {
        let l = listing(&p.a);
        (l.len() == N && l.iter().all(|m| m.1 == "deferred")).then_some(())
    });
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("kill moments seeded with {seed}");
    let mut rng = Lcg(seed);
    let to = format!("127.0.0.1:{}", p.tport);
    for round in 0..4 {
        let mut mover = spawn_move(&p.a, &["--to", &to, "--all", "--rate", "300/1"]);
        std::thread::sleep(Duration::from_millis(300 + rng.below(1200)));
        match round % 4 {
            // The mover itself.
            0 => {}
            // The receiver's transferd, then its qmgr.
            1 => {
                let t = p.b.pids("transfer");
                sys::process::signal(t[0], 9).unwrap();
                p.b.wait_pid("transfer", &t);
            }
            2 => {
                let q = p.b.pids("qmgr");
                sys::process::signal(q[0], 9).unwrap();
                p.b.wait_pid("qmgr", &q);
            }
            // The sender's qmgr.
            _ => {
                let q = p.a.pids("qmgr");
                sys::process::signal(q[0], 9).unwrap();
                p.a.wait_pid("qmgr", &q);
            }
        }
        let _ = mover.kill();
        let out = mover.wait_with_output().unwrap();
        eprintln!(
            "round {round}: {} left at A; the mover said: {}",
            listing(&p.a).len(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        !listing(&p.a).is_empty(),
        "the kills came in the middle of moves"
    );
    // Once more without a kill: everything left moves.
    wait_for(30, "a move with everyone up", || {
        let out = p.a.sluice(&["queue", "move", "--to", &to, "--all"]);
        out.status.success().then_some(())
    });
    assert!(listing(&p.a).is_empty(), "A keeps nothing");
    wait_for(30, "B has every message", || {
        (listing(&p.b).len() == N).then_some(())
    });
    assert!(p.b.sluice(&["queue", "flush"]).status.success());
    let deadline = Instant::now() + Duration::from_secs(180);
    while arrivals_at_sink(&p.sink).len() < N {
        if Instant::now() > deadline {
            let l = listing(&p.b);
            panic!(
                "the sink has {} of {N}; B holds {} ({} on hold); A holds {}",
                arrivals_at_sink(&p.sink).len(),
                l.len(),
                l.iter().filter(|m| m.1 == "hold").count(),
                listing(&p.a).len()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_for(30, "B's queue is empty", || {
        listing(&p.b).is_empty().then_some(())
    });
    let got = arrivals_at_sink(&p.sink);
    let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert_eq!(got.len(), N);
    p.a.stop();
    p.b.stop();
}

#[test]
fn partly_delivered_mail_moves_its_other_recipients_and_expires_on_its_first_clock() {
    // A delivers good.example and defers far.example; B cannot reach
    // far.example either, and its maximal_queue_lifetime is 20 s: the moved
    // message expires 20 s after it came to A, not 20 s after the move.
    let mut p = pair_with(
        "transport_maps = inline:{ good.example = smtp:[127.0.0.1]:{SINK} }\n\
         minimal_backoff_time = 2s\nmaximal_backoff_time = 2s\nhost_retry_time = 1s\n",
        "transport_maps = inline:{ far.example = smtp:[127.0.0.1]:{DEAD} }\n\
         maximal_queue_lifetime = 20s\nbounce_queue_lifetime = 20s\n\
         minimal_backoff_time = 2s\nmaximal_backoff_time = 2s\nhost_retry_time = 1s\n",
    );
    let sent = Instant::now();
    let (code, out) = sluice_suite::swaks(&[
        "--server",
        &format!("127.0.0.1:{}", p.a_port),
        "--from",
        "alice@sender.example",
        "--to",
        "one@good.example,two@far.example",
    ]);
    assert_eq!(code, 0, "{out}");
    p.a.wait_log(30, "to=<one@good.example>");
    wait_for(30, "two@far.example deferred at A", || {
        p.a.log().contains("to=<two@far.example>").then_some(())
    });
    std::thread::sleep(Duration::from_secs(8));
    let to = format!("127.0.0.1:{}", p.tport);
    let out = p.a.sluice(&["queue", "move", "--to", &to, "--all"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at_b = wait_for(10, "B has it", || {
        let j = p.b.queue_json();
        (!j.is_empty()).then_some(j)
    });
    assert!(
        at_b[0].contains("two@far.example") && !at_b[0].contains("one@good.example"),
        "only the undelivered recipient moves: {at_b:?}"
    );
    p.b.wait_log(40, "message expired (maximal_queue_lifetime)");
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(27),
        "expired {took:?} after arrival: the lifetime restarted at the move"
    );
    let to_good = std::fs::read_dir(p.sink.dir.path())
        .unwrap()
        .filter(|e| {
            std::fs::read_to_string(e.as_ref().unwrap().path())
                .unwrap_or_default()
                .contains("X-Rcpt-Args: <one@good.example>")
        })
        .count();
    assert_eq!(to_good, 1, "good.example got its copy once, from A");
    // pflogsumm counts the move as neither a delivery nor a new message
    // (B's one delivery is the bounce to alice, through the sink).
    let a = pflogsumm(&p.a);
    assert_eq!(
        (total(&a, "received"), total(&a, "delivered")),
        (1, 1),
        "{a}"
    );
    let b = pflogsumm(&p.b);
    assert_eq!(total(&b, "received"), 0, "{b}");
    assert!(!p
        .b
        .log()
        .contains("to=<two@far.example>, relay=127.0.0.1[127.0.0.1]"));
    assert_eq!(total(&b, "bounced"), 1, "{b}");
    p.a.stop();
    p.b.stop();
}

#[test]
fn a_copy_of_a_live_spool_moves_offline_every_committed_message() {
    let mut p = pair();
    send(p.a_port, 200, 1);
    wait_for(60, "A has 200", || {
        (listing(&p.a).len() == 200).then_some(())
    });
    // cp -a while more mail is arriving: the crash case, with partial
    // files and a journal cut anywhere.
    let more = source(p.a_port, 300, 5, 1).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let rescue = tempfile::Builder::new()
        .prefix("sluice-rescue")
        .tempdir()
        .unwrap();
    Command::new("chmod")
        .arg("755")
        .arg(rescue.path())
        .status()
        .unwrap();
    let copy = rescue.path().join("spool");
    let st = Command::new("cp")
        .arg("-a")
        .arg(p.a.root().join("spool"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success());
    let mut more = more;
    let _ = more.wait();
    let to = format!("127.0.0.1:{}", p.tport);
    let copy_s = copy.to_str().unwrap();
    let out = p.a.sluice(&[
        "queue",
        "move",
        "--to",
        &to,
        "--from-spool",
        copy_s,
        "--from-name",
        "a.test",
        "--all",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    let moved: usize = err
        .split("move: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        moved >= 200,
        "every message committed before the copy moves: {err}"
    );
    // Those never tried at A are due at B, which delivers them at once.
    wait_for(30, "B has them, queued or delivered", || {
        (listing(&p.b).len() + dumped(&p.sink) == moved).then_some(())
    });
    // The copy's journal says they left: a second run finds none.
    let out = p.a.sluice(&[
        "queue",
        "move",
        "--to",
        &to,
        "--from-spool",
        copy_s,
        "--all",
    ]);
    let err2 = String::from_utf8_lossy(&out.stderr);
    assert!(err2.contains("0 of 0 message(s) moved"), "{err2}");
    // A running instance's spool is refused.
    let out = p.a.sluice(&[
        "queue",
        "move",
        "--to",
        &to,
        "--from-spool",
        p.a.root().join("spool").to_str().unwrap(),
        "--all",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("its instance is running"));
    p.a.stop();
    p.b.stop();
}

#[test]
fn a_rate_of_100_per_second_holds_over_30_seconds() {
    let mut p = pair();
    const N: usize = 3000;
    let st = source(p.a_port, N as u32, 20, 1).status().unwrap();
    assert!(st.success());
    wait_for(120, "A has them all", || {
        (listing(&p.a).len() == N).then_some(())
    });
    let to = format!("127.0.0.1:{}", p.tport);
    let started = Instant::now();
    let mut mover = spawn_move(&p.a, &["--to", &to, "--all", "--rate", "100/1"]);
    let count = |b: &Instance| b.log().matches(": moved from a.test as ").count();
    std::thread::sleep(Duration::from_secs(15));
    let half = count(&p.b);
    let st = mover.wait().unwrap();
    let took = started.elapsed();
    assert!(st.success());
    assert_eq!(count(&p.b), N);
    // 3,000 at 100/s: 30 s, within 5 %, and evenly (half by 15 s).
    assert!(
        (Duration::from_millis(28_500)..=Duration::from_millis(31_500)).contains(&took),
        "{N} moved in {took:?}"
    );
    assert!(
        (1425..=1575).contains(&half),
        "{half} moved in the first 15 s"
    );
    p.a.stop();
    p.b.stop();
}

#[test]
fn two_receivers_take_turns() {
    let mut p = pair();
    let c_port = free_port();
    let c_tport = free_port();
    let mut c = Instance::new(
        &format!(
            "127.0.0.1:{c_port} inet n - n - - smtpd\ncleanup unix - - n - 0 cleanup\n\
             qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\n\
             transfer unix - - n 300 1 transferd\n"
        ),
        &format!(
            "myhostname = c.test\ntransfer_listen = 127.0.0.1:{c_tport}\n{}",
            tls(p.pki.path(), "c.test")
        ),
    );
    c.start();
    c.wait_log(20, "taking moved mail on 127.0.0.1");
    send(p.a_port, 100, 1);
    wait_for(60, "A deferred 100", || {
        let l = listing(&p.a);
        (l.len() == 100 && l.iter().all(|m| m.1 == "deferred")).then_some(())
    });
    let out = p.a.sluice(&[
        "queue",
        "move",
        "--to",
        &format!("127.0.0.1:{}", p.tport),
        "--to",
        &format!("127.0.0.1:{c_tport}"),
        "--all",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(20, "B and C have them", || {
        (listing(&p.b).len() + listing(&c).len() == 100).then_some(())
    });
    assert_eq!(
        (listing(&p.b).len(), listing(&c).len()),
        (50, 50),
        "in turn"
    );
    let alog = p.a.log();
    assert_eq!(alog.matches(": moved to b.test as ").count(), 50);
    assert_eq!(alog.matches(": moved to c.test as ").count(), 50);
    c.stop();
    p.a.stop();
    p.b.stop();
}
