//! The policy file (`sluice.policy(5)`): YAML in the structure of Halon's
//! `smtpd-policy.yaml`, read into a [`Policy`].
//!
//! The YAML is read by serde-saphyr into the file's own shapes below, each
//! with `deny_unknown_fields` so that a misspelt key is an error and not a
//! silently ignored limit; the values that need checking keep their place
//! in the file ([`Spanned`]) so that every error, the YAML reader's or
//! ours, reads `FILE:LINE:COLUMN: what is wrong`. A key written with no
//! value is an error too: YAML reads Halon's `grouping: &orange` as an
//! anchor on nothing, which would otherwise make a condition match all
//! mail. What is refused besides the YAML structure is listed in
//! [`ErrorKind`]. The compiled [`Policy`] has its condition index built.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use serde::{Deserialize, Deserializer};
use serde_saphyr::{Location, MessageFormatter, Spanned};

use crate::error::{At, ErrorKind, PolicyError};
use crate::field::Field;
use crate::model::{
    Condition, Grouping, KeyPolicy, Pattern, Policy, RateAlgorithm, ReplyAction, ReplyRule, Source,
    Suspension, Threshold,
};
use crate::props::{prop_bit, Props};
use crate::syntax;

/// A key that may be absent (`None`), or present with a value or with
/// none (`Some` of a `None` value, which is an error).
type Opt<T> = Option<Spanned<Option<T>>>;

fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Opt<T>, D::Error> {
    Spanned::<Option<T>>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    rate: Option<RawRate>,
    #[serde(default)]
    groupings: Vec<Spanned<RawGrouping>>,
    #[serde(default)]
    sources: Vec<Spanned<RawSource>>,
    #[serde(default)]
    policies: Vec<Spanned<RawPolicy>>,
    #[serde(default)]
    replies: Vec<Spanned<RawReply>>,
    #[serde(default)]
    suspensions: Vec<RawSuspension>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRate {
    algorithm: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrouping {
    id: Spanned<String>,
    #[serde(default)]
    remotemx: Vec<Spanned<String>>,
    #[serde(default)]
    recipientdomains: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    id: Spanned<String>,
    #[serde(default)]
    localip: Vec<Spanned<String>>,
    #[serde(default)]
    tenantid: Vec<String>,
    #[serde(default)]
    senderdomain: Vec<String>,
    #[serde(default)]
    grouping: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    fields: Vec<Spanned<String>>,
    #[serde(default)]
    default: Option<RawProps>,
    #[serde(default)]
    conditions: Vec<RawCondition>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCondition {
    #[serde(rename = "if")]
    when: Spanned<RawWhen>,
    then: RawProps,
}

/// `if:` — one optional key per field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWhen {
    #[serde(default, deserialize_with = "present")]
    localip: Opt<String>,
    #[serde(default, deserialize_with = "present")]
    grouping: Opt<String>,
    #[serde(default, deserialize_with = "present")]
    tenantid: Opt<String>,
    #[serde(default, deserialize_with = "present")]
    jobid: Opt<String>,
    #[serde(default, deserialize_with = "present")]
    recipientdomain: Opt<String>,
    #[serde(default, deserialize_with = "present")]
    remotemx: Opt<String>,
    #[serde(default, deserialize_with = "present")]
    remoteip: Opt<String>,
    #[serde(default, deserialize_with = "present")]
    transport: Opt<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProps {
    #[serde(default, deserialize_with = "present")]
    concurrency: Opt<u32>,
    #[serde(default, deserialize_with = "present")]
    rate: Opt<String>,
    #[serde(default, deserialize_with = "present")]
    connectinterval: Opt<String>,
    #[serde(default, deserialize_with = "present")]
    transactions: Opt<u32>,
    #[serde(default, deserialize_with = "present")]
    idletimeout: Opt<String>,
    #[serde(default, deserialize_with = "present")]
    cluster: Opt<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReply {
    #[serde(rename = "match")]
    pattern: Spanned<String>,
    #[serde(default)]
    threshold: Option<Spanned<String>>,
    #[serde(default)]
    fields: Vec<Spanned<String>>,
    #[serde(default, rename = "if")]
    when: Option<Spanned<RawWhen>>,
    action: Spanned<String>,
    #[serde(default)]
    then: Option<Spanned<RawProps>>,
    #[serde(default)]
    duration: Option<Spanned<String>>,
    #[serde(default)]
    ramp: Option<Spanned<RawRamp>>,
}

/// How a reply rule's key comes back after its duration.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRamp {
    step: Spanned<String>,
    interval: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSuspension {
    #[serde(rename = "if")]
    when: Spanned<RawWhen>,
    #[serde(default)]
    tag: Option<String>,
}

impl Policy {
    /// Reads a policy file's text; `name` is the file's name for errors.
    /// An empty file (or one of comments only) is a policy with nothing
    /// in it. The result has its condition index built.
    pub fn parse(name: &str, text: &str) -> Result<Policy, PolicyError> {
        let raw: Option<RawFile> = serde_saphyr::from_str(text).map_err(|e| {
            let e = e.without_snippet();
            PolicyError {
                file: name.to_string(),
                at: e.location().and_then(at),
                kind: ErrorKind::Yaml(
                    serde_saphyr::DefaultMessageFormatter
                        .format_message(e)
                        .into_owned(),
                ),
            }
        })?;
        let mut policy = match raw {
            Some(raw) => Builder::new(name).file(raw)?,
            None => Policy::default(),
        };
        policy.compile();
        Ok(policy)
    }

    /// Reads the policy file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Policy, PolicyError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Policy::parse(&name, &text),
            Err(e) => Err(PolicyError {
                file: name,
                at: None,
                kind: ErrorKind::Read(e),
            }),
        }
    }

    /// The source pool called `id`.
    pub fn source(&self, id: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.id == id)
    }
}

/// Where a value is, if the reader knew.
fn at(l: Location) -> Option<At> {
    (l.line() > 0).then(|| At {
        line: l.line(),
        column: l.column(),
    })
}

struct Builder<'a> {
    file: &'a str,
    /// Grouping ids in lower case, with the line each is defined on.
    groupings: HashMap<String, u64>,
}

