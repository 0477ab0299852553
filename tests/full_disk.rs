//! A full disk under the queue: 452s and nothing else.
//!
//! The queue lives on a small tmpfs the test mounts (so these tests need
//! root, and fail saying so otherwise). The disk is filled with a file, as
//! another program on the same file system would, while mail arrives, and
//! freed again. What is checked: MAIL FROM gets `452 4.3.1` while free
//! space is at or below `queue_minfree`; a message whose disk fills while
//! it is sent gets a 4xx at end of data, promptly; qmgr stays the same
//! process (no crash loop, no throttle); every message that got a 250 is
//! delivered; mail is accepted again within 2 s of space coming back; a
//! qmgr restarted on the full disk recovers and serves the queue; and a
//! bounce that cannot be written while the disk is full is sent once it
//! can. `sluice queue list` answers at once when qmgr does not. A journal
//! segment written ahead takes in-flight mail on the full disk.
//!
//! Filling "to the last byte" leaves the slack of each file's last page:
//! tmpfs allocates whole pages, so a journal record shorter than a page may
//! still be written. Messages whose journal records must fail are made
//! larger than a page (they stay inline in the journal below 64 KiB).
//! For the same reason the journal's segments are kept at 4 KiB here: a
//! segment written ahead is space the journal holds in reserve (records
//! overwrite its zeros), and with the default size a full disk would first
//! be met by up to two segments of reserve, not by a failed write.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_suite::smtp_client::SmtpClient;
use sluice_suite::testkit::ScriptedSink;
use sluice_suite::{free_port, sent_dumps, smtp_sink, swaks, wait_for, Instance, OnTmpfs, Sink};

/// An instance relaying to 127.0.0.1:`relay_port`, its whole queue
/// directory on a tmpfs of `mb` MB, journal segments of 4 KiB; returns it
/// and its SMTP port.
fn on_tmpfs(mb: u32, relay_port: u16, queue_minfree: u64) -> (OnTmpfs, u16) {
    on_tmpfs_segments(
        mb,
        relay_port,
        queue_minfree,
        "journal_segment_size = 4096\n",
    )
}

/// As `on_tmpfs`, with `segments` as the journal's main.cf line (empty:
/// the default size).
fn on_tmpfs_segments(
    mb: u32,
    relay_port: u16,
    queue_minfree: u64,
    segments: &str,
) -> (OnTmpfs, u16) {
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    // message_size_limit = 1 MB: with the default 10 MB, Postfix's rule of
    // 1.5 times the limit free would refuse every MAIL FROM on a file
    // system this small, and no message would reach the disk as it fills.
    let main = format!(
        "myhostname = mx.test.example\nmydomain = test.example\nrelayhost = [127.0.0.1]:{relay_port}\n\
         smtpd_reject_unlisted_recipient = no\nqueue_minfree = {queue_minfree}\n\
         message_size_limit = 1000000\nqueue_run_delay = 1s\n\
         minimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n{segments}"
    );
    let inst = Instance::new(&cf, &main);
    (OnTmpfs::mount(inst, "spool", mb), port)
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

/// Fills the file system of `dir` until about `leave` bytes are free.
fn fill_leaving(dir: &Path, leave: u64) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let mut todo = free(dir).saturating_sub(leave);
    let buf = vec![0x5au8; 1 << 20];
    while todo > 0 {
        let n = todo.min(buf.len() as u64) as usize;
        f.write_all(&buf[..n]).unwrap();
        todo -= n as u64;
    }
    f.sync_all().unwrap();
    path
}

fn free(dir: &Path) -> u64 {
    sys::fs::free_space(dir).unwrap()
}

fn send(port: u16, to: &str, subject: &str) -> (i32, String) {
    swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "a@test.example",
        "--to",
        to,
        "--header",
        &format!("Subject: {subject}"),
        "--timeout",
        "20",
    ])
}

/// The reply to MAIL FROM in a new session (which then quits).
fn mail_from_reply(port: u16) -> String {
    let (mut c, greeting) = SmtpClient::connect(port);
    assert!(greeting.starts_with("220"), "{greeting}");
    c.expect("EHLO client.test.example", "250");
    let (r, _) = c.timed("MAIL FROM:<a@test.example>");
    c.send("QUIT\r\n");
    r
}

fn qmgr_pid(inst: &Instance) -> i32 {
    let pids = inst.pids("qmgr");
    assert_eq!(pids.len(), 1, "one qmgr: {pids:?}");
    pids[0]
}

