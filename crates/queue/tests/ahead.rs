//! Segments written ahead: records overwrite synced zeros, readers stop at
//! the zeros, and every fault and crash around them loses nothing.
//!
//! The journal's own steps (`segment_job`, `SegmentJob::run`,
//! `segment_ready`) are driven by hand where the order matters, so each
//! case happens on purpose; one test runs them on the `Syncer`'s threads.

mod common;
use common::{assert_at_their_positions, crash_replay, id};
use queue::disk::{Fault, FaultyDisk};
use queue::{
    list_segments, replay, segment_path, Error, FrameError, Journal, JournalConfig, Lsn, Record,
    Syncer, TailCause,
};
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SEG: u32 = 64 << 10;

fn arrived(n: u32) -> Record {
    common::arrival(n, 500 + n as usize % 700)
}

fn open(dir: &Path) -> (Journal, FaultyDisk) {
    let disk = FaultyDisk::new();
    let cfg = JournalConfig {
        segment_size: SEG,
        max_record: 1 << 20,
    };
    let j = Journal::open_on(dir, cfg, Arc::new(disk.clone())).unwrap();
    (j, disk)
}

/// Runs the journal's next write-ahead job here, as the thread would.
fn write_ahead(j: &mut Journal) -> queue::Result<()> {
    let job = j
        .segment_job()
        .expect("a segment is due to be written ahead");
    let res = job.run(&AtomicBool::new(false));
    j.segment_ready(res)
}

fn len(dir: &Path, seq: u32) -> u64 {
    fs::metadata(segment_path(dir, seq)).unwrap().len()
}

/// Every appended message is replayed at its position, and nothing else.
fn assert_all(st: &queue::Replay, appended: &[(u32, Lsn)]) {
    assert_eq!(st.messages.len(), appended.len(), "{:?}", st.torn);
    assert_at_their_positions(st, appended);
}

#[test]
fn records_overwrite_zeros_written_ahead_and_replay_stops_at_them() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = open(dir.path());
    let first = j.current_segment();
    write_ahead(&mut j).unwrap();
    // The untouched appended segment gave way to the one written ahead.
    assert!(j.writing_ahead());
    let seq = j.current_segment();
    assert_eq!(list_segments(dir.path()).unwrap(), vec![seq]);
    assert!(seq > first);
    assert_eq!(len(dir.path(), seq), SEG as u64, "header and zeros, synced");
    let mut appended = Vec::new();
    for n in 0..10 {
        appended.push((n, j.append(&arrived(n)).unwrap()));
    }
    let durable = j.commit().unwrap();
    assert_eq!(
        len(dir.path(), seq),
        SEG as u64,
        "records overwrote the zeros: the size did not change"
    );
    // Past the records: zeros, no record, and no corruption either.
    assert!(matches!(j.read_at(durable), Err(Error::NoRecord(_))));
    for (n, lsn) in &appended {
        assert_eq!(j.read_at(*lsn).unwrap(), arrived(*n));
    }
    // A crash now: the zero tail is the end, not a torn tail.
    let st = crash_replay(dir.path());
    assert!(st.torn.is_empty(), "{:?}", st.torn);
    assert_all(&st, &appended);
    drop(j);
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert!(st.torn.is_empty(), "{:?}", st.torn);
    assert_all(&st, &appended);
    assert_eq!(
        len(dir.path(), seq),
        durable.offset() as u64,
        "replay gave the zeros' space back"
    );
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert!(st.torn.is_empty());
    assert_all(&st, &appended);
}

