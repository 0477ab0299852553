//! qmgr's part in a cluster (`cluster_server`), sans-IO: what the
//! instance side of crates/cluster says becomes log lines, news for the
//! scheduler and a count to keep; what this instance learns of
//! destinations goes to the others.
//!
//! The [`cluster::client::Client`] is installed as the shaper's share, so
//! the scheduler asks it for this instance's part of every shared limit.
//! Losing clusterd is a warning and shows in `sluice status` and the
//! metrics as `degraded`: the client divides every limit by the last known
//! count until it is back; the shell keeps that count across a restart
//! ([`ShareAction::SaveCount`]). A host of this machine (an LMTP socket,
//! localhost, a loopback address) is news for nobody else, either way.
//! The shell (bin/qmgr's `cluster.rs`, over crates/cluster's
//! `wired::Wired`) connects, moves the bytes over TLS and passes the time,
//! in milliseconds on the client's own clock; where it connects to and
//! with which files is [`target`]'s to say, and what the count file holds
//! [`COUNT_FILE`]'s. What the queue manager's actions and its clients'
//! answers carry for the cluster is [`take`]'s and [`annotate`]'s.
//!
//! Logs nothing itself; panics on nothing clusterd sends.

use std::sync::MutexGuard;

use cluster::client::{Client, ClientConfig, ClientEvent, Handle, Link};
use cluster::link::Target;
use cluster::proto::{encode, DestNews};
use ipc::queuectl::{ClusterKeyView, ClusterLink, ClusterView};

use crate::clients::Response;
use crate::{Action, Level, QueueManager, Store, Time};

/// The last instance count heard, in the queue directory. Halon's
/// fallback divides by "the last number of known hosts"; an instance that
/// restarts while clusterd is away would otherwise know none and take 1
/// connection per key and 1 token per interval of each shared rate (the
/// safe floor: no limit of the cluster is exceeded by more than the
/// fallback's own at least 1 per instance, but a rate of 600/min becomes
/// 1/min). Saved without fsync: a count lost in a crash only means that
/// floor until clusterd answers. Its text is [`count_text`], read back by
/// [`read_count`].
pub const COUNT_FILE: &str = "state/cluster.instances";

/// The count file's text for `instances`.
pub fn count_text(instances: u32) -> String {
    format!("{instances}\n")
}

/// The count a count file's text holds; `None` for one unreadable (as
/// for none: the floor).
pub fn read_count(text: &str) -> Option<u32> {
    text.trim().parse().ok()
}

/// Where the link to clusterd goes, as main.cf says (`None` without
/// `cluster_server`): the link is mutual TLS only, so an empty
/// `cluster_tls_cert_file`, `cluster_tls_key_file` or `cluster_tls_CAfile`
/// is an error naming it; clusterd's certificate must carry
/// `cluster_tls_server_name`, else the address `cluster_server` names.
pub fn target(config: &config::Config) -> Result<Option<Target>, String> {
    let Some(addr) = config.listen("cluster_server") else {
        return Ok(None);
    };
    let param = |n: &str| {
        let v = config.str(n);
        if v.is_empty() {
            Err(format!(
                "{n} is empty: the link to clusterd is mutual TLS only"
            ))
        } else {
            Ok(std::path::PathBuf::from(v))
        }
    };
    let name = config.str("cluster_tls_server_name");
    Ok(Some(Target {
        addr,
        cert: param("cluster_tls_cert_file")?,
        key: param("cluster_tls_key_file")?,
        ca: param("cluster_tls_CAfile")?,
        server_name: if name.is_empty() {
            addr.ip().to_string()
        } else {
            name
        },
    }))
}

/// What the shell is to do for the share, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareAction {
    /// Log a line.
    Log(Level, String),
    /// Keep the instance count for a restart.
    SaveCount(u32),
    /// Close the link's transport (clusterd is silent or refused us).
    Close,
    /// Write these bytes to clusterd, if the link is up.
    Send(Vec<u8>),
}

/// This instance's share of the cluster's limits, and its news.
pub struct Share {
    handle: Handle,
    /// clusterd's address, for the log and `sluice status`.
    coordinator: String,
    /// Since when (client ms) the link is down after having been up.
    down_since: Option<u64>,
}

