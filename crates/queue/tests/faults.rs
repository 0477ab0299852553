//! The journal on a failing disk: failed and short writes, failed syncs
//! that lose data, a full disk, and recovery that cannot write.
//!
//! The promises checked: every record a commit acknowledged survives a
//! replay at its position; a crash at any point replays a prefix of what
//! was appended (nothing after a gap, nothing half-written acted upon);
//! and after a transient fault the same journal commits again, without a
//! restart.

mod common;
use common::{assert_at_their_positions, crash_replay, id};
use queue::disk::{Fault, FaultyDisk};
use queue::{
    list_segments, recover_on, replay, segment_path, Journal, JournalConfig, Lsn, Record,
    SpoolConfig, Syncer,
};
use std::fs;
use std::path::Path;
use std::sync::Arc;

fn arrived(n: u32) -> Record {
    common::arrival(n, n as usize % 300)
}

fn cfg(segment_size: u32) -> JournalConfig {
    JournalConfig {
        segment_size,
        max_record: 1 << 20,
    }
}

fn open(dir: &Path, seg: u32) -> (Journal, FaultyDisk) {
    let disk = FaultyDisk::new();
    let j = Journal::open_on(dir, cfg(seg), Arc::new(disk.clone())).unwrap();
    (j, disk)
}

/// Checks a crash replay: the first `k` appended messages, each at the
/// position `append` gave it, with `k` at least the acknowledged count.
fn assert_prefix(st: &queue::Replay, appended: &[(u32, Lsn)], acked: usize) {
    let k = st.records as usize;
    assert!(
        k >= acked,
        "replay has {k} records, {acked} were acknowledged"
    );
    assert!(
        k <= appended.len(),
        "replay has {k} records of {}",
        appended.len()
    );
    assert_eq!(st.messages.len(), k);
    assert_at_their_positions(st, &appended[..k]);
}

#[test]
fn failed_write_is_cut_back_to_the_last_record_and_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, disk) = open(dir.path(), 1 << 20);
    let mut appended = Vec::new();
    for n in 0..3 {
        appended.push((n, j.append(&arrived(n)).unwrap()));
    }
    let durable = j.commit().unwrap();
    let good_len = fs::metadata(segment_path(dir.path(), j.current_segment()))
        .unwrap()
        .len();
    assert_eq!(good_len, durable.offset() as u64);
    for n in 3..6 {
        appended.push((n, j.append(&arrived(n)).unwrap()));
    }
    // Half a record goes out, then the disk is full.
    disk.fail_write(1, Fault::Short(20));
    disk.fail_write(2, Fault::NoSpace);
    let e = j.commit().unwrap_err();
    assert!(e.is_disk_full(), "{e}");
    assert!(j.has_pending());
    assert_eq!(j.durable(), durable);
    // The half-written record is cut off, not left for replay to find.
    let len = fs::metadata(segment_path(dir.path(), j.current_segment()))
        .unwrap()
        .len();
    assert_eq!(len, good_len, "segment cut back to its last whole record");
    let st = crash_replay(dir.path());
    assert!(st.torn.is_empty(), "{:?}", st.torn);
    assert_prefix(&st, &appended, 3);
    // Records appended meanwhile are kept; the fault was transient: commit again.
    appended.push((6, j.append(&arrived(6)).unwrap()));
    let end = j.commit().unwrap();
    assert!(end > appended[6].1 && !j.has_pending());
    for (n, lsn) in &appended {
        assert_eq!(j.read_at(*lsn).unwrap(), arrived(*n));
    }
    drop(j);
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert!(st.torn.is_empty());
    assert_prefix(&st, &appended, appended.len());
}

#[test]
fn failed_sync_that_lost_the_data_is_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, disk) = open(dir.path(), 1 << 20);
    let mut appended = Vec::new();
    for n in 0..2 {
        appended.push((n, j.append(&arrived(n)).unwrap()));
    }
    j.commit().unwrap();
    for n in 2..5 {
        appended.push((n, j.append(&arrived(n)).unwrap()));
    }
    // The write succeeds, the fdatasync fails and the page cache drops the bytes.
    disk.fail_sync(1, Fault::Io);
    assert!(j.commit().is_err());
    let st = crash_replay(dir.path());
    assert_prefix(&st, &appended, 2);
    // Trying again must not sync zeros: the bytes are written again first.
    let writes = disk.writes();
    j.commit().unwrap();
    assert!(disk.writes() > writes, "the lost bytes were written again");
    drop(j);
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert!(st.torn.is_empty(), "{:?}", st.torn);
    assert_prefix(&st, &appended, appended.len());
}

#[test]
fn a_full_disk_before_the_first_commit_creates_nothing_and_then_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, disk) = open(dir.path(), 1 << 20);
    disk.set_full(true);
    let a = j.append(&arrived(1)).unwrap();
    assert!(j.commit().unwrap_err().is_disk_full());
    assert!(j.commit().unwrap_err().is_disk_full());
    assert!(list_segments(dir.path()).unwrap().is_empty());
    assert_eq!(
        j.read_at(a).unwrap(),
        arrived(1),
        "pending records read back from memory"
    );
    disk.set_full(false);
    assert!(j.commit().unwrap() > a);
    drop(j);
    assert_prefix(&replay(dir.path(), 1 << 20).unwrap(), &[(1, a)], 1);
}

