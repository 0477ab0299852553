//! master.cf: the service table, in Postfix's column syntax.
//!
//! `service type private unpriv chroot wakeup maxproc command [args...]`,
//! with `-` for a column's default (private y, unpriv y, chroot n, wakeup 0,
//! maxproc `default_process_limit`), continuation lines that start with white
//! space and `#` comment lines as in main.cf. Only `inet` and `unix` services
//! exist in Sluice; Postfix's other types are refused by name. `-o name=value`
//! and Postfix 3's `-o { name = value }` arguments become overrides; other
//! `{ ... }` arguments lose their braces, as in Postfix. Unix service names
//! become socket file names, so they may not contain `/` or be `.`/`..`.

use std::path::Path;

use crate::error::{ConfigError, MasterProblem, SyntaxProblem};
use crate::maincf::{self, Scanned};

/// The socket type of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceKind {
    /// A TCP listener.
    Inet,
    /// A Unix stream socket under `private/` or `public/`.
    Unix,
}

impl std::fmt::Display for ServiceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServiceKind::Inet => "inet",
            ServiceKind::Unix => "unix",
        })
    }
}

/// One master.cf entry. Equality ignores `line`: master compares entries to
/// decide which services changed on reload, and a comment added above an
/// entry must not restart it.
#[derive(Clone, Debug, Eq)]
pub struct ServiceDef {
    /// Service name (for inet: `[host:]port`).
    pub name: String,
    /// Socket type.
    pub kind: ServiceKind,
    /// Unix socket in `private/` (true) or `public/` (false); false for inet.
    pub private: bool,
    /// Runs as mail_owner rather than root.
    pub unpriv: bool,
    /// Runs chrooted to the queue directory.
    pub chroot: bool,
    /// Wake-up interval in seconds; 0 means none.
    pub wakeup: u32,
    /// Wake-up only while the service is in use (`?` suffix).
    pub wakeup_conditional: bool,
    /// Process limit: `None` is `default_process_limit`, `Some(0)` no limit.
    pub maxproc: Option<u32>,
    /// Program name, relative to `daemon_directory`.
    pub command: String,
    /// Arguments other than `-o` overrides.
    pub args: Vec<String>,
    /// `-o name=value` overrides, in order.
    pub overrides: Vec<(String, String)>,
    /// 1-based line of the entry.
    pub line: usize,
}

impl PartialEq for ServiceDef {
    fn eq(&self, other: &ServiceDef) -> bool {
        // Every field but `line`; spelled out so a new field is not forgotten.
        let ServiceDef {
            name,
            kind,
            private,
            unpriv,
            chroot,
            wakeup,
            wakeup_conditional,
            maxproc,
            command,
            args,
            overrides,
            line: _,
        } = self;
        *name == other.name
            && *kind == other.kind
            && *private == other.private
            && *unpriv == other.unpriv
            && *chroot == other.chroot
            && *wakeup == other.wakeup
            && *wakeup_conditional == other.wakeup_conditional
            && *maxproc == other.maxproc
            && *command == other.command
            && *args == other.args
            && *overrides == other.overrides
    }
}

impl ServiceDef {
    /// The socket path of a unix service: `queue_directory/private/<name>`
    /// or `queue_directory/public/<name>`; `None` for inet services.
    pub fn unix_path(&self, queue_directory: &Path) -> Option<std::path::PathBuf> {
        match self.kind {
            ServiceKind::Inet => None,
            ServiceKind::Unix => {
                let dir = if self.private { "private" } else { "public" };
                Some(queue_directory.join(dir).join(&self.name))
            }
        }
    }
}

/// Splits a logical line into fields; a field that starts with `{` runs to
/// its matching `}` and may contain white space.
fn fields(text: &str) -> Result<Vec<String>, MasterProblem> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut end = text.len();
        if c == '{' {
            let mut depth = 0usize;
            let mut closed = false;
            for (i, ch) in chars.by_ref() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + 1;
                            closed = true;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            if !closed {
                return Err(MasterProblem::Braces);
            }
        } else {
            for (i, ch) in chars.by_ref() {
                if ch.is_whitespace() {
                    end = i;
                    break;
                }
            }
        }
        out.push(text[start..end].to_string());
    }
    Ok(out)
}

/// `{ text }` → `text`; other fields unchanged.
fn unbrace(field: &str) -> &str {
    match field.strip_prefix('{').and_then(|f| f.strip_suffix('}')) {
        Some(inner) => inner.trim(),
        None => field,
    }
}

