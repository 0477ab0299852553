//! `$name` expansion of parameter values, as Postfix's `mac_expand`.
//!
//! Forms: `$name`, `${name}`, `$(name)`; `${name?text}` (text when name is
//! non-empty), `${name:text}` (text when name is empty), Postfix 3's
//! `${name?{text1}:{text2}}`; `$$` is a literal `$`, and a `$` followed by
//! anything else is kept as is. Undefined names expand to nothing, as in
//! Postfix. Loops are reported with the chain of names (`a -> b -> a`).
//! Limits keep hostile values harmless: nesting depth, output length and a
//! work budget (so `a = $b$b$b...`, `b = $c$c$c...` cannot take hours even
//! when every value is empty). Nothing here panics.

use crate::error::ExpandProblem;

/// Deepest nesting of references and `${...}` groups.
const MAX_DEPTH: usize = 100;
/// Longest expanded text.
const MAX_LEN: usize = 1 << 20;
/// Work units (characters scanned plus references) for one expansion.
const MAX_STEPS: usize = 4 << 20;

/// What a name stands for, as the configuration knows it.
pub(crate) enum Source<'a> {
    /// Text to expand further.
    Text(&'a str),
    /// Text to use literally (parameters expanded later by their programs).
    Literal(&'a str),
    /// The system host name: qualified with `$mydomain` (when set) or
    /// `localdomain` if it has no dot.
    Hostname(&'a str),
    /// `$myhostname` minus its first label, or `localdomain`.
    Domain,
}

/// Expands values using a lookup function; one per top-level expansion.
pub(crate) struct Expander<'a> {
    lookup: &'a dyn Fn(&str) -> Option<Source<'a>>,
    stack: Vec<String>,
    steps: usize,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Index of the bracket that closes a group whose opener was just consumed.
fn find_close(text: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            if depth == 0 {
                return Some(i);
            }
            depth -= 1;
        }
    }
    None
}

