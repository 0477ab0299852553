//! Live shaping state: per-key connections, token buckets and windows, the
//! last connect, and holds (suspensions and reply-driven back-offs) with
//! their ramp back.
//!
//! The scheduler interns each distinct [`Binding`] it meets ([`Shaper::bind`])
//! and asks, before it opens a connection or starts a transaction, whether
//! every key of that binding allows it. A connection holds one slot of each
//! of its keys' concurrency from `opened` to `closed`, idle or not. Times
//! are milliseconds on the caller's clock; nothing here reads one. Limits:
//! bindings and keys nobody uses are dropped by [`Shaper::gc`]; reply
//! counters hold at most N times per rule and key. Panics: never.

use crate::eval::matches;
use crate::field::{Binding, Field, KeyName};
use crate::model::{Policy, RateAlgorithm, ReplyAction, Threshold};
use crate::props::{Props, Rate};
use crate::share::{self, Share};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// Milliseconds on the caller's clock.
pub type Ms = u64;

/// An interned binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BindId(pub u32);

/// Why a connection may not open or a transaction may not start yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// Ask again at this time (rate, connect interval, a timed hold).
    Until(Ms),
    /// A key's connections are all taken: ask again when one closes or the
    /// limits change. Carries the key, so an idle connection holding a
    /// slot of it can be closed for this mail.
    Full(KeyIdx),
    /// Suspended until an operator resumes it or the policy changes.
    Suspended,
}

/// A key's slot in the shaper.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyIdx(pub u32);

/// Who put a hold in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `sluice queue suspend`.
    Operator,
    /// The policy file's `suspensions:`.
    Static,
    /// A `replies:` rule (its index in the file).
    Reply(usize),
}

/// A suspension or back-off in force.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    /// Its id (`sluice queue resume ID`).
    pub id: u64,
    /// Field values of the mail it holds.
    pub when: Vec<(Field, String)>,
    /// End of the hold proper; `None` for as long as it is not lifted.
    pub until: Option<Ms>,
    /// Limits during the hold: `None` suspends.
    pub floor: Option<Props>,
    /// Ramp back after `until`: step in percent of the configured limits
    /// and interval; `None` ends the hold at once at the configured limits.
    pub ramp: Option<(u32, Duration)>,
    /// Free text for reports.
    pub tag: Option<String>,
    /// Who put it there.
    pub origin: Origin,
}

impl Hold {
    /// The fraction (percent) of the configured limits allowed at `now`,
    /// `None` while the hold proper lasts, 100 once it is over.
    fn percent(&self, now: Ms) -> Option<u32> {
        let until = self.until?;
        if now < until {
            return None;
        }
        match self.ramp {
            None => Some(100),
            Some((step, every)) => {
                let k = (now - until) / (every.as_millis().max(1) as u64) + 1;
                Some((k.saturating_mul(u64::from(step.max(1)))).min(100) as u32)
            }
        }
    }

    /// When the allowed limits next change after `now`.
    fn next_change(&self, now: Ms) -> Option<Ms> {
        let until = self.until?;
        if now < until {
            return Some(until);
        }
        let (step, every) = self.ramp?;
        let every = every.as_millis().max(1) as u64;
        let k = (now - until) / every + 1;
        (k.saturating_mul(u64::from(step.max(1))) < 100).then(|| until + k * every)
    }

    /// Whether it is over at `now`.
    fn over(&self, now: Ms) -> bool {
        self.percent(now) == Some(100)
    }
}

#[derive(Clone, Debug)]
struct KeyState {
    name: KeyName,
    /// The properties last computed for it (for reports).
    props: Props,
    conns: u32,
    /// Token bucket level, or tokens used in the window starting at `at`.
    level: f64,
    at: Ms,
    last_connect: Option<Ms>,
    /// References from live bindings.
    refs: u32,
    opened: u64,
    transactions: u64,
}

#[derive(Clone, Debug)]
struct Bound {
    binding: Binding,
    keys: Vec<(KeyIdx, Props)>,
    /// Connections bound to it.
    conns: u32,
}

