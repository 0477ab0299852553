//! The compiled policy file: plain data, built by the parser or by tests.

use crate::field::Field;
use crate::index::PolicyIndex;
use crate::props::Props;
use std::net::IpAddr;
use std::time::Duration;

/// `rate.algorithm`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RateAlgorithm {
    /// Tokens refill continuously; a bucket holds at most N (smooth flow).
    #[default]
    TokenBucket,
    /// At most N per aligned window (bursts at window starts).
    FixedWindow,
}

/// A host or domain name pattern: exact, or `*.suffix` for any name below
/// the suffix. Compared without regard to case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern(pub String);

impl Pattern {
    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        let name = name.strip_suffix('.').unwrap_or(name);
        match self.0.strip_prefix("*.") {
            Some(suffix) => {
                name.len() > suffix.len() + 1
                    && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
                    && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            }
            None => name.eq_ignore_ascii_case(&self.0),
        }
    }
}

/// `groupings:` — one provider's MX host names and recipient domains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grouping {
    /// Its id, the value of the `grouping` field.
    pub id: String,
    /// MX host name patterns.
    pub remotemx: Vec<Pattern>,
    /// Recipient domain patterns.
    pub recipientdomains: Vec<Pattern>,
}

/// `sources:` — a named pool of local source addresses, and the mail it is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// Its id (`smtp_source_pool` names it).
    pub id: String,
    /// The addresses, used in turn.
    pub localip: Vec<IpAddr>,
    /// Chosen for these tenants (empty: no condition on the tenant).
    pub tenantid: Vec<String>,
    /// Chosen for these sender domains (empty: no condition).
    pub senderdomain: Vec<String>,
    /// Chosen for these groupings (empty: no condition).
    pub grouping: Vec<String>,
}

impl Source {
    /// Whether it selects itself for mail with these values; a pool with
    /// no selector is only ever chosen by name.
    pub fn selects(&self, tenant: &str, sender_domain: &str, grouping: &str) -> bool {
        let any = |list: &[String], v: &str| {
            list.is_empty() || list.iter().any(|x| x.eq_ignore_ascii_case(v))
        };
        (!self.tenantid.is_empty() || !self.senderdomain.is_empty() || !self.grouping.is_empty())
            && any(&self.tenantid, tenant)
            && any(&self.senderdomain, sender_domain)
            && any(&self.grouping, grouping)
    }
}

/// A condition clause: when every field has its value, `then` applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    /// Field values that must all match.
    pub when: Vec<(Field, String)>,
    /// Properties laid over the default.
    pub then: Props,
}

/// One entry of `policies:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPolicy {
    /// The fields whose values form the key.
    pub fields: Vec<Field>,
    /// Properties of every key.
    pub default: Props,
    /// Clauses in file order; later ones override earlier ones.
    pub conditions: Vec<Condition>,
}

/// How many matching replies trigger a reply rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    /// The first one.
    Immediate,
    /// `n` within `per`.
    Count {
        /// Replies.
        n: u32,
        /// Within this time.
        per: Duration,
    },
}

/// What a reply rule does to its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyAction {
    /// No delivery at all for the duration.
    Suspend,
    /// These limits for the duration, then a ramp back.
    Backoff(Props),
}

/// `replies:` — a rule reacting to remote SMTP replies.
#[derive(Clone, Debug)]
pub struct ReplyRule {
    /// Matched against "code enhanced-code text" of the reply.
    pub pattern: regex::Regex,
    /// How many matches trigger it.
    pub threshold: Threshold,
    /// The key suspended or backed off.
    pub fields: Vec<Field>,
    /// Conditions on the connection's field values.
    pub when: Vec<(Field, String)>,
    /// What happens.
    pub action: ReplyAction,
    /// For how long.
    pub duration: Duration,
    /// After it, the limits come back by this percentage of the configured
    /// ones per `ramp_interval` (25 unless the rule says otherwise).
    pub ramp_step_percent: u32,
    /// The interval of the ramp's steps (1 minute unless the rule says otherwise).
    pub ramp_interval: Duration,
}

impl PartialEq for ReplyRule {
    fn eq(&self, o: &Self) -> bool {
        self.pattern.as_str() == o.pattern.as_str()
            && self.threshold == o.threshold
            && self.fields == o.fields
            && self.when == o.when
            && self.action == o.action
            && self.duration == o.duration
            && self.ramp_step_percent == o.ramp_step_percent
            && self.ramp_interval == o.ramp_interval
    }
}

/// `suspensions:` in the file — static, for as long as the file says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suspension {
    /// Field values of the mail that waits.
    pub when: Vec<(Field, String)>,
    /// Why, for `sluice policy show`.
    pub tag: Option<String>,
}

/// A whole policy file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policy {
    /// `rate.algorithm`.
    pub algorithm: RateAlgorithm,
    /// `groupings:`.
    pub groupings: Vec<Grouping>,
    /// `sources:`.
    pub sources: Vec<Source>,
    /// `policies:`.
    pub policies: Vec<KeyPolicy>,
    /// `replies:`.
    pub replies: Vec<ReplyRule>,
    /// `suspensions:`.
    pub suspensions: Vec<Suspension>,
    /// The condition index, derived from `policies` (see [`crate::index`]):
    /// leave it default in a policy built by hand.
    pub index: PolicyIndex,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_names_below_the_suffix_only() {
        let p = Pattern("*.mx.orange.test".into());
        assert!(p.matches("a.mx.orange.test"));
        assert!(p.matches("B.MX.Orange.Test."));
        assert!(!p.matches("mx.orange.test"));
        assert!(!p.matches("amx.orange.test"));
        let exact = Pattern("orange.test".into());
        assert!(exact.matches("ORANGE.test") && !exact.matches("x.orange.test"));
    }
}