impl Share {
    /// The share configured by main.cf (`myhostname`,
    /// `cluster_heartbeat_interval` of at least 100 ms,
    /// `cluster_shared_concurrency`), with clusterd at `coordinator`;
    /// `remembered` is the last instance count heard before a restart.
    pub fn from_config(
        config: &config::Config,
        coordinator: &str,
        seed: u64,
        remembered: Option<u32>,
    ) -> Share {
        let mut cfg = ClientConfig::new(&config.str("myhostname"), seed);
        cfg.heartbeat_ms = (config.time("cluster_heartbeat_interval").as_millis() as u64).max(100);
        cfg.shared_concurrency = config.bool("cluster_shared_concurrency");
        Share::new(Client::new(cfg), coordinator, remembered)
    }

    /// The share around `client`.
    pub fn new(mut client: Client, coordinator: &str, remembered: Option<u32>) -> Share {
        if let Some(n) = remembered {
            client.remember_instances(n);
        }
        Share {
            handle: Handle::new(client, false),
            coordinator: coordinator.to_string(),
            down_since: None,
        }
    }

    /// The client's state machine, for the shell's link events.
    pub fn client(&self) -> MutexGuard<'_, Client> {
        self.handle.lock()
    }

    /// Puts the client in force at start; the warning to log when there
    /// is no policy to share.
    pub fn start<S: Store>(&mut self, qm: &mut QueueManager<S>) -> Option<String> {
        let warning = qm.shaper_mut().is_none().then(|| {
            "cluster_server is set but no policy_file is: there is nothing to share".to_string()
        });
        self.install(qm);
        warning
    }

    /// Puts the client in force as the shaper's share (again after a
    /// reload, which may bring a new shaper or algorithm).
    pub fn install<S: Store>(&mut self, qm: &mut QueueManager<S>) {
        let Some(sh) = qm.shaper_mut() else {
            return;
        };
        let fixed = sh.policy().algorithm == shaping::RateAlgorithm::FixedWindow;
        self.handle.set_fixed_window(fixed);
        sh.set_share(Some(Box::new(self.handle.clone())));
    }

    /// What the client has to say at `ms`: its events as log lines, news
    /// for the scheduler and counts to keep, then its messages to send;
    /// the scheduler is woken when the limits changed.
    pub fn pump<S: Store>(
        &mut self,
        ms: u64,
        qm: &mut QueueManager<S>,
        now: Time,
    ) -> Vec<ShareAction> {
        let (events, bytes, changed) = {
            let mut c = self.handle.lock();
            let events: Vec<ClientEvent> = std::iter::from_fn(|| c.poll_event()).collect();
            let mut bytes = Vec::new();
            while let Some(m) = c.poll_transmit() {
                bytes.extend_from_slice(&encode(&m));
            }
            (events, bytes, c.take_changed())
        };
        let mut out = Vec::new();
        let plural = |n: u32| if n == 1 { "" } else { "s" };
        for ev in events {
            match ev {
                ClientEvent::Linked { instances } => {
                    out.push(ShareAction::SaveCount(instances));
                    let after = self.down_since.take().map_or(String::new(), |t| {
                        format!(" (after {}s degraded)", ms.saturating_sub(t) / 1000)
                    });
                    out.push(ShareAction::Log(
                        Level::Info,
                        format!(
                            "cluster: linked to clusterd at {}: {instances} instance{}{after}",
                            self.coordinator,
                            plural(instances)
                        ),
                    ));
                }
                ClientEvent::Degraded { reason, instances } => {
                    self.down_since.get_or_insert(ms);
                    out.push(ShareAction::Log(
                        Level::Warn,
                        format!(
                            "cluster: clusterd at {} lost ({reason}): degraded, limits divided by {} instance{}",
                            self.coordinator,
                            instances.max(1),
                            plural(instances)
                        ),
                    ));
                }
                ClientEvent::Close => out.push(ShareAction::Close),
                ClientEvent::Count { instances } => {
                    out.push(ShareAction::Log(
                        Level::Info,
                        format!("cluster: {instances} instances connected"),
                    ));
                    out.push(ShareAction::SaveCount(instances));
                }
                ClientEvent::News { from, news } => match news {
                    DestNews::Dead { dest, secs } => {
                        out.push(ShareAction::Log(Level::Info, format!(
                            "cluster: {from} says destination {dest} is not responding ({secs}s): its mail here waits too"
                        )));
                        qm.dead_elsewhere(now, &dest, u64::from(secs));
                    }
                    // Another machine's own host is not this one's.
                    DestNews::HostRetry { host, .. } if local_host(&host) => {}
                    DestNews::HostRetry { host, secs } => {
                        out.push(ShareAction::Log(
                            Level::Info,
                            format!(
                                "cluster: {from} put host {host} in retry ({secs}s): skipped here too"
                            ),
                        ));
                        qm.host_retry_elsewhere(now, &host, u64::from(secs));
                    }
                },
            }
        }
        if !bytes.is_empty() {
            out.push(ShareAction::Send(bytes));
        }
        if changed {
            qm.limits_changed(now);
        }
        out
    }

    /// A host this instance could not reach: the others skip it too,
    /// unless it is this machine's own.
    pub fn host_retry(&mut self, host: &str, secs: u64) {
        if local_host(host) {
            return;
        }
        self.handle.lock().news(DestNews::HostRetry {
            host: host.to_string(),
            secs: secs.min(u64::from(u32::MAX)) as u32,
        });
    }

    /// A destination this instance found dead: the others hear of it.
    pub fn dead(&mut self, nexthop: &str, secs: u64) {
        self.handle.lock().news(DestNews::Dead {
            dest: nexthop.to_string(),
            secs: secs.min(u64::from(u32::MAX)) as u32,
        });
    }

    /// The link for `sluice status` and the metrics: `connecting` until
    /// first linked, `degraded` whenever it is down after that.
    pub fn link(&self) -> ClusterLink {
        let st = self.handle.lock().status();
        ClusterLink {
            coordinator: self.coordinator.clone(),
            state: match st.link {
                Link::Linked => "linked",
                Link::Connecting { .. } | Link::Hello if st.losses == 0 => "connecting",
                _ => "degraded",
            }
            .into(),
            instances: st.instances,
            losses: st.losses,
        }
    }

    /// `sluice cluster status`: the link and every shared key in use.
    pub fn view<S: Store>(&self, qm: &mut QueueManager<S>, now: Time) -> ClusterView {
        let link = self.link();
        let names = self.handle.lock().status().names;
        let rate = |r: shaping::Rate| format!("{}/{}s", r.tokens, r.per.as_secs_f64());
        let keys = qm
            .shaper_mut()
            .map(|sh| sh.keys(now.0))
            .unwrap_or_default()
            .into_iter()
            .filter(|k| k.local_concurrency.is_some() || k.local_rate.is_some())
            .map(|k| ClusterKeyView {
                key: k.name.to_string(),
                concurrency: k.local_concurrency.and(k.props.concurrency),
                local_concurrency: k.local_concurrency,
                connections: k.connections,
                rate: k.local_rate.and(k.props.rate).map(rate),
                local_rate: k.local_rate.map(rate),
            })
            .collect();
        ClusterView { link, names, keys }
    }
}