/// One key as `sluice policy show` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyView {
    /// The key.
    pub name: KeyName,
    /// Configured properties.
    pub props: Props,
    /// Concurrency allowed now (`None`: no limit; 0: held).
    pub concurrency_now: Option<u32>,
    /// Rate allowed now.
    pub rate_now: Option<Rate>,
    /// This instance's share of a concurrency granted cluster-wide.
    pub local_concurrency: Option<u32>,
    /// This instance's share of a rate divided between the instances.
    pub local_rate: Option<Rate>,
    /// Connections open.
    pub connections: u32,
    /// Connections opened since it was first seen.
    pub opened: u64,
    /// Transactions started since it was first seen.
    pub transactions: u64,
}

/// What a reply rule did.
#[derive(Clone, Debug, PartialEq)]
pub struct Triggered {
    /// The rule's index in `replies:`.
    pub rule: usize,
    /// The hold it put in place (or extended).
    pub hold: u64,
    /// The values it holds.
    pub when: Vec<(Field, String)>,
}

/// The shaping state of one instance.
#[derive(Debug)]
pub struct Shaper {
    policy: Arc<Policy>,
    bound: Vec<Option<Bound>>,
    bound_free: Vec<u32>,
    bound_index: HashMap<Binding, BindId>,
    keys: Vec<Option<KeyState>>,
    keys_free: Vec<u32>,
    key_index: HashMap<KeyName, KeyIdx>,
    holds: Vec<Hold>,
    next_hold: u64,
    /// Reply rule matches per (rule, key values), newest last.
    hits: HashMap<(usize, Vec<Box<str>>), VecDeque<Ms>>,
    /// The cluster's share of shared keys, when clusterd is in use.
    share: Option<Box<dyn Share>>,
}

impl Shaper {
    /// A shaper enforcing `policy`.
    pub fn new(policy: Arc<Policy>) -> Shaper {
        let mut s = Shaper {
            policy: Arc::new(Policy::default()),
            bound: Vec::new(),
            bound_free: Vec::new(),
            bound_index: HashMap::new(),
            keys: Vec::new(),
            keys_free: Vec::new(),
            key_index: HashMap::new(),
            holds: Vec::new(),
            next_hold: 1,
            hits: HashMap::new(),
            share: None,
        };
        s.reload(policy);
        s
    }

    /// Puts this instance's share of the cluster's limits in force (or
    /// takes it away: every limit is then the instance's own).
    pub fn set_share(&mut self, share: Option<Box<dyn Share>>) {
        self.share = share;
    }

    /// The share in force, to feed it what the coordinator says.
    pub fn share_mut(&mut self) -> Option<&mut (dyn Share + 'static)> {
        self.share.as_deref_mut()
    }

    /// The policy in force.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// Puts a changed policy in force, keeping connections, buckets,
    /// windows and holds of every key that still exists.
    pub fn reload(&mut self, policy: Arc<Policy>) {
        self.policy = policy;
        self.holds.retain(|h| h.origin != Origin::Static);
        self.hits
            .retain(|(rule, _), _| *rule < self.policy.replies.len());
        let statics: Vec<Hold> = self
            .policy
            .suspensions
            .iter()
            .map(|s| Hold {
                id: 0,
                when: s.when.clone(),
                until: None,
                floor: None,
                ramp: None,
                tag: s.tag.clone(),
                origin: Origin::Static,
            })
            .collect();
        for mut h in statics {
            h.id = self.next_hold;
            self.next_hold += 1;
            self.holds.push(h);
        }
        for i in 0..self.bound.len() {
            let Some(b) = self.bound[i].take() else {
                continue;
            };
            let keys = self.keys_of(&b.binding);
            for &(k, _) in &b.keys {
                self.unref_key(k, b.conns);
            }
            for &(k, _) in &keys {
                if let Some(st) = self.key_mut(k) {
                    st.conns += b.conns;
                }
            }
            self.bound[i] = Some(Bound { keys, ..b });
        }
        for st in self.keys.iter_mut().flatten() {
            st.refs = 0;
        }
        let refs: Vec<KeyIdx> = self
            .bound
            .iter()
            .flatten()
            .flat_map(|b| b.keys.iter().map(|&(k, _)| k))
            .collect();
        for k in refs {
            if let Some(st) = self.key_mut(k) {
                st.refs += 1;
            }
        }
    }

