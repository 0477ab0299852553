//! The results of header_checks and body_checks tables (header_checks(5)).
//!
//! A result is an action word, matched case-insensitively, then optional
//! text: `REJECT [text]`, `DISCARD [text]`, `HOLD [text]`, `WARN [text]`,
//! `INFO [text]`, `IGNORE`, `DUNNO`, `OK`, `PREPEND text`, `REPLACE text`,
//! and the ones cleanup does not carry out (`FILTER`, `REDIRECT`, `BCC`,
//! `PASS`, `STRIP`), which it logs as unsupported. [`check_header_action`]
//! and [`check_body_action`] refuse, as a table is read, a result that
//! could never work (an unknown word, PREPEND without text, a header
//! PREPEND or REPLACE that is not `Name: value`), so that `sluice check`
//! and cleanup's start name its file and line; Postfix only warns when a
//! message meets it. A result made at lookup from `$n` is parsed then.

/// What a content check's result asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Refuse the message; the text may start with a 4.x.x or 5.x.x code.
    Reject(String),
    /// Accept the message and deliver it nowhere.
    Discard(String),
    /// Queue the message on hold.
    Hold(String),
    /// Log the line, with the text.
    Warn(String),
    /// Log the line, with the text.
    Info(String),
    /// Delete the line.
    Ignore,
    /// Nothing (DUNNO or OK).
    Dunno,
    /// Insert this line before the current one.
    Prepend(String),
    /// Put this line in the current one's place.
    Replace(String),
    /// An action Postfix has and Sluice does not carry out: its word
    /// (upper case) and text.
    Unsupported(String, String),
}

/// The actions Postfix knows that cleanup only logs.
const UNSUPPORTED: &[&str] = &["FILTER", "REDIRECT", "BCC", "PASS", "STRIP"];

/// Parses a table result.
pub fn parse_action(value: &str) -> Result<Action, String> {
    let value = value.trim();
    let (word, text) = match value.find([' ', '\t']) {
        Some(i) => (&value[..i], value[i..].trim()),
        None => (value, ""),
    };
    let word = word.to_ascii_uppercase();
    let text = text.to_string();
    let needs_text = |a: fn(String) -> Action| {
        if text.is_empty() {
            Err(format!("{word} action without text"))
        } else {
            Ok(a(text.clone()))
        }
    };
    match word.as_str() {
        "REJECT" => Ok(Action::Reject(text)),
        "DISCARD" => Ok(Action::Discard(text)),
        "HOLD" => Ok(Action::Hold(text)),
        "WARN" => Ok(Action::Warn(text)),
        "INFO" => Ok(Action::Info(text)),
        "IGNORE" => Ok(Action::Ignore),
        "DUNNO" | "OK" => Ok(Action::Dunno),
        "PREPEND" => needs_text(Action::Prepend),
        "REPLACE" => needs_text(Action::Replace),
        w if UNSUPPORTED.contains(&w) => Ok(Action::Unsupported(word.clone(), text)),
        _ => Err(format!("unknown action \"{word}\"")),
    }
}

/// Whether `text` is a header line, `Name: value` (Postfix's is_header).
pub fn is_header(text: &str) -> bool {
    let name = text.split(':').next().unwrap_or("");
    text.len() > name.len()
        && !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
}

/// A [`crate::Check`] for header_checks results.
pub fn check_header_action(value: &str) -> Result<(), String> {
    match parse_action(value)? {
        Action::Prepend(t) | Action::Replace(t) if !is_header(&t) => Err(format!(
            "bad header text \"{t}\": need \"headername: headervalue\""
        )),
        _ => Ok(()),
    }
}

/// A [`crate::Check`] for body_checks results.
pub fn check_body_action(value: &str) -> Result<(), String> {
    parse_action(value).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_parse_case_insensitively_with_their_text() {
        let table = [
            ("REJECT", Ok(Action::Reject(String::new()))),
            (
                "reject  4.7.1 try later ",
                Ok(Action::Reject("4.7.1 try later".into())),
            ),
            ("Discard spam", Ok(Action::Discard("spam".into()))),
            ("HOLD\tlook", Ok(Action::Hold("look".into()))),
            ("warn", Ok(Action::Warn(String::new()))),
            ("INFO x y", Ok(Action::Info("x y".into()))),
            ("ignore", Ok(Action::Ignore)),
            ("IGNORE whatever", Ok(Action::Ignore)),
            ("DUNNO", Ok(Action::Dunno)),
            ("ok", Ok(Action::Dunno)),
            (
                "PREPEND X-Seen: yes",
                Ok(Action::Prepend("X-Seen: yes".into())),
            ),
            (
                "replace Subject: [x]",
                Ok(Action::Replace("Subject: [x]".into())),
            ),
            (
                "redirect a@b",
                Ok(Action::Unsupported("REDIRECT".into(), "a@b".into())),
            ),
            (
                "FILTER smtp:x",
                Ok(Action::Unsupported("FILTER".into(), "smtp:x".into())),
            ),
            ("PREPEND", Err("PREPEND action without text".to_string())),
            ("REPLACE   ", Err("REPLACE action without text".to_string())),
            ("FROB x", Err("unknown action \"FROB\"".to_string())),
            ("", Err("unknown action \"\"".to_string())),
            ("REJECTED", Err("unknown action \"REJECTED\"".to_string())),
        ];
        for (value, want) in table {
            assert_eq!(parse_action(value), want, "{value:?}");
        }
    }

    #[test]
    fn header_texts_must_be_headers() {
        assert!(check_header_action("PREPEND X-A: b").is_ok());
        assert!(check_header_action("REPLACE X-A:").is_ok());
        assert!(check_header_action("PREPEND not a header").is_err());
        assert!(check_header_action("REPLACE : empty name").is_err());
        assert!(check_header_action("REPLACE Bad Name: x").is_err());
        // Body lines are any text.
        assert!(check_body_action("REPLACE not a header").is_ok());
        assert!(check_body_action("PREPEND").is_err());
        assert!(check_header_action("REJECT \u{0}\r\n").is_ok());
    }
}
