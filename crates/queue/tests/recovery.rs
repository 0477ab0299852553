//! The accept path through the spool and start-up recovery after crashes.

use mail::{Envelope, QueueId, QueueIdGen, Recipient};
use queue::{
    collect_garbage, recover, DataRef, FileMode, MessageHead, Record, Spool, SpoolConfig, Storage,
};
use std::fs;
use std::io::Read;
use std::path::Path;

fn env(size: u64) -> Envelope {
    Envelope {
        sender: "s@example.org".into(),
        recipients: vec![
            Recipient::new("a@example.net"),
            Recipient::new("b@example.net"),
        ],
        size,
        ..Envelope::default()
    }
}

fn body(n: usize) -> Vec<u8> {
    let mut v = b"Subject: t\r\n\r\n".to_vec();
    while v.len() < n {
        v.extend_from_slice(b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd\r\n");
    }
    v.truncate(n);
    v
}

fn cfg(mode: FileMode, inline_max: usize) -> SpoolConfig {
    let mut c = SpoolConfig {
        file_mode: mode,
        inline_max,
        ..SpoolConfig::default()
    };
    c.pool.prealloc = 8192;
    c.pool.grow_by = 4;
    c
}

/// Stores a message through a draft, in chunks; gives where the data went.
fn store(spool: &Spool, id: QueueId, data: &[u8]) -> DataRef {
    let mut d = spool.draft(id);
    for chunk in data.chunks(1000) {
        d.append(spool, chunk).unwrap();
    }
    assert_eq!(d.len(), data.len() as u64);
    d.commit(spool, &env(data.len() as u64)).unwrap()
}

fn read_all(spool: &Spool, id: QueueId, data: &DataRef) -> Vec<u8> {
    let mut m = spool.open_data(id, data).unwrap();
    let mut v = Vec::new();
    m.read_to_end(&mut v).unwrap();
    assert_eq!(m.len(), v.len() as u64);
    v
}

/// Accept a message fully: data durable, then Arrived committed.
fn accept(r: &mut queue::Recovered, id: QueueId, data: &[u8]) -> DataRef {
    let dref = store(&r.spool, id, data);
    r.journal
        .append(&Record::Arrived(MessageHead {
            id,
            envelope: env(data.len() as u64),
            data: dref.clone(),
        }))
        .unwrap();
    r.journal.commit().unwrap();
    dref
}

fn ids() -> QueueIdGen {
    QueueIdGen::new(4242)
}

#[test]
fn small_messages_go_inline_large_ones_to_the_pool_or_own_file() {
    for mode in [FileMode::Pool, FileMode::Simple] {
        let dir = tempfile::tempdir().unwrap();
        let mut r = recover(dir.path(), cfg(mode, 4096)).unwrap();
        let mut g = ids();
        let (a, b) = (g.next(1), g.next(2));
        let small = body(2048);
        let big = body(100_000);
        let da = accept(&mut r, a, &small);
        let db = accept(&mut r, b, &big);
        assert!(matches!(da, DataRef::Inline(_)));
        assert_eq!(db.storage() == Storage::File, mode == FileMode::Simple);
        assert_eq!(read_all(&r.spool, a, &da), small);
        assert_eq!(read_all(&r.spool, b, &db), big);
        drop(r);
        let r = recover(dir.path(), cfg(mode, 4096)).unwrap();
        assert_eq!(r.state.incoming, vec![a, b]);
        assert!(
            r.report.adopted.is_empty() && r.report.missing.is_empty(),
            "{:?}",
            r.report
        );
        assert_eq!(r.state.messages[&b].storage, db.storage());
        let Record::Arrived(h) = r.journal.read_at(r.state.messages[&a].head).unwrap() else {
            panic!()
        };
        assert_eq!(read_all(&r.spool, a, &h.data), small);
    }
}

#[test]
fn inline_disabled_puts_everything_in_files() {
    let dir = tempfile::tempdir().unwrap();
    let r = recover(dir.path(), cfg(FileMode::Simple, 0)).unwrap();
    let id = ids().next(5);
    let d = store(&r.spool, id, b"tiny\r\n");
    assert_eq!(d, DataRef::File);
    assert!(r.spool.msg_path(id).exists());
    assert_eq!(read_all(&r.spool, id, &d), b"tiny\r\n");
}

#[test]
fn crash_between_file_commit_and_journal_append_adopts_the_file() {
    for mode in [FileMode::Pool, FileMode::Simple] {
        let dir = tempfile::tempdir().unwrap();
        let r = recover(dir.path(), cfg(mode, 0)).unwrap();
        let id = ids().next(7);
        let data = body(5000);
        let dref = store(&r.spool, id, &data);
        drop(r); // crash: no Arrived record
        let r = recover(dir.path(), cfg(mode, 0)).unwrap();
        assert_eq!(r.report.adopted, vec![id], "{mode:?}");
        assert_eq!(r.state.incoming, vec![id]);
        let Record::Arrived(h) = r.journal.read_at(r.state.messages[&id].head).unwrap() else {
            panic!()
        };
        assert_eq!(h.data, dref);
        assert_eq!(h.envelope, env(5000));
        assert_eq!(read_all(&r.spool, id, &h.data), data);
        drop(r);
        // Adoption was journaled: the next start does not adopt again.
        let r = recover(dir.path(), cfg(mode, 0)).unwrap();
        assert!(r.report.adopted.is_empty());
        assert_eq!(r.state.messages.len(), 1);
    }
}

#[test]
fn partial_files_are_removed_and_slots_freed() {
    for mode in [FileMode::Pool, FileMode::Simple] {
        let dir = tempfile::tempdir().unwrap();
        let r = recover(dir.path(), cfg(mode, 100)).unwrap();
        let id = ids().next(9);
        let mut d = r.spool.draft(id);
        d.append(&r.spool, &body(5000)).unwrap();
        let total = r.spool.pool().total();
        drop(d); // crash mid-DATA: data written, offset still 0, lock gone with the fd
        drop(r);
        let r = recover(dir.path(), cfg(mode, 100)).unwrap();
        assert!(r.state.messages.is_empty());
        match mode {
            FileMode::Simple => {
                assert_eq!(r.report.partial.len(), 1);
                assert!(!r.spool.msg_path(id).exists());
            }
            FileMode::Pool => assert_eq!(r.report.free_slots as u32, total),
        }
    }
}

#[test]
fn corrupt_committed_file_is_not_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let r = recover(dir.path(), cfg(FileMode::Simple, 0)).unwrap();
    let id = ids().next(11);
    store(&r.spool, id, &body(3000));
    let p = r.spool.msg_path(id);
    drop(r);
    let mut b = fs::read(&p).unwrap();
    b[1000] ^= 1;
    fs::write(&p, &b).unwrap();
    let r = recover(dir.path(), cfg(FileMode::Simple, 0)).unwrap();
    assert!(r.report.adopted.is_empty());
    assert_eq!(r.report.corrupt.len(), 1);
    assert!(!p.exists());
}

