//! Journal framing, rotation, group commit and torn-tail replay.

use mail::{Envelope, QueueId, Recipient, StatusCode};
use queue::{
    list_segments, replay, segment_path, DataRef, Journal, JournalConfig, Lsn, MessageHead, Record,
    Syncer, TailCause,
};
use std::fs;
use std::path::Path;

fn id(n: u32) -> QueueId {
    QueueId::from_parts(1_700_000_000_000_000 + n as u64, 1, n).unwrap()
}

fn arrived(n: u32, rcpts: usize) -> Record {
    Record::Arrived(MessageHead {
        id: id(n),
        envelope: Envelope {
            sender: format!("s{n}@example.org"),
            recipients: (0..rcpts)
                .map(|r| Recipient::new(format!("r{r}@example.net")))
                .collect(),
            ..Envelope::default()
        },
        data: DataRef::Inline(format!("Subject: {n}\r\n\r\nbody\r\n").into_bytes()),
    })
}

fn cfg(segment_size: u32) -> JournalConfig {
    JournalConfig {
        segment_size,
        max_record: 1 << 20,
    }
}

#[test]
fn append_commit_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(1 << 20)).unwrap();
    let a = j.append(&arrived(1, 2)).unwrap();
    let b = j
        .append(&Record::Delivered {
            id: id(1),
            rcpts: vec![0],
        })
        .unwrap();
    assert!(a < b && j.has_pending());
    // Readable before and after the commit.
    assert_eq!(
        j.read_at(b).unwrap(),
        Record::Delivered {
            id: id(1),
            rcpts: vec![0]
        }
    );
    let durable = j.commit().unwrap();
    assert!(durable > b && !j.has_pending());
    assert_eq!(j.read_at(a).unwrap(), arrived(1, 2));
    assert!(j.read_at(Lsn::new(j.current_segment(), 3)).is_err());
    assert_eq!(j.commit().unwrap(), durable, "empty commit is a no-op");
}

#[test]
fn inline_data_spans_name_the_bytes_in_the_segment_files() {
    // What an agent reads by reference: the span of each record's inline
    // data, read back from the segment file after the commit, is the data.
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(4096)).unwrap();
    let mut want = Vec::new();
    let mut heads = Vec::new();
    for n in 0..40u32 {
        let data: Vec<u8> = (0..(n * 37 % 700)).map(|i| (i * 7 + n) as u8).collect();
        let head = MessageHead {
            id: id(n),
            envelope: Envelope {
                sender: format!("s{n}@example.org"),
                recipients: vec![Recipient::new("r@example.net")],
                ..Envelope::default()
            },
            data: DataRef::Inline(data.clone()),
        };
        let rec = if n % 3 == 0 {
            Record::Rewritten {
                head,
                remaining: (0..n).collect(),
                next_attempt: 1_700_000_000 + n as u64 * 1000,
                held: n % 2 == 0,
            }
        } else {
            Record::Arrived(head)
        };
        let (lsn, span) = j.append_with_span(&rec).unwrap();
        let span = span.expect("a record with inline data has a span");
        assert_eq!(span.len as usize, data.len());
        want.push((span, data));
        heads.push((lsn, span));
        let (_, none) = j
            .append_with_span(&Record::Delivered {
                id: id(n),
                rcpts: vec![0],
            })
            .unwrap();
        assert_eq!(none, None);
    }
    j.commit().unwrap();
    assert!(want.iter().any(|(s, _)| s.segment != want[0].0.segment));
    // A record read back at its position (as qmgr reads a recovered
    // message's head) gives the same span.
    for (lsn, span) in &heads {
        assert_eq!(j.read_at(*lsn).unwrap().data_span(*lsn), Some(*span));
    }
    use std::os::unix::fs::FileExt;
    for (span, data) in &want {
        let f = queue::open_span(dir.path(), span).unwrap();
        let mut got = vec![0u8; span.len as usize];
        f.read_exact_at(&mut got, span.offset as u64).unwrap();
        assert_eq!(&got, data, "{span:?}");
    }
    // A span past the end, or in a segment that is not there, is an error.
    let (span, _) = &want[want.len() - 1];
    let past = queue::DataSpan {
        offset: span.offset + span.len,
        len: 1 << 20,
        ..*span
    };
    assert!(queue::open_span(dir.path(), &past).is_err());
    let gone = queue::DataSpan {
        segment: span.segment + 10,
        ..*span
    };
    assert!(queue::open_span(dir.path(), &gone).is_err());
}

