//! The Postfix delivery log line for recipients qmgr settles itself
//! (deferred or bounced before any delivery attempt, discarded).

use sched::Time;

use crate::dispatch::InDelivery;

/// Splits "4.4.1 text" into the status code and the text, with a default code.
pub(crate) fn split_status(reason: &str, default: &str) -> (String, String) {
    let mut it = reason.splitn(2, ' ');
    let first = it.next().unwrap_or("");
    let looks = first.split('.').count() == 3
        && first
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if looks {
        (first.to_string(), it.next().unwrap_or("").to_string())
    } else {
        (default.to_string(), reason.to_string())
    }
}

/// `ID: to=<…>, relay=…, delay=…, delays=…, dsn=…, status=word (text)`.
pub(crate) fn log_rcpt(
    now: Time,
    m: &InDelivery,
    i: u32,
    relay: &str,
    status: &str,
    word: &str,
    text: &str,
) -> String {
    let rcpt = m.head.envelope.recipients.get(i as usize);
    let addr = rcpt.map(|r| r.address.as_str()).unwrap_or("");
    let orig = mail::orig_to(addr, rcpt.and_then(|r| r.orcpt.as_deref()));
    let now_us = now.0.saturating_mul(1000);
    let delay = now_us.saturating_sub(m.head.envelope.arrival.as_micros()) as f64 / 1e6;
    format!(
        "{}: to=<{addr}>{orig}, relay={relay}, delay={}, delays={}/0/0/0, dsn={status}, status={word} ({text})",
        m.id,
        fmt_secs(delay),
        fmt_secs(delay)
    )
}

/// Seconds as Postfix logs delays: two decimals below 10 s, one below 100.
fn fmt_secs(s: f64) -> String {
    if s < 10.0 {
        format!("{}", (s * 100.0).round() / 100.0)
    } else if s < 100.0 {
        format!("{s:.1}")
    } else {
        format!("{s:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_split_only_when_it_looks_like_one() {
        assert_eq!(
            split_status("4.4.1 connect to x: refused", "4.0.0"),
            ("4.4.1".into(), "connect to x: refused".into())
        );
        assert_eq!(
            split_status("no route", "5.4.1"),
            ("5.4.1".into(), "no route".into())
        );
        assert_eq!(
            split_status("4.x.1 odd", "4.3.0"),
            ("4.3.0".into(), "4.x.1 odd".into())
        );
    }

    #[test]
    fn delays_are_rounded_as_postfix_does() {
        assert_eq!(fmt_secs(0.123), "0.12");
        assert_eq!(fmt_secs(12.34), "12.3");
        assert_eq!(fmt_secs(123.4), "123");
    }
}