#[test]
fn removed_messages_leave_no_files_and_pool_slots_are_reused() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = recover(dir.path(), cfg(FileMode::Pool, 0)).unwrap();
    let mut g = ids();
    let first = g.next(1);
    let big = body(20_000); // larger than the preallocation: the slot grows
    let d1 = accept(&mut r, first, &big);
    let slot = match d1 {
        DataRef::Pool(n) => n,
        ref other => panic!("{other:?}"),
    };
    r.journal.append(&Record::Removed { id: first }).unwrap();
    r.journal.commit().unwrap();
    r.spool.remove_data(first, d1.storage()).unwrap();
    let total = r.spool.pool().total();
    // The freed slot is reused without truncation; old junk lies beyond the end marker.
    let second = g.next(2);
    let small = body(700);
    let d2 = accept(&mut r, second, &small);
    assert_eq!(d2, DataRef::Pool(slot));
    assert_eq!(r.spool.pool().total(), total, "no new file");
    assert_eq!(read_all(&r.spool, second, &d2), small);
    assert!(
        r.spool.open_data(first, &d1).is_err(),
        "slot now holds another id"
    );
    drop(r);
    let r = recover(dir.path(), cfg(FileMode::Pool, 0)).unwrap();
    assert_eq!(
        r.state.messages.keys().copied().collect::<Vec<_>>(),
        vec![second]
    );
    assert!(
        r.report.adopted.is_empty() && r.report.leftovers.is_empty(),
        "{:?}",
        r.report
    );
}

