//! A milter's changes made to the message as the next milter is to see it.
//!
//! With several milters, each sees the message as the ones before it
//! left it (Postfix's `milter_message` passes the queue file, edited in
//! place, from one to the next). [`apply`] makes the header and body
//! changes on the message's [`Part`]s; the envelope changes are the
//! caller's (cleanup applies them after the address mapping). The header
//! rules are cleanup's, `mail::headers`.

use mail::headers;

use crate::client::Edit;
use crate::content::Part;

fn is_named(part: &Part, name: &str) -> bool {
    matches!(part, Part::Header(n, _) if n.eq_ignore_ascii_case(name))
}

/// A header as the milters see it: the value after a space, as written.
fn header(name: &str, value: &str) -> Part {
    Part::Header(name.to_string(), format!(" {value}"))
}

/// Applies header and body edits, in order, to a whole message's parts.
pub fn apply(parts: &mut Vec<Part>, edits: &[Edit]) {
    let eoh = parts
        .iter()
        .position(|p| *p == Part::EndOfHeaders)
        .unwrap_or(parts.len());
    let mut headers: Vec<Part> = parts.drain(..eoh).collect();
    let mut rest: Vec<Part> = std::mem::take(parts);
    for e in edits {
        if let Edit::Header(change) = e {
            headers::edit(&mut headers, change, is_named, header);
            continue;
        }
        if let Edit::ReplaceBody(bytes) = e {
            rest.retain(|p| !matches!(p, Part::Body(_)));
            if rest.is_empty() {
                rest.push(Part::EndOfHeaders);
            }
            rest.push(Part::Body(bytes.clone()));
        }
    }
    headers.append(&mut rest);
    *parts = headers;
}

/// Adds one milter's edits to those of the milters before it: a body
/// replaced again replaces the earlier replacement.
pub fn combine(all: &mut Vec<Edit>, mine: Vec<Edit>) {
    if mine.iter().any(|e| matches!(e, Edit::ReplaceBody(_))) {
        all.retain(|e| !matches!(e, Edit::ReplaceBody(_)));
    }
    all.extend(mine);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::HeaderChange;

    #[test]
    fn headers_and_body_as_the_next_milter_sees_them() {
        let mut parts = vec![
            Part::Header("Subject".into(), " one".into()),
            Part::Header("X-Spam".into(), " a".into()),
            Part::Header("X-Spam".into(), " b".into()),
            Part::EndOfHeaders,
            Part::Body(b"old\r\n".to_vec()),
        ];
        apply(
            &mut parts,
            &[
                Edit::Header(HeaderChange::Insert {
                    index: 0,
                    name: "X-First".into(),
                    value: "1".into(),
                }),
                Edit::Header(HeaderChange::Change {
                    index: 2,
                    name: "x-spam".into(),
                    value: "".into(),
                }),
                Edit::Header(HeaderChange::Change {
                    index: 1,
                    name: "Subject".into(),
                    value: "two".into(),
                }),
                Edit::Header(HeaderChange::Add {
                    name: "X-Last".into(),
                    value: "z".into(),
                }),
                Edit::ReplaceBody(b"new\r\n".to_vec()),
                Edit::AddRecipient {
                    address: "<r@x>".into(),
                    args: None,
                },
            ],
        );
        assert_eq!(
            parts,
            vec![
                Part::Header("X-First".into(), " 1".into()),
                Part::Header("Subject".into(), " two".into()),
                Part::Header("X-Spam".into(), " a".into()),
                Part::Header("X-Last".into(), " z".into()),
                Part::EndOfHeaders,
                Part::Body(b"new\r\n".to_vec()),
            ]
        );
    }

    #[test]
    fn a_later_body_replaces_an_earlier_one() {
        let mut all = vec![Edit::ReplaceBody(b"first".to_vec())];
        combine(
            &mut all,
            vec![
                Edit::Header(HeaderChange::Add {
                    name: "X".into(),
                    value: "y".into(),
                }),
                Edit::ReplaceBody(b"second".to_vec()),
            ],
        );
        assert_eq!(
            all,
            vec![
                Edit::Header(HeaderChange::Add {
                    name: "X".into(),
                    value: "y".into()
                }),
                Edit::ReplaceBody(b"second".to_vec())
            ]
        );
    }
}
