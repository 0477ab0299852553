//! The simulated cluster: one coordinator and many clients in virtual
//! time, joined by a bus with a fixed latency, for what real processes
//! cannot show (50 instances, restarts timed to the millisecond).

use std::collections::VecDeque;

use crate::client::{Client, ClientConfig, ClientEvent, Link};
use crate::coordinator::{Config, ConnId, Coordinator, Event};
use crate::proto::{DestNews, ToCoord, ToInstance, WireRate};
use crate::rates::Division;
use crate::Ms;

const KEY: &str = "localip=192.0.2.1,grouping=orange";

/// An instance: its client and the connections it holds on [`KEY`].
struct Node {
    client: Client,
    conn: Option<ConnId>,
    up: bool,
    backlog: bool,
    /// When each open connection closes.
    open: Vec<Ms>,
    /// Connection-milliseconds on the key.
    slot_ms: u64,
    linked_at: Option<Ms>,
}

struct Sim {
    now: Ms,
    tick: Ms,
    latency: Ms,
    coord: Option<Coordinator>,
    cfg: Config,
    nodes: Vec<Node>,
    next_conn: ConnId,
    to_coord: VecDeque<(Ms, ConnId, ToCoord)>,
    to_inst: VecDeque<(Ms, usize, ConnId, ToInstance)>,
    limit: u32,
    /// How long a connection stays open (its transactions, then it closes).
    hold_ms: Ms,
    max_open: u32,
    grants_over_limit: u32,
}

impl Sim {
    fn new(n: usize, division: Division) -> Sim {
        let cfg = Config::new(1000, 10_000, division);
        let mut s = Sim {
            now: 0,
            tick: 10,
            latency: 1,
            coord: Some(Coordinator::new(cfg.clone(), 0)),
            cfg,
            nodes: Vec::new(),
            next_conn: 1,
            to_coord: VecDeque::new(),
            to_inst: VecDeque::new(),
            limit: 2,
            hold_ms: 500,
            max_open: 0,
            grants_over_limit: 0,
        };
        for _ in 0..n {
            s.add();
        }
        s
    }

    fn add(&mut self) -> usize {
        let i = self.nodes.len();
        let cfg = ClientConfig::new(&format!("mx{i}.example"), 0x9e37_79b9 * (i as u64 + 1));
        self.nodes.push(Node {
            client: Client::new(cfg),
            conn: None,
            up: true,
            backlog: false,
            open: Vec::new(),
            slot_ms: 0,
            linked_at: None,
        });
        i
    }

    fn open_total(&self) -> u32 {
        self.nodes.iter().map(|n| n.open.len() as u32).sum()
    }

    fn kill_coordinator(&mut self) {
        self.coord = None;
        self.to_coord.clear();
        self.to_inst.clear();
        let now = self.now;
        for n in &mut self.nodes {
            if n.conn.take().is_some() {
                n.client.lost(now, "connection reset");
            }
        }
    }

    fn start_coordinator(&mut self) {
        self.coord = Some(Coordinator::new(self.cfg.clone(), self.now));
    }

    fn run_until(&mut self, until: Ms) {
        while self.now < until {
            self.now += self.tick;
            self.step();
        }
    }

