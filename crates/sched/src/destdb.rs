//! destdb: the per-host table of retry times and recent connections (fanf).
//!
//! A host is an address and a port (see [`crate::host_key`]): next hops on
//! two ports of one address are independent, as in Postfix, so a dead port
//! does not hold back mail for a live one.
//! Hosts are classified for a new connection as active (has connections),
//! idle (has an idle connection; decided by the caller, who knows the
//! connections), closed (we had connections; `last_closed` says when),
//! unused (absent or forgotten), or retry (failed; skipped until
//! `retry_at`). The garbage collector forgets closed and retry records older
//! than `destdb_record_lifetime`, so a long-closed host becomes unused again,
//! and drops hosts no destination refers to. Panics: never.

use crate::event::Status;
use crate::ids::HostId;
use crate::slab::Slab;
use crate::time::Time;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// One host record.
#[derive(Clone, Debug)]
pub struct HostRec {
    /// Host name.
    pub name: Arc<str>,
    /// Connections open or opening to it.
    pub conns: u32,
    /// When its last connection closed.
    pub last_closed: Option<Time>,
    /// Skipped for new connections until then.
    pub retry_at: Option<Time>,
    /// Why the connection that put it in retry failed (none for news from
    /// another instance): mail deferred while it is skipped says this.
    pub last_error: Option<Status>,
    /// Destinations listing it.
    pub refs: u32,
}

/// How a host looks to the connection scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostClass {
    /// Has open connections.
    Active(u32),
    /// Had connections; closed at this time.
    Closed(Time),
    /// Never used, or forgotten.
    Unused,
    /// Failed earlier and its retry time has passed.
    Retry,
    /// Failed and not yet due: skip.
    Skip,
}

/// The host table.
#[derive(Clone, Debug, Default)]
pub struct DestDb {
    // Shares the name with the record: one allocation per host.
    by_name: BTreeMap<Arc<str>, HostId>,
    /// Records.
    pub hosts: Slab<HostId, HostRec>,
}

impl DestDb {
    /// Finds or creates the record and takes a reference for a destination.
    pub fn acquire(&mut self, name: &str) -> HostId {
        if let Some(&h) = self.by_name.get(name) {
            self.hosts[h].refs += 1;
            return h;
        }
        let name: Arc<str> = name.into();
        let h = self.hosts.insert(HostRec {
            name: name.clone(),
            conns: 0,
            last_closed: None,
            retry_at: None,
            last_error: None,
            refs: 1,
        });
        self.by_name.insert(name, h);
        h
    }

    /// Drops a destination's reference (the record stays until GC).
    pub fn release(&mut self, h: HostId) {
        let r = &mut self.hosts[h];
        r.refs = r.refs.saturating_sub(1);
    }

    /// Classification at `now` (a host with connections is active even if in retry).
    pub fn classify(&self, h: HostId, now: Time) -> HostClass {
        let r = &self.hosts[h];
        if r.conns > 0 {
            return HostClass::Active(r.conns);
        }
        match r.retry_at {
            Some(t) if t > now => return HostClass::Skip,
            Some(_) => return HostClass::Retry,
            None => {}
        }
        match r.last_closed {
            Some(t) => HostClass::Closed(t),
            None => HostClass::Unused,
        }
    }

    /// A connection to the host opened (or is opening).
    pub fn opened(&mut self, h: HostId) {
        self.hosts[h].conns += 1;
    }

    /// A connection to the host ended.
    pub fn closed(&mut self, h: HostId, now: Time) {
        let r = &mut self.hosts[h];
        r.conns = r.conns.saturating_sub(1);
        r.last_closed = Some(now);
    }

    /// The host could not be reached (`why`): skip it for `d` (no-op for zero).
    pub fn failed(&mut self, h: HostId, now: Time, d: Duration, why: &Status) -> Option<Time> {
        if d.is_zero() {
            return None;
        }
        let t = now + d;
        let r = &mut self.hosts[h];
        r.retry_at = Some(t);
        r.last_error = Some(why.clone());
        Some(t)
    }

    /// Skips the host called `name` until `until`, if it is known here
    /// (news from another instance, at `now`); whether it is.
    pub fn retry_until(&mut self, name: &str, until: Time, now: Time) -> bool {
        let Some(&h) = self.by_name.get(name) else {
            return false;
        };
        let r = &mut self.hosts[h];
        // An error seen here in a retry that has ended no longer says why
        // the host is skipped: the deferral then names the news instead.
        if r.retry_at.is_none_or(|t| t <= now) {
            r.last_error = None;
        }
        r.retry_at = Some(r.retry_at.map_or(until, |t| t.max(until)));
        true
    }

