//! Local time for log lines (`Nov 21 23:43:12`), as syslog and Postfix write it.
//!
//! localtime_r honours TZ and /etc/localtime, which std cannot do.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Formats a time as syslog's `Mmm dd hh:mm:ss` in local time.
pub fn syslog_stamp(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as libc::time_t;
    // SAFETY: an all-zero tm is a valid value for localtime_r to overwrite,
    // and both pointers are to live locals.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        return "Jan  1 00:00:00".to_string();
    }
    let month = MONTHS[tm.tm_mon.clamp(0, 11) as usize];
    format!(
        "{month} {:>2} {:02}:{:02}:{:02}",
        tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_has_syslog_shape() {
        let s = syslog_stamp(SystemTime::now());
        assert_eq!(s.len(), 15, "{s}");
        assert!(MONTHS.contains(&&s[..3]));
        assert_eq!(&s[9..10], ":");
    }
}
