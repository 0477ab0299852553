//! Key numbers retired when unused: both sides' tables hold the keys in
//! use, and a key used again after it was forgotten works at once.

use std::time::Duration;

use crate::client::{Client, ClientConfig, ClientEvent};
use crate::coordinator::{Config, Coordinator, Event};
use crate::proto::{ToCoord, ToInstance};
use crate::rates::Division;
use crate::Ms;

/// One instance and clusterd on a bus without latency.
struct Pair {
    now: Ms,
    coord: Coordinator,
    client: Client,
    breaches: Vec<String>,
    sent: Vec<ToCoord>,
    got: Vec<ToInstance>,
}

const FORGET_MS: Ms = 10_000;

fn rate() -> shaping::Rate {
    shaping::Rate {
        tokens: 600,
        per: Duration::from_secs(60),
    }
}

impl Pair {
    fn new() -> Pair {
        let cfg = Config {
            sweep_ms: 1_000,
            ..Config::new(1000, 10_000, Division::Equal)
        };
        let mut coord = Coordinator::new(cfg, 0);
        let mut client = Client::new(ClientConfig {
            forget_after_ms: FORGET_MS,
            ..ClientConfig::new("mx1.example", 3)
        });
        coord.connect(0, 1);
        client.connecting(0);
        client.connected(0);
        let mut p = Pair {
            now: 0,
            coord,
            client,
            breaches: Vec::new(),
            sent: Vec::new(),
            got: Vec::new(),
        };
        p.pump();
        p.advance(3_000);
        assert!(p.client.linked());
        p
    }

    fn pump(&mut self) {
        let now = self.now;
        loop {
            let mut moved = false;
            while let Some(m) = self.client.poll_transmit() {
                self.sent.push(m.clone());
                self.coord.handle(now, 1, m);
                moved = true;
            }
            while let Some((_, m)) = self.coord.poll_transmit() {
                self.got.push(m.clone());
                self.client.handle(now, m);
                moved = true;
            }
            if !moved {
                break;
            }
        }
        while let Some(ev) = self.coord.poll_event() {
            if let Event::Refused { reason, .. } = ev {
                self.breaches.push(format!("clusterd: {reason}"));
            }
        }
        while let Some(ev) = self.client.poll_event() {
            if let ClientEvent::Degraded { reason, .. } = ev {
                self.breaches.push(format!("instance: {reason}"));
            }
        }
    }

    /// Runs both sides' timers in 100 ms steps until `to`.
    fn advance(&mut self, to: Ms) {
        while self.now < to {
            self.now += 100;
            if self.coord.poll_timeout().is_some_and(|t| t <= self.now) {
                self.coord.handle_timeout(self.now);
            }
            if self.client.poll_timeout().is_some_and(|t| t <= self.now) {
                self.client.handle_timeout(self.now);
            }
            self.pump();
        }
    }

    fn use_rate(&mut self, key: &str) {
        self.client.rate_used(key, rate(), false, true);
    }
}

#[test]
fn keys_unused_for_a_while_are_forgotten_on_both_sides() {
    let mut p = Pair::new();
    for d in 0..100 {
        p.use_rate(&format!("domain=d{d}.example"));
    }
    p.advance(5_000);
    assert_eq!(p.client.numbered(), 100);
    assert_eq!(p.coord.key_names(), 100);
    assert_eq!(p.coord.keys().len(), 100, "rates divided");
    p.advance(30_000);
    assert_eq!(p.client.numbered(), 0, "the instance retired its numbers");
    assert_eq!(p.coord.key_names(), 0, "clusterd forgot the names");
    assert!(p.coord.keys().is_empty(), "and their state");
    assert_eq!(
        p.sent
            .iter()
            .filter(|m| matches!(m, ToCoord::Forget { .. }))
            .count(),
        100
    );
    assert_eq!(
        p.got
            .iter()
            .filter(|m| matches!(m, ToInstance::Forget { .. }))
            .count(),
        100
    );
    assert!(p.client.status().rates.is_empty());
    assert!(p.breaches.is_empty(), "{:?}", p.breaches);
}

