//! access(5) actions: what a check_*_access table may answer.
//!
//! `TENANT name` and `JOB name` are Sluice's: non-terminal, like Postfix's
//! PREPEND, they name the message's traffic shaping tenant or job and the
//! list goes on. A name is one word of at most 64 bytes without control
//! characters; anything else is a bad action (451 4.3.5, as for a typo).

/// A parsed access table value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessAction {
    /// `OK`, `PERMIT`, or an all-digit value (Postfix treats it as OK).
    Ok,
    /// `DUNNO`: as if not found, stop looking up further keys.
    Dunno,
    /// `REJECT [text]`.
    Reject(Option<String>),
    /// `DEFER [text]`.
    Defer(Option<String>),
    /// `HOLD [text]`.
    Hold,
    /// `DISCARD [text]`.
    Discard,
    /// `TENANT name`: the message's tenant id (non-terminal).
    Tenant(String),
    /// `JOB name`: the message's job id (non-terminal).
    Job(String),
    /// `4NN text` or `5NN text`, optionally with an enhanced code of
    /// the same class (`x.7.1` when there is none).
    Code(mail::Refusal),
    /// Anything else: a configuration error.
    Bad(String),
}

/// Parses an access table value.
pub fn parse_action(value: &str) -> AccessAction {
    let v = value.trim();
    if let Some(r) = mail::Refusal::parse(v, (7, 1)) {
        return AccessAction::Code(r);
    }
    let (word, rest) = match v.split_once(char::is_whitespace) {
        Some((w, r)) => (w, Some(r.trim().to_string()).filter(|r| !r.is_empty())),
        None => (v, None),
    };
    match word.to_ascii_uppercase().as_str() {
        "OK" | "PERMIT" => AccessAction::Ok,
        "DUNNO" => AccessAction::Dunno,
        "REJECT" => AccessAction::Reject(rest),
        "DEFER" | "DEFER_IF_PERMIT" | "DEFER_IF_REJECT" => AccessAction::Defer(rest),
        "HOLD" => AccessAction::Hold,
        "DISCARD" => AccessAction::Discard,
        "TENANT" | "JOB" => match rest.as_deref().filter(|r| !r.contains(char::is_whitespace)) {
            Some(name) if mail::shaping_id(name).is_some() => {
                if word.eq_ignore_ascii_case("TENANT") {
                    AccessAction::Tenant(name.to_string())
                } else {
                    AccessAction::Job(name.to_string())
                }
            }
            _ => AccessAction::Bad(v.to_string()),
        },
        w if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) => AccessAction::Ok,
        _ => AccessAction::Bad(v.to_string()),
    }
}
