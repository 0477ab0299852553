//! The condition index: a policy's effective properties for a binding
//! without testing every condition.
//!
//! A policy's conditions are grouped by the set of fields they test (a
//! file has few such sets: `{grouping}`, `{localip, grouping}`, …); within
//! a group, a hash of the tested values, ASCII case folded, leads to the
//! clauses written with those values. Evaluating a binding costs one hash
//! and one lookup per group, then the full test of the few clauses found
//! (a hash collision finds a clause that the test then refuses).
//!
//! Clauses found in several groups are merged by file order without
//! sorting: the later clause wins property by property, so each property
//! takes its value from the highest-numbered matching clause that sets it,
//! which is what laying every match over the default in file order gives
//! ([`crate::Policy::props_by_scan`], the reference the tests compare with).
//!
//! The index is built by [`crate::Policy::parse`], by
//! [`crate::Policy::compile`], or on the first [`crate::Policy::props`]
//! (evaluation, `eval`, reads it) of a policy built by hand. A policy whose
//! conditions are changed afterwards must be compiled again; one whose
//! number of conditions changed falls back to the scan until then.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

use crate::field::{Binding, Field, FieldSet};

/// The compiled condition index of a [`crate::Policy`]; derived from its
/// `policies`, so two policies compare equal whatever their indexes.
#[derive(Clone, Default)]
pub struct PolicyIndex(OnceLock<Vec<KeyIndex>>);

impl PartialEq for PolicyIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for PolicyIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.get() {
            Some(k) => write!(f, "PolicyIndex({} policies)", k.len()),
            None => f.write_str("PolicyIndex(not built)"),
        }
    }
}

/// The index of one policy's conditions.
#[derive(Clone)]
struct KeyIndex {
    /// How many conditions it was built from.
    conditions: usize,
    groups: Vec<Group>,
}

/// The conditions that test one set of fields.
#[derive(Clone)]
struct Group {
    /// The fields, in index order.
    fields: Vec<Field>,
    /// Hash of the values → the clauses written with them, in file order.
    clauses: HashMap<u64, Vec<u32>, BuildHasherDefault<PassThrough>>,
}

/// The keys are hashes already.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// FNV-1a of the values, ASCII case folded, each ended by a byte that no
/// UTF-8 text holds.
fn hash<'a>(values: impl Iterator<Item = &'a str>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    for v in values {
        v.bytes().for_each(|b| eat(b.to_ascii_lowercase()));
        eat(0xff);
    }
    h
}

impl KeyIndex {
    fn build<'a>(conditions: impl IntoIterator<Item = &'a [(Field, String)]>) -> KeyIndex {
        let mut groups: Vec<Group> = Vec::new();
        let mut by_set: HashMap<FieldSet, usize> = HashMap::new();
        let mut count = 0;
        for (i, when) in conditions.into_iter().enumerate() {
            count += 1;
            let mut set = FieldSet::default();
            when.iter().for_each(|(f, _)| set.insert(*f));
            let g = *by_set.entry(set).or_insert_with(|| {
                groups.push(Group {
                    fields: Field::ALL
                        .into_iter()
                        .filter(|f| set.contains(*f))
                        .collect(),
                    clauses: HashMap::default(),
                });
                groups.len() - 1
            });
            let group = &mut groups[g];
            // A field tested twice keys the clause by its first value; if
            // the second differs the clause never matches, which the full
            // test of every clause found decides.
            let h = hash(group.fields.iter().map(|f| {
                when.iter()
                    .find(|(x, _)| x == f)
                    .map_or("", |(_, v)| v.as_str())
            }));
            group.clauses.entry(h).or_default().push(i as u32);
        }
        KeyIndex {
            conditions: count,
            groups,
        }
    }
}

impl PolicyIndex {
    /// Builds the index of policies, each given by its conditions' tests
    /// in file order.
    pub fn build<'a, P, C>(policies: P) -> PolicyIndex
    where
        P: IntoIterator<Item = C>,
        C: IntoIterator<Item = &'a [(Field, String)]>,
    {
        PolicyIndex(OnceLock::from(
            policies
                .into_iter()
                .map(KeyIndex::build)
                .collect::<Vec<_>>(),
        ))
    }

    /// The clauses of policy `i` written with the values `b` has for the
    /// fields they test, group by group: each must still be tested (a hash
    /// collision finds one that does not match). `None` when the index
    /// (built by `build` now if it was not) was made from other than
    /// `conditions` clauses: the caller scans them instead.
    pub fn candidates<'s>(
        &'s self,
        i: usize,
        conditions: usize,
        b: &'s Binding,
        build: impl FnOnce() -> PolicyIndex,
    ) -> Option<impl Iterator<Item = u32> + 's> {
        let index = self
            .0
            .get_or_init(|| build().0.into_inner().unwrap_or_default());
        let k = index.get(i).filter(|k| k.conditions == conditions)?;
        Some(k.groups.iter().flat_map(move |g| {
            let h = hash(g.fields.iter().map(|&f| b.get(f)));
            g.clauses.get(&h).into_iter().flatten().copied()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Condition, KeyPolicy, Policy};
    use crate::props::{Props, Rate};
    use proptest::prelude::*;
    use std::time::Duration;

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
