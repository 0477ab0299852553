//! The delivery log line, as Postfix writes it for every recipient.
//!
//! `QUEUEID: to=<rcpt>, orig_to=<orcpt>, relay=host[addr]:port,
//! conn_use=N, delay=T, delays=a/b/c/d, dsn=X.Y.Z, status=sent (text)`,
//! with Postfix's time format (`format_tv`: two significant digits, at
//! most `delay_logging_resolution_limit` of them after the point, trailing
//! zeros dropped). Written once here for every agent (smtp, local, lmtp)
//! and for qmgr's own deferrals and bounces, so that pflogsumm and a
//! postmaster's greps read them all alike. Nothing here reads a clock:
//! callers measure the delays and hand them in.

use std::fmt;
use std::time::Duration;

use crate::dsn::Status;

/// `delay_logging_resolution_limit`'s default and Postfix's.
pub const DEFAULT_RESOLUTION: u32 = 2;

/// The parts of Postfix's `delays=a/b/c/d`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delays {
    /// a: from arrival until the queue manager handed the message over
    /// (reception, cleanup, waiting in the queue).
    pub before_agent: Duration,
    /// b: from the hand-over until the agent started on it (waiting for a
    /// connection or a process).
    pub in_agent_queue: Duration,
    /// c: connection setup (connect, greeting, EHLO, TLS).
    pub conn_setup: Duration,
    /// d: message transmission.
    pub transmission: Duration,
}

impl Delays {
    /// The delays of a recipient whose message has been queued for `total`
    /// (its age), of which the agent spent the last three parts: the first
    /// part is what is left, never negative.
    pub fn of_age(
        total: Duration,
        in_agent_queue: Duration,
        conn_setup: Duration,
        transmission: Duration,
    ) -> Delays {
        let agent = in_agent_queue + conn_setup + transmission;
        Delays {
            before_agent: total.saturating_sub(agent),
            in_agent_queue,
            conn_setup,
            transmission,
        }
    }

    /// The whole delay, `delay=`.
    pub fn total(&self) -> Duration {
        self.before_agent + self.in_agent_queue + self.conn_setup + self.transmission
    }
}

/// What became of the recipient, the `status=` word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Delivered (or relayed).
    Sent,
    /// To be tried again.
    Deferred,
    /// Failed for good; the sender gets a notice.
    Bounced,
    /// An address verification probe was accepted (Postfix's word).
    Deliverable,
    /// An address verification probe was refused for good.
    Undeliverable,
    /// A permanent failure kept queued because of `soft_bounce`
    /// (Postfix's word, so that a log reader tells it from a deferral).
    SoftBounce,
}

impl Disposition {
    /// What a status's class means: 2 sent, 5 bounced, anything else deferred.
    pub fn of(status: &Status) -> Disposition {
        match status.code.class() {
            2 => Disposition::Sent,
            5 => Disposition::Bounced,
            _ => Disposition::Deferred,
        }
    }

    /// What a probe's status means, as Postfix's verify probes log it:
    /// deliverable, undeliverable, or deferred.
    pub fn of_probe(status: &Status) -> Disposition {
        match Disposition::of(status) {
            Disposition::Sent => Disposition::Deliverable,
            Disposition::Bounced => Disposition::Undeliverable,
            d => d,
        }
    }

    /// The word Postfix logs.
    pub fn word(self) -> &'static str {
        match self {
            Disposition::Sent => "sent",
            Disposition::Deferred => "deferred",
            Disposition::Bounced => "bounced",
            Disposition::Deliverable => "deliverable",
            Disposition::Undeliverable => "undeliverable",
            Disposition::SoftBounce => "SOFTBOUNCE",
        }
    }
}

/// One recipient's delivery log line (without the program's prefix).
#[derive(Debug, Clone, Copy)]
pub struct DeliveryLine<'a> {
    /// The queue id.
    pub queue_id: &'a str,
    /// The recipient as delivered to.
    pub to: &'a str,
    /// The original recipient, shown as `orig_to=` when there is one.
    pub orig_to: Option<&'a str>,
    /// `host[addr]:port`, `local`, or `none` for qmgr's own decisions.
    pub relay: &'a str,
    /// How many transactions the connection had carried, this one
    /// included; shown from the second on, as Postfix does.
    pub conn_use: u32,
    /// The time spent, by part.
    pub delays: Delays,
    /// Digits after the point at most (`delay_logging_resolution_limit`).
    pub resolution: u32,
    /// The result.
    pub status: &'a Status,
    /// The `status=` word.
    pub disposition: Disposition,
}

impl fmt::Display for DeliveryLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: to=<{}>", self.queue_id, self.to)?;
        if let Some(o) = self.orig_to {
            write!(f, ", orig_to=<{o}>")?;
        }
        write!(f, ", relay={}", self.relay)?;
        if self.conn_use > 1 {
            write!(f, ", conn_use={}", self.conn_use)?;
        }
        let d = &self.delays;
        let t = |x: Duration| format_delay(x, self.resolution);
        write!(
            f,
            ", delay={}, delays={}/{}/{}/{}, dsn={}, status={} ({})",
            t(d.total()),
            t(d.before_agent),
            t(d.in_agent_queue),
            t(d.conn_setup),
            t(d.transmission),
            self.status.code,
            self.disposition.word(),
            self.status.text
        )
    }
}