#[test]
fn segments_written_ahead_follow_each_other_and_double_up_to_the_segment_size() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = JournalConfig {
        segment_size: 4 << 20,
        max_record: 1 << 20,
    };
    let mut j = Journal::open(dir.path(), cfg).unwrap();
    write_ahead(&mut j).unwrap();
    let mut appended = Vec::new();
    let mut sizes = Vec::new();
    let mut n = 0;
    while sizes.len() < 4 {
        appended.push((n, j.append(&arrived(n)).unwrap()));
        n += 1;
        if n % 50 == 0 {
            j.commit().unwrap();
        }
        // Asked for once the current segment is a quarter full.
        if j.segment_job_due() {
            let seq = j.current_segment();
            write_ahead(&mut j).unwrap();
            assert_eq!(j.current_segment(), seq, "used when this one is full");
            sizes.push(len(dir.path(), seq + 1));
        }
    }
    j.commit().unwrap();
    assert_eq!(sizes, vec![2 << 20, 4 << 20, 4 << 20, 4 << 20]);
    let segs = j.segments();
    drop(j);
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert!(st.torn.is_empty(), "{:?}", st.torn);
    assert_all(&st, &appended);
    assert!(segs.len() >= 4, "{segs:?}");
}

#[test]
fn a_torn_record_before_the_zeros_is_a_torn_tail_at_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = open(dir.path());
    write_ahead(&mut j).unwrap();
    let seq = j.current_segment();
    let mut appended = Vec::new();
    for n in 0..3 {
        appended.push((n, j.append(&arrived(n)).unwrap()));
    }
    let end = j.commit().unwrap();
    // The next record as it would have been written, torn at every byte.
    let next = j.append(&arrived(3)).unwrap();
    let frame = {
        let mut b = Vec::new();
        queue::encode_frame(&arrived(3), 1 << 20, &mut b).unwrap();
        b
    };
    assert_eq!(next, end);
    drop(j);
    let path = segment_path(dir.path(), seq);
    let pristine = fs::read(&path).unwrap();
    for cut in 1..frame.len() {
        let mut bytes = pristine.clone();
        let at = end.offset() as usize;
        bytes[at..at + cut].copy_from_slice(&frame[..cut]);
        let copy = tempfile::tempdir().unwrap();
        fs::write(segment_path(copy.path(), seq), &bytes).unwrap();
        let st = replay(copy.path(), 1 << 20).unwrap();
        assert_all(&st, &appended);
        assert_eq!(st.torn.len(), 1, "cut {cut}");
        let t = st.torn[0];
        assert_eq!((t.segment, t.offset), (seq, end.offset()), "cut {cut}");
        assert!(t.cut);
        let torn = matches!(
            t.cause,
            TailCause::Frame(FrameError::Checksum | FrameError::Length(_) | FrameError::Short)
        );
        assert!(torn, "cut {cut}: {:?}", t.cause);
        assert_eq!(t.dropped, bytes.len() as u64 - end.offset() as u64);
        assert_eq!(
            fs::metadata(segment_path(copy.path(), seq)).unwrap().len(),
            end.offset() as u64
        );
        let again = replay(copy.path(), 1 << 20).unwrap();
        assert!(again.torn.is_empty(), "cut {cut}: {:?}", again.torn);
        assert_all(&again, &appended);
    }
}

#[test]
fn bytes_after_zeros_are_a_torn_tail_not_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = open(dir.path());
    write_ahead(&mut j).unwrap();
    let seq = j.current_segment();
    let appended = vec![(0, j.append(&arrived(0)).unwrap())];
    let end = j.commit().unwrap();
    drop(j);
    // A later write that reached the disk when one before it did not.
    let f = fs::OpenOptions::new()
        .write(true)
        .open(segment_path(dir.path(), seq))
        .unwrap();
    f.write_all_at(b"later", end.offset() as u64 + 3000)
        .unwrap();
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert_all(&st, &appended);
    assert_eq!(st.torn.len(), 1);
    assert_eq!(st.torn[0].offset, end.offset());
    assert_eq!(st.torn[0].cause, TailCause::Frame(FrameError::Length(0)));
    assert!(replay(dir.path(), 1 << 20).unwrap().torn.is_empty());
}