    fn key_mut(&mut self, k: KeyIdx) -> Option<&mut KeyState> {
        self.keys.get_mut(k.0 as usize).and_then(Option::as_mut)
    }

    fn key(&self, k: KeyIdx) -> Option<&KeyState> {
        self.keys.get(k.0 as usize).and_then(Option::as_ref)
    }

    fn unref_key(&mut self, k: KeyIdx, conns: u32) {
        if let Some(st) = self.key_mut(k) {
            st.conns = st.conns.saturating_sub(conns);
        }
    }

    /// The keys of `b` that some policy sets a property on.
    fn keys_of(&mut self, b: &Binding) -> Vec<(KeyIdx, Props)> {
        let policy = Arc::clone(&self.policy);
        let mut out = Vec::new();
        for (i, p) in policy.policies.iter().enumerate() {
            let props = policy.props(i, b);
            if props.is_empty() {
                continue;
            }
            let name = KeyName {
                fields: p.fields.clone(),
                values: p.fields.iter().map(|&f| Box::from(b.get(f))).collect(),
            };
            let k = match self.key_index.get(&name) {
                Some(&k) => k,
                None => {
                    let st = KeyState {
                        name: name.clone(),
                        props,
                        conns: 0,
                        level: 0.0,
                        at: 0,
                        last_connect: None,
                        refs: 0,
                        opened: 0,
                        transactions: 0,
                    };
                    let k = match self.keys_free.pop() {
                        Some(i) => {
                            self.keys[i as usize] = Some(st);
                            KeyIdx(i)
                        }
                        None => {
                            self.keys.push(Some(st));
                            KeyIdx(self.keys.len() as u32 - 1)
                        }
                    };
                    // A new bucket starts full.
                    let bucket = policy.algorithm == RateAlgorithm::TokenBucket;
                    if let (Some(r), Some(st)) = (props.rate, self.key_mut(k)) {
                        st.level = if bucket { f64::from(r.tokens) } else { 0.0 };
                    }
                    self.key_index.insert(name, k);
                    k
                }
            };
            if let Some(st) = self.key_mut(k) {
                st.props = props;
            }
            out.push((k, props));
        }
        out
    }

    /// Interns `b`, computing its keys once.
    pub fn bind(&mut self, b: &Binding) -> BindId {
        if let Some(&id) = self.bound_index.get(b) {
            return id;
        }
        let keys = self.keys_of(b);
        for &(k, _) in &keys {
            if let Some(st) = self.key_mut(k) {
                st.refs += 1;
            }
        }
        let bound = Bound {
            binding: b.clone(),
            keys,
            conns: 0,
        };
        let id = match self.bound_free.pop() {
            Some(i) => {
                self.bound[i as usize] = Some(bound);
                BindId(i)
            }
            None => {
                self.bound.push(Some(bound));
                BindId(self.bound.len() as u32 - 1)
            }
        };
        self.bound_index.insert(b.clone(), id);
        id
    }

    /// The binding behind an id.
    pub fn binding(&self, id: BindId) -> Option<&Binding> {
        self.bound(id).map(|b| &b.binding)
    }

    fn bound(&self, id: BindId) -> Option<&Bound> {
        self.bound.get(id.0 as usize).and_then(Option::as_ref)
    }

