//! Traffic shaping's operator side: `sluice queue suspend | resume |
//! suspensions`, `sluice policy show`, the log lines of holds, and their
//! saved form.
//!
//! Holds live in the scheduler's shaper; every change is logged and the
//! operator's and reply rules' holds are handed to the shell to save
//! ([`Action::SaveHolds`]) so that they survive a restart
//! ([`QueueManager::restore_holds`]). Static holds come from the policy
//! file and are not saved.

use std::time::Duration;

use ipc::queuectl::{self, HoldView, KeyView, PolicyView};
use shaping::{holdfile, Hold, Origin, RateAlgorithm};

use crate::{Action, QueueManager, Store};

impl<S: Store> QueueManager<S> {
    /// The shaper in force, for the shell's link to clusterd (to install
    /// its share and read the keys for `sluice cluster status`).
    pub fn shaper_mut(&mut self) -> Option<&mut shaping::Shaper> {
        self.deliver.sched.shaper()
    }

    /// clusterd's grants, allotments or count changed: destinations parked
    /// on shaping try again.
    pub fn limits_changed(&mut self, now: crate::Time) {
        self.now = now;
        if let Err(e) = self.deliver.sched.handle(now, sched::Event::LimitsChanged) {
            self.warn(format!("scheduler: {e:?}"));
        }
        self.run_sched();
    }

    /// Another instance found `nexthop` dead for `secs` (clusterd's news):
    /// its mail here waits too instead of paying the connect timeouts.
    pub fn dead_elsewhere(&mut self, now: crate::Time, nexthop: &str, secs: u64) {
        self.now = now;
        let until = now + std::time::Duration::from_secs(secs);
        let ev = sched::Event::DeadElsewhere {
            nexthop: nexthop.to_string(),
            until,
        };
        if let Err(e) = self.deliver.sched.handle(now, ev) {
            self.warn(format!("scheduler: {e:?}"));
        }
        self.run_sched();
    }

    /// Another instance could not reach `host` and skips it for `secs`
    /// (clusterd's news): it is skipped here too.
    pub fn host_retry_elsewhere(&mut self, now: crate::Time, host: &str, secs: u64) {
        self.now = now;
        let until = now + std::time::Duration::from_secs(secs);
        let ev = sched::Event::HostRetryElsewhere {
            host: host.to_string(),
            until,
        };
        if let Err(e) = self.deliver.sched.handle(now, ev) {
            self.warn(format!("scheduler: {e:?}"));
        }
        self.run_sched();
    }

    /// Answers the shaping requests of `sluice queue` and `sluice policy`.
    pub(crate) fn shaping_control(&mut self, req: queuectl::Request) -> queuectl::Response {
        const NO_POLICY: &str = "no policy_file is in force";
        let now = self.now;
        match req {
            queuectl::Request::Suspend {
                when,
                for_secs,
                tag,
            } => {
                if self.deliver.sched.shaper().is_none() {
                    return queuectl::Response::Suspended(Err(NO_POLICY.into()));
                }
                let text: Vec<String> = when.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let when = match holdfile::parse_values(&text.join(",")) {
                    Ok(w) => w,
                    Err(e) => return queuectl::Response::Suspended(Err(e)),
                };
                let until = for_secs.map(|s| now + Duration::from_secs(s));
                let before = self.hold_ids();
                let ev = sched::Event::Suspend { when, until, tag };
                if let Err(e) = self.deliver.sched.handle(now, ev) {
                    return queuectl::Response::Suspended(Err(format!("{e:?}")));
                }
                self.run_sched();
                let id = self.hold_ids().into_iter().find(|i| !before.contains(i));
                queuectl::Response::Suspended(id.ok_or_else(|| "not suspended".to_string()))
            }
            queuectl::Request::Resume { id } => {
                let had = self.hold_ids().contains(&id);
                if let Err(e) = self.deliver.sched.handle(now, sched::Event::Resume { id }) {
                    self.warn(format!("scheduler: {e:?}"));
                }
                self.run_sched();
                queuectl::Response::Resumed(had && !self.hold_ids().contains(&id))
            }
            queuectl::Request::Suspensions => {
                queuectl::Response::Holds(match self.deliver.sched.shaper() {
                    None => Err(NO_POLICY.into()),
                    Some(sh) => Ok(sh.holds(now.0).iter().map(|h| view(h, now.0)).collect()),
                })
            }
            queuectl::Request::Policy => {
                queuectl::Response::Policy(match self.deliver.sched.shaper() {
                    None => Err(NO_POLICY.into()),
                    Some(sh) => {
                        let algorithm = match sh.policy().algorithm {
                            RateAlgorithm::TokenBucket => "tokenbucket",
                            RateAlgorithm::FixedWindow => "fixedwindow",
                        };
                        let keys = sh.keys(now.0).iter().map(key_view).collect();
                        let holds = sh.holds(now.0).iter().map(|h| view(h, now.0)).collect();
                        Ok(Box::new(PolicyView {
                            algorithm: algorithm.into(),
                            keys,
                            holds,
                        }))
                    }
                })
            }
            other => queuectl::Response::Shown(Err(format!("not a shaping request: {other:?}"))),
        }
    }

