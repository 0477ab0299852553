//! The journal writer and the queue manager's commit bookkeeping
//! together (`DiskStore`, as qmgr runs them), on a disk that fails on
//! demand, checked against a restart's replay.
use mail::{Envelope, QueueId, Recipient};
use queue::disk::{Fault, FaultyDisk};
use queue::{DataRef, Lsn, MessageHead, Record, Replay, SpoolConfig, Storage, Syncer};
use queue_manager::{Action, DiskStore, Event, QueueManager, Settings, Store, Time};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn id(n: u32) -> QueueId {
    QueueId::from_parts(1_700_000_000_000_000 + n as u64, 1, n).unwrap()
}

fn head(n: u32, data: DataRef) -> Box<MessageHead> {
    Box::new(MessageHead {
        id: id(n),
        envelope: Envelope {
            sender: format!("s{n}@example.org"),
            recipients: vec![Recipient::new(format!("r{n}@example.net"))],
            ..Envelope::default()
        },
        data,
    })
}

fn inline(n: u32) -> DataRef {
    DataRef::Inline(format!("Subject: {n}\r\n\r\nhi\r\n").into_bytes())
}

/// What the shell saw: arrivals answered, data removed.
#[derive(Debug, Default)]
struct Seen {
    committed: Vec<QueueId>,
    refused: Vec<(QueueId, bool)>,
    removed: Vec<(QueueId, Storage)>,
    stalled: usize,
    resumed: usize,
}

struct Qmgr {
    qm: QueueManager<DiskStore>,
    disk: FaultyDisk,
    now: Time,
    seen: Seen,
}

impl Qmgr {
    fn start(root: &Path, syncer: bool) -> Self {
        let disk = FaultyDisk::new();
        let r = queue::recover_on(root, SpoolConfig::default(), Arc::new(disk.clone())).unwrap();
        let mut d = DiskStore::new(r.spool, r.journal);
        if syncer {
            d.writer.set_syncer(Syncer::spawn(|| {}).unwrap());
        }
        let now = Time(1_700_000_000_000);
        let qm =
            QueueManager::new(now, Settings::default(), Default::default(), d, r.state).unwrap();
        let mut q = Qmgr {
            qm,
            disk,
            now,
            seen: Seen::default(),
        };
        q.drain();
        q
    }

    fn arrive(&mut self, n: u32, hold: bool, data: DataRef) {
        let ev = Event::Arrived {
            client: 1,
            request: n as u64,
            head: head(n, data),
            hold,
        };
        self.qm.handle(self.now, ev);
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(a) = self.qm.poll_action() {
            match a {
                Action::Answer {
                    request, response, ..
                } => {
                    let i = id(request as u32);
                    match response {
                        ipc::qmgr::Response::Committed => self.seen.committed.push(i),
                        ipc::qmgr::Response::Failed { disk_full, .. } => {
                            self.seen.refused.push((i, disk_full))
                        }
                        ipc::qmgr::Response::Unsettled(_) => {
                            unreachable!("no transfer is asked about here")
                        }
                    }
                }
                Action::RemoveData { id, storage } => self.seen.removed.push((id, storage)),
                Action::Log(_, l) if l.starts_with("journal:") => {
                    if l.contains("writable again") {
                        self.seen.resumed += 1;
                    } else {
                        self.seen.stalled += 1;
                    }
                }
                _ => {}
            }
        }
    }

    fn report(&mut self, r: queue::Result<Lsn>) {
        let ev = match r {
            Ok(end) => Event::Durable(end),
            Err(e) => Event::CommitFailed {
                reason: e.to_string(),
                disk_full: e.is_disk_full(),
            },
        };
        self.qm.handle(self.now, ev);
        self.drain();
    }

