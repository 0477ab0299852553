//! Delivery status notification types (RFC 3461, RFC 3463, RFC 3464).
//!
//! `Notify` is the RCPT NOTIFY= option, `Ret` the MAIL RET= option,
//! `DsnAction` the per-recipient action of a report, `StatusCode` an
//! enhanced status code `class.subject.detail`. Parsing is strict and never
//! panics; limits follow RFC 3463 (class 2, 4 or 5; subject and detail up to
//! three digits).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// RCPT NOTIFY=: `Never`, or any of success/failure/delay; `Default` when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Notify {
    /// No NOTIFY= given: failure (and maybe delay) notices, at the MTA's choice.
    #[default]
    Default,
    /// NOTIFY=NEVER.
    Never,
    /// NOTIFY= a list of conditions.
    On {
        /// SUCCESS was listed.
        success: bool,
        /// FAILURE was listed.
        failure: bool,
        /// DELAY was listed.
        delay: bool,
    },
}

impl Notify {
    /// Whether a failure notice is wanted.
    pub fn wants_failure(&self) -> bool {
        match self {
            Self::Default => true,
            Self::Never => false,
            Self::On { failure, .. } => *failure,
        }
    }

    /// Whether a delay notice is wanted.
    pub fn wants_delay(&self) -> bool {
        match self {
            Self::Default => true,
            Self::Never => false,
            Self::On { delay, .. } => *delay,
        }
    }

    /// Whether a success notice is wanted.
    pub fn wants_success(&self) -> bool {
        matches!(self, Self::On { success: true, .. })
    }
}

/// MAIL RET=: return the full message or only its headers in a DSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Ret {
    /// RET=FULL.
    Full,
    /// RET=HDRS.
    Hdrs,
}

/// The action of one recipient in a delivery status report (RFC 3464).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DsnAction {
    /// Permanently failed.
    Failed,
    /// Still being retried.
    Delayed,
    /// Delivered to the final mailbox.
    Delivered,
    /// Relayed to a system that does not do DSN.
    Relayed,
    /// Expanded to several recipients (alias, list).
    Expanded,
}

/// An RFC 3463 enhanced status code, `class.subject.detail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StatusCode {
    class: u8,
    subject: u16,
    detail: u16,
}

/// Why a string is not an enhanced status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseStatusError {
    /// Not three dot-separated numbers.
    Shape,
    /// Class other than 2, 4 or 5.
    Class,
    /// Subject or detail longer than three digits.
    Range,
}

impl fmt::Display for ParseStatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Shape => "enhanced status code must be class.subject.detail",
            Self::Class => "enhanced status class must be 2, 4 or 5",
            Self::Range => "enhanced status subject and detail have at most 3 digits",
        })
    }
}

impl std::error::Error for ParseStatusError {}

impl StatusCode {
    /// 2.0.0 success.
    pub const OK: Self = Self {
        class: 2,
        subject: 0,
        detail: 0,
    };
    /// 4.3.1 mail system full.
    pub const SYSTEM_FULL: Self = Self {
        class: 4,
        subject: 3,
        detail: 1,
    };
    /// 4.3.0 other mail system problem.
    pub const SYSTEM_TEMP: Self = Self {
        class: 4,
        subject: 3,
        detail: 0,
    };
    /// 4.4.7 delivery time expired (as a delay); bounces use 5.4.7.
    pub const EXPIRED_DELAY: Self = Self {
        class: 4,
        subject: 4,
        detail: 7,
    };
    /// 5.4.7 delivery time expired.
    pub const EXPIRED: Self = Self {
        class: 5,
        subject: 4,
        detail: 7,
    };

    /// A code from its parts; `None` outside RFC 3463's ranges.
    pub fn new(class: u8, subject: u16, detail: u16) -> Option<Self> {
        (matches!(class, 2 | 4 | 5) && subject <= 999 && detail <= 999).then_some(Self {
            class,
            subject,
            detail,
        })
    }

    /// The class digit: 2 success, 4 transient, 5 permanent.
    pub fn class(&self) -> u8 {
        self.class
    }

    /// The subject number.
    pub fn subject(&self) -> u16 {
        self.subject
    }

    /// The detail number.
    pub fn detail(&self) -> u16 {
        self.detail
    }

    /// Whether this is a permanent failure (class 5).
    pub fn is_permanent(&self) -> bool {
        self.class == 5
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.class, self.subject, self.detail)
    }
}

impl FromStr for StatusCode {
    type Err = ParseStatusError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.split('.');
        let (Some(c), Some(sj), Some(d), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ParseStatusError::Shape);
        };
        let num = |p: &str, max: usize| -> Result<u16, ParseStatusError> {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ParseStatusError::Shape);
            }
            if p.len() > max {
                return Err(ParseStatusError::Range);
            }
            p.parse().map_err(|_| ParseStatusError::Shape)
        };
        let class = num(c, 1)?;
        let (subject, detail) = (num(sj, 3)?, num(d, 3)?);
        Self::new(class as u8, subject, detail).ok_or(ParseStatusError::Class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Case = (&'static str, Result<(u8, u16, u16), ParseStatusError>);

    #[test]
    fn status_codes_table() {
        let cases: &[Case] = &[
            ("2.0.0", Ok((2, 0, 0))),
            ("4.3.1", Ok((4, 3, 1))),
            ("5.7.999", Ok((5, 7, 999))),
            ("5.1000.1", Err(ParseStatusError::Range)),
            ("3.0.0", Err(ParseStatusError::Class)),
            ("55.0.0", Err(ParseStatusError::Range)),
            ("5.0", Err(ParseStatusError::Shape)),
            ("5.0.0.0", Err(ParseStatusError::Shape)),
            ("5..0", Err(ParseStatusError::Shape)),
            ("5.+1.0", Err(ParseStatusError::Shape)),
            ("", Err(ParseStatusError::Shape)),
            ("5.0.0\0", Err(ParseStatusError::Shape)),
        ];
        for (s, want) in cases {
            let got = s
                .parse::<StatusCode>()
                .map(|c| (c.class(), c.subject(), c.detail()));
            assert_eq!(&got, want, "{s:?}");
            if let Ok(c) = s.parse::<StatusCode>() {
                assert_eq!(c.to_string(), *s);
            }
        }
    }

    #[test]
    fn notify_defaults() {
        assert!(Notify::Default.wants_failure() && !Notify::Default.wants_success());
        assert!(!Notify::Never.wants_failure() && !Notify::Never.wants_delay());
        let n = Notify::On {
            success: true,
            failure: false,
            delay: false,
        };
        assert!(n.wants_success() && !n.wants_failure());
    }
}
