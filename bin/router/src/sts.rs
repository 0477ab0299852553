//! MTA-STS in the router: the policy of a next hop's domain, before its hosts.
//!
//! With `smtp_mta_sts = yes`, a hosts request for a domain next hop (not a
//! `[host]` relay, not LMTP) first looks up `_mta-sts.<domain>` TXT on the
//! router's own resolver. The policy comes from the cache on disk
//! (`sts::cache`) when its id matches the record and it has not expired;
//! otherwise it is fetched over HTTPS in a thread of its own (name lookup
//! of `mta-sts.<domain>` on the same DNS servers, then `sts::fetch`), and
//! the hosts request waits for it. At most [`MAX_FETCHES`] fetches run at
//! once (mail to ten thousand new domains must not start ten thousand
//! threads); the others wait their turn in order. A valid cached policy is used at once
//! even when the record's id changed or its end nears: the fetch then runs
//! in the background and replaces it (RFC 8461 section 5.1). A domain
//! without a record, or whose fetch failed, has no policy unless an
//! unexpired one is cached.
//!
//! In `enforce` mode the answer keeps only the MX hosts a pattern of the
//! policy matches; with none left, the request fails temporarily (4.7.0),
//! which defers the mail. smtp(8) reads the same cache when it connects
//! and requires verified TLS there. Failed fetches are logged and counted
//! for TLS reports (`sts::report`). Logs one line per fetch, never one
//! per request.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use daemon::ipcserver::ClientId;
use daemon::{msg_info, msg_warn};
use dns::QueryId;
use ipc::router::{HostList, Response};
use sts::report::{Event, Outcome};
use sts::Cached;

/// A hosts request waiting for its domain's policy.
#[derive(Debug, Clone)]
pub struct Waiting {
    /// Who asked.
    pub client: ClientId,
    /// The request id.
    pub id: u64,
    /// The next hop asked about.
    pub nexthop: String,
    /// Its domain.
    pub domain: String,
}

/// What a finished fetch sends back: the domain, the record's id, the policy.
pub type Fetched = (String, String, Result<Cached, (Outcome, String)>);

/// What to do with a request once its record is known.
pub enum Next {
    /// Look up the hosts now, with this policy (or none).
    Hosts(Waiting, Option<Arc<Cached>>),
    /// Wait for the fetch under way.
    Wait,
}

/// The router's MTA-STS state.
pub struct Sts {
    /// `smtp_mta_sts`.
    pub enabled: bool,
    root: PathBuf,
    dns: dns::Params,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
    /// Requests waiting for a `_mta-sts` TXT answer.
    txt: HashMap<QueryId, Waiting>,
    /// Requests waiting for a fetch, by domain.
    fetching: HashMap<String, Vec<Waiting>>,
    /// Fetches running and waiting their turn.
    queue: FetchQueue,
    /// The router loop's waker, for the fetch threads.
    waker: Option<Arc<mio::Waker>>,
    tx: Sender<Fetched>,
    /// Finished fetches.
    pub rx: Receiver<Fetched>,
}

/// Seconds since the epoch.
pub fn wall() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The trust anchors for policy servers: `smtp_tls_CAfile`, else the
/// system bundle.
pub fn trust(cfg: &config::Config) -> Result<Arc<rustls::RootCertStore>, String> {
    let file = cfg.str("smtp_tls_CAfile");
    let path = if file.is_empty() {
        tls::SYSTEM_CA_FILE.to_string()
    } else {
        file
    };
    tls::load_trust_anchors(std::path::Path::new(&path)).map_err(|e| e.to_string())
}

impl Sts {
    /// The state for main.cf `cfg`; without trust anchors no policy can
    /// be fetched (said once here), but cached ones still apply.
    pub fn new(cfg: &config::Config) -> Sts {
        let enabled = cfg.bool("smtp_mta_sts");
        let tls = if enabled {
            match trust(cfg) {
                Ok(roots) => Some(sts::fetch::client_config(roots)),
                Err(e) => {
                    msg_warn!("smtp_tls_CAfile: {e}: MTA-STS policies cannot be fetched");
                    None
                }
            }
        } else {
            None
        };
        let (tx, rx) = channel();
        Sts {
            enabled,
            root: PathBuf::from(cfg.str("queue_directory")),
            dns: crate::convert::dns_params(cfg),
            tls,
            timeout: cfg.time("smtp_mta_sts_fetch_timeout"),
            txt: HashMap::new(),
            fetching: HashMap::new(),
            queue: FetchQueue::default(),
            waker: None,
            tx,
            rx,
        }
    }

