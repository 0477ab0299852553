//! `sluice queue shape`: Postfix's qshape(1) for Sluice's queue.
//!
//! qshape reads Postfix's queue directories, which Sluice does not have, so
//! the same table is computed here from qmgr's listing: one row per
//! recipient domain (or sender domain), the total, and the count per age
//! bucket in minutes (`t`, `2t`, `4t`, ... and the last one open-ended),
//! busiest first, under a TOTAL row. As in qshape, recipient domains count
//! recipients and sender domains count messages; `--parents` adds rows for
//! the parent domains (`.example.com`).

use std::collections::BTreeMap;

use ipc::queuectl::QueuedMessage;

/// How the table is cut.
#[derive(Debug, Clone)]
pub struct Options {
    /// By sender domain rather than recipient domain.
    pub senders: bool,
    /// Also rows for parent domains.
    pub parents: bool,
    /// The first bucket's width, minutes.
    pub minutes: u64,
    /// Number of age buckets (the last one open-ended).
    pub buckets: usize,
    /// Queue states to count (`active`, `deferred`, `hold`).
    pub states: Vec<String>,
}

/// The table, as qshape prints it; `now` in seconds since the epoch.
pub fn shape(list: &[QueuedMessage], now: u64, o: &Options) -> String {
    let buckets = o.buckets.max(2);
    let t = o.minutes.max(1);
    let mut rows: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut total = vec![0u64; buckets];
    for m in list.iter().filter(|m| o.states.contains(&m.state)) {
        let age_min = now.saturating_sub(m.arrival) / 60;
        let b = (0..buckets - 1)
            .find(|&k| age_min < t << k)
            .unwrap_or(buckets - 1);
        let mut count = |domain: &str, n: u64| {
            let mut names = vec![domain.to_string()];
            if o.parents {
                let mut rest = domain;
                while let Some((_, parent)) = rest.split_once('.') {
                    if !parent.contains('.') {
                        break;
                    }
                    names.push(format!(".{parent}"));
                    rest = parent;
                }
            }
            for name in names {
                rows.entry(name).or_insert_with(|| vec![0; buckets])[b] += n;
            }
        };
        if o.senders {
            count(&domain_of(&m.sender), 1);
            total[b] += 1;
        } else {
            for r in &m.recipients {
                count(&domain_of(&r.address), 1);
                total[b] += 1;
            }
        }
    }
    let mut header: Vec<String> = vec!["T".into()];
    header.extend((0..buckets - 1).map(|k| (t << k).to_string()));
    header.push(format!("{}+", t << (buckets - 2)));
    let mut lines: Vec<(String, Vec<u64>)> = vec![("TOTAL".into(), total)];
    let mut sorted: Vec<(String, Vec<u64>)> = rows.into_iter().collect();
    sorted.sort_by(|a, b| {
        let (x, y) = (a.1.iter().sum::<u64>(), b.1.iter().sum::<u64>());
        y.cmp(&x).then_with(|| a.0.cmp(&b.0))
    });
    lines.extend(sorted);
    let name_w = lines.iter().map(|(n, _)| n.len()).max().unwrap_or(5).max(5);
    let cells: Vec<Vec<String>> = lines
        .iter()
        .map(|(_, v)| {
            let mut c = vec![v.iter().sum::<u64>().to_string()];
            c.extend(v.iter().map(|x| x.to_string()));
            c
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            cells
                .iter()
                .map(|c| c[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(1)
        })
        .collect();
    let row = |name: &str, c: &[String]| {
        let mut s = format!("{name:>name_w$}");
        for (v, w) in c.iter().zip(&widths) {
            s.push_str(&format!(" {v:>w$}"));
        }
        s.push('\n');
        s
    };
    let mut out = row("", &header);
    for ((name, _), c) in lines.iter().zip(&cells) {
        out.push_str(&row(name, c));
    }
    out
}

/// The domain of an address, lower-cased; `MAILER-DAEMON` for the null sender.
fn domain_of(addr: &str) -> String {
    if addr.is_empty() {
        return "MAILER-DAEMON".into();
    }
    addr.rsplit_once('@')
        .map_or(addr, |(_, d)| d)
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::queuectl::QueuedRecipient;

    fn msg(age_min: u64, sender: &str, rcpts: &[&str], state: &str) -> QueuedMessage {
        QueuedMessage {
            id: "Q".into(),
            size: 100,
            arrival: 1_000_000 - age_min * 60,
            sender: sender.into(),
            state: state.into(),
            recipients: rcpts
                .iter()
                .map(|a| QueuedRecipient {
                    address: a.to_string(),
                    reason: None,
                })
                .collect(),
            tenant: None,
            job: None,
        }
    }

    fn opts() -> Options {
        Options {
            senders: false,
            parents: false,
            minutes: 5,
            buckets: 10,
            states: vec!["active".into(), "deferred".into()],
        }
    }

    #[test]
    fn recipients_by_domain_and_age_as_qshape() {
        let list = [
            msg(
                1,
                "a@x.example",
                &["u@gmail.example", "v@Gmail.example"],
                "deferred",
            ),
            msg(7, "a@x.example", &["u@yahoo.example"], "deferred"),
            msg(3000, "b@y.example", &["w@gmail.example"], "active"),
            msg(3000, "b@y.example", &["held@gmail.example"], "hold"),
        ];
        let t = shape(&list, 1_000_000, &opts());
        let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(
            lines[0],
            ["T", "5", "10", "20", "40", "80", "160", "320", "640", "1280", "1280+"]
        );
        assert_eq!(
            lines[1],
            ["TOTAL", "4", "2", "1", "0", "0", "0", "0", "0", "0", "0", "1"]
        );
        assert_eq!(
            lines[2],
            [
                "gmail.example",
                "3",
                "2",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "1"
            ]
        );
        assert_eq!(
            lines[3],
            [
                "yahoo.example",
                "1",
                "0",
                "1",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0"
            ]
        );
        assert_eq!(lines.len(), 4, "{t}");
    }

    #[test]
    fn senders_count_messages_and_parents_add_rows() {
        let list = [
            msg(
                1,
                "a@mx1.x.example",
                &["u@r.example", "v@r.example"],
                "active",
            ),
            msg(1, "", &["u@r.example"], "active"),
        ];
        let o = Options {
            senders: true,
            parents: true,
            buckets: 3,
            ..opts()
        };
        let t = shape(&list, 1_000_000, &o);
        assert!(t.lines().next().unwrap().ends_with("T 5 10 10+"), "{t}");
        let has = |row: &str| {
            t.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == row)
        };
        assert!(has("TOTAL 2 2 0 0"), "{t}");
        assert!(has("mx1.x.example 1 1 0 0"), "{t}");
        assert!(has(".x.example 1 1 0 0"), "{t}");
        assert!(has("MAILER-DAEMON 1 1 0 0"), "{t}");
    }
}
