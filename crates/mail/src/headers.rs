//! The rules a milter's header changes follow, whatever holds the headers.
//!
//! Sendmail's and Postfix's: an insertion past the end appends, the
//! `index`-th header of a name (from 1) is the one changed, an empty value
//! deletes it, and changing a header that is not there adds it. smtpd's
//! milter chain (the message as the next milter sees it) and cleanup (the
//! message as it is queued) keep headers differently and apply these
//! rules through [`edit`].

/// One header change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderEdit<'a> {
    /// Append `name: value`.
    Add {
        /// The name.
        name: &'a str,
        /// The value, as the milter gave it.
        value: &'a str,
    },
    /// Insert before the `index`-th header (0: first; past the end appends).
    Insert {
        /// The position.
        index: u32,
        /// The name.
        name: &'a str,
        /// The value.
        value: &'a str,
    },
    /// Change the `index`-th header named `name`; an empty value deletes it.
    Change {
        /// Which one of that name (from 1).
        index: u32,
        /// The name.
        name: &'a str,
        /// The new value.
        value: &'a str,
    },
}

/// Makes `change` on `headers`: `named` says whether a header has a name
/// (case-insensitively), `make` builds one from a name and a value.
pub fn edit<H>(
    headers: &mut Vec<H>,
    change: HeaderEdit<'_>,
    named: impl Fn(&H, &str) -> bool,
    make: impl Fn(&str, &str) -> H,
) {
    match change {
        HeaderEdit::Add { name, value } => headers.push(make(name, value)),
        HeaderEdit::Insert { index, name, value } => {
            let at = (index as usize).min(headers.len());
            headers.insert(at, make(name, value));
        }
        HeaderEdit::Change { index, name, value } => {
            let found = headers
                .iter()
                .enumerate()
                .filter(|(_, h)| named(h, name))
                .map(|(i, _)| i)
                .nth((index as usize).saturating_sub(1));
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

    fn run(changes: &[HeaderEdit<'_>]) -> Vec<String> {
        let mut h: Vec<String> = ["Subject: a", "X-Spam: 1", "X-Spam: 2"]
            .map(String::from)
            .to_vec();
        for &c in changes {
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
            HeaderEdit::Insert {
                index: 99,
                name: "X-End",
                value: "e",
            },
            HeaderEdit::Insert {
                index: 0,
                name: "X-First",
                value: "f",
            },
            HeaderEdit::Change {
                index: 2,
                name: "x-spam",
                value: "",
            },
            HeaderEdit::Change {
                index: 1,
                name: "X-Spam",
                value: "one",
            },
            HeaderEdit::Change {
                index: 1,
                name: "X-New",
                value: "added",
            },
            HeaderEdit::Change {
                index: 1,
                name: "X-Gone",
                value: "",
            },
            HeaderEdit::Add {
                name: "X-Last",
                value: "z",
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