fn flag(column: &'static str, value: &str, default: bool) -> Result<bool, MasterProblem> {
    match value {
        "-" => Ok(default),
        "y" => Ok(true),
        "n" => Ok(false),
        _ => Err(MasterProblem::BadFlag {
            column,
            value: value.to_string(),
        }),
    }
}

fn wakeup(value: &str) -> Result<(u32, bool), MasterProblem> {
    if value == "-" {
        return Ok((0, false));
    }
    let (digits, conditional) = match value.strip_suffix('?') {
        Some(d) => (d, true),
        None => (value, false),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(MasterProblem::BadWakeup(value.to_string()));
    }
    let n = digits
        .parse()
        .map_err(|_| MasterProblem::BadWakeup(value.to_string()))?;
    Ok((n, conditional))
}

fn maxproc(value: &str) -> Result<Option<u32>, MasterProblem> {
    if value == "-" {
        return Ok(None);
    }
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(MasterProblem::BadMaxproc(value.to_string()));
    }
    value
        .parse()
        .map(Some)
        .map_err(|_| MasterProblem::BadMaxproc(value.to_string()))
}

/// Parses one `name=value` (or `{ name = value }`) override.
fn override_arg(text: &str) -> Result<(String, String), MasterProblem> {
    let bad = || MasterProblem::BadOverride(text.to_string());
    let (name, value) = unbrace(text).split_once('=').ok_or_else(bad)?;
    let name = name.trim();
    if !maincf::is_valid_name(name) {
        return Err(bad());
    }
    Ok((name.to_string(), value.trim().to_string()))
}

fn entry(fields: Vec<String>, line: usize) -> Result<ServiceDef, MasterProblem> {
    if fields.len() < 8 {
        return Err(MasterProblem::TooFewFields(fields.len()));
    }
    let kind = match fields[1].as_str() {
        "inet" => ServiceKind::Inet,
        "unix" => ServiceKind::Unix,
        t @ ("fifo" | "pass" | "unix-dgram") => {
            return Err(MasterProblem::UnsupportedType(t.into()))
        }
        t => return Err(MasterProblem::UnknownType(t.into())),
    };
    let name = fields[0].clone();
    if kind == ServiceKind::Unix
        && (name.contains('/') || name == "." || name == ".." || name.contains('\0'))
    {
        return Err(MasterProblem::BadServiceName(name));
    }
    let private = flag("private", &fields[2], kind == ServiceKind::Unix)?;
    if kind == ServiceKind::Inet && private {
        return Err(MasterProblem::PrivateInet);
    }
    let unpriv = flag("unpriv", &fields[3], true)?;
    let chroot = flag("chroot", &fields[4], false)?;
    let (wakeup, wakeup_conditional) = wakeup(&fields[5])?;
    let maxproc = maxproc(&fields[6])?;
    let mut rest = fields.into_iter().skip(7);
    let command = rest.next().unwrap_or_default();
    let mut args = Vec::new();
    let mut overrides = Vec::new();
    while let Some(arg) = rest.next() {
        if arg == "-o" {
            let value = rest
                .next()
                .ok_or_else(|| MasterProblem::BadOverride(String::new()))?;
            overrides.push(override_arg(&value)?);
        } else if let Some(attached) = arg.strip_prefix("-o") {
            overrides.push(override_arg(attached)?);
        } else {
            args.push(unbrace(&arg).to_string());
        }
    }
    Ok(ServiceDef {
        name,
        kind,
        private,
        unpriv,
        chroot,
        wakeup,
        wakeup_conditional,
        maxproc,
        command,
        args,
        overrides,
        line,
    })
}

/// Parses master.cf text; `origin` names the file in errors.
pub fn parse_master_cf(text: &str, origin: &Path) -> Result<Vec<ServiceDef>, ConfigError> {
    let (defs, errors) = parse_master_cf_all(text, origin);
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(defs),
    }
}