/// Records read back whole whatever their size against the first read
/// (a few KiB): a body of a few bytes, one around that read's end, and
/// ones much larger, in closed segments and in the open one.
#[test]
fn records_of_every_size_read_back_from_closed_and_open_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(64 * 1024)).unwrap();
    let sizes = [10, 8000, 8150, 8192, 8300, 20_000, 100_000, 3, 60_000];
    let mut written = Vec::new();
    for (n, size) in sizes.iter().enumerate() {
        let rec = Record::Arrived(MessageHead {
            id: id(n as u32),
            envelope: Envelope {
                sender: "s@example.org".into(),
                recipients: vec![Recipient::new("r@example.net")],
                ..Envelope::default()
            },
            data: DataRef::Inline((0..*size).map(|i| (i % 251) as u8).collect()),
        });
        written.push((j.append(&rec).unwrap(), rec));
        j.commit().unwrap();
    }
    assert!(j.segments().len() > 2, "{:?}", j.segments());
    for (lsn, rec) in &written {
        assert_eq!(&j.read_at(*lsn).unwrap(), rec, "{lsn:?}");
    }
}

/// `read_at` reads a record's first 8 KiB at once and the rest only when
/// the frame is longer: frames of every length across that size, from a
/// closed segment (read from the file), read back whole.
#[test]
fn frames_of_every_length_around_the_first_read_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(256 * 1024)).unwrap();
    let rec = |n: u32, size: usize| {
        Record::Arrived(MessageHead {
            id: id(n),
            envelope: Envelope::default(),
            data: DataRef::Inline(vec![b'x'; size]),
        })
    };
    let mut written = Vec::new();
    let mut lengths = Vec::new();
    for (n, size) in (8120..8220).enumerate() {
        let r = rec(n as u32, size);
        let at = j.append(&r).unwrap();
        let mut frame = Vec::new();
        queue::encode_frame(&r, 1 << 20, &mut frame).unwrap();
        lengths.push(frame.len());
        written.push((at, r));
    }
    j.commit().unwrap();
    // Closed and durable: the next record starts a new segment, so these
    // are read from their file.
    j.append(&rec(9999, 300_000)).unwrap();
    j.commit().unwrap();
    assert!(
        lengths.contains(&8191) && lengths.contains(&8192) && lengths.contains(&8193),
        "{lengths:?}"
    );
    for (lsn, r) in &written {
        assert_eq!(&j.read_at(*lsn).unwrap(), r, "{lsn:?}");
    }
}

#[test]
fn rotation_spreads_records_and_replay_reads_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(4096)).unwrap();
    let mut lsns = Vec::new();
    for n in 0..200 {
        lsns.push(j.append(&arrived(n, 1)).unwrap());
        if n % 7 == 0 {
            j.commit().unwrap();
        }
    }
    j.commit().unwrap();
    assert!(j.segments().len() > 3, "{:?}", j.segments());
    for (n, l) in lsns.iter().enumerate() {
        assert_eq!(j.read_at(*l).unwrap(), arrived(n as u32, 1));
    }
    drop(j);
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert_eq!(st.records, 200);
    assert!(st.torn.is_empty());
    assert_eq!(st.incoming.len(), 200);
    assert_eq!(st.messages[&id(5)].head, lsns[5]);
    assert!(st.dead_segments.is_empty());
}

