//! `hosts(nexthop)`: the servers of a next hop, in the order to try them.
//!
//! A job per request, sans-IO on top of [`Resolver`]: `[host]` and
//! `[host]:port` (or an address literal) skip the MX lookup; otherwise MX
//! records are sorted by preference, with a seeded shuffle among equal
//! preferences (RFC 5321 5.1). A domain without MX records is its own
//! implicit MX; a single MX `0 .` is a null MX (RFC 7505) and fails
//! permanently; NXDOMAIN fails permanently, SERVFAIL and timeouts
//! temporarily. Each exchanger's A and/or AAAA records (per
//! `inet_protocols`) are looked up in parallel. A host whose addresses
//! could not be found keeps its place with the reason; the whole request
//! fails only when no host has an address.
//!
//! With DNSSEC on (the resolver's `dnssec`), each host is also classed for
//! DANE (RFC 7672 2.2): secure when the MX answer (or the configured
//! `[host]` next hop) and all its address answers were validated; then its
//! TLSA records `_port._tcp.host` are looked up alongside its addresses
//! and carried in [`Host::dane`]. A secure host whose address or TLSA
//! lookup failed is marked failed, not insecure, so that a fault (or an
//! attacker) cannot turn DANE off by breaking a lookup. When a secure
//! host's name is an alias (its validated address answer ends at another
//! name), the TLSA records at the expanded name come first and those at
//! the name the MX gives only when the expanded name has none (RFC 7672
//! 2.2.2, as Postfix does).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Instant;

use crate::resolver::{Answer, Lookup, Outcome, QueryId, Resolver};
use crate::wire::{Data, QType};
use crate::{DnsError, Rng};

/// Most exchangers of one domain that are used (and whose addresses are looked up).
pub const MAX_EXCHANGERS: usize = 100;

/// Which address families to look up (`inet_protocols`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocols {
    /// A only.
    Ipv4,
    /// AAAA only.
    Ipv6,
    /// Both.
    All,
}

/// `hosts()` settings.
#[derive(Debug, Clone, Copy)]
pub struct HostsConfig {
    /// Address families.
    pub protocols: Protocols,
    /// IPv6 addresses before IPv4 ones within a host.
    pub prefer_ipv6: bool,
    /// Seed for the shuffle among equal preferences.
    pub seed: u64,
    /// Find exchangers' addresses with the system resolver
    /// (`smtp_host_lookup = native`): the shell serves [`Dns::poll_native`].
    pub native: bool,
}

/// An address lookup for the system resolver (getaddrinfo), which the
/// shell runs where it may block and answers with [`Dns::native_done`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeRequest {
    /// The job it belongs to.
    pub job: JobId,
    /// The host's index in the job.
    pub host: usize,
    /// The host name to look up.
    pub name: String,
}

impl Default for HostsConfig {
    fn default() -> Self {
        HostsConfig {
            protocols: Protocols::All,
            prefer_ipv6: false,
            seed: 1,
            native: false,
        }
    }
}

/// What validated DNS says of a host's TLS (RFC 7672 2.2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Dane {
    /// DNSSEC is off, or the MX or address answers were not validated.
    #[default]
    Insecure,
    /// Validated host, and no validated TLSA records.
    NoRecords,
    /// The validated TLSA records: usage, selector, matching type, data.
    Records(Vec<(u8, u8, u8, Vec<u8>)>),
    /// A validated host whose address or TLSA lookup failed: not to be
    /// used where DANE is required.
    Failed(DnsError),
}

/// One server of a next hop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The exchanger's name, or the literal host.
    pub name: String,
    /// MX preference (0 for implicit MX and literals).
    pub preference: u16,
    /// Port from the next hop, 0 for the transport's default.
    pub port: u16,
    /// Addresses in the order to try.
    pub addrs: Vec<IpAddr>,
    /// Why there are no addresses, when there are none.
    pub error: Option<DnsError>,
    /// Its DANE standing.
    pub dane: Dane,
}

/// The answer to `hosts(nexthop)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    /// The next hop asked about.
    pub nexthop: String,
    /// Whether the hosts came from MX records.
    pub from_mx: bool,
    /// Hosts, best first.
    pub hosts: Vec<Host>,
    /// Smallest TTL of the answers used, in seconds.
    pub ttl: u32,
    /// Every answer used had the AD bit.
    pub authentic: bool,
}

