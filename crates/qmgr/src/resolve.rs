//! Resolution: what the router says of each recipient, and the servers of
//! each next hop (Postfix's `qmgr_message_resolve`).
//!
//! Every pending recipient of an activated message is resolved
//! (pipelined, one [`Action::ToRouter`] each); a recipient routed to
//! `error` bounces, to `discard` is delivered, to a `defer_transports`
//! transport (unless flushed) or one without an agent is deferred. Each
//! next hop of an SMTP transport then needs its host list, asked once for
//! all the messages that wait for it and kept until its TTL (at least a
//! minute). A message goes to the scheduler once all its recipients are
//! routed and their host lists are at hand. When the router is lost,
//! every message still routing is deferred for [`ROUTE_RETRY`]: each gets
//! a retry time instead of waiting for ever.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use ipc::router;
use mail::{Status, StatusCode};
use sched::Time;

use crate::dispatch::Route;
use crate::logline::{log_rcpt, FAILED, TEMPFAIL};
use crate::{Action, QueueManager, Store, ROUTE_RETRY};

/// What a router request waits for.
enum RouterWait {
    Resolve {
        qid: u64,
        rcpt: u32,
    },
    Hosts {
        nexthop: String,
    },
    /// An address to verify (`probes`).
    Probe {
        address: String,
    },
}

/// A next hop's servers.
pub(crate) struct Hosts {
    /// When the router's answer stops being good (its TTL, at least a minute).
    expires: Time,
    /// Host names by MX preference level, best first.
    pub(crate) levels: Vec<Vec<String>>,
    pub(crate) addrs: HashMap<String, Vec<SocketAddr>>,
    /// Each host's DANE standing (absent: insecure), for the agent's Open.
    pub(crate) dane: HashMap<String, ipc::delivery::Dane>,
}

/// Router requests in flight and the host lists at hand.
#[derive(Default)]
pub(crate) struct Resolve {
    wait: BTreeMap<u64, RouterWait>,
    pub(crate) hosts: HashMap<String, Hosts>,
    /// Messages waiting for a next hop's host list.
    host_waiters: HashMap<String, Vec<u64>>,
    /// When expired host lists were last dropped (at most once a second:
    /// every answer would make a list of many domains quadratic).
    purged: Time,
}

impl<S: Store> QueueManager<S> {
    /// Asks the router where recipient `i` of message `qid` goes.
    pub(crate) fn resolve_rcpt(&mut self, qid: u64, i: u32, address: String, smtputf8: bool) {
        let request = self.request_id();
        self.resolve
            .wait
            .insert(request, RouterWait::Resolve { qid, rcpt: i });
        self.actions.push_back(Action::ToRouter {
            request,
            body: router::Request::ResolveQueued { address, smtputf8 },
        });
    }

    /// Asks the router where a probe of `address` goes: as smtpd asks,
    /// with canonical and virtual alias mapping (cleanup maps a real
    /// recipient before it is queued; a probe is not queued), so an alias
    /// is verified by what it maps to.
    pub(crate) fn resolve_probe(&mut self, address: String) {
        let request = self.request_id();
        let smtputf8 = !address.is_ascii();
        self.resolve.wait.insert(
            request,
            RouterWait::Probe {
                address: address.clone(),
            },
        );
        self.actions.push_back(Action::ToRouter {
            request,
            body: router::Request::Resolve { address, smtputf8 },
        });
    }

    /// Whether a current host list for the next hop is at hand.
    pub(crate) fn fresh_hosts(&self, nexthop: &str) -> bool {
        self.resolve
            .hosts
            .get(nexthop)
            .is_some_and(|h| h.expires > self.now)
    }

    /// Transports run by the smtp agent need the next hop's servers.
    pub(crate) fn needs_hosts(&self, transport: &str) -> bool {
        self.settings.transports.contains(transport) && transport != "local"
    }

