//! The coordinator: clusterd's state, sans-IO.
//!
//! It registers instances by name as their hellos arrive, counts the
//! connected ones and announces the count to all. Concurrency of shared
//! keys is granted as slots: a slot granted is reserved for the instance
//! that asked for a short time ([`Config::reserve_ms`], Halon's
//! reservation) and becomes an open connection when the instance says so;
//! every slot an instance holds is a lease renewed by its heartbeats, and
//! an instance silent for [`Config::lease_ms`] (killed, cut off) loses
//! them all. A freed slot goes to the waiting instance holding the fewest
//! slots of the key, the longest waiting first among equals: that is the
//! fair rotation, every instance with mail waiting gets a turn as
//! connections close (the policy's `transactions` and `idletimeout`).
//! Rates are divided per [`crate::rates`] and refreshed once per interval
//! (clamped to one heartbeat … 10 s), at once when the count changes.
//! Destination news from one instance is relayed to the others.
//!
//! Keys are interned: each name the instances give is one number here,
//! which is also the number this side names it by on every connection;
//! the instances' own numbers are translated per connection. A number no
//! instance uses any more (each retires its own with `Forget`) and with
//! no slot held or wanted is forgotten here too, once every
//! [`Config::sweep_ms`], and retired on every connection it was named on,
//! so the tables hold the keys in use rather than every name ever heard.
//!
//! The state is soft: after a start, during [`Config::recovery_ms`]
//! (about two heartbeats) instances re-sync what they hold and nothing new
//! is granted, so a restart never takes the cluster over a limit. Each
//! hello says how many instances that instance last heard of; the window
//! stays open until that many are back (their reconnects are spread over
//! up to the back-off cap), or at most [`Config::recovery_max_ms`]: a
//! slot granted while an instance still on its fallback is away would
//! count without its connections. Time is
//! the caller's monotonic clock in milliseconds; nothing here logs,
//! [`Event`]s say what a log should. Panics: never on a peer's messages.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::proto::{
    DestNews, Held, KeyId, RateUse, ToCoord, ToInstance, WireRate, MAX_NAME, MAX_NAMES, VERSION,
};
use crate::rates::{self, Demand, Division};
use crate::Ms;

/// The coordinator's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Instances heartbeat this often (`cluster_heartbeat_interval`).
    pub heartbeat_ms: Ms,
    /// Slots of an instance not heard from for this long go back.
    pub lease_ms: Ms,
    /// A slot granted and not used for this long goes to the next waiter.
    pub reserve_ms: Ms,
    /// After a start, no new grants for this long.
    pub recovery_ms: Ms,
    /// … and until the instances last heard of are back, or this long.
    pub recovery_max_ms: Ms,
    /// How rates are divided.
    pub division: Division,
    /// Unused key numbers are forgotten this often.
    pub sweep_ms: Ms,
}

impl Config {
    /// Settings derived from a heartbeat, lease time and division as
    /// clusterd reads them: a reservation and a recovery window of two
    /// heartbeats.
    pub fn new(heartbeat_ms: Ms, lease_ms: Ms, division: Division) -> Config {
        Config {
            heartbeat_ms,
            lease_ms,
            reserve_ms: 2 * heartbeat_ms,
            recovery_ms: 2 * heartbeat_ms,
            recovery_max_ms: crate::client::BACKOFF_CAP_MS + 2 * heartbeat_ms,
            division,
            sweep_ms: 60_000,
        }
    }
}

/// A transport connection, numbered by the caller.
pub type ConnId = u64;

