//! TLS reporting (RFC 8460): the session log, the daily report, its message.
//!
//! Every session to a domain with an MTA-STS policy, and every failed
//! policy fetch, is one line appended to `tlsrpt/events` under the queue
//! directory ([`record`]): smtp(8) processes and router(8) append with
//! O_APPEND, one `write` per line, so lines from several processes never
//! mix, and the counts survive any restart. When a period ends, router
//! renames the file ([`rotate`]) and builds one report per policy domain
//! from it ([`tally`], [`json`], [`message`]); nothing else keeps counts.
//!
//! A line is tab-separated: time, policy domain, result type (`success`
//! or an RFC 8460 section 4.3 result type), receiving MX host, receiving
//! IP, detail. A line that does not read is skipped.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cache::Cached;

/// The outcome of one session, or of a policy fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// TLS with a certificate the policy accepts.
    Success,
    /// The server did not offer STARTTLS (or refused it).
    StarttlsNotSupported,
    /// The certificate does not name the MX host.
    CertificateHostMismatch,
    /// The certificate has expired.
    CertificateExpired,
    /// The certificate does not chain to a trusted root.
    CertificateNotTrusted,
    /// Anything else, e.g. an MX host the policy does not list.
    ValidationFailure,
    /// The policy could not be fetched.
    StsPolicyFetchError,
    /// The policy did not parse.
    StsPolicyInvalid,
    /// The policy server's certificate did not verify.
    StsWebpkiInvalid,
}

const NAMES: [(Outcome, &str); 9] = [
    (Outcome::Success, "success"),
    (Outcome::StarttlsNotSupported, "starttls-not-supported"),
    (
        Outcome::CertificateHostMismatch,
        "certificate-host-mismatch",
    ),
    (Outcome::CertificateExpired, "certificate-expired"),
    (Outcome::CertificateNotTrusted, "certificate-not-trusted"),
    (Outcome::ValidationFailure, "validation-failure"),
    (Outcome::StsPolicyFetchError, "sts-policy-fetch-error"),
    (Outcome::StsPolicyInvalid, "sts-policy-invalid"),
    (Outcome::StsWebpkiInvalid, "sts-webpki-invalid"),
];

impl Outcome {
    /// The RFC 8460 result type (`success` for a success).
    pub fn as_str(self) -> &'static str {
        NAMES
            .iter()
            .find(|(o, _)| *o == self)
            .map_or("validation-failure", |(_, n)| n)
    }

    fn from_str(s: &str) -> Option<Outcome> {
        NAMES.iter().find(|(_, n)| *n == s).map(|(o, _)| *o)
    }
}

/// One line of the session log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Seconds since the epoch.
    pub time: u64,
    /// The policy domain (the recipient domain).
    pub domain: String,
    /// What happened.
    pub outcome: Outcome,
    /// The MX host (empty for fetch errors).
    pub mx_host: String,
    /// Its address (empty when unknown).
    pub ip: String,
    /// Why, for a failure (`failure-reason-code`).
    pub detail: String,
}

/// Tabs and line ends would split a line: they become spaces.
fn field(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

impl Event {
    fn line(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\n",
            self.time,
            field(&self.domain),
            self.outcome.as_str(),
            field(&self.mx_host),
            field(&self.ip),
            field(&self.detail)
        )
    }

    fn parse(line: &str) -> Option<Event> {
        let mut f = line.split('\t');
        Some(Event {
            time: f.next()?.parse().ok()?,
            domain: f.next()?.to_string(),
            outcome: Outcome::from_str(f.next()?)?,
            mx_host: f.next()?.to_string(),
            ip: f.next()?.to_string(),
            detail: f.next()?.to_string(),
        })
    }
}

/// The directory of the session log under queue directory `root`.
pub fn dir(root: &Path) -> PathBuf {
    root.join("tlsrpt")
}

/// Appends `e` to the session log.
pub fn record(root: &Path, e: &Event) -> std::io::Result<()> {
    let d = dir(root);
    std::fs::create_dir_all(&d)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(d.join("events"))?;
    // One write: O_APPEND keeps it whole against other writers.
    f.write_all(e.line().as_bytes())
}

