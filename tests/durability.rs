//! Durability: a 250 after DATA means the message is on stable storage.
//!
//! While Python's smtplib sends mail over several sessions, the receiving
//! daemons are killed with SIGKILL at random moments; afterwards, and after
//! a full restart (recovery), every message that got a 250 is in the queue.
//! qmgr writes its journal segments ahead (zeros, then records in their
//! place), so its kills leave segments that end in zeros and, now and
//! then, a record torn in front of them.
//! As root, the disk-full case on a small tmpfs: 452 4.3.1, nothing
//! corrupted, and acceptance resumes when space returns.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use sluice_suite::{
    free_port, receive_master_cf, swaks, wait_for, Instance, OnTmpfs, RECEIVE_MAIN_CF,
};

fn acknowledged(path: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Whether the newest journal segment under `spool` was written ahead:
/// at least the first written-ahead size, and zeros at its end.
fn newest_segment_written_ahead(spool: &std::path::Path) -> bool {
    let dir = spool.join("journal");
    let Some(newest) = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max()
    else {
        return false;
    };
    let Ok(bytes) = std::fs::read(&newest) else {
        return false;
    };
    bytes.len() >= 1 << 20 && bytes[bytes.len() - 64..].iter().all(|&b| b == 0)
}

/// A tiny xorshift so the kill schedule varies but needs no crate.
fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn kill_9_at_random_points_loses_no_acknowledged_message() {
    let port = free_port();
    let mut inst = Instance::new(&receive_master_cf(port, ""), RECEIVE_MAIN_CF);
    inst.start();
    inst.wait_port(port);
    let small = inst.root().join("small.txt");
    let large = inst.root().join("large.txt");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/send_many.py");
    let spawn = |n: &str, threads: &str, out: &std::path::Path, size: &str| {
        std::process::Command::new("python3")
            .arg(&script)
            .args([
                "127.0.0.1",
                &port.to_string(),
                n,
                threads,
                out.to_str().unwrap(),
                size,
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Small messages go inline in the journal, large ones to message files.
    let mut a = spawn("1500", "6", &small, "1024");
    let mut b = spawn("100", "2", &large, "100000");
    let mut seed = 0x9e3779b97f4a7c15u64 ^ std::process::id() as u64;
    let mut kills = 0;
    let mut qmgr_kills_with_zeros = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while (a.try_wait().unwrap().is_none() || b.try_wait().unwrap().is_none())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(80 + rng(&mut seed) % 200));
        let victims = ["qmgr", "cleanup", "127.0.0.1"];
        let ahead = newest_segment_written_ahead(&inst.root().join("spool"));
        // The first time a segment is found written ahead, qmgr is the
        // victim: chance alone may never kill it then on a slow machine.
        let name = if qmgr_kills_with_zeros == 0 && ahead {
            "qmgr"
        } else {
            victims[(rng(&mut seed) % 3) as usize]
        };
        let status = inst.status();
        if let Some(p) = status
            .services
            .iter()
            .find(|s| s.name.starts_with(name))
            .and_then(|s| s.processes.first())
        {
            if name == "qmgr" && ahead {
                qmgr_kills_with_zeros += 1;
            }
            sys::process::signal(p.pid, 9).unwrap();
            kills += 1;
        }
    }
    let out_a = a.wait_with_output().unwrap();
    let out_b = b.wait_with_output().unwrap();
    assert!(kills >= 5, "only {kills} kills happened");
    assert!(
        qmgr_kills_with_zeros >= 1,
        "qmgr was never killed with a segment written ahead ({kills} kills)"
    );
    let acked: BTreeSet<String> = acknowledged(&small)
        .union(&acknowledged(&large))
        .cloned()
        .collect();
    assert!(
        !acked.is_empty(),
        "no message was acknowledged at all: {} {}",
        String::from_utf8_lossy(&out_a.stdout),
        String::from_utf8_lossy(&out_b.stdout)
    );
    // Let master bring qmgr back, then compare.
    let now_queued = wait_for(30, "qmgr to answer again", || {
        std::panic::catch_unwind(|| inst.queued_ids()).ok()
    });
    let missing: Vec<_> = acked.difference(&now_queued).collect();
    assert!(
        missing.is_empty(),
        "acknowledged but not queued after {kills} kills: {missing:?}"
    );
    // A full restart replays the journal: still all there, nothing corrupt.
    inst.stop();
    inst.start();
    let after = wait_for(30, "qmgr after restart", || {
        std::panic::catch_unwind(|| inst.queued_ids()).ok()
    });
    let missing: Vec<_> = acked.difference(&after).collect();
    assert!(missing.is_empty(), "lost after restart: {missing:?}");
    assert!(!inst.log().contains("removed corrupt"), "{}", inst.log());
    // Duplicates are allowed only for transactions cut by a kill: the
    // queue holds no more messages than the clients attempted.
    assert!(after.len() <= 1600, "{} queued", after.len());
    eprintln!(
        "kills={kills} (qmgr with a zero tail: {qmgr_kills_with_zeros}) acknowledged={} queued={}",
        acked.len(),
        after.len()
    );
}

#[test]
fn disk_full_gives_452_and_recovers() {
    let port = free_port();
    // A size limit that fits the small file system: with the default
    // (10 MB), Postfix's rule of 1.5 times message_size_limit free would
    // refuse every MAIL FROM on 4 MB.
    let inst = Instance::new(
        &receive_master_cf(port, ""),
        &format!("{RECEIVE_MAIN_CF}message_size_limit = 1000000\n"),
    );
    // Needs root (fails saying so otherwise); unmounted after the instance stops.
    let mut inst = OnTmpfs::mount(inst, "small", 4);
    let mnt = inst.mnt().to_path_buf();
    let main = inst.etc().join("main.cf");
    let text = std::fs::read_to_string(&main).unwrap().replace(
        &format!("queue_directory = {}/spool", inst.root().display()),
        &format!("queue_directory = {}/spool", mnt.display()),
    );
    std::fs::write(&main, text).unwrap();
    inst.start();
    inst.wait_port(port);
    let body_file = inst.root().join("body.txt");
    std::fs::write(
        &body_file,
        "x".repeat(76)
            .repeat(2600)
            .as_bytes()
            .chunks(76)
            .map(|c| String::from_utf8_lossy(c).into_owned() + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let body = format!("@{}", body_file.display());
    let mut ok = 0;
    let mut full = None;
    for _ in 0..40 {
        let (code, out) = swaks(&[
            "--server",
            &format!("127.0.0.1:{port}"),
            "--from",
            "a@example.com",
            "--to",
            "u@mx.test.example",
            "--body",
            &body,
        ]);
        if code == 0 {
            ok += 1;
        } else {
            full = Some(out);
            break;
        }
    }
    let full = full.expect("the 4 MB file system filled up");
    assert!(full.contains("452 4.3.1"), "{full}");
    assert!(ok > 0);
    // Make room without touching the queue, as an operator adding space would.
    let st = std::process::Command::new("mount")
        .args(["-o", "remount,size=64m"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success());
    let out = wait_for(30, "acceptance to resume", || {
        let (code, out) = swaks(&[
            "--server",
            &format!("127.0.0.1:{port}"),
            "--from",
            "a@example.com",
            "--to",
            "u@mx.test.example",
            "--body",
            "after",
        ]);
        (code == 0).then_some(out)
    });
    assert!(out.contains("queued as"));
    inst.stop();
    inst.start();
    let q = wait_for(30, "qmgr after restart", || {
        std::panic::catch_unwind(|| inst.queue_json()).ok()
    });
    assert_eq!(
        q.len(),
        ok + 1,
        "every acknowledged message, and nothing half-written: {q:?}"
    );
    assert!(!inst.log().contains("removed corrupt"), "{}", inst.log());
    inst.stop();
}
