//! Traffic shaping in the scheduler: the field values of an entry and of a
//! connection, the choice of source address, and the hooks that keep the
//! [`Shaper`] counting.
//!
//! A connection is bound when it opens to the values of the entry that
//! opened it (tenant, job, recipient domain, grouping, transport) plus its
//! source address and remote host; it holds one slot of each of that
//! binding's keys from connect to close, idle or not, and carries only
//! entries whose message-side values are the same. New connections take
//! the addresses of the message's source pool in turn, skipping those
//! whose keys are suspended or full. Panics: never.

use crate::destination::Park;
use crate::hostparts::host_parts;
use crate::ids::{ConnId, DestId, EntryId, HostId, KeyId, TransportId};
use crate::sched::{Scheduler, Timer};
use crate::shapestate::{Refusal, Side};
use crate::time::Time;
use shaping::{BindId, Binding, Block, Field, Shaper};

use std::net::IpAddr;
use std::sync::Arc;

impl Scheduler {
    /// The side of entry `e` (only fields some policy uses, so that fields
    /// nobody counts by never split connections), cached per destination,
    /// tenant, job and sender domain.
    pub(crate) fn entry_side(&mut self, e: EntryId) -> Option<Arc<Side>> {
        let sh = self.shaping.as_ref()?;
        let entry = &self.entries[e];
        let (d, m) = (entry.dest, entry.message);
        let own_key = self.side.domains.get(&e).copied();
        let none = u32::MAX;
        let tenant = self.msgs[m].tenant();
        let job = self.side.jobs.get(&m).copied();
        let sdom = self.side.sender_domains.get(&m).copied();
        let key = (
            d,
            tenant.map_or(none, |k| k.0),
            job.map_or(none, |k| k.0),
            sdom.map_or(none, |k| k.0),
            own_key.map_or(none, |k| k.0),
        );
        let name = |k: Option<KeyId>| k.map_or("", |k| self.keys.name(k));
        let names = [name(tenant), name(job), name(sdom), name(own_key)];
        if let Some(x) = sh.cache.get(&key) {
            if x.names.iter().zip(names).all(|(a, b)| **a == *b) {
                return Some(Arc::clone(x));
            }
        }
        let names = names.map(Box::<str>::from);
        let own: Option<Box<str>> = own_key.map(|k| Box::from(self.keys.name(k)));
        let used = sh.used;
        let dest = &self.dests[d];
        let nexthop_domain = if dest.nexthop.starts_with('[') {
            ""
        } else {
            &*dest.nexthop
        };
        let domain: &str = own.as_deref().unwrap_or(nexthop_domain);
        let policy = Arc::clone(sh.shaper.policy());
        let grouping = match (&own, sh.groupings.get(&d)) {
            (None, Some(g)) => g.clone(),
            _ => {
                // MX names count only where the nexthop is the recipient's
                // own domain, not behind a relayhost.
                let mx: Vec<&str> = if own.is_none() && !nexthop_domain.is_empty() {
                    dest.hosts
                        .all()
                        .map(|h| host_parts(self.hosts.name(h)).0)
                        .collect()
                } else {
                    Vec::new()
                };
                policy.grouping_of(domain, &mx).map(Box::from)
            }
        };
        let tname = &self.transports[dest.transport.0 as usize].cfg;
        let tenant_name = tenant.map_or("", |t| self.keys.name(t));
        let pool = policy
            .pool_for(
                tenant_name,
                sdom.map_or("", |k| self.keys.name(k)),
                grouping.as_deref().unwrap_or(""),
                tname.source_pool.as_deref(),
            )
            .map(|p| Box::from(p.id.as_str()));
        let mut b = Binding::default();
        let mut set = |f: Field, v: &str| {
            if used.contains(f) {
                b.set(f, v);
            }
        };
        set(Field::Transport, &tname.name);
        set(Field::RecipientDomain, domain);
        set(Field::Grouping, grouping.as_deref().unwrap_or(""));
        set(Field::TenantId, tenant_name);
        set(Field::JobId, job.map_or("", |k| self.keys.name(k)));
        let sh = self.shaping.as_mut()?;
        if own.is_none() {
            sh.groupings.insert(d, grouping);
        }
        let next = sh.next_side;
        let id = *sh.sides.entry((b.clone(), pool.clone())).or_insert(next);
        if id == next {
            sh.next_side += 1;
        }
        let side = Arc::new(Side {
            id,
            binding: b,
            pool,
            names,
        });
        sh.cache.insert(key, Arc::clone(&side));
        Some(side)
    }