    /// The busiest policy keys, for `sluice top` and the metrics.
    pub(crate) fn policy_summary(&self, top: usize) -> Vec<KeyView> {
        let Some(sh) = self.deliver.sched.shaper_ref() else {
            return Vec::new();
        };
        let mut keys = sh.keys(self.now.0);
        keys.sort_by(|a, b| {
            (b.connections, b.transactions, &a.name).cmp(&(a.connections, a.transactions, &b.name))
        });
        keys.iter().take(top).map(key_view).collect()
    }

    /// The holds in force, for `sluice top` and the metrics.
    pub(crate) fn holds_summary(&self) -> Vec<HoldView> {
        let now = self.now.0;
        self.deliver.sched.shaper_ref().map_or(Vec::new(), |sh| {
            sh.active_holds(now).map(|h| view(h, now)).collect()
        })
    }

    fn hold_ids(&mut self) -> Vec<u64> {
        let now = self.now.0;
        self.deliver.sched.shaper().map_or(Vec::new(), |sh| {
            sh.holds(now).iter().map(|h| h.id).collect()
        })
    }

    /// Logs a hold the scheduler put in place and saves the holds.
    pub(crate) fn hold_placed(&mut self, hold: &Hold) {
        let who = match hold.origin {
            Origin::Operator => "by the administrator".to_string(),
            Origin::Reply(i) => format!("by reply rule {}", i + 1),
            Origin::Static => "by the policy file".to_string(),
        };
        let what = match &hold.floor {
            None => "suspended".to_string(),
            Some(p) => format!("backed off to {}", limits(p)),
        };
        let until = match hold.until {
            Some(t) => format!(" for {}s", t.saturating_sub(self.now.0).div_ceil(1000)),
            None => " until resumed".to_string(),
        };
        let tag = hold
            .tag
            .as_deref()
            .map_or(String::new(), |t| format!(" ({t})"));
        self.info(format!(
            "shaping: {} {what} {who}{until}, hold id {}{tag}",
            values(hold),
            hold.id
        ));
        self.save_holds();
    }

    /// Logs a lifted hold and saves the holds.
    pub(crate) fn hold_lifted(&mut self, id: u64) {
        self.info(format!("shaping: hold id {id} lifted by the administrator"));
        self.save_holds();
    }

    fn save_holds(&mut self) {
        let now = self.now.0;
        if let Some(sh) = self.deliver.sched.shaper() {
            let text = holdfile::format(sh.holds(now));
            self.actions.push_back(Action::SaveHolds { text });
        }
    }