    /// Forgets every retry record (an operator flush).
    pub fn forget_retries(&mut self) {
        let ids: Vec<HostId> = self.hosts.iter().map(|(h, _)| h).collect();
        for h in ids {
            self.hosts[h].retry_at = None;
            self.hosts[h].last_error = None;
        }
    }

    /// The host worked: clear its retry record.
    pub fn worked(&mut self, h: HostId) {
        self.hosts[h].retry_at = None;
        self.hosts[h].last_error = None;
    }

    /// Host name.
    pub fn name(&self, h: HostId) -> &str {
        &self.hosts[h].name
    }

    /// Forgets stale closed/retry records and unreferenced hosts; returns how many hosts were dropped.
    pub fn gc(&mut self, now: Time, lifetime: Duration) -> usize {
        let mut drop = Vec::new();
        let ids: Vec<HostId> = self.hosts.iter().map(|(h, _)| h).collect();
        for h in ids {
            let r = &mut self.hosts[h];
            if r.last_closed.is_some_and(|t| t + lifetime <= now) {
                r.last_closed = None;
            }
            if r.retry_at.is_some_and(|t| t + lifetime <= now) {
                r.retry_at = None;
                r.last_error = None;
            }
            if r.refs == 0 && r.conns == 0 && r.last_closed.is_none() && r.retry_at.is_none() {
                drop.push(h);
            }
        }
        for h in &drop {
            let r = self.hosts.remove(*h);
            self.by_name.remove(&r.name);
        }
        drop.len()
    }

    /// Number of host records.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// True when the table is empty.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_lifecycle() {
        let mut db = DestDb::default();
        let h = db.acquire("mx1.example");
        assert_eq!(db.classify(h, Time(0)), HostClass::Unused);
        db.opened(h);
        assert_eq!(db.classify(h, Time(0)), HostClass::Active(1));
        db.closed(h, Time(5));
        assert_eq!(db.classify(h, Time(6)), HostClass::Closed(Time(5)));
        let why = Status::new(crate::event::StatusCode::NO_ANSWER, "refused");
        assert_eq!(
            db.failed(h, Time(10), Duration::from_millis(100), &why),
            Some(Time(110))
        );
        assert_eq!(db.classify(h, Time(50)), HostClass::Skip);
        assert_eq!(db.classify(h, Time(110)), HostClass::Retry);
        db.worked(h);
        assert_eq!(db.classify(h, Time(111)), HostClass::Closed(Time(5)));
        assert_eq!(db.failed(h, Time(0), Duration::ZERO, &why), None);
    }

    #[test]
    fn gc_forgets_old_records_and_unreferenced_hosts() {
        let mut db = DestDb::default();
        let a = db.acquire("a");
        let b = db.acquire("b");
        db.opened(a);
        db.closed(a, Time(0));
        db.release(b);
        assert_eq!(
            db.gc(Time(10), Duration::from_millis(100)),
            1,
            "b unreferenced and blank"
        );
        assert_eq!(db.classify(a, Time(10)), HostClass::Closed(Time(0)));
        assert_eq!(db.gc(Time(100), Duration::from_millis(100)), 0);
        assert_eq!(
            db.classify(a, Time(100)),
            HostClass::Unused,
            "closed record expired"
        );
        db.release(a);
        assert_eq!(db.gc(Time(200), Duration::from_millis(100)), 1);
        assert!(db.is_empty());
    }

    #[test]
    fn news_after_an_ended_retry_forgets_the_old_local_error() {
        let mut db = DestDb::default();
        let h = db.acquire("mx1.example");
        let why = Status::new(crate::event::StatusCode::NO_ANSWER, "refused");
        db.failed(h, Time(10), Duration::from_millis(100), &why);
        // News while the local retry runs: the local error still explains it.
        assert!(db.retry_until("mx1.example", Time(500), Time(50)));
        assert_eq!(db.hosts[h].last_error.as_ref(), Some(&why));
        // News after that retry ended: the old error is not quoted again.
        assert!(db.retry_until("mx1.example", Time(2000), Time(900)));
        assert_eq!(db.hosts[h].last_error, None);
        assert_eq!(db.classify(h, Time(1000)), HostClass::Skip);
        assert!(!db.retry_until("unknown.example", Time(2000), Time(900)));
    }
}