/// Three committed records; returns the segment path and the offsets of the records.
fn three_records(dir: &Path) -> (std::path::PathBuf, Vec<u64>, Vec<u8>) {
    let mut j = Journal::open(dir, cfg(1 << 20)).unwrap();
    let mut offs = Vec::new();
    for n in 0..3 {
        offs.push(j.append(&arrived(n, 1)).unwrap().offset() as u64);
    }
    j.commit().unwrap();
    let p = segment_path(dir, j.current_segment());
    let bytes = fs::read(&p).unwrap();
    offs.push(bytes.len() as u64);
    (p, offs, bytes)
}

#[test]
fn torn_tail_at_every_byte_of_the_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let (p, offs, good) = three_records(dir.path());
    let (start, end) = (offs[2] as usize, offs[3] as usize);
    for cut in start..end {
        fs::write(&p, &good[..cut]).unwrap();
        let st = replay(dir.path(), 1 << 20).unwrap();
        assert_eq!(st.records, 2, "cut {cut}");
        assert!(!st.messages.contains_key(&id(2)));
        if cut > start {
            assert_eq!(st.torn.len(), 1, "cut {cut}");
            assert_eq!(st.torn[0].offset as usize, start);
            assert_eq!(st.torn[0].dropped as usize, cut - start);
        } else {
            assert!(st.torn.is_empty());
        }
        assert_eq!(fs::metadata(&p).unwrap().len() as usize, start, "truncated");
    }
    // After the cut, a new journal appends to a fresh segment and replay is clean.
    let mut j = Journal::open(dir.path(), cfg(1 << 20)).unwrap();
    j.append(&arrived(9, 1)).unwrap();
    j.commit().unwrap();
    drop(j);
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert!(st.torn.is_empty());
    assert_eq!(st.records, 3);
    assert!(st.messages.contains_key(&id(9)));
}

#[test]
fn flipped_bits_in_the_last_record_are_cut_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let (p, offs, good) = three_records(dir.path());
    let (start, end) = (offs[2] as usize, offs[3] as usize);
    for bit in start * 8..end * 8 {
        let mut b = good.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        fs::write(&p, &b).unwrap();
        let st = replay(dir.path(), 1 << 20).unwrap();
        assert_eq!(st.records, 2, "bit {bit}");
        assert_eq!(st.torn.len(), 1, "bit {bit}");
        assert!(matches!(st.torn[0].cause, TailCause::Frame(_)));
    }
}

#[test]
fn flipped_bit_in_a_middle_record_drops_the_rest_of_that_segment_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(4096)).unwrap();
    for n in 0..100 {
        j.append(&arrived(n, 1)).unwrap();
    }
    j.commit().unwrap();
    let segs = j.segments();
    drop(j);
    let first = segment_path(dir.path(), segs[0]);
    let mut b = fs::read(&first).unwrap();
    b[40] ^= 0x10;
    fs::write(&first, &b).unwrap();
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert_eq!(st.torn.len(), 1);
    assert_eq!(st.torn[0].segment, segs[0]);
    assert!(st.records < 100 && st.records > 50, "{}", st.records);
    assert!(st.messages.contains_key(&id(99)));
}

#[test]
fn truncated_segment_headers_from_a_crash_mid_rotation() {
    for len in 0..16 {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), cfg(1 << 20)).unwrap();
        j.append(&arrived(1, 1)).unwrap();
        j.commit().unwrap();
        let next = j.current_segment() + 1;
        drop(j);
        // The rotation created the next segment but died writing its header.
        let header = fs::read(segment_path(dir.path(), next - 1)).unwrap();
        let mut partial = header[..16].to_vec();
        partial[8] = next as u8;
        fs::write(segment_path(dir.path(), next), &partial[..len]).unwrap();
        let st = replay(dir.path(), 1 << 20).unwrap();
        assert_eq!(st.records, 1, "len {len}");
        assert_eq!(st.torn.len(), 1);
        assert_eq!(st.torn[0].cause, TailCause::ShortHeader);
        assert_eq!(
            list_segments(dir.path()).unwrap(),
            vec![next - 1],
            "short segment deleted"
        );
    }
}