#[test]
fn a_failed_zero_write_removes_the_segment_appends_and_asks_again_later() {
    for failing_write in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, disk) = open(dir.path());
        let first = j.current_segment();
        // The header (write 1) or the zeros (write 2) find the disk full.
        disk.fail_write(failing_write, Fault::NoSpace);
        let e = write_ahead(&mut j).unwrap_err();
        assert!(e.is_disk_full(), "{e}");
        assert!(e.to_string().contains(".log"), "names the file: {e}");
        assert!(list_segments(dir.path()).unwrap().is_empty(), "removed");
        assert!(!j.writing_ahead());
        assert!(!j.segment_job_due(), "not again before the next segment");
        // Acceptance goes on, appending.
        let mut appended = Vec::new();
        let mut n = 0;
        while j.current_segment() == first {
            appended.push((n, j.append(&arrived(n)).unwrap()));
            n += 1;
            j.commit().unwrap();
        }
        assert!(!j.writing_ahead());
        assert!(j.segment_job_due(), "asked again at the next segment");
        write_ahead(&mut j).unwrap();
        assert!(j.writing_ahead(), "an appended segment gives way at once");
        for _ in 0..5 {
            appended.push((n, j.append(&arrived(n)).unwrap()));
            n += 1;
        }
        j.commit().unwrap();
        drop(j);
        let st = replay(dir.path(), 1 << 20).unwrap();
        assert!(st.torn.is_empty(), "{:?}", st.torn);
        assert_all(&st, &appended);
    }
}

#[test]
fn a_segment_not_ready_in_time_is_appended_and_the_late_one_stays_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = open(dir.path());
    write_ahead(&mut j).unwrap();
    let mut appended = Vec::new();
    let mut n = 0;
    while !j.segment_job_due() {
        appended.push((n, j.append(&arrived(n)).unwrap()));
        n += 1;
    }
    // Asked for, but slow: the current segment fills meanwhile.
    let job = j.segment_job().unwrap();
    let late = job.seq();
    let full = j.current_segment();
    while j.current_segment() == full {
        appended.push((n, j.append(&arrived(n)).unwrap()));
        n += 1;
    }
    j.commit().unwrap();
    let appending = j.current_segment();
    assert!(appending > late, "numbered after the one being written");
    assert!(!j.writing_ahead());
    j.segment_ready(job.run(&AtomicBool::new(false))).unwrap();
    assert_eq!(j.current_segment(), appending, "too late to be used");
    for _ in 0..5 {
        appended.push((n, j.append(&arrived(n)).unwrap()));
        n += 1;
    }
    j.commit().unwrap();
    assert!(j.segments().contains(&late));
    let st = crash_replay(dir.path());
    assert!(st.torn.is_empty(), "{:?}", st.torn);
    assert_all(&st, &appended);
    // Once nothing before it is live, it goes like any empty segment.
    for (k, _) in &appended {
        j.append(&Record::Removed { id: id(*k) }).unwrap();
    }
    j.commit().unwrap();
    let cur = j.current_segment();
    let gone = j.delete_segments_before(cur).unwrap();
    assert!(gone.contains(&late) && gone.contains(&full), "{gone:?}");
    assert!(!segment_path(dir.path(), late).exists());
}

