//! The instance's side: its share of the cluster's limits, sans-IO.
//!
//! [`Client`] keeps, per shared key, the connections this instance has
//! open and the slots the coordinator granted, and per shared rate the
//! allotment it was given; the shaper reaches it through [`Handle`], the
//! [`shaping::Share`] installed in qmgr's shaper, while qmgr's IO shell
//! feeds it the coordinator's messages and its own clock. Linked, a key's
//! concurrency is the slots granted (less releases the coordinator has
//! not read yet, so a grant crossing a release never lets one connection
//! too many open); `cluster_shared_concurrency = no` makes it the limit
//! divided by the instances (at least 1). Cut off, or silent for
//! [`ClientConfig::lost_after_ms`] (3 s), it falls back to dividing every
//! limit by the last known count, at least 1 connection each (before any
//! count is known: 1 connection and 1 token per interval), keeps its open
//! connections, and reconnects after a jittered exponential back-off
//! capped at [`ClientConfig::backoff_max_ms`]; its hello re-syncs all it
//! holds in one exchange. Keys are numbered on the wire; a number whose
//! key has had no connection, want or rate use for
//! [`ClientConfig::forget_after_ms`] is retired (`Forget`) and reused, so
//! the tables hold the keys in use, not every recipient domain ever seen.
//! It never reads a clock: `now` is passed in (the shaper's calls, which
//! carry none, are dated by the last time the shell passed).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shaping::{KeyName, Rate, Share};

use crate::proto::{
    DestNews, Held, KeyId, RateUse, ToCoord, ToInstance, WireRate, MAX_NAMES, VERSION,
};
use crate::rates;
use crate::Ms;

/// The reconnect back-off's cap: an instance cut off comes back within
/// this long of the coordinator's return.
pub const BACKOFF_CAP_MS: Ms = 10_000;

/// The instance's settings.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// This instance's `myhostname`.
    pub name: String,
    /// Heartbeat interval.
    pub heartbeat_ms: Ms,
    /// Silence after which the coordinator counts as lost.
    pub lost_after_ms: Ms,
    /// The first reconnect waits up to this long.
    pub backoff_min_ms: Ms,
    /// Back-off cap.
    pub backoff_max_ms: Ms,
    /// Slots granted by the coordinator (else divide-by-n).
    pub shared_concurrency: bool,
    /// Seed of the back-off jitter (the shell gives pid and time).
    pub seed: u64,
    /// A key unused this long is forgotten (its number retired).
    pub forget_after_ms: Ms,
}

impl ClientConfig {
    /// Defaults for `name`: 1 s heartbeat, lost after 3 s, back-off up to 2 s
    /// at first, doubling to 10 s.
    pub fn new(name: &str, seed: u64) -> ClientConfig {
        ClientConfig {
            name: name.to_string(),
            heartbeat_ms: 1000,
            lost_after_ms: 3000,
            backoff_min_ms: 2000,
            backoff_max_ms: BACKOFF_CAP_MS,
            shared_concurrency: true,
            seed,
            forget_after_ms: 600_000,
        }
    }
}

/// The link to the coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// No connection; the next attempt is at `retry_at`.
    Down {
        /// When to connect again.
        retry_at: Ms,
    },
    /// The shell is connecting (TCP and TLS).
    Connecting {
        /// Since when.
        since: Ms,
    },
    /// Hello sent, no welcome yet.
    Hello,
    /// Welcomed: grants are in force.
    Linked,
}

/// What the client tells its shell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientEvent {
    /// Welcomed by the coordinator.
    Linked {
        /// Instances connected.
        instances: u32,
    },
    /// The link is lost or refused: limits are divided by the last count.
    Degraded {
        /// Why, for the log.
        reason: String,
        /// The count used.
        instances: u32,
    },
    /// Close the transport (the coordinator is silent or refused us).
    Close,
    /// The instance count changed.
    Count {
        /// Instances connected.
        instances: u32,
    },
    /// Another instance's destination knowledge.
    News {
        /// The instance.
        from: String,
        /// What it said.
        news: DestNews,
    },
}