    /// Whether any hold suspends `b` now, and until when.
    fn suspended(&self, now: Ms, b: &Binding) -> Option<Block> {
        let mut block: Option<Block> = None;
        for h in &self.holds {
            if h.floor.is_some() || !matches(&h.when, b) {
                continue;
            }
            let this = match h.until {
                Some(t) if now < t => Block::Until(t),
                Some(_) => continue,
                None => return Some(Block::Suspended),
            };
            block = Some(match (block, this) {
                (Some(Block::Until(a)), Block::Until(b)) => Block::Until(a.max(b)),
                (_, x) => x,
            });
        }
        block
    }

    /// Whether a hold suspends the mail of `id` at `now`.
    pub fn is_suspended(&self, now: Ms, id: BindId) -> bool {
        self.bound(id)
            .is_some_and(|b| self.suspended(now, &b.binding).is_some())
    }

    /// Whether a connection for `b` may open at `now`. A shared key whose
    /// share is taken asks the cluster for a slot.
    pub fn may_open(&mut self, now: Ms, id: BindId) -> Result<(), Block> {
        let Some(bound) = self.bound.get(id.0 as usize).and_then(Option::as_ref) else {
            return Ok(());
        };
        if let Some(block) = self.suspended(now, &bound.binding) {
            return Err(block);
        }
        let mut later: Option<Ms> = None;
        for &(k, props) in &bound.keys {
            let Some(st) = self.keys.get(k.0 as usize).and_then(Option::as_ref) else {
                continue;
            };
            let eff = effective(&self.holds, now, &bound.binding, &props);
            let mut limit = eff.concurrency;
            if let (Some(share), Some(c)) = (self.share.as_deref_mut(), eff.concurrency) {
                if share::shared_concurrency(&st.name, &props) {
                    let mine = share.concurrency(&st.name, c);
                    if st.conns >= mine && st.conns < c {
                        share.want(&st.name, st.conns, c);
                    }
                    limit = Some(mine.min(c));
                }
            }
            if limit.is_some_and(|c| st.conns >= c) {
                return Err(Block::Full(k));
            }
            if let (Some(ci), Some(last)) = (eff.connect_interval, st.last_connect) {
                let at = last.saturating_add(ci.as_millis() as u64);
                if at > now {
                    later = Some(later.map_or(at, |l: Ms| l.max(at)));
                }
            }
        }
        later.map_or(Ok(()), |t| Err(Block::Until(t)))
    }

    /// A connection for `b` opened: it holds a slot of each key until `closed`.
    pub fn opened(&mut self, now: Ms, id: BindId) {
        let keys: Vec<KeyIdx> = match self.bound.get_mut(id.0 as usize).and_then(Option::as_mut) {
            Some(b) => {
                b.conns += 1;
                b.keys.iter().map(|&(k, _)| k).collect()
            }
            None => return,
        };
        for k in keys {
            if let Some(st) = self.keys.get_mut(k.0 as usize).and_then(Option::as_mut) {
                st.conns += 1;
                st.opened += 1;
                st.last_connect = Some(now);
                if let Some(share) = self.share.as_deref_mut() {
                    if share::shared_concurrency(&st.name, &st.props) {
                        share.opened(&st.name);
                    }
                }
            }
        }
    }

    /// A connection for `b` closed (or never came up): its slots are free.
    pub fn closed(&mut self, id: BindId) {
        let keys: Vec<KeyIdx> = match self.bound.get_mut(id.0 as usize).and_then(Option::as_mut) {
            Some(b) if b.conns > 0 => {
                b.conns -= 1;
                b.keys.iter().map(|&(k, _)| k).collect()
            }
            _ => return,
        };
        for k in keys {
            self.unref_key(k, 1);
            if let (Some(share), Some(st)) = (
                self.share.as_deref_mut(),
                self.keys.get(k.0 as usize).and_then(Option::as_ref),
            ) {
                if share::shared_concurrency(&st.name, &st.props) {
                    share.closed(&st.name);
                }
            }
        }
    }

