//! The rules a milter's header changes follow, whatever holds the headers.
//!
//! Sendmail's and Postfix's: an insertion past the end appends, the
//! `index`-th header of a name (from 1) is the one changed, an empty value
//! deletes it, and changing a header that is not there adds it. smtpd's
//! milter chain (the message as the next milter sees it) and cleanup (the
//! message as it is queued) keep headers differently and apply these
//! rules through [`edit`].

use serde::{Deserialize, Serialize};

/// One header change, as a milter asks it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeaderChange {
    /// Append `name: value`.
    Add {
        /// The name.
        name: String,
        /// The value, as the milter gave it (continuation lines joined by LF).
        value: String,
    },
    /// Insert before the `index`-th header (0: first; past the end appends).
    Insert {
        /// The position.
        index: u32,
        /// The name.
        name: String,
        /// The value.
        value: String,
    },
    /// Change the `index`-th header named `name`; an empty value deletes it.
    Change {
        /// Which one of that name (from 1).
        index: u32,
        /// The name.
        name: String,
        /// The new value.
        value: String,
    },
}

impl HeaderChange {
    /// Bytes of name and value, for limits on what a milter may add.
    pub fn size(&self) -> usize {
        match self {
            HeaderChange::Add { name, value }
            | HeaderChange::Insert { name, value, .. }
            | HeaderChange::Change { name, value, .. } => name.len() + value.len(),
        }
    }
}

/// Makes `change` on `headers`: `named` says whether a header has a name
/// (case-insensitively), `make` builds one from a name and a value.
pub fn edit<H>(
    headers: &mut Vec<H>,
    change: &HeaderChange,
    named: impl Fn(&H, &str) -> bool,
    make: impl Fn(&str, &str) -> H,
) {
    match change {
        HeaderChange::Add { name, value } => headers.push(make(name, value)),
        HeaderChange::Insert { index, name, value } => {
            let at = (*index as usize).min(headers.len());
            headers.insert(at, make(name, value));
        }
        HeaderChange::Change { index, name, value } => {
            let found = headers
                .iter()
                .enumerate()
                .filter(|(_, h)| named(h, name))
                .map(|(i, _)| i)
                .nth((*index as usize).saturating_sub(1));
            match (found, value.is_empty()) {
                (Some(i), true) => {
                    headers.remove(i);
                }
                (Some(i), false) => headers[i] = make(name, value),
                (None, false) => headers.push(make(name, value)),
                (None, true) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(changes: &[HeaderChange]) -> Vec<String> {
        let mut h: Vec<String> = ["Subject: a", "X-Spam: 1", "X-Spam: 2"]
            .map(String::from)
            .to_vec();
        for c in changes {
            edit(
                &mut h,
                c,
                |h, n| {
                    h.split_once(':')
                        .is_some_and(|(x, _)| x.eq_ignore_ascii_case(n))
                },
                |n, v| format!("{n}: {v}"),
            );
        }
        h
    }

    #[test]
    fn by_position_by_name_and_by_absence() {
        let got = run(&[
            HeaderChange::Insert {
                index: 99,
                name: "X-End".into(),
                value: "e".into(),
            },
            HeaderChange::Insert {
                index: 0,
                name: "X-First".into(),
                value: "f".into(),
            },
            HeaderChange::Change {
                index: 2,
                name: "x-spam".into(),
                value: "".into(),
            },
            HeaderChange::Change {
                index: 1,
                name: "X-Spam".into(),
                value: "one".into(),
            },
            HeaderChange::Change {
                index: 1,
                name: "X-New".into(),
                value: "added".into(),
            },
            HeaderChange::Change {
                index: 1,
                name: "X-Gone".into(),
                value: "".into(),
            },
            HeaderChange::Add {
                name: "X-Last".into(),
                value: "z".into(),
            },
        ]);
        assert_eq!(
            got,
            [
                "X-First: f",
                "Subject: a",
                "X-Spam: one",
                "X-End: e",
                "X-New: added",
                "X-Last: z"
            ]
        );
    }
}