    /// One loop turn as the shell runs it: commit when due, wait for
    /// the sync thread if it runs, report.
    fn turn(&mut self) {
        if !self.qm.commit_due(self.now) {
            return;
        }
        if let Some(r) = self.qm.store_mut().writer.commit() {
            self.report(r);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.qm.store().writer.in_flight() {
            assert!(Instant::now() < deadline, "sync thread stuck");
            std::thread::sleep(Duration::from_millis(1));
            if let Some(r) = self.qm.store_mut().writer.synced() {
                self.report(r);
            }
        }
    }

    fn later(&mut self) {
        self.now = Time(self.now.0 + 1000);
        self.qm.handle_timeout(self.now);
        self.drain();
    }

    fn result(&mut self, rec: Record) {
        let (d, state) = self.qm.parts_mut();
        d.append(&rec, state).unwrap();
    }

    fn shutdown(&mut self) {
        let r = self.qm.store_mut().writer.shutdown();
        self.report(r);
    }
}

fn replayed(root: &Path) -> Replay {
    queue::recover(root, SpoolConfig::default()).unwrap().state
}

#[test]
fn a_full_disk_refuses_arrivals_keeps_results_and_resumes_on_its_own() {
    for syncer in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut q = Qmgr::start(dir.path(), syncer);
        q.arrive(1, false, inline(1));
        assert!(q.seen.committed.is_empty(), "answered before the commit");
        q.turn();
        assert_eq!(q.seen.committed, vec![id(1)]);

        q.disk.set_full(true);
        q.arrive(2, false, inline(2));
        // A delivery result made while the disk fills.
        q.result(Record::Delivered {
            id: id(1),
            rcpts: vec![0],
        });
        q.turn();
        assert_eq!(q.seen.refused, vec![(id(2), true)], "{:?}", q.seen);
        assert_eq!(q.seen.stalled, 1);
        assert!(!q.qm.state().messages.contains_key(&id(2)), "taken back");
        // Stalled: arrivals refused at once, no retry before it is due,
        // and each retry that fails says nothing new.
        q.arrive(3, false, inline(3));
        assert_eq!(q.seen.refused.last(), Some(&(id(3), true)));
        let writes = q.disk.writes();
        q.turn();
        assert_eq!(q.disk.writes(), writes, "no retry before a second");
        for _ in 0..3 {
            q.later();
            q.turn();
        }
        assert!(q.disk.writes() > writes, "retried");
        assert_eq!((q.seen.stalled, q.seen.resumed), (1, 0));

        // Space returns: the next retry resumes, nothing restarted.
        q.disk.set_full(false);
        q.later();
        q.turn();
        assert_eq!(q.seen.resumed, 1);
        assert!(!q.qm.commit_stalled());
        q.arrive(4, false, inline(4));
        q.turn();
        assert_eq!(q.seen.committed, vec![id(1), id(4)]);
        q.shutdown();
        drop(q);

        // After a restart: the acknowledged messages, the result kept
        // in memory during the stall, and no refused one.
        let st = replayed(dir.path());
        let mut live: Vec<QueueId> = st.messages.keys().copied().collect();
        live.sort();
        assert_eq!(live, vec![id(1), id(4)], "syncer {syncer}");
        assert_eq!(st.done(id(1)), &[0]);
    }
}

#[test]
fn a_held_arrival_whose_commit_fails_is_removed_and_its_data_freed_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut q = Qmgr::start(dir.path(), false);
    // A held arrival in a pool slot: Arrived and Held are written, the
    // sync fails and loses them.
    q.arrive(1, true, DataRef::Pool(3));
    assert!(q.qm.state().messages[&id(1)].held);
    q.disk.fail_sync(1, Fault::Io);
    q.turn();
    assert_eq!(q.seen.refused, vec![(id(1), false)]);
    // The slot is not freed before the Removed record is durable: a
    // crash could still replay Arrived and Held without it.
    assert!(q.seen.removed.is_empty(), "{:?}", q.seen);
    assert!(!q.qm.state().messages.contains_key(&id(1)));
    q.later();
    q.turn();
    assert_eq!(q.seen.removed, vec![(id(1), Storage::Pool(3))]);
    assert_eq!(q.seen.resumed, 1);
    drop(q);
    let st = replayed(dir.path());
    assert!(st.messages.is_empty(), "{:?}", st.messages.keys());
}

#[test]
fn a_short_write_then_no_space_loses_no_acknowledged_arrival() {
    let dir = tempfile::tempdir().unwrap();
    let mut q = Qmgr::start(dir.path(), true);
    for n in 0..40 {
        q.arrive(n, n % 5 == 0, inline(n));
        if n % 7 == 3 {
            q.disk.fail_write(1, Fault::Short(11));
            q.disk.fail_write(2, Fault::NoSpace);
        }
        q.turn();
        if q.qm.commit_stalled() {
            q.later();
        }
    }
    q.shutdown();
    let mut acked = q.seen.committed.clone();
    for (r, _) in &q.seen.refused {
        assert!(!acked.contains(r), "{r} both acknowledged and refused");
    }
    assert!(acked.len() >= 20, "{} acknowledged", acked.len());
    drop(q);
    let st = replayed(dir.path());
    acked.sort();
    let mut live: Vec<QueueId> = st.messages.keys().copied().collect();
    live.sort();
    assert_eq!(live, acked, "exactly the acknowledged arrivals are queued");
    assert!(st.torn.is_empty(), "{:?}", st.torn);
}