    /// Whether connection `c` may carry an entry of side `side`.
    pub(crate) fn compatible(&self, c: ConnId, side: Option<u32>) -> bool {
        match side {
            Some(s) => self.conns[c].side == s,
            None => true,
        }
    }

    /// The source addresses a new connection for `side` may take, in the
    /// order to try them, and the pool they come from.
    fn candidates(
        &self,
        t: TransportId,
        side: Option<&Side>,
    ) -> (Option<(String, usize)>, Vec<Option<IpAddr>>) {
        let cfg = &self.transports[t.0 as usize].cfg;
        let fallback = || {
            let bind = cfg.bind_address.as_deref().and_then(|a| a.parse().ok());
            (None, vec![bind])
        };
        let (Some(sh), Some(id)) = (self.shaping.as_ref(), side.and_then(|s| s.pool.as_deref()))
        else {
            return fallback();
        };
        match sh.shaper.policy().sources.iter().find(|p| p.id == id) {
            Some(p) if !p.localip.is_empty() => {
                let start = sh.cursor.get(&p.id).copied().unwrap_or(0) % p.localip.len();
                let n = p.localip.len();
                let order = (0..n).map(|i| Some(p.localip[(start + i) % n])).collect();
                (Some((p.id.clone(), start)), order)
            }
            _ => fallback(),
        }
    }

    /// Chooses the source address of a new connection of entry `e` to host
    /// `h`, binding it: the first of the pool's addresses in turn whose
    /// keys all allow a connection now.
    pub(crate) fn choose_source(
        &mut self,
        now: Time,
        e: EntryId,
        h: HostId,
        side: Option<&Side>,
    ) -> Result<(Option<IpAddr>, Option<BindId>), Refusal> {
        let t = self.dests[self.entries[e].dest].transport;
        let (pool, order) = self.candidates(t, side);
        let Some(side) = side.filter(|_| self.shaping.is_some()) else {
            return Ok((order[0], None));
        };
        let host = self.hosts.name(h).to_string();
        let mut first_full = None;
        let mut until: Option<u64> = None;
        for (i, ip) in order.iter().enumerate() {
            let Some(sh) = self.shaping.as_mut() else {
                break;
            };
            let mut b = side.binding.clone();
            let text = ip.map(|a| a.to_string()).unwrap_or_default();
            if sh.used.contains(Field::LocalIp) {
                b.set(Field::LocalIp, &text);
            }
            let (mx, addr) = host_parts(&host);
            if sh.used.contains(Field::RemoteMx) {
                b.set(Field::RemoteMx, mx);
            }
            if sh.used.contains(Field::RemoteIp) {
                b.set(Field::RemoteIp, addr);
            }
            let bind = sh.shaper.bind(&b);
            // A source whose rates have no token now would open a
            // connection that could carry nothing: try the next one.
            let open = sh.shaper.may_open(now.0, bind);
            let open = open.and_then(|()| sh.shaper.can_send(now.0, bind).map(|_| ()));
            match open {
                Ok(()) => {
                    if let Some((p, start)) = pool {
                        sh.cursor.insert(p, start + i + 1);
                    }
                    return Ok((*ip, Some(bind)));
                }
                Err(Block::Full(k)) => {
                    first_full.get_or_insert(k);
                }
                Err(Block::Until(at)) => until = Some(until.map_or(at, |u| u.min(at))),
                Err(Block::Suspended) => {}
            }
        }
        // A source that has room at a known time is a surer thing than a
        // slot someone else holds.
        if let Some(at) = until {
            return Err(Refusal::Until(Time(at)));
        }
        // A slot held by an idle connection (of another destination of the
        // same grouping, say) is given up for mail that needs it.
        if let Some(k) = first_full {
            let d = self.entries[e].dest;
            if self.close_idle_holding(now, k, d, side.id) {
                return self.choose_source(now, e, h, Some(side));
            }
        }
        Err(Refusal::Wait)
    }