impl<'a> Expander<'a> {
    /// A fresh expander over `lookup`.
    pub(crate) fn new(lookup: &'a dyn Fn(&str) -> Option<Source<'a>>) -> Expander<'a> {
        Expander {
            lookup,
            stack: Vec::new(),
            steps: 0,
        }
    }

    /// The expanded value of parameter `name` (empty if undefined).
    pub(crate) fn param(&mut self, name: &str) -> Result<String, ExpandProblem> {
        self.param_at(name, 0)
    }

    /// Expands free text that is not itself a parameter's value.
    pub(crate) fn text(&mut self, text: &str) -> Result<String, ExpandProblem> {
        let mut out = String::new();
        self.expand(text, 0, &mut out)?;
        Ok(out)
    }

    fn charge(&mut self, n: usize) -> Result<(), ExpandProblem> {
        self.steps = self.steps.saturating_add(n).saturating_add(1);
        if self.steps > MAX_STEPS {
            return Err(ExpandProblem::TooLong);
        }
        Ok(())
    }

    fn param_at(&mut self, name: &str, depth: usize) -> Result<String, ExpandProblem> {
        if depth > MAX_DEPTH {
            return Err(ExpandProblem::TooDeep);
        }
        if let Some(i) = self.stack.iter().position(|n| n == name) {
            let mut chain = self.stack[i..].to_vec();
            chain.push(name.to_string());
            return Err(ExpandProblem::Loop(chain));
        }
        self.charge(name.len())?;
        self.stack.push(name.to_string());
        let result = self.resolve(name, depth);
        self.stack.pop();
        result
    }

    fn resolve(&mut self, name: &str, depth: usize) -> Result<String, ExpandProblem> {
        let lookup = self.lookup;
        match lookup(name) {
            None => Ok(String::new()),
            Some(Source::Literal(t)) => Ok(t.to_string()),
            Some(Source::Text(t)) => {
                let mut out = String::new();
                self.expand(t, depth + 1, &mut out)?;
                Ok(out)
            }
            Some(Source::Hostname(h)) if h.contains('.') => Ok(h.to_string()),
            Some(Source::Hostname(h)) => {
                let domain = match lookup("mydomain") {
                    Some(Source::Text(_) | Source::Literal(_)) => {
                        self.param_at("mydomain", depth + 1)?
                    }
                    _ => "localdomain".to_string(),
                };
                Ok(format!("{h}.{domain}"))
            }
            Some(Source::Domain) => {
                let host = self.param_at("myhostname", depth + 1)?;
                // Postfix keeps "localdomain" rather than a bare top-level domain.
                Ok(match host.split_once('.') {
                    Some((_, rest)) if rest.contains('.') => rest.to_string(),
                    _ => "localdomain".to_string(),
                })
            }
        }
    }

    fn expand(&mut self, text: &str, depth: usize, out: &mut String) -> Result<(), ExpandProblem> {
        if depth > MAX_DEPTH {
            return Err(ExpandProblem::TooDeep);
        }
        let mut rest = text;
        while let Some(pos) = rest.find('$') {
            self.charge(pos)?;
            out.push_str(&rest[..pos]);
            let after = &rest[pos + 1..];
            match after.chars().next() {
                Some('$') => {
                    out.push('$');
                    rest = &after[1..];
                }
                Some(open @ ('{' | '(')) => {
                    let close = if open == '{' { '}' } else { ')' };
                    let inner_all = &after[1..];
                    let end =
                        find_close(inner_all, open, close).ok_or(ExpandProblem::Unterminated)?;
                    self.charge(end)?;
                    self.reference(&inner_all[..end], depth, out)?;
                    rest = &inner_all[end + 1..];
                }
                Some(c) if is_name_char(c) => {
                    let n = after.find(|c| !is_name_char(c)).unwrap_or(after.len());
                    let value = self.param_at(&after[..n], depth + 1)?;
                    out.push_str(&value);
                    rest = &after[n..];
                }
                _ => {
                    out.push('$');
                    rest = after;
                }
            }
            if out.len() > MAX_LEN {
                return Err(ExpandProblem::TooLong);
            }
        }
        self.charge(rest.len())?;
        out.push_str(rest);
        if out.len() > MAX_LEN {
            return Err(ExpandProblem::TooLong);
        }
        Ok(())
    }

    /// Handles the inside of `${...}`.
    fn reference(
        &mut self,
        inner: &str,
        depth: usize,
        out: &mut String,
    ) -> Result<(), ExpandProblem> {
        let bad = || ExpandProblem::BadReference(inner.to_string());
        let n = inner.find(|c| !is_name_char(c)).unwrap_or(inner.len());
        let (name, op) = inner.split_at(n);
        if name.is_empty() {
            return Err(bad());
        }
        let value = self.param_at(name, depth + 1)?;
        let mut chars = op.chars();
        let (when_set, when_empty) = match chars.next() {
            None => {
                out.push_str(&value);
                return Ok(());
            }
            Some('?') => {
                let arg = chars.as_str();
                match arg.strip_prefix('{') {
                    // Postfix 3: ${name?{text1}:{text2}}
                    Some(body) => {
                        let end = find_close(body, '{', '}').ok_or_else(bad)?;
                        let (yes, tail) = (&body[..end], &body[end + 1..]);
                        let no = match tail {
                            "" => "",
                            _ => {
                                let body = tail.strip_prefix(":{").ok_or_else(bad)?;
                                match find_close(body, '{', '}') {
                                    Some(e) if e + 1 == body.len() => &body[..e],
                                    _ => return Err(bad()),
                                }
                            }
                        };
                        (yes, no)
                    }
                    None => (arg, ""),
                }
            }
            Some(':') => ("", chars.as_str()),
            Some(_) => return Err(bad()),
        };
        let chosen = if value.is_empty() {
            when_empty
        } else {
            when_set
        };
        self.expand(chosen, depth + 1, out)
    }
}

/// Expands `text` as a program expands a value per message or user
/// (Postfix's local_expand for `luser_relay`): the forms of this module,
/// each name looked up in `vars` only and its value used as it is; a name
/// `vars` does not know expands to nothing, as in Postfix.
pub fn expand_vars<'a>(
    text: &str,
    vars: &'a dyn Fn(&str) -> Option<&'a str>,
) -> Result<String, ExpandProblem> {
    let lookup = |n: &str| vars(n).map(Source::Literal);
    Expander::new(&lookup).text(text)
}