/// When the current period began (creating the record of it at `now`).
pub fn period_start(root: &Path, now: u64) -> std::io::Result<u64> {
    let p = dir(root).join("period");
    match std::fs::read_to_string(&p) {
        Ok(s) => {
            if let Ok(t) = s.trim().parse() {
                return Ok(t);
            }
        }
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    std::fs::create_dir_all(dir(root))?;
    write_period(root, now)?;
    Ok(now)
}

fn write_period(root: &Path, t: u64) -> std::io::Result<()> {
    let d = dir(root);
    let tmp = d.join(".period");
    std::fs::write(&tmp, format!("{t}\n"))?;
    std::fs::rename(tmp, d.join("period"))
}

/// Ends the period `[start, end)`: the session log becomes
/// `tlsrpt/report.START-END` (returned; `None` when nothing was logged)
/// and a new period starts at `end`.
pub fn rotate(root: &Path, start: u64, end: u64) -> std::io::Result<Option<PathBuf>> {
    let d = dir(root);
    std::fs::create_dir_all(&d)?;
    let to = d.join(format!("report.{start}-{end}"));
    let r = match std::fs::rename(d.join("events"), &to) {
        Ok(()) => Some(to),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    write_period(root, end)?;
    Ok(r)
}

/// Reports not sent yet, oldest first, with their periods.
pub fn pending(root: &Path) -> Vec<(PathBuf, u64, u64)> {
    let mut v: Vec<(PathBuf, u64, u64)> = std::fs::read_dir(dir(root))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (s, t) = name.strip_prefix("report.")?.split_once('-')?;
            Some((e.path(), s.parse().ok()?, t.parse().ok()?))
        })
        .collect();
    v.sort_by_key(|(_, s, _)| *s);
    v
}

/// The events of a log file's text, bad lines skipped.
pub fn events(text: &str) -> Vec<Event> {
    text.lines().filter_map(Event::parse).collect()
}

/// One policy domain's counts in a period.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Successful sessions.
    pub successes: u64,
    /// Failed sessions by (result type, MX host, IP, reason).
    pub failures: BTreeMap<(Outcome, String, String, String), u64>,
}

impl Tally {
    /// All failed sessions.
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }
}

/// Counts events by policy domain.
pub fn tally(events: &[Event]) -> BTreeMap<String, Tally> {
    let mut m: BTreeMap<String, Tally> = BTreeMap::new();
    for e in events {
        let t = m.entry(e.domain.clone()).or_default();
        if e.outcome == Outcome::Success {
            t.successes += 1;
        } else {
            *t.failures
                .entry((e.outcome, e.mx_host.clone(), e.ip.clone(), e.detail.clone()))
                .or_default() += 1;
        }
    }
    m
}

/// Who sends a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitter {
    /// `organization-name` and the Submitter in the subject.
    pub organization: String,
    /// `contact-info`, and the report's From:.
    pub contact: String,
}