/// Parses master.cf text past its mistakes, for `sluice check`: the
/// entries that are right and an error for each line that is not, so that
/// one mistake does not hide the next.
pub fn parse_master_cf_all(text: &str, origin: &Path) -> (Vec<ServiceDef>, Vec<ConfigError>) {
    let err = |line, problem| ConfigError::Master {
        file: origin.to_path_buf(),
        line,
        problem,
    };
    let mut out: Vec<ServiceDef> = Vec::new();
    let mut errors = Vec::new();
    for item in maincf::scan(text) {
        let logical = match item {
            // An orphan continuation has no entry to belong to; Postfix
            // refuses such a master.cf too.
            Scanned::Orphan(line) => {
                errors.push(err(line, MasterProblem::TooFewFields(0)));
                continue;
            }
            Scanned::Line(l) => l,
        };
        if logical.text.contains('\0') {
            errors.push(ConfigError::Syntax {
                file: origin.to_path_buf(),
                line: logical.line,
                problem: SyntaxProblem::Nul,
            });
            continue;
        }
        let def = match fields(&logical.text).and_then(|f| entry(f, logical.line)) {
            Ok(def) => def,
            Err(p) => {
                errors.push(err(logical.line, p));
                continue;
            }
        };
        if let Some(first) = out
            .iter()
            .find(|d| d.name == def.name && d.kind == def.kind)
        {
            errors.push(err(
                def.line,
                MasterProblem::Duplicate {
                    name: def.name,
                    first_line: first.line,
                },
            ));
            continue;
        }
        out.push(def);
    }
    (out, errors)
}

/// [`parse_master_cf_all`] on the file at `path`; an unreadable file, or
/// one that is not UTF-8, is one error.
pub fn check_master_cf(path: &Path) -> (Vec<ServiceDef>, Vec<ConfigError>) {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return (Vec::new(), vec![ConfigError::io(path, e)]),
    };
    if let Some(line) = maincf::first_bad_utf8_line(&bytes) {
        let e = ConfigError::Syntax {
            file: path.to_path_buf(),
            line,
            problem: SyntaxProblem::NotUtf8,
        };
        return (Vec::new(), vec![e]);
    }
    parse_master_cf_all(&String::from_utf8_lossy(&bytes), path)
}