/// Names that `text` refers to with `$name`, `${name...}` or `$(name...)`,
/// including those inside conditional text. Never fails: malformed
/// references are simply not reported.
pub fn references(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        let after = &rest[pos + 1..];
        let (skip, body) = match after.chars().next() {
            Some('$') => (1, ""),
            Some('{' | '(') => (1, &after[1..]),
            _ => (0, after),
        };
        let n = body.find(|c| !is_name_char(c)).unwrap_or(body.len());
        if n > 0 {
            names.push(body[..n].to_string());
        }
        rest = &after[skip..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn run(vars: &[(&str, &str)], text: &str) -> Result<String, ExpandProblem> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |n: &str| map.get(n).map(|v| Source::Text(v));
        Expander::new(&lookup).text(text)
    }

    #[test]
    fn forms() {
        let vars = [("a", "A"), ("b", "$a-B"), ("e", ""), ("x", "${a}x")];
        for (text, want) in [
            ("$a", "A"),
            ("${a}", "A"),
            ("$(a)", "A"),
            ("$a.$b", "A.A-B"),
            ("$$a", "$a"),
            ("$$$a", "$A"),
            ("cost $-5", "cost $-5"),
            ("$5", ""),
            ("end$", "end$"),
            ("$undefined!", "!"),
            ("${a?yes}", "yes"),
            ("${e?yes}", ""),
            ("${a:no}", ""),
            ("${e:no}", "no"),
            ("${a?${b}}", "A-B"),
            ("${e:${x?${b}}}", "A-B"),
            ("${a?{set}:{unset}}", "set"),
            ("${e?{set}:{unset}}", "unset"),
            ("${a?{set}}", "set"),
            ("$(a?(x))", "(x)"),
            ("${x}", "Ax"),
        ] {
            assert_eq!(run(&vars, text).as_deref(), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn errors() {
        let vars = [("a", "$b"), ("b", "${c}"), ("c", "$a"), ("s", "$s")];
        assert_eq!(
            run(&vars, "$a"),
            Err(ExpandProblem::Loop(vec![
                "a".into(),
                "b".into(),
                "c".into(),
                "a".into()
            ]))
        );
        assert_eq!(
            run(&vars, "x$s"),
            Err(ExpandProblem::Loop(vec!["s".into(), "s".into()]))
        );
        assert_eq!(run(&[], "${a"), Err(ExpandProblem::Unterminated));
        assert_eq!(run(&[], "$(a"), Err(ExpandProblem::Unterminated));
        assert!(matches!(
            run(&[], "${}"),
            Err(ExpandProblem::BadReference(_))
        ));
        assert!(matches!(
            run(&[], "${a!b}"),
            Err(ExpandProblem::BadReference(_))
        ));
        assert!(matches!(
            run(&[("a", "1")], "${a?{x}junk}"),
            Err(ExpandProblem::BadReference(_))
        ));
    }

    #[test]
    fn hostile_sizes() {
        // Deep chain of distinct names.
        let names: Vec<String> = (0..500).map(|i| format!("v{i}")).collect();
        let values: Vec<String> = (0..500).map(|i| format!("$v{}", i + 1)).collect();
        let vars: Vec<(&str, &str)> = names
            .iter()
            .zip(&values)
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(run(&vars, "$v0"), Err(ExpandProblem::TooDeep));
        // Exponential growth.
        let names: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
        let values: Vec<String> = (0..40).map(|i| format!("$w{0}$w{0}", i + 1)).collect();
        let mut vars: Vec<(&str, &str)> = names
            .iter()
            .zip(&values)
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        vars.push(("w40", "x"));
        assert_eq!(run(&vars, "$w0"), Err(ExpandProblem::TooLong));
        // Exponential work with empty output.
        vars.pop();
        assert_eq!(run(&vars, "$w0"), Err(ExpandProblem::TooLong));
        // Deeply nested conditionals in one text.
        let nested = "${a?".repeat(100_000) + &"}".repeat(100_000);
        let r = run(&[("a", "1")], &nested);
        assert!(
            matches!(r, Err(ExpandProblem::TooDeep | ExpandProblem::TooLong)),
            "{r:?}"
        );
        let unterminated = "${a?".repeat(100_000);
        assert_eq!(
            run(&[("a", "1")], &unterminated),
            Err(ExpandProblem::Unterminated)
        );
    }

    #[test]
    fn finds_references() {
        assert_eq!(
            references("$a ${b} $(c) $$d ${e?$f} ${g:{$h}}"),
            ["a", "b", "c", "e", "f", "g", "h"]
        );
        assert!(references("$ $$ ${").is_empty());
    }
}
