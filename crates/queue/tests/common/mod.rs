//! Records the journal tests append: queue ids and arrivals with inline
//! data of a chosen size.

use std::path::Path;

use mail::{Envelope, QueueId, Recipient};
use queue::{list_segments, replay, segment_path, DataRef, Lsn, MessageHead, Record, Replay};

/// The queue id of test message `n`.
pub fn id(n: u32) -> QueueId {
    QueueId::from_parts(1_700_000_000_000_000 + n as u64, 1, n).unwrap()
}

/// Message `n`'s arrival, its body `body` bytes of x.
pub fn arrival(n: u32, body: usize) -> Record {
    Record::Arrived(MessageHead {
        id: id(n),
        envelope: Envelope {
            sender: format!("s{n}@example.org"),
            recipients: vec![Recipient::new(format!("r{n}@example.net"))],
            ..Envelope::default()
        },
        data: DataRef::Inline(format!("Subject: {n}\r\n\r\n{}\r\n", "x".repeat(body)).into_bytes()),
    })
}

/// Replays a copy of the journal as a crash right now would leave it.
pub fn crash_replay(dir: &Path) -> Replay {
    let copy = tempfile::tempdir().unwrap();
    for s in list_segments(dir).unwrap() {
        std::fs::copy(segment_path(dir, s), segment_path(copy.path(), s)).unwrap();
    }
    replay(copy.path(), 1 << 20).unwrap()
}

/// Each of `appended` is in the replay, at the position `append` gave it.
pub fn assert_at_their_positions(st: &Replay, appended: &[(u32, Lsn)]) {
    for (n, lsn) in appended {
        let m = st
            .messages
            .get(&id(*n))
            .unwrap_or_else(|| panic!("message {n} lost"));
        assert_eq!(m.head, *lsn, "message {n} moved");
    }
}
