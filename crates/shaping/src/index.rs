//! The condition index: the few conditions of a policy that a binding can
//! match, found without testing every condition.
//!
//! A policy's conditions are grouped by the set of fields they test (a
//! file has few such sets: `{grouping}`, `{localip, grouping}`, …); within
//! a group, a hash of the tested values, ASCII case folded, leads to the
//! clauses written with those values. Finding them costs one hash and one
//! lookup per group; the caller then tests each clause found in full (a
//! hash collision finds one that the test refuses) and merges their
//! properties ([`crate::Policy::props`], in `eval`).
//!
//! The index is built by [`crate::Policy::parse`], by
//! [`crate::Policy::compile`], or on the first [`crate::Policy::props`] of
//! a policy built by hand. A policy whose conditions are changed afterwards
//! must be compiled again; one whose number of conditions changed falls
//! back to the scan until then.

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
    pub(crate) fn candidates<'s>(
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