#[test]
fn the_shells_commit_turns_answer_arrivals_once_durable_and_exit_commits_the_rest() {
    for syncer in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut q = Qmgr::start(dir.path(), syncer);
        q.arrive(1, false, inline(1));
        assert!(q.qm.commit_due(q.now));
        let news = q.qm.commit_when_due(q.now);
        if syncer {
            // The sync thread has it: nothing is known yet.
            assert!(!news);
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                assert!(Instant::now() < deadline, "sync thread stuck");
                let (news, ahead) = q.qm.synced(q.now);
                assert_eq!(ahead, None);
                if news {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        } else {
            assert!(news);
        }
        q.drain();
        assert_eq!(q.seen.committed, vec![id(1)]);
        assert!(!q.qm.commit_when_due(q.now), "nothing new to commit");
        // Appended, not committed: exit makes it durable.
        q.arrive(2, false, inline(2));
        let left = q.qm.close_journal(q.now);
        assert!(
            left.iter()
                .any(|a| matches!(a, Action::Answer { request: 2, .. })),
            "{left:?}"
        );
        drop(q);
        let mut live: Vec<QueueId> = replayed(dir.path()).messages.keys().copied().collect();
        live.sort();
        assert_eq!(live, vec![id(1), id(2)], "syncer {syncer}");
    }
}

/// One commit on the sync thread makes one journal segment durable: what
/// an operator's release appended across a segment boundary is committed in
/// the turns after, as the shell runs them (commit when due, collect the
/// sync thread's outcome), not left in memory until the next arrival.
#[test]
fn records_across_a_segment_boundary_are_all_committed_on_the_sync_thread() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = SpoolConfig::default();
    cfg.journal.segment_size = 4096;
    let r = queue::recover(dir.path(), cfg).unwrap();
    let mut d = DiskStore::new(r.spool, r.journal);
    d.writer.set_syncer(Syncer::spawn(|| {}).unwrap());
    let now = Time(1_700_000_000_000);
    let mut qm =
        QueueManager::new(now, Settings::default(), Default::default(), d, r.state).unwrap();
    // The shell's turns: commit when due, then collect the sync thread's
    // outcome, until nothing more is due.
    let settle = |qm: &mut QueueManager<DiskStore>| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            assert!(Instant::now() < deadline, "sync thread stuck");
            while qm.poll_action().is_some() {}
            if qm.commit_when_due(now) {
                continue;
            }
            if !qm.store().writer.in_flight() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
            qm.synced(now);
        }
    };
    // Arrivals, each committed, until the first segment is nearly full.
    let mut n = 0;
    while qm.store().end().offset() < 4096 - 400 {
        n += 1;
        let ev = Event::Arrived {
            client: 1,
            request: n as u64,
            head: head(n, inline(n)),
            hold: true,
        };
        qm.handle(now, ev);
        settle(&mut qm);
    }
    let first = qm.store().end().segment();
    // Release them all: more Released records than the segment has room for.
    let body = ipc::queuectl::Request::Release(ipc::queuectl::Selector::all());
    qm.handle(
        now,
        Event::Control {
            client: 2,
            request: 1,
            body,
        },
    );
    let replies: Vec<String> = std::iter::from_fn(|| qm.poll_action())
        .map(|a| format!("{a:?}"))
        .filter(|a| a.starts_with("Reply"))
        .collect();
    assert!(
        qm.store().end().segment() > first,
        "the releases cross into the next segment: {:?} {replies:?}",
        qm.store().end()
    );
    settle(&mut qm);
    assert_eq!(qm.store().durable(), qm.store().end(), "all of it durable");
    drop(qm);
    let st = queue::recover(dir.path(), cfg).unwrap().state;
    assert_eq!(st.messages.len(), n as usize);
    assert!(
        st.messages.values().all(|m| !m.held),
        "every release survives"
    );
}
