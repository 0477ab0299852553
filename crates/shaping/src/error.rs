//! What is wrong with a policy file, and where.
//!
//! Every error names the file and, when it is about something written in
//! it, the line and column (1-based, in characters) as `FILE:LINE:COLUMN:
//! what is wrong`, the form compilers and `sluice check` use, so that an
//! editor can jump to it.

use std::fmt;

use crate::field::Field;

/// A line and column in the file, both from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    /// The line.
    pub line: u64,
    /// The column, in characters.
    pub column: u64,
}

/// Why a policy file was refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file could not be read.
    Read(std::io::Error),
    /// Not YAML, or not the file's structure: a syntax error, an unknown
    /// key, a value of the wrong type, a key given twice (the YAML
    /// reader's words).
    Yaml(String),
    /// A name in `fields:` or a key of `if:` that is no field.
    UnknownField(String),
    /// A field listed twice in one `fields:`.
    DuplicateField(Field),
    /// A policy or reply rule without `fields:`.
    NoFields,
    /// A condition tests a field that is not part of its policy's key: the
    /// properties of one key would depend on the mail, not on the key.
    FieldNotInKey {
        /// The field tested.
        field: Field,
        /// The policy's fields.
        key: Vec<Field>,
    },
    /// A condition or a reply rule's `if:` with no field.
    EmptyCondition,
    /// A key written with no value (`concurrency:` alone, or Halon's
    /// `grouping: &orange`, which YAML reads as an anchor on nothing).
    NoValue(&'static str),
    /// A grouping id that `groupings:` does not define.
    UnknownGrouping(String),
    /// Two groupings or two sources with one id.
    DuplicateId {
        /// `grouping` or `source`.
        what: &'static str,
        /// The id.
        id: String,
        /// The line of the first one.
        first_line: u64,
    },
    /// A grouping or source whose id is empty.
    EmptyId(&'static str),
    /// A grouping with neither `remotemx` nor `recipientdomains`.
    EmptyGrouping(String),
    /// A source with no `localip`.
    EmptySource(String),
    /// Not an IP address.
    NotAnAddress(String),
    /// A host or domain pattern other than `name` or `*.suffix`.
    BadPattern(String),
    /// A property that may not be 0.
    Zero(&'static str),
    /// Not `N/interval`.
    BadRate(String),
    /// Not a number of seconds or a time value such as `500ms` or `2h`.
    BadDuration(String),
    /// Not `immediate` or `N/interval`.
    BadThreshold(String),
    /// A ramp step that is not a percentage from 1% to 100%.
    BadRampStep(String),
    /// Not `tokenbucket` or `fixedwindow`.
    BadAlgorithm(String),
    /// Not `suspend` or `backoff`.
    BadAction(String),
    /// A reply rule's `match` that does not compile.
    BadRegex {
        /// The pattern.
        pattern: String,
        /// The regex crate's reason.
        error: String,
    },
    /// `action: backoff` without `then:`, or with nothing in it.
    BackoffWithoutThen,
    /// `action: suspend` with `then:`, which it would ignore.
    SuspendWithThen,
    /// A reply rule without `duration:`.
    NoDuration,
}

/// A policy file that cannot be used: the file, where, and why.
#[derive(Debug)]
pub struct PolicyError {
    /// The file's name as given to [`crate::Policy::parse`] or `load`.
    pub file: String,
    /// Where in it; `None` for the file as a whole.
    pub at: Option<At>,
    /// What is wrong.
    pub kind: ErrorKind,
}

/// Shows text from the file with its control characters escaped, so that
/// an error message cannot drive the terminal it is printed on.
struct Clean<'a>(&'a str);

impl fmt::Display for Clean<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Read(e) => write!(f, "{e}"),
            ErrorKind::Yaml(m) => write!(f, "{}", Clean(m)),
            ErrorKind::UnknownField(n) => write!(
                f,
                "unknown field `{}` (fields: {})",
                Clean(n),
                crate::field::Field::ALL.map(|f| f.name()).join(", ")
            ),
            ErrorKind::DuplicateField(x) => write!(f, "field `{x}` listed twice"),
            ErrorKind::NoFields => f.write_str("`fields:` is missing or empty"),
            ErrorKind::FieldNotInKey { field, key } => write!(
                f,
                "condition on `{field}`, which is not one of this policy's fields [{}]",
                key.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
            ),
            ErrorKind::EmptyCondition => {
                f.write_str("`if:` names no field (for every key, use `default:`)")
            }
            ErrorKind::NoValue(what) if *what == "grouping" => f.write_str(
                "`grouping` has no value (an unquoted `&orange` is a YAML anchor: write `orange` or \"&orange\")",
            ),
            ErrorKind::NoValue(what) => write!(f, "`{what}` has no value"),
            ErrorKind::UnknownGrouping(g) => {
                write!(f, "grouping `{}` is not defined in `groupings:`", Clean(g))
            }
            ErrorKind::DuplicateId {
                what,
                id,
                first_line,
            } => write!(
                f,
                "{what} `{}` already defined at line {first_line}",
                Clean(id)
            ),
            ErrorKind::EmptyId(what) => write!(f, "{what} with an empty `id`"),
            ErrorKind::EmptyGrouping(id) => write!(
                f,
                "grouping `{}` has neither `remotemx` nor `recipientdomains`: it matches nothing",
                Clean(id)
            ),
            ErrorKind::EmptySource(id) => write!(f, "source `{}` has no `localip`", Clean(id)),
            ErrorKind::NotAnAddress(v) => write!(f, "`{}` is not an IP address", Clean(v)),
            ErrorKind::BadPattern(p) => write!(
                f,
                "`{}` is not a host or domain name pattern (`name` or `*.suffix`)",
                Clean(p)
            ),
            ErrorKind::Zero(what) => write!(f, "`{what}` must be above 0"),
            ErrorKind::BadRate(v) => write!(
                f,
                "bad rate `{}`: expected N/interval with N and interval above 0 (10/1, 100/60, 100/1m)",
                Clean(v)
            ),
            ErrorKind::BadDuration(v) => write!(
                f,
                "bad time value `{}`: expected seconds or a number with a unit ms, s, m, h, d or w",
                Clean(v)
            ),
            ErrorKind::BadRampStep(v) => write!(
                f,
                "bad ramp step `{}`: expected a percentage from 1% to 100%",
                Clean(v)
            ),
            ErrorKind::BadThreshold(v) => write!(
                f,
                "bad threshold `{}`: expected `immediate` or N/interval (5/60)",
                Clean(v)
            ),
            ErrorKind::BadAlgorithm(v) => write!(
                f,
                "unknown rate algorithm `{}` (tokenbucket or fixedwindow)",
                Clean(v)
            ),
            ErrorKind::BadAction(v) => write!(f, "unknown action `{}` (suspend or backoff)", Clean(v)),
            ErrorKind::BadRegex { pattern, error } => {
                write!(
                    f,
                    "bad regular expression `{}`: {}",
                    Clean(pattern),
                    Clean(error)
                )
            }
            ErrorKind::BackoffWithoutThen => f.write_str(
                "`action: backoff` needs `then:` with the limits to back off to",
            ),
            ErrorKind::SuspendWithThen => {
                f.write_str("`action: suspend` takes no `then:` (nothing is delivered)")
            }
            ErrorKind::NoDuration => f.write_str("`duration:` is missing"),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some(at) => write!(
                f,
                "{}:{}:{}: {}",
                Clean(&self.file),
                at.line,
                at.column,
                self.kind
            ),
            None => write!(f, "{}: {}", Clean(&self.file), self.kind),
        }
    }
}

impl std::error::Error for PolicyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ErrorKind::Read(e) => Some(e),
            _ => None,
        }
    }
}