/// What the coordinator did, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// An instance said hello.
    Joined {
        /// Its name.
        name: String,
        /// Instances connected now.
        instances: u32,
        /// It came back within its lease.
        resumed: bool,
    },
    /// An instance's connection went away (its slots stay until the lease ends).
    Left {
        /// Its name.
        name: String,
        /// Instances connected now.
        instances: u32,
    },
    /// An instance's lease ended: its slots went back.
    Expired {
        /// Its name.
        name: String,
        /// Slots returned.
        slots: u32,
    },
    /// A hello was refused, or a message broke the protocol (a key number
    /// never named): the caller closes the connection.
    Refused {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: String,
    },
    /// A connection was superseded by a newer one of the same instance, or
    /// spoke before its hello: the caller closes it.
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// The recovery window ended: slots are granted again.
    Recovered {
        /// Instances connected.
        instances: u32,
    },
}

#[derive(Debug)]
struct Instance {
    name: String,
    conn: Option<ConnId>,
    /// Messages read on `conn` (echoed in grants).
    seen: u64,
    last_heard: Ms,
    /// The instance's key numbers on this connection → ours.
    theirs: HashMap<KeyId, Kx>,
    /// Our numbers already named to it on this connection.
    named: Vec<bool>,
}

/// A key's number here (an index into the coordinator's names).
type Kx = u32;

#[derive(Debug, Default)]
struct Holding {
    open: u32,
    /// Expiry of each reserved slot.
    reserved: Vec<Ms>,
}

impl Holding {
    fn slots(&self) -> u32 {
        self.open.saturating_add(self.reserved.len() as u32)
    }
}

#[derive(Debug, Default)]
struct SlotKey {
    limit: u32,
    holders: BTreeMap<usize, Holding>,
    /// (instance, order of asking).
    waiters: Vec<(usize, u64)>,
    /// When each instance was last granted a slot (an order number).
    served: BTreeMap<usize, u64>,
}

impl SlotKey {
    fn total(&self) -> u32 {
        // Counts come from the instances: summed without overflow.
        self.holders
            .values()
            .map(Holding::slots)
            .fold(0u32, u32::saturating_add)
    }
    fn slots_of(&self, i: usize) -> u32 {
        self.holders.get(&i).map_or(0, Holding::slots)
    }
}

#[derive(Debug, Default)]
struct RateUser {
    used: u32,
    starved: bool,
    allot: Option<WireRate>,
}

#[derive(Debug)]
struct RateKey {
    limit: WireRate,
    users: BTreeMap<usize, RateUser>,
    since: Ms,
    next: Ms,
}

/// One key as `sluice cluster status` shows it from the coordinator.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyStatus {
    /// The key.
    pub key: String,
    /// Its cluster-wide concurrency, when it is a slot key.
    pub limit: Option<u32>,
    /// Slots held per instance.
    pub slots: Vec<(String, u32)>,
    /// Instances waiting.
    pub waiting: u32,
    /// Its cluster-wide rate, when it is a rate key.
    pub rate: Option<WireRate>,
    /// Each instance's allotment.
    pub allots: Vec<(String, WireRate)>,
}

/// clusterd's state.
#[derive(Debug)]
pub struct Coordinator {
    cfg: Config,
    instances: Vec<Option<Instance>>,
    by_name: BTreeMap<String, usize>,
    by_conn: BTreeMap<ConnId, usize>,
    /// Connections that have not said hello yet.
    fresh: BTreeMap<ConnId, Ms>,
    /// Key names by number (empty: forgotten, the number in `free`).
    names: Vec<String>,
    index: HashMap<String, Kx>,
    free: Vec<Kx>,
    next_sweep: Ms,
    slots: BTreeMap<Kx, SlotKey>,
    rates: BTreeMap<Kx, RateKey>,
    recovering_until: Option<Ms>,
    /// The window's end whoever is missing.
    recovering_max: Ms,
    /// Instances the hellos say there were.
    expect: u32,
    order: u64,
    out: VecDeque<(ConnId, ToInstance)>,
    events: VecDeque<Event>,
}