#[test]
fn crash_after_removed_record_before_unlink_cleans_up() {
    for mode in [FileMode::Pool, FileMode::Simple] {
        let dir = tempfile::tempdir().unwrap();
        let mut r = recover(dir.path(), cfg(mode, 0)).unwrap();
        let id = ids().next(3);
        accept(&mut r, id, &body(3000));
        r.journal.append(&Record::Removed { id }).unwrap();
        r.journal.commit().unwrap();
        drop(r); // crash before remove_data
        let r = recover(dir.path(), cfg(mode, 0)).unwrap();
        assert!(r.state.messages.is_empty());
        assert!(
            r.report.adopted.is_empty(),
            "{mode:?}: removed mail must not come back"
        );
        assert_eq!(r.report.leftovers.len(), 1);
        assert!(!r.spool.msg_path(id).exists());
    }
}

#[test]
fn missing_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = recover(dir.path(), cfg(FileMode::Simple, 0)).unwrap();
    let id = ids().next(3);
    accept(&mut r, id, &body(100));
    let p = r.spool.msg_path(id);
    drop(r);
    fs::remove_file(p).unwrap();
    let r = recover(dir.path(), cfg(FileMode::Simple, 0)).unwrap();
    assert_eq!(r.report.missing, vec![id]);
}

#[test]
fn aborted_drafts_leave_nothing() {
    for mode in [FileMode::Pool, FileMode::Simple] {
        let dir = tempfile::tempdir().unwrap();
        let r = recover(dir.path(), cfg(mode, 10)).unwrap();
        let id = ids().next(3);
        let mut d = r.spool.draft(id);
        d.append(&r.spool, &body(500)).unwrap();
        d.abort(&r.spool).unwrap();
        assert!(!r.spool.msg_path(id).exists());
        let free = r.spool.pool().free_len();
        assert_eq!(free as u32, r.spool.pool().total());
    }
}

#[test]
fn dead_segments_are_reported_after_everything_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(FileMode::Pool, 4096);
    c.journal.segment_size = 4096;
    let mut r = recover(dir.path(), c).unwrap();
    let mut g = ids();
    let mut all = Vec::new();
    for n in 0..40 {
        let id = g.next(n);
        accept(&mut r, id, &body(300));
        all.push(id);
    }
    for id in &all[..39] {
        r.journal.append(&Record::Removed { id: *id }).unwrap();
    }
    r.journal.commit().unwrap();
    drop(r);
    let mut r = recover(dir.path(), c).unwrap();
    let oldest_live = r.state.messages[&all[39]].head.segment();
    assert!(!r.state.dead_segments.is_empty());
    assert!(r.state.dead_segments.iter().all(|&s| s < oldest_live));
    r.spool.checkpoint().unwrap();
    let below = r.state.refs.delete_below(r.journal.current_segment());
    r.journal.delete_segments_before(below).unwrap();
    drop(r);
    let r = recover(dir.path(), c).unwrap();
    assert_eq!(r.state.messages.len(), 1);
    assert!(r.state.messages.contains_key(&all[39]));
}

#[test]
fn recovery_of_an_empty_or_fresh_spool() {
    let dir = tempfile::tempdir().unwrap();
    let root: &Path = &dir.path().join("spool");
    let r = recover(root, SpoolConfig::default()).unwrap();
    assert!(r.state.messages.is_empty() && r.state.torn.is_empty());
    assert!(
        root.join("msg").is_dir() && root.join("pool").is_dir() && root.join("journal").is_dir()
    );
    let first = r.journal.current_segment();
    drop(r);
    // An idle start writes nothing (a full disk must not stop it): no
    // segment, no torn tail, and the next start uses the same number.
    assert!(queue::list_segments(&root.join("journal"))
        .unwrap()
        .is_empty());
    let r = recover(root, SpoolConfig::default()).unwrap();
    assert!(r.state.torn.is_empty(), "{:?}", r.state.torn);
    assert!(r.state.dead_segments.is_empty());
    assert_eq!(r.journal.current_segment(), first);
}

#[test]
fn recovery_leaves_files_being_written_alone() {
    for mode in [FileMode::Pool, FileMode::Simple] {
        let dir = tempfile::tempdir().unwrap();
        let writer = recover(dir.path(), cfg(mode, 0)).unwrap();
        let id = ids().next(3);
        let mut d = writer.spool.draft(id);
        d.append(&writer.spool, &body(5000)).unwrap();
        // qmgr restarts while a cleanup is mid-DATA.
        let r = recover(dir.path(), cfg(mode, 0)).unwrap();
        assert!(r.report.partial.is_empty(), "{mode:?}");
        if mode == FileMode::Simple {
            assert_eq!(r.report.busy.len(), 1);
        }
        // The writer finishes; the message is adopted by the next recovery.
        let dref = d.commit(&writer.spool, &env(5000)).unwrap();
        drop((r, writer));
        let r = recover(dir.path(), cfg(mode, 0)).unwrap();
        assert_eq!(r.report.adopted, vec![id]);
        assert_eq!(read_all(&r.spool, id, &dref), body(5000));
    }
}

