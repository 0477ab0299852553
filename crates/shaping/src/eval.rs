//! Evaluation: the grouping of a destination, the source pool of a
//! message, and the effective properties of each policy for a binding.

use crate::field::{Binding, Field, FieldSet};
use crate::index::PolicyIndex;
use crate::model::{KeyPolicy, Policy, Source};
use crate::props::{prop_bit, Props};

impl Policy {
    /// Fields some policy counts by or some condition, reply rule or
    /// suspension tests.
    pub fn fields_used(&self) -> FieldSet {
        let mut s = FieldSet::default();
        for p in &self.policies {
            p.fields.iter().for_each(|&f| s.insert(f));
            for c in &p.conditions {
                c.when.iter().for_each(|(f, _)| s.insert(*f));
            }
        }
        for r in &self.replies {
            r.fields.iter().for_each(|&f| s.insert(f));
            r.when.iter().for_each(|(f, _)| s.insert(*f));
        }
        for x in &self.suspensions {
            x.when.iter().for_each(|(f, _)| s.insert(*f));
        }
        s
    }

    /// The grouping of a recipient domain: by `recipientdomains` first,
    /// then by one of the MX host names (empty behind a relayhost).
    pub fn grouping_of(&self, domain: &str, mx_hosts: &[&str]) -> Option<&str> {
        self.groupings
            .iter()
            .find(|g| g.recipientdomains.iter().any(|p| p.matches(domain)))
            .or_else(|| {
                self.groupings.iter().find(|g| {
                    mx_hosts
                        .iter()
                        .any(|h| g.remotemx.iter().any(|p| p.matches(h)))
                })
            })
            .map(|g| g.id.as_str())
    }

    /// The pool a message leaves from: the first that selects itself by
    /// tenant, sender domain or grouping, else the one named `fallback`.
    pub fn pool_for(
        &self,
        tenant: &str,
        sender_domain: &str,
        grouping: &str,
        fallback: Option<&str>,
    ) -> Option<&Source> {
        self.sources
            .iter()
            .find(|s| s.selects(tenant, sender_domain, grouping))
            .or_else(|| fallback.and_then(|n| self.sources.iter().find(|s| s.id == n)))
    }

    /// The effective properties of policy `i` for `b`: its default with
    /// every matching condition laid over it in file order, each
    /// condition tested in turn. [`Policy::props`] gives the same through
    /// the condition index; this is the definition it is tested against.
    pub fn props_by_scan(&self, i: usize, b: &Binding) -> Props {
        let p = &self.policies[i];
        let mut out = p.default;
        for c in &p.conditions {
            if matches(&c.when, b) {
                out.overlay(&c.then);
            }
        }
        out
    }
}

/// Which clause, if any, last set each property ([`prop_bit`] order).
const PROPS: [u8; 5] = [
    prop_bit::CONCURRENCY,
    prop_bit::RATE,
    prop_bit::CONNECT_INTERVAL,
    prop_bit::TRANSACTIONS,
    prop_bit::IDLE_TIMEOUT,
];

fn sets(p: &Props) -> [bool; 5] {
    [
        p.concurrency.is_some(),
        p.rate.is_some(),
        p.connect_interval.is_some(),
        p.transactions.is_some(),
        p.idle_timeout.is_some(),
    ]
}

impl Policy {
    /// Builds the condition index now (parsing does it; a policy built or
    /// changed by hand may call it, else its first [`Policy::props`] does).
    pub fn compile(&mut self) {
        self.index = PolicyIndex::build(self.policies.iter().map(tests));
    }