#[test]
fn rotation_crash_after_header_with_torn_first_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(4096)).unwrap();
    let mut n = 0;
    while j.segments().len() < 2 {
        j.append(&arrived(n, 1)).unwrap();
        n += 1;
    }
    j.commit().unwrap();
    let last = j.current_segment();
    drop(j);
    // Tear the only record of the new segment in half.
    let p = segment_path(dir.path(), last);
    let b = fs::read(&p).unwrap();
    fs::write(&p, &b[..16 + (b.len() - 16) / 2]).unwrap();
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert_eq!(st.records, n as u64 - 1);
    assert_eq!(st.torn.len(), 1);
    assert_eq!(st.torn[0].segment, last);
    assert_eq!(fs::metadata(&p).unwrap().len(), 16);
}

#[test]
fn foreign_segment_is_skipped_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        segment_path(dir.path(), 4),
        b"this is not a journal segment",
    )
    .unwrap();
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert_eq!(st.torn[0].cause, TailCause::ForeignHeader);
    let j = Journal::open(dir.path(), cfg(1 << 20)).unwrap();
    assert_eq!(j.current_segment(), 5);
}

#[test]
fn replay_rebuilds_recipient_state_schedule_and_dead_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(1 << 20)).unwrap();
    let s4xx: StatusCode = "4.4.1".parse().unwrap();
    j.append(&arrived(1, 3)).unwrap();
    j.append(&arrived(2, 1)).unwrap();
    j.append(&arrived(3, 1)).unwrap();
    j.append(&arrived(4, 1)).unwrap();
    j.append(&Record::Delivered {
        id: id(1),
        rcpts: vec![0],
    })
    .unwrap();
    j.append(&Record::Bounced {
        id: id(1),
        rcpts: vec![2],
        status: "5.1.1".parse().unwrap(),
        reason: "no".into(),
    })
    .unwrap();
    j.append(&Record::Deferred {
        id: id(1),
        rcpts: vec![1],
        status: s4xx,
        reason: "refused".into(),
        next_attempt: 500,
    })
    .unwrap();
    j.append(&Record::Delivered {
        id: id(2),
        rcpts: vec![0],
    })
    .unwrap();
    j.append(&Record::Removed { id: id(2) }).unwrap();
    j.append(&Record::Held { id: id(3) }).unwrap();
    j.append(&Record::Held { id: id(4) }).unwrap();
    j.append(&Record::Released { id: id(4) }).unwrap();
    j.append(&Record::Delivered {
        id: id(77),
        rcpts: vec![0],
    })
    .unwrap();
    j.commit().unwrap();
    let first = j.current_segment();
    drop(j);

    // Next run: message 1 is retried and rewritten at the head, 3 and 4 too.
    let mut j = Journal::open(dir.path(), cfg(1 << 20)).unwrap();
    let Record::Arrived(h1) = arrived(1, 3) else {
        unreachable!()
    };
    let rw = j
        .append(&Record::Rewritten {
            head: h1,
            remaining: vec![1],
            next_attempt: 900,
            held: false,
        })
        .unwrap();
    for n in [3, 4] {
        let Record::Arrived(h) = arrived(n, 1) else {
            unreachable!()
        };
        j.append(&Record::Rewritten {
            head: h,
            remaining: vec![0],
            next_attempt: 0,
            held: n == 3,
        })
        .unwrap();
    }
    j.commit().unwrap();
    drop(j);

    let st = replay(dir.path(), 1 << 20).unwrap();
    assert_eq!(st.strays, 1);
    assert_eq!(st.messages.len(), 3);
    assert!(st.removed.contains(&id(2)));
    let m1 = &st.messages[&id(1)];
    assert_eq!(
        (m1.head, m1.next_attempt, st.done(id(1)).len()),
        (rw, 900, 0)
    );
    assert_eq!(
        st.deferred.iter().collect::<Vec<_>>(),
        vec![(900, id(1), rw)]
    );
    assert_eq!(st.incoming, vec![id(4)]);
    assert!(st.messages[&id(3)].held);
    assert_eq!(
        st.dead_segments,
        vec![first],
        "everything live was rewritten"
    );
}

