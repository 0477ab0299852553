//! Evaluation: the grouping of a destination, the source pool of a
//! message, and the effective properties of each policy for a binding.

use crate::field::{Binding, Field, FieldSet};
use crate::model::{Policy, Source};
use crate::props::Props;

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

/// Whether every (field, value) holds in `b`.
pub fn matches(when: &[(Field, String)], b: &Binding) -> bool {
    when.iter().all(|(f, v)| b.get(*f).eq_ignore_ascii_case(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Condition, Grouping, KeyPolicy, Pattern};
    use crate::props::Rate;
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
}