    fn step(&mut self) {
        let now = self.now;
        // Connections close after their transactions; mail opens new ones.
        for i in 0..self.nodes.len() {
            let n = &mut self.nodes[i];
            if !n.up {
                continue;
            }
            n.slot_ms += self.tick * n.open.len() as u64;
            while let Some(p) = n.open.iter().position(|&t| t <= now) {
                n.open.remove(p);
                n.client.closed(KEY);
            }
            if n.backlog {
                let may = n.client.concurrency_of(KEY, self.limit).min(self.limit);
                while (n.open.len() as u32) < may {
                    n.open.push(now + self.hold_ms);
                    n.client.opened(KEY);
                }
                let held = n.open.len() as u32;
                if held >= may && held < self.limit {
                    n.client.want(KEY, held, self.limit);
                }
            }
        }
        let total = self.open_total();
        self.max_open = self.max_open.max(total);
        // Transport: connect, deliver, time out.
        for i in 0..self.nodes.len() {
            if !self.nodes[i].up || !self.nodes[i].client.should_connect(now) {
                continue;
            }
            self.nodes[i].client.connecting(now);
            match self.coord.as_mut() {
                Some(c) => {
                    let conn = self.next_conn;
                    self.next_conn += 1;
                    c.connect(now, conn);
                    self.nodes[i].conn = Some(conn);
                    self.nodes[i].client.connected(now);
                }
                None => self.nodes[i].client.lost(now, "connection refused"),
            }
        }
        while self.to_coord.front().is_some_and(|m| m.0 <= now) {
            let (_, conn, msg) = self.to_coord.pop_front().unwrap();
            if let Some(c) = self.coord.as_mut() {
                c.handle(now, conn, msg);
            }
        }
        while self.to_inst.front().is_some_and(|m| m.0 <= now) {
            let (_, i, conn, msg) = self.to_inst.pop_front().unwrap();
            if self.nodes[i].conn == Some(conn) {
                self.nodes[i].client.handle(now, msg);
            }
        }
        if let Some(c) = self.coord.as_mut() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
        for n in &mut self.nodes {
            if n.up && n.client.poll_timeout().is_some_and(|t| t <= now) {
                n.client.handle_timeout(now);
            }
        }
        self.pump();
    }

    fn pump(&mut self) {
        let now = self.now;
        for (i, n) in self.nodes.iter_mut().enumerate() {
            while let Some(ev) = n.client.poll_event() {
                match ev {
                    ClientEvent::Close => {
                        if let (Some(conn), Some(c)) = (n.conn.take(), self.coord.as_mut()) {
                            c.disconnect(now, conn);
                        }
                    }
                    ClientEvent::Linked { .. } => n.linked_at = Some(now),
                    _ => {}
                }
            }
            while let Some(m) = n.client.poll_transmit() {
                if let Some(conn) = n.conn {
                    self.to_coord.push_back((now + self.latency, conn, m));
                }
            }
            let _ = i;
        }
        let Some(c) = self.coord.as_mut() else {
            return;
        };
        while let Some((conn, m)) = c.poll_transmit() {
            if let Some(i) = self.nodes.iter().position(|n| n.conn == Some(conn)) {
                self.to_inst.push_back((now + self.latency, i, conn, m));
            }
        }
        while let Some(ev) = c.poll_event() {
            if let Event::Close { conn } | Event::Refused { conn, .. } = ev {
                if let Some(n) = self.nodes.iter_mut().find(|n| n.conn == Some(conn)) {
                    n.conn = None;
                    n.client.lost(now, "closed by the coordinator");
                }
            }
        }
        let granted: u32 = c
            .keys()
            .iter()
            .filter(|k| k.key == KEY)
            .map(|k| k.slots.iter().map(|s| s.1).sum::<u32>())
            .sum();
        if granted > self.limit && !c.recovering() {
            self.grants_over_limit += 1;
        }
    }
}

#[test]
fn fair_rotation_gives_five_instances_turns_at_concurrency_two() {
    let mut s = Sim::new(5, Division::Equal);
    for n in &mut s.nodes {
        n.backlog = true;
    }
    s.run_until(3_000); // linked, past the recovery window
    for n in &mut s.nodes {
        n.slot_ms = 0;
    }
    s.max_open = 0;
    s.run_until(123_000);
    assert!(s.max_open <= 2, "{} open at once", s.max_open);
    let total: u64 = s.nodes.iter().map(|n| n.slot_ms).sum();
    for (i, n) in s.nodes.iter().enumerate() {
        let pct = 100.0 * n.slot_ms as f64 / total as f64;
        assert!(
            (16.0..=24.0).contains(&pct),
            "mx{i}: {pct:.1} % of the slot-time"
        );
    }
    // The slots were busy, not idle between turns.
    assert!(
        total as f64 >= 0.9 * 2.0 * 120_000.0,
        "{total} ms of 240000"
    );
}