    /// The domain whose policy applies to `nexthop`, if one may.
    pub fn domain_of(&self, nexthop: &str) -> Option<String> {
        policy_domain(nexthop).filter(|_| self.enabled)
    }

    /// Starts the record lookup for `w`.
    pub fn begin(
        &mut self,
        dns: &mut dns::Dns,
        w: Waiting,
        now: std::time::Instant,
        waker: Option<Arc<mio::Waker>>,
    ) -> Next {
        let name = format!("_mta-sts.{}", w.domain);
        match dns.lookup(&name, dns::QType::Txt, now) {
            dns::Lookup::Ready(r) => self.record(w, r, waker),
            dns::Lookup::Pending(q) => {
                self.txt.insert(q, w);
                Next::Wait
            }
        }
    }

    /// A finished single lookup: `Some` when it was one of ours.
    pub fn lookup_done(
        &mut self,
        q: QueryId,
        r: dns::resolver::Outcome,
        waker: Option<Arc<mio::Waker>>,
    ) -> Option<Next> {
        let w = self.txt.remove(&q)?;
        Some(self.record(w, r, waker))
    }

    /// Decides from the `_mta-sts` answer `r` (section 5.1).
    fn record(
        &mut self,
        w: Waiting,
        r: dns::resolver::Outcome,
        waker: Option<Arc<mio::Waker>>,
    ) -> Next {
        let now = wall();
        let cached = sts::cache::load(&self.root, &w.domain).filter(|c| c.valid(now));
        let id = match &r {
            Ok(a) => sts::policy::sts_record(a.data.iter().filter_map(|d| match d {
                dns::Data::Txt(t) => Some(t.as_str()),
                _ => None,
            })),
            Err(_) => None,
        };
        let Some(id) = id else {
            // No record (or DNS failed): a cached policy still holds.
            return Next::Hosts(w, cached.map(Arc::new));
        };
        if let Some(c) = cached {
            if c.id != id || c.refresh_due(now) {
                self.fetch(&w.domain, &id, waker);
            }
            return Next::Hosts(w, Some(Arc::new(c)));
        }
        if self.tls.is_none() || waker.is_none() {
            return Next::Hosts(w, None);
        }
        let domain = w.domain.clone();
        self.fetching.entry(domain.clone()).or_default().push(w);
        self.fetch(&domain, &id, waker);
        Next::Wait
    }

    /// Fetches the policy of `domain` in a thread (at most one per domain,
    /// [`MAX_FETCHES`] at once).
    fn fetch(&mut self, domain: &str, id: &str, waker: Option<Arc<mio::Waker>>) {
        if self.tls.is_none() {
            return;
        }
        if let Some(w) = waker {
            self.waker = Some(w);
        }
        if self.waker.is_none() {
            return;
        }
        if let Some((domain, id)) = self.queue.want(domain, id) {
            self.spawn(domain, id);
        }
    }

    fn spawn(&mut self, domain: String, id: String) {
        let (Some(tls), Some(waker)) = (self.tls.clone(), self.waker.clone()) else {
            return;
        };
        let (dns, timeout, tx) = (self.dns.clone(), self.timeout, self.tx.clone());
        std::thread::spawn(move || {
            let r = fetch_policy(&domain, &id, &dns, &tls, timeout);
            let _ = tx.send((domain, id, r));
            let _ = waker.wake();
        });
    }

    /// A fetch ended: cache or count it; the requests that waited for it,
    /// with the policy they get.
    pub fn fetched(&mut self, f: Fetched) -> Vec<(Waiting, Option<Arc<Cached>>)> {
        let (domain, id, r) = f;
        if let Some((next, next_id)) = self.queue.done(&domain) {
            self.spawn(next, next_id);
        }
        let waiting = self.fetching.remove(&domain).unwrap_or_default();
        let now = wall();
        let policy = match r {
            Ok(c) => {
                msg_info!(
                    "mta-sts: {domain}: policy id {id}, mode {}, max_age {}, mx {}",
                    c.policy.mode.as_str(),
                    c.policy.max_age,
                    c.policy.mx.join(" ")
                );
                if let Err(e) = sts::cache::store(&self.root, &domain, &c) {
                    msg_warn!("mta-sts: {domain}: cannot cache the policy: {e}");
                }
                Some(c)
            }
            Err((outcome, why)) => {
                msg_warn!("mta-sts: {domain}: policy id {id} not fetched: {why}");
                let e = Event {
                    time: now,
                    domain: domain.clone(),
                    outcome,
                    mx_host: String::new(),
                    ip: String::new(),
                    detail: why,
                };
                if let Err(e) = sts::report::record(&self.root, &e) {
                    msg_warn!("tlsrpt: cannot log: {e}");
                }
                sts::cache::load(&self.root, &domain).filter(|c| c.valid(now))
            }
        };
        let policy = policy.map(Arc::new);
        waiting.into_iter().map(|w| (w, policy.clone())).collect()
    }
}

