//! The sans-IO stub resolver: queries, retries, timeouts and the cache.
//!
//! [`Resolver::lookup`] answers from the cache or starts a query (one per
//! name and type: a second asker joins the first). The shell sends what
//! [`Resolver::poll_transmit`] gives, feeds replies back with
//! [`Resolver::handle_udp`] / [`Resolver::handle_tcp`], calls
//! [`Resolver::handle_timeout`] at [`Resolver::poll_timeout`], and collects
//! finished queries from [`Resolver::poll_done`]. Time comes in as `now`;
//! DNS ids come from a seeded generator, so runs are reproducible.
//!
//! Each query tries the servers in turn, `attempts` rounds, `timeout` per
//! try; SERVFAIL and REFUSED move on at once; a truncated UDP answer is
//! asked again over TCP of the same server. A reply counts only from the
//! server asked, with our id and our question. NXDOMAIN and NODATA are
//! cached for the SOA minimum (RFC 2308), answers for their TTL, both
//! capped at a day; the cache holds at most `cache_size` entries.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::wire::{self, Data, QType, Reply};
use crate::{DnsError, Rng};

/// Identifies a query in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueryId(pub u64);

/// A finished lookup: the records at the end of the CNAME chain (none for NODATA).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The canonical name (after CNAMEs).
    pub name: String,
    /// The records.
    pub data: Vec<Data>,
    /// Seconds left to live.
    pub ttl: u32,
    /// Every response on the way had the AD bit.
    pub authentic: bool,
}

/// The outcome of a lookup.
pub type Outcome = Result<Answer, DnsError>;

/// What [`Resolver::lookup`] gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// From the cache, or refused at once.
    Ready(Outcome),
    /// In flight: the outcome comes out of [`Resolver::poll_done`].
    Pending(QueryId),
}

/// A datagram or TCP message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The query it belongs to.
    pub query: QueryId,
    /// The DNS id in it (a TCP reply is matched by it).
    pub wire_id: u16,
    /// Where to.
    pub server: SocketAddr,
    /// Over TCP (with the two-byte length prefix added by the transport).
    pub tcp: bool,
    /// The DNS message.
    pub payload: Vec<u8>,
}

/// Resolver settings.
#[derive(Debug, Clone)]
pub struct ResolverConfig {
    /// Name servers, tried in order.
    pub servers: Vec<SocketAddr>,
    /// Time to wait for one reply.
    pub timeout: Duration,
    /// Rounds over all servers.
    pub attempts: u32,
    /// Most cache entries.
    pub cache_size: usize,
    /// Seed for DNS ids and shuffles.
    pub seed: u64,
    /// Most queries on the wire at once; more wait their turn. A burst of
    /// answers larger than the socket's receive buffer would be dropped by
    /// the kernel and cost a whole timeout each.
    pub max_in_flight: usize,
    /// `smtp_dns_support_level = dnssec`: ask for DNSSEC (DO and AD bits)
    /// and believe the AD bit of answers. Otherwise no answer is authentic.
    pub dnssec: bool,
}

/// The default [`ResolverConfig::max_in_flight`].
pub const MAX_IN_FLIGHT: usize = 128;

impl Default for ResolverConfig {
    fn default() -> Self {
        ResolverConfig {
            servers: vec![],
            timeout: Duration::from_secs(5),
            attempts: 2,
            cache_size: 10_000,
            seed: 1,
            max_in_flight: MAX_IN_FLIGHT,
            dnssec: false,
        }
    }
}

const MAX_CNAME_HOPS: u8 = 8;
const MAX_TTL: u32 = 86_400;

#[derive(Debug)]
struct Query {
    key: (String, QType),
    name: String,
    wire_id: u16,
    try_no: u32,
    deadline: Instant,
    tcp: bool,
    hops: u8,
    authentic: bool,
    ttl: u32,
    last_error: DnsError,
    started: bool,
}

#[derive(Debug)]
struct Entry {
    outcome: Outcome,
    expires: Instant,
}