#[derive(Debug, Default)]
struct SlotState {
    limit: u32,
    conns: u32,
    granted: u32,
    /// Message numbers of releases the coordinator had not read at the
    /// last grant.
    releases: Vec<u64>,
    wanting: bool,
    /// Message number of the last want.
    want_sent: u64,
    /// When the shaper last touched it.
    used_at: Ms,
}

impl SlotState {
    fn effective(&self) -> u32 {
        self.granted.saturating_sub(self.releases.len() as u32)
    }
}

#[derive(Debug)]
struct RateState {
    limit: WireRate,
    used: u32,
    starved: bool,
    /// A starved report went out this period.
    told: bool,
    allot: Option<WireRate>,
    /// When the shaper last touched it (or the coordinator divided it).
    used_at: Ms,
}

impl RateState {
    fn new(limit: WireRate, now: Ms) -> RateState {
        RateState {
            limit,
            used: 0,
            starved: false,
            told: false,
            allot: None,
            used_at: now,
        }
    }
}

/// A snapshot for `sluice cluster status` and the metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientStatus {
    /// The link.
    pub link: Link,
    /// Instances last known (0: never known).
    pub instances: u32,
    /// Slots granted per concurrency key: (key, cluster limit, this
    /// instance's share, connections open).
    pub slots: Vec<(String, u32, u32, u32)>,
    /// Rates: (key, cluster rate, this instance's part).
    pub rates: Vec<(String, WireRate, WireRate)>,
    /// Times the link was lost.
    pub losses: u64,
    /// The instances connected, as last announced.
    pub names: Vec<String>,
}

/// The instance's side of clusterd.
#[derive(Debug)]
pub struct Client {
    cfg: ClientConfig,
    link: Link,
    /// Last count heard; 0 before any.
    instances: u32,
    /// Messages sent on this connection (the hello is 1).
    sent: u64,
    last_heard: Ms,
    next_beat: Ms,
    attempt: u32,
    rng: u64,
    slots: BTreeMap<String, SlotState>,
    rates: BTreeMap<String, RateState>,
    out: VecDeque<ToCoord>,
    events: VecDeque<ClientEvent>,
    changed: bool,
    losses: u64,
    /// The instances connected, as last announced.
    names: Vec<String>,
    /// The time last passed in, for the shaper's calls.
    clock: Ms,
    /// This side's number of each key name (kept across connections
    /// while the key is in use).
    ids: HashMap<String, KeyId>,
    /// Names by number (empty: retired, in `free`), and their last use.
    keys: Vec<(String, Ms)>,
    /// Retired numbers, reused first.
    free: Vec<KeyId>,
    next_sweep: Ms,
    /// Numbers already named on this connection.
    named: Vec<bool>,
    /// The coordinator's numbers on this connection.
    theirs: HashMap<KeyId, String>,
}

impl Client {
    /// A client that may connect at once.
    pub fn new(cfg: ClientConfig) -> Client {
        let rng = cfg.seed | 1;
        Client {
            cfg,
            link: Link::Down { retry_at: 0 },
            instances: 0,
            sent: 0,
            last_heard: 0,
            next_beat: 0,
            attempt: 0,
            rng,
            slots: BTreeMap::new(),
            rates: BTreeMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            changed: false,
            losses: 0,
            names: Vec::new(),
            clock: 0,
            ids: HashMap::new(),
            keys: Vec::new(),
            free: Vec::new(),
            next_sweep: 0,
            named: Vec::new(),
            theirs: HashMap::new(),
        }
    }

    /// The link's state.
    pub fn link(&self) -> Link {
        self.link
    }

    /// Whether limits come from the coordinator now (else the fallback).
    pub fn linked(&self) -> bool {
        self.link == Link::Linked
    }

    /// Whether the shell should start connecting at `now`.
    pub fn should_connect(&self, now: Ms) -> bool {
        matches!(self.link, Link::Down { retry_at } if now >= retry_at)
    }