    /// Puts holds saved before a restart back in force (expired ones are
    /// dropped); returns how many, or why the text could not be read.
    pub fn restore_holds(&mut self, now: sched::Time, text: &str) -> Result<usize, String> {
        self.now = now;
        let holds = holdfile::parse(text)?;
        let mut n = 0;
        for h in holds {
            if h.until.is_some_and(|t| t <= now.0) && h.ramp.is_none() {
                continue;
            }
            if let Err(e) = self.deliver.sched.handle(now, sched::Event::RestoreHold(h)) {
                return Err(format!("{e:?}"));
            }
            n += 1;
        }
        self.run_sched();
        Ok(n)
    }
}

fn values(h: &Hold) -> String {
    let v: Vec<String> = h.when.iter().map(|(f, v)| format!("{f}={v}")).collect();
    v.join(",")
}

/// A duration as a Postfix time value.
fn dur(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    match ms {
        0 => "0s".into(),
        m if m % 3_600_000 == 0 => format!("{}h", m / 3_600_000),
        m if m % 60_000 == 0 => format!("{}m", m / 60_000),
        m if m % 1000 == 0 => format!("{}s", m / 1000),
        m => format!("{m}ms"),
    }
}

fn rate(r: shaping::Rate) -> String {
    format!("{}/{}", r.tokens, dur(r.per))
}

fn limits(p: &shaping::Props) -> String {
    let mut v = Vec::new();
    if let Some(c) = p.concurrency {
        v.push(format!("concurrency={c}"));
    }
    if let Some(r) = p.rate {
        v.push(format!("rate={}", rate(r)));
    }
    if v.is_empty() {
        "no limits".into()
    } else {
        v.join(" ")
    }
}

fn view(h: &Hold, now: u64) -> HoldView {
    HoldView {
        id: h.id,
        origin: match h.origin {
            Origin::Operator => "operator".into(),
            Origin::Static => "static".into(),
            Origin::Reply(i) => format!("reply rule {}", i + 1),
        },
        when: values(h),
        remaining: h.until.map(|t| t.saturating_sub(now).div_ceil(1000)),
        action: match &h.floor {
            None => "suspend".into(),
            Some(p) => format!("backoff {}", limits(p)),
        },
        ramping: h.until.is_some_and(|t| t <= now),
        tag: h.tag.clone().unwrap_or_default(),
    }
}