impl Coordinator {
    /// A coordinator started at `now`, in its recovery window.
    pub fn new(cfg: Config, now: Ms) -> Coordinator {
        let until = now + cfg.recovery_ms;
        Coordinator {
            cfg: cfg.clone(),
            instances: Vec::new(),
            by_name: BTreeMap::new(),
            by_conn: BTreeMap::new(),
            fresh: BTreeMap::new(),
            names: Vec::new(),
            index: HashMap::new(),
            free: Vec::new(),
            next_sweep: now + cfg.sweep_ms,
            slots: BTreeMap::new(),
            rates: BTreeMap::new(),
            recovering_until: Some(until),
            recovering_max: now + cfg.recovery_max_ms.max(cfg.recovery_ms),
            expect: 0,
            order: 0,
            out: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// Instances connected now.
    pub fn instances(&self) -> u32 {
        self.instances
            .iter()
            .flatten()
            .filter(|i| i.conn.is_some())
            .count() as u32
    }

    /// Names of the instances known (connected or within their lease), with
    /// whether each is connected.
    pub fn names(&self) -> Vec<(String, bool)> {
        self.by_name
            .iter()
            .filter_map(|(n, &i)| self.inst(i).map(|x| (n.clone(), x.conn.is_some())))
            .collect()
    }

    /// Whether the recovery window is still open.
    pub fn recovering(&self) -> bool {
        self.recovering_until.is_some()
    }

    /// A transport connection came up.
    pub fn connect(&mut self, now: Ms, conn: ConnId) {
        self.fresh.insert(conn, now);
    }

    /// A transport connection went away.
    pub fn disconnect(&mut self, now: Ms, conn: ConnId) {
        self.fresh.remove(&conn);
        let Some(i) = self.by_conn.remove(&conn) else {
            return;
        };
        let name = match self.instances[i].as_mut() {
            Some(inst) => {
                inst.conn = None;
                // Numbers are per connection: a departed instance's keys
                // stay only through the slots it holds.
                inst.theirs.clear();
                inst.named.clear();
                inst.name.clone()
            }
            None => return,
        };
        // Its slots stay until its lease ends: it may still be delivering.
        for key in self.slots.values_mut() {
            key.waiters.retain(|&(w, _)| w != i);
        }
        let instances = self.instances();
        self.events.push_back(Event::Left { name, instances });
        self.announce();
        self.redivide_all(now);
    }

    /// A message from `conn`.
    pub fn handle(&mut self, now: Ms, conn: ConnId, msg: ToCoord) {
        if matches!(msg, ToCoord::Hello { .. }) {
            self.hello(now, conn, msg);
            return;
        }
        let Some(&i) = self.by_conn.get(&conn) else {
            self.events.push_back(Event::Close { conn });
            return;
        };
        if let Some(inst) = self.instances[i].as_mut() {
            inst.seen += 1;
            inst.last_heard = now;
        }
        if let Err(reason) = self.dispatch(now, i, msg) {
            self.events.push_back(Event::Refused { conn, reason });
        }
    }

    /// One message of a welcomed instance; an error is a protocol breach
    /// (the caller closes the connection).
    fn dispatch(&mut self, now: Ms, i: usize, msg: ToCoord) -> Result<(), String> {
        match msg {
            ToCoord::Hello { .. } => unreachable!("coordinator: hello handled above"),
            ToCoord::Key { id, name } => self.learn(i, id, name)?,
            ToCoord::Forget { id } => {
                let gone = self.instances[i]
                    .as_mut()
                    .and_then(|x| x.theirs.remove(&id));
                if gone.is_none() {
                    return Err(format!("key number {id} forgotten, never named"));
                }
            }
            ToCoord::Want { key, limit } => {
                let key = self.theirs(i, key)?;
                let order = self.next_order();
                let k = self.slots.entry(key).or_default();
                k.limit = limit;
                if !k.waiters.iter().any(|&(w, _)| w == i) {
                    k.waiters.push((i, order));
                }
                self.fill(now, key);
            }
            ToCoord::Opened { key } => {
                let key = self.theirs(i, key)?;
                let k = self.slots.entry(key).or_default();
                let h = k.holders.entry(i).or_default();
                if h.reserved.is_empty() {
                    // Opened without a reservation (a connection of the
                    // fallback): count it, and say so.
                    h.open += 1;
                    self.grant_msg(i, key);
                } else {
                    h.reserved.remove(0);
                    h.open += 1;
                }
            }
            ToCoord::Release { key } => {
                let key = self.theirs(i, key)?;
                if let Some(k) = self.slots.get_mut(&key) {
                    if let Some(h) = k.holders.get_mut(&i) {
                        if h.open > 0 {
                            h.open -= 1;
                        } else if !h.reserved.is_empty() {
                            h.reserved.remove(0);
                        }
                        if h.slots() == 0 {
                            k.holders.remove(&i);
                        }
                    }
                }
                self.grant_msg(i, key);
                self.fill(now, key);
            }
            ToCoord::Heartbeat { rates } => {
                self.rate_use(now, i, rates)?;
                self.send_to(i, ToInstance::Beat);
            }
            ToCoord::News(news) => self.relay(i, news),
        }
        Ok(())
    }

    /// The instance names a key.
    fn learn(&mut self, i: usize, id: KeyId, name: String) -> Result<(), String> {
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(format!("key name of {} bytes", name.len()));
        }
        // Checked before the name is kept: a refused one is not.
        let Some(inst) = self.instances[i].as_ref() else {
            return Ok(());
        };
        match inst.theirs.get(&id) {
            Some(&was) if self.names[was as usize] != name => {
                return Err(format!("key number {id} named twice, with two names"));
            }
            Some(_) => return Ok(()),
            None if inst.theirs.len() >= MAX_NAMES => {
                return Err(format!("over {MAX_NAMES} key names"));
            }
            None => {}
        }
        let kx = self.intern(name);
        if let Some(inst) = self.instances[i].as_mut() {
            inst.theirs.insert(id, kx);
        }
        Ok(())
    }

    /// Our number for a key name, made on first sight.
    fn intern(&mut self, name: String) -> Kx {
        if let Some(&kx) = self.index.get(&name) {
            return kx;
        }
        let kx = match self.free.pop() {
            Some(kx) => {
                self.names[kx as usize] = name.clone();
                kx
            }
            None => {
                self.names.push(name.clone());
                (self.names.len() - 1) as Kx
            }
        };
        self.index.insert(name, kx);
        kx
    }

    /// Forgets every key no instance numbers and nobody holds or wants:
    /// its state, its name, and its number on every connection it was
    /// named on (the number is reused).
    fn sweep(&mut self, now: Ms) {
        self.next_sweep = now + self.cfg.sweep_ms;
        let mut used = vec![false; self.names.len()];
        for x in self.instances.iter().flatten() {
            for &kx in x.theirs.values() {
                used[kx as usize] = true;
            }
        }
        for (&kx, k) in &self.slots {
            if !k.holders.is_empty() || !k.waiters.is_empty() {
                used[kx as usize] = true;
            }
        }
        for (at, used) in used.into_iter().enumerate() {
            if used || self.names[at].is_empty() {
                continue;
            }
            let kx = at as Kx;
            self.slots.remove(&kx);
            self.rates.remove(&kx);
            let name = std::mem::take(&mut self.names[at]);
            self.index.remove(&name);
            self.free.push(kx);
            for x in self.instances.iter_mut().flatten() {
                if x.named.get(at).copied().unwrap_or(false) {
                    x.named[at] = false;
                    if let Some(conn) = x.conn {
                        self.out.push_back((conn, ToInstance::Forget { id: kx }));
                    }
                }
            }
        }
    }

    /// Key names held now (for tests and status).
    pub fn key_names(&self) -> usize {
        self.index.len()
    }

    /// Our number for the instance's `id`.
    fn theirs(&self, i: usize, id: KeyId) -> Result<Kx, String> {
        self.inst(i)
            .and_then(|x| x.theirs.get(&id).copied())
            .ok_or_else(|| format!("key number {id} was never named"))
    }

    fn hello(&mut self, now: Ms, conn: ConnId, msg: ToCoord) {
        let ToCoord::Hello {
            version,
            name,
            known,
            keys,
            held,
            rates,
        } = msg
        else {
            return;
        };
        self.fresh.remove(&conn);
        if version != VERSION {
            let reason = format!("protocol version {version}, this clusterd speaks {VERSION}");
            self.out.push_back((
                conn,
                ToInstance::Refused {
                    reason: reason.clone(),
                },
            ));
            self.events.push_back(Event::Refused { conn, reason });
            return;
        }
        if self.by_conn.contains_key(&conn) {
            let reason = "a second hello".to_string();
            self.events.push_back(Event::Refused { conn, reason });
            return;
        }
        let (i, resumed) = match self.by_name.get(&name) {
            Some(&i) => (i, true),
            None => {
                let i = self.instances.len();
                self.instances.push(None);
                self.by_name.insert(name.clone(), i);
                (i, false)
            }
        };
        if let Some(old) = self.instances[i].as_ref().and_then(|x| x.conn) {
            self.by_conn.remove(&old);
            self.events.push_back(Event::Close { conn: old });
        }
        self.instances[i] = Some(Instance {
            name: name.clone(),
            conn: Some(conn),
            seen: 1,
            last_heard: now,
            theirs: HashMap::new(),
            named: Vec::new(),
        });
        self.by_conn.insert(conn, i);
        let mut breach = None;
        for (id, key) in keys {
            if let Err(e) = self.learn(i, id, key) {
                breach = Some(e);
                break;
            }
        }
        let held: Result<Vec<(Kx, Held)>, String> = match breach {
            Some(e) => Err(e),
            None => held
                .into_iter()
                .map(|h| Ok((self.theirs(i, h.key)?, h)))
                .collect(),
        };
        let held = match held {
            Ok(h) => h,
            Err(reason) => {
                // Forget the connection, not the instance: a lease it
                // holds from before runs out as if it had gone silent.
                if let Some(x) = self.instances[i].as_mut() {
                    x.conn = None;
                }
                self.by_conn.remove(&conn);
                self.events.push_back(Event::Refused { conn, reason });
                return;
            }
        };
        // The instance's report is the truth about what it holds: it
        // replaces what this coordinator believed.
        for k in self.slots.values_mut() {
            k.holders.remove(&i);
            k.waiters.retain(|&(w, _)| w != i);
        }
        let instances = self.instances();
        self.out.push_back((
            conn,
            ToInstance::Welcome {
                version: VERSION,
                instances,
            },
        ));
        let mut wanted = Vec::new();
        for (kx, h) in held {
            let order = self.next_order();
            let k = self.slots.entry(kx).or_default();
            k.limit = h.limit;
            if h.conns > 0 {
                k.holders.entry(i).or_default().open = h.conns;
            }
            if h.wants {
                k.waiters.push((i, order));
                wanted.push(kx);
            }
            self.grant_msg(i, kx);
        }
        self.events.push_back(Event::Joined {
            name,
            instances,
            resumed,
        });
        self.announce();
        if let Err(reason) = self.rate_use(now, i, rates) {
            self.events.push_back(Event::Refused { conn, reason });
        }
        self.redivide_all(now);
        for key in wanted {
            self.fill(now, key);
        }
        if self.recovering_until.is_some() {
            self.expect = self.expect.max(known);
            self.maybe_recovered(now);
        }
    }

    /// Advances time: reservations, leases, the recovery window, rate refreshes.
    pub fn handle_timeout(&mut self, now: Ms) {
        self.maybe_recovered(now);
        // While instances re-sync, what they hold is not all known yet.
        if now >= self.next_sweep && self.recovering_until.is_none() {
            self.sweep(now);
        }
        // Reservations not used in time go to the next waiter.
        let mut lapsed: Vec<(Kx, usize)> = Vec::new();
        for (&key, k) in &mut self.slots {
            for (&i, h) in &mut k.holders {
                let before = h.reserved.len();
                h.reserved.retain(|&t| t > now);
                if h.reserved.len() != before {
                    lapsed.push((key, i));
                }
            }
            k.holders.retain(|_, h| h.slots() > 0);
        }
        for (key, i) in lapsed {
            self.grant_msg(i, key);
            self.fill(now, key);
        }
        // Leases: an instance silent for lease_ms loses its slots.
        let expired: Vec<usize> = self
            .instances
            .iter()
            .enumerate()
            .filter_map(|(i, x)| {
                x.as_ref()
                    .filter(|x| now >= x.last_heard + self.cfg.lease_ms)
                    .map(|_| i)
            })
            .collect();
        for i in expired {
            self.expire(now, i);
        }
        let due: Vec<Kx> = self
            .rates
            .iter()
            .filter(|(_, r)| now >= r.next)
            .map(|(&k, _)| k)
            .collect();
        for key in due {
            self.redivide(now, key, true);
        }
    }

    /// Ends the recovery window when its time is up and every instance
    /// the hellos spoke of is back, or at its longest.
    fn maybe_recovered(&mut self, now: Ms) {
        let Some(until) = self.recovering_until else {
            return;
        };
        if now < until || (self.instances() < self.expect && now < self.recovering_max) {
            return;
        }
        self.recovering_until = None;
        self.events.push_back(Event::Recovered {
            instances: self.instances(),
        });
        let keys: Vec<Kx> = self.slots.keys().copied().collect();
        for key in keys {
            self.fill(now, key);
        }
    }

    /// When [`Coordinator::handle_timeout`] next has work.
    pub fn poll_timeout(&self) -> Option<Ms> {
        let mut t = self.recovering_until.map(|until| {
            if self.instances() < self.expect {
                self.recovering_max
            } else {
                until
            }
        });
        let mut min = |x: Ms| t = Some(t.map_or(x, |t: Ms| t.min(x)));
        for k in self.slots.values() {
            for h in k.holders.values() {
                for &r in &h.reserved {
                    min(r);
                }
            }
        }
        for x in self.instances.iter().flatten() {
            min(x.last_heard + self.cfg.lease_ms);
        }
        for r in self.rates.values() {
            min(r.next);
        }
        if self.recovering_until.is_none() {
            min(self.next_sweep);
        }
        t
    }

    /// The next message to send, and to which connection.
    pub fn poll_transmit(&mut self) -> Option<(ConnId, ToInstance)> {
        self.out.pop_front()
    }

    /// The next event for the log.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Every key, for `sluice cluster status` on the coordinator's side.
    pub fn keys(&self) -> Vec<KeyStatus> {
        let mut keys: Vec<Kx> = self
            .slots
            .keys()
            .chain(self.rates.keys())
            .copied()
            .collect();
        keys.sort_by(|a, b| self.names[*a as usize].cmp(&self.names[*b as usize]));
        keys.dedup();
        let name_of = |i: &usize| self.inst(*i).map_or(String::new(), |x| x.name.clone());
        keys.into_iter()
            .map(|key| {
                let s = self.slots.get(&key);
                let r = self.rates.get(&key);
                KeyStatus {
                    key: self.names[key as usize].clone(),
                    limit: s.map(|s| s.limit),
                    slots: s.map_or(Vec::new(), |s| {
                        s.holders
                            .iter()
                            .map(|(i, h)| (name_of(i), h.slots()))
                            .collect()
                    }),
                    waiting: s.map_or(0, |s| s.waiters.len() as u32),
                    rate: r.map(|r| r.limit),
                    allots: r.map_or(Vec::new(), |r| {
                        r.users
                            .iter()
                            .filter_map(|(i, u)| u.allot.map(|a| (name_of(i), a)))
                            .collect()
                    }),
                }
            })
            .collect()
    }

    fn inst(&self, i: usize) -> Option<&Instance> {
        self.instances.get(i).and_then(Option::as_ref)
    }

    fn next_order(&mut self) -> u64 {
        self.order += 1;
        self.order
    }

    fn send_to(&mut self, i: usize, msg: ToInstance) {
        if let Some(conn) = self.inst(i).and_then(|x| x.conn) {
            self.out.push_back((conn, msg));
        }
    }

    /// Names `key` to instance `i` if this connection has not heard it.
    fn name_to(&mut self, i: usize, key: Kx) {
        let Some(x) = self.instances.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let Some(conn) = x.conn else {
            return;
        };
        let at = key as usize;
        if x.named.len() <= at {
            x.named.resize(at + 1, false);
        }
        if !x.named[at] {
            x.named[at] = true;
            let name = self.names[at].clone();
            self.out
                .push_back((conn, ToInstance::Key { id: key, name }));
        }
    }

    fn grant_msg(&mut self, i: usize, key: Kx) {
        let (slots, waiting) = self.slots.get(&key).map_or((0, false), |k| {
            (k.slots_of(i), k.waiters.iter().any(|&(w, _)| w == i))
        });
        let seen = self.inst(i).map_or(0, |x| x.seen);
        self.name_to(i, key);
        self.send_to(
            i,
            ToInstance::Grant {
                key,
                slots,
                seen,
                waiting,
            },
        );
    }

    /// Gives free slots of `key` to its waiters, fewest slots held first.
    fn fill(&mut self, now: Ms, key: Kx) {
        if self.recovering_until.is_some() {
            return;
        }
        loop {
            let Some(k) = self.slots.get_mut(&key) else {
                return;
            };
            if k.total() >= k.limit || k.waiters.is_empty() {
                return;
            }
            // Fewest slots first, then the least recently served, then
            // the longest waiting: every instance gets its turn.
            let (at, _) = k
                .waiters
                .iter()
                .enumerate()
                .min_by_key(|(_, &(w, order))| {
                    (k.slots_of(w), k.served.get(&w).copied().unwrap_or(0), order)
                })
                .expect("coordinator: waiters is not empty");
            let (who, _) = k.waiters.remove(at);
            self.order += 1;
            k.served.insert(who, self.order);
            k.holders
                .entry(who)
                .or_default()
                .reserved
                .push(now + self.cfg.reserve_ms);
            self.grant_msg(who, key);
        }
    }

    fn expire(&mut self, now: Ms, i: usize) {
        let Some(inst) = self.instances[i].take() else {
            return;
        };
        self.by_name.remove(&inst.name);
        if let Some(c) = inst.conn {
            self.by_conn.remove(&c);
            self.events.push_back(Event::Close { conn: c });
        }
        let mut freed = 0;
        let mut keys = Vec::new();
        for (&key, k) in &mut self.slots {
            if let Some(h) = k.holders.remove(&i) {
                freed += h.slots();
                keys.push(key);
            }
            k.waiters.retain(|&(w, _)| w != i);
            k.served.remove(&i);
        }
        for r in self.rates.values_mut() {
            r.users.remove(&i);
        }
        self.events.push_back(Event::Expired {
            name: inst.name,
            slots: freed,
        });
        if inst.conn.is_some() {
            self.announce();
        }
        for key in keys {
            self.fill(now, key);
        }
        self.redivide_all(now);
    }

    fn announce(&mut self) {
        let instances = self.instances();
        let names: Vec<String> = self
            .by_name
            .iter()
            .filter(|&(_, &i)| self.inst(i).is_some_and(|x| x.conn.is_some()))
            .map(|(n, _)| n.clone())
            .collect();
        let conns: Vec<ConnId> = self
            .instances
            .iter()
            .flatten()
            .filter_map(|x| x.conn)
            .collect();
        for c in conns {
            self.out.push_back((
                c,
                ToInstance::Count {
                    instances,
                    names: names.clone(),
                },
            ));
        }
    }

    fn relay(&mut self, from: usize, news: DestNews) {
        let Some(name) = self.inst(from).map(|x| x.name.clone()) else {
            return;
        };
        let conns: Vec<ConnId> = self
            .instances
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != from)
            .filter_map(|(_, x)| x.as_ref().and_then(|x| x.conn))
            .collect();
        for c in conns {
            self.out.push_back((
                c,
                ToInstance::News {
                    from: name.clone(),
                    news: news.clone(),
                },
            ));
        }
    }

