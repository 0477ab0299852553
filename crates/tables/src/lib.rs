//! Postfix-style lookup tables, compiled into memory.
//!
//! A table is named as in Postfix, `type:name`, so existing configurations
//! carry over: `texthash:/path`, `hash:/path` and `lmdb:/path` all read the
//! same plain source text (`key value` lines, `#` comments, indented
//! continuation lines; there is no Berkeley DB or LMDB file, the text is
//! what `postmap` would have compiled), `inline:{ k = v, ... }`,
//! `static:value`, `regexp:/path` and `pcre:/path` (Postfix syntax, both run
//! by the `regex` crate) and `unix:passwd.byname`. Everything is read once,
//! at start and on reload; a lookup never touches the file system.
//!
//! A key written `name:` (the aliases(5) form) is read as `name`.
//!
//! Keys of the indexed types are folded to lower case, as `postmap` does by
//! default, so lookups are case-insensitive; regexp and pcre tables match
//! the key as given (case-insensitive unless the `i` flag turns it off).
//!
//! Limits: no `cidr:`, `proxy:` or database-backed types (opening one is an
//! error naming the type). Errors carry the file and line. Nothing here
//! panics on any input.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod actions;
mod error;
mod regexp;
mod text;

use std::collections::HashMap;
use std::path::Path;

pub use config::MapRef;
pub use error::{TableError, TableProblem};
pub use text::{logical_lines, split_alias_value};

/// A check of a table's values as they are read: why a value is bad. A
/// program whose table values have a syntax of their own (transport_maps'
/// `error:5.1.1 text`) refuses a bad one at start, with its file and line,
/// instead of at the lookup that meets it.
pub type Check<'a> = &'a dyn Fn(&str) -> Result<(), String>;

/// Accepts every value.
fn any_value(_: &str) -> Result<(), String> {
    Ok(())
}

/// One compiled lookup table.
#[derive(Debug)]
pub struct Table {
    spec: String,
    kind: Kind,
    warnings: Vec<String>,
}

#[derive(Debug)]
enum Kind {
    Indexed(HashMap<String, String>),
    Static(String),
    Regexp(regexp::RegexpTable),
}

impl Table {
    /// Opens and compiles the table `r` names.
    pub fn open(r: &MapRef) -> Result<Table, TableError> {
        Table::open_checked(r, &any_value)
    }

    /// Opens and compiles the table `r` names, refusing a value `check`
    /// refuses (a pattern table's result with `$n` in it is only known at
    /// lookup, and not checked).
    pub fn open_checked(r: &MapRef, check: Check<'_>) -> Result<Table, TableError> {
        let spec = r.to_string();
        let read = |path: &str| {
            std::fs::read(path)
                .map_err(|e| TableError::io(&spec, path, e))
                .map(|b| {
                    // Tables are text; a stray byte must not make the whole table
                    // unreadable, and a key containing it can never match anyway.
                    String::from_utf8_lossy(&b).into_owned()
                })
        };
        match r.kind.as_str() {
            "texthash" | "hash" | "lmdb" | "btree" => {
                let text = read(&r.name)?;
                Table::compile_text(&spec, &r.name, &text, check)
            }
            "regexp" | "pcre" => {
                let text = read(&r.name)?;
                Table::compile_regexp(&spec, &r.name, &text, check)
            }
            "inline" => Table::compile_inline(&spec, &r.name, check),
            "static" => {
                let value = strip_braces(&r.name).to_string();
                check(&value).map_err(|e| {
                    TableError::new(&spec, "", 0, TableProblem::BadValue(value.clone(), e))
                })?;
                Ok(Table {
                    spec,
                    kind: Kind::Static(value),
                    warnings: vec![],
                })
            }
            "unix" if r.name == "passwd.byname" => {
                let text = read("/etc/passwd")?;
                Ok(Table::from_passwd(&spec, &text))
            }
            other => Err(TableError::new(
                &spec,
                "",
                0,
                TableProblem::UnsupportedType(other.to_string()),
            )),
        }
    }

    /// Compiles a `key value` source text; `origin` names it in errors.
    pub fn from_text(spec: &str, origin: &str, text: &str) -> Result<Table, TableError> {
        Table::compile_text(spec, origin, text, &any_value)
    }

    fn compile_text(
        spec: &str,
        origin: &str,
        text: &str,
        check: Check<'_>,
    ) -> Result<Table, TableError> {
        let mut map = HashMap::new();
        let mut warnings = Vec::new();
        for (line, entry) in text::logical_lines(text) {
            let (key, value) = split_key_value(&entry)
                .ok_or_else(|| TableError::new(spec, origin, line, TableProblem::NoValue))?;
            // aliases(5) writes `name: value`; the same source serves
            // alias_maps and local_recipient_maps, as postalias makes it.
            let key = key
                .strip_suffix(':')
                .filter(|k| !k.is_empty())
                .unwrap_or(key)
                .to_lowercase();
            if map.contains_key(&key) {
                // postmap keeps the first entry and warns, so do we.
                warnings.push(format!(
                    "{origin}, line {line}: duplicate entry: \"{key}\", keeping the first"
                ));
                continue;
            }
            check(value).map_err(|e| {
                TableError::new(spec, origin, line, TableProblem::BadValue(value.into(), e))
            })?;
            map.insert(key, value.to_string());
        }
        Ok(Table {
            spec: spec.to_string(),
            kind: Kind::Indexed(map),
            warnings,
        })
    }

