//! Policy benchmark: a shaping policy with many conditions and many keys,
//! for timing evaluation and the per-transaction checks.
//!
//! `policy(conditions)` splits its conditions between a tenant policy
//! (a rate per named tenant) and a (localip, grouping) policy (concurrency
//! and rate per named grouping), with rates high enough never to refuse,
//! so that only the work is timed; `bindings(keys)` gives that many
//! tenants over 4 source addresses and 500 groupings. The caller times
//! (the library reads no clock). Panics: never.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use sched::{SchedConfig, Scheduler, TransportConfig};
use shaping::{
    Binding, Condition, Field, Grouping, KeyPolicy, Pattern, Policy, Props, Rate, Source,
};

const GROUPINGS: u32 = 500;

fn huge_rate() -> Option<Rate> {
    Some(Rate {
        tokens: 1_000_000_000,
        per: Duration::from_secs(1),
    })
}

/// A policy with `conditions` conditions.
pub fn policy(conditions: u32) -> Policy {
    let half = conditions / 2;
    let tenants = (0..half)
        .map(|i| Condition {
            when: vec![(Field::TenantId, format!("t{i}"))],
            then: Props {
                rate: huge_rate(),
                ..Props::default()
            },
        })
        .collect();
    let groupings = (0..conditions - half)
        .map(|i| Condition {
            when: vec![(Field::Grouping, format!("g{}", i % GROUPINGS))],
            then: Props {
                concurrency: Some(1000 + i),
                rate: huge_rate(),
                ..Props::default()
            },
        })
        .collect();
    Policy {
        groupings: (0..GROUPINGS)
            .map(|g| Grouping {
                id: format!("g{g}"),
                remotemx: vec![Pattern(format!("*.g{g}.example"))],
                recipientdomains: vec![Pattern(format!("d{g}.example"))],
            })
            .collect(),
        sources: vec![Source {
            id: "pool".into(),
            localip: (2..6).map(|i| IpAddr::from([127, 0, 0, i])).collect(),
            tenantid: vec![],
            senderdomain: vec![],
            grouping: vec![],
        }],
        policies: vec![
            KeyPolicy {
                fields: vec![Field::TenantId],
                default: Props {
                    rate: huge_rate(),
                    ..Props::default()
                },
                conditions: tenants,
            },
            KeyPolicy {
                fields: vec![Field::LocalIp, Field::Grouping],
                default: Props {
                    concurrency: Some(1_000_000),
                    ..Props::default()
                },
                conditions: groupings,
            },
        ],
        ..Policy::default()
    }
}

/// `keys` bindings: one tenant each, over 4 sources and 500 groupings.
pub fn bindings(keys: u32) -> Vec<Binding> {
    (0..keys)
        .map(|i| {
            let mut b = Binding::default();
            b.set(Field::TenantId, &format!("t{i}"));
            b.set(Field::Grouping, &format!("g{}", i % GROUPINGS));
            b.set(Field::LocalIp, &format!("127.0.0.{}", 2 + i % 4));
            b
        })
        .collect()
}

/// The benchmark scheduler of [`crate::bench::scheduler`] with `policy`
/// loaded and its source pool used.
pub fn scheduler(recipients: u32, policy: Policy) -> Scheduler {
    let mut t = TransportConfig::new("smtp");
    t.process_limit = 1000;
    t.recipient_limit = recipients;
    t.source_pool = Some("pool".into());
    let cfg = SchedConfig {
        transports: vec![t],
        qmgr_message_active_limit: recipients,
        qmgr_message_recipient_limit: recipients,
        shaping: Some(Arc::new(policy)),
        ..SchedConfig::default()
    };
    Scheduler::new(cfg).expect("bench config is valid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use shaping::Shaper;

    #[test]
    fn every_binding_gets_its_two_keys_and_sends() {
        let mut s = Shaper::new(Arc::new(policy(1_000)));
        let ids: Vec<_> = bindings(2_000).iter().map(|b| s.bind(b)).collect();
        for (n, id) in ids.iter().enumerate() {
            assert_eq!(s.may_send(n as u64, *id), Ok(()));
        }
        // 2,000 tenant keys, and 500 (localip, grouping) keys: i % 4 and
        // i % 500 pair up 500 ways.
        assert_eq!(s.key_count(), 2_000 + 500);
        let mut sched = scheduler(2_000, policy(1_000));
        let pending = crate::bench::load(&mut sched, &crate::bench::inputs(100), 2_000);
        crate::bench::drain(&mut sched, pending);
        assert_eq!(
            sched.entries_in_memory(),
            0,
            "all delivered under the policy"
        );
    }
}