    /// The router link is gone: every message not yet handed to the
    /// scheduler waits on it (for a resolution or a host list, asked or
    /// about to be), so each is deferred.
    pub(crate) fn router_lost(&mut self) {
        self.actions
            .retain(|a| !matches!(a, Action::ToRouter { .. }));
        let probes: Vec<String> = std::mem::take(&mut self.resolve.wait)
            .into_values()
            .filter_map(|w| match w {
                RouterWait::Probe { address } => Some(address),
                _ => None,
            })
            .collect();
        for address in probes {
            self.probe_failed(&address);
        }
        self.resolve.host_waiters.clear();
        for a in self.deliver.msgs.values_mut() {
            a.hosts_awaited = 0;
        }
        let waiting: Vec<u64> = self
            .deliver
            .msgs
            .iter()
            .filter(|(_, a)| !a.added)
            .map(|(q, _)| *q)
            .collect();
        for q in waiting {
            self.defer_unrouted(q, &Status::new(TEMPFAIL, "address resolver unavailable"));
        }
    }

    /// The router answered.
    pub(crate) fn router_answer(&mut self, request: u64, resp: router::Response) {
        let Some(w) = self.resolve.wait.remove(&request) else {
            return;
        };
        match w {
            RouterWait::Resolve { qid, rcpt } => {
                if let Some(a) = self.deliver.msgs.get_mut(&qid) {
                    a.unresolved = a.unresolved.saturating_sub(1);
                    self.resolved(qid, rcpt, resp);
                    self.maybe_add(qid);
                }
            }
            RouterWait::Hosts { nexthop } => self.hosts_answer(nexthop, resp),
            RouterWait::Probe { address } => self.probe_routed(address, resp),
        }
    }

    /// Where one recipient goes.
    fn resolved(&mut self, qid: u64, rcpt: u32, resp: router::Response) {
        let retry = self.now + ROUTE_RETRY;
        let r = match resp {
            router::Response::Resolved { mut routes, .. } if routes.len() == 1 => routes.remove(0),
            router::Response::Resolved { .. } => {
                // ResolveQueued maps nothing, so one route: a router
                // answering otherwise is broken; try again later.
                let why = Status::new(
                    TEMPFAIL,
                    "the address resolver answered several routes for a queued recipient",
                );
                return self.defer_now(qid, &[rcpt], &why, retry);
            }
            router::Response::Failed { status } if status.is_permanent() => {
                return self.bounce_now(qid, &[rcpt], &status)
            }
            router::Response::Failed { status } => {
                return self.defer_now(qid, &[rcpt], &status, retry)
            }
            other => return self.warn(format!("router: unexpected answer {other:?}")),
        };
        let flushed = self.deliver.msgs.get(&qid).is_some_and(|a| a.flush);
        // The error transport's status, `error:5.1.1 text` in a table,
        // comes parsed from the router.
        if let Some(status) = &r.error {
            return self.bounce_now(qid, &[rcpt], status);
        }
        match r.transport.as_str() {
            // A router that names the error transport without its status.
            "error" => self.bounce_now(qid, &[rcpt], &Status::new(FAILED, r.nexthop.as_str())),
            "discard" => {
                if let Some(a) = self.deliver.msgs.get(&qid) {
                    let status = mail::Status::new(mail::StatusCode::known(2, 0, 0), "discarded");
                    let line = log_rcpt(self.now, &a.id, &a.envelope, rcpt, &status);
                    let rec = queue::Record::Delivered {
                        id: a.id,
                        rcpts: vec![rcpt],
                    };
                    self.info(line);
                    self.append(rec);
                }
            }
            t if self.settings.defer_transports.contains(t) && !flushed => {
                // Postfix's defer_transports: kept until flushed.
                if let Some(a) = self.deliver.msgs.get(&qid) {
                    self.figures.deferred(a.id, t, &r.nexthop);
                }
                let why = Status::new(
                    StatusCode::known(4, 3, 2),
                    format!("deferred transport ({t})"),
                );
                self.defer_now(qid, &[rcpt], &why, retry);
            }
            t if !self.settings.transports.contains(t) => {
                if let Some(a) = self.deliver.msgs.get(&qid) {
                    self.figures.deferred(a.id, t, &r.nexthop);
                }
                let why = Status::new(TEMPFAIL, format!("mail transport unavailable ({t})"));
                self.defer_now(qid, &[rcpt], &why, retry);
            }
            t => {
                let need = self.needs_hosts(t) && !self.fresh_hosts(&r.nexthop);
                let domain = match self.deliver.sched.config().shaping {
                    Some(_) => r
                        .address
                        .rsplit_once('@')
                        .map_or(String::new(), |(_, d)| d.to_ascii_lowercase()),
                    None => String::new(),
                };
                let route = Route {
                    transport: t.to_string(),
                    nexthop: r.nexthop.clone(),
                    domain,
                };
                if let Some(a) = self.deliver.msgs.get_mut(&qid) {
                    a.routes.insert(rcpt, route);
                }
                if need {
                    self.want_hosts(&r.nexthop, qid);
                }
            }
        }
    }

