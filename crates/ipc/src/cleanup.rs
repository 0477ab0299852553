//! The cleanup protocol: smtpd and sendmail hand a message to cleanup.
//!
//! One message per `Begin` … `End`: `Begin` carries the envelope and is
//! answered with the queue id (or a refusal); `Data` frames carry the
//! content in wire format (CRLF line ends, dot-stuffed) and are not
//! answered, so content streams without a round trip per chunk; `End` is
//! answered with `Queued` only once the message file and its journal record
//! are on stable storage — the promise behind smtpd's 250. A problem while
//! streaming (disk full) is remembered and reported at `End`. `Abort`
//! drops the message. On the `submit` service the client's uid comes from
//! SO_PEERCRED, not from the request.
//!
//! A `quiet` Begin is not answered unless refused: smtpd, which needs no
//! queue id before the end of data, sends it in one write with the content
//! (and the End, for a small message), so cleanup wakes once per message
//! and smtpd learns the queue id from `Queued`. A refused quiet Begin is
//! answered `Failed` to its own id; the content and End after it find no
//! message (End: 503 5.5.1).
//!
//! A message smtpd's milters look at (`Origin::Smtp { milters: true }`)
//! may be changed by them at its end, after all its content was sent: the
//! milters' `Edit`s then come in one request before `End` (see cleanup's
//! `milter` module for where they are applied).

pub use mail::headers::HeaderChange;
use serde::{Deserialize, Serialize};

/// Marker type for the cleanup protocol.
#[derive(Debug)]
pub enum Cleanup {}

impl crate::Protocol for Cleanup {
    const NAME: &'static str = "sluice-cleanup";
    const VERSION: u32 = 5;
    type Request = Request;
    type Response = Response;
}

/// Largest `Data` payload a client sends in one frame.
pub const MAX_CHUNK: usize = 64 * 1024;

/// How the message came in, for the Received: header and the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Origin {
    /// Over SMTP: the protocol name as in Received: (`SMTP`, `ESMTP`, `ESMTPS`, `ESMTPSA`).
    Smtp {
        /// The `with` word of the Received: header.
        protocol: String,
        /// The client is in `mynetworks` (for `dkim_signing_origins`).
        mynetworks: bool,
        /// The SASL login name for `(Authenticated sender: NAME)` in
        /// Received:, when `smtpd_sasl_authenticated_header = yes`.
        authenticated_sender: Option<String>,
        /// Milters look at the message: its content is held until `End`,
        /// and `Edits` may come before it.
        milters: bool,
    },
    /// Local submission through sendmail(1).
    Local {
        /// The submitting user's name.
        user: String,
        /// The `-F` full name, if given.
        full_name: Option<String>,
    },
}

/// What a client sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// A new message with its envelope.
    Begin {
        /// Sender, recipients, client details, body type.
        envelope: Box<mail::Envelope>,
        /// How it arrived.
        origin: Origin,
        /// Accept into the hold state (access action HOLD).
        hold: bool,
        /// Answer only a refusal: the client learns the queue id from
        /// `Queued` (see the module header).
        quiet: bool,
    },
    /// Content, wire format, at most [`MAX_CHUNK`] bytes.
    Data {
        /// The bytes: one byte string, copied whole (bincode writes it as
        /// it wrote the `Vec<u8>` before, byte for byte, so the version
        /// stands; serde's `Vec<u8>` went through them one at a time).
        #[serde(with = "queue::byte_string")]
        bytes: Vec<u8>,
    },
    /// The milters' changes, in the order they asked them; after the
    /// content and before `End`, not answered.
    Edits {
        /// The changes.
        edits: Vec<Edit>,
    },
    /// The content is complete; answer once it is durable.
    End,
    /// Forget the message.
    Abort,
}

/// A milter's change to a message (Postfix's milter edit requests).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Edit {
    /// Add, insert, change or delete a header.
    Header(HeaderChange),
    /// Add an envelope recipient.
    AddRecipient {
        /// The address, without angle brackets.
        address: String,
    },
    /// Delete the envelope recipients with this address.
    DeleteRecipient {
        /// The address, without angle brackets.
        address: String,
    },
    /// Change the envelope sender.
    ChangeSender {
        /// The address, without angle brackets (empty: the null sender).
        address: String,
    },
    /// Replace the body: CRLF lines, not dot-stuffed, whole.
    ReplaceBody {
        /// The new body.
        #[serde(with = "queue::byte_string")]
        bytes: Vec<u8>,
    },
    /// Put the message on hold (Postfix's quarantine), for this reason.
    Hold {
        /// The milter's reason.
        reason: String,
    },
}

impl From<milter::Edit> for Edit {
    /// A milter's change as cleanup takes it: addresses without their
    /// angle brackets, ESMTP arguments of added recipients dropped.
    fn from(e: milter::Edit) -> Edit {
        use milter::Edit as M;
        /// An address as milters give it, without its angle brackets.
        fn bare(address: &str) -> String {
            let a = address.trim();
            a.strip_prefix('<')
                .and_then(|a| a.strip_suffix('>'))
                .unwrap_or(a)
                .to_string()
        }
        match e {
            M::Header(h) => Edit::Header(h),
            M::AddRecipient { address, .. } => Edit::AddRecipient {
                address: bare(&address),
            },
            M::DeleteRecipient { address } => Edit::DeleteRecipient {
                address: bare(&address),
            },
            M::ChangeSender { address, .. } => Edit::ChangeSender {
                address: bare(&address),
            },
            M::ReplaceBody(bytes) => Edit::ReplaceBody { bytes },
            M::Quarantine(reason) => Edit::Hold { reason },
        }
    }
}

/// cleanup's answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to a `Begin` that is not quiet: the message's queue id.
    Started {
        /// The queue id.
        queue_id: String,
    },
    /// The answer to `End`: the message is on stable storage.
    Queued {
        /// The queue id.
        queue_id: String,
    },
    /// The message was not accepted; what smtpd should reply.
    Failed {
        /// The reply: 4xx or 5xx, its enhanced code and text.
        reply: mail::Refusal,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode, Hello, HelloReply, Protocol, Tagged};

    #[test]
    fn a_refusal_travels_typed_and_old_peers_are_refused() {
        let r = Response::Failed {
            reply: mail::Refusal::new(
                552,
                mail::StatusCode::MESSAGE_TOO_BIG,
                "Message size exceeds fixed limit",
            ),
        };
        let f = encode(&Tagged {
            id: 3,
            body: r.clone(),
        });
        assert_eq!(decode::<Tagged<Response>>(&f[4..]).unwrap().body, r);
        assert_eq!(
            Hello::of::<Cleanup>().answer::<Cleanup>(),
            HelloReply::Accepted
        );
        // Version 4 sent the enhanced code as a string: it is refused.
        let old = Hello {
            protocol: Cleanup::NAME.into(),
            version: 4,
        };
        assert_eq!(
            old.answer::<Cleanup>(),
            HelloReply::Refused {
                protocol: "sluice-cleanup".into(),
                version: 5
            }
        );
    }
}