    /// The effective properties of policy `i` for `b`: its default with
    /// every matching condition laid over it in file order, found through
    /// the index. Clauses found in several groups are merged without
    /// sorting: each property takes its value from the highest-numbered
    /// matching clause that sets it, which is what laying every match over
    /// the default in file order gives ([`Policy::props_by_scan`], the
    /// reference the tests compare with).
    pub fn props(&self, i: usize, b: &Binding) -> Props {
        let p = &self.policies[i];
        let build = || PolicyIndex::build(self.policies.iter().map(tests));
        let Some(found) = self.index.candidates(i, p.conditions.len(), b, build) else {
            return self.props_by_scan(i, b);
        };
        let mut last: [Option<u32>; 5] = [None; 5];
        for c in found {
            let cond = &p.conditions[c as usize];
            if !matches(&cond.when, b) {
                continue;
            }
            for (slot, set) in last.iter_mut().zip(sets(&cond.then)) {
                if set && slot.is_none_or(|s| s < c) {
                    *slot = Some(c);
                }
            }
        }
        let mut out = p.default;
        for (n, c) in last.iter().enumerate() {
            let Some(c) = c else { continue };
            let then = &p.conditions[*c as usize].then;
            let bit = PROPS[n];
            out.local = (out.local & !bit) | (then.local & bit);
            match n {
                0 => out.concurrency = then.concurrency,
                1 => out.rate = then.rate,
                2 => out.connect_interval = then.connect_interval,
                3 => out.transactions = then.transactions,
                _ => out.idle_timeout = then.idle_timeout,
            }
        }
        out
    }
}

/// The tests of a policy's conditions, in file order: what its index is
/// built from.
fn tests(p: &KeyPolicy) -> impl Iterator<Item = &[(Field, String)]> {
    p.conditions.iter().map(|c| c.when.as_slice())
}