    /// Takes one token of every rate of `b` for a transaction, or says
    /// when to ask again (all or nothing: no token is taken on a refusal).
    pub fn may_send(&mut self, now: Ms, id: BindId) -> Result<(), Block> {
        self.can_send(now, id)?;
        let algorithm = self.policy.algorithm;
        // Disjoint fields: the binding's keys are read while their states change.
        let Some(bound) = self.bound.get(id.0 as usize).and_then(Option::as_ref) else {
            return Ok(());
        };
        for &(k, props) in &bound.keys {
            let rate = effective(&self.holds, now, &bound.binding, &props).rate;
            let Some(st) = self.keys.get_mut(k.0 as usize).and_then(Option::as_mut) else {
                continue;
            };
            let rate = match (self.share.as_deref_mut(), rate) {
                (Some(share), Some(r)) if share::shared_rate(&props) => {
                    share.sent(&st.name, r);
                    Some(share.rate(&st.name, r))
                }
                (_, r) => r,
            };
            st.transactions += 1;
            if let Some(rate) = rate {
                let (level, at) = refill(algorithm, rate, st.level, st.at, now);
                st.level = match algorithm {
                    RateAlgorithm::TokenBucket => level - 1.0,
                    RateAlgorithm::FixedWindow => level + 1.0,
                };
                st.at = at;
            }
        }
        Ok(())
    }

    /// Whether a transaction of `b` could start now, taking nothing.
    pub fn can_send(&self, now: Ms, id: BindId) -> Result<(), Block> {
        let Some(bound) = self.bound(id) else {
            return Ok(());
        };
        if let Some(block) = self.suspended(now, &bound.binding) {
            return Err(block);
        }
        let algorithm = self.policy.algorithm;
        let mut later: Option<Ms> = None;
        for &(k, props) in &bound.keys {
            let Some(rate) = effective(&self.holds, now, &bound.binding, &props).rate else {
                continue;
            };
            let Some(st) = self.key(k) else { continue };
            let configured = rate;
            let rate = self.shared_rate(&st.name, &props, rate);
            let (level, _) = refill(algorithm, rate, st.level, st.at, now);
            let wait = match algorithm {
                RateAlgorithm::TokenBucket if level < 1.0 => {
                    let per_token =
                        rate.per.as_millis().max(1) as f64 / f64::from(rate.tokens.max(1));
                    Some(now + ((1.0 - level) * per_token).ceil() as u64)
                }
                RateAlgorithm::FixedWindow if level >= f64::from(rate.tokens) => {
                    let w = rate.per.as_millis().max(1) as u64;
                    Some(now - now % w + w)
                }
                _ => None,
            };
            if let Some(at) = wait {
                later = Some(later.map_or(at, |l: Ms| l.max(at)));
                if let Some(share) = self.share.as_deref() {
                    if share::shared_rate(&props) {
                        share.starved(&st.name, configured);
                    }
                }
            }
        }
        match later {
            Some(at) => Err(Block::Until(at)),
            None => Ok(()),
        }
    }

    /// This instance's part of `rate` on `name`, when the rate is shared.
    fn shared_rate(&self, name: &KeyName, props: &Props, rate: Rate) -> Rate {
        match &self.share {
            Some(share) if share::shared_rate(props) => share.rate(name, rate),
            _ => rate,
        }
    }

    /// The per-connection limits of `b`: transactions before it closes and
    /// how long it may stay idle (the smallest of its keys').
    pub fn connection_limits(&self, id: BindId) -> (Option<u32>, Option<Duration>) {
        let Some(b) = self.bound(id) else {
            return (None, None);
        };
        b.keys.iter().fold((None, None), |(t, i), (_, p)| {
            (lowest(t, p.transactions), lowest(i, p.idle_timeout))
        })
    }

    /// Whether key `k` is one of `b`'s.
    pub fn has_key(&self, id: BindId, k: KeyIdx) -> bool {
        self.bound(id)
            .is_some_and(|b| b.keys.iter().any(|&(x, _)| x == k))
    }

    /// A remote reply on a connection of `b`: applies every `replies:`
    /// rule it matches and whose threshold it reaches.
    pub fn reply(&mut self, now: Ms, id: BindId, text: &str) -> Vec<Triggered> {
        self.replies(now, id, &[text])
    }

