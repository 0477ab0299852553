//! Milter changes to a message, applied before it is committed.
//!
//! smtpd runs the milters (`smtpd_milters`) as the message streams to
//! cleanup; their changes come only with their end-of-message answers,
//! after the last byte was sent and before smtpd may say 250. So cleanup
//! holds such a message (`Origin::Smtp { milters: true }`): the header
//! section in memory, as for any message, and the body too, instead of
//! writing them to the queue file as they come. smtpd then sends the
//! changes (`Request::Edits`) and `End`; at `End` the headers are edited
//! ([`edit_headers`]), Received: and the missing headers are put in front
//! as for any message, and the body (the milter's replacement when one
//! was given, made wire format by [`wire_body`]) follows. Envelope
//! changes ([`edit_envelope`]) are applied after the address mapping; the
//! recipients a milter adds and the sender it sets ([`mapped_changes`])
//! are mapped in a second question to the router, as Postfix maps them; a
//! recipient it deletes is matched on its address or its original (ORCPT)
//! address. The held body is bounded by `message_size_limit`, which smtpd
//! enforces (cleanup too, for local submissions through
//! `non_smtpd_milters`, which `server/filter.rs` runs).
//!
//! Header positions are those the milters saw: the client's headers,
//! without the Received: cleanup adds (Postfix shows its own Received:
//! to milters; here an insertion at 0 lands just below it).

use ipc::cleanup::Edit;
use mail::{Envelope, Recipient};

/// A message whose content waits for the milters' changes.
#[derive(Debug, Default)]
pub struct Held {
    /// The header section, once complete.
    pub headers: Option<Vec<u8>>,
    /// The body as received (from the empty line on), wire format.
    pub body: Vec<u8>,
    /// The changes, as they came.
    pub edits: Vec<Edit>,
}

impl Held {
    /// The new body, if a milter replaced it (its pieces joined).
    pub fn replacement(&self) -> Option<Vec<u8>> {
        let mut body: Option<Vec<u8>> = None;
        for e in &self.edits {
            if let Edit::ReplaceBody { bytes } = e {
                body.get_or_insert_with(Vec::new).extend_from_slice(bytes);
            }
        }
        body
    }

    /// Whether a milter asked for the message to be held, and why.
    pub fn hold_reason(&self) -> Option<&str> {
        self.edits.iter().find_map(|e| match e {
            Edit::Hold { reason } => Some(reason.as_str()),
            _ => None,
        })
    }
}

/// One header: its lines, CRLF included.
fn split_headers(section: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for line in section.split_inclusive(|&b| b == b'\n') {
        match (line.first(), out.last_mut()) {
            (Some(b' ' | b'\t'), Some(last)) => last.extend_from_slice(line),
            _ => out.push(line.to_vec()),
        }
    }
    out
}

fn is_named(header: &[u8], name: &str) -> bool {
    header.len() > name.len()
        && header[name.len()] == b':'
        && header[..name.len()].eq_ignore_ascii_case(name.as_bytes())
}

/// `Name: value` with CRLF line ends, the value's LF line breaks made CRLF.
fn render(name: &str, value: &str) -> Vec<u8> {
    let value = value.replace("\r\n", "\n").replace('\n', "\r\n");
    format!("{name}: {value}\r\n").into_bytes()
}

/// The header section with the milters' header changes made, in order.
pub fn edit_headers(section: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut headers = split_headers(section);
    for e in edits {
        if let Edit::Header(change) = e {
            mail::headers::edit(&mut headers, change, |h, n| is_named(h, n), render);
        }
    }
    headers.concat()
}

