//! The journal's on-disk record enum, and `Record`'s serde through it.
//!
//! Variant indexes never move: new variants go at the end. `Out` borrows
//! a record to write it (no copy of inline data); `In` owns what is read
//! and becomes a [`Record`]. The two list the same variants in the same
//! order; the tests in `record.rs` hold them to the derive of old.

use super::{DataRef, MessageHead, Record};
use mail::{AsV1, Envelope, EnvelopeV1, QueueId, StatusCode};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A message head in the first envelope layout, to write.
#[derive(Serialize)]
struct HeadV1Out<'a> {
    id: &'a QueueId,
    envelope: AsV1<'a>,
    data: &'a DataRef,
}

/// A message head in the first envelope layout, as read.
#[derive(Deserialize)]
struct HeadV1In {
    id: QueueId,
    envelope: EnvelopeV1,
    data: DataRef,
}

impl From<HeadV1In> for MessageHead {
    fn from(h: HeadV1In) -> Self {
        MessageHead {
            id: h.id,
            envelope: Envelope::from(h.envelope),
            data: h.data,
        }
    }
}

#[derive(Serialize)]
enum Out<'a> {
    Arrived(HeadV1Out<'a>),
    Delivered {
        id: &'a QueueId,
        rcpts: &'a [u32],
    },
    Deferred {
        id: &'a QueueId,
        rcpts: &'a [u32],
        status: &'a StatusCode,
        reason: &'a str,
        next_attempt: u64,
    },
    Bounced {
        id: &'a QueueId,
        rcpts: &'a [u32],
        status: &'a StatusCode,
        reason: &'a str,
    },
    Rewritten {
        head: HeadV1Out<'a>,
        remaining: &'a [u32],
        next_attempt: u64,
        held: bool,
    },
    Held {
        id: &'a QueueId,
    },
    Released {
        id: &'a QueueId,
    },
    Removed {
        id: &'a QueueId,
    },
    Notified {
        id: &'a QueueId,
        rcpts: &'a [u32],
    },
    Warned {
        id: &'a QueueId,
    },
    Succeeded {
        id: &'a QueueId,
        rcpts: &'a [u32],
        relayed: bool,
        reason: &'a str,
    },
    ArrivedV2(&'a MessageHead),
    RewrittenV2 {
        head: &'a MessageHead,
        remaining: &'a [u32],
        next_attempt: u64,
        held: bool,
    },
    Moving {
        id: &'a QueueId,
        held: bool,
    },
    Imported {
        id: &'a QueueId,
        transfer: &'a str,
        from: &'a str,
        held: bool,
        attempts: u32,
    },
}

#[derive(Deserialize)]
enum In {
    Arrived(HeadV1In),
    Delivered {
        id: QueueId,
        rcpts: Vec<u32>,
    },
    Deferred {
        id: QueueId,
        rcpts: Vec<u32>,
        status: StatusCode,
        reason: String,
        next_attempt: u64,
    },
    Bounced {
        id: QueueId,
        rcpts: Vec<u32>,
        status: StatusCode,
        reason: String,
    },
    Rewritten {
        head: HeadV1In,
        remaining: Vec<u32>,
        next_attempt: u64,
        held: bool,
    },
    Held {
        id: QueueId,
    },
    Released {
        id: QueueId,
    },
    Removed {
        id: QueueId,
    },
    Notified {
        id: QueueId,
        rcpts: Vec<u32>,
    },
    Warned {
        id: QueueId,
    },
    Succeeded {
        id: QueueId,
        rcpts: Vec<u32>,
        relayed: bool,
        reason: String,
    },
    ArrivedV2(MessageHead),
    RewrittenV2 {
        head: MessageHead,
        remaining: Vec<u32>,
        next_attempt: u64,
        held: bool,
    },
    Moving {
        id: QueueId,
        held: bool,
    },
    Imported {
        id: QueueId,
        transfer: String,
        from: String,
        held: bool,
        attempts: u32,
    },
}

fn head_v1(h: &MessageHead) -> HeadV1Out<'_> {
    HeadV1Out {
        id: &h.id,
        envelope: AsV1(&h.envelope),
        data: &h.data,
    }
}

