//! Why a table could not be opened or compiled, with its file and line.

use std::fmt;

/// What was wrong with a table's source.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TableProblem {
    /// The file could not be read.
    Io(String),
    /// The table type is not one Sluice implements.
    UnsupportedType(String),
    /// Not `type:name`.
    BadReference,
    /// A `key` line without a value.
    NoValue,
    /// `inline:` without `{ ... }`.
    InlineBraces,
    /// An `inline:` item that is not `key = value`.
    InlineItem(String),
    /// Braces that do not pair up.
    UnbalancedBraces,
    /// A regexp line that is not `/pattern/flags result`.
    PatternSyntax(String),
    /// The pattern does not compile.
    BadPattern(String),
    /// An unknown flag after a pattern.
    BadFlag(char),
    /// `endif` without `if`, or `if` without `endif`.
    IfNesting,
    /// A `$n` in a result that names no group of the pattern.
    BadSubstitution(String),
    /// A value the table's user refuses: the value, and why.
    BadValue(String, String),
}

/// A table error: which table, where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableError {
    /// The `type:name` reference.
    pub table: String,
    /// The file the problem is in, empty for inline tables.
    pub file: String,
    /// The line (1-based), 0 when not about a line.
    pub line: usize,
    /// What is wrong.
    pub problem: TableProblem,
}

impl TableError {
    pub(crate) fn new(table: &str, file: &str, line: usize, problem: TableProblem) -> TableError {
        TableError {
            table: table.to_string(),
            file: file.to_string(),
            line,
            problem,
        }
    }

    pub(crate) fn io(table: &str, file: &str, e: std::io::Error) -> TableError {
        TableError::new(table, file, 0, TableProblem::Io(e.to_string()))
    }
}

impl fmt::Display for TableProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableProblem::Io(e) => write!(f, "{e}"),
            TableProblem::UnsupportedType(t) => {
                write!(f, "unsupported table type \"{}\"", t.escape_debug())
            }
            TableProblem::BadReference => write!(f, "expected type:name"),
            TableProblem::NoValue => write!(f, "expected format: key whitespace value"),
            TableProblem::InlineBraces => write!(f, "expected inline:{{ key = value, ... }}"),
            TableProblem::InlineItem(i) => {
                write!(f, "expected key = value, found \"{}\"", i.escape_debug())
            }
            TableProblem::UnbalancedBraces => write!(f, "unbalanced braces"),
            TableProblem::PatternSyntax(s) => write!(f, "{s}"),
            TableProblem::BadPattern(e) => write!(f, "bad pattern: {e}"),
            TableProblem::BadFlag(c) => write!(f, "unknown pattern flag '{}'", c.escape_debug()),
            TableProblem::IfNesting => write!(f, "if/endif do not pair up"),
            TableProblem::BadSubstitution(s) => {
                write!(f, "bad substitution \"{}\"", s.escape_debug())
            }
            TableProblem::BadValue(v, why) => {
                write!(f, "bad value \"{}\": {why}", v.escape_debug())
            }
        }
    }
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.file.is_empty(), self.line) {
            (true, _) => write!(f, "table {}: {}", self.table, self.problem),
            (false, 0) => write!(f, "table {}: {}: {}", self.table, self.file, self.problem),
            (false, n) => write!(
                f,
                "table {}: {}, line {n}: {}",
                self.table, self.file, self.problem
            ),
        }
    }
}

impl std::error::Error for TableError {}
