//! The policy file parser's tests: the issue's examples read to the model
//! they mean, and every refusal with its place in the file.

use std::net::IpAddr;
use std::time::Duration;

use crate::field::{Binding, Field};
use crate::model::{
    Condition, Grouping, KeyPolicy, Pattern, Policy, RateAlgorithm, ReplyAction, ReplyRule, Source,
    Suspension, Threshold,
};
use crate::props::{prop_bit, Props, Rate};

/// Issue 14's example, as written there ("This file must be accepted as
/// written").
const SEED: &str = "\
rate:
  algorithm: tokenbucket
groupings:
  - id: orange
    remotemx: [\"*.mx.orange.test\"]
    recipientdomains: [\"orange.test\", \"*.orange.test\"]
  - id: yahoo
    remotemx: [\"*.yahoodns.test\"]
sources:
  - id: pool1
    localip: [127.0.0.2, 127.0.0.3]
policies:
  - fields: [jobid]
  - fields: [localip]
  - fields: [tenantid]
  - fields: [tenantid, grouping]
  - fields: [localip, grouping]
    default:
      concurrency: 20
    conditions:
      - if: { grouping: orange }
        then: { concurrency: 2, rate: 10/1 }
      - if: { localip: 127.0.0.2, grouping: yahoo }
        then: { concurrency: 5, cluster: false }
";

/// Issue 14's `replies:` example, as written there, below groupings it
/// refers to.
const REPLIES: &str = r"
groupings:
  - id: yahoo
    remotemx: ['*.yahoodns.test']
replies:
  - match: '\[TS04\]'          # regular expression on the reply code and text
    threshold: immediate        # or N/seconds, e.g. 5/60
    fields: [localip, grouping] # the key that is suspended or backed off
    if: { grouping: yahoo }     # optional conditions
    action: suspend             # or backoff, with then: { concurrency: 1, rate: 1/10 }
    duration: 2h
";

fn key(fields: &[Field]) -> KeyPolicy {
    KeyPolicy {
        fields: fields.to_vec(),
        default: Props::default(),
        conditions: Vec::new(),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pats(list: &[&str]) -> Vec<Pattern> {
    list.iter().map(|p| Pattern(p.to_string())).collect()
}

#[test]
fn the_issue_example_reads_as_written() {
    let got = Policy::parse("policy.yaml", SEED).unwrap();
    let want = Policy {
        algorithm: RateAlgorithm::TokenBucket,
        groupings: vec![
            Grouping {
                id: "orange".into(),
                remotemx: pats(&["*.mx.orange.test"]),
                recipientdomains: pats(&["orange.test", "*.orange.test"]),
            },
            Grouping {
                id: "yahoo".into(),
                remotemx: pats(&["*.yahoodns.test"]),
                recipientdomains: vec![],
            },
        ],
        sources: vec![Source {
            id: "pool1".into(),
            localip: vec![ip("127.0.0.2"), ip("127.0.0.3")],
            tenantid: vec![],
            senderdomain: vec![],
            grouping: vec![],
        }],
        policies: vec![
            key(&[Field::JobId]),
            key(&[Field::LocalIp]),
            key(&[Field::TenantId]),
            key(&[Field::TenantId, Field::Grouping]),
            KeyPolicy {
                fields: vec![Field::LocalIp, Field::Grouping],
                default: Props {
                    concurrency: Some(20),
                    ..Props::default()
                },
                conditions: vec![
                    Condition {
                        when: vec![(Field::Grouping, "orange".into())],
                        then: Props {
                            concurrency: Some(2),
                            rate: Some(Rate {
                                tokens: 10,
                                per: Duration::from_secs(1),
                            }),
                            ..Props::default()
                        },
                    },
                    Condition {
                        when: vec![
                            (Field::LocalIp, "127.0.0.2".into()),
                            (Field::Grouping, "yahoo".into()),
                        ],
                        then: Props {
                            concurrency: Some(5),
                            local: prop_bit::CONCURRENCY,
                            ..Props::default()
                        },
                    },
                ],
            },
        ],
        replies: vec![],
        suspensions: vec![],
        ..Policy::default()
    };
    assert_eq!(got, want);

    // What it means for a connection from 127.0.0.2 to yahoo's MX hosts.
    let mut b = Binding::default();
    b.set(Field::LocalIp, "127.0.0.2");
    b.set(
        Field::Grouping,
        got.grouping_of("example.test", &["mta5.am0.yahoodns.test"])
            .unwrap(),
    );
    let p = got.props(4, &b);
    assert_eq!(p.concurrency, Some(5));
    assert_eq!(p.local, prop_bit::CONCURRENCY, "cluster: false");
    b.set(Field::LocalIp, "127.0.0.3");
    assert_eq!(got.props(4, &b).concurrency, Some(20));
    assert_eq!(got.source("pool1").unwrap().localip.len(), 2);
    assert!(got.source("pool2").is_none());
}

#[test]
fn the_issue_replies_example_reads_as_written() {
    let got = Policy::parse("policy.yaml", REPLIES).unwrap();
    let want = ReplyRule {
        pattern: regex::Regex::new(r"\[TS04\]").unwrap(),
        threshold: Threshold::Immediate,
        fields: vec![Field::LocalIp, Field::Grouping],
        when: vec![(Field::Grouping, "yahoo".into())],
        action: ReplyAction::Suspend,
        duration: Duration::from_secs(7200),
        ramp_step_percent: 25,
        ramp_interval: Duration::from_secs(60),
    };
    assert_eq!(got.replies, vec![want]);
    assert!(got.replies[0]
        .pattern
        .is_match("421 4.7.0 [TS04] Messages from 127.0.0.2 temporarily deferred"));
    assert!(!got.replies[0].pattern.is_match("421 4.7.0 TS04 busy"));
}

#[test]
fn backoff_rules_thresholds_suspensions_and_time_values() {
    let text = "
rate: { algorithm: fixedwindow }
groupings:
  - id: big
    recipientdomains: [big.test]
sources:
  - id: bulk
    localip: ['2001:DB8::0:7', 192.0.2.7]
    tenantid: [acme]
    grouping: ['&big']
policies:
  - fields: [tenantid]
    default: { rate: 100/1m, connectinterval: 500ms, transactions: 50, idletimeout: 10m }
  - fields: [localip, remoteip]
    conditions:
      - if: { remoteip: '2001:db8:0::1', localip: 192.0.2.7 }
        then: { idletimeout: 5, cluster: false, concurrency: 3 }
replies:
  - match: '^4.. .*try later'
    threshold: 5/60
    fields: [localip, grouping]
    action: backoff
    then: { concurrency: 1, rate: 1/10 }
    duration: 30m
    ramp: { step: 10%, interval: 5m }
suspensions:
  - if: { grouping: big, localip: 192.0.2.7 }
    tag: complaint 1234
  - if: { tenantid: spammer }
";
    let p = Policy::parse("p.yaml", text).unwrap();
    assert_eq!(p.algorithm, RateAlgorithm::FixedWindow);
    assert_eq!(
        p.sources[0].localip,
        vec![ip("2001:db8::7"), ip("192.0.2.7")]
    );
    assert_eq!(
        p.sources[0].grouping,
        vec!["big".to_string()],
        "Halon's &big"
    );
    assert!(p.sources[0].selects("ACME", "", "big"));
    assert_eq!(
        p.policies[0].default,
        Props {
            concurrency: None,
            rate: Some(Rate {
                tokens: 100,
                per: Duration::from_secs(60)
            }),
            connect_interval: Some(Duration::from_millis(500)),
            transactions: Some(50),
            idle_timeout: Some(Duration::from_secs(600)),
            local: 0,
        }
    );
    let c = &p.policies[1].conditions[0];
    assert_eq!(
        c.when,
        vec![
            (Field::LocalIp, "192.0.2.7".to_string()),
            (Field::RemoteIp, "2001:db8::1".to_string()),
        ],
        "addresses in the form a binding holds"
    );
    assert_eq!(c.then.local, prop_bit::CONCURRENCY | prop_bit::IDLE_TIMEOUT);
    assert_eq!(c.then.idle_timeout, Some(Duration::from_secs(5)));
    let r = &p.replies[0];
    assert_eq!(
        r.threshold,
        Threshold::Count {
            n: 5,
            per: Duration::from_secs(60)
        }
    );
    assert_eq!(
        r.action,
        ReplyAction::Backoff(Props {
            concurrency: Some(1),
            rate: Some(Rate {
                tokens: 1,
                per: Duration::from_secs(10)
            }),
            ..Props::default()
        })
    );
    assert_eq!(r.duration, Duration::from_secs(1800));
    assert_eq!(
        (r.ramp_step_percent, r.ramp_interval),
        (10, Duration::from_secs(300))
    );
    assert!(r.when.is_empty());
    assert_eq!(
        p.suspensions,
        vec![
            Suspension {
                when: vec![
                    (Field::LocalIp, "192.0.2.7".into()),
                    (Field::Grouping, "big".into())
                ],
                tag: Some("complaint 1234".into()),
            },
            Suspension {
                when: vec![(Field::TenantId, "spammer".into())],
                tag: None,
            },
        ]
    );
}

#[test]
fn an_empty_file_is_an_empty_policy() {
    for text in ["", "\n", "# nothing yet\n", "---\n"] {
        assert_eq!(
            Policy::parse("p.yaml", text).unwrap(),
            Policy::default(),
            "{text:?}"
        );
    }
}

/// Files refused, with where and why: (text, "line:column", words of the
/// message).
const REFUSED: &[(&str, &str, &str)] = &[
    ("ratee:\n  algorithm: tokenbucket\n", "1:1", "unknown field `ratee`"),
    ("rate:\n  algorithm: leakybucket\n", "2:14", "unknown rate algorithm `leakybucket`"),
    ("policies:\n  - fields: [jobid]\n    default: {concurrency: 2, speed: 3}\n", "3:31", "unknown field `speed`"),
    ("policies:\n  - fields: [jobid, colour]\n", "2:21", "unknown field `colour` (fields: localip, grouping,"),
    ("policies:\n  - fields: [jobid, jobid]\n", "2:21", "field `jobid` listed twice"),
    ("policies:\n  - default: {concurrency: 2}\n", "2:5", "`fields:` is missing or empty"),
    ("policies:\n  - fields: [localip]\n    default:\n      concurrency: 0\n", "4:20", "`concurrency` must be above 0"),
    ("policies:\n  - fields: [localip]\n    default:\n      concurrency:\n", "4:18", "`concurrency` has no value"),
    ("policies:\n  - fields: [localip]\n    default: {transactions: 0}\n", "3:29", "`transactions` must be above 0"),
    ("policies:\n  - fields: [localip]\n    default: {rate: 0/1}\n", "3:21", "bad rate `0/1`"),
    ("policies:\n  - fields: [localip]\n    default: {rate: 10/0}\n", "3:21", "bad rate `10/0`"),
    ("policies:\n  - fields: [localip]\n    default: {rate: 10}\n", "3:21", "bad rate `10`"),
    ("policies:\n  - fields: [localip]\n    default: {idletimeout: 2 hours}\n", "3:28", "bad time value `2 hours`"),
    ("policies:\n  - fields: [localip]\n    default: {concurrency: -1}\n", "3:28", "invalid u32"),
    ("policies:\n  - fields: [localip, grouping]\n    conditions:\n      - if: { grouping: sfr }\n        then: { concurrency: 2 }\n", "4:25", "grouping `sfr` is not defined in `groupings:`"),
    ("policies:\n  - fields: [localip, grouping]\n    conditions:\n      - if: { grouping: &orange }\n        then: { concurrency: 2 }\n", "4:32", "an unquoted `&orange` is a YAML anchor"),
    ("policies:\n  - fields: [localip, grouping]\n    conditions:\n      - if: { localip: 127.0.0.300 }\n        then: { concurrency: 2 }\n", "4:24", "`127.0.0.300` is not an IP address"),
    ("policies:\n  - fields: [grouping]\n    conditions:\n      - if: { tenantid: acme }\n        then: { concurrency: 2 }\n", "4:25", "condition on `tenantid`, which is not one of this policy's fields [grouping]"),
    ("policies:\n  - fields: [grouping]\n    conditions:\n      - if: { colour: red }\n        then: { concurrency: 2 }\n", "4:15", "unknown field `colour`"),
    ("policies:\n  - fields: [grouping]\n    conditions:\n      - if: {}\n        then: { concurrency: 2 }\n", "4:13", "`if:` names no field"),
    ("policies:\n  - fields: [grouping]\n    conditions:\n      - if: { grouping: \"\" }\n", "4:9", "missing field `then`"),
    ("groupings:\n  - id: orange\n    remotemx: [\"*.mx.orange.test\"]\n  - id: Orange\n    remotemx: [\"mx.orange.test\"]\n", "4:9", "grouping `Orange` already defined at line 2"),
    ("groupings:\n  - id: orange\n", "2:5", "grouping `orange` has neither `remotemx` nor `recipientdomains`"),
    ("groupings:\n  - id: orange\n    remotemx: [\"mx.*.orange.test\"]\n", "3:16", "`mx.*.orange.test` is not a host or domain name pattern"),
    ("groupings:\n  - id: ''\n    remotemx: [a.test]\n", "2:9", "grouping with an empty `id`"),
    ("groupings:\n  - remotemx: [\"mx.orange.test\"]\n", "2:5", "missing field `id`"),
    ("sources:\n  - id: pool1\n    localip: [127.0.0.2, 127.0.0.x]\n", "3:26", "`127.0.0.x` is not an IP address"),
    ("sources:\n  - id: pool1\n    localip: [127.0.0.2]\n  - id: pool1\n    localip: [127.0.0.3]\n", "4:9", "source `pool1` already defined at line 2"),
    ("sources:\n  - id: pool1\n", "2:9", "source `pool1` has no `localip`"),
    ("sources:\n  - id: pool1\n    localip: [127.0.0.2]\n    grouping: [yahoo]\n", "4:16", "grouping `yahoo` is not defined"),
    ("sources:\n  - id: pool1\n    localip: [127.0.0.2]\n    tenant: [a]\n", "4:5", "unknown field `tenant`"),
    ("replies:\n  - match: '[TS04'\n    fields: [localip]\n    action: suspend\n    duration: 2h\n", "2:12", "bad regular expression `[TS04`: unclosed character class"),
    ("replies:\n  - match: x\n    threshold: often\n    fields: [localip]\n    action: suspend\n    duration: 2h\n", "3:16", "bad threshold `often`"),
    ("replies:\n  - match: x\n    fields: [localip]\n    action: suspend\n    duration: 2h\n    ramp: { step: 150%, interval: 1m }\n", "6:19", "bad ramp step `150%`"),
    ("replies:\n  - match: x\n    fields: [localip]\n    action: suspend\n    duration: 2h\n    ramp: { step: 25%, interval: soon }\n", "6:34", "bad time value `soon`"),
    ("replies:\n  - match: x\n    fields: [localip]\n    action: suspend\n", "2:5", "`duration:` is missing"),
    ("replies:\n  - match: x\n    fields: [localip]\n    action: backoff\n    duration: 2h\n", "4:13", "`action: backoff` needs `then:`"),
    ("replies:\n  - match: x\n    fields: [localip]\n    action: backoff\n    then: {}\n    duration: 2h\n", "5:11", "`action: backoff` needs `then:`"),
    ("replies:\n  - match: x\n    fields: [localip]\n    action: suspend\n    then: {concurrency: 1}\n    duration: 2h\n", "5:11", "`action: suspend` takes no `then:`"),
    ("replies:\n  - match: x\n    fields: [localip]\n    action: pause\n    duration: 2h\n", "4:13", "unknown action `pause`"),
    ("replies:\n  - match: x\n    action: suspend\n    duration: 2h\n", "2:5", "`fields:` is missing or empty"),
    ("replies:\n  - match: x\n    fields: [localip]\n    action: suspend\n    duration: 0s\n", "5:15", "`duration` must be above 0"),
    ("replies:\n  - match: x\n    fields: [localip]\n    if: { grouping: none }\n    action: suspend\n    duration: 1h\n", "4:21", "grouping `none` is not defined"),
    ("suspensions:\n  - tag: x\n", "2:5", "missing field `if`"),
    ("suspensions:\n  - if: { remoteip: nope }\n", "2:21", "`nope` is not an IP address"),
    ("policies:\n  - fields: [jobid]\n  default: {}\n", "3:3", "did not find expected '-' indicator"),
    ("policies: [\n", "1:11", "unclosed bracket"),
    ("policies:\n  - fields: [jobid]\npolicies: []\n", "3:1", "duplicate mapping key"),
    ("- 1\n", "1:1", "expected mapping"),
];

#[test]
fn refused_files_say_where_and_why() {
    for (text, at, words) in REFUSED {
        let e = Policy::parse("/etc/sluice/policy.yaml", text)
            .err()
            .unwrap_or_else(|| panic!("accepted: {text:?}"));
        let shown = e.to_string();
        let want = format!("/etc/sluice/policy.yaml:{at}: ");
        assert!(
            shown.starts_with(&want) && shown.contains(words),
            "{text:?}\n got: {shown}\nwant: {want}…{words}…"
        );
        assert!(!shown.contains('\n'), "one line: {shown}");
    }
}

#[test]
fn control_characters_from_the_file_are_shown_escaped() {
    let e = Policy::parse("p.yaml", "policies:\n  - fields: [\"job\\e[2Jid\"]\n").unwrap_err();
    let shown = e.to_string();
    assert!(!shown.contains('\x1b'), "{shown}");
    assert!(shown.contains("unknown field `job\\u{1b}[2Jid`"), "{shown}");
}

#[test]
fn a_file_that_cannot_be_read_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    let e = Policy::load(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}: No such file or directory (os error 2)", path.display())
    );
    std::fs::write(&path, "rate:\n  algorithm: fixedwindow\n").unwrap();
    assert_eq!(
        Policy::load(&path).unwrap().algorithm,
        RateAlgorithm::FixedWindow
    );
    std::fs::write(&path, b"rate: \xff\n").unwrap();
    let e = Policy::load(&path).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}: ", path.display())), "{e}");
}

/// The file the package installs as /etc/sluice/policy.yaml.
const SHIPPED: &str = include_str!("../../../etc/policy.yaml");

#[test]
fn the_shipped_file_limits_nothing_and_its_example_reads_when_uncommented() {
    let p = Policy::parse("etc/policy.yaml", SHIPPED).unwrap();
    assert_eq!(p, Policy::default(), "only the default rate algorithm");

    // The example between the marks, with one "# " taken off each line as
    // its comment says, is the issue's example plus a static suspension.
    let mut inside = false;
    let mut text = String::new();
    for line in SHIPPED.lines() {
        if line.starts_with("# --- The example") {
            inside = true;
        } else if line.starts_with("# --- end") {
            inside = false;
        } else if inside && !line.starts_with("# ---") {
            text += line
                .strip_prefix("# ")
                .unwrap_or(line.trim_start_matches('#'));
            text += "\n";
        } else {
            text += line;
            text += "\n";
        }
    }
    let example = Policy::parse("etc/policy.yaml, uncommented", &text).unwrap();
    let seed = Policy::parse("seed", SEED).unwrap();
    let replies = Policy::parse("replies", REPLIES).unwrap();
    assert_eq!(example.groupings, seed.groupings);
    assert_eq!(example.sources, seed.sources);
    assert_eq!(example.policies, seed.policies);
    assert_eq!(example.replies, replies.replies);
    assert_eq!(
        example.suspensions,
        vec![Suspension {
            when: vec![
                (Field::LocalIp, "127.0.0.3".into()),
                (Field::Grouping, "yahoo".into())
            ],
            tag: Some("blocklisted, ticket 1234".into()),
        }]
    );
}

#[test]
fn the_manual_page_examples_read() {
    let page = include_str!("../../../man/sluice.policy.5");
    let examples = &page[page.find(".SH EXAMPLES").unwrap()..];
    let blocks: Vec<String> = examples
        .split(".nf\n")
        .skip(1)
        .map(|b| {
            b.split(".fi\n")
                .next()
                .unwrap()
                .replace("\\-", "-")
                .replace("\\e", "\\")
        })
        .collect();
    assert_eq!(
        blocks.len(),
        3,
        "the seed, its replies rule, a backoff rule"
    );
    let seed = Policy::parse("sluice.policy(5)", &blocks[0]).unwrap();
    assert_eq!(seed, Policy::parse("seed", SEED).unwrap());
    let with_suspend =
        Policy::parse("sluice.policy(5)", &(blocks[0].clone() + &blocks[1])).unwrap();
    assert_eq!(
        with_suspend.replies,
        Policy::parse("replies", REPLIES).unwrap().replies
    );
    let with_backoff =
        Policy::parse("sluice.policy(5)", &(blocks[0].clone() + &blocks[2])).unwrap();
    assert!(matches!(
        with_backoff.replies[0].action,
        ReplyAction::Backoff(Props {
            concurrency: Some(1),
            ..
        })
    ));
}

#[test]
fn a_file_with_a_thousand_conditions_reads_and_evaluates_through_its_index() {
    let mut text = String::from("groupings:\n");
    for g in 0..100 {
        text += &format!("  - id: g{g}\n    recipientdomains: [d{g}.test]\n");
    }
    text += "policies:\n  - fields: [localip, grouping]\n    default: { concurrency: 20 }\n    conditions:\n";
    for i in 0..1000 {
        text += &format!(
            "      - if: {{ grouping: g{}, localip: 192.0.2.{} }}\n        then: {{ concurrency: {} }}\n",
            i % 100,
            i % 10,
            i + 1
        );
    }
    let p = Policy::parse("big.yaml", &text).unwrap();
    assert_eq!(p.policies[0].conditions.len(), 1000);
    let mut b = Binding::default();
    b.set(Field::Grouping, p.grouping_of("d7.test", &[]).unwrap());
    b.set(Field::LocalIp, "192.0.2.7");
    // Clauses 7, 107, … 907 match; the last one wins.
    assert_eq!(p.props(0, &b).concurrency, Some(908));
    b.set(Field::LocalIp, "192.0.2.8");
    assert_eq!(p.props(0, &b).concurrency, Some(20));
}
