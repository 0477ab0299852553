//! A full disk under the queue: qmgr rides it out.
//!
//! The queue lives on a small tmpfs the test mounts (so these tests need
//! root, and fail saying so otherwise). The disk is filled with a file, as
//! another program on the same file system would, while mail arrives, and
//! freed again. What is checked is qmgr's side: it stays the same process
//! (no crash loop, no throttle), every message that got a 250 is delivered,
//! mail is accepted again within 2 s of space coming back, a qmgr
//! restarted on the full disk recovers and serves the queue, and a bounce
//! that cannot be written while the disk is full is sent once it can.
//! `sluice queue list` answers at once when qmgr does not.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sluice_suite::testkit::ScriptedSink;
use sluice_suite::{free_port, smtp_sink, swaks, wait_for, Instance};

/// Unmounts the test's tmpfs, lazily (daemons may still hold it).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// An instance relaying to 127.0.0.1:`relay_port`, its queue on a tmpfs of `mb` MB.
fn on_tmpfs(mb: u32, relay_port: u16, extra: &str) -> (Instance, Unmount, PathBuf, u16) {
    assert!(
        sys::is_root(),
        "the full-disk tests mount a tmpfs and need root: run them as root (scripts/test does in CI)"
    );
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    // queue_minfree = 0: what is tested is qmgr on a disk that is really
    // full, not smtpd's refusal before it.
    let main = format!(
        "myhostname = mx.test.example\nmydomain = test.example\nrelayhost = [127.0.0.1]:{relay_port}\n\
         smtpd_reject_unlisted_recipient = no\nqueue_minfree = 0\nqueue_run_delay = 1s\n\
         minimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n{extra}"
    );
    let inst = Instance::new(&cf, &main);
    // The whole queue directory is the small file system.
    let mnt = inst.root().join("spool");
    std::fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={mb}m,mode=0777"), "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount a tmpfs on {}", mnt.display());
    let guard = Unmount(mnt.clone());
    (inst, guard, mnt, port)
}

/// Fills the file system of `dir` to the last byte with `dir/filler`.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    for chunk in [1 << 20, 64 << 10, 4 << 10, 512, 1] {
        let buf = vec![0x5au8; chunk];
        while f.write_all(&buf).is_ok() {}
    }
    let _ = f.sync_all();
    path
}

fn send(port: u16, from: &str, to: &str, subject: &str) -> (i32, String) {
    swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        from,
        "--to",
        to,
        "--header",
        &format!("Subject: {subject}"),
        "--timeout",
        "20",
    ])
}

fn qmgr_pid(inst: &Instance) -> i32 {
    let pids = inst.pids("qmgr");
    assert_eq!(pids.len(), 1, "one qmgr: {pids:?}");
    pids[0]
}

/// Message-ids acknowledged with 250 by send_many.py.
fn acknowledged(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

fn sink_text(dir: &Path) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        all.push_str(&String::from_utf8_lossy(
            &std::fs::read(e.path()).unwrap_or_default(),
        ));
    }
    all
}

#[test]
fn full_disk_keeps_qmgr_alive_loses_nothing_and_accepts_again_within_2s() {
    let sink_port = free_port();
    let sink = smtp_sink(&format!("127.0.0.1:{sink_port}"), &[]);
    let (mut inst, _unmount, mnt, port) = on_tmpfs(24, sink_port, "");
    inst.start();
    inst.wait_port(port);
    let pid = qmgr_pid(&inst);
    let acked = inst.root().join("acked.txt");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/send_many.py");
    let mut load = Command::new("python3")
        .arg(&script)
        .args(["127.0.0.1", &port.to_string(), "400", "4"])
        .arg(&acked)
        .arg("3000")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(30, "some mail accepted", || {
        (!acknowledged(&acked).is_empty()).then_some(())
    });
    // The disk fills while mail arrives, and stays full for a while.
    let filler = fill(&mnt);
    inst.wait_log(30, "mail is refused and delivery paused");
    let before = acknowledged(&acked).len();
    let (code, out) = send(
        port,
        "a@test.example",
        "full@elsewhere.example",
        "while full",
    );
    assert_ne!(code, 0, "no 250 on a full disk: {out}");
    assert!(
        out.contains("452 4.3.1") || out.contains("451 4.3.0"),
        "{out}"
    );
    std::thread::sleep(Duration::from_secs(3));
    // qmgr is the same process, and answers.
    assert_eq!(qmgr_pid(&inst), pid, "qmgr was not restarted");
    let list = inst.sluice(&["queue", "list"]);
    assert!(
        list.status.success(),
        "queue list on a full disk: {}",
        String::from_utf8_lossy(&list.stderr)
    );
    let during = acknowledged(&acked).len();

    // Space returns: mail is accepted again within 2 s.
    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    let out = wait_for(10, "acceptance to resume", || {
        let (code, out) = send(port, "a@test.example", "after@elsewhere.example", "after");
        (code == 0).then_some(out)
    });
    let resumed = freed.elapsed();
    assert!(out.contains("250"), "{out}");
    assert!(
        resumed < Duration::from_secs(2),
        "accepted again {resumed:?} after space returned"
    );
    let status = load.wait().unwrap();
    assert!(status.success());
    let ids = acknowledged(&acked);
    assert!(
        ids.len() > before,
        "mail went on being accepted after the disk was freed"
    );
    eprintln!(
        "acknowledged: {before} before the disk was full, {} while full, {} in all; accepted again after {resumed:?}",
        during - before,
        ids.len()
    );
    // Every message that got a 250 is delivered.
    wait_for(120, "every acknowledged message at the sink", || {
        let text = sink_text(sink.dir.path());
        ids.iter().all(|m| text.contains(m.as_str())).then_some(())
    });
    assert_eq!(qmgr_pid(&inst), pid, "qmgr was not restarted");
    let log = inst.log();
    let fatal: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("qmgr") && l.contains("fatal"))
        .collect();
    assert!(fatal.is_empty(), "{fatal:?}");
    let stalls = log.matches("mail is refused and delivery paused").count();
    let resumes = log.matches("journal: writable again").count();
    assert!(stalls >= 1 && resumes >= 1, "{log}");
    assert!(stalls <= resumes + 1, "one warning per state change: {log}");
    assert!(!log.contains("throttling"), "{log}");
    inst.stop();
}