    fn rate_use(&mut self, now: Ms, i: usize, uses: Vec<RateUse>) -> Result<(), String> {
        let refresh = self.refresh_ms(0);
        for u in uses {
            let key = self.theirs(i, u.key)?;
            let fresh = !self.rates.contains_key(&key);
            let r = self.rates.entry(key).or_insert_with(|| RateKey {
                limit: u.limit,
                users: BTreeMap::new(),
                since: now,
                next: now + refresh,
            });
            r.limit = u.limit;
            let user = r.users.entry(i).or_default();
            let newly_starved = u.starved && !user.starved;
            user.used = user.used.saturating_add(u.used);
            user.starved |= u.starved;
            // An instance refused for want of its part (or a key nobody
            // divided yet) is heard at once, not at the next refresh.
            let short = user.allot.is_none_or(|a| a.tokens == 0);
            if fresh || (newly_starved && short) {
                self.redivide(now, key, false);
            }
        }
        Ok(())
    }

    fn refresh_ms(&self, per_ms: Ms) -> Ms {
        per_ms.clamp(self.cfg.heartbeat_ms, 10_000.max(self.cfg.heartbeat_ms))
    }

    fn redivide_all(&mut self, now: Ms) {
        let keys: Vec<Kx> = self.rates.keys().copied().collect();
        for key in keys {
            self.redivide(now, key, false);
        }
    }