#[test]
fn a_segment_ready_but_never_used_replays_empty_and_is_deleted_later() {
    let dir = tempfile::tempdir().unwrap();
    let spool_cfg = queue::SpoolConfig {
        journal: JournalConfig {
            segment_size: SEG,
            max_record: 1 << 20,
        },
        ..queue::SpoolConfig::default()
    };
    let mut appended = Vec::new();
    let ready;
    {
        let mut r = queue::recover(dir.path(), spool_cfg).unwrap();
        let j = &mut r.journal;
        write_ahead(j).unwrap();
        let mut n = 0;
        while !j.segment_job_due() {
            appended.push((n, j.append(&arrived(n)).unwrap()));
            n += 1;
        }
        ready = j.current_segment() + 1;
        write_ahead(j).unwrap();
        j.commit().unwrap();
        assert_eq!(len(&dir.path().join("journal"), ready), SEG as u64);
        // kill -9 here: the ready segment was never written to.
    }
    let mut r = queue::recover(dir.path(), spool_cfg).unwrap();
    assert!(r.state.torn.is_empty(), "{:?}", r.state.torn);
    assert_all(&r.state, &appended);
    let jdir = dir.path().join("journal");
    assert_eq!(len(&jdir, ready), 16, "cut to its header");
    assert!(r.journal.current_segment() > ready);
    for (k, _) in &appended {
        let rec = Record::Removed { id: id(*k) };
        let at = r.journal.append(&rec).unwrap();
        r.state.apply(at, &rec);
    }
    r.journal.commit().unwrap();
    let cur = r.journal.current_segment();
    let gone = r.journal.delete_segments_before(cur).unwrap();
    assert!(gone.contains(&ready), "{gone:?}");
    assert!(!segment_path(&jdir, ready).exists());
}

#[test]
fn a_crash_while_writing_ahead_leaves_an_empty_or_no_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = open(dir.path());
    let appended = vec![(0, j.append(&arrived(0)).unwrap())];
    j.commit().unwrap();
    let seq = j.current_segment();
    drop(j);
    // Killed during the header, and killed half-way through the zeros.
    let hdr = {
        let mut h = b"SLCJRNL1".to_vec();
        h.extend_from_slice(&((seq + 2) as u64).to_le_bytes());
        h
    };
    fs::write(segment_path(dir.path(), seq + 1), &hdr[..7]).unwrap();
    let mut half = hdr.clone();
    half.resize(5000, 0);
    fs::write(segment_path(dir.path(), seq + 2), &half).unwrap();
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert_all(&st, &appended);
    assert_eq!(st.torn.len(), 1, "{:?}", st.torn);
    assert_eq!(st.torn[0].cause, TailCause::ShortHeader);
    assert!(!segment_path(dir.path(), seq + 1).exists());
    assert_eq!(len(dir.path(), seq + 2), 16);
}

#[test]
fn the_syncer_writes_ahead_on_its_own_thread_and_reports_a_full_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, disk) = open(dir.path());
    let (wtx, wrx) = std::sync::mpsc::channel();
    let mut s = Syncer::spawn(move || {
        let _ = wtx.send(());
    })
    .unwrap();
    let settle = |s: &mut Syncer, j: &mut Journal| {
        let deadline = Instant::now() + Duration::from_secs(10);
        s.prepare_ahead(j);
        while s.ahead_busy() {
            assert!(Instant::now() < deadline, "write-ahead thread stuck");
            let _ = wrx.recv_timeout(Duration::from_millis(100));
            s.prepare_ahead(j);
        }
    };
    // The disk is full for the first segment's zeros: reported, and
    // acceptance appends meanwhile.
    disk.fail_write(1, Fault::NoSpace);
    settle(&mut s, &mut j);
    let e = s.take_ahead_error().expect("the full disk is reported");
    assert!(e.is_disk_full(), "{e}");
    assert!(!j.writing_ahead());
    let mut appended = Vec::new();
    let mut ahead = std::collections::BTreeSet::new();
    let mut n = 0;
    while ahead.len() < 3 {
        assert!(n < 5000, "no segment written ahead: {ahead:?}");
        appended.push((n, j.append(&arrived(n)).unwrap()));
        n += 1;
        s.kick(&mut j).unwrap();
        s.wait_all(&mut j).unwrap();
        settle(&mut s, &mut j);
        if j.writing_ahead() {
            ahead.insert(j.current_segment());
        }
    }
    assert!(s.take_ahead_error().is_none());
    s.wait_all(&mut j).unwrap();
    drop(s);
    drop(j);
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert!(st.torn.is_empty(), "{:?}", st.torn);
    assert_all(&st, &appended);
}