/// The resolver core.
#[derive(Debug)]
pub struct Resolver {
    cfg: ResolverConfig,
    rng: Rng,
    next_id: u64,
    queries: BTreeMap<QueryId, Query>,
    by_key: HashMap<(String, QType), QueryId>,
    by_wire: HashMap<u16, QueryId>,
    timers: BTreeSet<(Instant, QueryId)>,
    waiting: VecDeque<QueryId>,
    active: usize,
    transmits: VecDeque<Transmit>,
    done: VecDeque<(QueryId, Outcome)>,
    cache: HashMap<(String, QType), Entry>,
    cache_order: VecDeque<(Instant, (String, QType))>,
    /// Queries sent, answers from the cache: for statistics.
    pub stats: Stats,
}

/// Counters for logs and benchmarks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Lookups answered from the cache.
    pub cache_hits: u64,
    /// Messages sent.
    pub sent: u64,
    /// Tries that timed out.
    pub timeouts: u64,
}

impl Resolver {
    /// A resolver with no cache entries and nothing in flight.
    pub fn new(cfg: ResolverConfig) -> Resolver {
        Resolver {
            rng: Rng::new(cfg.seed),
            cfg,
            next_id: 1,
            queries: BTreeMap::new(),
            by_key: HashMap::new(),
            by_wire: HashMap::new(),
            timers: BTreeSet::new(),
            waiting: VecDeque::new(),
            active: 0,
            transmits: VecDeque::new(),
            done: VecDeque::new(),
            cache: HashMap::new(),
            cache_order: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &ResolverConfig {
        &self.cfg
    }

    /// Queries in flight.
    pub fn in_flight(&self) -> usize {
        self.queries.len()
    }

    /// Starts or joins a lookup of `name`/`qtype`, or answers from the cache.
    pub fn lookup(&mut self, name: &str, qtype: QType, now: Instant) -> Lookup {
        let name = wire::norm(name);
        if !wire::valid_name(&name) {
            return Lookup::Ready(Err(DnsError::BadName(name)));
        }
        let key = (name, qtype);
        if let Some(r) = self.cached(&key, now) {
            self.stats.cache_hits += 1;
            return Lookup::Ready(r);
        }
        if let Some(&q) = self.by_key.get(&key) {
            return Lookup::Pending(q);
        }
        if self.cfg.servers.is_empty() {
            return Lookup::Ready(Err(DnsError::NoServers));
        }
        let id = QueryId(self.next_id);
        self.next_id += 1;
        let q = Query {
            name: key.0.clone(),
            key: key.clone(),
            wire_id: 0,
            try_no: 0,
            deadline: now,
            tcp: false,
            hops: 0,
            authentic: true,
            ttl: MAX_TTL,
            last_error: DnsError::Timeout,
            started: false,
        };
        self.by_key.insert(key, id);
        self.queries.insert(id, q);
        self.waiting.push_back(id);
        self.start_waiting(now);
        Lookup::Pending(id)
    }

    /// Puts waiting queries on the wire while there is room.
    fn start_waiting(&mut self, now: Instant) {
        // Each query on the wire holds a distinct 16-bit id: stay well below.
        while self.active < self.cfg.max_in_flight.clamp(1, 30_000) {
            let Some(id) = self.waiting.pop_front() else {
                break;
            };
            if let Some(q) = self.queries.get_mut(&id) {
                q.started = true;
                self.active += 1;
                self.send_try(id, now);
            }
        }
    }

    /// Queries waiting for room on the wire.
    pub fn queued(&self) -> usize {
        self.waiting.len()
    }

    fn cached(&mut self, key: &(String, QType), now: Instant) -> Option<Outcome> {
        let e = self.cache.get(key)?;
        if e.expires <= now {
            self.cache.remove(key);
            return None;
        }
        let left = e.expires.saturating_duration_since(now).as_secs() as u32;
        Some(match &e.outcome {
            Ok(a) => Ok(Answer {
                ttl: left,
                ..a.clone()
            }),
            Err(e) => Err(e.clone()),
        })
    }

    fn store(&mut self, key: (String, QType), outcome: &Outcome, ttl: u32, now: Instant) {
        if ttl == 0 || self.cfg.cache_size == 0 {
            return;
        }
        let expires = now + Duration::from_secs(ttl.min(MAX_TTL) as u64);
        // Evict in insertion order, skipping entries already replaced.
        while self.cache.len() >= self.cfg.cache_size {
            let Some((at, k)) = self.cache_order.pop_front() else {
                break;
            };
            if self.cache.get(&k).is_some_and(|e| e.expires == at) {
                self.cache.remove(&k);
            }
        }
        // Replaced entries leave stale order records; drop the oldest
        // records (and their entries) so the queue stays bounded too.
        while self.cache_order.len() >= 2 * self.cfg.cache_size {
            let Some((at, k)) = self.cache_order.pop_front() else {
                break;
            };
            if self.cache.get(&k).is_some_and(|e| e.expires == at) {
                self.cache.remove(&k);
            }
        }
        self.cache_order.push_back((expires, key.clone()));
        self.cache.insert(
            key,
            Entry {
                outcome: outcome.clone(),
                expires,
            },
        );
    }

    /// Sends try number `try_no` of a query, or ends it when tries are used up.
    fn send_try(&mut self, id: QueryId, now: Instant) {
        let n = self.cfg.servers.len() as u32;
        let Some(q) = self.queries.get_mut(&id) else {
            return;
        };
        if q.try_no >= n * self.cfg.attempts.max(1) {
            let e = q.last_error.clone();
            self.finish(id, Err(e), now);
            return;
        }
        let server = self.cfg.servers[(q.try_no % n) as usize];
        if self.by_wire.get(&q.wire_id) == Some(&id) {
            self.by_wire.remove(&q.wire_id);
        }
        let mut wire_id = self.rng.next_u64() as u16;
        while self.by_wire.contains_key(&wire_id) {
            wire_id = self.rng.next_u64() as u16;
        }
        let Some(payload) = wire::query(wire_id, &q.name, q.key.1, self.cfg.dnssec) else {
            let e = DnsError::BadName(q.name.clone());
            self.finish(id, Err(e), now);
            return;
        };
        q.wire_id = wire_id;
        q.tcp = false;
        self.timers.remove(&(q.deadline, id));
        q.deadline = now + self.cfg.timeout;
        self.timers.insert((q.deadline, id));
        self.by_wire.insert(wire_id, id);
        self.stats.sent += 1;
        self.transmits.push_back(Transmit {
            query: id,
            wire_id,
            server,
            tcp: false,
            payload,
        });
    }

    fn server_of(&self, q: &Query) -> SocketAddr {
        self.cfg.servers[(q.try_no % self.cfg.servers.len() as u32) as usize]
    }

    /// A UDP datagram arrived from `from`.
    pub fn handle_udp(&mut self, from: SocketAddr, payload: &[u8], now: Instant) {
        let Some(wid) = wire::message_id(payload) else {
            return;
        };
        let Some(&id) = self.by_wire.get(&wid) else {
            return;
        };
        let Some(q) = self.queries.get(&id) else {
            return;
        };
        if q.tcp || self.server_of(q) != from {
            return;
        }
        self.handle_reply(id, payload, now);
    }

    /// A TCP reply (without its length prefix) arrived for `query`.
    pub fn handle_tcp(&mut self, query: QueryId, payload: &[u8], now: Instant) {
        let Some(q) = self.queries.get(&query) else {
            return;
        };
        if !q.tcp || wire::message_id(payload) != Some(q.wire_id) {
            return;
        }
        self.handle_reply(query, payload, now);
    }

    /// The socket for try (`query`, `wire_id`) failed: no socket, refused,
    /// reset, closed early. The next try goes out at once.
    pub fn handle_transport_error(&mut self, query: QueryId, wire_id: u16, now: Instant) {
        let Some(q) = self.queries.get_mut(&query) else {
            return;
        };
        if q.wire_id != wire_id {
            return;
        }
        let what = if q.tcp { "TCP" } else { "UDP" };
        q.last_error = DnsError::ServFail(format!("{what} transport failed"));
        q.try_no += 1;
        self.send_try(query, now);
    }

    fn handle_reply(&mut self, id: QueryId, payload: &[u8], now: Instant) {
        let Some(q) = self.queries.get_mut(&id) else {
            return;
        };
        let Some(reply) = wire::read(payload, q.wire_id, &q.name, q.key.1) else {
            return;
        };
        match reply {
            Reply::Truncated if !q.tcp => {
                let server = self.cfg.servers[(q.try_no % self.cfg.servers.len() as u32) as usize];
                let Some(payload) = wire::query(q.wire_id, &q.name, q.key.1, self.cfg.dnssec)
                else {
                    return;
                };
                q.tcp = true;
                self.timers.remove(&(q.deadline, id));
                q.deadline = now + self.cfg.timeout;
                self.timers.insert((q.deadline, id));
                self.stats.sent += 1;
                self.transmits.push_back(Transmit {
                    query: id,
                    wire_id: q.wire_id,
                    server,
                    tcp: true,
                    payload,
                });
            }
            Reply::Truncated => {
                q.last_error = DnsError::ServFail("truncated answer over TCP".into());
                q.try_no += 1;
                self.send_try(id, now);
            }
            Reply::ServerError(text) => {
                q.last_error = DnsError::ServFail(text);
                q.try_no += 1;
                self.send_try(id, now);
            }
            Reply::NxDomain { ttl } => {
                let ttl = q.ttl.min(ttl);
                let key = q.key.clone();
                let out = Err(DnsError::NotFound(q.name.clone()));
                self.store(key, &out, ttl, now);
                self.finish(id, out, now);
            }
            Reply::Records {
                name,
                data,
                ttl,
                authentic,
            } => {
                q.authentic &= authentic;
                q.ttl = q.ttl.min(ttl);
                if data.is_empty() && name != q.name {
                    // The chain leaves this answer: follow it with a new query.
                    q.hops += 1;
                    if q.hops > MAX_CNAME_HOPS {
                        let e = DnsError::CnameChain(q.key.0.clone());
                        self.finish(id, Err(e), now);
                        return;
                    }
                    q.name = name;
                    q.try_no = 0;
                    self.send_try(id, now);
                    return;
                }
                let out = Ok(Answer {
                    name,
                    data,
                    ttl: q.ttl,
                    // The AD bit means something only from a validating
                    // resolver the operator chose to trust (Postfix's rule).
                    authentic: q.authentic && self.cfg.dnssec,
                });
                let (key, ttl) = (q.key.clone(), q.ttl);
                self.store(key, &out, ttl, now);
                self.finish(id, out, now);
            }
        }
    }

    fn finish(&mut self, id: QueryId, outcome: Outcome, now: Instant) {
        if let Some(q) = self.queries.remove(&id) {
            if q.started {
                self.active -= 1;
            }
            self.timers.remove(&(q.deadline, id));
            self.by_key.remove(&q.key);
            if self.by_wire.get(&q.wire_id) == Some(&id) {
                self.by_wire.remove(&q.wire_id);
            }
            self.done.push_back((id, outcome));
            self.start_waiting(now);
        }
    }

    /// Expires tries whose time is up.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(at, id)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            self.stats.timeouts += 1;
            if let Some(q) = self.queries.get_mut(&id) {
                q.last_error = DnsError::Timeout;
                q.try_no += 1;
                self.send_try(id, now);
            }
        }
    }

    /// When [`Resolver::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|(at, _)| *at)
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next finished query.
    pub fn poll_done(&mut self) -> Option<(QueryId, Outcome)> {
        self.done.pop_front()
    }

    /// Whether the socket of try (`query`, `wire_id`, `tcp`) is still wanted.
    pub fn wants_socket(&self, query: QueryId, wire_id: u16, tcp: bool) -> bool {
        self.queries
            .get(&query)
            .is_some_and(|q| q.tcp == tcp && q.wire_id == wire_id)
    }

    /// Entries in the cache.
    pub fn cache_len(&self) -> usize {
        self.cache.len()
    }

    /// Drops every cache entry (on reload).
    pub fn clear_cache(&mut self) {
        self.cache.clear();
        self.cache_order.clear();
    }
}