    /// Compiles a regexp or pcre source text.
    pub fn from_regexp(spec: &str, origin: &str, text: &str) -> Result<Table, TableError> {
        Table::compile_regexp(spec, origin, text, &any_value)
    }

    fn compile_regexp(
        spec: &str,
        origin: &str,
        text: &str,
        check: Check<'_>,
    ) -> Result<Table, TableError> {
        let t = regexp::RegexpTable::parse(text, check)
            .map_err(|(line, p)| TableError::new(spec, origin, line, p))?;
        Ok(Table {
            spec: spec.to_string(),
            kind: Kind::Regexp(t),
            warnings: vec![],
        })
    }

    /// Compiles the body of `inline:{ key = value, ... }`.
    pub fn from_inline(spec: &str, body: &str) -> Result<Table, TableError> {
        Table::compile_inline(spec, body, &any_value)
    }

    fn compile_inline(spec: &str, body: &str, check: Check<'_>) -> Result<Table, TableError> {
        let inner = body.trim();
        let Some(inner) = inner.strip_prefix('{').and_then(|s| s.strip_suffix('}')) else {
            return Err(TableError::new(spec, "", 0, TableProblem::InlineBraces));
        };
        let mut map = HashMap::new();
        for item in text::split_inline(inner).map_err(|p| TableError::new(spec, "", 0, p))? {
            let Some((k, v)) = item.split_once('=') else {
                return Err(TableError::new(spec, "", 0, TableProblem::InlineItem(item)));
            };
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() {
                return Err(TableError::new(
                    spec,
                    "",
                    0,
                    TableProblem::InlineItem(item.clone()),
                ));
            }
            check(v)
                .map_err(|e| TableError::new(spec, "", 0, TableProblem::BadValue(v.into(), e)))?;
            map.entry(k.to_lowercase()).or_insert_with(|| v.to_string());
        }
        Ok(Table {
            spec: spec.to_string(),
            kind: Kind::Indexed(map),
            warnings: vec![],
        })
    }