/// A milter's body made wire format: CRLF line ends, dot-stuffed, ending
/// in CRLF, after the empty line that ends the headers.
pub fn wire_body(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + body.len() / 32 + 4);
    out.extend_from_slice(b"\r\n");
    for line in body.split_inclusive(|&b| b == b'\n') {
        let text = line
            .strip_suffix(b"\n")
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .unwrap_or(line);
        if text.first() == Some(&b'.') {
            out.push(b'.');
        }
        out.extend_from_slice(text);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The sender the milters set and the recipients they add, when they
/// changed either: for the address mapping they go through.
pub fn mapped_changes(env: &Envelope, edits: &[Edit]) -> Option<(String, Vec<Recipient>)> {
    let mut sender = None;
    let mut added: Vec<Recipient> = Vec::new();
    for e in edits {
        match e {
            Edit::ChangeSender { address } => sender = Some(address.clone()),
            Edit::AddRecipient { address }
                if !env
                    .recipients
                    .iter()
                    .chain(added.iter())
                    .any(|r| r.address.eq_ignore_ascii_case(address)) =>
            {
                added.push(Recipient::new(address.clone()));
            }
            _ => {}
        }
    }
    if sender.is_none() && added.is_empty() {
        return None;
    }
    Some((sender.unwrap_or_else(|| env.sender.clone()), added))
}

/// The milters' sender and recipient changes, in order; with `mapped`,
/// the sender and added recipients were set already (mapped).
pub fn edit_envelope(env: &mut Envelope, edits: &[Edit], mapped: bool) {
    for e in edits {
        match e {
            Edit::ChangeSender { .. } | Edit::AddRecipient { .. } if mapped => {}
            Edit::ChangeSender { address } => env.sender = address.clone(),
            Edit::AddRecipient { address }
                if !env
                    .recipients
                    .iter()
                    .any(|r| r.address.eq_ignore_ascii_case(address)) =>
            {
                env.recipients.push(Recipient::new(address.clone()));
            }
            Edit::DeleteRecipient { address } => env.recipients.retain(|r| {
                !(r.address.eq_ignore_ascii_case(address)
                    || r.original()
                        .is_some_and(|o| o.eq_ignore_ascii_case(address)))
            }),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::cleanup::HeaderChange;

    fn h(name: &str, value: &str) -> Edit {
        Edit::Header(HeaderChange::Add {
            name: name.into(),
            value: value.into(),
        })
    }

    #[test]
    fn header_changes_by_position_and_by_name() {
        let section = b"Subject: one\r\nX-Spam: a\r\n\tcontinued\r\nTo: t@x\r\nX-Spam: b\r\n";
        let edits = [
            Edit::Header(HeaderChange::Insert {
                index: 0,
                name: "DKIM-Signature".into(),
                value: "v=1;\n\tb=abc".into(),
            }),
            Edit::Header(HeaderChange::Change {
                index: 2,
                name: "x-spam".into(),
                value: "changed".into(),
            }),
            Edit::Header(HeaderChange::Change {
                index: 1,
                name: "X-Spam".into(),
                value: "".into(),
            }),
            Edit::Header(HeaderChange::Change {
                index: 1,
                name: "X-Missing".into(),
                value: "".into(),
            }),
            Edit::Header(HeaderChange::Change {
                index: 1,
                name: "X-New".into(),
                value: "added".into(),
            }),
            h("X-Last", "z"),
            Edit::Header(HeaderChange::Insert {
                index: 99,
                name: "X-Far".into(),
                value: "end".into(),
            }),
        ];
        assert_eq!(
            String::from_utf8(edit_headers(section, &edits)).unwrap(),
            "DKIM-Signature: v=1;\r\n\tb=abc\r\nSubject: one\r\nTo: t@x\r\nx-spam: changed\r\nX-New: added\r\nX-Last: z\r\nX-Far: end\r\n"
        );
    }

    #[test]
    fn replacement_body_is_made_wire_format() {
        assert_eq!(
            wire_body(b"line\n.dot\r\nlast"),
            b"\r\nline\r\n..dot\r\nlast\r\n".to_vec()
        );
        assert_eq!(wire_body(b""), b"\r\n".to_vec());
    }

    #[test]
    fn envelope_changes() {
        let mut env = Envelope {
            sender: "a@x".into(),
            recipients: vec![Recipient::new("b@x"), Recipient::new("c@x")],
            ..Envelope::default()
        };
        env.recipients[1].orcpt = Some("rfc822;orig@x".into());
        let edits = [
            Edit::ChangeSender {
                address: "s@y".into(),
            },
            Edit::DeleteRecipient {
                address: "B@x".into(),
            },
            Edit::DeleteRecipient {
                address: "orig@x".into(),
            },
            Edit::AddRecipient {
                address: "d@x".into(),
            },
            Edit::AddRecipient {
                address: "d@x".into(),
            },
        ];
        // For the mapping: the new sender and the one new recipient.
        let (sender, added) = mapped_changes(&env, &edits).unwrap();
        assert_eq!(sender, "s@y");
        assert_eq!(added.len(), 1);
        let mut mapped = env.clone();
        edit_envelope(&mut mapped, &edits, true);
        assert_eq!(mapped.sender, "a@x");
        assert!(mapped.recipients.is_empty());
        edit_envelope(&mut env, &edits, false);
        assert_eq!(env.sender, "s@y");
        let to: Vec<_> = env.recipients.iter().map(|r| r.address.as_str()).collect();
        assert_eq!(to, ["d@x"]);
    }
}