#[test]
fn two_writer_processes_never_share_a_slot() {
    let dir = tempfile::tempdir().unwrap();
    let a = recover(dir.path(), cfg(FileMode::Pool, 0)).unwrap();
    a.spool.grow_pool(2).unwrap();
    let b = Spool::open(dir.path(), cfg(FileMode::Pool, 0)).unwrap();
    assert_eq!(b.pool().scan_free().unwrap(), 2);
    let mut g = ids();
    let mut drafts = Vec::new();
    for n in 0..4 {
        let s = if n % 2 == 0 { &a.spool } else { &b };
        let mut d = s.draft(g.next(n));
        d.append(s, b"x\r\n").unwrap();
        drafts.push((d, s));
    }
    let mut slots: Vec<DataRef> = drafts
        .into_iter()
        .map(|(d, s)| d.commit(s, &env(3)).unwrap())
        .collect();
    slots.sort_by_key(|d| format!("{d:?}"));
    slots.dedup();
    assert_eq!(slots.len(), 4, "{slots:?}");
}

#[test]
fn a_segment_is_deleted_only_once_the_restatement_that_freed_it_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(FileMode::Pool, 4096);
    c.journal.segment_size = 4096;
    let mut r = recover(dir.path(), c).unwrap();
    let mut g = ids();
    let h = g.next(1);
    let data = store(&r.spool, h, &body(1500));
    let head = Record::Arrived(MessageHead {
        id: h,
        envelope: env(1500),
        data,
    });
    log(&mut r, head.clone());
    let first = r.journal.segments()[0];
    // Traffic that comes and goes moves the journal on to later segments.
    come_and_go(&mut r, &mut g, 10..30);
    assert!(r.journal.current_segment() > first + 1);
    // h is retried: restated at the head, appended but not yet committed.
    let rw = r.state.rewritten(h, &head, 900).unwrap();
    let lsn = r.journal.append(&rw).unwrap();
    r.state.apply(lsn, &rw);
    let deleted = collect_garbage(&r.spool, &mut r.journal, &r.state).unwrap();
    assert!(
        !deleted.contains(&first),
        "h's only durable record deleted before its restatement is durable: {deleted:?}"
    );
    // A crash now finds h where it was.
    let jdir = r.spool.journal_dir();
    let copy = tempfile::tempdir().unwrap();
    for s in queue::list_segments(&jdir).unwrap() {
        fs::copy(
            queue::segment_path(&jdir, s),
            queue::segment_path(copy.path(), s),
        )
        .unwrap();
    }
    let crashed = queue::replay(copy.path(), 1 << 20).unwrap();
    assert!(crashed.messages.contains_key(&h), "h lost in a crash");
    // Once the restatement is durable, the segment goes, though more has
    // been appended since (the next collection deletes what the last found).
    r.journal.commit().unwrap();
    let more = g.next(99);
    let data = store(&r.spool, more, &body(100));
    let rec = Record::Arrived(MessageHead {
        id: more,
        envelope: env(100),
        data,
    });
    let lsn = r.journal.append(&rec).unwrap();
    r.state.apply(lsn, &rec);
    let deleted = collect_garbage(&r.spool, &mut r.journal, &r.state).unwrap();
    assert!(deleted.contains(&first), "{deleted:?}");
    r.journal.commit().unwrap();
    drop(r);
    let r = recover(dir.path(), c).unwrap();
    let mut live: Vec<_> = r.state.messages.keys().copied().collect();
    live.sort();
    assert_eq!(live, vec![h, more]);
    assert_eq!(
        r.state
            .deferred
            .iter()
            .map(|e| (e.0, e.1))
            .collect::<Vec<_>>(),
        vec![(900, h)]
    );
}

/// Messages `ns` of 1,500 bytes that arrive and are removed at once:
/// traffic that moves the journal on to later segments.
fn come_and_go(r: &mut queue::Recovered, g: &mut QueueIdGen, ns: std::ops::Range<u64>) {
    for n in ns {
        let id = g.next(n);
        let data = store(&r.spool, id, &body(1500));
        log(
            r,
            Record::Arrived(MessageHead {
                id,
                envelope: env(1500),
                data,
            }),
        );
        log(r, Record::Removed { id });
    }
}