/// send_many.py: `n` messages of `size` bytes to elsewhere.example over
/// four sessions; each one that got a 250 is written to `acked`.
fn load(port: u16, n: u32, size: u32, acked: &Path) -> Child {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/send_many.py");
    Command::new("python3")
        .arg(&script)
        .args(["127.0.0.1", &port.to_string(), &n.to_string(), "4"])
        .arg(acked)
        .args([&size.to_string(), "elsewhere.example"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Message-ids acknowledged with 250 by send_many.py.
fn acknowledged(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

/// Every message `inst` has delivered to `sink`, whole (smtp-sink fills a
/// dump as the data comes: one that exists may hold part of a message).
fn sent_text(sink: &Sink, inst: &Instance) -> String {
    sent_dumps(sink, inst).into_iter().map(|d| d.text).collect()
}

/// Every dump at `dir`, whole or begun.
fn sink_text(dir: &Path) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        all.push_str(&String::from_utf8_lossy(
            &std::fs::read(e.path()).unwrap_or_default(),
        ));
    }
    all
}

/// A body of 78-byte lines, at least `total` bytes in all.
fn body(total: usize) -> String {
    let line = format!("{}\r\n", "y".repeat(76));
    line.repeat(total / line.len() + 1)
}

#[test]
fn full_disk_keeps_qmgr_alive_loses_nothing_and_accepts_again_within_2s() {
    let sink_port = free_port();
    let sink = smtp_sink(&format!("127.0.0.1:{sink_port}"), &[]);
    // queue_minfree = 0: what is tested is a disk that is really full,
    // filled by another program while messages are on their way in.
    let (mut inst, port) = on_tmpfs(24, sink_port, 0);
    let mnt = inst.mnt().to_path_buf();
    inst.start();
    inst.wait_port(port);
    let pid = qmgr_pid(&inst);

    // Mail arrives: a load of 8 kB messages, and one session of our own
    // that stops halfway through its message.
    let acked = inst.root().join("acked.txt");
    let mut busy = sluice_suite::Kill(load(port, 400, 8000, &acked));
    wait_for(30, "some mail accepted", || {
        (!acknowledged(&acked).is_empty()).then_some(())
    });
    let (mut c, _) = SmtpClient::connect(port);
    c.expect("EHLO client.test.example", "250");
    c.expect("MAIL FROM:<a@test.example>", "250");
    c.expect("RCPT TO:<midway@elsewhere.example>", "250");
    c.expect("DATA", "354");
    c.send("Subject: midway\r\n\r\n");
    c.send(&body(4000));

    // The disk fills. The rest of the message (past a page, so its journal
    // record cannot fit anywhere) gets a 4xx at end of data, at once.
    let filler = fill(&mnt);
    c.send(&body(16000));
    let (reply, took) = c.timed(".");
    assert!(
        reply.starts_with("452 4.3.1") || reply.starts_with("451 4.3.0"),
        "end of data on a full disk: {reply}"
    );
    // The issue asks for every end of data to be answered within seconds.
    assert!(took < Duration::from_secs(10), "answered after {took:?}");
    c.send("QUIT\r\n");
    inst.wait_log(30, "mail is refused and delivery paused");
    // The load has crossed the fill; what it got acknowledged is checked below.
    let _ = busy.0.kill();
    let _ = busy.0.wait();
    let before = acknowledged(&acked);

    // While the disk is full: MAIL FROM gets 452 4.3.1 (free space is at
    // queue_minfree, 0), qmgr is the same process, and answers.
    let mail = wait_for(5, "MAIL FROM refused on the full disk", || {
        let r = mail_from_reply(port);
        (!r.starts_with("250")).then_some(r)
    });
    assert_eq!(mail.trim_end(), "452 4.3.1 Insufficient system storage");
    let (code, out) = send(port, "full@elsewhere.example", "while full");
    assert_ne!(code, 0, "no 250 on a full disk: {out}");
    assert!(out.contains("452 4.3.1"), "{out}");
    assert_eq!(qmgr_pid(&inst), pid, "qmgr was not restarted");
    let list = inst.sluice(&["queue", "list"]);
    assert!(
        list.status.success(),
        "queue list on a full disk: {}",
        String::from_utf8_lossy(&list.stderr)
    );

    // Space returns: mail is accepted again within 2 s, and then all of it.
    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    let out = wait_for(10, "acceptance to resume", || {
        let (code, out) = send(port, "after@elsewhere.example", "after");
        (code == 0).then_some(out)
    });
    let resumed = freed.elapsed();
    assert!(out.contains("250"), "{out}");
    assert!(
        resumed < Duration::from_secs(2),
        "accepted again {resumed:?} after space returned"
    );
    let acked_after = inst.root().join("acked-after.txt");
    let out = load(port, 100, 8000, &acked_after)
        .wait_with_output()
        .unwrap();
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("ok=100 temp=0 error=0"), "{summary}");
    let after = acknowledged(&acked_after);
    eprintln!(
        "acknowledged: {} around the fill, {} after; end of data on the full disk: {} in {took:?}; accepted again after {resumed:?}",
        before.len(),
        after.len(),
        reply.trim_end()
    );

    // Every message that got a 250 is delivered, by the same qmgr.
    wait_for(120, "every acknowledged message at the sink", || {
        let text = sent_text(&sink, &inst);
        (before
            .iter()
            .chain(&after)
            .all(|m| text.contains(m.as_str()))
            && text.contains("Subject: after"))
        .then_some(())
    });
    assert!(
        !sink_text(sink.dir.path()).contains("Subject: midway"),
        "the message refused at end of data was not delivered"
    );
    assert_eq!(qmgr_pid(&inst), pid, "qmgr was not restarted");
    let log = inst.log();
    let fatal: Vec<&str> = log.lines().filter(|l| l.contains("fatal")).collect();
    assert!(fatal.is_empty(), "{fatal:?}");
    // Nothing but 4xx: no 5xx for a full disk.
    let permanent: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("reject:") && l.contains(": 5"))
        .collect();
    assert!(permanent.is_empty(), "{permanent:?}");
    let stalls = log.matches("mail is refused and delivery paused").count();
    let resumes = log.matches("journal: writable again").count();
    assert!(stalls >= 1 && resumes >= 1, "{log}");
    assert!(stalls <= resumes + 1, "one warning per state change: {log}");
    assert!(!log.contains("throttling"), "{log}");
    inst.stop();
}

