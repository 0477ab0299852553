//! The delivery log line for recipients qmgr settles itself (deferred or
//! bounced before any delivery attempt, discarded), written by the shared
//! formatter (`mail::logline`) as the agents write theirs, with
//! `relay=none` and the whole delay before the agent.

use std::time::Duration;

use mail::logline::{Delays, DeliveryLine, Disposition};
use mail::{Status, StatusCode};
use sched::Time;

use mail::{Envelope, QueueId};

/// 4.3.0, the status of qmgr's own temporary failures (no router, no agent).
pub(crate) const TEMPFAIL: StatusCode = StatusCode::known(4, 3, 0);
/// 5.0.0, a routing failure without a status.
pub(crate) const FAILED: StatusCode = StatusCode::known(5, 0, 0);

/// `ID: to=<…>, relay=none, delay=…, delays=…/0/0/0, dsn=…, status=… (…)`.
pub(crate) fn log_rcpt(
    now: Time,
    id: &QueueId,
    envelope: &Envelope,
    i: u32,
    status: &Status,
) -> String {
    log_rcpt_as(now, id, envelope, i, status, Disposition::of(status))
}

/// [`log_rcpt`] with the `status=` word given (`SOFTBOUNCE`).
pub(crate) fn log_rcpt_as(
    now: Time,
    id: &QueueId,
    envelope: &Envelope,
    i: u32,
    status: &Status,
    disposition: Disposition,
) -> String {
    let rcpt = envelope.recipients.get(i as usize);
    let to = rcpt.map(|r| r.address.as_str()).unwrap_or("");
    let age_us = (now.0 * 1000).saturating_sub(envelope.arrival.as_micros());
    let zero = Duration::ZERO;
    let line = DeliveryLine {
        queue_id: &id.to_string(),
        to,
        orig_to: mail::orig_to(to, rcpt.and_then(|r| r.orcpt.as_deref())),
        relay: "none",
        conn_use: 0,
        delays: Delays::of_age(Duration::from_micros(age_us), zero, zero, zero),
        resolution: mail::logline::DEFAULT_RESOLUTION,
        status,
        disposition,
    };
    line.to_string()
}

#[cfg(test)]
mod tests {
    use crate::testkit::{settings, World};
    use crate::Settings;
    use queue::Record;

    #[test]
    fn qmgr_logs_its_own_deferrals_as_the_agents_log_theirs() {
        let mut w = World::new(settings());
        let id = w.arrive("a@a.example", &["r@b.example"]);
        w.wait(std::time::Duration::from_millis(1500));
        w.router.clear();
        w.handle(crate::Event::RouterLost);
        let line = w
            .log
            .iter()
            .map(|(_, l)| l.as_str())
            .find(|l| l.contains("to=<r@b.example>"))
            .expect("a line");
        assert_eq!(
            line,
            format!("{id}: to=<r@b.example>, relay=none, delay=1.5, delays=1.5/0/0/0, dsn=4.3.0, status=deferred (address resolver unavailable)")
        );
        assert!(w.records(id).iter().any(|r| matches!(r,
            Record::Deferred { status, reason, .. }
                if status.to_string() == "4.3.0" && reason == "address resolver unavailable")));
    }

    #[test]
    fn soft_bounce_logs_a_kept_bounce_as_softbounce() {
        // A recipient that fails for good before any delivery (the error
        // transport) is kept under soft_bounce; the log says SOFTBOUNCE,
        // as Postfix's bounce.c, so a reader tells it from a deferral.
        let mut s = settings();
        s.soft_bounce = true;
        let mut w = World::new(s);
        let id = w.arrive("a@a.example", &["r@b.example"]);
        w.route_all(&[("r@b.example", "error", "5.1.1 no such user")]);
        let line = w
            .log
            .iter()
            .map(|(_, l)| l.as_str())
            .find(|l| l.contains("to=<r@b.example>"))
            .expect("a line");
        assert!(
            line.ends_with("dsn=4.1.1, status=SOFTBOUNCE (no such user)"),
            "{line}"
        );
        assert!(w.live(id), "the message stays queued");
        // Due again after the back-off (minimal_backoff_time for a young
        // message, as Postfix's qmgr), not after queue_run_delay (60 s here).
        let due = (w.now.0 + 300_000).div_ceil(1000);
        assert!(
            w.records(id).iter().any(|r| matches!(r,
                Record::Deferred { next_attempt, .. } if *next_attempt == due)),
            "{:?}",
            w.records(id)
        );
        assert!(!w
            .records(id)
            .iter()
            .any(|r| matches!(r, Record::Bounced { .. })));
    }

    #[test]
    fn a_reload_turns_soft_bounce_on_and_off() {
        // reconfigure once kept soft_bounce as qmgr started: a postmaster
        // who turned it on with a reload had mail bounced all the same.
        let mut w = World::new(settings());
        let sched = sched::SchedConfig::default();
        let on = Settings {
            soft_bounce: true,
            ..settings()
        };
        w.handle(crate::Event::Reconfigure {
            settings: Box::new(on),
            sched: Box::new(sched.clone()),
        });
        let id = w.arrive("a@a.example", &["r@b.example"]);
        w.route_all(&[("r@b.example", "error", "5.1.1 no such user")]);
        assert!(w.live(id), "kept under soft_bounce");
        w.handle(crate::Event::Reconfigure {
            settings: Box::new(settings()),
            sched: Box::new(sched),
        });
        let id = w.arrive("a@a.example", &["s@b.example"]);
        w.route_all(&[("s@b.example", "error", "5.1.1 no such user")]);
        assert!(w.logged(&format!("{id}: to=<s@b.example>")));
        assert!(w
            .records(id)
            .iter()
            .any(|r| matches!(r, Record::Bounced { .. })));
    }
}