/// What the queue manager's action `a` at `now` tells the other
/// instances: a destination found dead or a host not reached goes to the
/// share (to nobody without one) and is taken; any other action is
/// handed back.
pub fn take(share: Option<&mut Share>, a: Action, now: Time) -> Option<Action> {
    let secs = |at: Time| at.0.saturating_sub(now.0) / 1000;
    match a {
        Action::DestinationDead { nexthop, retry_at } => {
            if let Some(s) = share {
                s.dead(&nexthop, secs(retry_at));
            }
            None
        }
        Action::HostRetry { host, retry_at } => {
            if let Some(s) = share {
                s.host_retry(&host, secs(retry_at));
            }
            None
        }
        other => Some(other),
    }
}

/// An answer to a client, with the link to clusterd in `sluice status`'s
/// summary when there is one.
pub fn annotate(share: Option<&Share>, answer: &mut Response) {
    if let (Response::Control(ipc::queuectl::Response::Summary(s)), Some(share)) = (answer, share) {
        s.cluster = Some(share.link());
    }
}

/// `sluice cluster status`, answered here when there is a share (the
/// share is beside the link; without one the queue manager's control
/// answers it); `None` for any other request.
pub fn answer_now<S: Store>(
    share: Option<&Share>,
    qm: &mut QueueManager<S>,
    now: Time,
    req: &crate::clients::Request,
) -> Option<Response> {
    use ipc::queuectl::{Request as Ctl, Response as Answer};
    match (req, share) {
        (crate::clients::Request::Control(Ctl::Cluster), Some(share)) => Some(Response::Control(
            Answer::Cluster(Ok(Box::new(share.view(qm, now)))),
        )),
        _ => None,
    }
}