    /// New allotments of `key` for every connected instance; `period`
    /// closes the measuring period (the once-per-interval refresh).
    fn redivide(&mut self, now: Ms, key: Kx, period: bool) {
        let live: Vec<usize> = self
            .instances
            .iter()
            .enumerate()
            .filter_map(|(i, x)| x.as_ref().and_then(|x| x.conn).map(|_| i))
            .collect();
        let division = self.cfg.division;
        let refresh = {
            let per = self.rates.get(&key).map_or(0, |r| r.limit.per_ms);
            self.refresh_ms(per)
        };
        let Some(r) = self.rates.get_mut(&key) else {
            return;
        };
        let parts: Vec<WireRate> = match division {
            Division::Equal => vec![rates::equal(r.limit, live.len() as u32); live.len()],
            Division::Backlog => {
                let elapsed = now.saturating_sub(r.since).max(1) as f64;
                let scale = r.limit.per_ms as f64 / elapsed.max(self.cfg.heartbeat_ms as f64);
                let demands: Vec<Demand> = live
                    .iter()
                    .map(|i| match r.users.get(i) {
                        Some(u) if u.starved => Demand::Hungry,
                        Some(u) => Demand::Used(f64::from(u.used) * scale),
                        None => Demand::Used(0.0),
                    })
                    .collect();
                rates::by_backlog(r.limit, &demands)
            }
        };
        let mut sends = Vec::new();
        for (&i, part) in live.iter().zip(parts) {
            let u = r.users.entry(i).or_default();
            if u.allot != Some(part) {
                u.allot = Some(part);
                sends.push((i, part));
            }
            if period {
                u.used = 0;
                u.starved = false;
            }
        }
        if period {
            r.since = now;
            r.next = now + refresh;
        }
        for (i, rate) in sends {
            self.name_to(i, key);
            self.send_to(i, ToInstance::Allot { key, rate });
        }
    }
}