    /// The refusals of one transaction (or one handshake) on a connection
    /// of `b`: a rule any of them matches counts once, however many
    /// recipients the server refused and whether or not it named each
    /// one in its text.
    pub fn replies(&mut self, now: Ms, id: BindId, texts: &[&str]) -> Vec<Triggered> {
        let Some(b) = self.bound(id).map(|b| b.binding.clone()) else {
            return Vec::new();
        };
        let policy = Arc::clone(&self.policy);
        let mut out = Vec::new();
        for (i, rule) in policy.replies.iter().enumerate() {
            if !matches(&rule.when, &b) || !texts.iter().any(|t| rule.pattern.is_match(t)) {
                continue;
            }
            let values: Vec<Box<str>> = rule.fields.iter().map(|&f| Box::from(b.get(f))).collect();
            let fire = match rule.threshold {
                Threshold::Immediate => true,
                Threshold::Count { n, per } => {
                    let q = self.hits.entry((i, values.clone())).or_default();
                    let horizon = now.saturating_sub(per.as_millis() as u64);
                    while q.front().is_some_and(|&t| t <= horizon) {
                        q.pop_front();
                    }
                    q.push_back(now);
                    while q.len() > n.max(1) as usize {
                        q.pop_front();
                    }
                    q.len() >= n.max(1) as usize
                }
            };
            if !fire {
                continue;
            }
            self.hits.remove(&(i, values.clone()));
            let when: Vec<(Field, String)> = rule
                .fields
                .iter()
                .zip(&values)
                .map(|(&f, v)| (f, v.to_string()))
                .collect();
            let until = now.saturating_add(rule.duration.as_millis() as u64);
            let floor = match rule.action {
                ReplyAction::Suspend => None,
                ReplyAction::Backoff(p) => Some(p),
            };
            let existing = self
                .holds
                .iter_mut()
                .find(|h| h.origin == Origin::Reply(i) && h.when == when);
            let hold = match existing {
                Some(h) => {
                    h.until = Some(h.until.map_or(until, |t| t.max(until)));
                    h.id
                }
                None => {
                    let id = self.next_hold;
                    self.next_hold += 1;
                    self.holds.push(Hold {
                        id,
                        when: when.clone(),
                        until: Some(until),
                        floor,
                        ramp: Some((rule.ramp_step_percent, rule.ramp_interval)),
                        tag: Some(format!("reply rule {}: {}", i + 1, rule.pattern.as_str())),
                        origin: Origin::Reply(i),
                    });
                    id
                }
            };
            out.push(Triggered {
                rule: i,
                hold,
                when,
            });
        }
        out
    }

    /// An operator's suspension of mail with these values, for `until` or
    /// until resumed; it ends at the configured limits, without a ramp.
    pub fn suspend(
        &mut self,
        when: Vec<(Field, String)>,
        until: Option<Ms>,
        tag: Option<String>,
    ) -> u64 {
        let id = self.next_hold;
        self.next_hold += 1;
        self.holds.push(Hold {
            id,
            when,
            until,
            floor: None,
            ramp: None,
            tag,
            origin: Origin::Operator,
        });
        id
    }

    /// Restores an operator's suspension saved before a restart, keeping its id.
    pub fn restore(&mut self, hold: Hold) {
        self.next_hold = self.next_hold.max(hold.id + 1);
        self.holds.retain(|h| h.id != hold.id);
        self.holds.push(hold);
    }

    /// Lifts a hold (an operator's or a reply rule's; static ones stay
    /// while the file has them). False when there is no such hold.
    pub fn resume(&mut self, id: u64) -> bool {
        let before = self.holds.len();
        self.holds
            .retain(|h| h.id != id || h.origin == Origin::Static);
        self.holds.len() != before
    }

    /// Holds in force at `now` (expired ones are dropped first).
    pub fn holds(&mut self, now: Ms) -> &[Hold] {
        self.holds.retain(|h| !h.over(now));
        &self.holds
    }