    /// The shell started connecting.
    pub fn connecting(&mut self, now: Ms) {
        self.link = Link::Connecting { since: now };
    }

    /// The transport is up: say hello with everything held.
    pub fn connected(&mut self, now: Ms) {
        self.clock = now;
        self.link = Link::Hello;
        self.sent = 0;
        self.last_heard = now;
        self.out.clear();
        self.named.clear();
        self.theirs.clear();
        for s in self.slots.values_mut() {
            // The hello (message 1) carries the want.
            s.want_sent = u64::from(s.wanting);
        }
        let held: Vec<(String, Held)> = self
            .slots
            .iter()
            .filter(|(_, s)| s.conns > 0 || s.wanting)
            .map(|(k, s)| {
                let h = Held {
                    key: 0,
                    limit: s.limit,
                    conns: s.conns,
                    wants: s.wanting,
                };
                (k.clone(), h)
            })
            .collect();
        let rates = self.take_rate_use(false);
        // The hello names every key it carries: no message may come first.
        let mut keys = Vec::new();
        let mut number = |c: &mut Client, name: &str| {
            let id = c.id_of(name);
            if !c.is_named(id) {
                c.mark_named(id);
                keys.push((id, name.to_string()));
            }
            id
        };
        let held = held
            .into_iter()
            .map(|(k, h)| Held {
                key: number(self, &k),
                ..h
            })
            .collect();
        let rates = rates
            .into_iter()
            .map(|(k, u)| RateUse {
                key: number(self, &k),
                ..u
            })
            .collect();
        self.send(ToCoord::Hello {
            version: VERSION,
            name: self.cfg.name.clone(),
            known: self.instances,
            keys,
            held,
            rates,
        });
    }

    /// The transport failed or closed.
    pub fn lost(&mut self, now: Ms, reason: &str) {
        self.clock = now;
        let was = self.link;
        let delay = self.backoff();
        self.link = Link::Down {
            retry_at: now + delay,
        };
        self.out.clear();
        for s in self.slots.values_mut() {
            s.releases.clear();
        }
        if matches!(was, Link::Linked | Link::Hello) {
            self.losses += 1;
            self.changed = true;
            self.events.push_back(ClientEvent::Degraded {
                reason: reason.to_string(),
                instances: self.instances,
            });
        }
    }

    /// A message from the coordinator.
    pub fn handle(&mut self, now: Ms, msg: ToInstance) {
        self.last_heard = now;
        self.clock = now;
        match msg {
            ToInstance::Welcome { instances, .. } => {
                self.link = Link::Linked;
                self.attempt = 0;
                self.instances = instances;
                self.next_beat = now + self.cfg.heartbeat_ms;
                // Releases sent after the hello stay in flight: the grants
                // that follow the welcome say whether they were read.
                for s in self.slots.values_mut() {
                    s.granted = 0;
                }
                for r in self.rates.values_mut() {
                    r.allot = None;
                }
                self.changed = true;
                self.events.push_back(ClientEvent::Linked { instances });
            }
            ToInstance::Refused { reason } => {
                self.events.push_back(ClientEvent::Close);
                self.lost(now, &format!("refused: {reason}"));
            }
            ToInstance::Count { instances, names } => {
                self.names = names;
                if instances != self.instances {
                    self.instances = instances;
                    self.changed = true;
                    self.events.push_back(ClientEvent::Count { instances });
                }
            }
            ToInstance::Key { id, name } => {
                if self.theirs.len() >= MAX_NAMES {
                    self.events.push_back(ClientEvent::Close);
                    self.lost(now, "clusterd named too many keys");
                    return;
                }
                self.theirs.insert(id, name);
            }
            ToInstance::Forget { id } => {
                let Some(name) = self.theirs.remove(&id) else {
                    self.events.push_back(ClientEvent::Close);
                    self.lost(
                        now,
                        &format!("clusterd forgot key number {id} it never named"),
                    );
                    return;
                };
                // No instance uses the key: its part goes; a use reported
                // since is divided afresh.
                if let Some(r) = self.rates.get_mut(&name) {
                    if r.used == 0 && !r.starved {
                        self.rates.remove(&name);
                    } else {
                        r.allot = None;
                    }
                }
            }
            ToInstance::Grant {
                key,
                slots,
                seen,
                waiting,
            } => {
                let Some(key) = self.their_key(now, key) else {
                    return;
                };
                let s = self.slots.entry(key).or_default();
                s.releases.retain(|&n| n > seen);
                // A want sent after this grant was made is still in line.
                if seen >= s.want_sent {
                    s.wanting = waiting;
                }
                s.granted = slots;
                self.changed = true;
            }
            ToInstance::Allot { key, rate } => {
                let Some(key) = self.their_key(now, key) else {
                    return;
                };
                // A key this instance has not used yet gets its part too,
                // ready for its first mail.
                let r = self
                    .rates
                    .entry(key)
                    .or_insert_with(|| RateState::new(rate, now));
                r.allot = Some(rate);
                r.told = false;
                self.changed = true;
            }
            ToInstance::Beat => {}
            ToInstance::News { from, news } => {
                self.events.push_back(ClientEvent::News { from, news });
            }
        }
    }

