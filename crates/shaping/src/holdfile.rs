//! The saved form of holds: one line each, so that suspensions and
//! reply-driven back-offs survive a restart.
//!
//! A line is tab-separated: id, origin (`operator` or `reply:N`), end in
//! milliseconds since the epoch or `-`, the held values `field=value,…`,
//! the limits during the hold (`-` for a suspension, else
//! `concurrency=N;rate=N/MS`), the ramp `STEP/MS` or `-`, and the tag
//! (the rest of the line). Static holds come from the policy file and are
//! never saved. Values may not hold tabs, commas, `=` or newlines; the
//! operator's command refuses those. Errors name the line.

use crate::field::Field;
use crate::props::{Props, Rate};
use crate::state::{Hold, Origin};
use std::time::Duration;

/// The saved form of `holds` (static ones left out).
pub fn format(holds: &[Hold]) -> String {
    let mut out = String::new();
    for h in holds {
        let origin = match h.origin {
            Origin::Operator => "operator".to_string(),
            Origin::Reply(i) => format!("reply:{i}"),
            Origin::Static => continue,
        };
        let until = h.until.map_or("-".to_string(), |t| t.to_string());
        let when: Vec<String> = h.when.iter().map(|(f, v)| format!("{f}={v}")).collect();
        let floor = match &h.floor {
            None => "-".to_string(),
            Some(p) => {
                let mut parts = Vec::new();
                if let Some(c) = p.concurrency {
                    parts.push(format!("concurrency={c}"));
                }
                if let Some(r) = p.rate {
                    parts.push(format!("rate={}/{}", r.tokens, r.per.as_millis()));
                }
                if parts.is_empty() {
                    "none".to_string()
                } else {
                    parts.join(";")
                }
            }
        };
        let ramp = h
            .ramp
            .map_or("-".to_string(), |(s, i)| format!("{s}/{}", i.as_millis()));
        let tag = h.tag.as_deref().unwrap_or("").replace(['\t', '\n'], " ");
        out.push_str(&format!(
            "{}\t{origin}\t{until}\t{}\t{floor}\t{ramp}\t{tag}\n",
            h.id,
            when.join(",")
        ));
    }
    out
}

/// Reads holds saved by [`format`]; errors name the line.
pub fn parse(text: &str) -> Result<Vec<Hold>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(parse_line(line).map_err(|e| format!("line {}: {e}", n + 1))?);
    }
    Ok(out)
}

fn parse_line(line: &str) -> Result<Hold, String> {
    let f: Vec<&str> = line.splitn(7, '\t').collect();
    if f.len() != 7 {
        return Err(format!("{} fields, expected 7", f.len()));
    }
    let id = f[0].parse().map_err(|_| format!("bad id {:?}", f[0]))?;
    let origin = match f[1] {
        "operator" => Origin::Operator,
        o => match o.strip_prefix("reply:").and_then(|i| i.parse().ok()) {
            Some(i) => Origin::Reply(i),
            None => return Err(format!("bad origin {o:?}")),
        },
    };
    let until = match f[2] {
        "-" => None,
        t => Some(t.parse().map_err(|_| format!("bad end {t:?}"))?),
    };
    let when = parse_values(f[3])?;
    let floor = match f[4] {
        "-" => None,
        "none" => Some(Props::default()),
        s => {
            let mut p = Props::default();
            for part in s.split(';') {
                match part.split_once('=') {
                    Some(("concurrency", v)) => {
                        p.concurrency =
                            Some(v.parse().map_err(|_| format!("bad concurrency {v:?}"))?)
                    }
                    Some(("rate", v)) => {
                        let (n, ms) = v.split_once('/').ok_or(format!("bad rate {v:?}"))?;
                        p.rate = Some(Rate {
                            tokens: n.parse().map_err(|_| format!("bad rate {v:?}"))?,
                            per: Duration::from_millis(
                                ms.parse().map_err(|_| format!("bad rate {v:?}"))?,
                            ),
                        });
                    }
                    _ => return Err(format!("bad limit {part:?}")),
                }
            }
            Some(p)
        }
    };
    let ramp = match f[5] {
        "-" => None,
        r => {
            let (s, ms) = r.split_once('/').ok_or(format!("bad ramp {r:?}"))?;
            Some((
                s.parse().map_err(|_| format!("bad ramp {r:?}"))?,
                Duration::from_millis(ms.parse().map_err(|_| format!("bad ramp {r:?}"))?),
            ))
        }
    };
    let tag = (!f[6].is_empty()).then(|| f[6].to_string());
    Ok(Hold {
        id,
        when,
        until,
        floor,
        ramp,
        tag,
        origin,
    })
}

/// `field=value,…` as the operator writes it and the file keeps it.
pub fn parse_values(s: &str) -> Result<Vec<(Field, String)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or(format!("{part:?} is not FIELD=VALUE"))?;
        let f = Field::from_name(k.trim()).ok_or(format!(
            "unknown field {k:?} (localip, grouping, tenantid, jobid, recipientdomain, remotemx, remoteip, transport)"
        ))?;
        let v = v.trim();
        if v.is_empty() || v.contains(['\t', '\n', '=']) {
            return Err(format!("bad value for {k}: {v:?}"));
        }
        out.push((f, v.to_string()));
    }
    if out.is_empty() {
        return Err("no FIELD=VALUE given".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_survive_the_round_trip_and_bad_lines_are_named() {
        let holds = vec![
            Hold {
                id: 3,
                when: vec![
                    (Field::LocalIp, "127.0.0.2".into()),
                    (Field::Grouping, "yahoo".into()),
                ],
                until: Some(1_700_000_000_000),
                floor: None,
                ramp: None,
                tag: Some("maintenance window".into()),
                origin: Origin::Operator,
            },
            Hold {
                id: 9,
                when: vec![(Field::Grouping, "yahoo".into())],
                until: Some(5),
                floor: Some(Props {
                    concurrency: Some(1),
                    rate: Some(Rate {
                        tokens: 1,
                        per: Duration::from_secs(10),
                    }),
                    ..Props::default()
                }),
                ramp: Some((25, Duration::from_secs(60))),
                tag: None,
                origin: Origin::Reply(0),
            },
            Hold {
                id: 10,
                when: vec![(Field::TenantId, "x".into())],
                until: None,
                floor: None,
                ramp: None,
                tag: None,
                origin: Origin::Static,
            },
        ];
        let text = format(&holds);
        assert_eq!(text.lines().count(), 2, "static holds are not saved");
        assert_eq!(parse(&text).unwrap(), holds[..2].to_vec());
        let err = parse("1\toperator\t-\tgrouping=y\t-\t-\t\nnonsense").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
        assert!(parse_values("colour=red")
            .unwrap_err()
            .contains("unknown field"));
        assert!(parse_values("grouping=").is_err());
    }
}