/// Identifies a `hosts()` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Mx,
    Addr(usize, QType),
    Tlsa(usize),
    /// TLSA at the host's CNAME-expanded name.
    TlsaExpanded(usize),
}

/// What the lookups of one host said about its DNSSEC standing.
#[derive(Debug, Default)]
struct Sec {
    /// An address answer was not validated.
    insecure: bool,
    /// An address lookup failed for a reason other than NXDOMAIN.
    failed: Option<DnsError>,
    /// The TLSA lookup, when it was made.
    tlsa: Option<Outcome>,
    /// The CNAME-expanded name, once a validated address answer gave one.
    expanded: Option<String>,
    /// The TLSA lookup at the expanded name.
    tlsa_expanded: Option<Outcome>,
}

#[derive(Debug)]
struct Job {
    nexthop: String,
    domain: String,
    port: u16,
    from_mx: bool,
    hosts: Vec<Host>,
    pending: usize,
    ttl: u32,
    authentic: bool,
    temp_error: Option<DnsError>,
    /// The MX answer was validated (or the next hop needed none).
    mx_secure: bool,
    /// Per host, parallel to `hosts`.
    sec: Vec<Sec>,
}

/// The resolver plus `hosts()` jobs on top of it.
#[derive(Debug)]
pub struct Dns {
    /// The query layer; the transport talks to it directly.
    pub resolver: Resolver,
    cfg: HostsConfig,
    rng: Rng,
    next_job: u64,
    jobs: BTreeMap<JobId, Job>,
    waiters: HashMap<QueryId, Vec<(JobId, Slot)>>,
    work: VecDeque<(JobId, Slot, Outcome)>,
    events: VecDeque<(JobId, Result<HostList, DnsError>)>,
    lookups: VecDeque<(QueryId, Outcome)>,
    native: VecDeque<NativeRequest>,
}

/// A validated host's DANE standing from its lookups.
fn dane_of(sec: Sec) -> Dane {
    if let Some(e) = sec.failed {
        return Dane::Failed(e);
    }
    if sec.insecure {
        return Dane::Insecure;
    }
    // The expanded name's records, if it has any; else the original name's.
    match tlsa_standing(sec.tlsa_expanded) {
        Some(Dane::NoRecords) | None => tlsa_standing(sec.tlsa).unwrap_or(Dane::Insecure),
        Some(d) => d,
    }
}

/// What one TLSA answer says; `None` when no lookup was made.
fn tlsa_standing(tlsa: Option<Outcome>) -> Option<Dane> {
    Some(match tlsa? {
        Ok(a) if a.authentic => {
            let records: Vec<_> = a
                .data
                .into_iter()
                .filter_map(|d| match d {
                    Data::Tlsa(u, s, m, data) => Some((u, s, m, data)),
                    _ => None,
                })
                .collect();
            if records.is_empty() {
                Dane::NoRecords
            } else {
                Dane::Records(records)
            }
        }
        // Unsigned TLSA records, or none: DANE does not apply (RFC 7672 2.2.2).
        Ok(_) | Err(DnsError::NotFound(_)) => Dane::NoRecords,
        Err(e) => Dane::Failed(e),
    })
}

/// Splits a next hop into (host, port, literal): `[h]:p`, `[h]`, `h:p`, `h`.
pub fn parse_nexthop(nexthop: &str) -> Result<(String, u16, bool), DnsError> {
    let bad = || DnsError::BadName(nexthop.to_string());
    let t = nexthop.trim();
    let (host, port, literal) = if let Some(rest) = t.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse::<u16>().map_err(|_| bad())?,
            None if after.is_empty() => 0,
            None => return Err(bad()),
        };
        let h = h
            .strip_prefix("IPv6:")
            .or_else(|| h.strip_prefix("ipv6:"))
            .unwrap_or(h);
        (h.to_string(), port, true)
    } else if t.parse::<IpAddr>().is_ok() {
        (t.to_string(), 0, true)
    } else if let Some((h, p)) = t.rsplit_once(':') {
        (h.to_string(), p.parse::<u16>().map_err(|_| bad())?, false)
    } else {
        (t.to_string(), 0, false)
    };
    if host.is_empty() || port == 0 && t.ends_with(':') {
        return Err(bad());
    }
    Ok((crate::wire::norm(&host), port, literal))
}