#[test]
fn one_instance_with_mail_takes_the_whole_concurrency() {
    let mut s = Sim::new(5, Division::Equal);
    s.nodes[3].backlog = true;
    s.tick = 2; // a loopback round trip, not the default step
    s.run_until(3_000);
    s.nodes[3].slot_ms = 0;
    s.max_open = 0;
    s.run_until(13_000);
    // Both slots busy but for the round trips between turns.
    assert!(
        s.nodes[3].slot_ms >= 19_000,
        "{} ms of 20000",
        s.nodes[3].slot_ms
    );
    assert_eq!(s.max_open, 2);
}

#[test]
fn a_reservation_not_used_goes_to_the_next_waiter() {
    let cfg = Config::new(1000, 10_000, Division::Equal);
    let mut c = Coordinator::new(cfg, 0);
    let hello = |name: &str| ToCoord::Hello {
        version: crate::proto::VERSION,
        name: name.into(),
        known: 0,
        keys: vec![(0, KEY.into())],
        held: vec![],
        rates: vec![],
    };
    c.connect(0, 1);
    c.connect(0, 2);
    c.handle(0, 1, hello("a"));
    c.handle(0, 2, hello("b"));
    c.handle_timeout(2000); // recovery over
    let want = || ToCoord::Want { key: 0, limit: 1 };
    c.handle(2000, 1, want());
    c.handle(2000, 2, want());
    let grants = |c: &mut Coordinator| {
        let mut v = Vec::new();
        while let Some((conn, m)) = c.poll_transmit() {
            if let ToInstance::Grant { slots, .. } = m {
                v.push((conn, slots));
            }
        }
        v
    };
    assert_eq!(grants(&mut c), [(1, 1)], "a asked first");
    // a never opens: after the reservation (2 heartbeats) b gets the slot.
    c.handle_timeout(3999);
    assert_eq!(grants(&mut c), []);
    c.handle_timeout(4000);
    assert_eq!(grants(&mut c), [(1, 0), (2, 1)]);
    // b opens in time: its slot stays.
    c.handle(4100, 2, ToCoord::Opened { key: 0 });
    c.handle(4100, 2, ToCoord::Heartbeat { rates: vec![] });
    c.handle_timeout(7000);
    assert_eq!(grants(&mut c), []);
}

#[test]
fn a_killed_instance_slots_return_within_one_lease() {
    let mut s = Sim::new(3, Division::Equal);
    s.nodes[0].backlog = true;
    s.hold_ms = 1_000_000; // holds its connections for good
    s.run_until(3_000);
    assert_eq!(s.nodes[0].open.len(), 2);
    s.nodes[1].backlog = true;
    // kill -9 of instance 0: its socket closes, nothing more is heard.
    let now = s.now;
    let conn = s.nodes[0].conn.take().unwrap();
    s.coord.as_mut().unwrap().disconnect(now, conn);
    s.nodes[0].up = false;
    s.nodes[0].open.clear();
    let killed = s.now;
    while s.nodes[1].open.len() < 2 {
        s.run_until(s.now + 100);
        assert!(
            s.now - killed <= 10_100,
            "slots still held at {} ms",
            s.now - killed
        );
    }
    // The lease runs from the last heartbeat, up to one before the kill.
    assert!(
        s.now - killed >= 8_900,
        "slots moved before the lease ended"
    );
}

#[test]
fn coordinator_lost_instances_fall_back_within_3s_and_divide_by_last_count() {
    let mut s = Sim::new(5, Division::Equal);
    s.run_until(3_000);
    for n in &s.nodes {
        assert_eq!(n.client.link(), Link::Linked);
    }
    // Silent, not closed (a partition): only the 3 s watchdog can tell.
    s.coord = None;
    s.to_inst.clear();
    let cut = s.now;
    s.run_until(cut + 3_000);
    for n in &s.nodes {
        assert!(matches!(
            n.client.link(),
            Link::Down { .. } | Link::Connecting { .. }
        ));
        // 10 / 5 instances, and at least 1 of 2.
        assert_eq!(n.client.concurrency_of("k", 10), 2);
        assert_eq!(n.client.concurrency_of("k", 2), 1);
        let r = n.client.rate_of(
            "r",
            shaping::Rate {
                tokens: 600,
                per: std::time::Duration::from_secs(60),
            },
            false,
        );
        assert_eq!((r.tokens, r.per.as_secs()), (120, 60));
        assert_eq!(n.client.status().losses, 1);
    }
}