fn key_view(k: &shaping::KeyView) -> KeyView {
    use shaping::props::prop_bit::*;
    let p = &k.props;
    let mut other = Vec::new();
    if let Some(c) = p.connect_interval {
        other.push(format!("connectinterval={}", dur(c)));
    }
    if let Some(t) = p.transactions {
        other.push(format!("transactions={t}"));
    }
    if let Some(i) = p.idle_timeout {
        other.push(format!("idletimeout={}", dur(i)));
    }
    let mut local = Vec::new();
    for (bit, name) in [
        (CONCURRENCY, "concurrency"),
        (RATE, "rate"),
        (CONNECT_INTERVAL, "connectinterval"),
        (TRANSACTIONS, "transactions"),
        (IDLE_TIMEOUT, "idletimeout"),
    ] {
        if p.local & bit != 0 {
            local.push(name);
        }
    }
    KeyView {
        key: k.name.to_string(),
        concurrency: p.concurrency,
        concurrency_now: k.concurrency_now,
        rate: p.rate.map(rate),
        rate_now: k.rate_now.map(rate),
        other: other.join(" "),
        local: local.join(","),
        local_concurrency: k.local_concurrency,
        local_rate: k.local_rate.map(rate),
        connections: k.connections,
        opened: k.opened,
        transactions: k.transactions,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ipc::queuectl::{Request, Response};
    use sched::SchedConfig;
    use shaping::{Field, KeyPolicy, Policy, Props};

    use crate::testkit::{settings, World, T0};
    use crate::Event;

    fn shaped() -> World {
        let policy = Policy {
            policies: vec![KeyPolicy {
                fields: vec![Field::RecipientDomain],
                default: Props {
                    concurrency: Some(3),
                    ..Props::default()
                },
                conditions: vec![],
            }],
            ..Policy::default()
        };
        let sched = SchedConfig {
            shaping: Some(Arc::new(policy)),
            ..SchedConfig::default()
        };
        World::with_sched(settings(), sched)
    }

    fn ask(w: &mut World, body: Request) -> Response {
        w.handle(Event::Control {
            client: 1,
            request: 1,
            body,
        });
        w.replies.pop().expect("an answer")
    }

    #[test]
    fn a_suspension_is_logged_saved_listed_held_to_and_lifted() {
        let mut w = shaped();
        let r = ask(
            &mut w,
            Request::Suspend {
                when: vec![("recipientdomain".into(), "slow.test".into())],
                for_secs: Some(30),
                tag: Some("their maintenance".into()),
            },
        );
        let Response::Suspended(Ok(id)) = r else {
            panic!("{r:?}")
        };
        assert!(w.log.iter().any(|(_, l)| l.contains(&format!(
            "shaping: recipientdomain=slow.test suspended by the administrator for 30s, hold id {id} (their maintenance)"
        ))), "{:?}", w.log);
        assert_eq!(w.saved_holds.len(), 1);
        assert!(w.saved_holds[0].contains("recipientdomain=slow.test"));

        // Mail for the domain waits, without attempts or deferrals.
        w.arrive("a@s.test", &["x@slow.test"]);
        w.arrive("a@s.test", &["y@fast.test"]);
        w.route_all(&[]);
        w.deliver_all(|_| 250);
        let opened: Vec<String> = w
            .history
            .iter()
            .filter_map(|(_, a)| match a {
                crate::testkit::Asked::Agent(ipc::delivery::Request::Open { nexthop, .. }) => {
                    Some(nexthop.clone())
                }
                _ => None,
            })
            .collect();
        assert_eq!(opened, ["fast.test"]);
        assert!(!w
            .log
            .iter()
            .any(|(_, l)| l.contains("slow.test") && l.contains("deferred")));

        let Response::Holds(Ok(h)) = ask(&mut w, Request::Suspensions) else {
            panic!()
        };
        assert_eq!((h.len(), h[0].id, h[0].remaining), (1, id, Some(30)));
        let Response::Policy(Ok(p)) = ask(&mut w, Request::Policy) else {
            panic!()
        };
        assert!(p.keys.iter().any(|k| k.key == "recipientdomain=fast.test"));

        // A restarted queue manager gets it back from what was saved.
        let mut again = shaped();
        assert_eq!(again.qm.restore_holds(T0, &w.saved_holds[0]), Ok(1));
        let Response::Holds(Ok(h2)) = ask(&mut again, Request::Suspensions) else {
            panic!()
        };
        assert_eq!(h2[0].id, id);

        assert_eq!(ask(&mut w, Request::Resume { id }), Response::Resumed(true));
        assert_eq!(w.saved_holds.last().map(String::as_str), Some(""));
        w.deliver_all(|_| 250);
        assert!(w.history.iter().any(|(_, a)| matches!(a,
            crate::testkit::Asked::Agent(ipc::delivery::Request::Open { nexthop, .. }) if nexthop == "slow.test")));
        assert_eq!(
            ask(&mut w, Request::Resume { id }),
            Response::Resumed(false)
        );
        let bad = ask(
            &mut w,
            Request::Suspend {
                when: vec![("colour".into(), "red".into())],
                for_secs: None,
                tag: None,
            },
        );
        assert!(matches!(bad, Response::Suspended(Err(e)) if e.contains("unknown field")));
    }

    #[test]
    fn without_a_policy_the_requests_say_so() {
        let mut w = World::new(settings());
        let r = ask(&mut w, Request::Policy);
        assert!(matches!(r, Response::Policy(Err(e)) if e.contains("policy_file")));
    }
}