#[test]
fn syncer_survives_failed_writes_and_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, disk) = open(dir.path(), 4096);
    let (wtx, wrx) = std::sync::mpsc::channel();
    let mut s = Syncer::spawn(move || {
        let _ = wtx.send(());
    })
    .unwrap();
    let mut appended = Vec::new();
    let mut acked = Lsn::default();
    let mut failures = 0;
    for n in 0..120 {
        appended.push((n, j.append(&arrived(n)).unwrap()));
        match n % 17 {
            3 => disk.fail_write(1, Fault::NoSpace),
            9 => disk.fail_sync(1, Fault::Io),
            13 => disk.fail_write(1, Fault::Short(7)),
            _ => {}
        }
        if s.kick(&mut j).is_err() {
            failures += 1;
        }
        if s.in_flight() && wrx.recv_timeout(std::time::Duration::from_secs(5)).is_ok() {
            match s.poll(&mut j) {
                Ok(Some(d)) => acked = acked.max(d),
                Ok(None) => {}
                Err(_) => failures += 1,
            }
        }
        let k = appended.iter().filter(|(_, l)| *l < acked).count();
        assert_prefix(&crash_replay(dir.path()), &appended, k);
    }
    assert!(failures >= 10, "{failures} failures injected and seen");
    let end = s.wait_all(&mut j).unwrap();
    assert!(end > appended.last().unwrap().1);
    drop(s);
    drop(j);
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert!(st.torn.is_empty(), "{:?}", st.torn);
    assert_prefix(&st, &appended, appended.len());
}

#[test]
fn recovery_on_a_full_disk_writes_nothing_and_serves_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let spool_cfg = SpoolConfig {
        journal: cfg(1 << 20),
        ..SpoolConfig::default()
    };
    let mut appended = Vec::new();
    {
        let mut r = queue::recover(dir.path(), spool_cfg).unwrap();
        for n in 0..4 {
            appended.push((n, r.journal.append(&arrived(n)).unwrap()));
        }
        r.journal.commit().unwrap();
    }
    // A torn tail from the crash: recovery would cut it, but cannot.
    let seg = segment_path(&dir.path().join("journal"), 1);
    let mut bytes = fs::read(&seg).unwrap();
    let whole = bytes.len();
    bytes.extend_from_slice(&[9, 0, 0, 0, 1, 2]);
    fs::write(&seg, &bytes).unwrap();
    let disk = FaultyDisk::new();
    disk.set_full(true);
    disk.set_truncate_fails(true);
    let mut r = recover_on(dir.path(), spool_cfg, Arc::new(disk.clone())).unwrap();
    assert!(r.report.commit_failed.is_none(), "nothing to commit");
    assert_eq!(r.state.torn.len(), 1);
    assert!(!r.state.torn[0].cut);
    assert_eq!(disk.writes(), 0, "recovery wrote nothing");
    assert_eq!(r.state.messages.len(), 4);
    let listed = r.state.list(&r.journal).unwrap();
    assert_eq!(
        listed.len(),
        4,
        "the queue is served from the read-only journal"
    );
    // Results made while the disk is full wait in memory; space returns.
    let rm = r.journal.append(&Record::Removed { id: id(0) }).unwrap();
    r.state.apply(rm, &Record::Removed { id: id(0) });
    assert!(r.journal.commit().unwrap_err().is_disk_full());
    disk.set_full(false);
    disk.set_truncate_fails(false);
    r.journal.commit().unwrap();
    drop(r);
    let r = queue::recover(dir.path(), spool_cfg).unwrap();
    assert_eq!(r.state.messages.len(), 3);
    assert!(r.state.torn.iter().all(|t| t.cut));
    assert_eq!(fs::metadata(&seg).unwrap().len() as usize, whole);
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Append(u8),
        Commit,
        FailWrite(u8, Fault),
        FailSync(u8, Fault),
        Full(bool),
    }

    fn fault() -> impl Strategy<Value = Fault> {
        prop_oneof![
            Just(Fault::NoSpace),
            Just(Fault::Io),
            (0usize..64).prop_map(Fault::Short),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u8..4).prop_map(Op::Append),
            3 => Just(Op::Commit),
            1 => (1u8..3, fault()).prop_map(|(n, f)| Op::FailWrite(n, f)),
            1 => (1u8..3, fault()).prop_map(|(n, f)| Op::FailSync(n, f)),
            1 => any::<bool>().prop_map(Op::Full),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever fails when, a crash replays a prefix of the appended
        /// records holding every acknowledged one at its position, and once
        /// the faults stop the same journal commits everything.
        #[test]
        fn every_acknowledged_record_survives_any_fault(ops in proptest::collection::vec(op(), 1..60)) {
            let dir = tempfile::tempdir().unwrap();
            let (mut j, disk) = open(dir.path(), 4096);
            let mut appended: Vec<(u32, Lsn)> = Vec::new();
            let mut acked = 0usize;
            for o in ops {
                match o {
                    Op::Append(k) => for _ in 0..k {
                        let n = appended.len() as u32;
                        appended.push((n, j.append(&arrived(n)).unwrap()));
                    },
                    Op::Commit => {
                        if let Ok(d) = j.commit() {
                            acked = appended.iter().filter(|(_, l)| *l < d).count();
                            prop_assert_eq!(acked, appended.len());
                        }
                        assert_prefix(&crash_replay(dir.path()), &appended, acked);
                    }
                    Op::FailWrite(n, f) => disk.fail_write(n as u64, f),
                    Op::FailSync(n, f) => disk.fail_sync(n as u64, f),
                    Op::Full(b) => disk.set_full(b),
                }
            }
            disk.set_full(false);
            // Planned faults still pending may fail a few more commits.
            let mut tries = 0;
            while j.commit().is_err() {
                tries += 1;
                prop_assert!(tries < 20);
            }
            prop_assert!(!j.has_pending());
            drop(j);
            let st = replay(dir.path(), 1 << 20).unwrap();
            prop_assert!(st.torn.is_empty(), "{:?}", st.torn);
            assert_prefix(&st, &appended, appended.len());
        }
    }
}
