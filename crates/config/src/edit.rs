//! Editing main.cf in place, as `postconf -e` does.
//!
//! The last definition of each assigned name is replaced where it stands,
//! together with its continuation lines; comment lines, blank lines and every
//! other line stay exactly as they were, in order. Names not yet defined are
//! appended at the end. `edit_file` validates the result against the table
//! before anything is written, then writes a temporary file in the same
//! directory, fsyncs it, renames it over the original and fsyncs the
//! directory, so a crash leaves either the old or the new file. Limits: values
//! are written on one line (line breaks and NULs in a value become spaces).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::Path;

use crate::config::Config;
use crate::error::{ConfigError, Diagnostic, SyntaxProblem};
use crate::maincf::{self, Scanned};

/// Makes a value fit on one main.cf line.
fn one_line(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if matches!(c, '\n' | '\r' | '\0') {
                ' '
            } else {
                c
            }
        })
        .collect::<String>()
        .trim()
        .to_string()
}

fn render(name: &str, value: &str) -> String {
    if value.is_empty() {
        format!("{name} =\n")
    } else {
        format!("{name} = {value}\n")
    }
}

/// Splits a command-line `name=value` (as in `sluice config name=value`);
/// white space around the name and the value is dropped.
pub fn parse_assignment(arg: &str) -> Result<(String, String), ConfigError> {
    let Some((name, value)) = arg.split_once('=') else {
        return Err(ConfigError::Syntax {
            file: "command line".into(),
            line: 0,
            problem: SyntaxProblem::MissingEquals,
        });
    };
    let name = name.trim();
    if !maincf::is_valid_name(name) {
        return Err(ConfigError::Syntax {
            file: "command line".into(),
            line: 0,
            problem: SyntaxProblem::BadName(name.to_string()),
        });
    }
    Ok((name.to_string(), value.trim().to_string()))
}

/// Returns `text` with each `(name, value)` set; the last assignment of a
/// name wins. Assignments whose name is not a valid parameter name (see
/// `is_valid_name`) are skipped: `edit_file` refuses them instead.
pub fn edit_main_cf(text: &str, assignments: &[(String, String)]) -> String {
    let mut wanted: BTreeMap<&str, String> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for (name, value) in assignments {
        if !maincf::is_valid_name(name) {
            continue;
        }
        if wanted.insert(name, one_line(value)).is_none() {
            order.push(name);
        }
    }
    // The physical lines of the last definition of each wanted name.
    let mut last: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for item in maincf::scan(text) {
        let Scanned::Line(l) = item else { continue };
        if let Ok(def) = maincf::definition(&l.text) {
            if let Some((name, _)) = wanted.get_key_value(def.name.as_str()) {
                last.insert(name, l.parts);
            }
        }
    }
    let mut replace: BTreeMap<usize, &str> = BTreeMap::new();
    let mut drop: BTreeSet<usize> = BTreeSet::new();
    for (name, parts) in &last {
        if let Some((first, rest)) = parts.split_first() {
            replace.insert(*first, name);
            drop.extend(rest.iter().copied());
        }
    }
    let mut out = String::with_capacity(text.len() + 64);
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        if let Some(name) = replace.get(&i) {
            out.push_str(&render(name, &wanted[name]));
        } else if !drop.contains(&i) {
            out.push_str(raw);
        }
    }
    for name in order {
        if !last.contains_key(name) {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&render(name, &wanted[name]));
        }
    }
    out
}

/// Edits the main.cf at `path` (created if missing), refusing bad names and
/// any result that does not load (bad values, loops), with file and line.
/// Returns the warnings of the edited file (e.g. unknown parameters).
pub fn edit_file(
    path: &Path,
    assignments: &[(String, String)],
    service_names: &[String],
) -> Result<Vec<Diagnostic>, ConfigError> {
    for (name, _) in assignments {
        if !maincf::is_valid_name(name) {
            return Err(ConfigError::Syntax {
                file: path.to_path_buf(),
                line: 0,
                problem: SyntaxProblem::BadName(name.clone()),
            });
        }
    }
    let old = match fs::read(path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(ConfigError::io(path, e)),
    };
    let old_bytes = old.as_deref().unwrap_or_default();
    if let Some(line) = maincf::first_bad_utf8_line(old_bytes) {
        return Err(ConfigError::Syntax {
            file: path.to_path_buf(),
            line,
            problem: SyntaxProblem::NotUtf8,
        });
    }
    let new_text = edit_main_cf(&String::from_utf8_lossy(old_bytes), assignments);
    let loaded = Config::parse(&new_text, path, service_names)?;
    write_atomically(path, new_text.as_bytes(), old.is_some())?;
    Ok(loaded.warnings)
}

