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

use serde::{Deserialize, Serialize};

/// Marker type for the cleanup protocol.
#[derive(Debug)]
pub enum Cleanup {}

impl crate::Protocol for Cleanup {
    const NAME: &'static str = "sluice-cleanup";
    const VERSION: u32 = 3;
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
    },
    /// Content, wire format, at most [`MAX_CHUNK`] bytes.
    Data {
        /// The bytes: one byte string, copied whole (bincode writes it as
        /// it wrote the `Vec<u8>` before, byte for byte, so the version
        /// stands; serde's `Vec<u8>` went through them one at a time).
        #[serde(with = "queue::byte_string")]
        bytes: Vec<u8>,
    },
    /// The content is complete; answer once it is durable.
    End,
    /// Forget the message.
    Abort,
}

/// cleanup's answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to `Begin`: the message's queue id.
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
        /// SMTP reply code (4xx or 5xx).
        code: u16,
        /// Enhanced status code, e.g. `4.3.0`.
        enhanced: String,
        /// Human-readable text.
        text: String,
    },
}