/// Destinations reported on the metrics endpoint.
pub const METRICS_TOP: usize = 20;

/// The metrics page at `now`: the busiest destinations and, with a
/// share, the link to clusterd, in Prometheus text.
pub fn metrics_page<S: Store>(qm: &QueueManager<S>, share: Option<&Share>, now: Time) -> String {
    let mut s = qm.summary(now, METRICS_TOP);
    s.cluster = share.map(Share::link);
    crate::prometheus::prometheus(&s)
}

/// Whether a host of qmgr's destination database is this machine's own:
/// an LMTP socket (`unix:PATH`), `localhost`, or a loopback address (as a
/// name, `127.0.0.1`, or in brackets, `name[::1]`), on any port
/// (`localhost:10025`, a content filter's: destdb names a host with its
/// port when that is not 25).
pub fn local_host(host: &str) -> bool {
    let lower = host.to_ascii_lowercase();
    if lower.starts_with("unix:") {
        return true;
    }
    let (name, addr) = sched::host_parts(&lower);
    let loopback = |a: &str| {
        a.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
    };
    name == "localhost" || loopback(name) || loopback(addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{settings, World};
    use cluster::proto::{decoder, ToCoord, ToInstance, VERSION};

    fn share() -> Share {
        let client = Client::new(ClientConfig::new("mx1.example", 1));
        Share::new(client, "192.0.2.9:7000", None)
    }

    fn logs(out: &[ShareAction]) -> Vec<String> {
        out.iter()
            .filter_map(|a| match a {
                ShareAction::Log(_, l) => Some(l.clone()),
                _ => None,
            })
            .collect()
    }

    fn main_cf(text: &str) -> config::Config {
        config::Config::parse(text, std::path::Path::new("main.cf"), &[])
            .unwrap()
            .config
    }

    #[test]
    fn the_link_goes_where_main_cf_says_with_mutual_tls_only() {
        assert_eq!(target(&main_cf("")).unwrap(), None);
        let files = "cluster_tls_cert_file = /etc/c.pem\n\
                     cluster_tls_key_file = /etc/c.key\n\
                     cluster_tls_CAfile = /etc/ca.pem\n";
        let t = target(&main_cf(&format!(
            "cluster_server = 192.0.2.9:7000\n{files}"
        )))
        .unwrap()
        .unwrap();
        assert_eq!(t.addr.to_string(), "192.0.2.9:7000");
        assert_eq!(t.ca, std::path::Path::new("/etc/ca.pem"));
        assert_eq!(
            t.server_name, "192.0.2.9",
            "the address when no name is set"
        );
        let named = format!(
            "cluster_server = 192.0.2.9:7000\ncluster_tls_server_name = clusterd.example\n{files}"
        );
        let t = target(&main_cf(&named)).unwrap().unwrap();
        assert_eq!(t.server_name, "clusterd.example");
        let no_ca = "cluster_server = 192.0.2.9:7000\n\
                     cluster_tls_cert_file = /etc/c.pem\n\
                     cluster_tls_key_file = /etc/c.key\n";
        assert_eq!(
            target(&main_cf(no_ca)).unwrap_err(),
            "cluster_tls_CAfile is empty: the link to clusterd is mutual TLS only"
        );
    }

    #[test]
    fn the_count_file_reads_back_what_was_written_and_nothing_from_garbage() {
        assert_eq!(read_count(&count_text(3)), Some(3));
        assert_eq!(read_count(" 12 \n"), Some(12));
        assert_eq!(read_count(""), None);
        assert_eq!(read_count("three"), None);
    }

    #[test]
    fn what_actions_carry_for_the_cluster_is_taken_with_or_without_one() {
        let mut w = World::new(settings());
        let mut s = share();
        assert_eq!(
            s.start(&mut w.qm).as_deref(),
            Some("cluster_server is set but no policy_file is: there is nothing to share")
        );
        let now = Time(1_700_000_000_000);
        let dead = || Action::DestinationDead {
            nexthop: "example.net".into(),
            retry_at: Time(now.0 + 300_000),
        };
        assert!(take(Some(&mut s), dead(), now).is_none());
        assert!(take(None, dead(), now).is_none(), "nobody to tell");
        let retry = Action::HostRetry {
            host: "mx.example.net[192.0.2.1]".into(),
            retry_at: now,
        };
        assert!(take(Some(&mut s), retry, now).is_none());
        assert!(matches!(
            take(Some(&mut s), Action::DropCleanup, now),
            Some(Action::DropCleanup)
        ));
        let mut summary = Response::Control(ipc::queuectl::Response::Summary(Box::new(
            w.qm.summary(now, 5),
        )));
        annotate(None, &mut summary);
        assert!(
            matches!(&summary, Response::Control(ipc::queuectl::Response::Summary(x)) if x.cluster.is_none())
        );
        annotate(Some(&s), &mut summary);
        let Response::Control(ipc::queuectl::Response::Summary(x)) = summary else {
            panic!("a summary stays a summary");
        };
        let link = x.cluster.expect("the link is shown");
        assert_eq!(link.coordinator, "192.0.2.9:7000");
        assert_eq!(link.state, s.link().state);
    }

    #[test]
    fn cluster_status_is_answered_from_the_share_when_there_is_one() {
        use crate::clients::Request;
        use ipc::queuectl::{Request as Ctl, Response as Answer};
        let mut w = World::new(settings());
        let now = Time(1_700_000_000_000);
        let s = share();
        let asked = Request::Control(Ctl::Cluster);
        let got = answer_now(Some(&s), &mut w.qm, now, &asked);
        assert!(
            matches!(&got, Some(Response::Control(Answer::Cluster(Ok(v)))) if v.link.coordinator == "192.0.2.9:7000"),
            "{got:?}"
        );
        assert!(answer_now(None, &mut w.qm, now, &asked).is_none());
        let other = Request::Control(Ctl::Summary { top: 5 });
        assert!(answer_now(Some(&s), &mut w.qm, now, &other).is_none());
    }

    #[test]
    fn the_metrics_page_shows_the_cluster_only_with_a_share() {
        let w = World::new(settings());
        let now = Time(1_700_000_000_000);
        let alone = metrics_page(&w.qm, None, now);
        assert!(!alone.contains("sluice_cluster_instances"), "{alone}");
        let shared = metrics_page(&w.qm, Some(&share()), now);
        assert!(shared.contains("sluice_cluster_instances"), "{shared}");
        assert!(shared.starts_with(&alone[..alone.len().min(40)]));
    }

    #[test]
    fn hosts_of_this_machine_are_not_news_for_the_cluster() {
        for h in [
            "unix:private/dovecot-lmtp",
            "localhost",
            "[127.0.0.1]",
            "relay[::1]",
            "LocalHost[127.0.0.2]",
            "localhost:10025",
            "127.0.0.1:9",
            "127.0.0.1",
            "::1[::1]:10025",
        ] {
            assert!(local_host(h), "{h}");
        }
        for h in [
            "mx1.example.com",
            "[192.0.2.1]",
            "mx.example[2001:db8::1]",
            "localhost.example.com",
            "192.0.2.1:2525",
            "mx.example:2525",
        ] {
            assert!(!local_host(h), "{h}");
        }
    }

    #[test]
    fn linked_degraded_and_back_are_logged_and_the_count_kept() {
        let mut w = World::new(settings());
        let mut s = share();
        assert_eq!(s.link().state, "degraded", "down before any try");
        s.client().connecting(0);
        assert_eq!(s.link().state, "connecting");
        s.client().connected(10);
        let out = s.pump(10, &mut w.qm, w.now);
        // The hello goes out, and nothing is logged yet.
        let Some(ShareAction::Send(bytes)) = out.last() else {
            panic!("{out:?}")
        };
        let mut d = decoder();
        d.push(bytes);
        assert!(matches!(
            d.decode::<ToCoord>(),
            Ok(Some(ToCoord::Hello { ref name, .. })) if name == "mx1.example"
        ));
        assert!(logs(&out).is_empty(), "{out:?}");

        let welcome = ToInstance::Welcome {
            version: VERSION,
            instances: 2,
        };
        s.client().handle(20, welcome.clone());
        let out = s.pump(20, &mut w.qm, w.now);
        assert!(out.contains(&ShareAction::SaveCount(2)));
        assert_eq!(
            logs(&out),
            ["cluster: linked to clusterd at 192.0.2.9:7000: 2 instances"]
        );
        assert_eq!(s.link().state, "linked");

        s.client().lost(1_000, "connection reset");
        let out = s.pump(1_000, &mut w.qm, w.now);
        assert_eq!(
            logs(&out),
            ["cluster: clusterd at 192.0.2.9:7000 lost (connection reset): degraded, limits divided by 2 instances"]
        );
        assert_eq!(s.link().state, "degraded");

        s.client().connecting(5_000);
        assert_eq!(
            s.link().state,
            "degraded",
            "connecting again is still degraded"
        );
        s.client().connected(5_000);
        s.client().handle(8_000, welcome);
        let out = s.pump(8_000, &mut w.qm, w.now);
        assert!(
            logs(&out)
                .iter()
                .any(|l| l.ends_with("2 instances (after 7s degraded)")),
            "{out:?}"
        );
    }

    #[test]
    fn news_of_others_is_logged_but_their_own_hosts_are_left_alone() {
        let mut w = World::new(settings());
        let mut s = share();
        s.client().connecting(0);
        s.client().connected(0);
        let news = |news| ToInstance::News {
            from: "mx2.example".into(),
            news,
        };
        s.client().handle(
            1,
            ToInstance::Welcome {
                version: VERSION,
                instances: 2,
            },
        );
        for n in [
            DestNews::Dead {
                dest: "dead.example".into(),
                secs: 60,
            },
            DestNews::HostRetry {
                host: "localhost".into(),
                secs: 60,
            },
            DestNews::HostRetry {
                host: "mx.far.example".into(),
                secs: 30,
            },
        ] {
            s.client().handle(2, news(n));
        }
        let out = s.pump(2, &mut w.qm, w.now);
        let l = logs(&out);
        assert_eq!(l.len(), 3, "{l:?}");
        assert_eq!(
            l[1],
            "cluster: mx2.example says destination dead.example is not responding (60s): its mail here waits too"
        );
        assert_eq!(
            l[2],
            "cluster: mx2.example put host mx.far.example in retry (30s): skipped here too"
        );
    }

    #[test]
    fn this_machines_hosts_are_not_told_to_the_others() {
        let mut w = World::new(settings());
        let mut s = share();
        s.client().connecting(0);
        s.client().connected(0);
        s.client().handle(
            1,
            ToInstance::Welcome {
                version: VERSION,
                instances: 2,
            },
        );
        let _ = s.pump(1, &mut w.qm, w.now);
        s.host_retry("[127.0.0.1]", 30);
        s.host_retry("mx.far.example", 30);
        s.dead("dead.example", 60);
        let out = s.pump(2, &mut w.qm, w.now);
        let Some(ShareAction::Send(bytes)) = out.last() else {
            panic!("{out:?}")
        };
        let mut d = decoder();
        d.push(bytes);
        let mut sent = Vec::new();
        while let Ok(Some(m)) = d.decode::<ToCoord>() {
            sent.push(m);
        }
        assert_eq!(
            sent,
            [
                ToCoord::News(DestNews::HostRetry {
                    host: "mx.far.example".into(),
                    secs: 30
                }),
                ToCoord::News(DestNews::Dead {
                    dest: "dead.example".into(),
                    secs: 60
                }),
            ]
        );
    }
}