/// The original recipient to log as `orig_to=`: the address a stored
/// ORCPT (`type;address`) names, when it is not the recipient's own and
/// passes [`crate::Orcpt`]'s checks.
pub fn orig_to<'a>(address: &str, orcpt: Option<&'a str>) -> Option<&'a str> {
    let o = crate::orcpt::stored_addr(orcpt?)?;
    (!o.eq_ignore_ascii_case(address)).then_some(o)
}

/// A time in Postfix's log format: two significant digits, at most
/// `max_digits` (0 to 6) after the point, rounded, trailing zeros and
/// the point dropped; whole seconds are never cut (`123`, `12`, `1.5`,
/// `0.12`, `0`).
pub fn format_delay(d: Duration, max_digits: u32) -> String {
    const MILLION: u64 = 1_000_000;
    const SIGNIFICANT: u32 = 2;
    let mut sec = d.as_secs();
    let mut usec = u64::from(d.subsec_micros());
    let wid = 10u64.pow(SIGNIFICANT);
    // The smallest unit shown, in microseconds.
    let mut unit = MILLION / 10u64.pow(max_digits.min(6));
    if unit < MILLION {
        if sec > 0 {
            // The whole seconds already take this many significant digits.
            let mut n = 1;
            while sec >= n && n <= wid / 10 {
                n *= 10;
            }
            unit = (MILLION / wid) * n;
        } else {
            while usec >= wid * unit {
                unit *= 10;
            }
        }
    }
    if unit > 1 {
        usec += unit / 2;
        if usec >= MILLION {
            sec += 1;
            usec -= MILLION;
        }
    }
    let mut out = sec.to_string();
    if usec >= unit {
        out.push('.');
        let (mut rem, mut n) = (usec, MILLION / 10);
        while rem >= unit && n > 0 {
            out.push(char::from(b'0' + (rem / n) as u8));
            rem %= n;
            n /= 10;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StatusCode;

    fn s(secs: f64) -> Duration {
        Duration::from_micros((secs * 1e6).round() as u64)
    }

    #[test]
    fn delays_follow_postfix_format_tv() {
        let cases: &[(f64, u32, &str)] = &[
            (0.0, 2, "0"),
            (0.004, 2, "0"),
            (0.005, 2, "0.01"),
            (0.123, 2, "0.12"),
            (0.0123, 3, "0.012"),
            (0.0123, 6, "0.012"),
            (0.5, 0, "1"),
            (0.4, 0, "0"),
            (1.0, 2, "1"),
            (1.5, 2, "1.5"),
            (1.25, 2, "1.3"),
            (9.99, 2, "10"),
            (12.34, 2, "12"),
            (99.6, 2, "100"),
            (123.4, 2, "123"),
            (86_400.0, 2, "86400"),
            (0.123, 9, "0.12"),
        ];
        for &(secs, res, want) in cases {
            assert_eq!(format_delay(s(secs), res), want, "{secs} at {res}");
        }
    }

    #[test]
    fn the_line_as_postfix_writes_it() {
        let st = Status::new(StatusCode::OK, "250 2.0.0 Ok: queued as X");
        let line = DeliveryLine {
            queue_id: "4Q",
            to: "b@example.net",
            orig_to: orig_to("b@example.net", Some("rfc822;list@example.net")),
            relay: "mx[192.0.2.1]:25",
            conn_use: 2,
            delays: Delays::of_age(s(1.5), s(0.01), s(0.2), s(0.3)),
            resolution: DEFAULT_RESOLUTION,
            status: &st,
            disposition: Disposition::of(&st),
        };
        assert_eq!(
            line.to_string(),
            "4Q: to=<b@example.net>, orig_to=<list@example.net>, relay=mx[192.0.2.1]:25, \
             conn_use=2, delay=1.5, delays=0.99/0.01/0.2/0.3, dsn=2.0.0, status=sent \
             (250 2.0.0 Ok: queued as X)"
        );
        let st = Status::new(StatusCode::known(5, 1, 1), "unknown user");
        let first = DeliveryLine {
            orig_to: orig_to("b@example.net", Some("rfc822;B@example.net")),
            conn_use: 1,
            relay: "local",
            delays: Delays::of_age(s(0.1), s(0.0), s(0.0), s(0.5)),
            status: &st,
            disposition: Disposition::of(&st),
            ..line
        };
        assert_eq!(
            first.to_string(),
            "4Q: to=<b@example.net>, relay=local, delay=0.5, delays=0/0/0/0.5, \
             dsn=5.1.1, status=bounced (unknown user)"
        );
        assert_eq!(orig_to("a@r.test", None), None);
        // Not `type;address`: no type says how to read it, so none is shown.
        assert_eq!(orig_to("a@r.test", Some("x@y")), None);
    }

    /// An ORCPT holding CR LF (an old journal's, from before smtpd refused
    /// it) would end the log line and forge the next one.
    #[test]
    fn a_hostile_orcpt_is_not_logged() {
        let st = Status::new(StatusCode::OK, "delivered");
        let line = DeliveryLine {
            queue_id: "4Q",
            to: "b@example.net",
            orig_to: orig_to(
                "b@example.net",
                Some("rfc822;x@y\r\nDec  1 00:00:00 mx sluice/smtpd[1]: forged"),
            ),
            relay: "local",
            conn_use: 1,
            delays: Delays::default(),
            resolution: DEFAULT_RESOLUTION,
            status: &st,
            disposition: Disposition::of(&st),
        };
        let text = line.to_string();
        assert!(
            !text.contains(['\r', '\n']) && !text.contains("orig_to"),
            "{text}"
        );
    }
}