impl Dns {
    /// A resolver with `hosts()` on top.
    pub fn new(resolver: Resolver, cfg: HostsConfig) -> Dns {
        Dns {
            resolver,
            rng: Rng::new(cfg.seed),
            cfg,
            next_job: 1,
            jobs: BTreeMap::new(),
            waiters: HashMap::new(),
            work: VecDeque::new(),
            events: VecDeque::new(),
            lookups: VecDeque::new(),
            native: VecDeque::new(),
        }
    }

    /// `hosts()` requests in progress.
    pub fn jobs(&self) -> usize {
        self.jobs.len()
    }

    /// Starts `hosts(nexthop)`; the answer comes out of [`Dns::poll_event`]
    /// (at once when everything is cached).
    pub fn hosts(&mut self, nexthop: &str, now: Instant) -> JobId {
        let id = JobId(self.next_job);
        self.next_job += 1;
        let (host, port, literal) = match parse_nexthop(nexthop) {
            Ok(x) => x,
            Err(e) => {
                self.events.push_back((id, Err(e)));
                return id;
            }
        };
        let mut job = Job {
            nexthop: nexthop.to_string(),
            domain: host.clone(),
            port,
            from_mx: !literal,
            hosts: vec![],
            pending: 0,
            ttl: u32::MAX,
            authentic: true,
            temp_error: None,
            mx_secure: literal,
            sec: vec![],
        };
        if literal {
            if let Ok(ip) = host.parse::<IpAddr>() {
                job.hosts.push(Host {
                    name: host,
                    preference: 0,
                    port,
                    addrs: vec![ip],
                    error: None,
                    dane: Dane::Insecure,
                });
                job.ttl = 0;
                self.jobs.insert(id, job);
                self.complete(id);
                return id;
            }
            job.hosts.push(Host {
                name: host,
                preference: 0,
                port,
                addrs: vec![],
                error: None,
                dane: Dane::Insecure,
            });
            job.sec.push(Sec::default());
            self.jobs.insert(id, job);
            self.ask_addresses(id, 0, now);
        } else {
            self.jobs.insert(id, job);
            self.ask(id, Slot::Mx, &host, QType::Mx, now);
        }
        self.run(now);
        id
    }