/// With the default segment size the journal's current segment is written
/// ahead (a file of zeros, synced) soon after qmgr starts, and records
/// overwrite it: no new blocks. A message whose session passed MAIL FROM
/// before the disk filled therefore still gets its 250 on the full disk,
/// and is delivered once there is room again.
#[test]
fn a_segment_written_ahead_takes_in_flight_mail_on_a_full_disk() {
    // Nothing listens at the relay yet: the mail waits in the queue.
    let sink_port = free_port();
    let (mut inst, port) = on_tmpfs_segments(24, sink_port, 0, "");
    let mnt = inst.mnt().to_path_buf();
    inst.start();
    inst.wait_port(port);
    let pid = qmgr_pid(&inst);
    let journal = mnt.join("journal");
    wait_for(30, "a journal segment written ahead", || {
        std::fs::read_dir(&journal)
            .ok()?
            .flatten()
            .any(|e| e.metadata().is_ok_and(|m| m.len() >= 1 << 20))
            .then_some(())
    });

    // Four sessions get as far as the first lines of their messages.
    let mut sessions = Vec::new();
    for i in 0..4 {
        let (mut c, _) = SmtpClient::connect(port);
        c.expect("EHLO client.test.example", "250");
        c.expect("MAIL FROM:<a@test.example>", "250");
        c.expect(&format!("RCPT TO:<reserve{i}@elsewhere.example>"), "250");
        c.expect("DATA", "354");
        c.send(&format!("Subject: reserve {i}\r\n\r\n"));
        c.send(&body(2000));
        sessions.push(c);
    }

    // The disk fills; each message ends on the full disk and is taken.
    let filler = fill(&mnt);
    assert!(
        free(&mnt) < 4096,
        "the disk is full: {} bytes free",
        free(&mnt)
    );
    for c in &mut sessions {
        c.send(&body(2000));
        c.expect(".", "250");
        c.send("QUIT\r\n");
    }
    assert_eq!(qmgr_pid(&inst), pid, "qmgr was not restarted");
    // The reserve is the journal's, not smtpd's: a new session is still
    // refused at MAIL FROM while the disk is full (smtpd measures the free
    // space at most once a second).
    let mail = wait_for(5, "MAIL FROM refused on the full disk", || {
        let r = mail_from_reply(port);
        (!r.starts_with("250")).then_some(r)
    });
    assert!(
        mail.starts_with("452 4.3.1"),
        "MAIL FROM on the full disk: {mail}"
    );

    // Room again, and a sink: every message taken on the full disk arrives.
    std::fs::remove_file(&filler).unwrap();
    let sink = smtp_sink(&format!("127.0.0.1:{sink_port}"), &[]);
    wait_for(120, "the four messages at the sink", || {
        let text = sent_text(&sink, &inst);
        (0..4)
            .all(|i| text.contains(&format!("Subject: reserve {i}")))
            .then_some(())
    });
    assert_eq!(qmgr_pid(&inst), pid, "qmgr was not restarted");
    let log = inst.log();
    let fatal: Vec<&str> = log.lines().filter(|l| l.contains("fatal")).collect();
    assert!(fatal.is_empty(), "{fatal:?}");
    inst.stop();
}

