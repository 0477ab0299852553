//! The policy file's scalar syntaxes: time values, rates, thresholds and
//! name patterns.
//!
//! A time value is a number of seconds (`30`) or a number with one of
//! Postfix's units (`s`, `m`, `h`, `d`, `w`) or `ms` (`500ms`, `2h`). A rate
//! or a threshold is `N/interval`, the interval a time value (`10/1`,
//! `100/60`, `100/1m`). Each parser returns `None` for text it refuses; the
//! caller says where.

use std::time::Duration;

use crate::model::Threshold;
use crate::props::Rate;

/// A time value: seconds, or a number with a unit `ms`, `s`, `m`, `h`,
/// `d` or `w`.
pub fn duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 12 {
        return None;
    }
    let n: u64 = t[..digits].parse().ok()?;
    let ms = match &t[digits..] {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 604_800_000,
        _ => return None,
    };
    Some(Duration::from_millis(n.checked_mul(ms)?))
}

/// `N/interval` with N and the interval above 0.
fn per(text: &str) -> Option<(u32, Duration)> {
    let (n, d) = text.trim().split_once('/')?;
    let n = n.trim();
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = n.parse().ok()?;
    let d = duration(d)?;
    (n > 0 && !d.is_zero()).then_some((n, d))
}

/// A rate, `N/interval`.
pub fn rate(text: &str) -> Option<Rate> {
    per(text).map(|(tokens, per)| Rate { tokens, per })
}

/// A reply rule's threshold: `immediate` or `N/interval`.
pub fn threshold(text: &str) -> Option<Threshold> {
    if text.trim().eq_ignore_ascii_case("immediate") {
        return Some(Threshold::Immediate);
    }
    per(text).map(|(n, per)| Threshold::Count { n, per })
}

/// Whether `p` is a pattern [`crate::Pattern`] can mean: a name, or `*.`
/// and a name, made of letters, digits, `-`, `_` and dots, without empty
/// labels.
pub fn pattern_ok(p: &str) -> bool {
    let name = p.strip_prefix("*.").unwrap_or(p);
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_values_are_seconds_or_postfix_units() {
        let s = Duration::from_secs;
        let table: &[(&str, Option<Duration>)] = &[
            ("30", Some(s(30))),
            ("0", Some(s(0))),
            ("500ms", Some(Duration::from_millis(500))),
            ("2s", Some(s(2))),
            ("10m", Some(s(600))),
            ("2h", Some(s(7200))),
            ("1d", Some(s(86_400))),
            ("1w", Some(s(604_800))),
            (" 5s ", Some(s(5))),
            ("", None),
            ("s", None),
            ("-1", None),
            ("1.5", None),
            ("2 h", None),
            ("2H", None),
            ("10y", None),
            ("1mm", None),
            ("9999999999999", None),
            ("\0", None),
        ];
        for (text, want) in table {
            assert_eq!(duration(text), *want, "{text:?}");
        }
    }

    #[test]
    fn rates_and_thresholds_need_a_count_and_an_interval_above_zero() {
        let r = |tokens, secs| {
            Some(Rate {
                tokens,
                per: Duration::from_secs(secs),
            })
        };
        assert_eq!(rate("10/1"), r(10, 1));
        assert_eq!(rate("100/60"), r(100, 60));
        assert_eq!(rate("100/1m"), r(100, 60));
        assert_eq!(
            rate("1/500ms"),
            Some(Rate {
                tokens: 1,
                per: Duration::from_millis(500)
            })
        );
        for bad in [
            "0/1", "10/0", "10/0s", "10", "/1", "10/", "a/1", "-1/1", "1/1/1", "+1/1",
        ] {
            assert_eq!(rate(bad), None, "{bad:?}");
        }
        assert_eq!(threshold("immediate"), Some(Threshold::Immediate));
        assert_eq!(
            threshold("5/60"),
            Some(Threshold::Count {
                n: 5,
                per: Duration::from_secs(60)
            })
        );
        assert_eq!(threshold("soon"), None);
        assert_eq!(threshold("0/60"), None);
    }

    #[test]
    fn patterns_are_names_or_wildcard_suffixes() {
        for ok in [
            "orange.test",
            "*.mx.orange.test",
            "mx1.yahoodns.test.",
            "x_y-z.test",
        ] {
            assert!(pattern_ok(ok), "{ok}");
        }
        for bad in [
            "",
            "*",
            "*.",
            "*orange.test",
            "a.*.test",
            "a..test",
            "a b.test",
            ".test",
        ] {
            assert!(!pattern_ok(bad), "{bad:?}");
        }
    }
}