    /// Closes one idle connection holding a slot of key `k`, other than
    /// destination `d`'s own for this mail (which the dispatcher passed
    /// over because its rates have no token: closing it would gain
    /// nothing); false if there is none.
    fn close_idle_holding(&mut self, now: Time, k: shaping::KeyIdx, d: DestId, side: u32) -> bool {
        let Some(sh) = self.shaping.as_ref() else {
            return false;
        };
        let idle = self
            .transports
            .iter()
            .flat_map(|t| t.idle.iter())
            .find(|&&(_, c)| {
                self.conns.get(c).is_some_and(|x| {
                    x.bind.is_some_and(|b| sh.shaper.has_key(b, k))
                        && !(x.dest == d && x.side == side)
                })
            });
        match idle {
            Some(&(_, c)) => {
                self.close_conn(now, c);
                true
            }
            None => false,
        }
    }

    /// Whether connection `c`'s rates have a token now; if not, notes in
    /// `wait` the earliest time one of the skipped connections will.
    pub(crate) fn sendable(&self, now: Time, c: ConnId, wait: &mut Option<Time>) -> bool {
        let (Some(sh), Some(b)) = (self.shaping.as_ref(), self.conns[c].bind) else {
            return true;
        };
        match sh.shaper.can_send(now.0, b) {
            Ok(_) => true,
            Err(Block::Until(t)) => {
                *wait = Some(wait.map_or(Time(t), |w| w.min(Time(t))));
                false
            }
            Err(_) => false,
        }
    }

    /// Takes the transaction tokens of a connection's binding.
    pub(crate) fn may_send(&mut self, now: Time, bind: Option<BindId>) -> Result<(), Refusal> {
        match (self.shaping.as_mut(), bind) {
            (Some(sh), Some(b)) => sh.shaper.may_send(now.0, b).map_err(Refusal::from),
            _ => Ok(()),
        }
    }

    /// Whether a connection's mail is suspended now (it then carries no more).
    pub(crate) fn held(&self, now: Time, c: ConnId) -> bool {
        match (self.shaping.as_ref(), self.conns[c].bind) {
            (Some(sh), Some(b)) => sh.shaper.is_suspended(now.0, b),
            _ => false,
        }
    }

    /// Parks a destination until a shaped connection closes or the limits change.
    pub(crate) fn park_shaping(&mut self, d: DestId) {
        if let Some(sh) = self.shaping.as_mut() {
            sh.waiters.push(d);
        }
    }

    /// Wakes every destination waiting for shaping room.
    pub(crate) fn wake_shaping(&mut self) {
        let Some(sh) = self.shaping.as_mut() else {
            return;
        };
        let waiters = std::mem::take(&mut sh.waiters);
        for d in waiters {
            if self.dests.get(d).is_some_and(|x| x.park == Park::Shaping) {
                self.unpark(d);
            }
        }
    }

    /// Arms the timer for the next rise of the limits (a hold ending or ramping).
    pub(crate) fn arm_shaping(&mut self, now: Time) {
        let Some(sh) = self.shaping.as_mut() else {
            return;
        };
        let Some(at) = sh.shaper.next_change(now.0).map(Time) else {
            return;
        };
        if sh.timer.is_some_and(|t| t <= at && t > now) {
            return;
        }
        sh.timer = Some(at);
        self.timers.insert((at, Timer::Shaping));
    }

    /// The change timer fired.
    pub(crate) fn shaping_timer(&mut self, now: Time) {
        if let Some(sh) = self.shaping.as_mut() {
            if sh.timer.is_some_and(|t| t <= now) {
                sh.timer = None;
            }
        }
        self.wake_shaping();
        self.arm_shaping(now);
    }