#[test]
fn fifty_instances_reconnect_spread_over_five_seconds_after_a_restart() {
    let mut s = Sim::new(50, Division::Equal);
    s.run_until(3_000);
    s.kill_coordinator();
    let killed = s.now;
    s.run_until(killed + 3_000); // systemd restarts it after its RestartSec
    s.start_coordinator();
    for n in &mut s.nodes {
        n.linked_at = None;
    }
    s.run_until(killed + 40_000);
    let times: Vec<Ms> = s
        .nodes
        .iter()
        .map(|n| n.linked_at.expect("relinked"))
        .collect();
    let (first, last) = (*times.iter().min().unwrap(), *times.iter().max().unwrap());
    assert!(
        last - first >= 5_000,
        "all relinked within {} ms",
        last - first
    );
    // No second in which half of them or more came back.
    for t in (first..=last).step_by(100) {
        let burst = times.iter().filter(|&&x| x >= t && x < t + 1000).count();
        assert!(burst < 25, "{burst} reconnects in the second from {t}");
    }
    assert!(
        last - killed <= 3_000 + 10_000 + 10_000,
        "back-off over its cap"
    );
}

#[test]
fn five_to_ten_instances_redivide_within_one_heartbeat() {
    let mut s = Sim::new(5, Division::Equal);
    let limit = shaping::Rate {
        tokens: 600,
        per: std::time::Duration::from_secs(60),
    };
    s.run_until(3_000);
    for n in &mut s.nodes {
        n.client.rate_used(KEY, limit, false, false);
    }
    s.run_until(4_000);
    for n in &s.nodes {
        assert_eq!(n.client.rate_of(KEY, limit, false).tokens, 120);
    }
    for _ in 0..5 {
        s.add();
    }
    s.run_until(4_010);
    let joined = s.now;
    while s
        .nodes
        .iter()
        .any(|n| n.client.rate_of(KEY, limit, false).tokens != 60)
    {
        s.run_until(s.now + 10);
        assert!(s.now - joined <= 1_000, "not re-divided after a heartbeat");
    }
}

#[test]
fn backlog_division_gives_the_only_sender_the_whole_rate_within_a_second() {
    let mut s = Sim::new(5, Division::Backlog);
    let limit = shaping::Rate {
        tokens: 10,
        per: std::time::Duration::from_secs(1),
    };
    s.run_until(3_000);
    let start = s.now;
    s.nodes[2].client.rate_used(KEY, limit, false, false);
    loop {
        s.run_until(s.now + 10);
        let r = s.nodes[2].client.rate_of(KEY, limit, false);
        let got = f64::from(r.tokens) / r.per.as_secs_f64();
        if got >= 9.5 {
            break;
        }
        assert!(s.now - start <= 1_000, "{got}/s after {} ms", s.now - start);
    }
    // Two hungry instances at 80/20 of the mail still use the whole rate
    // between them: each refused sender gets half until the other drains.
    s.nodes[4].client.rate_used(KEY, limit, false, false);
    s.run_until(s.now + 100);
    let sum: f64 = [2, 4]
        .iter()
        .map(|&i| {
            let r = s.nodes[i].client.rate_of(KEY, limit, false);
            f64::from(r.tokens) / r.per.as_secs_f64()
        })
        .sum();
    assert!((sum - 10.0).abs() < 0.1, "{sum}/s of 10");
}

#[test]
fn a_restart_grants_nothing_new_during_recovery_nor_over_the_limit() {
    let mut s = Sim::new(5, Division::Equal);
    for n in &mut s.nodes {
        n.backlog = true;
    }
    s.run_until(5_000);
    s.kill_coordinator();
    // Without the coordinator each falls back to max(1, 2/5) = 1.
    s.run_until(s.now + 500);
    assert!(s.nodes.iter().all(|n| n.client.concurrency_of(KEY, 2) == 1));
    s.start_coordinator();
    s.grants_over_limit = 0;
    s.run_until(s.now + 60_000);
    assert_eq!(s.grants_over_limit, 0, "slots granted past the limit");
    // Once all are back and the fallback's connections closed, the cluster
    // is at 2 again.
    s.max_open = 0;
    s.run_until(s.now + 10_000);
    assert!(s.max_open <= 2, "{} open", s.max_open);
}