/// Policy fetches running at once.
pub const MAX_FETCHES: usize = 16;

/// Which fetches run and which wait: one per domain, [`MAX_FETCHES`] at
/// once, the rest in the order they were asked for.
#[derive(Debug, Default)]
struct FetchQueue {
    /// Domains running or waiting.
    known: HashSet<String>,
    running: usize,
    waiting: VecDeque<(String, String)>,
}

impl FetchQueue {
    /// A fetch of `domain` (record id `id`) is wanted: the one to start
    /// now, if it may.
    fn want(&mut self, domain: &str, id: &str) -> Option<(String, String)> {
        if !self.known.insert(domain.to_string()) {
            return None;
        }
        if self.running < MAX_FETCHES {
            self.running += 1;
            return Some((domain.to_string(), id.to_string()));
        }
        self.waiting.push_back((domain.to_string(), id.to_string()));
        None
    }

    /// The fetch of `domain` ended: the next one to start, if one waits.
    fn done(&mut self, domain: &str) -> Option<(String, String)> {
        if !self.known.remove(domain) {
            return None;
        }
        match self.waiting.pop_front() {
            Some(next) => Some(next),
            None => {
                self.running = self.running.saturating_sub(1);
                None
            }
        }
    }
}

/// The domain of a next hop that MTA-STS applies to: a domain (with or
/// without `:port`), not a `[host]` relay, an address or a socket.
fn policy_domain(nexthop: &str) -> Option<String> {
    if nexthop.starts_with('[') || nexthop.contains('/') {
        return None;
    }
    let d = match nexthop.rsplit_once(':') {
        Some((d, p)) if p.parse::<u16>().is_ok() => d,
        _ => nexthop,
    };
    let d = d.trim_end_matches('.').to_ascii_lowercase();
    let ip = d.parse::<std::net::IpAddr>().is_ok();
    (d.contains('.') && !d.contains(':') && !ip).then_some(d)
}