/// Whether every (field, value) holds in `b`.
pub fn matches(when: &[(Field, String)], b: &Binding) -> bool {
    when.iter().all(|(f, v)| b.get(*f).eq_ignore_ascii_case(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Condition, Grouping, KeyPolicy, Pattern};
    use crate::props::Rate;
    use proptest::prelude::*;
    use std::time::Duration;

    #[test]
    fn the_seed_example_evaluates_clause_by_clause() {
        let pol = Policy {
            groupings: vec![Grouping {
                id: "orange".into(),
                remotemx: vec![Pattern("*.mx.orange.test".into())],
                recipientdomains: vec![Pattern("orange.test".into())],
            }],
            policies: vec![KeyPolicy {
                fields: vec![Field::LocalIp, Field::Grouping],
                default: Props {
                    concurrency: Some(20),
                    ..Props::default()
                },
                conditions: vec![Condition {
                    when: vec![(Field::Grouping, "orange".into())],
                    then: Props {
                        concurrency: Some(2),
                        rate: Some(Rate {
                            tokens: 10,
                            per: Duration::from_secs(1),
                        }),
                        ..Props::default()
                    },
                }],
            }],
            ..Policy::default()
        };
        assert_eq!(
            pol.grouping_of("wanadoo.test", &["in1.mx.orange.test"]),
            Some("orange")
        );
        assert_eq!(pol.grouping_of("orange.test", &[]), Some("orange"));
        assert_eq!(pol.grouping_of("other.test", &["mx.other.test"]), None);
        let mut b = Binding::default();
        b.set(Field::Grouping, "orange");
        assert_eq!(pol.props(0, &b).concurrency, Some(2));
        b.set(Field::Grouping, "");
        assert_eq!(pol.props(0, &b).concurrency, Some(20));
    }

    const VALUES: [&str; 4] = ["a", "B", "b", ""];

    fn arb_props() -> impl Strategy<Value = Props> {
        (
            proptest::option::of(1u32..4),
            proptest::option::of(1u32..4),
            proptest::option::of(0u64..3),
            proptest::option::of(1u32..4),
            proptest::option::of(0u64..3),
            any::<u8>(),
        )
            .prop_map(|(c, r, ci, t, it, local)| Props {
                concurrency: c,
                rate: r.map(|tokens| Rate {
                    tokens,
                    per: Duration::from_secs(1),
                }),
                connect_interval: ci.map(Duration::from_secs),
                transactions: t,
                idle_timeout: it.map(Duration::from_secs),
                local: local & 31,
            })
    }

    /// Conditions over three fields, some testing a field twice.
    fn arb_condition() -> impl Strategy<Value = Condition> {
        (
            proptest::collection::vec((0usize..3, 0usize..4), 0..4),
            arb_props(),
        )
            .prop_map(|(when, then)| Condition {
                when: when
                    .into_iter()
                    .map(|(f, v)| (Field::ALL[f], VALUES[v].to_string()))
                    .collect(),
                then,
            })
    }

    fn arb_binding() -> impl Strategy<Value = Binding> {
        proptest::collection::vec(0usize..4, 3).prop_map(|vals| {
            let mut b = Binding::default();
            for (f, v) in vals.into_iter().enumerate() {
                b.set(Field::ALL[f], VALUES[v]);
            }
            b
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn the_index_agrees_with_the_scan(
            default in arb_props(),
            conditions in proptest::collection::vec(arb_condition(), 0..12),
            bindings in proptest::collection::vec(arb_binding(), 1..8),
        ) {
            let mut pol = Policy {
                policies: vec![KeyPolicy {
                    fields: vec![Field::LocalIp, Field::Grouping, Field::TenantId],
                    default,
                    conditions,
                }],
                ..Policy::default()
            };
            // Lazily built on first use, then built explicitly.
            for b in &bindings {
                prop_assert_eq!(pol.props(0, b), pol.props_by_scan(0, b), "{}", b);
            }
            pol.compile();
            for b in &bindings {
                prop_assert_eq!(pol.props(0, b), pol.props_by_scan(0, b), "{}", b);
            }
        }
    }

    #[test]
    fn a_thousand_conditions_and_a_changed_policy() {
        let mut conditions = Vec::new();
        for i in 0..1000u32 {
            let mut when = vec![(Field::Grouping, format!("g{}", i % 100))];
            if i % 2 == 0 {
                when.push((Field::LocalIp, format!("127.0.0.{}", i % 7)));
            }
            conditions.push(Condition {
                when,
                then: Props {
                    concurrency: Some(i + 1),
                    transactions: (i % 3 == 0).then_some(i + 1),
                    ..Props::default()
                },
            });
        }
        let mut pol = Policy {
            policies: vec![KeyPolicy {
                fields: vec![Field::LocalIp, Field::Grouping],
                default: Props {
                    concurrency: Some(20),
                    ..Props::default()
                },
                conditions,
            }],
            ..Policy::default()
        };
        let mut b = Binding::default();
        for g in 0..120 {
            for ip in 0..8 {
                b.set(Field::Grouping, &format!("G{g}"));
                b.set(Field::LocalIp, &format!("127.0.0.{ip}"));
                assert_eq!(pol.props(0, &b), pol.props_by_scan(0, &b), "{b}");
            }
        }
        b.set(Field::Grouping, "g42");
        b.set(Field::LocalIp, "127.0.0.3");
        // Clauses 42, 142, … 942 test this grouping, all of them with an
        // address 127.0.0.(i % 7): only 542 has 127.0.0.3.
        let want = pol.props_by_scan(0, &b);
        assert_eq!(pol.props(0, &b), want);
        assert_eq!(want.concurrency, Some(543));
        // A clause added by hand is seen at once (by the scan), then by
        // the index once compiled.
        pol.policies[0].conditions.push(Condition {
            when: vec![(Field::Grouping, "G42".into())],
            then: Props {
                concurrency: Some(7),
                ..Props::default()
            },
        });
        assert_eq!(pol.props(0, &b).concurrency, Some(7));
        pol.compile();
        assert_eq!(pol.props(0, &b).concurrency, Some(7));
        assert_eq!(pol.props(0, &b), pol.props_by_scan(0, &b));
    }
}