/// Appends, commits and applies one record, as a running qmgr does.
fn log(r: &mut queue::Recovered, rec: Record) -> queue::Lsn {
    let lsn = r.journal.append(&rec).unwrap();
    r.journal.commit().unwrap();
    r.state.apply(lsn, &rec);
    lsn
}

#[test]
fn running_qmgr_state_retry_rewrite_and_garbage_collection() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(FileMode::Pool, 4096);
    c.journal.segment_size = 4096;
    let mut r = recover(dir.path(), c).unwrap();
    let mut g = ids();
    let (a, b, h) = (g.next(1), g.next(2), g.next(3));
    for id in [a, b, h] {
        let data = store(&r.spool, id, &body(1500));
        log(
            &mut r,
            Record::Arrived(MessageHead {
                id,
                envelope: env(1500),
                data,
            }),
        );
    }
    let s4: mail::StatusCode = "4.4.1".parse().unwrap();
    let defer = |id, at| Record::Deferred {
        id,
        rcpts: vec![0, 1],
        status: s4,
        reason: "timeout".into(),
        next_attempt: at,
    };
    log(
        &mut r,
        Record::Delivered {
            id: a,
            rcpts: vec![0],
        },
    );
    log(&mut r, defer(a, 100));
    log(&mut r, defer(b, 50));
    log(&mut r, defer(h, 70));
    log(&mut r, Record::Held { id: h });
    assert_eq!(r.state.deferred.len(), 2, "held mail is not scheduled");
    assert_eq!(r.state.deferred.next_due(), Some(50));

    // Retry b at 60: restate it at the head, then a at 100.
    let (_, due, head_lsn) = r.state.deferred.pop_due(60).unwrap();
    assert_eq!(due, b);
    let head = r.journal.read_at(head_lsn).unwrap();
    let rw = r.state.rewritten(b, &head, 0).unwrap();
    log(&mut r, rw);
    let (_, due, head_lsn) = r.state.deferred.pop_due(100).unwrap();
    assert_eq!(due, a);
    let head = r.journal.read_at(head_lsn).unwrap();
    let rw = r.state.rewritten(a, &head, 400).unwrap();
    match &rw {
        Record::Rewritten { remaining, .. } => assert_eq!(remaining, &vec![1]),
        other => panic!("{other:?}"),
    }
    log(&mut r, rw);
    assert_eq!(
        r.state.deferred.iter().map(|e| e.1).collect::<Vec<_>>(),
        vec![a]
    );

    // Fill segments with traffic that comes and goes, then collect garbage.
    come_and_go(&mut r, &mut g, 10..60);
    // h still pins the first segment; releasing and rewriting it frees it.
    let head = r.journal.read_at(r.state.messages[&h].head).unwrap();
    let rw = r.state.rewritten(h, &head, 900).unwrap();
    log(&mut r, rw);
    log(&mut r, Record::Released { id: h });
    let before = r.journal.segments();
    let deleted = collect_garbage(&r.spool, &mut r.journal, &r.state).unwrap();
    assert!(
        !deleted.is_empty() && deleted[0] == before[0],
        "{deleted:?} of {before:?}"
    );
    let live: Vec<_> = [a, b, h].into_iter().collect();
    drop(r);

    // What survives the deleted segments: the same queue.
    let r = recover(dir.path(), c).unwrap();
    let mut got: Vec<_> = r.state.messages.keys().copied().collect();
    got.sort();
    assert_eq!(got, live);
    assert_eq!(r.state.incoming, vec![b]);
    assert_eq!(
        r.state
            .deferred
            .iter()
            .map(|e| (e.0, e.1))
            .collect::<Vec<_>>(),
        vec![(400, a), (900, h)]
    );
    assert!(
        r.report.adopted.is_empty() && r.report.missing.is_empty(),
        "{:?}",
        r.report
    );
    let list = r.state.list(&r.journal).unwrap();
    let rows: Vec<_> = list
        .iter()
        .map(|e| (e.id, e.recipients.len(), e.held, e.next_attempt))
        .collect();
    assert_eq!(
        rows,
        vec![(a, 1, false, 400), (b, 2, false, 0), (h, 2, false, 900)]
    );
    assert_eq!(list[0].recipients, vec!["b@example.net".to_string()]);
    assert_eq!(
        (list[1].sender.as_str(), list[1].size),
        ("s@example.org", 1500)
    );
}