#[test]
fn a_forgotten_number_is_reused_and_a_key_used_again_is_divided_at_once() {
    let mut p = Pair::new();
    let key = "domain=again.example";
    p.use_rate(key);
    p.advance(5_000);
    let first = p.sent.iter().find_map(|m| match m {
        ToCoord::Key { id, name } if name == key => Some(*id),
        _ => None,
    });
    p.advance(30_000);
    assert_eq!(p.coord.key_names(), 0);
    p.sent.clear();
    // Used again, the key takes the retired number; refused once for want
    // of a part, it is divided by the answer, not at the next refresh.
    p.client.rate_used(key, rate(), false, false);
    p.pump();
    let renamed: Vec<(u32, String)> = p
        .sent
        .iter()
        .filter_map(|m| match m {
            ToCoord::Key { id, name } => Some((*id, name.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(renamed.len(), 1, "{renamed:?}");
    assert_eq!(Some(renamed[0].0), first, "the retired number is reused");
    assert_eq!(renamed[0].1, key);
    let part = p.client.rate_of(key, rate(), false);
    assert_eq!(
        part.tokens, 600,
        "the only instance gets the whole rate at once"
    );
    assert!(p.breaches.is_empty(), "{:?}", p.breaches);
}

#[test]
fn a_key_with_a_connection_open_is_never_forgotten() {
    let mut p = Pair::new();
    let key = "localip=192.0.2.1,grouping=orange";
    p.client.want(key, 0, 2);
    p.pump();
    assert_eq!(p.client.concurrency_of(key, 2), 1);
    p.client.opened(key);
    p.advance(3_600_000);
    assert_eq!(p.client.numbered(), 1);
    assert_eq!(p.coord.key_names(), 1);
    let held = p.coord.keys();
    assert_eq!(held[0].slots, vec![("mx1.example".to_string(), 1)]);
    // The hour-old number still works: the release frees the slot.
    p.client.closed(key);
    p.pump();
    assert!(p.coord.keys().iter().all(|k| k.slots.is_empty()));
    p.advance(3_600_000 + 30_000);
    assert_eq!(p.coord.key_names(), 0);
    assert!(p.breaches.is_empty(), "{:?}", p.breaches);
}

#[test]
fn a_stream_of_new_keys_keeps_the_tables_bounded() {
    let mut p = Pair::new();
    let mut most = (0, 0);
    // A thousand new recipient domains a second for two minutes: the
    // tables hold what the last ten seconds used, not all 120,000.
    for s in 0..120u32 {
        for d in 0..1000 {
            p.use_rate(&format!("domain=s{s}-d{d}.example"));
        }
        p.advance(p.now + 1_000);
        most = (
            most.0.max(p.client.numbered()),
            most.1.max(p.coord.key_names()),
        );
    }
    assert!(most.0 <= 13_000, "instance held {} numbers", most.0);
    assert!(most.1 <= 13_000, "clusterd held {} names", most.1);
    p.advance(p.now + 30_000);
    assert_eq!((p.client.numbered(), p.coord.key_names()), (0, 0));
    assert!(p.breaches.is_empty(), "{:?}", p.breaches);
}

#[test]
fn forgetting_a_number_never_named_is_a_breach() {
    let mut c = Coordinator::new(Config::new(1000, 10_000, Division::Equal), 0);
    c.connect(0, 1);
    c.handle(
        0,
        1,
        ToCoord::Hello {
            version: crate::proto::VERSION,
            name: "a".into(),
            known: 0,
            keys: vec![],
            held: vec![],
            rates: vec![],
        },
    );
    while c.poll_event().is_some() {}
    c.handle(10, 1, ToCoord::Forget { id: 9 });
    assert!(matches!(
        c.poll_event(),
        Some(Event::Refused { conn: 1, reason }) if reason.contains("never named")
    ));
}

#[test]
fn an_instance_that_left_keeps_only_the_keys_it_holds_slots_of() {
    let mut c = Coordinator::new(
        Config {
            sweep_ms: 1_000,
            ..Config::new(1000, 600_000, Division::Equal)
        },
        0,
    );
    c.connect(0, 1);
    let keys = vec![
        (0, "domain=rate.example".to_string()),
        (1, "localip=192.0.2.1,grouping=held".to_string()),
    ];
    c.handle(
        0,
        1,
        ToCoord::Hello {
            version: crate::proto::VERSION,
            name: "gone.example".into(),
            known: 0,
            keys,
            held: vec![crate::proto::Held {
                key: 1,
                limit: 2,
                conns: 1,
                wants: false,
            }],
            rates: vec![],
        },
    );
    c.handle_timeout(3_000);
    assert_eq!(c.key_names(), 2);
    // It goes away for good (its lease is long): the key it only named
    // is forgotten at the next sweep, the one it holds a slot of is not.
    c.disconnect(3_000, 1);
    c.handle_timeout(5_000);
    assert_eq!(c.key_names(), 1);
    assert_eq!(c.keys()[0].key, "localip=192.0.2.1,grouping=held");
}