/// Three instances at a limit of 3, the coordinator away for 8 s (their
/// back-offs grow) and restarted: the most connections open at once from
/// its restart on, with the recovery window's longest end `max_ms`.
fn restart_with_spread_reconnects(max_ms: Ms) -> u32 {
    let mut s = Sim::new(3, Division::Equal);
    s.limit = 3;
    s.cfg.recovery_max_ms = max_ms;
    s.coord = Some(Coordinator::new(s.cfg.clone(), 0));
    for n in &mut s.nodes {
        n.backlog = true;
    }
    s.run_until(5_000);
    s.kill_coordinator();
    s.run_until(s.now + 8_000);
    s.start_coordinator();
    s.max_open = 0;
    s.run_until(s.now + 30_000);
    s.max_open
}

#[test]
fn a_restarted_coordinator_waits_for_every_instance_it_is_told_of() {
    // An instance still on its fallback connections when the window
    // closes is not counted: a grant to another takes the cluster over.
    let two_heartbeats = restart_with_spread_reconnects(2_000);
    assert!(two_heartbeats > 3, "{two_heartbeats} open at once");
    let waits =
        restart_with_spread_reconnects(Config::new(1000, 10_000, Division::Equal).recovery_max_ms);
    assert_eq!(waits, 3, "open at once after the restart");
}

#[test]
fn divide_by_n_when_shared_concurrency_is_off() {
    let mut s = Sim::new(3, Division::Equal);
    for (i, n) in s.nodes.iter_mut().enumerate() {
        n.client = Client::new(ClientConfig {
            name: format!("mx{i}"),
            shared_concurrency: false,
            ..ClientConfig::new("x", i as u64 + 7)
        });
    }
    s.run_until(3_000);
    for n in &s.nodes {
        assert_eq!(n.client.concurrency_of(KEY, 5), 1);
        assert_eq!(n.client.concurrency_of(KEY, 9), 3);
        assert_eq!(n.client.concurrency_of(KEY, 2), 1);
    }
}

#[test]
fn destination_news_reaches_every_other_instance() {
    let mut s = Sim::new(4, Division::Equal);
    s.run_until(3_000);
    let news = DestNews::Dead {
        dest: "dead.example".into(),
        secs: 600,
    };
    s.nodes[1].client.news(news.clone());
    // Collect before pump() eats the events: step by hand.
    let mut heard = vec![false; 4];
    for _ in 0..10 {
        s.now += 1;
        let now = s.now;
        for n in &mut s.nodes {
            while let Some(m) = n.client.poll_transmit() {
                s.to_coord.push_back((now, n.conn.unwrap(), m));
            }
        }
        while let Some((_, conn, m)) = s.to_coord.pop_front() {
            s.coord.as_mut().unwrap().handle(now, conn, m);
        }
        while let Some((conn, m)) = s.coord.as_mut().unwrap().poll_transmit() {
            let i = s.nodes.iter().position(|n| n.conn == Some(conn)).unwrap();
            s.nodes[i].client.handle(now, m);
        }
        for (i, n) in s.nodes.iter_mut().enumerate() {
            while let Some(ev) = n.client.poll_event() {
                if let ClientEvent::News { from, news: got } = ev {
                    assert_eq!((from.as_str(), &got), ("mx1.example", &news));
                    heard[i] = true;
                }
            }
        }
    }
    assert_eq!(heard, [true, false, true, true]);
}

#[test]
fn another_protocol_version_is_refused() {
    let mut c = Coordinator::new(Config::new(1000, 10_000, Division::Equal), 0);
    c.connect(0, 9);
    c.handle(
        0,
        9,
        ToCoord::Hello {
            version: 999,
            name: "old".into(),
            known: 0,
            keys: vec![],
            held: vec![],
            rates: vec![],
        },
    );
    assert!(matches!(
        c.poll_transmit(),
        Some((9, ToInstance::Refused { .. }))
    ));
    assert!(matches!(
        c.poll_event(),
        Some(Event::Refused { conn: 9, .. })
    ));
    assert_eq!(c.instances(), 0);
}

