//! regexp and pcre tables: `/pattern/flags result`, `!/pattern/`, if/endif.
//!
//! Both Postfix syntaxes compile to the `regex` crate, which has no
//! back-references or look-around: a pattern using them is an error at
//! load time with its line, never a surprise at lookup. Matching is
//! case-insensitive unless the `i` flag turns that off (Postfix's default).
//! Results substitute `$n`, `${n}` and `$$`. Patterns are bounded in size
//! by the regex crate's own limits, so lookups run in linear time.

use regex::{Regex, RegexBuilder};

use crate::text::logical_lines;
use crate::TableProblem;

#[derive(Debug)]
struct Pattern {
    re: Regex,
    negate: bool,
}

#[derive(Debug)]
enum Rule {
    Match {
        pat: Pattern,
        result: String,
    },
    /// Skip to the matching `Endif` (at index `end`) unless the pattern matches.
    If {
        pat: Pattern,
        end: usize,
    },
    Endif,
}

/// A compiled regexp or pcre table.
#[derive(Debug)]
pub(crate) struct RegexpTable {
    rules: Vec<Rule>,
}

impl RegexpTable {
    /// Compiles `text`; `check` sees each result without a `$n` in it.
    pub(crate) fn parse(
        text: &str,
        check: crate::Check<'_>,
    ) -> Result<RegexpTable, (usize, TableProblem)> {
        let mut rules = Vec::new();
        let mut open_ifs: Vec<(usize, usize)> = Vec::new();
        for (line, entry) in logical_lines(text) {
            let lower = entry.to_ascii_lowercase();
            if lower == "endif" {
                let (idx, _) = open_ifs.pop().ok_or((line, TableProblem::IfNesting))?;
                let end = rules.len();
                if let Rule::If { end: e, .. } = &mut rules[idx] {
                    *e = end;
                }
                rules.push(Rule::Endif);
                continue;
            }
            if let Some(rest) = lower
                .strip_prefix("if")
                .filter(|r| r.starts_with(|c: char| c.is_whitespace() || c == '/' || c == '!'))
            {
                let rest = &entry[entry.len() - rest.len()..];
                let (pat, tail) = parse_pattern(rest.trim_start()).map_err(|p| (line, p))?;
                if !tail.trim().is_empty() {
                    return Err((
                        line,
                        TableProblem::PatternSyntax("text after an if pattern".into()),
                    ));
                }
                open_ifs.push((rules.len(), line));
                rules.push(Rule::If {
                    pat,
                    end: usize::MAX,
                });
                continue;
            }
            let (pat, tail) = parse_pattern(&entry).map_err(|p| (line, p))?;
            let result = tail.trim().to_string();
            if result.is_empty() {
                return Err((
                    line,
                    TableProblem::PatternSyntax("no result after the pattern".into()),
                ));
            }
            check_substitution(
                &result,
                if pat.negate {
                    0
                } else {
                    pat.re.captures_len() - 1
                },
            )
            .map_err(|p| (line, p))?;
            if !result.contains('$') {
                check(&result).map_err(|e| (line, TableProblem::BadValue(result.clone(), e)))?;
            }
            rules.push(Rule::Match { pat, result });
        }
        if let Some((_, line)) = open_ifs.pop() {
            return Err((line, TableProblem::IfNesting));
        }
        Ok(RegexpTable { rules })
    }

    pub(crate) fn lookup(&self, key: &str) -> Option<String> {
        let mut i = 0;
        while i < self.rules.len() {
            match &self.rules[i] {
                Rule::Match { pat, result } => {
                    if pat.negate {
                        if !pat.re.is_match(key) {
                            return Some(substitute(result, None));
                        }
                    } else if let Some(caps) = pat.re.captures(key) {
                        return Some(substitute(result, Some(&caps)));
                    }
                }
                Rule::If { pat, end } => {
                    if pat.re.is_match(key) == pat.negate {
                        i = *end;
                    }
                }
                Rule::Endif => {}
            }
            i += 1;
        }
        None
    }
}

/// Parses `[!]<d>pattern<d>flags` and returns the pattern and the text after it.
fn parse_pattern(s: &str) -> Result<(Pattern, &str), TableProblem> {
    let (negate, s) = match s.strip_prefix('!') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let mut chars = s.char_indices();
    let Some((_, delim)) = chars.next() else {
        return Err(TableProblem::PatternSyntax("expected /pattern/".into()));
    };
    if delim.is_alphanumeric() || delim.is_whitespace() || delim == '\\' {
        return Err(TableProblem::PatternSyntax("expected /pattern/".into()));
    }
    let body_start = delim.len_utf8();
    let mut end = None;
    let mut escaped = false;
    for (i, c) in chars {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == delim {
            end = Some(i);
            break;
        }
    }
    let Some(end) = end else {
        return Err(TableProblem::PatternSyntax(
            "missing closing pattern delimiter".into(),
        ));
    };
    let body = &s[body_start..end];
    let rest = &s[end + delim.len_utf8()..];
    let flag_len = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let (flags, tail) = rest.split_at(flag_len);
    let mut b = RegexBuilder::new(body);
    let mut ci = true;
    for f in flags.chars() {
        match f {
            'i' => ci = !ci,
            'm' => {
                b.multi_line(true);
            }
            's' => {
                b.dot_matches_new_line(true);
            }
            'x' => {
                b.ignore_whitespace(true);
            }
            'U' => {
                b.swap_greed(true);
            }
            // pcre's anchoring and extra-strictness flags change nothing we match.
            'A' | 'E' | 'X' => {}
            c => return Err(TableProblem::BadFlag(c)),
        }
    }
    b.case_insensitive(ci)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 22);
    let re = b
        .build()
        .map_err(|e| TableProblem::BadPattern(e.to_string()))?;
    Ok((Pattern { re, negate }, tail))
}

/// Rejects `$n` beyond the pattern's groups, so errors show at load time.
fn check_substitution(result: &str, groups: usize) -> Result<(), TableProblem> {
    let b = result.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            let (n, used) = group_ref(&b[i + 1..]);
            match n {
                Some(n) if n <= groups => i += used,
                None if b.get(i + 1) == Some(&b'$') => i += 1,
                _ => return Err(TableProblem::BadSubstitution(result.to_string())),
            }
        }
        i += 1;
    }
    Ok(())
}

/// `n` or `{n}` after a `$`: the group and how many bytes it took.
fn group_ref(b: &[u8]) -> (Option<usize>, usize) {
    let (digits, braced) = if b.first() == Some(&b'{') {
        (&b[1..], true)
    } else {
        (b, false)
    };
    let n = digits.iter().take_while(|c| c.is_ascii_digit()).count();
    if n == 0 || n > 3 {
        return (None, 0);
    }
    if braced && digits.get(n) != Some(&b'}') {
        return (None, 0);
    }
    let v = std::str::from_utf8(&digits[..n])
        .ok()
        .and_then(|s| s.parse().ok());
    (v, n + if braced { 2 } else { 0 })
}

fn substitute(result: &str, caps: Option<&regex::Captures<'_>>) -> String {
    let b = result.as_bytes();
    let mut out = String::with_capacity(result.len());
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        if b[i] == b'$' {
            out.push_str(&result[last..i]);
            if b.get(i + 1) == Some(&b'$') {
                out.push('$');
                i += 2;
            } else {
                let (n, used) = group_ref(&b[i + 1..]);
                if let (Some(n), Some(c)) = (n, caps) {
                    out.push_str(c.get(n).map_or("", |m| m.as_str()));
                }
                i += 1 + used;
            }
            last = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&result[last..]);
    out
}