/// Resolves `mta-sts.<domain>` and fetches and parses its policy.
fn fetch_policy(
    domain: &str,
    id: &str,
    params: &dns::Params,
    tls: &Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<Cached, (Outcome, String)> {
    let fail = |e: String| (Outcome::StsPolicyFetchError, e);
    let (rcfg, hcfg, _) = params.build(wall() ^ u64::from(std::process::id()));
    let mut driver = dns::blocking::Driver::new(dns::Dns::new(dns::Resolver::new(rcfg), hcfg))
        .map_err(|e| fail(e.to_string()))?;
    let host = format!("mta-sts.{domain}");
    let list = driver
        .hosts(&format!("[{host}]"), timeout)
        .map_err(|e| fail(format!("{host}: {e}")))?;
    let ips: Vec<std::net::IpAddr> = list.hosts.iter().flat_map(|h| h.addrs.clone()).collect();
    let text = sts::fetch::fetch(domain, &sts::fetch::https_addrs(&ips), tls, timeout).map_err(
        |e| match e {
            sts::fetch::FetchError::Webpki(w) => (Outcome::StsWebpkiInvalid, w),
            other => fail(other.to_string()),
        },
    )?;
    let policy = sts::policy::parse(&text)
        .map_err(|e| (Outcome::StsPolicyInvalid, format!("{host}: policy: {e}")))?;
    Ok(Cached {
        id: id.to_string(),
        fetched: wall(),
        text,
        policy,
    })
}

/// The hosts answer under `policy`: in enforce mode only the hosts it
/// lists; none left defers the mail.
pub fn apply(resp: Response, domain: &str, policy: Option<&Cached>) -> Response {
    let Some(c) = policy.filter(|c| c.policy.mode == sts::Mode::Enforce) else {
        return resp;
    };
    let Response::Hosts(list) = resp else {
        return resp;
    };
    let (keep, drop): (Vec<_>, Vec<_>) = list
        .hosts
        .into_iter()
        .partition(|h| c.policy.mx_matches(&h.name));
    if !drop.is_empty() {
        let names: Vec<&str> = drop.iter().map(|h| h.name.as_str()).collect();
        msg_info!(
            "mta-sts: {domain}: enforce: not using MX host(s) {} (mx: {})",
            names.join(", "),
            c.policy.mx.join(" ")
        );
    }
    if keep.is_empty() {
        return Response::Failed {
            status: mail::Status::new(
                mail::StatusCode::TEMP_SECURITY,
                format!(
                    "MTA-STS policy of {domain}: no MX host matches mx: {}",
                    c.policy.mx.join(" ")
                ),
            ),
        };
    }
    Response::Hosts(HostList {
        hosts: keep,
        ..list
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::router::Host;

    #[test]
    fn at_most_max_fetches_run_at_once_and_the_rest_wait_in_order() {
        let mut q = FetchQueue::default();
        let started: Vec<_> = (0..MAX_FETCHES + 3)
            .filter_map(|i| q.want(&format!("d{i}.example"), "1"))
            .collect();
        assert_eq!(started.len(), MAX_FETCHES);
        assert_eq!(q.want("d0.example", "2"), None, "one per domain");
        // Each end starts the next in line, until none waits.
        let next: Vec<_> = (0..5)
            .filter_map(|i| q.done(&format!("d{i}.example")))
            .map(|(d, _)| d)
            .collect();
        assert_eq!(next, ["d16.example", "d17.example", "d18.example"]);
        assert_eq!(q.running, MAX_FETCHES - 2);
        assert_eq!(q.done("never.example"), None);
        // A domain done may be fetched again.
        assert!(q.want("d0.example", "3").is_some());
    }

    #[test]
    fn policies_apply_to_domains_only() {
        let cases = [
            ("example.com", Some("example.com")),
            ("Example.COM.", Some("example.com")),
            ("example.com:2525", Some("example.com")),
            ("[mx.example.com]:25", None),
            ("[mx.example.com]", None),
            ("192.0.2.1", None),
            ("unix:private/lmtp", None),
            ("localhost", None),
        ];
        for (nexthop, want) in cases {
            assert_eq!(policy_domain(nexthop).as_deref(), want, "{nexthop}");
        }
    }

    fn host(name: &str) -> Host {
        Host {
            name: name.into(),
            preference: 10,
            port: 0,
            addrs: vec!["192.0.2.1".parse().unwrap()],
            error: None,
            dane: ipc::delivery::Dane::Insecure,
        }
    }

    fn cached(mode: &str) -> Cached {
        let text = format!("version: STSv1\nmode: {mode}\nmx: *.example.com\nmax_age: 600\n");
        Cached {
            id: "1".into(),
            fetched: 0,
            policy: sts::policy::parse(&text).unwrap(),
            text,
        }
    }

    fn list(names: &[&str]) -> Response {
        Response::Hosts(HostList {
            nexthop: "example.com".into(),
            from_mx: true,
            hosts: names.iter().map(|n| host(n)).collect(),
            ttl: 60,
            authentic: false,
        })
    }

    #[test]
    fn enforce_keeps_matching_hosts_and_defers_without_any() {
        let both = list(&["mx1.example.com", "mx.attacker.test"]);
        let names = |r: &Response| match r {
            Response::Hosts(l) => l.hosts.iter().map(|h| h.name.clone()).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        let r = apply(both.clone(), "example.com", Some(&cached("enforce")));
        assert_eq!(names(&r), ["mx1.example.com"]);
        for mode in ["testing", "none"] {
            let r = apply(both.clone(), "example.com", Some(&cached(mode)));
            assert_eq!(r, both, "{mode} changes nothing");
        }
        assert_eq!(apply(both.clone(), "example.com", None), both);
        match apply(
            list(&["mx.attacker.test"]),
            "example.com",
            Some(&cached("enforce")),
        ) {
            Response::Failed { status } => {
                assert!(status.is_transient());
                let text = status.to_string();
                assert!(
                    text.starts_with("4.7.0 MTA-STS policy of example.com: no MX host matches"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
        let failed = Response::Failed {
            status: dns::DnsError::Timeout.status(),
        };
        assert_eq!(
            apply(failed.clone(), "example.com", Some(&cached("enforce"))),
            failed
        );
    }
}
