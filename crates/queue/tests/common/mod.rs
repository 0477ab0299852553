//! Records the journal tests append: queue ids and arrivals with inline
//! data of a chosen size.

use mail::{Envelope, QueueId, Recipient};
use queue::{DataRef, MessageHead, Record};

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
