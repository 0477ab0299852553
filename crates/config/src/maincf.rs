//! Postfix-syntax line reading shared by main.cf, master.cf and the editor.
//!
//! A logical line starts with a non-blank character; following lines that
//! start with white space continue it. Blank lines and lines whose first
//! non-blank character is `#` are skipped and do not end a logical line
//! (Postfix's `readllines`). Continuation text is joined with one space after
//! its leading white space is removed. The scanner never fails: it records
//! where each logical line came from (so the editor can replace one in place)
//! and leaves judging to the callers. A continuation line with no logical
//! line to continue is reported, as Postfix warns about it.

use crate::error::SyntaxProblem;

/// One logical line and the physical lines (0-based indices) it was made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Logical {
    /// 1-based number of the first physical line, for messages.
    pub line: usize,
    /// Indices of every physical line that belongs to it, in order.
    pub parts: Vec<usize>,
    /// The joined text.
    pub text: String,
}

/// What the scanner saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Scanned {
    /// A logical line.
    Line(Logical),
    /// A line starting with white space before any logical line (1-based).
    Orphan(usize),
}

/// A `name = value` definition in main.cf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Definition {
    /// Parameter name.
    pub name: String,
    /// Value with surrounding white space removed.
    pub value: String,
}

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// Splits text into logical lines.
pub(crate) fn scan(text: &str) -> Vec<Scanned> {
    let mut out = Vec::new();
    let mut cur: Option<Logical> = None;
    for (i, raw) in text.split('\n').enumerate() {
        if is_blank_or_comment(raw) {
            continue;
        }
        if raw.starts_with(|c: char| c.is_whitespace()) {
            match cur.as_mut() {
                Some(l) => {
                    l.parts.push(i);
                    l.text.push(' ');
                    l.text.push_str(raw.trim());
                }
                None => out.push(Scanned::Orphan(i + 1)),
            }
            continue;
        }
        if let Some(l) = cur.take() {
            out.push(Scanned::Line(l));
        }
        cur = Some(Logical {
            line: i + 1,
            parts: vec![i],
            text: raw.trim_end().to_string(),
        });
    }
    if let Some(l) = cur {
        out.push(Scanned::Line(l));
    }
    out
}

/// Whether `name` can be a parameter name: letters, digits, `_`, `-`, `.`.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Parses a logical line of main.cf as `name = value`.
pub(crate) fn definition(text: &str) -> Result<Definition, SyntaxProblem> {
    if text.contains('\0') {
        return Err(SyntaxProblem::Nul);
    }
    let Some((name, value)) = text.split_once('=') else {
        return Err(SyntaxProblem::MissingEquals);
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(SyntaxProblem::MissingName);
    }
    if name.contains(char::is_whitespace) {
        return Err(SyntaxProblem::MissingEquals);
    }
    if !is_valid_name(name) {
        return Err(SyntaxProblem::BadName(name.to_string()));
    }
    Ok(Definition {
        name: name.to_string(),
        value: value.trim().to_string(),
    })
}

/// The 1-based line where `bytes` stops being valid UTF-8, if it does.
pub(crate) fn first_bad_utf8_line(bytes: &[u8]) -> Option<usize> {
    match std::str::from_utf8(bytes) {
        Ok(_) => None,
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            Some(good.iter().filter(|&&b| b == b'\n').count() + 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<(usize, String)> {
        scan(text)
            .into_iter()
            .filter_map(|s| match s {
                Scanned::Line(l) => Some((l.line, l.text)),
                Scanned::Orphan(_) => None,
            })
            .collect()
    }

    #[test]
    fn logical_lines() {
        let text = "# c\na = 1\n  , 2\n\n# inside\n\t3\nb=x\r\n   \n  #\nc =\n";
        assert_eq!(
            lines(text),
            [
                (2, "a = 1 , 2 3".into()),
                (7, "b=x".into()),
                (10, "c =".into())
            ]
        );
        assert_eq!(
            scan("  orphan\na=b"),
            [
                Scanned::Orphan(1),
                Scanned::Line(Logical {
                    line: 2,
                    parts: vec![1],
                    text: "a=b".into()
                })
            ]
        );
        assert!(scan("").is_empty());
        assert!(scan("# only\n  # comments\n\n").is_empty());
    }

    #[test]
    fn definitions() {
        let ok = |t: &str| definition(t).map(|d| (d.name, d.value));
        assert_eq!(ok("a = b = c"), Ok(("a".into(), "b = c".into())));
        assert_eq!(ok("a="), Ok(("a".into(), "".into())));
        assert_eq!(ok("a"), Err(SyntaxProblem::MissingEquals));
        assert_eq!(ok("a b = c"), Err(SyntaxProblem::MissingEquals));
        assert_eq!(ok("= c"), Err(SyntaxProblem::MissingName));
        assert_eq!(ok("a\0 = c"), Err(SyntaxProblem::Nul));
        assert_eq!(ok("a = c\0"), Err(SyntaxProblem::Nul));
        assert_eq!(ok("a/b = c"), Err(SyntaxProblem::BadName("a/b".into())));
    }

    #[test]
    fn utf8_line() {
        assert_eq!(first_bad_utf8_line(b"a=b\nc=\xff\n"), Some(2));
        assert_eq!(first_bad_utf8_line("a=é".as_bytes()), None);
    }
}