    /// Advances time: heartbeats, and losing a silent coordinator.
    pub fn handle_timeout(&mut self, now: Ms) {
        self.clock = now;
        if now >= self.next_sweep {
            self.sweep(now);
        }
        match self.link {
            Link::Linked | Link::Hello if now >= self.last_heard + self.cfg.lost_after_ms => {
                self.events.push_back(ClientEvent::Close);
                self.lost(now, "no word from the coordinator");
            }
            Link::Connecting { since } if now >= since + self.cfg.lost_after_ms => {
                self.events.push_back(ClientEvent::Close);
                self.lost(now, "connection timed out");
            }
            Link::Linked if now >= self.next_beat => {
                self.next_beat = now + self.cfg.heartbeat_ms;
                let rates = self.take_rate_use(true);
                let rates = rates
                    .into_iter()
                    .map(|(k, u)| RateUse {
                        key: self.name_key(&k),
                        ..u
                    })
                    .collect();
                self.send(ToCoord::Heartbeat { rates });
            }
            _ => {}
        }
    }

    /// When [`Client::handle_timeout`] or a reconnect is next due; at
    /// once (0) while messages wait to go out on a link that is up.
    pub fn poll_timeout(&self) -> Option<Ms> {
        // The share queues wants, releases and starved reports from inside
        // the scheduler, where the shell does not look for them: unless
        // they are due now they would wait for the next heartbeat, a slot
        // freed here reaching the coordinator up to a second late (one
        // connection a second at concurrency 2), a starved instance heard
        // a second late at every allotment.
        if !self.out.is_empty() && matches!(self.link, Link::Hello | Link::Linked) {
            return Some(0);
        }
        match self.link {
            Link::Down { retry_at } => Some(retry_at),
            Link::Connecting { since } => Some(since + self.cfg.lost_after_ms),
            Link::Hello => Some(self.last_heard + self.cfg.lost_after_ms),
            Link::Linked => Some(self.next_beat.min(self.last_heard + self.cfg.lost_after_ms)),
        }
    }

    /// The next message for the coordinator.
    pub fn poll_transmit(&mut self) -> Option<ToCoord> {
        self.out.pop_front()
    }

    /// The next event for the shell.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// Whether grants, allotments or the count changed since the last
    /// call: the scheduler must hear `LimitsChanged`.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// The count a previous run of this instance last heard (saved by the
    /// shell), used by the fallback until clusterd says one: an instance
    /// restarted while clusterd is away divides by it rather than taking
    /// 1 per key. Ignored once a count was heard in this run.
    pub fn remember_instances(&mut self, instances: u32) {
        if self.instances == 0 && instances > 0 {
            self.instances = instances;
            self.changed = true;
        }
    }

