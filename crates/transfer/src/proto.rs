//! The transfer protocol.
//!
//! Frames are `wire`'s: a big-endian u32 length and that many bytes of
//! postcard.
//! The mover says `Hello` and the receiver answers `Hello` (with the
//! protocol version each speaks: both ends come from one release line,
//! and a mismatch is refused in words rather than garbled). Then the mover
//! sends `Offer`s without waiting, up to a window, and the receiver
//! answers each, in any order, with `Accepted` (durable there: the mover
//! may remove its copy) or `Refused` (temporary or not: the mover keeps
//! it). A transfer id is the sending instance's name and the message's
//! queue id there: a retried offer with an id the receiver has taken is
//! accepted again with `again` set and the same queue id.

use ipc::queuectl::Owed;
use mail::Envelope;
use serde::{Deserialize, Serialize};
pub use wire::{encode, Decoder, FrameError};

/// The protocol version spoken by this build.
pub const VERSION: u32 = 2;

/// Largest frame a mover sends besides the message bytes (the envelope
/// and state of a message with many recipients).
pub const MAX_OVERHEAD: usize = 8 << 20;

/// What the mover sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToReceiver {
    /// First frame: who the mover is (its `myhostname`).
    Hello {
        /// Protocol version.
        version: u32,
        /// The sending instance.
        name: String,
    },
    /// A message to take.
    Offer(Box<Offer>),
}

/// One message as it is queued at the sender.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// `<sender instance>/<queue id there>`: the same on every retry.
    pub transfer: String,
    /// The envelope, every original recipient included (indices are the
    /// recipients' identity in both journals).
    pub envelope: Envelope,
    /// Recipient indices still to deliver.
    pub remaining: Vec<u32>,
    /// Next attempt, seconds since the epoch (0: due now).
    pub next_attempt: u64,
    /// Delivery attempts made so far.
    pub attempts: u32,
    /// On hold at the sender (stays so).
    pub held: bool,
    /// The sender was warned of the delay already.
    pub warned: bool,
    /// Notices owed for recipients already done.
    pub owed: Vec<Owed>,
    /// The message bytes, wire form (CRLF, dot-stuffed) as queued.
    pub data: Vec<u8>,
}

/// What the receiver answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToMover {
    /// Answer to `Hello`.
    Hello {
        /// Protocol version.
        version: u32,
        /// The receiving instance.
        name: String,
    },
    /// The message is durable here.
    Accepted {
        /// The offer's transfer id.
        transfer: String,
        /// Its queue id here.
        id: String,
        /// Taken before (a retried transfer): not queued again.
        again: bool,
    },
    /// The message was not taken; the mover keeps it.
    Refused {
        /// The offer's transfer id.
        transfer: String,
        /// Why, for the mover's log and exit status: of class 4 when it
        /// is worth trying again later (a full disk, qmgr down), 5 never.
        status: mail::Status,
    },
    /// The whole connection is refused (a bad hello); it closes.
    Goodbye {
        /// Why.
        reason: String,
    },
}

/// A transfer id: the sending instance and the queue id there.
pub fn transfer_id(instance: &str, queue_id: &str) -> String {
    format!("{instance}/{queue_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(n: usize) -> ToReceiver {
        ToReceiver::Offer(Box::new(Offer {
            transfer: transfer_id("a.example", "0000000000000000000001"),
            envelope: Envelope {
                sender: "s@a.example".into(),
                recipients: vec![mail::Recipient::new("r@b.example")],
                ..Envelope::default()
            },
            remaining: vec![0],
            next_attempt: 1_800_000_000,
            attempts: 2,
            held: true,
            warned: false,
            owed: vec![Owed {
                index: 0,
                status: mail::StatusCode::USER_UNKNOWN,
                reason: "host b.example said: 550 5.1.1 no such user".into(),
                success: None,
            }],
            data: vec![b'x'; n],
        }))
    }

    #[test]
    fn frames_split_anywhere_decode_whole_and_in_order() {
        let mut wire = encode(&offer(3000));
        wire.extend(encode(&offer(5)));
        let mut d = Decoder::new(1 << 20);
        let mut got = Vec::new();
        for chunk in wire.chunks(7) {
            d.push(chunk);
            while let Some(m) = d.decode::<ToReceiver>().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, vec![offer(3000), offer(5)]);
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn an_oversized_or_garbled_frame_is_an_error_not_a_wait() {
        let mut d = Decoder::new(100);
        d.push(&encode(&offer(500)));
        assert_eq!(
            d.decode::<ToReceiver>(),
            Err(FrameError::TooLong(d_len(500), 100))
        );
        let mut d = Decoder::new(100);
        d.push(&[0, 0, 0, 3, 0xff, 0xff, 0xff]);
        assert_eq!(d.decode::<ToReceiver>(), Err(FrameError::Garbled));
    }

    #[test]
    fn a_refusal_and_a_notice_owed_keep_their_status_typed() {
        let refused = ToMover::Refused {
            transfer: transfer_id("a.example", "1"),
            status: mail::Status::new(mail::StatusCode::SYSTEM_FULL, "queue file write error"),
        };
        let mut d = Decoder::new(1 << 20);
        d.push(&encode(&refused));
        let Some(ToMover::Refused { status, .. }) = d.decode::<ToMover>().unwrap() else {
            panic!("not a refusal");
        };
        // The mover tries again on class 4, and logs the code with the text.
        assert!(status.is_transient());
        assert_eq!(status.to_string(), "4.3.1 queue file write error");
        let mut d = Decoder::new(1 << 20);
        d.push(&encode(&offer(1)));
        let Some(ToReceiver::Offer(o)) = d.decode::<ToReceiver>().unwrap() else {
            panic!("not an offer");
        };
        assert_eq!(o.owed[0].status, mail::StatusCode::USER_UNKNOWN);
    }

    fn d_len(n: usize) -> usize {
        encode(&offer(n)).len() - 4
    }
}