/// `s` as a JSON string.
fn js(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// RFC 3339 UTC date-time of `t` seconds since the epoch.
pub fn datetime(t: u64) -> String {
    let days = (t / 86_400) as i64;
    let secs = t % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The report id of a domain's report for a period.
pub fn report_id(domain: &str, start: u64, end: u64, organization: &str) -> String {
    format!("{start}-{end}.{domain}@{organization}")
}

/// The JSON report (RFC 8460 section 4) of one policy domain for the
/// period `[start, end)`; `policy` is the cached policy, when there is one
/// (a domain whose policy could never be fetched is `no-policy-found`).
pub fn json(
    by: &Submitter,
    domain: &str,
    start: u64,
    end: u64,
    t: &Tally,
    policy: Option<&Cached>,
) -> String {
    let (ptype, strings, mx) = match policy {
        Some(c) => (
            "sts",
            c.text
                .lines()
                .map(|l| js(l.trim_end_matches('\r')))
                .collect::<Vec<_>>(),
            c.policy.mx.iter().map(|m| js(m)).collect::<Vec<_>>(),
        ),
        None => ("no-policy-found", Vec::new(), Vec::new()),
    };
    let details: Vec<String> = t
        .failures
        .iter()
        .map(|((o, host, ip, why), n)| {
            let mut d = format!("{{\"result-type\":{}", js(o.as_str()));
            if !ip.is_empty() {
                d.push_str(&format!(",\"receiving-ip\":{}", js(ip)));
            }
            if !host.is_empty() {
                d.push_str(&format!(",\"receiving-mx-hostname\":{}", js(host)));
            }
            d.push_str(&format!(",\"failed-session-count\":{n}"));
            if !why.is_empty() {
                d.push_str(&format!(",\"failure-reason-code\":{}", js(why)));
            }
            d.push('}');
            d
        })
        .collect();
    format!(
        "{{\"organization-name\":{org},\"date-range\":{{\"start-datetime\":{s},\"end-datetime\":{e}}},\
         \"contact-info\":{contact},\"report-id\":{id},\"policies\":[{{\"policy\":{{\"policy-type\":{pt},\
         \"policy-string\":[{ps}],\"policy-domain\":{dom},\"mx-host\":[{mx}]}},\
         \"summary\":{{\"total-successful-session-count\":{ok},\"total-failure-session-count\":{bad}}},\
         \"failure-details\":[{fd}]}}]}}",
        org = js(&by.organization),
        s = js(&datetime(start)),
        e = js(&datetime(end)),
        contact = js(&by.contact),
        id = js(&report_id(domain, start, end, &by.organization)),
        pt = js(ptype),
        ps = strings.join(","),
        dom = js(domain),
        mx = mx.join(","),
        ok = t.successes,
        bad = t.failed(),
        fd = details.join(","),
    )
}

/// The report message (RFC 8460 section 5.3), wire format (CRLF): a
/// `multipart/report; report-type="tlsrpt"` with a short text and the
/// JSON as `application/tlsrpt+json`, base64-encoded so that no line
/// is too long; `date` is an RFC 5322 date.
pub fn message(
    by: &Submitter,
    domain: &str,
    start: u64,
    end: u64,
    to: &[String],
    json: &str,
    date: &str,
) -> Vec<u8> {
    let id = report_id(domain, start, end, &by.organization);
    let boundary = format!("tlsrpt.{start}.{end}");
    let mut m = String::new();
    m.push_str(&format!("From: {}\r\n", by.contact));
    m.push_str(&format!("To: {}\r\n", to.join(", ")));
    m.push_str(&format!("Date: {date}\r\n"));
    m.push_str(&format!(
        "Subject: Report Domain: {domain} Submitter: {} Report-ID: <{id}>\r\n",
        by.organization
    ));
    m.push_str(&format!("TLS-Report-Domain: {domain}\r\n"));
    m.push_str(&format!("TLS-Report-Submitter: {}\r\n", by.organization));
    m.push_str(&format!("Message-ID: <{id}>\r\n"));
    m.push_str("MIME-Version: 1.0\r\n");
    m.push_str(&format!(
        "Content-Type: multipart/report; report-type=\"tlsrpt\";\r\n\tboundary=\"{boundary}\"\r\n\r\n"
    ));
    m.push_str("This is a multipart message in MIME format.\r\n\r\n");
    m.push_str(&format!(
        "--{boundary}\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n"
    ));
    m.push_str(&format!(
        "This is an aggregate TLS report from {} for {domain},\r\n{} to {}.\r\n\r\n",
        by.organization,
        datetime(start),
        datetime(end)
    ));
    m.push_str(&format!(
        "--{boundary}\r\nContent-Type: application/tlsrpt+json\r\nContent-Transfer-Encoding: base64\r\n\
         Content-Disposition: attachment;\r\n\tfilename=\"{}!{domain}!{start}!{end}.json\"\r\n\r\n",
        by.organization
    ));
    let b64 = base64(json.as_bytes());
    for line in b64.as_bytes().chunks(76) {
        m.push_str(std::str::from_utf8(line).unwrap_or(""));
        m.push_str("\r\n");
    }
    m.push_str(&format!("\r\n--{boundary}--\r\n"));
    m.into_bytes()
}

fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut o = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                o.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                o.push('=');
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(domain: &str, outcome: Outcome, host: &str) -> Event {
        Event {
            time: 1,
            domain: domain.into(),
            outcome,
            mx_host: host.into(),
            ip: "192.0.2.1".into(),
            detail: if outcome == Outcome::Success {
                String::new()
            } else {
                "why\there".into()
            },
        }
    }

    #[test]
    fn the_log_counts_across_writers_and_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(period_start(root, 100).unwrap(), 100);
        assert_eq!(
            period_start(root, 200).unwrap(),
            100,
            "kept across restarts"
        );
        record(root, &ev("a.test", Outcome::Success, "mx.a.test")).unwrap();
        record(
            root,
            &ev("a.test", Outcome::CertificateHostMismatch, "mx.a.test"),
        )
        .unwrap();
        record(
            root,
            &ev("a.test", Outcome::CertificateHostMismatch, "mx.a.test"),
        )
        .unwrap();
        record(root, &ev("b.test", Outcome::StsPolicyFetchError, "")).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(root.join("tlsrpt/events"))
            .unwrap()
            .write_all(b"garbage\n")
            .unwrap();
        let file = rotate(root, 100, 200).unwrap().unwrap();
        assert_eq!(period_start(root, 300).unwrap(), 200);
        assert_eq!(pending(root), vec![(file.clone(), 100, 200)]);
        let t = tally(&events(&std::fs::read_to_string(&file).unwrap()));
        let a = &t["a.test"];
        assert_eq!((a.successes, a.failed()), (1, 2));
        let key = (
            Outcome::CertificateHostMismatch,
            "mx.a.test".to_string(),
            "192.0.2.1".to_string(),
            "why here".to_string(),
        );
        assert_eq!(a.failures[&key], 2);
        assert_eq!((t["b.test"].successes, t["b.test"].failed()), (0, 1));
        assert_eq!(rotate(root, 200, 300).unwrap(), None, "nothing logged");
    }

    #[test]
    fn dates_and_base64() {
        assert_eq!(datetime(0), "1970-01-01T00:00:00Z");
        assert_eq!(datetime(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(datetime(1_795_000_000), "2026-11-18T11:06:40Z");
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
    }

    #[test]
    fn the_json_has_the_rfc_fields() {
        let text = "version: STSv1\r\nmode: testing\r\nmx: *.a.test\r\nmax_age: 86400\r\n";
        let c = Cached {
            id: "1".into(),
            fetched: 0,
            text: text.into(),
            policy: crate::policy::parse(text).unwrap(),
        };
        let t = tally(&[
            ev("a.test", Outcome::Success, "x"),
            ev("a.test", Outcome::StarttlsNotSupported, "mx.a.test"),
        ]);
        let by = Submitter {
            organization: "out.test".into(),
            contact: "postmaster@out.test".into(),
        };
        let j = json(&by, "a.test", 0, 86_400, &t["a.test"], Some(&c));
        for want in [
            "\"policy-type\":\"sts\"",
            "\"policy-string\":[\"version: STSv1\",\"mode: testing\",\"mx: *.a.test\",\"max_age: 86400\"]",
            "\"mx-host\":[\"*.a.test\"]",
            "\"total-successful-session-count\":1",
            "\"total-failure-session-count\":1",
            "\"result-type\":\"starttls-not-supported\"",
            "\"end-datetime\":\"1970-01-02T00:00:00Z\"",
            "\"failure-reason-code\":\"why\\there\"",
        ] {
            assert!(j.contains(want), "{want} in {j}");
        }
        let m = String::from_utf8(message(
            &by,
            "a.test",
            0,
            86_400,
            &["r@a.test".into()],
            &j,
            "Thu, 1 Jan 1970 00:00:00 +0000",
        ))
        .unwrap();
        assert!(m.contains("report-type=\"tlsrpt\""));
        assert!(m.contains("TLS-Report-Domain: a.test\r\n"));
        assert!(m.lines().all(|l| l.len() <= 998));
    }
}