    /// Holds in force at `now`, without dropping expired ones.
    pub fn active_holds(&self, now: Ms) -> impl Iterator<Item = &Hold> {
        self.holds.iter().filter(move |h| !h.over(now))
    }

    /// When the limits allowed next rise (a hold ends or ramps a step), so
    /// that the caller can wake the mail waiting for them.
    pub fn next_change(&self, now: Ms) -> Option<Ms> {
        self.holds.iter().filter_map(|h| h.next_change(now)).min()
    }

    /// Every key in use, with its configured and current limits.
    pub fn keys(&self, now: Ms) -> Vec<KeyView> {
        let mut seen: HashMap<KeyIdx, KeyView> = HashMap::new();
        for b in self.bound.iter().flatten() {
            for &(k, props) in &b.keys {
                let Some(st) = self.key(k) else { continue };
                let eff = effective(&self.holds, now, &b.binding, &props);
                let held = self.suspended(now, &b.binding).is_some();
                let share = self.share.as_deref();
                let local_concurrency = match (share, eff.concurrency) {
                    (Some(s), Some(c)) if share::shared_concurrency(&st.name, &props) => {
                        Some(s.concurrency(&st.name, c))
                    }
                    _ => None,
                };
                let local_rate = match (share, eff.rate) {
                    (Some(s), Some(r)) if share::shared_rate(&props) => Some(s.rate(&st.name, r)),
                    _ => None,
                };
                let v = KeyView {
                    name: st.name.clone(),
                    props,
                    concurrency_now: if held { Some(0) } else { eff.concurrency },
                    rate_now: eff.rate,
                    local_concurrency,
                    local_rate,
                    connections: st.conns,
                    opened: st.opened,
                    transactions: st.transactions,
                };
                seen.entry(k)
                    .and_modify(|x| {
                        x.concurrency_now = lowest(x.concurrency_now, v.concurrency_now);
                    })
                    .or_insert(v);
            }
        }
        let mut out: Vec<KeyView> = seen.into_values().collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Connections open on key `k`.
    pub fn connections(&self, k: KeyIdx) -> u32 {
        self.key(k).map_or(0, |s| s.conns)
    }

    /// Drops bindings no connection uses, keys no binding uses whose
    /// buckets are full again, and expired holds. Returns bindings dropped;
    /// ids of dropped bindings must not be used again.
    pub fn gc(&mut self, now: Ms, in_use: impl Fn(BindId) -> bool) -> usize {
        self.holds.retain(|h| !h.over(now));
        let mut dropped = 0;
        for i in 0..self.bound.len() {
            let id = BindId(i as u32);
            let drop = match &self.bound[i] {
                Some(b) => b.conns == 0 && !in_use(id),
                None => false,
            };
            if !drop {
                continue;
            }
            if let Some(b) = self.bound[i].take() {
                self.bound_index.remove(&b.binding);
                for (k, _) in b.keys {
                    if let Some(st) = self.key_mut(k) {
                        st.refs = st.refs.saturating_sub(1);
                    }
                }
                self.bound_free.push(i as u32);
                dropped += 1;
            }
        }
        let algorithm = self.policy.algorithm;
        for i in 0..self.keys.len() {
            let idle = self.keys[i].as_ref().is_some_and(|st| {
                let rested = match st.props.rate {
                    Some(r) => {
                        let (level, _) = refill(algorithm, r, st.level, st.at, now);
                        match algorithm {
                            RateAlgorithm::TokenBucket => level >= f64::from(r.tokens),
                            RateAlgorithm::FixedWindow => level == 0.0,
                        }
                    }
                    None => true,
                };
                let quiet = match (st.props.connect_interval, st.last_connect) {
                    (Some(ci), Some(l)) => now >= l.saturating_add(ci.as_millis() as u64),
                    _ => true,
                };
                st.refs == 0 && st.conns == 0 && rested && quiet
            });
            if idle {
                if let Some(st) = self.keys[i].take() {
                    self.key_index.remove(&st.name);
                    self.keys_free.push(i as u32);
                }
            }
        }
        dropped
    }

    /// Keys with state (memory accounting, tests).
    pub fn key_count(&self) -> usize {
        self.key_index.len()
    }
}

/// The limits allowed now for a key of `b` configured with `props`: the
/// configured ones, lowered by every hold on `b` and its ramp.
fn effective(holds: &[Hold], now: Ms, b: &Binding, props: &Props) -> Props {
    let mut eff = *props;
    for h in holds {
        if !matches(&h.when, b) || h.over(now) {
            continue;
        }
        let floor = h.floor.unwrap_or(Props {
            concurrency: Some(0),
            rate: None,
            ..Props::default()
        });
        let pct = h.percent(now);
        let step = h.ramp.map_or(100, |(s, _)| s.max(1));
        eff.concurrency = lowest(
            eff.concurrency,
            ramp_count(props.concurrency, floor.concurrency, pct, step),
        );
        eff.rate = match (eff.rate, ramp_rate(props.rate, floor.rate, pct, step)) {
            (Some(a), Some(r)) => Some(slower(a, r)),
            (a, r) => a.or(r),
        };
    }
    eff
}

/// The bucket level (or window use) at `now` and the time it is as of.
fn refill(algorithm: RateAlgorithm, rate: Rate, level: f64, at: Ms, now: Ms) -> (f64, Ms) {
    let per = rate.per.as_millis().max(1) as u64;
    match algorithm {
        RateAlgorithm::TokenBucket => {
            let add = now.saturating_sub(at) as f64 * f64::from(rate.tokens) / per as f64;
            ((level + add).min(f64::from(rate.tokens)), now.max(at))
        }
        RateAlgorithm::FixedWindow => {
            let start = now - now % per;
            if start != at {
                (0.0, start)
            } else {
                (level, at)
            }
        }
    }
}

/// The smaller of two optional limits, `None` being no limit.
fn lowest<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The slower of two rates.
fn slower(a: Rate, b: Rate) -> Rate {
    let (ra, rb) = (
        f64::from(a.tokens) / a.per.as_secs_f64().max(1e-3),
        f64::from(b.tokens) / b.per.as_secs_f64().max(1e-3),
    );
    if ra <= rb {
        a
    } else {
        b
    }
}

/// A count during a hold (`pct` None) or its ramp: the floor, then
/// `pct` percent of the configured value (never below the floor, at least
/// 1 once ramping). Without a configured value the ramp climbs from the
/// floor by one floor per step, ending after 100/step steps.
fn ramp_count(conf: Option<u32>, floor: Option<u32>, pct: Option<u32>, step: u32) -> Option<u32> {
    let Some(pct) = pct else { return floor };
    if pct >= 100 {
        return conf;
    }
    match (conf, floor) {
        (Some(c), f) => {
            let v = (u64::from(c) * u64::from(pct)).div_ceil(100) as u32;
            Some(v.max(f.unwrap_or(0)).max(1).min(c))
        }
        (None, Some(f)) => Some(f.max(1).saturating_mul(pct / step.max(1) + 1)),
        (None, None) => None,
    }
}

/// A rate during a hold or its ramp, as [`ramp_count`] for its tokens.
fn ramp_rate(conf: Option<Rate>, floor: Option<Rate>, pct: Option<u32>, step: u32) -> Option<Rate> {
    let Some(pct) = pct else { return floor };
    if pct >= 100 {
        return conf;
    }
    match (conf, floor) {
        (Some(c), _) => Some(Rate {
            tokens: ((u64::from(c.tokens) * u64::from(pct)).div_ceil(100) as u32).max(1),
            per: c.per,
        }),
        (None, Some(f)) => Some(Rate {
            tokens: f.tokens.max(1).saturating_mul(pct / step.max(1) + 1),
            per: f.per,
        }),
        (None, None) => None,
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