#[test]
fn bounces_without_a_queued_notice_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = recover(dir.path(), cfg(FileMode::Pool, 4096)).unwrap();
    let mut g = ids();
    let (a, b) = (g.next(1), g.next(2));
    for id in [a, b] {
        accept(&mut r, id, &body(500));
        r.journal
            .append(&Record::Bounced {
                id,
                rcpts: vec![0, 1],
                status: "5.1.1".parse().unwrap(),
                reason: "550 5.1.1 no such user".into(),
            })
            .unwrap();
    }
    // Only a's notice was confirmed before the crash.
    r.journal
        .append(&Record::Notified {
            id: a,
            rcpts: vec![0, 1],
        })
        .unwrap();
    r.journal.commit().unwrap();
    drop(r);
    let r = recover(dir.path(), cfg(FileMode::Pool, 4096)).unwrap();
    assert!(!r.state.unnotified.contains_key(&a));
    let owed = &r.state.unnotified[&b];
    assert_eq!(owed.iter().map(|o| o.index).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(owed[0].reason, "550 5.1.1 no such user");
    assert_eq!(owed[0].status.to_string(), "5.1.1");
}

#[test]
fn a_restatement_carries_owed_notices_and_the_warning() {
    // Retrying a message restates it at the journal head; what it still
    // owes must come along, grouped, or it goes with the old segments.
    let mut g = QueueIdGen::new(9);
    let id = g.next(1);
    let mut st = queue::Replay::default();
    let mut env3 = env(10);
    env3.recipients.push(Recipient::new("c@example.net"));
    let head = Record::Arrived(MessageHead {
        id,
        envelope: env3,
        data: DataRef::Inline(b"x\r\n".to_vec()),
    });
    st.apply(queue::Lsn::new(1, 0), &head);
    let s5: mail::StatusCode = "5.1.1".parse().unwrap();
    for (n, i) in [0u32, 1].into_iter().enumerate() {
        st.apply(
            queue::Lsn::new(1, 100 + n as u32),
            &Record::Bounced {
                id,
                rcpts: vec![i],
                status: s5,
                reason: "no such user".into(),
            },
        );
    }
    st.apply(queue::Lsn::new(1, 200), &Record::Warned { id });
    let recs = st.restatement(id, &head, 0).unwrap();
    assert!(matches!(&recs[0], Record::Rewritten { remaining, .. } if remaining == &vec![2]));
    assert!(
        matches!(&recs[1], Record::Bounced { rcpts, .. } if rcpts == &vec![0, 1]),
        "one record for both: {recs:?}"
    );
    assert!(matches!(&recs[2], Record::Warned { .. }));
    assert_eq!(recs.len(), 3);
    // Applied, it leaves the same debt.
    for (n, r) in recs.iter().enumerate() {
        st.apply(queue::Lsn::new(2, n as u32), r);
    }
    assert_eq!(st.unnotified[&id].len(), 2);
    assert!(st.messages[&id].warned);
}

/// A front reserved before the content and filled after it (cleanup's
/// DKIM signature) reads back in place, checksum and all, whether the
/// data stays inline, spills past the reserve or starts in a file.
#[test]
fn reserved_front_is_filled_in_place() {
    for (mode, inline_max) in [
        (FileMode::Pool, 64 << 10),
        (FileMode::Pool, 500),
        (FileMode::Pool, 10),
        (FileMode::Simple, 500),
        (FileMode::Simple, 0),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), cfg(mode, inline_max)).unwrap();
        let mut gen = ids();
        for size in [0usize, 300, 5000, 200_000] {
            let id = gen.next(1);
            let front = b"DKIM-Signature: v=1; made last\r\n";
            let rest = body(size);
            let mut d = spool.draft(id);
            d.reserve(&spool, front.len()).unwrap();
            for chunk in rest.chunks(1000) {
                d.append(&spool, chunk).unwrap();
            }
            d.fill(front).unwrap();
            let total = front.len() + rest.len();
            assert_eq!(d.len(), total as u64);
            let dref = d.commit(&spool, &env(total as u64)).unwrap();
            let mut want = front.to_vec();
            want.extend_from_slice(&rest);
            assert_eq!(
                read_all(&spool, id, &dref),
                want,
                "{mode:?} inline_max {inline_max} size {size}"
            );
        }
    }
}