    /// The instance count last heard (0: never, in this run or a saved one).
    pub fn instances(&self) -> u32 {
        self.instances
    }

    /// Shares what this instance learnt of a destination.
    pub fn news(&mut self, news: DestNews) {
        if self.linked() {
            self.send(ToCoord::News(news));
        }
    }

    /// A snapshot of the link and every key.
    pub fn status(&self) -> ClientStatus {
        ClientStatus {
            link: self.link,
            instances: self.instances,
            slots: self
                .slots
                .iter()
                .map(|(k, s)| (k.clone(), s.limit, self.conc(s), s.conns))
                .collect(),
            rates: self
                .rates
                .iter()
                .map(|(k, r)| (k.clone(), r.limit, self.part(r)))
                .collect(),
            losses: self.losses,
            names: self.names.clone(),
        }
    }

    fn send(&mut self, msg: ToCoord) {
        self.sent += 1;
        self.out.push_back(msg);
    }

    /// This side's number of `name`, made on first sight (a retired one
    /// first); dated as used now.
    fn id_of(&mut self, name: &str) -> KeyId {
        let now = self.clock;
        if let Some(&id) = self.ids.get(name) {
            self.keys[id as usize].1 = now;
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.keys[id as usize] = (name.to_string(), now);
                id
            }
            None => {
                self.keys.push((name.to_string(), now));
                (self.keys.len() - 1) as KeyId
            }
        };
        self.ids.insert(name.to_string(), id);
        id
    }

    /// Forgets what has gone unused for `forget_after_ms`: idle keys'
    /// state, and the numbers of keys with none left (retired on the
    /// link, so the coordinator can forget them too). A rate the
    /// coordinator still divides stays until it forgets the key.
    fn sweep(&mut self, now: Ms) {
        let after = self.cfg.forget_after_ms;
        self.next_sweep = now + (after / 10).clamp(1, 60_000);
        let idle = |t: Ms| now.saturating_sub(t) >= after;
        self.slots
            .retain(|_, s| s.conns > 0 || s.wanting || s.granted > 0 || !idle(s.used_at));
        let linked = self.linked();
        let busy = |r: &RateState| r.used > 0 || r.starved || !idle(r.used_at);
        self.rates
            .retain(|_, r| busy(r) || (linked && r.allot.is_some()));
        let talking = matches!(self.link, Link::Hello | Link::Linked);
        for at in 0..self.keys.len() {
            let (name, used_at) = &self.keys[at];
            if name.is_empty()
                || !idle(*used_at)
                || self.slots.contains_key(name)
                || self.rates.get(name).is_some_and(busy)
            {
                continue;
            }
            let name = std::mem::take(&mut self.keys[at].0);
            self.ids.remove(&name);
            let id = at as KeyId;
            self.free.push(id);
            if self.is_named(id) {
                self.named[at] = false;
                if talking {
                    self.send(ToCoord::Forget { id });
                }
            }
        }
    }

    /// Keys this side has a number for now (for tests and status).
    pub fn numbered(&self) -> usize {
        self.ids.len()
    }

    fn is_named(&self, id: KeyId) -> bool {
        self.named.get(id as usize).copied().unwrap_or(false)
    }

    fn mark_named(&mut self, id: KeyId) {
        let at = id as usize;
        if self.named.len() <= at {
            self.named.resize(at + 1, false);
        }
        self.named[at] = true;
    }

    /// The number of `name` on this connection, named first if it was not.
    fn name_key(&mut self, name: &str) -> KeyId {
        let id = self.id_of(name);
        if !self.is_named(id) {
            self.mark_named(id);
            self.send(ToCoord::Key {
                id,
                name: name.to_string(),
            });
        }
        id
    }

    /// The name of the coordinator's key number; a number it never named
    /// is a broken coordinator: the link is dropped.
    fn their_key(&mut self, now: Ms, id: KeyId) -> Option<String> {
        if let Some(k) = self.theirs.get(&id) {
            return Some(k.clone());
        }
        self.events.push_back(ClientEvent::Close);
        self.lost(
            now,
            &format!("clusterd used key number {id} it never named"),
        );
        None
    }

    /// Full jitter: uniform in [100 ms, min(cap, min·2^attempt)], so
    /// instances cut off together come back spread out, the more so the
    /// longer the coordinator stays away.
    fn backoff(&mut self) -> Ms {
        const FLOOR_MS: Ms = 100;
        let ceiling = self
            .cfg
            .backoff_min_ms
            .saturating_mul(1 << self.attempt.min(20))
            .min(self.cfg.backoff_max_ms)
            .max(FLOOR_MS);
        self.attempt += 1;
        // xorshift64*: deterministic for a seed, enough for spreading.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        FLOOR_MS + r % (ceiling - FLOOR_MS + 1)
    }

    /// Use since the last report, by key name (numbered by the caller).
    fn take_rate_use(&mut self, period: bool) -> Vec<(String, RateUse)> {
        let mut v = Vec::new();
        for (k, r) in &mut self.rates {
            if r.used > 0 || r.starved || !period {
                let u = RateUse {
                    key: 0,
                    limit: r.limit,
                    used: r.used,
                    starved: r.starved,
                };
                v.push((k.clone(), u));
            }
            r.used = 0;
            r.starved = false;
        }
        v
    }

    /// The fallback's count: the last known, or unknown (0).
    fn divide(&self, limit: u32) -> u32 {
        match self.instances {
            0 => 1,
            n => (limit / n).max(1),
        }
    }

    fn conc(&self, s: &SlotState) -> u32 {
        if self.linked() && self.cfg.shared_concurrency {
            s.effective()
        } else {
            self.divide(s.limit)
        }
    }

    fn part(&self, r: &RateState) -> WireRate {
        match (self.linked(), r.allot) {
            (true, Some(a)) => a,
            // Linked and not yet divided: nothing until the coordinator
            // answers (the first refusal asks it at once).
            (true, None) => WireRate {
                tokens: 0,
                ..r.limit
            },
            (false, _) if self.instances == 0 => WireRate {
                tokens: 1,
                ..r.limit
            },
            (false, _) => rates::equal(r.limit, self.instances),
        }
    }

    pub(crate) fn concurrency_of(&self, key: &str, cluster: u32) -> u32 {
        match self.slots.get(key) {
            Some(s) => self.conc(s),
            None if self.linked() && self.cfg.shared_concurrency => 0,
            None => self.divide(cluster),
        }
    }

    pub(crate) fn rate_of(&self, key: &str, cluster: Rate, fixed_window: bool) -> Rate {
        let limit = wire(cluster, fixed_window);
        let part = match self.rates.get(key) {
            Some(r) => self.part(r),
            None => self.part(&RateState::new(limit, 0)),
        };
        Rate {
            tokens: part.tokens,
            per: Duration::from_millis(part.per_ms),
        }
    }

    /// Whether the coordinator hears of this instance's connections: from
    /// the hello on (what happens between the hello and the welcome must
    /// reach it too, or a connection opened then would be one it never
    /// counts, and a want raised then would never be sent).
    fn talking(&self) -> bool {
        matches!(self.link, Link::Hello | Link::Linked) && self.cfg.shared_concurrency
    }

    pub(crate) fn want(&mut self, key: &str, held: u32, cluster: u32) {
        let linked = self.talking();
        let now = self.clock;
        let s = self.slots.entry(key.to_string()).or_default();
        s.used_at = now;
        s.limit = cluster;
        if !self.cfg.shared_concurrency || s.wanting || held < s.effective() || held >= cluster {
            return;
        }
        s.wanting = true;
        if linked {
            let id = self.name_key(key);
            if let Some(s) = self.slots.get_mut(key) {
                s.want_sent = self.sent + 1;
            }
            self.send(ToCoord::Want {
                key: id,
                limit: cluster,
            });
        }
    }

    pub(crate) fn opened(&mut self, key: &str) {
        let linked = self.talking();
        let now = self.clock;
        let s = self.slots.entry(key.to_string()).or_default();
        s.used_at = now;
        s.conns += 1;
        if linked {
            let id = self.name_key(key);
            self.send(ToCoord::Opened { key: id });
        }
    }

    pub(crate) fn closed(&mut self, key: &str) {
        let linked = self.talking();
        if !self.slots.contains_key(key) {
            return;
        }
        let id = if linked { self.name_key(key) } else { 0 };
        let sent = self.sent + 1;
        let now = self.clock;
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        s.used_at = now;
        s.conns = s.conns.saturating_sub(1);
        if linked {
            s.releases.push(sent);
        }
        if s.conns == 0 && s.granted == 0 && !s.wanting {
            self.slots.remove(key);
        }
        if linked {
            self.send(ToCoord::Release { key: id });
        }
    }

    pub(crate) fn rate_used(&mut self, key: &str, cluster: Rate, fixed_window: bool, took: bool) {
        let limit = wire(cluster, fixed_window);
        let linked = self.linked();
        let now = self.clock;
        let r = self
            .rates
            .entry(key.to_string())
            .or_insert_with(|| RateState::new(limit, now));
        r.used_at = now;
        r.limit = limit;
        if took {
            r.used += 1;
            return;
        }
        r.starved = true;
        if linked && !r.told {
            // Refused for want of a part: tell the coordinator now, once
            // per allotment, rather than at the next heartbeat.
            r.told = true;
            let used = std::mem::take(&mut r.used);
            let one = RateUse {
                key: self.name_key(key),
                limit,
                used,
                starved: true,
            };
            self.send(ToCoord::Heartbeat { rates: vec![one] });
        }
    }
}