    /// A server's refusals on a shaped connection, those of one transaction
    /// or one handshake, go through the policy's reply rules, matched on the
    /// replies as the server sent them (`421 4.7.0 text`, or `550 text`
    /// without an enhanced code); a rule counts once for them all. Only a
    /// remote reply gets here: Sluice's own failures have none, and never
    /// match.
    pub(crate) fn shaping_reply(&mut self, now: Time, c: ConnId, replies: &[mail::RemoteReply]) {
        let said: Vec<String> = replies
            .iter()
            .filter(|r| r.code >= 400)
            .map(mail::RemoteReply::said)
            .collect();
        if said.is_empty() {
            return;
        }
        let said: Vec<&str> = said.iter().map(String::as_str).collect();
        let Some(bind) = self.conns.get(c).and_then(|x| x.bind) else {
            return;
        };
        let Some(sh) = self.shaping.as_mut() else {
            return;
        };
        let fired = sh.shaper.replies(now.0, bind, &said);
        for t in fired {
            let hold = sh
                .shaper
                .holds(now.0)
                .iter()
                .find(|h| h.id == t.hold)
                .cloned();
            if let Some(hold) = hold {
                self.actions.push_back(crate::event::Action::Notice(
                    crate::event::Notice::Suspended { hold },
                ));
            }
        }
        self.arm_shaping(now);
    }

    /// Applies an operator's suspension.
    pub(crate) fn suspend(
        &mut self,
        now: Time,
        when: Vec<(Field, String)>,
        until: Option<Time>,
        tag: Option<String>,
    ) {
        let Some(sh) = self.shaping.as_mut() else {
            return;
        };
        let id = sh.shaper.suspend(when, until.map(|t| t.0), tag);
        sh.refresh_used();
        if let Some(hold) = sh.shaper.holds(now.0).iter().find(|h| h.id == id).cloned() {
            self.actions.push_back(crate::event::Action::Notice(
                crate::event::Notice::Suspended { hold },
            ));
        }
        self.arm_shaping(now);
    }

    /// Lifts a hold.
    pub(crate) fn resume(&mut self, now: Time, id: u64) {
        let Some(sh) = self.shaping.as_mut() else {
            return;
        };
        if sh.shaper.resume(id) {
            self.actions.push_back(crate::event::Action::Notice(
                crate::event::Notice::Resumed { id },
            ));
        }
        self.wake_all_parked(now);
    }

    /// Limits changed everywhere (reload, resume): every parked destination looks again.
    pub(crate) fn wake_all_parked(&mut self, now: Time) {
        let parked: Vec<DestId> = self
            .dests
            .iter()
            .filter(|(_, d)| matches!(d.park, Park::Until(_) | Park::Shaping))
            .map(|(i, _)| i)
            .collect();
        for d in parked {
            self.unpark(d);
        }
        if let Some(sh) = self.shaping.as_mut() {
            sh.waiters.clear();
        }
        self.arm_shaping(now);
    }

    /// The shaping state, for `sluice policy show` and metrics.
    pub fn shaper(&mut self) -> Option<&mut Shaper> {
        self.shaping.as_mut().map(|s| &mut s.shaper)
    }

    /// The shaping state, read only.
    pub fn shaper_ref(&self) -> Option<&Shaper> {
        self.shaping.as_ref().map(|s| &s.shaper)
    }

    /// A destination's hosts changed: its grouping is found again.
    pub(crate) fn shaping_hosts_changed(&mut self, d: DestId) {
        if let Some(sh) = self.shaping.as_mut() {
            sh.groupings.remove(&d);
            sh.cache.retain(|k, _| k.0 != d);
        }
    }

    /// Forgets shaping state nobody uses (the scheduler's GC).
    pub(crate) fn shaping_gc(&mut self, now: Time) {
        let dests = &self.dests;
        let live: std::collections::BTreeSet<u32> =
            self.conns.iter().map(|(_, c)| c.side).collect();
        if let Some(sh) = self.shaping.as_mut() {
            sh.cache.clear();
            sh.sides.retain(|_, id| live.contains(id));
            sh.shaper.gc(now.0, |_| false);
            sh.groupings.retain(|d, _| dests.contains(*d));
            sh.waiters
                .retain(|d| dests.get(*d).is_some_and(|x| x.park == Park::Shaping));
        }
    }
}

#[cfg(test)]
#[path = "shape_tests.rs"]
mod tests;
