//! Errors and warnings of the configuration crate.
//!
//! Every error names where it came from: the file, the line (0 when there is
//! no line, e.g. a `-o` override or a default) and, where one is involved, the
//! parameter, so that a postmaster can go straight to the culprit. Problems are
//! typed enums rather than free text so that callers and tests can match on
//! them; `Display` renders Postfix-like messages. Nothing here panics.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A non-fatal problem found while loading (e.g. an unknown parameter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// File the problem is in.
    pub file: PathBuf,
    /// 1-based line number; 0 when not tied to a line.
    pub line: usize,
    /// Parameter concerned; empty when none.
    pub param: String,
    /// What is wrong, in words.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_location(f, &self.file, self.line, &self.param)?;
        f.write_str(&self.message)
    }
}

/// Writes `FILE, line N: parameter "P": ` leaving out the parts that are absent.
fn write_location(
    f: &mut fmt::Formatter<'_>,
    file: &std::path::Path,
    line: usize,
    param: &str,
) -> fmt::Result {
    write!(f, "{}", file.display())?;
    if line > 0 {
        write!(f, ", line {line}")?;
    }
    f.write_str(": ")?;
    if !param.is_empty() {
        write!(f, "parameter \"{}\": ", escape(param))?;
    }
    Ok(())
}

/// Makes hostile text printable in one line: control characters become escapes
/// and very long text is cut, so an error message never floods a terminal.
pub(crate) fn escape(text: &str) -> String {
    const MAX: usize = 200;
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n >= MAX {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Why a value does not fit its parameter's type.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueProblem {
    /// Not a decimal integer in range.
    Integer,
    /// Not `yes` or `no`.
    Bool,
    /// Not a number with an optional unit among `s m h d w`.
    Time,
    /// Not a byte count with an optional `k`, `m` or `g` suffix.
    Size,
    /// Not one of the allowed words.
    Enum(&'static [&'static str]),
    /// A CIDR list entry is wrong; the text says how.
    Cidr(String),
    /// A map reference is not `type:name`.
    MapRef(String),
    /// Not `1/concurrency`, `1/sqrt_concurrency` or a number.
    Feedback,
    /// `{` without `}` or the reverse.
    Braces,
    /// Not a listening address; the text says how.
    Listen(String),
    /// Not a header field name; the text says how.
    HeaderName(String),
    /// A milter is not `unix:/path` or `inet:host:port`; the text says which.
    Milter(String),
    /// A milter macro name is neither one character nor `{name}`.
    Macro(String),
    /// Not an address to connect to; the text says how.
    Addr(String),
}

impl ValueProblem {
    /// The complaint, e.g. `bad integer value`.
    pub fn what(&self) -> &'static str {
        match self {
            // Sizes are integers in Postfix; keep its wording.
            ValueProblem::Integer | ValueProblem::Size => "bad integer value",
            ValueProblem::Bool => "bad boolean value",
            ValueProblem::Time => "bad time value",
            ValueProblem::Enum(_) => "bad value",
            ValueProblem::Cidr(_) => "bad network address",
            ValueProblem::MapRef(_) => "bad table reference",
            ValueProblem::Feedback => "bad feedback value",
            ValueProblem::Braces => "unbalanced { } in value",
            ValueProblem::Listen(_) => "bad listening address",
            ValueProblem::HeaderName(_) => "bad header name",
            ValueProblem::Milter(_) => "bad milter address",
            ValueProblem::Macro(_) => "bad macro name",
            ValueProblem::Addr(_) => "bad address",
        }
    }

    /// What would be right, in parentheses after a space; may be empty.
    pub fn hint(&self) -> String {
        match self {
            ValueProblem::Integer | ValueProblem::Braces => String::new(),
            ValueProblem::Bool => " (use yes or no)".into(),
            ValueProblem::Time => " (use a number and one of the units s m h d w)".into(),
            ValueProblem::Size => {
                " (use a number of bytes, optionally followed by k, m or g)".into()
            }
            ValueProblem::Enum(choices) => format!(" (use one of: {})", choices.join(", ")),
            ValueProblem::Cidr(why) | ValueProblem::MapRef(why) => format!(" ({why})"),
            ValueProblem::Listen(why) => {
                format!(" ({why}; use address:port such as 127.0.0.1:9103, or nothing)")
            }
            ValueProblem::Feedback => " (use 1/concurrency, 1/sqrt_concurrency or a number)".into(),
            ValueProblem::HeaderName(why) => {
                format!(" ({why}; use a name such as X-Tenant-ID, or nothing)")
            }
            ValueProblem::Milter(what) => format!(
                " ({what}; use unix:/path/to/socket or inet:host:port, as inet:127.0.0.1:8891)"
            ),
            ValueProblem::Addr(why) => {
                format!(" ({why}; use address:port items such as 192.0.2.10:3025 or [2001:db8::10]:3025)")
            }
            ValueProblem::Macro(name) => {
                format!(" ({name}; use one character or a name in braces, as i or {{client_addr}})")
            }
        }
    }
}