impl<'a> Builder<'a> {
    fn new(file: &'a str) -> Self {
        Builder {
            file,
            groupings: HashMap::new(),
        }
    }

    fn err(&self, l: Location, kind: ErrorKind) -> PolicyError {
        PolicyError {
            file: self.file.to_string(),
            at: at(l),
            kind,
        }
    }

    fn file(mut self, raw: RawFile) -> Result<Policy, PolicyError> {
        let algorithm = match raw.rate {
            None => RateAlgorithm::default(),
            Some(r) => match r.algorithm.value.as_str() {
                "tokenbucket" => RateAlgorithm::TokenBucket,
                "fixedwindow" => RateAlgorithm::FixedWindow,
                other => {
                    return Err(self.err(
                        r.algorithm.referenced,
                        ErrorKind::BadAlgorithm(other.to_string()),
                    ))
                }
            },
        };
        // Groupings first: conditions and sources refer to them.
        let groupings = raw
            .groupings
            .into_iter()
            .map(|g| self.grouping(g))
            .collect::<Result<Vec<_>, _>>()?;
        let mut source_ids = HashMap::new();
        let mut sources = Vec::new();
        for s in raw.sources {
            let line = s.referenced.line();
            let source = self.source(s.value)?;
            if let Some(first_line) = source_ids.insert(source.0.id.clone(), line) {
                return Err(self.err(
                    source.1,
                    ErrorKind::DuplicateId {
                        what: "source",
                        id: source.0.id,
                        first_line,
                    },
                ));
            }
            sources.push(source.0);
        }
        let policies = raw
            .policies
            .into_iter()
            .map(|p| self.policy(p))
            .collect::<Result<Vec<_>, _>>()?;
        let replies = raw
            .replies
            .into_iter()
            .map(|r| self.reply(r))
            .collect::<Result<Vec<_>, _>>()?;
        let suspensions = raw
            .suspensions
            .into_iter()
            .map(|s| {
                Ok(Suspension {
                    when: self.when(s.when, None)?,
                    tag: s.tag,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Policy {
            algorithm,
            groupings,
            sources,
            policies,
            replies,
            suspensions,
            ..Policy::default()
        })
    }

    fn id(&self, id: &Spanned<String>, what: &'static str) -> Result<String, PolicyError> {
        if id.value.trim().is_empty() {
            return Err(self.err(id.referenced, ErrorKind::EmptyId(what)));
        }
        Ok(id.value.clone())
    }

    fn patterns(&self, list: Vec<Spanned<String>>) -> Result<Vec<Pattern>, PolicyError> {
        list.into_iter()
            .map(|p| {
                if syntax::pattern_ok(&p.value) {
                    Ok(Pattern(p.value))
                } else {
                    Err(self.err(p.referenced, ErrorKind::BadPattern(p.value)))
                }
            })
            .collect()
    }

    fn grouping(&mut self, g: Spanned<RawGrouping>) -> Result<Grouping, PolicyError> {
        let raw = g.value;
        let id = self.id(&raw.id, "grouping")?;
        let line = raw.id.referenced.line();
        if let Some(&first_line) = self.groupings.get(&id.to_ascii_lowercase()) {
            return Err(self.err(
                raw.id.referenced,
                ErrorKind::DuplicateId {
                    what: "grouping",
                    id,
                    first_line,
                },
            ));
        }
        if raw.remotemx.is_empty() && raw.recipientdomains.is_empty() {
            return Err(self.err(g.referenced, ErrorKind::EmptyGrouping(id)));
        }
        let remotemx = self.patterns(raw.remotemx)?;
        let recipientdomains = self.patterns(raw.recipientdomains)?;
        self.groupings.insert(id.to_ascii_lowercase(), line);
        Ok(Grouping {
            id,
            remotemx,
            recipientdomains,
        })
    }

    /// A grouping id named in a condition or a source: defined, and
    /// written as in Halon (`&orange`) or plainly.
    fn grouping_ref(&self, v: &str, l: Location) -> Result<String, PolicyError> {
        let id = v.strip_prefix('&').unwrap_or(v);
        if !id.is_empty() && !self.groupings.contains_key(&id.to_ascii_lowercase()) {
            return Err(self.err(l, ErrorKind::UnknownGrouping(id.to_string())));
        }
        Ok(id.to_string())
    }

    fn address(&self, v: &str, l: Location) -> Result<IpAddr, PolicyError> {
        v.trim()
            .parse()
            .map_err(|_| self.err(l, ErrorKind::NotAnAddress(v.to_string())))
    }

    fn source(&self, raw: RawSource) -> Result<(Source, Location), PolicyError> {
        let id = self.id(&raw.id, "source")?;
        if raw.localip.is_empty() {
            return Err(self.err(raw.id.referenced, ErrorKind::EmptySource(id)));
        }
        let localip = raw
            .localip
            .iter()
            .map(|a| self.address(&a.value, a.referenced))
            .collect::<Result<Vec<_>, _>>()?;
        let grouping = raw
            .grouping
            .iter()
            .map(|g| self.grouping_ref(&g.value, g.referenced))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((
            Source {
                id,
                localip,
                tenantid: raw.tenantid,
                senderdomain: raw.senderdomain,
                grouping,
            },
            raw.id.referenced,
        ))
    }

    fn fields(&self, list: &[Spanned<String>], l: Location) -> Result<Vec<Field>, PolicyError> {
        if list.is_empty() {
            return Err(self.err(l, ErrorKind::NoFields));
        }
        let mut out: Vec<Field> = Vec::with_capacity(list.len());
        for f in list {
            let field = Field::from_name(&f.value)
                .ok_or_else(|| self.err(f.referenced, ErrorKind::UnknownField(f.value.clone())))?;
            if out.contains(&field) {
                return Err(self.err(f.referenced, ErrorKind::DuplicateField(field)));
            }
            out.push(field);
        }
        Ok(out)
    }

    fn policy(&self, p: Spanned<RawPolicy>) -> Result<KeyPolicy, PolicyError> {
        let raw = p.value;
        let fields = self.fields(&raw.fields, p.referenced)?;
        let default = match raw.default {
            Some(d) => self.props(d)?,
            None => Props::default(),
        };
        let conditions = raw
            .conditions
            .into_iter()
            .map(|c| {
                Ok(Condition {
                    when: self.when(c.when, Some(&fields))?,
                    then: self.props(c.then)?,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KeyPolicy {
            fields,
            default,
            conditions,
        })
    }

    /// An `if:`, its fields limited to `key` when it is a policy's.
    fn when(
        &self,
        w: Spanned<RawWhen>,
        key: Option<&[Field]>,
    ) -> Result<Vec<(Field, String)>, PolicyError> {
        let r = w.value;
        let mut out = Vec::new();
        for (field, v) in [
            (Field::LocalIp, r.localip),
            (Field::Grouping, r.grouping),
            (Field::TenantId, r.tenantid),
            (Field::JobId, r.jobid),
            (Field::RecipientDomain, r.recipientdomain),
            (Field::RemoteMx, r.remotemx),
            (Field::RemoteIp, r.remoteip),
            (Field::Transport, r.transport),
        ] {
            let Some(v) = v else { continue };
            let l = v.referenced;
            let Some(value) = v.value else {
                return Err(self.err(l, ErrorKind::NoValue(field.name())));
            };
            if let Some(key) = key {
                if !key.contains(&field) {
                    return Err(self.err(
                        l,
                        ErrorKind::FieldNotInKey {
                            field,
                            key: key.to_vec(),
                        },
                    ));
                }
            }
            // Values are kept as a binding will hold them: addresses in
            // their canonical form, groupings by id.
            let value = match field {
                Field::LocalIp | Field::RemoteIp => self.address(&value, l)?.to_string(),
                Field::Grouping => self.grouping_ref(&value, l)?,
                _ => value,
            };
            out.push((field, value));
        }
        if out.is_empty() {
            return Err(self.err(w.referenced, ErrorKind::EmptyCondition));
        }
        Ok(out)
    }

    /// The value of a key that was written, or the error for one with none.
    fn value<T>(
        &self,
        v: Spanned<Option<T>>,
        name: &'static str,
    ) -> Result<(T, Location), PolicyError> {
        match v.value {
            Some(x) => Ok((x, v.referenced)),
            None => Err(self.err(v.referenced, ErrorKind::NoValue(name))),
        }
    }

    fn count(&self, v: Opt<u32>, name: &'static str) -> Result<Option<u32>, PolicyError> {
        let Some(v) = v else { return Ok(None) };
        let (n, l) = self.value(v, name)?;
        if n == 0 {
            return Err(self.err(l, ErrorKind::Zero(name)));
        }
        Ok(Some(n))
    }

    fn duration(
        &self,
        v: Opt<String>,
        name: &'static str,
    ) -> Result<Option<std::time::Duration>, PolicyError> {
        let Some(v) = v else { return Ok(None) };
        let (text, l) = self.value(v, name)?;
        syntax::duration(&text)
            .map(Some)
            .ok_or_else(|| self.err(l, ErrorKind::BadDuration(text)))
    }

    fn props(&self, raw: RawProps) -> Result<Props, PolicyError> {
        let rate = match raw.rate {
            None => None,
            Some(v) => {
                let (text, l) = self.value(v, "rate")?;
                Some(syntax::rate(&text).ok_or_else(|| self.err(l, ErrorKind::BadRate(text)))?)
            }
        };
        let mut p = Props {
            concurrency: self.count(raw.concurrency, "concurrency")?,
            rate,
            connect_interval: self.duration(raw.connectinterval, "connectinterval")?,
            transactions: self.count(raw.transactions, "transactions")?,
            idle_timeout: self.duration(raw.idletimeout, "idletimeout")?,
            local: 0,
        };
        if let Some(v) = raw.cluster {
            let (clustered, _) = self.value(v, "cluster")?;
            if !clustered {
                // `cluster: false` is for the properties of its own clause.
                let mut bit = |b: u8, set: bool| {
                    if set {
                        p.local |= b;
                    }
                };
                bit(prop_bit::CONCURRENCY, p.concurrency.is_some());
                bit(prop_bit::RATE, p.rate.is_some());
                bit(prop_bit::CONNECT_INTERVAL, p.connect_interval.is_some());
                bit(prop_bit::TRANSACTIONS, p.transactions.is_some());
                bit(prop_bit::IDLE_TIMEOUT, p.idle_timeout.is_some());
            }
        }
        Ok(p)
    }

    fn reply(&self, r: Spanned<RawReply>) -> Result<ReplyRule, PolicyError> {
        let rule_at = r.referenced;
        let raw = r.value;
        let pattern = regex::Regex::new(&raw.pattern.value).map_err(|e| {
            // The regex crate's message draws a caret under the pattern on
            // lines of their own; its last line says what is wrong.
            let text = e.to_string();
            let reason = text.lines().last().unwrap_or_default();
            self.err(
                raw.pattern.referenced,
                ErrorKind::BadRegex {
                    pattern: raw.pattern.value.clone(),
                    error: reason.strip_prefix("error: ").unwrap_or(reason).to_string(),
                },
            )
        })?;
        let threshold = match &raw.threshold {
            None => Threshold::Immediate,
            Some(t) => syntax::threshold(&t.value)
                .ok_or_else(|| self.err(t.referenced, ErrorKind::BadThreshold(t.value.clone())))?,
        };
        let fields = self.fields(&raw.fields, rule_at)?;
        let when = match raw.when {
            Some(w) => self.when(w, None)?,
            None => Vec::new(),
        };
        let action = match (raw.action.value.as_str(), raw.then) {
            ("suspend", None) => ReplyAction::Suspend,
            ("suspend", Some(then)) => {
                return Err(self.err(then.referenced, ErrorKind::SuspendWithThen))
            }
            ("backoff", Some(then)) => {
                let l = then.referenced;
                let p = self.props(then.value)?;
                if p.is_empty() {
                    return Err(self.err(l, ErrorKind::BackoffWithoutThen));
                }
                ReplyAction::Backoff(p)
            }
            ("backoff", None) => {
                return Err(self.err(raw.action.referenced, ErrorKind::BackoffWithoutThen))
            }
            (other, _) => {
                return Err(self.err(
                    raw.action.referenced,
                    ErrorKind::BadAction(other.to_string()),
                ))
            }
        };
        let Some(d) = raw.duration else {
            return Err(self.err(rule_at, ErrorKind::NoDuration));
        };
        let duration = syntax::duration(&d.value)
            .ok_or_else(|| self.err(d.referenced, ErrorKind::BadDuration(d.value.clone())))?;
        if duration.is_zero() {
            return Err(self.err(d.referenced, ErrorKind::Zero("duration")));
        }
        let (ramp_step_percent, ramp_interval) = match raw.ramp {
            None => (25, std::time::Duration::from_secs(60)),
            Some(r) => {
                let s = &r.value.step;
                let step = s
                    .value
                    .trim()
                    .strip_suffix('%')
                    .and_then(|n| n.trim().parse::<u32>().ok())
                    .filter(|n| (1..=100).contains(n))
                    .ok_or_else(|| {
                        self.err(s.referenced, ErrorKind::BadRampStep(s.value.clone()))
                    })?;
                let i = &r.value.interval;
                let every = syntax::duration(&i.value)
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| {
                        self.err(i.referenced, ErrorKind::BadDuration(i.value.clone()))
                    })?;
                (step, every)
            }
        };
        Ok(ReplyRule {
            pattern,
            threshold,
            fields,
            when,
            action,
            duration,
            ramp_step_percent,
            ramp_interval,
        })
    }
}