/// Replaces `path` with `data` through a synced temporary file and rename.
fn write_atomically(path: &Path, data: &[u8], existed: bool) -> Result<(), ConfigError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "main.cf".to_string());
    let tmp = dir.join(format!(".{file_name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| ConfigError::io(&tmp, e))?;
        if existed {
            if let Ok(meta) = fs::metadata(path) {
                use std::os::unix::fs::MetadataExt;
                // Keep the owner where we may (root); otherwise ours is fine.
                let _ = std::os::unix::fs::chown(&tmp, Some(meta.uid()), Some(meta.gid()));
                fs::set_permissions(&tmp, meta.permissions())
                    .map_err(|e| ConfigError::io(&tmp, e))?;
            }
        }
        f.write_all(data).map_err(|e| ConfigError::io(&tmp, e))?;
        f.sync_all().map_err(|e| ConfigError::io(&tmp, e))?;
        fs::rename(&tmp, path).map_err(|e| ConfigError::io(path, e))?;
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| ConfigError::io(dir, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn table() {
        for (text, set, want) in [
            ("", &[("a", "1")][..], "a = 1\n"),
            ("x = 1", &[("a", "1")], "x = 1\na = 1\n"),
            (
                "# head\na = 1\n\n# mid\nb = 2\n",
                &[("a", "9")],
                "# head\na = 9\n\n# mid\nb = 2\n",
            ),
            // The last definition is replaced, continuation lines go, the
            // comment between them stays.
            (
                "a = 1\na = 2,\n  3\n# keep\n\t4\nb = x\n",
                &[("a", "5")],
                "a = 1\na = 5\n# keep\nb = x\n",
            ),
            ("a = 1\n", &[("a", "2"), ("a", "3")], "a = 3\n"),
            ("a = 1\n", &[("bad name", "2")], "a = 1\n"),
            (
                "a = 1\n",
                &[("b", "multi\nline\0")],
                "a = 1\nb = multi line\n",
            ),
            ("a = 1\n", &[("a", "")], "a =\n"),
            ("  orphan\n#c\n", &[("a", "1")], "  orphan\n#c\na = 1\n"),
            ("a=1\r\nb=2\r\n", &[("a", "3")], "a = 3\nb=2\r\n"),
        ] {
            assert_eq!(edit_main_cf(text, &a(set)), want, "{text:?} {set:?}");
        }
    }

    #[test]
    fn assignments() {
        assert_eq!(
            parse_assignment(" relayhost = [mx]:25 ").unwrap(),
            ("relayhost".to_string(), "[mx]:25".to_string())
        );
        assert_eq!(
            parse_assignment("a=").unwrap(),
            ("a".to_string(), String::new())
        );
        assert!(parse_assignment("relayhost").is_err());
        assert!(parse_assignment("=x").is_err());
        assert!(parse_assignment("a b=x").is_err());
    }

    #[test]
    fn file_is_validated_and_replaced() {
        let dir = std::env::temp_dir().join(format!("sluice-edit-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("main.cf");
        fs::write(&path, "# my comment\nmessage_size_limit = 1000\n").unwrap();
        let err = edit_file(&path, &a(&[("message_size_limit", "10M0")]), &[]).unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "# my comment\nmessage_size_limit = 1000\n"
        );
        assert!(edit_file(&path, &a(&[("a b", "1")]), &[]).is_err());
        let warnings = edit_file(
            &path,
            &a(&[("message_size_limit", "20m"), ("bogus", "1")]),
            &[],
        )
        .unwrap();
        assert_eq!(warnings.len(), 1);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "# my comment\nmessage_size_limit = 20m\nbogus = 1\n"
        );
        let leftovers: Vec<_> = fs::read_dir(&dir).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temporary file left behind");
        let fresh = dir.join("sub.cf");
        edit_file(&fresh, &a(&[("myorigin", "example.com")]), &[]).unwrap();
        assert_eq!(
            fs::read_to_string(&fresh).unwrap(),
            "myorigin = example.com\n"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