impl fmt::Display for ValueProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.what(), self.hint())
    }
}

/// Why `$name` expansion failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExpandProblem {
    /// A parameter refers to itself through the names listed, in order.
    Loop(Vec<String>),
    /// References nest deeper than the limit.
    TooDeep,
    /// The expanded text would exceed the size limit.
    TooLong,
    /// `${` or `$(` without its closing bracket.
    Unterminated,
    /// `${...}` that is not `${name}`, `${name?text}`, `${name:text}` or
    /// `${name?{text}:{text}}`.
    BadReference(String),
}

impl fmt::Display for ExpandProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpandProblem::Loop(chain) => write!(f, "parameter loop: {}", chain.join(" -> ")),
            ExpandProblem::TooDeep => f.write_str("parameter references nest too deeply"),
            ExpandProblem::TooLong => f.write_str("expanded value is too long"),
            ExpandProblem::Unterminated => f.write_str("unterminated ${...} or $(...)"),
            ExpandProblem::BadReference(r) => {
                write!(f, "bad parameter reference \"{}\"", escape(r))
            }
        }
    }
}

/// A syntax problem in main.cf.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SyntaxProblem {
    /// A line has no `=` after the name.
    MissingEquals,
    /// A line starts with `=`.
    MissingName,
    /// The name has characters other than letters, digits, `_`, `-`, `.`.
    BadName(String),
    /// The line contains a NUL byte.
    Nul,
    /// The line is not valid UTF-8.
    NotUtf8,
}

impl fmt::Display for SyntaxProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyntaxProblem::MissingEquals => f.write_str("missing '=' after parameter name"),
            SyntaxProblem::MissingName => f.write_str("missing parameter name before '='"),
            SyntaxProblem::BadName(n) => write!(f, "bad parameter name \"{}\"", escape(n)),
            SyntaxProblem::Nul => f.write_str("NUL character in line"),
            SyntaxProblem::NotUtf8 => f.write_str("line is not valid UTF-8"),
        }
    }
}

/// A problem in a master.cf entry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MasterProblem {
    /// Fewer than the 8 required fields.
    TooFewFields(usize),
    /// A service type that Postfix has but Sluice does not support.
    UnsupportedType(String),
    /// A word in the type column that is no service type.
    UnknownType(String),
    /// A y/n column holds something else.
    BadFlag {
        /// Column name.
        column: &'static str,
        /// Text found.
        value: String,
    },
    /// The wakeup column is not a number, `-`, or a number with `?`.
    BadWakeup(String),
    /// The maxproc column is not a number or `-`.
    BadMaxproc(String),
    /// The same (name, type) was defined before, on the given line.
    Duplicate {
        /// Service name.
        name: String,
        /// Line of the first definition.
        first_line: usize,
    },
    /// `-o` without a following `name=value`.
    BadOverride(String),
    /// A unix service name that cannot be a socket file name.
    BadServiceName(String),
    /// An inet service marked private.
    PrivateInet,
    /// `{` without `}` in an argument.
    Braces,
}