#[test]
fn a_grant_crossing_a_release_never_allows_one_too_many() {
    let mut cl = Client::new(ClientConfig::new("a", 1));
    cl.connecting(0);
    cl.connected(0);
    cl.handle(
        1,
        ToInstance::Welcome {
            version: crate::proto::VERSION,
            instances: 2,
        },
    );
    while cl.poll_transmit().is_some() {}
    cl.want(KEY, 0, 2); // message 2 names the key, 3 is the want
    cl.handle(
        2,
        ToInstance::Key {
            id: 7,
            name: KEY.into(),
        },
    );
    cl.handle(
        2,
        ToInstance::Grant {
            key: 7,
            slots: 1,
            seen: 3,
            waiting: false,
        },
    );
    cl.opened(KEY); // message 4
    cl.want(KEY, 1, 2); // message 5
    cl.closed(KEY); // message 6: the release
    assert_eq!(cl.concurrency_of(KEY, 2), 0);
    // The coordinator granted a second slot before it read the release.
    cl.handle(
        3,
        ToInstance::Grant {
            key: 7,
            slots: 2,
            seen: 5,
            waiting: false,
        },
    );
    assert_eq!(
        cl.concurrency_of(KEY, 2),
        1,
        "the release is still in flight"
    );
    cl.handle(
        4,
        ToInstance::Grant {
            key: 7,
            slots: 1,
            seen: 6,
            waiting: false,
        },
    );
    assert_eq!(cl.concurrency_of(KEY, 2), 1);
}

#[test]
fn before_any_count_an_instance_takes_one_connection_and_one_token() {
    let cl = Client::new(ClientConfig::new("a", 1));
    assert_eq!(cl.concurrency_of(KEY, 20), 1);
    let r = cl.rate_of(
        KEY,
        shaping::Rate {
            tokens: 600,
            per: std::time::Duration::from_secs(60),
        },
        false,
    );
    assert_eq!((r.tokens, r.per.as_secs()), (1, 60));
    let _ = WireRate {
        tokens: 0,
        per_ms: 0,
        fixed_window: false,
    };
}

/// A client linked at 5 ms, told of 2 instances, its hello taken.
fn welcomed_client() -> Client {
    let mut c = Client::new(ClientConfig::new("mx1.example", 7));
    c.connecting(0);
    c.connected(0);
    while c.poll_transmit().is_some() {}
    c.handle(
        5,
        ToInstance::Welcome {
            version: crate::proto::VERSION,
            instances: 2,
        },
    );
    c
}

#[test]
fn a_message_the_share_queued_is_due_at_once_not_at_the_next_heartbeat() {
    // The scheduler's calls (a want, a release, a starved report) queue
    // messages where the shell looks only when a timeout is due: a slot
    // freed here must not wait for the next heartbeat to reach clusterd.
    let mut c = welcomed_client();
    assert!(
        c.poll_timeout().is_some_and(|t| t > 5),
        "idle: the heartbeat"
    );
    c.want(KEY, 0, 2);
    assert_eq!(c.poll_timeout(), Some(0), "a want waiting is due now");
    assert!(matches!(
        c.poll_transmit(),
        Some(ToCoord::Key { id: 0, .. })
    ));
    assert!(matches!(
        c.poll_transmit(),
        Some(ToCoord::Want { key: 0, .. })
    ));
    assert!(c.poll_timeout().is_some_and(|t| t > 5), "sent: idle again");
}