    fn ask(&mut self, job: JobId, slot: Slot, name: &str, qtype: QType, now: Instant) {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.pending += 1;
        }
        match self.resolver.lookup(name, qtype, now) {
            Lookup::Ready(r) => self.work.push_back((job, slot, r)),
            Lookup::Pending(q) => self.waiters.entry(q).or_default().push((job, slot)),
        }
    }

    fn ask_addresses(&mut self, job: JobId, host: usize, now: Instant) {
        let Some((name, port, mx_secure)) = self
            .jobs
            .get(&job)
            .map(|j| (j.hosts[host].name.clone(), j.hosts[host].port, j.mx_secure))
        else {
            return;
        };
        // Native lookups say nothing of DNSSEC: such hosts stay insecure.
        if self.resolver.config().dnssec && mx_secure && !self.cfg.native {
            let port = if port == 0 { 25 } else { port };
            let tlsa = format!("_{port}._tcp.{name}");
            self.ask(job, Slot::Tlsa(host), &tlsa, QType::Tlsa, now);
        }
        if self.cfg.native {
            if let Some(j) = self.jobs.get_mut(&job) {
                j.pending += 1;
            }
            self.native.push_back(NativeRequest { job, host, name });
            return;
        }
        if self.cfg.protocols != Protocols::Ipv6 {
            self.ask(job, Slot::Addr(host, QType::A), &name, QType::A, now);
        }
        if self.cfg.protocols != Protocols::Ipv4 {
            self.ask(job, Slot::Addr(host, QType::Aaaa), &name, QType::Aaaa, now);
        }
    }

    /// Moves finished queries into jobs and jobs into events.
    fn run(&mut self, now: Instant) {
        loop {
            while let Some((q, outcome)) = self.resolver.poll_done() {
                match self.waiters.remove(&q) {
                    Some(w) => self.work.extend(
                        w.into_iter()
                            .map(|(job, slot)| (job, slot, outcome.clone())),
                    ),
                    // Started with Dns::lookup, not by a job.
                    None => self.lookups.push_back((q, outcome)),
                }
            }
            let Some((job, slot, outcome)) = self.work.pop_front() else {
                break;
            };
            self.on_outcome(job, slot, outcome, now);
        }
    }

    fn on_outcome(&mut self, id: JobId, slot: Slot, outcome: Outcome, now: Instant) {
        // Whether ask_addresses asked for TLSA records (of a secure MX).
        let tlsa_on = self.resolver.config().dnssec && !self.cfg.native;
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.pending = job.pending.saturating_sub(1);
        if let Ok(a) = &outcome {
            job.ttl = job.ttl.min(a.ttl);
            if !matches!(slot, Slot::Tlsa(_) | Slot::TlsaExpanded(_)) {
                job.authentic &= a.authentic;
            }
        }
        let mut expand = None;
        match slot {
            Slot::Tlsa(h) => {
                if let Some(sec) = job.sec.get_mut(h) {
                    sec.tlsa = Some(outcome);
                }
            }
            Slot::TlsaExpanded(h) => {
                if let Some(sec) = job.sec.get_mut(h) {
                    sec.tlsa_expanded = Some(outcome);
                }
            }
            Slot::Mx => match outcome {
                Ok(Answer {
                    data, authentic, ..
                }) => {
                    job.mx_secure = authentic;
                    let mut mx: Vec<(u16, String)> = data
                        .into_iter()
                        .filter_map(|d| {
                            if let Data::Mx(p, n) = d {
                                Some((p, n))
                            } else {
                                None
                            }
                        })
                        .collect();
                    if mx.len() == 1 && mx[0].1.is_empty() {
                        let e = DnsError::NullMx(job.domain.clone());
                        self.fail(id, e);
                        return;
                    }
                    // A root exchange among others is junk: ignore it.
                    mx.retain(|(_, n)| !n.is_empty());
                    if mx.is_empty() {
                        job.from_mx = false;
                        mx.push((0, job.domain.clone()));
                    }
                    self.order(&mut mx);
                    // A hostile answer may list thousands: bound the work.
                    mx.truncate(MAX_EXCHANGERS);
                    let Some(job) = self.jobs.get_mut(&id) else {
                        return;
                    };
                    let port = job.port;
                    job.hosts = mx
                        .into_iter()
                        .map(|(preference, name)| Host {
                            name,
                            preference,
                            port,
                            addrs: vec![],
                            error: None,
                            dane: Dane::Insecure,
                        })
                        .collect();
                    job.sec = job.hosts.iter().map(|_| Sec::default()).collect();
                    for h in 0..job.hosts.len() {
                        self.ask_addresses(id, h, now);
                    }
                }
                Err(e) => {
                    self.fail(id, e);
                    return;
                }
            },
            Slot::Addr(h, _) => {
                let Some(host) = job.hosts.get_mut(h) else {
                    return;
                };
                if let Some(sec) = job.sec.get_mut(h) {
                    match &outcome {
                        Ok(a) if !a.authentic => sec.insecure = true,
                        // A secure alias: its target's TLSA records come first.
                        Ok(a) if tlsa_on && job.mx_secure && sec.expanded.is_none() => {
                            let target = a.name.trim_end_matches('.');
                            if !target.eq_ignore_ascii_case(host.name.trim_end_matches('.')) {
                                sec.expanded = Some(target.to_string());
                                expand = Some((h, target.to_string(), host.port));
                            }
                        }
                        Ok(_) | Err(DnsError::NotFound(_)) => {}
                        Err(e) => {
                            sec.failed.get_or_insert(e.clone());
                        }
                    }
                }
                match outcome {
                    Ok(a) => host.addrs.extend(a.data.iter().filter_map(|d| match d {
                        Data::A(ip) => Some(IpAddr::V4(*ip)),
                        Data::Aaaa(ip) => Some(IpAddr::V6(*ip)),
                        Data::Mx(..) | Data::Txt(_) | Data::Tlsa(..) => None,
                    })),
                    Err(e) => {
                        if e.is_temporary() {
                            job.temp_error.get_or_insert(e.clone());
                        }
                        if host.error.as_ref().is_none_or(|old| !old.is_temporary()) {
                            host.error = Some(e);
                        }
                    }
                }
            }
        }
        if let Some((h, target, port)) = expand {
            let port = if port == 0 { 25 } else { port };
            let name = format!("_{port}._tcp.{target}");
            self.ask(id, Slot::TlsaExpanded(h), &name, QType::Tlsa, now);
        }
        if self.jobs.get(&id).is_some_and(|j| j.pending == 0) {
            self.complete(id);
        }
    }

    /// Sorts by preference and shuffles runs of equal preference.
    fn order(&mut self, mx: &mut [(u16, String)]) {
        mx.sort();
        let mut start = 0;
        while start < mx.len() {
            let end = start
                + mx[start..]
                    .iter()
                    .take_while(|(p, _)| *p == mx[start].0)
                    .count();
            for i in (start + 1..end).rev() {
                let j = start + self.rng.below(i - start + 1);
                mx.swap(i, j);
            }
            start = end;
        }
    }

    fn fail(&mut self, id: JobId, e: DnsError) {
        if self.jobs.remove(&id).is_some() {
            self.events.push_back((id, Err(e)));
        }
    }

    fn complete(&mut self, id: JobId) {
        let Some(mut job) = self.jobs.remove(&id) else {
            return;
        };
        let prefer_v6 = self.cfg.prefer_ipv6;
        let dnssec = self.resolver.config().dnssec && job.mx_secure;
        for (h, sec) in job.hosts.iter_mut().zip(std::mem::take(&mut job.sec)) {
            h.dane = if dnssec { dane_of(sec) } else { Dane::Insecure };
        }
        for h in &mut job.hosts {
            h.addrs.sort_by_key(|a| a.is_ipv4() == prefer_v6);
            if !h.addrs.is_empty() {
                h.error = None;
            } else if h.error.is_none() {
                h.error = Some(DnsError::NoAddress(h.name.clone()));
            }
        }
        let out = if job.hosts.iter().any(|h| !h.addrs.is_empty()) {
            Ok(HostList {
                nexthop: job.nexthop,
                from_mx: job.from_mx,
                hosts: job.hosts,
                ttl: if job.ttl == u32::MAX { 0 } else { job.ttl },
                authentic: job.authentic,
            })
        } else if let Some(e) = job.temp_error {
            Err(e)
        } else if !job.from_mx && job.hosts.len() == 1 {
            // Implicit MX or literal host: the name's own error says most.
            Err(match job.hosts.pop().and_then(|h| h.error) {
                Some(DnsError::NoAddress(_)) | None => DnsError::NoAddress(job.domain),
                Some(e) => e,
            })
        } else {
            Err(DnsError::NoAddress(job.domain))
        };
        self.events.push_back((id, out));
    }

    /// Call after feeding the resolver replies or timeouts.
    pub fn poll(&mut self, now: Instant) {
        self.run(now);
    }

    /// A single lookup, outside any `hosts()` job; a pending one ends in
    /// [`Dns::poll_lookup`].
    pub fn lookup(&mut self, name: &str, qtype: QType, now: Instant) -> Lookup {
        self.resolver.lookup(name, qtype, now)
    }

    /// The next finished single lookup.
    pub fn poll_lookup(&mut self) -> Option<(QueryId, Outcome)> {
        self.lookups.pop_front()
    }

    /// The next address lookup for the system resolver.
    pub fn poll_native(&mut self) -> Option<NativeRequest> {
        self.native.pop_front()
    }

    /// The system resolver's answer to a [`NativeRequest`]; addresses of
    /// families outside `inet_protocols` are dropped.
    pub fn native_done(
        &mut self,
        req: &NativeRequest,
        result: Result<Vec<IpAddr>, DnsError>,
        now: Instant,
    ) {
        let protocols = self.cfg.protocols;
        let outcome = result.map(|ips| Answer {
            name: req.name.clone(),
            data: ips
                .into_iter()
                .filter(|ip| match protocols {
                    Protocols::Ipv4 => ip.is_ipv4(),
                    Protocols::Ipv6 => ip.is_ipv6(),
                    Protocols::All => true,
                })
                .map(|ip| match ip {
                    IpAddr::V4(a) => Data::A(a),
                    IpAddr::V6(a) => Data::Aaaa(a),
                })
                .collect(),
            // The system resolver tells no TTL: do not let it be cached upstream.
            ttl: 0,
            authentic: false,
        });
        self.work
            .push_back((req.job, Slot::Addr(req.host, QType::A), outcome));
        self.run(now);
    }

    /// The next finished `hosts()` request.
    pub fn poll_event(&mut self) -> Option<(JobId, Result<HostList, DnsError>)> {
        self.events.pop_front()
    }
}