impl Serialize for Record {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let out = match self {
            Record::Arrived(h) if h.envelope.fits_v1() => Out::Arrived(head_v1(h)),
            Record::Arrived(h) => Out::ArrivedV2(h),
            Record::Rewritten {
                head,
                remaining,
                next_attempt,
                held,
            } if head.envelope.fits_v1() => Out::Rewritten {
                head: head_v1(head),
                remaining,
                next_attempt: *next_attempt,
                held: *held,
            },
            Record::Rewritten {
                head,
                remaining,
                next_attempt,
                held,
            } => Out::RewrittenV2 {
                head,
                remaining,
                next_attempt: *next_attempt,
                held: *held,
            },
            Record::Delivered { id, rcpts } => Out::Delivered { id, rcpts },
            Record::Deferred {
                id,
                rcpts,
                status,
                reason,
                next_attempt,
            } => Out::Deferred {
                id,
                rcpts,
                status,
                reason,
                next_attempt: *next_attempt,
            },
            Record::Bounced {
                id,
                rcpts,
                status,
                reason,
            } => Out::Bounced {
                id,
                rcpts,
                status,
                reason,
            },
            Record::Held { id } => Out::Held { id },
            Record::Released { id } => Out::Released { id },
            Record::Removed { id } => Out::Removed { id },
            Record::Notified { id, rcpts } => Out::Notified { id, rcpts },
            Record::Warned { id } => Out::Warned { id },
            Record::Succeeded {
                id,
                rcpts,
                relayed,
                reason,
            } => Out::Succeeded {
                id,
                rcpts,
                relayed: *relayed,
                reason,
            },
            Record::Moving { id, held } => Out::Moving { id, held: *held },
            Record::Imported {
                id,
                transfer,
                from,
                held,
                attempts,
            } => Out::Imported {
                id,
                transfer,
                from,
                held: *held,
                attempts: *attempts,
            },
        };
        out.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match In::deserialize(d)? {
            In::Arrived(h) => Record::Arrived(h.into()),
            In::ArrivedV2(h) => Record::Arrived(h),
            In::Rewritten {
                head,
                remaining,
                next_attempt,
                held,
            } => Record::Rewritten {
                head: head.into(),
                remaining,
                next_attempt,
                held,
            },
            In::RewrittenV2 {
                head,
                remaining,
                next_attempt,
                held,
            } => Record::Rewritten {
                head,
                remaining,
                next_attempt,
                held,
            },
            In::Delivered { id, rcpts } => Record::Delivered { id, rcpts },
            In::Deferred {
                id,
                rcpts,
                status,
                reason,
                next_attempt,
            } => Record::Deferred {
                id,
                rcpts,
                status,
                reason,
                next_attempt,
            },
            In::Bounced {
                id,
                rcpts,
                status,
                reason,
            } => Record::Bounced {
                id,
                rcpts,
                status,
                reason,
            },
            In::Held { id } => Record::Held { id },
            In::Released { id } => Record::Released { id },
            In::Removed { id } => Record::Removed { id },
            In::Notified { id, rcpts } => Record::Notified { id, rcpts },
            In::Warned { id } => Record::Warned { id },
            In::Succeeded {
                id,
                rcpts,
                relayed,
                reason,
            } => Record::Succeeded {
                id,
                rcpts,
                relayed,
                reason,
            },
            In::Moving { id, held } => Record::Moving { id, held },
            In::Imported {
                id,
                transfer,
                from,
                held,
                attempts,
            } => Record::Imported {
                id,
                transfer,
                from,
                held,
                attempts,
            },
        })
    }
}