#[test]
fn mail_from_gets_452_while_free_space_is_below_queue_minfree() {
    // 1.5 times message_size_limit (1 MB) is far below what stays free:
    // only queue_minfree (8 MB) can refuse.
    let (mut inst, port) = on_tmpfs(16, free_port(), 8_000_000);
    let mnt = inst.mnt().to_path_buf();
    inst.start();
    inst.wait_port(port);
    let (code, out) = send(port, "first@elsewhere.example", "room");
    assert_eq!(code, 0, "{out}");

    let filler = fill_leaving(&mnt, 4_000_000);
    let left = free(&mnt);
    assert!((1_500_000..8_000_000).contains(&left), "{left} bytes free");
    // smtpd measures free space at most once a second.
    let reply = wait_for(5, "MAIL FROM refused below queue_minfree", || {
        let r = mail_from_reply(port);
        (!r.starts_with("250")).then_some(r)
    });
    assert_eq!(reply.trim_end(), "452 4.3.1 Insufficient system storage");
    let (code, out) = send(port, "second@elsewhere.example", "no room");
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("452 4.3.1"), "{out}");
    inst.wait_log(10, "not enough free space in mail queue");
    // Space returns: accepted again within 2 s.
    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    wait_for(10, "MAIL FROM accepted again", || {
        mail_from_reply(port).starts_with("250").then_some(())
    });
    let resumed = freed.elapsed();
    assert!(resumed < Duration::from_secs(2), "after {resumed:?}");
    let (code, out) = send(port, "third@elsewhere.example", "room again");
    assert_eq!(code, 0, "{out}");
    inst.stop();
}

#[test]
fn qmgr_restarted_on_a_full_disk_recovers_and_serves_the_queue() {
    // Nothing listens at the relay port yet: the mail stays queued.
    let relay_port = free_port();
    let (mut inst, port) = on_tmpfs(16, relay_port, 0);
    let mnt = inst.mnt().to_path_buf();
    inst.start();
    inst.wait_port(port);
    for n in 0..5 {
        let (code, out) = send(
            port,
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
    assert!(!log.contains("fatal"), "{log}");
    // Space returns and the peer comes up: everything is delivered by the same qmgr.
    std::fs::remove_file(&filler).unwrap();
    let sink = smtp_sink(&format!("127.0.0.1:{relay_port}"), &[]);
    let out = inst.sluice(&["queue", "flush"]);
    assert!(out.status.success());
    wait_for(60, "the five messages at the sink", || {
        let text = sent_text(&sink, &inst);
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
    let (mut inst, port) = on_tmpfs(16, relay_port, 0);
    let mnt = inst.mnt().to_path_buf();
    inst.start();
    inst.wait_port(port);
    // 20 kB: the notice returns it whole, so the notice's journal record is
    // larger than a page and cannot fit in what a full tmpfs leaves.
    let body_file = inst.root().join("body.txt");
    std::fs::write(&body_file, body(20_000)).unwrap();
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "owner@test.example",
        "--to",
        "bounce-me@elsewhere.example",
        "--header",
        "Subject: doomed",
        "--body",
        &format!("@{}", body_file.display()),
    ]);
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
    let line = inst.wait_log(30, "non-delivery notification was deferred");
    assert!(line.contains(": 4"), "{line}");
    let dsn = |s: &ScriptedSink| {
        s.messages()
            .into_iter()
            .any(|m| m.from.is_empty() && m.rcpts.iter().any(|r| r.contains("owner@test.example")))
    };
    assert!(
        !dsn(&sink),
        "a notice was sent while nothing could be written"
    );
    // The message stays (with no recipient left to try) until its notice
    // is queued; the notice is not queued.
    let q = inst.queue_json();
    assert!(
        q.len() == 1 && q[0].contains("owner@test.example"),
        "the bounced message alone, kept until its notice is written: {q:?}"
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
    assert!(!inst.log().contains("fatal"), "{}", inst.log());
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
