//! `transport:nexthop` values as main.cf parameters and transport_maps
//! give them: split, and checked when read (an `error:` next hop must be
//! a failure status).

/// The status the `error` transport bounces with when its next hop gives
/// none (Postfix's error(8): 5.0.0).
pub(crate) const ERROR_DEFAULT: mail::StatusCode = mail::StatusCode::known(5, 0, 0);

/// The status of an `error` transport's next hop, `5.1.1 text` or `text`:
/// a failure (4.x.x or 5.x.x). Settings::load refuses a main.cf parameter
/// or a transport_maps entry for which this fails, with its file and line.
pub fn error_status(nexthop: &str) -> Result<mail::Status, String> {
    let s = mail::Status::from_reason(nexthop, ERROR_DEFAULT)
        .map_err(|e| format!("error transport: {e}"))?;
    if s.is_success() {
        return Err("error transport: the status must be 4.x.x or 5.x.x".into());
    }
    Ok(s)
}

/// A transport_maps value or a `*_transport` parameter, as read: an
/// `error:` next hop must be a status [`error_status`] takes.
pub fn check_transport(value: &str) -> Result<(), String> {
    match split_transport(value) {
        ("error", nexthop) => error_status(nexthop).map(drop),
        _ => Ok(()),
    }
}

/// `transport:nexthop` → (transport, nexthop); either may be empty.
pub fn split_transport(v: &str) -> (&str, &str) {
    match v.split_once(':') {
        Some((t, n)) => (t.trim(), n.trim()),
        None => (v.trim(), ""),
    }
}