#[test]
fn qmgr_restarted_on_a_full_disk_recovers_and_serves_the_queue() {
    // Nothing listens at the relay port yet: the mail stays queued.
    let relay_port = free_port();
    let (mut inst, _unmount, mnt, port) = on_tmpfs(16, relay_port, "");
    inst.start();
    inst.wait_port(port);
    for n in 0..5 {
        let (code, out) = send(
            port,
            "a@test.example",
            &format!("r{n}@elsewhere.example"),
            &format!("queued-{n}"),
        );
        assert_eq!(code, 0, "{out}");
    }
    wait_for(30, "five queued messages", || {
        (inst.queue_json().len() == 5).then_some(())
    });
    let filler = fill(&mnt);
    let old = qmgr_pid(&inst);
    sys::process::signal(old, 9).unwrap();
    let new = inst.wait_pid("qmgr", &[old]);
    let line = inst.wait_log(30, &format!("[{new}]: recovered"));
    assert!(line.contains("recovered 5 messages"), "{line}");
    let q = wait_for(10, "the queue from the new qmgr", || {
        let out = inst.sluice(&["queue", "list", "--json"]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).lines().count())
    });
    assert_eq!(q, 5);
    let log = inst.log();
    assert!(!log.contains("fatal: recovery"), "{log}");
    // Space returns and the peer comes up: everything is delivered by the same qmgr.
    std::fs::remove_file(&filler).unwrap();
    let sink = smtp_sink(&format!("127.0.0.1:{relay_port}"), &[]);
    let out = inst.sluice(&["queue", "flush"]);
    assert!(out.status.success());
    wait_for(60, "the five messages at the sink", || {
        let text = sink_text(sink.dir.path());
        (0..5)
            .all(|n| text.contains(&format!("queued-{n}")))
            .then_some(())
    });
    assert_eq!(qmgr_pid(&inst), new);
    inst.stop();
}

#[test]
fn a_bounce_that_cannot_be_written_on_a_full_disk_is_sent_later() {
    let relay_port = free_port();
    let (mut inst, _unmount, mnt, port) = on_tmpfs(16, relay_port, "");
    inst.start();
    inst.wait_port(port);
    let (code, out) = send(
        port,
        "owner@test.example",
        "bounce-me@elsewhere.example",
        "doomed",
    );
    assert_eq!(code, 0, "{out}");
    wait_for(30, "the message deferred", || {
        inst.queue_json()
            .iter()
            .any(|l| l.contains("bounce-me"))
            .then_some(())
    });
    // The disk fills; then the peer refuses the recipient for good.
    let filler = fill(&mnt);
    let sink = ScriptedSink::start_on(relay_port);
    sink.rcpt_reply(
        "bounce-me",
        "550 5.1.1 <bounce-me@elsewhere.example>: no such user",
    );
    let pid = qmgr_pid(&inst);
    let out = inst.sluice(&["queue", "flush"]);
    assert!(out.status.success());
    inst.wait_log(30, "status=bounced");
    inst.wait_log(30, "mail is refused and delivery paused");
    std::thread::sleep(Duration::from_secs(2));
    let dsn = |s: &ScriptedSink| {
        s.messages()
            .into_iter()
            .any(|m| m.from.is_empty() && m.rcpts.iter().any(|r| r.contains("owner@test.example")))
    };
    assert!(
        !dsn(&sink),
        "a notice was sent while nothing could be written"
    );
    // Space returns: the notice owed is built and sent.
    std::fs::remove_file(&filler).unwrap();
    wait_for(60, "the non-delivery notice at the sink", || {
        dsn(&sink).then_some(())
    });
    assert_eq!(qmgr_pid(&inst), pid, "qmgr was not restarted");
    wait_for(30, "the bounced message removed", || {
        inst.queue_json().is_empty().then_some(())
    });
    inst.stop();
}

#[test]
fn queue_list_says_at_once_when_qmgr_is_not_answering() {
    let port = free_port();
    let mut inst = Instance::new(
        &sluice_suite::receive_master_cf(port, ""),
        sluice_suite::RECEIVE_MAIN_CF,
    );
    inst.start();
    inst.wait_port(port);
    assert!(inst.sluice(&["queue", "list"]).status.success());
    // A stopped qmgr: master still holds its socket, so connecting works
    // and only the missing answer tells.
    let pid = qmgr_pid(&inst);
    sys::process::signal(pid, 19).unwrap();
    let t = Instant::now();
    let out = inst.sluice(&["queue", "list"]);
    let took = t.elapsed();
    sys::process::signal(pid, 18).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("queue manager is not running or not answering"),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "answered after {took:?}");
    assert!(inst.sluice(&["queue", "list"]).status.success());
    // The whole mail system stopped: said at once.
    inst.stop();
    let t = Instant::now();
    let out = inst.sluice(&["queue", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("queue manager is not running"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}