#[test]
fn a_key_is_named_once_per_connection_and_numbers_follow() {
    let rate = shaping::Rate {
        tokens: 600,
        per: std::time::Duration::from_secs(60),
    };
    let mut c = welcomed_client();
    let beat = |c: &mut Client, now: Ms| {
        c.rate_used(KEY, rate, false, true);
        c.rate_used("localip=192.0.2.2,grouping=free", rate, false, true);
        c.handle_timeout(now);
        std::iter::from_fn(|| c.poll_transmit()).collect::<Vec<_>>()
    };
    let first = beat(&mut c, 1005);
    let names: Vec<_> = first
        .iter()
        .filter_map(|m| match m {
            ToCoord::Key { id, name } => Some((*id, name.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        [
            (0, "localip=192.0.2.1,grouping=orange"),
            (1, "localip=192.0.2.2,grouping=free")
        ]
    );
    assert!(matches!(first.last(), Some(ToCoord::Heartbeat { rates }) if rates.len() == 2));
    let second = beat(&mut c, 2005);
    assert!(
        matches!(&second[..], [ToCoord::Heartbeat { rates }] if rates.iter().map(|u| u.key).eq([0, 1])),
        "numbers only: {second:?}"
    );
    // A new connection names them again, in its hello.
    c.lost(2100, "cut");
    c.connecting(20_000);
    c.connected(20_000);
    match c.poll_transmit() {
        Some(ToCoord::Hello { keys, rates, .. }) => {
            assert_eq!(keys.len(), 2);
            assert!(rates
                .iter()
                .all(|u| keys.iter().any(|(id, _)| *id == u.key)));
        }
        other => panic!("{other:?}"),
    }
}

/// A hello of protocol 2 naming `keys`, holding nothing.
fn hello(name: &str, keys: Vec<(u32, String)>) -> ToCoord {
    ToCoord::Hello {
        version: crate::proto::VERSION,
        name: name.into(),
        known: 0,
        keys,
        held: vec![],
        rates: vec![],
    }
}

#[test]
fn a_key_number_never_named_ends_the_connection() {
    let mut c = Coordinator::new(Config::new(1000, 10_000, Division::Equal), 0);
    c.connect(0, 1);
    c.handle(0, 1, hello("a", vec![]));
    while c.poll_event().is_some() {}
    c.handle(10, 1, ToCoord::Want { key: 3, limit: 2 });
    assert!(matches!(
        c.poll_event(),
        Some(Event::Refused { conn: 1, reason }) if reason.contains("never named")
    ));
    // One number, two names.
    for name in [KEY, "localip=192.0.2.7,grouping=other"] {
        c.handle(
            20,
            1,
            ToCoord::Key {
                id: 5,
                name: name.into(),
            },
        );
    }
    assert!(matches!(
        c.poll_event(),
        Some(Event::Refused { conn: 1, reason }) if reason.contains("two names")
    ));
}

#[test]
fn the_coordinator_names_a_key_before_its_first_grant_on_each_connection() {
    let mut c = Coordinator::new(Config::new(1000, 10_000, Division::Equal), 0);
    c.connect(0, 1);
    c.handle(0, 1, hello("a", vec![(0, KEY.into())]));
    c.handle_timeout(2000);
    while c.poll_transmit().is_some() {}
    let out = |c: &mut Coordinator, msg| {
        c.handle(2000, 1, msg);
        std::iter::from_fn(|| c.poll_transmit())
            .map(|(_, m)| m)
            .collect::<Vec<_>>()
    };
    let got = out(&mut c, ToCoord::Want { key: 0, limit: 2 });
    assert!(
        matches!(&got[..], [ToInstance::Key { id, name }, ToInstance::Grant { key, slots: 1, .. }] if id == key && name == KEY),
        "{got:?}"
    );
    let got = out(&mut c, ToCoord::Want { key: 0, limit: 2 });
    assert!(
        matches!(&got[..], [ToInstance::Grant { slots: 2, .. }]),
        "{got:?}"
    );
}

#[test]
fn what_happens_between_hello_and_welcome_reaches_the_coordinator() {
    let mut c = Client::new(ClientConfig::new("mx1.example", 7));
    c.connecting(0);
    c.connected(0);
    // The fallback's share lets the scheduler open one while the welcome
    // is on its way, and ask for more.
    c.opened(KEY);
    c.want(KEY, 1, 3);
    let sent: Vec<ToCoord> = std::iter::from_fn(|| c.poll_transmit()).collect();
    assert!(
        matches!(
            &sent[..],
            [
                ToCoord::Hello { .. },
                ToCoord::Key { id: 0, .. },
                ToCoord::Opened { key: 0 },
                ToCoord::Want { key: 0, limit: 3 }
            ]
        ),
        "{sent:?}"
    );
}