/// Reads and parses the master.cf at `path`.
pub fn load_master_cf(path: &Path) -> Result<Vec<ServiceDef>, ConfigError> {
    let bytes = std::fs::read(path).map_err(|e| ConfigError::io(path, e))?;
    if let Some(line) = maincf::first_bad_utf8_line(&bytes) {
        return Err(ConfigError::Syntax {
            file: path.to_path_buf(),
            line,
            problem: SyntaxProblem::NotUtf8,
        });
    }
    parse_master_cf(&String::from_utf8_lossy(&bytes), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<ServiceDef>, ConfigError> {
        parse_master_cf(text, Path::new("/etc/sluice/master.cf"))
    }

    fn problem(text: &str) -> (usize, MasterProblem) {
        match parse(text) {
            Err(ConfigError::Master { line, problem, .. }) => (line, problem),
            other => panic!("{text:?}: {other:?}"),
        }
    }

    #[test]
    fn entries() {
        let text = "# service table\n\
            smtp      inet  n       -       n       -       -       smtpd\n\
            127.0.0.1:2525 inet n - n - 10 smtpd -v\n\
            \x20 -o smtpd_tls_security_level=may\n\
            \x20 -o { smtpd_client_restrictions = permit_mynetworks, reject }\n\
            cleanup   unix  n       -       n       -       0       cleanup\n\
            qmgr      unix  n       -       n       300?    1       qmgr -ofoo=bar { a b }\n\
            router    unix  -       -       -       -       -       router\n";
        let defs = parse(text).unwrap();
        assert_eq!(defs.len(), 5);
        assert_eq!(
            defs[0],
            ServiceDef {
                name: "smtp".into(),
                kind: ServiceKind::Inet,
                private: false,
                unpriv: true,
                chroot: false,
                wakeup: 0,
                wakeup_conditional: false,
                maxproc: None,
                command: "smtpd".into(),
                args: vec![],
                overrides: vec![],
                line: 2,
            }
        );
        assert_eq!(defs[1].maxproc, Some(10));
        assert_eq!(defs[1].args, ["-v"]);
        assert_eq!(
            defs[1].overrides,
            [
                ("smtpd_tls_security_level".to_string(), "may".to_string()),
                (
                    "smtpd_client_restrictions".to_string(),
                    "permit_mynetworks, reject".to_string()
                )
            ]
        );
        assert_eq!(defs[2].maxproc, Some(0));
        assert_eq!((defs[3].wakeup, defs[3].wakeup_conditional), (300, true));
        assert_eq!(defs[3].overrides, [("foo".to_string(), "bar".to_string())]);
        assert_eq!(defs[3].args, ["a b"]);
        assert!(defs[4].private && defs[4].unpriv && !defs[4].chroot);
        let q = Path::new("/var/spool/sluice");
        assert_eq!(defs[4].unix_path(q), Some(q.join("private/router")));
        assert_eq!(defs[0].unix_path(q), None);
        let public = parse("submit unix n - n - - cleanup\n").unwrap();
        assert_eq!(public[0].unix_path(q), Some(q.join("public/submit")));
        assert_eq!(defs[4].line, 8);
        // Moving an entry does not change it; changing an argument does.
        let moved = parse(&format!("# new comment\n\n{text}")).unwrap();
        assert_eq!(moved, defs);
        assert_ne!(moved[4].line, defs[4].line);
        let changed = parse(&text.replace("qmgr -ofoo=bar", "qmgr -ofoo=baz")).unwrap();
        assert_eq!(changed[..3], defs[..3]);
        assert_ne!(changed[3], defs[3]);
        assert_eq!(changed[4], defs[4]);
    }

    #[test]
    fn errors() {
        use MasterProblem as P;
        for (text, line, want) in [
            ("smtp inet n - n - - \n", 1, P::TooFewFields(7)),
            (
                "\n\nx fifo n - n - - pickup\n",
                3,
                P::UnsupportedType("fifo".into()),
            ),
            (
                "x pass n - n - - smtpd\n",
                1,
                P::UnsupportedType("pass".into()),
            ),
            (
                "x unix-dgram n - n - - a\n",
                1,
                P::UnsupportedType("unix-dgram".into()),
            ),
            ("x tcp n - n - - a\n", 1, P::UnknownType("tcp".into())),
            (
                "x unix yes - n - - a\n",
                1,
                P::BadFlag {
                    column: "private",
                    value: "yes".into(),
                },
            ),
            (
                "x unix - Y n - - a\n",
                1,
                P::BadFlag {
                    column: "unpriv",
                    value: "Y".into(),
                },
            ),
            ("x unix - - n 5x - a\n", 1, P::BadWakeup("5x".into())),
            ("x unix - - n ? - a\n", 1, P::BadWakeup("?".into())),
            (
                "x unix - - n 99999999999 - a\n",
                1,
                P::BadWakeup("99999999999".into()),
            ),
            ("x unix - - n - -1 a\n", 1, P::BadMaxproc("-1".into())),
            ("x unix - - n - - a -o\n", 1, P::BadOverride(String::new())),
            (
                "x unix - - n - - a -o novalue\n",
                1,
                P::BadOverride("novalue".into()),
            ),
            (
                "x unix - - n - - a -o {=v}\n",
                1,
                P::BadOverride("{=v}".into()),
            ),
            ("x unix - - n - - a { b\n", 1, P::Braces),
            (
                "../x unix - - n - - a\n",
                1,
                P::BadServiceName("../x".into()),
            ),
            ("x inet y - n - - a\n", 1, P::PrivateInet),
            (
                "a unix - - n - - a\na inet n - n - - a\n# c\na unix - - n - - b\n",
                4,
                P::Duplicate {
                    name: "a".into(),
                    first_line: 1,
                },
            ),
            ("  leading space\n", 1, P::TooFewFields(0)),
        ] {
            assert_eq!(problem(text), (line, want), "{text:?}");
        }
        let msg = parse("x fifo n - n - - pickup\n").unwrap_err().to_string();
        assert_eq!(
            msg,
            "/etc/sluice/master.cf, line 1: service type \"fifo\" is not supported (use inet or unix)"
        );
        assert!(parse("a unix - - n - - a\0\n").is_err());
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("# nothing\n\n").unwrap(), vec![]);
    }

    #[test]
    fn every_bad_line_is_reported_and_the_right_ones_kept() {
        let text = "a unix - - x - 1 a\nb unix -\nc unix - - n - 1 c\nc unix - - n - 1 c\nd unix - - n - 1 d\n";
        let (defs, errors) = parse_master_cf_all(text, Path::new("/etc/sluice/master.cf"));
        let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["c", "d"]);
        let lines: Vec<usize> = errors
            .iter()
            .map(|e| match e {
                ConfigError::Master { line, file, .. } => {
                    assert_eq!(file, Path::new("/etc/sluice/master.cf"));
                    *line
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(lines, [1, 2, 4]);
        // parse_master_cf still stops at the first.
        assert_eq!(problem(text).0, 1);
    }
}