    /// The servers of a next hop, for the messages that wait for them.
    fn hosts_answer(&mut self, nexthop: String, resp: router::Response) {
        let waiters = self
            .resolve
            .host_waiters
            .remove(&nexthop)
            .unwrap_or_default();
        for q in &waiters {
            if let Some(a) = self.deliver.msgs.get_mut(q) {
                a.hosts_awaited = a.hosts_awaited.saturating_sub(1);
            }
        }
        let status = match resp {
            router::Response::Hosts(list) if list.hosts.iter().any(|h| !h.addrs.is_empty()) => {
                // Old entries go when they expire, so the cache follows
                // the destinations in use.
                let now = self.now;
                if now >= self.resolve.purged + Duration::from_secs(1) {
                    self.resolve.purged = now;
                    self.resolve.hosts.retain(|_, h| h.expires > now);
                }
                // A policy counting by remoteip needs each connection to
                // go to one known address: each address is a host then.
                let by_address = self
                    .deliver
                    .sched
                    .config()
                    .shaping
                    .as_ref()
                    .is_some_and(|p| p.fields_used().contains(shaping::Field::RemoteIp));
                // A failure heard earlier for this next hop (its list is
                // not cached) no longer holds for the messages asking now.
                for q in &waiters {
                    if let Some(a) = self.deliver.msgs.get_mut(q) {
                        a.host_failures.retain(|(n, _, _)| *n != nexthop);
                    }
                }
                self.resolve
                    .hosts
                    .insert(nexthop, hosts_of(&list, now, by_address));
                for q in waiters {
                    self.maybe_add(q);
                }
                return;
            }
            router::Response::Failed { status } => status,
            router::Response::Hosts(l) => match l.hosts.iter().find_map(|h| h.error.clone()) {
                Some(status) => status,
                None => Status::new(
                    StatusCode::known(4, 4, 3),
                    format!("Host or domain name not found. Name service error for name={nexthop}"),
                ),
            },
            o => Status::new(TEMPFAIL, format!("unexpected router answer {o:?}")),
        };
        let temporary = !status.is_permanent();
        for q in waiters {
            if let Some(a) = self.deliver.msgs.get_mut(&q) {
                a.host_failures
                    .push((nexthop.clone(), status.clone(), temporary));
            }
            self.maybe_add(q);
        }
    }

    /// Message `qid` waits for the host list of `nexthop`; asked once.
    pub(crate) fn want_hosts(&mut self, nexthop: &str, qid: u64) {
        let waiters = self
            .resolve
            .host_waiters
            .entry(nexthop.to_string())
            .or_default();
        let first = waiters.is_empty();
        if !waiters.contains(&qid) {
            waiters.push(qid);
            if let Some(a) = self.deliver.msgs.get_mut(&qid) {
                a.hosts_awaited += 1;
            }
        }
        if !first {
            return;
        }
        let request = self.request_id();
        self.resolve.wait.insert(
            request,
            RouterWait::Hosts {
                nexthop: nexthop.to_string(),
            },
        );
        self.actions.push_back(Action::ToRouter {
            request,
            body: router::Request::Hosts {
                nexthop: nexthop.to_string(),
            },
        });
    }
}