#[test]
fn pending_recipients_after_replay() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(1 << 20)).unwrap();
    let head = j.append(&arrived(1, 4)).unwrap();
    j.append(&Record::Delivered {
        id: id(1),
        rcpts: vec![0, 2],
    })
    .unwrap();
    j.commit().unwrap();
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert_eq!(st.messages[&id(1)].head, head);
    assert_eq!(st.pending(id(1), &j.read_at(head).unwrap()), vec![1, 3]);
    assert!(st.done(id(9)).is_empty());
}

/// A message moved away stays out of delivery across a restart, and one
/// moved here stays unsettled (held) until `Released` settles it, keeping
/// the transfer id, the sender's attempts and its own hold until then.
#[test]
fn moving_and_imported_messages_replay_held_with_their_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(1 << 20)).unwrap();
    j.append(&arrived(1, 2)).unwrap();
    j.append(&Record::Moving {
        id: id(1),
        held: false,
    })
    .unwrap();
    let Record::Arrived(h) = arrived(2, 3) else {
        unreachable!()
    };
    j.append(&Record::Rewritten {
        head: h,
        remaining: vec![1, 2],
        next_attempt: 900,
        held: true,
    })
    .unwrap();
    j.append(&Record::Imported {
        id: id(2),
        transfer: "a.example/1".into(),
        from: "a.example".into(),
        held: true,
        attempts: 3,
    })
    .unwrap();
    j.commit().unwrap();
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert!(st.messages[&id(1)].held && !st.moving[&id(1)]);
    assert!(st.deferred.is_empty(), "neither is scheduled");
    let imp = &st.imports[&id(2)];
    assert_eq!(
        (imp.transfer.as_str(), imp.held, imp.attempts),
        ("a.example/1", true, 3)
    );
    assert_eq!(st.messages[&id(2)].next_attempt, 900);
    // Settled: released (the sender's hold is restated by `Held`); the
    // move given up: released too.
    j.append(&Record::Released { id: id(2) }).unwrap();
    j.append(&Record::Released { id: id(1) }).unwrap();
    j.commit().unwrap();
    let st = replay(dir.path(), 1 << 20).unwrap();
    assert!(st.imports.is_empty() && st.moving.is_empty());
    assert!(!st.messages[&id(2)].held && !st.messages[&id(1)].held);
    assert_eq!(st.deferred.len(), 1, "the import keeps its retry time");
}

#[test]
fn deleting_dead_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(4096)).unwrap();
    for n in 0..100 {
        j.append(&arrived(n, 1)).unwrap();
    }
    j.commit().unwrap();
    let segs = j.segments();
    let deleted = j.delete_segments_before(segs[2]).unwrap();
    assert_eq!(deleted, segs[..2].to_vec());
    assert_eq!(list_segments(dir.path()).unwrap(), segs[2..].to_vec());
    // The current segment is never deleted.
    let cur = j.current_segment();
    j.delete_segments_before(u32::MAX).unwrap();
    assert_eq!(list_segments(dir.path()).unwrap(), vec![cur]);
}