fn wire(r: Rate, fixed_window: bool) -> WireRate {
    WireRate {
        tokens: r.tokens,
        per_ms: r.per.as_millis().max(1) as u64,
        fixed_window,
    }
}

/// The client as the shaper's [`Share`]: shared between the shaper and
/// qmgr's IO shell, which runs on the same thread (the lock is never
/// contended).
#[derive(Clone, Debug)]
pub struct Handle {
    inner: Arc<Mutex<Client>>,
    fixed_window: bool,
}

impl Handle {
    /// Wraps `client`; `fixed_window` is the policy's rate algorithm.
    pub fn new(client: Client, fixed_window: bool) -> Handle {
        Handle {
            inner: Arc::new(Mutex::new(client)),
            fixed_window,
        }
    }

    /// The client, for the shell.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Client> {
        // A panic while holding it is already fatal for qmgr.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Follows a policy reload's rate algorithm.
    pub fn set_fixed_window(&mut self, fixed_window: bool) {
        self.fixed_window = fixed_window;
    }
}

impl Share for Handle {
    fn concurrency(&self, key: &KeyName, cluster: u32) -> u32 {
        self.lock().concurrency_of(&key.to_string(), cluster)
    }
    fn rate(&self, key: &KeyName, cluster: Rate) -> Rate {
        self.lock()
            .rate_of(&key.to_string(), cluster, self.fixed_window)
    }
    fn want(&mut self, key: &KeyName, held: u32, cluster: u32) {
        self.lock().want(&key.to_string(), held, cluster)
    }
    fn opened(&mut self, key: &KeyName) {
        self.lock().opened(&key.to_string())
    }
    fn closed(&mut self, key: &KeyName) {
        self.lock().closed(&key.to_string())
    }
    fn sent(&mut self, key: &KeyName, cluster: Rate) {
        let fw = self.fixed_window;
        self.lock().rate_used(&key.to_string(), cluster, fw, true)
    }
    fn starved(&self, key: &KeyName, cluster: Rate) {
        self.lock()
            .rate_used(&key.to_string(), cluster, self.fixed_window, false)
    }
}