/// The scheduler's view of a host list: names by preference level, and
/// the addresses of each. With `by_address`, each address of a host is a
/// host of its own, named `name[address]`, so that a connection's remote
/// address is known when it is scheduled (shaping's `remoteip`). A port
/// other than 25 is part of the name ([`sched::host_key`]): a host is an
/// address and a port, so a dead port does not put a live one in retry.
fn hosts_of(list: &router::HostList, now: Time, by_address: bool) -> Hosts {
    let mut levels: Vec<(u16, Vec<String>)> = Vec::new();
    let mut addrs = HashMap::new();
    let mut dane = HashMap::new();
    for h in &list.hosts {
        if h.addrs.is_empty() {
            continue;
        }
        // Port 0 from the router means "the service's own": SMTP.
        let port = if h.port == 0 { 25 } else { h.port };
        let named: Vec<(String, Vec<SocketAddr>)> = if by_address && !h.name.starts_with('[') {
            h.addrs
                .iter()
                .map(|ip| {
                    (
                        sched::host_key(&format!("{}[{ip}]", h.name), port),
                        vec![SocketAddr::new(*ip, port)],
                    )
                })
                .collect()
        } else {
            let all = h
                .addrs
                .iter()
                .map(|ip| SocketAddr::new(*ip, port))
                .collect();
            vec![(sched::host_key(&h.name, port), all)]
        };
        for (name, a) in named {
            if h.dane != ipc::delivery::Dane::Insecure {
                dane.insert(name.clone(), h.dane.clone());
            }
            addrs.insert(name.clone(), a);
            match levels.iter_mut().find(|(p, _)| *p == h.preference) {
                Some((_, v)) => v.push(name),
                None => levels.push((h.preference, vec![name])),
            }
        }
    }
    levels.sort_by_key(|(p, _)| *p);
    Hosts {
        expires: Time(now.0 + u64::from(list.ttl.max(60)) * 1000),
        levels: levels.into_iter().map(|(_, v)| v).collect(),
        addrs,
        dane,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ipc::router;
    use mail::{Status, StatusCode};
    use queue::Record;

    use crate::testkit::{settings, World};
    use crate::{Event, Settings, ROUTE_RETRY};

    #[test]
    fn error_bounces_and_discard_delivers_without_an_agent() {
        let mut w = World::new(settings());
        let id = w.arrive("a@a.example", &["bad@b.example", "gone@b.example"]);
        w.route_all(&[
            ("bad@b.example", "error", "5.1.1 no such user"),
            ("gone@b.example", "discard", ""),
        ]);
        assert!(w.agent.is_empty(), "no agent asked");
        let recs = w.records(id);
        assert!(recs.iter().any(|r| matches!(r,
            Record::Bounced { rcpts, status, reason, .. }
                if rcpts == &[0] && status.to_string() == "5.1.1" && reason == "no such user")));
        assert!(recs
            .iter()
            .any(|r| matches!(r, Record::Delivered { rcpts, .. } if rcpts == &[1])));
        assert!(w.logged("to=<gone@b.example>, relay=none"));
        // The bounce owes a notice before the message goes.
        assert_eq!(w.cleanup.len(), 1);
        assert!(w.live(id));
        w.queue_notices();
        assert!(!w.live(id));
    }

    #[test]
    fn defer_transports_hold_mail_until_a_flush() {
        let mut w = World::new(Settings {
            defer_transports: ["smtp".to_string()].into_iter().collect(),
            ..settings()
        });
        let id = w.arrive("a@a.example", &["r@b.example"]);
        w.settle(|_| 250);
        assert!(w.live(id));
        assert!(w.logged("status=deferred (deferred transport (smtp))"));
        w.handle(Event::Control {
            client: 1,
            request: 1,
            body: ipc::queuectl::Request::Flush,
        });
        w.settle(|_| 250);
        assert!(!w.live(id), "a flush delivers what defer_transports holds");
    }

    #[test]
    fn a_lost_router_defers_every_message_still_routing() {
        let mut w = World::new(settings());
        let a = w.arrive("a@a.example", &["r@b.example"]);
        let b = w.arrive("b@a.example", &["r@c.example"]);
        assert_eq!(w.router.len(), 2);
        w.router.clear();
        w.handle(Event::RouterLost);
        for id in [a, b] {
            assert!(w.records(id).iter().any(|r| matches!(r,
                Record::Deferred { reason, .. } if reason == "address resolver unavailable")));
        }
        w.wait(ROUTE_RETRY - Duration::from_millis(1));
        assert!(w.router.is_empty(), "not before the retry");
        w.wait(Duration::from_millis(1));
        w.settle(|_| 250);
        assert!(!w.live(a) && !w.live(b));
    }

    #[test]
    fn a_host_list_is_asked_once_for_every_message_waiting_for_it() {
        let mut w = World::new(settings());
        w.arrive("a@a.example", &["r1@b.example"]);
        w.arrive("b@a.example", &["r2@b.example"]);
        // Answer both resolutions; count the host requests.
        let mut asked = 0;
        while let Some((request, body)) = w.router.pop_front() {
            let response = match body {
                router::Request::ResolveQueued { address, .. } => {
                    crate::testkit::resolved(&address, "smtp", "b.example")
                }
                router::Request::Hosts { nexthop } => {
                    asked += 1;
                    crate::testkit::hosts(&nexthop)
                }
                other => panic!("{other:?}"),
            };
            w.handle(Event::RouterAnswer { request, response });
        }
        assert_eq!(asked, 1);
        assert!(!w.agent.is_empty());
    }

    #[test]
    fn a_host_list_that_expires_while_another_is_awaited_is_asked_again() {
        let mut w = World::new(settings());
        let id = w.arrive("a@a.example", &["r@b.example", "r@c.example"]);
        let mut hosts_asked = Vec::new();
        while let Some((request, body)) = w.router.pop_front() {
            match body {
                router::Request::ResolveQueued { address, .. } => {
                    let d = address.rsplit_once('@').unwrap().1.to_string();
                    w.handle(Event::RouterAnswer {
                        request,
                        response: crate::testkit::resolved(&address, "smtp", &d),
                    });
                }
                router::Request::Hosts { nexthop } => hosts_asked.push((request, nexthop)),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(hosts_asked.len(), 2);
        // b.example's list (TTL 300 s) comes at once, c.example's after it expired.
        let (request, nexthop) = hosts_asked.remove(0);
        w.handle(Event::RouterAnswer {
            request,
            response: crate::testkit::hosts(&nexthop),
        });
        w.wait(Duration::from_secs(301));
        let (request, late) = hosts_asked.remove(0);
        w.handle(Event::RouterAnswer {
            request,
            response: crate::testkit::hosts(&late),
        });
        assert!(
            matches!(w.router.front(), Some((_, router::Request::Hosts { nexthop: n })) if *n == nexthop),
            "the expired list is asked again"
        );
        w.settle(|_| 250);
        assert!(!w.live(id));
    }

    #[test]
    fn a_next_hop_without_servers_defers_or_bounces_its_recipients() {
        let mut w = World::new(settings());
        let id = w.arrive("a@a.example", &["r@nowhere.example"]);
        let (request, _) = w.router.pop_front().unwrap();
        w.handle(Event::RouterAnswer {
            request,
            response: crate::testkit::resolved("r@nowhere.example", "smtp", "nowhere.example"),
        });
        let (request, _) = w.router.pop_front().unwrap();
        w.handle(Event::RouterAnswer {
            request,
            response: router::Response::Failed {
                status: Status::new(StatusCode::known(5, 4, 4), "Host not found"),
            },
        });
        assert!(w.records(id).iter().any(|r| matches!(r,
            Record::Bounced { reason, .. } if reason == "Host not found")));
    }

    #[test]
    fn a_list_of_many_domains_settles_each_failed_next_hop_once() {
        // 3,000 recipients, each in a domain of its own; a third of the
        // domains have no servers (half of those for now, half for good).
        // Each answer used to rescan every route of the message.
        let mut w = World::new(settings());
        let rcpts: Vec<String> = (0..3000).map(|i| format!("r@d{i}.example")).collect();
        let refs: Vec<&str> = rcpts.iter().map(String::as_str).collect();
        let id = w.arrive("list@a.example", &refs);
        while let Some((request, body)) = w.router.pop_front() {
            let response = match body {
                router::Request::ResolveQueued { address, .. } => {
                    let d = address.rsplit_once('@').unwrap().1.to_string();
                    crate::testkit::resolved(&address, "smtp", &d)
                }
                router::Request::Hosts { nexthop } => {
                    let n: u32 = nexthop[1..nexthop.find('.').unwrap()].parse().unwrap();
                    match n % 6 {
                        0 => router::Response::Failed {
                            status: Status::new(
                                StatusCode::known(4, 4, 3),
                                "Host or domain name not found",
                            ),
                        },
                        3 => router::Response::Failed {
                            status: Status::new(StatusCode::known(5, 4, 4), "Host not found"),
                        },
                        _ => crate::testkit::hosts(&nexthop),
                    }
                }
                other => panic!("{other:?}"),
            };
            w.handle(Event::RouterAnswer { request, response });
        }
        w.settle(|_| 250);
        let (mut deferred, mut bounced, mut delivered) = (Vec::new(), Vec::new(), Vec::new());
        for r in w.records(id) {
            match r {
                Record::Deferred { rcpts, .. } => deferred.extend(rcpts),
                Record::Bounced { rcpts, .. } => bounced.extend(rcpts),
                Record::Delivered { rcpts, .. } => delivered.extend(rcpts),
                _ => {}
            }
        }
        for v in [&mut deferred, &mut bounced, &mut delivered] {
            v.sort();
        }
        let every = |m: u32| (0..3000u32).filter(move |i| i % 6 == m);
        assert_eq!(deferred, every(0).collect::<Vec<_>>());
        assert_eq!(bounced, every(3).collect::<Vec<_>>());
        assert_eq!(delivered.len(), 2000);
        assert!(delivered.iter().all(|i| i % 3 != 0));
    }

    #[test]
    fn a_policy_counting_by_remoteip_schedules_each_address_as_a_host() {
        use std::net::SocketAddr;
        let list = router::HostList {
            nexthop: "example.test".into(),
            from_mx: true,
            authentic: false,
            hosts: vec![
                router::Host {
                    name: "mx1.example.test".into(),
                    preference: 10,
                    port: 0,
                    addrs: vec!["192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap()],
                    error: None,
                    dane: Default::default(),
                },
                router::Host {
                    name: "mx2.example.test".into(),
                    preference: 20,
                    port: 2525,
                    addrs: vec!["2001:db8::2".parse().unwrap()],
                    error: None,
                    dane: Default::default(),
                },
            ],
            ttl: 300,
        };
        let plain = super::hosts_of(&list, crate::Time(0), false);
        assert_eq!(
            plain.levels,
            [vec!["mx1.example.test"], vec!["mx2.example.test:2525"]]
        );
        assert_eq!(plain.addrs["mx1.example.test"].len(), 2);
        let each = super::hosts_of(&list, crate::Time(0), true);
        assert_eq!(
            each.levels,
            [
                vec!["mx1.example.test[192.0.2.1]", "mx1.example.test[192.0.2.2]"],
                vec!["mx2.example.test[2001:db8::2]:2525"]
            ]
        );
        let one: SocketAddr = "[2001:db8::2]:2525".parse().unwrap();
        assert_eq!(each.addrs["mx2.example.test[2001:db8::2]:2525"], [one]);
        assert_eq!(
            sched::host_parts("mx1.example.test[192.0.2.2]"),
            ("mx1.example.test", "192.0.2.2")
        );
    }
}
