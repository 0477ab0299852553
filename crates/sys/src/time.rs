//! Local time for log lines (`Nov 21 23:43:12`), as syslog and Postfix write it.
//!
//! localtime_r honours TZ and /etc/localtime, which std cannot do.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The broken-down local time of `t`, or `None` if libc cannot say.
fn local(t: SystemTime) -> Option<libc::tm> {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as libc::time_t;
    // SAFETY: an all-zero tm is a valid value for localtime_r to overwrite,
    // and both pointers are to live locals.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    ok.then_some(tm)
}

/// Formats a time as syslog's `Mmm dd hh:mm:ss` in local time.
pub fn syslog_stamp(t: SystemTime) -> String {
    let Some(tm) = local(t) else {
        return "Jan  1 00:00:00".to_string();
    };
    let month = MONTHS[tm.tm_mon.clamp(0, 11) as usize];
    format!(
        "{month} {:>2} {:02}:{:02}:{:02}",
        tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec
    )
}

/// Formats a time as mailq's arrival column: `Sat Nov 21 23:43:12`, local time.
pub fn mailq_stamp(t: SystemTime) -> String {
    let Some(tm) = local(t) else {
        return "Thu Jan  1 00:00:00".to_string();
    };
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02}",
        DAYS[tm.tm_wday.clamp(0, 6) as usize],
        MONTHS[tm.tm_mon.clamp(0, 11) as usize],
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// Formats a time as asctime(3) without the newline, in local time, for
/// the mbox `From ` line: `Sun Nov 22 01:33:45 2026`.
pub fn asctime_stamp(t: SystemTime) -> String {
    let Some(tm) = local(t) else {
        return "Thu Jan  1 00:00:00 1970".to_string();
    };
    format!("{} {}", mailq_stamp(t), tm.tm_year + 1900)
}

const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// Formats a time for Date: and Received: headers (RFC 5322), in local time:
/// `Sat, 21 Nov 2026 23:43:12 +0000 (UTC)`.
pub fn rfc5322_date(t: SystemTime) -> String {
    let Some(tm) = local(t) else {
        return "Thu, 1 Jan 1970 00:00:00 +0000".to_string();
    };
    let zone = if tm.tm_zone.is_null() {
        String::new()
    } else {
        // SAFETY: tm_zone points into libc's static zone names, valid until
        // the next tzset, and is copied out at once.
        unsafe { std::ffi::CStr::from_ptr(tm.tm_zone) }
            .to_string_lossy()
            .into_owned()
    };
    let off = tm.tm_gmtoff / 60;
    let sign = if off < 0 { '-' } else { '+' };
    let off = off.abs();
    let mut s = format!(
        "{}, {} {} {} {:02}:{:02}:{:02} {sign}{:02}{:02}",
        DAYS[tm.tm_wday.clamp(0, 6) as usize],
        tm.tm_mday,
        MONTHS[tm.tm_mon.clamp(0, 11) as usize],
        tm.tm_year + 1900,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        off / 60,
        off % 60
    );
    if !zone.is_empty()
        && zone
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-')
    {
        s.push_str(&format!(" ({zone})"));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc5322_date_has_the_right_shape() {
        let s = rfc5322_date(UNIX_EPOCH + std::time::Duration::from_secs(86400 * 3));
        // 1970-01-04 was a Sunday (in any zone within ±12 h of UTC at 00:00 it is Sat or Sun).
        assert!(
            s.starts_with("Sun, 4 Jan 1970") || s.starts_with("Sat, 3 Jan 1970"),
            "{s}"
        );
        assert!(s.contains(" +") || s.contains(" -"), "{s}");
    }

    use super::*;

    #[test]
    fn stamp_has_syslog_shape() {
        let s = syslog_stamp(SystemTime::now());
        assert_eq!(s.len(), 15, "{s}");
        assert!(MONTHS.contains(&&s[..3]));
        assert_eq!(&s[9..10], ":");
    }
}