impl fmt::Display for MasterProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MasterProblem::TooFewFields(n) => write!(f, "entry has {n} fields, need at least 8"),
            MasterProblem::UnsupportedType(t) => {
                write!(
                    f,
                    "service type \"{}\" is not supported (use inet or unix)",
                    escape(t)
                )
            }
            MasterProblem::UnknownType(t) => write!(f, "unknown service type \"{}\"", escape(t)),
            MasterProblem::BadFlag { column, value } => {
                write!(
                    f,
                    "bad {column} field \"{}\" (use y, n or -)",
                    escape(value)
                )
            }
            MasterProblem::BadWakeup(v) => write!(f, "bad wakeup field \"{}\"", escape(v)),
            MasterProblem::BadMaxproc(v) => write!(f, "bad maxproc field \"{}\"", escape(v)),
            MasterProblem::Duplicate { name, first_line } => write!(
                f,
                "duplicate service \"{}\" (first defined on line {first_line})",
                escape(name)
            ),
            MasterProblem::BadOverride(v) => {
                write!(f, "bad -o argument \"{}\" (use -o name=value)", escape(v))
            }
            MasterProblem::BadServiceName(v) => {
                write!(f, "bad unix service name \"{}\"", escape(v))
            }
            MasterProblem::PrivateInet => f.write_str("inet services cannot be private"),
            MasterProblem::Braces => f.write_str("unbalanced { } in arguments"),
        }
    }
}

/// Why an inet service's listening addresses could not be determined.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddressProblem {
    /// The port is neither a number in 1..=65535 nor a known service name.
    UnknownPort(String),
    /// A host name other than `localhost`.
    HostName(String),
    /// An address whose protocol `inet_protocols` turns off.
    ProtocolDisabled(String),
    /// Malformed `host:port` text.
    Syntax(String),
}

impl fmt::Display for AddressProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressProblem::UnknownPort(p) => write!(f, "unknown port \"{}\"", escape(p)),
            AddressProblem::HostName(h) => write!(
                f,
                "host name \"{}\" is not allowed here: use an address",
                escape(h)
            ),
            AddressProblem::ProtocolDisabled(a) => write!(
                f,
                "address \"{}\" is of a protocol disabled by inet_protocols",
                escape(a)
            ),
            AddressProblem::Syntax(t) => write!(f, "bad address \"{}\"", escape(t)),
        }
    }
}

/// Any refusal of the configuration.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// A file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: io::Error,
    },
    /// main.cf syntax.
    Syntax {
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        problem: SyntaxProblem,
    },
    /// A value that does not fit its parameter's type.
    BadValue {
        /// The file (or a pseudo-origin such as `-o`).
        file: PathBuf,
        /// 1-based line, 0 if none.
        line: usize,
        /// The parameter.
        param: String,
        /// The offending (expanded) value.
        value: String,
        /// What is wrong with it.
        problem: ValueProblem,
    },
    /// `$name` expansion failed.
    Expand {
        /// The file.
        file: PathBuf,
        /// 1-based line, 0 if none.
        line: usize,
        /// The parameter being expanded.
        param: String,
        /// What went wrong.
        problem: ExpandProblem,
    },
    /// A master.cf entry is wrong.
    Master {
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        problem: MasterProblem,
    },
    /// An inet service's address is wrong.
    Address {
        /// The file the service came from.
        file: PathBuf,
        /// Its line.
        line: usize,
        /// The service name as written.
        service: String,
        /// What is wrong.
        problem: AddressProblem,
    },
    /// A name that is not in the parameter table where one is required.
    UnknownParameter {
        /// The name asked for.
        name: String,
    },
}

impl ConfigError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> ConfigError {
        ConfigError::Io {
            path: path.into(),
            source,
        }
    }
}

impl From<(PathBuf, io::Error)> for ConfigError {
    fn from((path, source): (PathBuf, io::Error)) -> ConfigError {
        ConfigError::Io { path, source }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ConfigError::Syntax {
                file,
                line,
                problem,
            } => {
                write_location(f, file, *line, "")?;
                write!(f, "{problem}")
            }
            ConfigError::BadValue {
                file,
                line,
                param,
                value,
                problem,
            } => {
                write_location(f, file, *line, param)?;
                write!(
                    f,
                    "{} \"{}\"{}",
                    problem.what(),
                    escape(value),
                    problem.hint()
                )
            }
            ConfigError::Expand {
                file,
                line,
                param,
                problem,
            } => {
                write_location(f, file, *line, param)?;
                write!(f, "{problem}")
            }
            ConfigError::Master {
                file,
                line,
                problem,
            } => {
                write_location(f, file, *line, "")?;
                write!(f, "{problem}")
            }
            ConfigError::Address {
                file,
                line,
                service,
                problem,
            } => {
                write_location(f, file, *line, "")?;
                write!(f, "service \"{}\": {problem}", escape(service))
            }
            ConfigError::UnknownParameter { name } => {
                write!(f, "unknown parameter \"{}\"", escape(name))
            }
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
