//! Source text: logical lines (comments, continuation) and inline items.

use crate::TableProblem;

/// Logical lines with the number of the line each starts on: blank lines
/// and lines whose first non-blank is `#` are skipped, and a line that
/// starts with white space continues the previous one, as in postmap(1).
pub fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            if let Some(last) = out.last_mut() {
                last.1.push(' ');
                last.1.push_str(trimmed);
                continue;
            }
        }
        out.push((i + 1, trimmed.to_string()));
    }
    out
}

/// Splits `a = b, c = d` at commas and white space outside braces, and
/// removes one level of braces around an item: `{ k = v, w }` is one item.
pub(crate) fn split_inline(text: &str) -> Result<Vec<String>, TableProblem> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '{' => {
                if depth > 0 {
                    cur.push(c);
                }
                depth += 1;
            }
            '}' => {
                depth = depth.checked_sub(1).ok_or(TableProblem::UnbalancedBraces)?;
                if depth > 0 {
                    cur.push(c);
                }
            }
            ',' if depth == 0 => push_item(&mut items, &mut cur),
            c => cur.push(c),
        }
    }
    if depth != 0 {
        return Err(TableProblem::UnbalancedBraces);
    }
    push_item(&mut items, &mut cur);
    Ok(items)
}

fn push_item(items: &mut Vec<String>, cur: &mut String) {
    let t = cur.trim();
    if !t.is_empty() {
        items.push(t.to_string());
    }
    cur.clear();
}

/// Splits an alias value at commas outside double quotes, trims each item
/// and removes the quotes around it.
pub fn split_alias_value(value: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in value.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ',' if !quoted => items.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    items.push(cur);
    items
        .into_iter()
        .map(|i| {
            let t = i.trim();
            t.strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(t)
                .trim()
                .to_string()
        })
        .filter(|i| !i.is_empty())
        .collect()
}
