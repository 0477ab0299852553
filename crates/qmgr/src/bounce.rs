//! Delivery status notifications (RFC 3464), sans-IO.
//!
//! When recipients of a message fail for good (a 5xx, a routing error, or
//! expiry after `maximal_queue_lifetime`), qmgr sends the envelope sender a
//! `multipart/report; report-type=delivery-status` message: a human part,
//! the machine-readable `message/delivery-status` part (Reporting-MTA,
//! Original-Envelope-Id from ENVID, Arrival-Date, and per recipient
//! Final-Recipient, Original-Recipient from ORCPT, Action, Status,
//! Remote-MTA, Diagnostic-Code), and the original message
//! (`message/rfc822`) or only its headers (`text/rfc822-headers`) as RET
//! asks. Recipients whose NOTIFY excludes FAILURE are left out. Mail
//! received with SMTPUTF8 gets RFC 6533's global report instead, which the
//! notice's envelope flags SMTPUTF8 too (see [`mail::notice`]).
//!
//! Loops are impossible by construction: a notice has the null sender, so
//! its own failure goes to `2bounce_notice_recipient` with the sender
//! `$double_bounce_sender@$myhostname`, and a failure of that is only logged.
//! Everything is produced in wire format (CRLF; the original is already
//! dot-stuffed, and no generated line starts with a dot).

use mail::Envelope;

/// The notice itself is built by [`mail::notice`] (`report_of`), which local(8) shares
/// for the notices it sends to `owner-` aliases.
pub use mail::notice::{Context, Failed, Kind};

/// Who gets a notice about a failed message, and from which sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notify {
    /// Tell the envelope sender; the notice has the null sender.
    Sender(String),
    /// A notice (null sender) failed: tell the postmaster.
    Postmaster {
        /// `2bounce_notice_recipient`.
        to: String,
        /// `double_bounce_sender`, qualified with `$myhostname`.
        from: String,
    },
    /// A double-bounce failed: nobody is told (only the log).
    Nobody,
}

/// Decides who is told about a failure of a message from `sender`;
/// `double` is `double_bounce_sender` qualified with `myhostname`.
pub fn who(sender: &str, postmaster: &str, double: &str) -> Notify {
    let double = double.to_string();
    if sender.eq_ignore_ascii_case(&double) {
        Notify::Nobody
    } else if sender.is_empty() {
        Notify::Postmaster {
            to: postmaster.to_string(),
            from: double,
        }
    } else {
        Notify::Sender(sender.to_string())
    }
}

/// The recipients that asked (or did not refuse) to hear of this kind of
/// notice. A failure is reported for an index the envelope lacks, rather
/// than lost; the other kinds only when asked for.
pub fn wanted<'a>(env: &Envelope, items: &'a [Failed], kind: Kind) -> Vec<&'a Failed> {
    items
        .iter()
        .filter(|f| match env.recipients.get(f.index as usize) {
            None => kind == Kind::Failure,
            Some(r) => match kind {
                Kind::Failure => r.notify.wants_failure(),
                Kind::Delay => r.notify.wants_delay(),
                Kind::Success { .. } => r.notify.wants_success(),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mail::{Notify as N, Recipient};

    fn env() -> Envelope {
        Envelope {
            sender: "alice@example.com".into(),
            recipients: vec![
                Recipient {
                    address: "bob@remote.example".into(),
                    notify: N::Default,
                    orcpt: Some("rfc822;bob@orig.example".into()),
                },
                Recipient {
                    address: "quiet@remote.example".into(),
                    notify: N::Never,
                    orcpt: None,
                },
            ],
            envid: Some("ENV123".into()),
            ret: Some(mail::Ret::Hdrs),
            ..Envelope::default()
        }
    }

    #[test]
    fn loops_cannot_happen() {
        assert_eq!(
            who("a@b", "postmaster", "double-bounce@x.example"),
            Notify::Sender("a@b".into())
        );
        assert_eq!(
            who("", "postmaster", "double-bounce@x.example"),
            Notify::Postmaster {
                to: "postmaster".into(),
                from: "double-bounce@x.example".into()
            }
        );
        assert_eq!(
            who(
                "double-bounce@x.example",
                "postmaster",
                "double-bounce@x.example"
            ),
            Notify::Nobody
        );
    }

    #[test]
    fn notify_never_is_honoured() {
        let failed: Vec<Failed> = (0..2)
            .map(|index| Failed {
                index,
                status: mail::StatusCode::known(5, 1, 1),
                reason: "no such user".into(),
            })
            .collect();
        let who = |k| -> Vec<u32> { wanted(&env(), &failed, k).iter().map(|f| f.index).collect() };
        assert_eq!(who(Kind::Failure), [0]);
        // NOTIFY left to us means failures and delays, never successes.
        assert_eq!(who(Kind::Delay), [0]);
        assert!(who(Kind::Success { relayed: true }).is_empty());
    }
}