#[test]
fn too_large_record_is_refused_and_journal_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(
        dir.path(),
        JournalConfig {
            segment_size: 1 << 20,
            max_record: 256,
        },
    )
    .unwrap();
    let big = Record::Arrived(MessageHead {
        id: id(1),
        envelope: Envelope::default(),
        data: DataRef::Inline(vec![0; 1000]),
    });
    assert!(matches!(j.append(&big), Err(queue::Error::TooLarge { .. })));
    j.append(&Record::Removed { id: id(1) }).unwrap();
    j.commit().unwrap();
    assert_eq!(replay(dir.path(), 256).unwrap().records, 1);
}

#[test]
fn syncer_group_commits_on_its_thread() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), cfg(8192)).unwrap();
    let (wtx, wrx) = std::sync::mpsc::channel();
    let mut s = Syncer::spawn(move || {
        let _ = wtx.send(());
    })
    .unwrap();
    let mut last = Lsn::default();
    for n in 0..300 {
        last = j.append(&arrived(n, 1)).unwrap();
        s.kick(&mut j).unwrap();
        // Acknowledge whatever finished meanwhile, as an event loop would.
        if wrx.try_recv().is_ok() {
            s.poll(&mut j).unwrap();
        }
    }
    let durable = s.wait_all(&mut j).unwrap();
    assert!(durable > last && !s.in_flight());
    drop(s);
    // One notification per sync: never more syncs than appends.
    let syncs = wrx.try_iter().count();
    assert!(syncs <= 300, "{syncs} syncs");
    assert_eq!(replay(dir.path(), 1 << 20).unwrap().records, 300);
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    fn record() -> impl Strategy<Value = Record> {
        prop_oneof![
            (0u32..50, 1usize..4).prop_map(|(n, r)| arrived(n, r)),
            (0u32..50, proptest::collection::vec(0u32..4, 0..3))
                .prop_map(|(n, rcpts)| Record::Delivered { id: id(n), rcpts }),
            (0u32..50, 1u64..1000).prop_map(|(n, at)| Record::Deferred {
                id: id(n),
                rcpts: vec![0],
                status: "4.0.0".parse().unwrap(),
                reason: "x".into(),
                next_attempt: at,
            }),
            (0u32..50).prop_map(|n| Record::Held { id: id(n) }),
            (0u32..50).prop_map(|n| Record::Released { id: id(n) }),
            (0u32..50).prop_map(|n| Record::Removed { id: id(n) }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the cut or damage, replay keeps exactly the whole records
        /// before it, and agrees with applying them in memory.
        #[test]
        fn replay_keeps_the_prefix(recs in proptest::collection::vec(record(), 1..40),
                                   cut_frac in 0.0f64..1.0, flip in any::<bool>()) {
            let dir = tempfile::tempdir().unwrap();
            let mut j = Journal::open(dir.path(), cfg(1 << 20)).unwrap();
            let mut ends = Vec::new();
            for r in &recs {
                j.append(r).unwrap();
                ends.push(j.end().offset() as usize);
            }
            j.commit().unwrap();
            let p = segment_path(dir.path(), j.current_segment());
            drop(j);
            let mut bytes = fs::read(&p).unwrap();
            let cut = 16 + ((bytes.len() - 16) as f64 * cut_frac) as usize;
            if flip && cut < bytes.len() {
                bytes[cut] ^= 0x40;
            } else {
                bytes.truncate(cut);
            }
            fs::write(&p, &bytes).unwrap();
            let kept = ends.iter().filter(|&&e| e <= cut).count();
            let st = replay(dir.path(), 1 << 20).unwrap();
            prop_assert_eq!(st.records as usize, kept);
            let mut mem = queue::Replay::default();
            let mut off = 16u32;
            for (r, &e) in recs.iter().zip(&ends).take(kept) {
                mem.apply(Lsn::new(1, off), r);
                off = e as u32;
            }
            prop_assert_eq!(&st.messages, &mem.messages);
            prop_assert_eq!(st.deferred.iter().collect::<Vec<_>>(), mem.deferred.iter().collect::<Vec<_>>());
        }
    }
}