    fn from_passwd(spec: &str, text: &str) -> Table {
        let map = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                l.split_once(':')
                    .map(|(name, _)| (name.to_string(), l.to_string()))
            })
            .filter(|(name, _)| !name.is_empty())
            .collect();
        Table {
            spec: spec.to_string(),
            kind: Kind::Indexed(map),
            warnings: vec![],
        }
    }

    /// Looks up `key`: the value, with `$n` substituted for regexp tables.
    pub fn lookup(&self, key: &str) -> Option<String> {
        match &self.kind {
            Kind::Indexed(m) => {
                if let Some(v) = m.get(key) {
                    return Some(v.clone());
                }
                // Keys are stored folded; only fold when the key needs it.
                if key.chars().any(char::is_uppercase) {
                    return m.get(&key.to_lowercase()).cloned();
                }
                None
            }
            Kind::Static(v) => Some(v.clone()),
            Kind::Regexp(t) => t.lookup(key),
        }
    }

    /// Whether lookups of any key succeed (a `static:` table), which makes
    /// e.g. a catch-all relay domain list.
    pub fn is_static(&self) -> bool {
        matches!(self.kind, Kind::Static(_))
    }

    /// Entries of an indexed table (0 for static and pattern tables).
    pub fn len(&self) -> usize {
        match &self.kind {
            Kind::Indexed(m) => m.len(),
            _ => 0,
        }
    }

    /// The entries of an indexed table, keys folded, in no set order;
    /// `None` for static and pattern tables, which cannot be listed.
    pub fn entries(&self) -> Option<impl Iterator<Item = (&str, &str)>> {
        match &self.kind {
            Kind::Indexed(m) => Some(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
            _ => None,
        }
    }

    /// Whether an indexed table has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `type:name` this table was opened from.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// Non-fatal problems found while compiling (duplicate keys).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// A list of tables searched in order, as a main.cf parameter names them.
#[derive(Debug, Default)]
pub struct Tables {
    tables: Vec<Table>,
    /// Tables whose file could not be read (see [`Tables::open_tolerant`]).
    unavailable: Vec<TableError>,
    /// For each of `unavailable`, how many readable tables come before it
    /// in the list: a lookup that reaches it fails.
    unavailable_at: Vec<usize>,
}

impl Tables {
    /// No tables: every lookup misses.
    pub fn none() -> Tables {
        Tables::default()
    }

    /// Opens every table in the list; the first error stops it.
    pub fn open(refs: &[MapRef]) -> Result<Tables, TableError> {
        Tables::open_checked(refs, &any_value)
    }

    /// Opens every table in the list, refusing a value `check` refuses
    /// (see [`Table::open_checked`]).
    pub fn open_checked(refs: &[MapRef], check: Check<'_>) -> Result<Tables, TableError> {
        Ok(Tables {
            tables: refs
                .iter()
                .map(|r| Table::open_checked(r, check))
                .collect::<Result<_, _>>()?,
            ..Tables::default()
        })
    }

    /// Opens every table in the list as Postfix's surrogate tables do: one
    /// whose file cannot be read is left out and listed in
    /// [`Tables::unavailable`], so that a lookup which misses the others
    /// fails temporarily instead of the whole
    /// program failing. Any other error (a bad line) stops it.
    pub fn open_tolerant(refs: &[MapRef], check: Check<'_>) -> Result<Tables, TableError> {
        let mut t = Tables::none();
        for r in refs {
            match Table::open_checked(r, check) {
                Ok(table) => t.tables.push(table),
                Err(e) if matches!(e.problem, TableProblem::Io(_)) => {
                    t.unavailable_at.push(t.tables.len());
                    t.unavailable.push(e)
                }
                Err(e) => return Err(e),
            }
        }
        Ok(t)
    }

    /// Wraps already compiled tables.
    pub fn from_tables(tables: Vec<Table>) -> Tables {
        Tables {
            tables,
            ..Tables::default()
        }
    }

    /// The first table's answer for `key`, skipping tables that could not
    /// be read (see [`Tables::find`] for the answer that reports them).
    pub fn lookup(&self, key: &str) -> Option<String> {
        self.tables.iter().find_map(|t| t.lookup(key))
    }

    /// The first table's answer for `key`, in list order; a table that
    /// could not be read fails the lookup that reaches it, as Postfix's
    /// maps_find stops at a dictionary error: a table listed after it
    /// might otherwise answer for a key the unread one would have.
    pub fn find(&self, key: &str) -> Result<Option<String>, &TableError> {
        Ok(self.find_in(key)?.map(|(_, v)| v))
    }

    /// [`Tables::find`], with the position in [`Tables::tables`] of the
    /// table that answered.
    pub fn find_in(&self, key: &str) -> Result<Option<(usize, String)>, &TableError> {
        let mut broken = self.unavailable_at.iter().zip(&self.unavailable).peekable();
        for (i, t) in self.tables.iter().enumerate() {
            if let Some((_, e)) = broken.peek().filter(|(at, _)| **at <= i) {
                return Err(e);
            }
            if let Some(v) = t.lookup(key) {
                return Ok(Some((i, v)));
            }
        }
        match broken.next() {
            Some((_, e)) => Err(e),
            None => Ok(None),
        }
    }

    /// The tables that could not be read, with why.
    pub fn unavailable(&self) -> &[TableError] {
        &self.unavailable
    }

    /// Whether the list names no table (readable or not).
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty() && self.unavailable.is_empty()
    }

    /// The tables, in search order.
    pub fn tables(&self) -> &[Table] {
        &self.tables
    }
}

/// Parses a table reference as written in main.cf or on a command line.
pub fn parse_ref(text: &str) -> Result<MapRef, TableError> {
    let Some((kind, name)) = text.split_once(':') else {
        return Err(TableError::new(text, "", 0, TableProblem::BadReference));
    };
    if kind.is_empty()
        || name.is_empty()
        || !kind
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(TableError::new(text, "", 0, TableProblem::BadReference));
    }
    Ok(MapRef {
        kind: kind.to_string(),
        name: name.to_string(),
    })
}

/// Opens a table by its textual reference, e.g. for `sluice map query`.
pub fn open_str(text: &str) -> Result<Table, TableError> {
    Table::open(&parse_ref(text)?)
}

/// Whether a file exists for a file-backed table reference (used to give a
/// clear message instead of failing on a default like `hash:/etc/aliases`).
pub fn source_exists(r: &MapRef) -> bool {
    match r.kind.as_str() {
        "texthash" | "hash" | "lmdb" | "btree" | "regexp" | "pcre" => Path::new(&r.name).exists(),
        _ => true,
    }
}

fn split_key_value(entry: &str) -> Option<(&str, &str)> {
    let entry = entry.trim();
    let i = entry.find(char::is_whitespace)?;
    let (k, v) = entry.split_at(i);
    let v = v.trim();
    (!v.is_empty()).then_some((k, v))
}

fn strip_braces(s: &str) -> &str {
    let t = s.trim();
    t.strip_prefix('{')
        .and_then(|x| x.strip_suffix('}'))
        .map(str::trim)
        .unwrap_or(t)
}

#[cfg(test)]
mod tests;
