//! `sluice newaliases`: check the `alias_maps` sources, like newaliases(1).
//!
//! Sluice reads alias files as text each time (there is no database to
//! rebuild), so this is the check an administrator runs after an edit: the
//! file must load as a table, every entry must be `name: value`, and every
//! `:include:` file must be an absolute path that can be read. Problems are
//! reported as `file, line N: ...`; the exit status is 1 when there was one.

use std::io::Write;
use std::path::Path;

/// Table types whose source is a text file we can check.
const TEXT_KINDS: [&str; 5] = ["hash", "lmdb", "texthash", "btree", "cdb"];

/// Checks every text source in `alias_maps`; see the module docs.
pub fn newaliases(dir: &Path) -> i32 {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    newaliases_to(&mut stdout.lock(), &mut stderr.lock(), dir)
}

/// [`newaliases`] writing to the given streams (for tests).
pub fn newaliases_to(out: &mut dyn Write, err: &mut dyn Write, dir: &Path) -> i32 {
    let loaded = match config::Config::load(dir, &[]) {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(err, "sluice: fatal: {e}");
            return 1;
        }
    };
    let mut code = 0;
    for r in loaded.config.maps("alias_maps") {
        if !TEXT_KINDS.contains(&r.kind.as_str()) {
            let _ = writeln!(out, "sluice: {r}: not a file, nothing to check");
            continue;
        }
        let path = Path::new(&r.name);
        if !path.exists() {
            // As local(8): a missing alias file is no error, only no aliases.
            let _ = writeln!(err, "sluice: warning: {}: no such file", r.name);
            continue;
        }
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                let _ = writeln!(err, "sluice: error: {}: {e}", r.name);
                code = 1;
                continue;
            }
        };
        let mut problems = check_source(&r.name, &text);
        if problems.is_empty() {
            // What local(8) itself will load, with its own wording.
            if let Err(e) = tables::Table::open(&r) {
                problems.push(e.to_string());
            }
        }
        for p in &problems {
            let _ = writeln!(err, "sluice: error: {p}");
        }
        if problems.is_empty() {
            let n = tables::logical_lines(&text).len();
            let _ = writeln!(out, "sluice: {}: {n} aliases", r.name);
        } else {
            code = 1;
        }
    }
    code
}

/// The problems in one aliases(5) source, each naming file and line.
pub fn check_source(file: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (line, entry) in tables::logical_lines(text) {
        let Some((name, value)) = entry.split_once(':') else {
            problems.push(format!("{file}, line {line}: need name:value pair"));
            continue;
        };
        let name = name.trim().trim_matches('"');
        if name.is_empty() || name.contains(char::is_whitespace) {
            problems.push(format!("{file}, line {line}: bad alias name {name:?}"));
            continue;
        }
        let items = tables::split_alias_value(value);
        if items.is_empty() {
            problems.push(format!("{file}, line {line}: {name}: no value"));
        }
        for item in items {
            if let Some(inc) = item.strip_prefix(":include:") {
                let inc = inc.trim();
                if !inc.starts_with('/') {
                    problems.push(format!(
                        "{file}, line {line}: {name}: :include: needs an absolute path, not {inc:?}"
                    ));
                } else if let Err(e) = std::fs::File::open(inc) {
                    problems.push(format!("{file}, line {line}: {name}: {inc}: {e}"));
                }
            } else if item == "|" || item == "/" {
                problems.push(format!(
                    "{file}, line {line}: {name}: empty {item:?} target"
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_aliases_pass() {
        let text = "# comment\npostmaster: root\nteam: alice, bob,\n  carol\n\
                    pipe: \"|/usr/bin/procmail -a x, y\"\nfile: /var/log/x\n";
        assert_eq!(check_source("aliases", text), Vec::<String>::new());
    }

    #[test]
    fn problems_name_file_and_line() {
        let text = "postmaster: root\nno colon here\nempty:\n  \nlist: :include:relative\n\
                    gone: :include:/nonexistent/sluice-list\ncmd: |\n";
        let p = check_source("/etc/aliases", text);
        assert_eq!(p.len(), 5, "{p:?}");
        assert!(
            p[0].starts_with("/etc/aliases, line 2: need name:value"),
            "{p:?}"
        );
        assert!(
            p[1].starts_with("/etc/aliases, line 3: empty: no value"),
            "{p:?}"
        );
        assert!(
            p[2].contains("line 5: list: :include: needs an absolute path"),
            "{p:?}"
        );
        assert!(
            p[3].contains("line 6: gone: /nonexistent/sluice-list:"),
            "{p:?}"
        );
        assert!(p[4].contains("line 7: cmd: empty \"|\" target"), "{p:?}");
    }
}
