//! The address verification protocol: smtpd asks qmgr what is known of an
//! address (Postfix's verify(8) service, kept in qmgr, which runs the probes).
//!
//! smtpd sends [`Request::Query`] for the recipient (or sender) that
//! `reject_unverified_recipient` (`reject_unverified_sender`) reached. qmgr
//! answers at once from its cache; on a miss it starts a probe and answers
//! when the probe's result is in or after `wait_ms`, whichever comes first,
//! with [`Outcome::Unknown`] then (Postfix's smtpd polls the verify service
//! `address_verify_poll_count` times instead; the bound on the wait is the
//! same, and nothing polls).

use serde::{Deserialize, Serialize};

/// Marker type for the verification protocol.
#[derive(Debug)]
pub enum Verify {}

impl crate::Protocol for Verify {
    const NAME: &'static str = "sluice-verify";
    const VERSION: u32 = 1;
    type Request = Request;
    type Response = Response;
}

/// What smtpd asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// What is known of `address`; probe it if nothing current is.
    Query {
        /// The address, external form, without angle brackets ("" for `<>`).
        address: String,
        /// How long qmgr may hold the answer for a probe's result, in ms.
        wait_ms: u64,
    },
}

/// qmgr's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The address's standing.
    Status {
        /// What the last probe found, or that nothing is known yet.
        outcome: Outcome,
        /// The reply that decided it, as the probe logged it
        /// (`host mx[192.0.2.1] said: 550 5.1.1 ...`), or why nothing is known.
        text: String,
    },
}

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The server accepted the recipient.
    Deliverable,
    /// The server (or the router) refused it for good.
    Undeliverable,
    /// The probe failed temporarily.
    Deferred,
    /// No result yet: a probe is under way.
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode, Tagged};

    #[test]
    fn queries_and_answers_round_trip() {
        let q = Tagged {
            id: 3,
            body: Request::Query {
                address: "u@example.test".into(),
                wait_ms: 6000,
            },
        };
        assert_eq!(decode::<Tagged<Request>>(&encode(&q)[4..]).unwrap(), q);
        let r = Tagged {
            id: 3,
            body: Response::Status {
                outcome: Outcome::Undeliverable,
                text: "host mx[192.0.2.1] said: 550 5.1.1 no such user".into(),
            },
        };
        assert_eq!(decode::<Tagged<Response>>(&encode(&r)[4..]).unwrap(), r);
    }
}
