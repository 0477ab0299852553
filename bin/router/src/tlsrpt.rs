//! TLS reports (RFC 8460) from the router: the period timer and the sender.
//!
//! The router keeps the period: `tlsrpt/period` holds its start, so a
//! restart neither loses nor doubles one. Every `smtp_tls_report_interval`
//! the session log is set aside (`sts::report::rotate`) and a thread sends
//! the reports of every period set aside: per policy domain, the `rua`
//! of its `_smtp._tls` TXT record (on the router's DNS servers), the JSON
//! report with the cached policy, and the message handed to cleanup as
//! local mail from `smtp_tls_report_contact`, so it is queued, signed and
//! delivered like any other. A domain whose record cannot be looked up
//! now (a temporary DNS error) or whose message cleanup refused for now
//! stays in the file and is tried again an hour later; a domain without
//! a `mailto:` rua gets no report. Logs one line per report.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use daemon::{msg_info, msg_warn};
use ipc::cleanup::Origin;
use ipc::submission::Submission;
use sts::report::{self, Submitter};

use crate::sts::wall;

/// How soon reports that could not be sent are tried again.
const RETRY: u64 = 3600;

/// The report timer.
pub struct Reports {
    root: PathBuf,
    interval: u64,
    start: u64,
    retry_at: Option<u64>,
    busy: Arc<AtomicBool>,
    by: Submitter,
    dns: dns::Params,
}

impl Reports {
    /// The timer of main.cf `cfg`, or `None` when no reports are wanted.
    pub fn new(cfg: &config::Config) -> Option<Reports> {
        let interval = cfg.time("smtp_tls_report_interval").as_secs();
        if !cfg.bool("smtp_mta_sts") || interval == 0 {
            return None;
        }
        let root = PathBuf::from(cfg.str("queue_directory"));
        let now = wall();
        let start = match report::period_start(&root, now) {
            Ok(s) => s,
            Err(e) => {
                msg_warn!(
                    "tlsrpt: {}: {e}; no TLS reports",
                    report::dir(&root).display()
                );
                return None;
            }
        };
        let pending = !report::pending(&root).is_empty();
        Some(Reports {
            root,
            interval,
            start,
            retry_at: pending.then_some(now),
            busy: Arc::new(AtomicBool::new(false)),
            by: Submitter {
                organization: cfg.str("smtp_tls_report_organization"),
                contact: cfg.str("smtp_tls_report_contact"),
            },
            dns: crate::convert::dns_params(cfg),
        })
    }

    /// When the timer wants to run next, as an instant of the loop's clock.
    pub fn deadline(&self, now: Instant) -> Instant {
        let at = self.start.saturating_add(self.interval);
        let at = self.retry_at.map_or(at, |r| r.min(at));
        now + Duration::from_secs(at.saturating_sub(wall()))
    }

    /// Ends the period when it is over and sends what is due.
    pub fn tick(&mut self) {
        let now = wall();
        let mut due = self.retry_at.is_some_and(|r| r <= now);
        if now >= self.start.saturating_add(self.interval) {
            match report::rotate(&self.root, self.start, now) {
                Ok(_) => {
                    self.start = now;
                    due = true;
                }
                Err(e) => {
                    msg_warn!("tlsrpt: cannot end the period: {e}");
                    self.start = now;
                }
            }
        }
        if !due {
            return;
        }
        self.retry_at = None;
        if report::pending(&self.root).is_empty() {
            return;
        }
        if self.busy.swap(true, Ordering::SeqCst) {
            self.retry_at = Some(now + RETRY);
            return;
        }
        let (root, by, dns, busy) = (
            self.root.clone(),
            self.by.clone(),
            self.dns.clone(),
            self.busy.clone(),
        );
        std::thread::spawn(move || {
            send_all(&root, &by, &dns);
            busy.store(false, Ordering::SeqCst);
        });
        // Whatever the thread leaves is for the next try.
        self.retry_at = Some(now + RETRY);
    }
}

/// Sends the reports of every period set aside.
fn send_all(root: &std::path::Path, by: &Submitter, params: &dns::Params) {
    for (path, start, end) in report::pending(root) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                msg_warn!("tlsrpt: {}: {e}", path.display());
                continue;
            }
        };
        let events = report::events(&text);
        let mut keep: Vec<String> = Vec::new();
        for (domain, t) in report::tally(&events) {
            if !send_one(root, by, params, &domain, start, end, &t) {
                keep.push(domain);
            }
        }
        let r = if keep.is_empty() {
            std::fs::remove_file(&path)
        } else {
            let left: String = text
                .lines()
                .filter(|l| {
                    l.split('\t')
                        .nth(1)
                        .is_some_and(|d| keep.iter().any(|k| k == d))
                })
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(&path, left)
        };
        if let Err(e) = r {
            msg_warn!("tlsrpt: {}: {e}", path.display());
        }
    }
}

/// Sends one domain's report; false when it should be tried again later.
fn send_one(
    root: &std::path::Path,
    by: &Submitter,
    params: &dns::Params,
    domain: &str,
    start: u64,
    end: u64,
    t: &report::Tally,
) -> bool {
    let timeout = params.timeout.max(Duration::from_secs(1)) * 3;
    let (rcfg, hcfg, _) = params.build(wall() ^ u64::from(std::process::id()));
    let name = format!("_smtp._tls.{domain}");
    let answer = dns::blocking::Driver::new(dns::Dns::new(dns::Resolver::new(rcfg), hcfg))
        .map_err(|e| dns::DnsError::ServFail(e.to_string()))
        .and_then(|mut d| d.lookup(&name, dns::QType::Txt, timeout));
    let records: Vec<String> = match answer {
        Ok(a) => a
            .data
            .into_iter()
            .filter_map(|d| match d {
                dns::Data::Txt(t) => Some(t),
                _ => None,
            })
            .collect(),
        Err(e) if e.is_temporary() => {
            msg_warn!("tlsrpt: {domain}: {name}: {e}; the report waits");
            return false;
        }
        Err(_) => Vec::new(),
    };
    let rua = sts::policy::tlsrpt_rua(records.iter().map(String::as_str));
    if rua.is_empty() {
        msg_info!("tlsrpt: {domain}: no mailto: rua in {name}; no report sent");
        return true;
    }
    let cached = sts::cache::load(root, domain);
    let json = report::json(by, domain, start, end, t, cached.as_ref());
    let date = sys::time::rfc5322_date(std::time::SystemTime::now());
    let msg = report::message(by, domain, start, end, &rua, &json, &date);
    let envelope = mail::Envelope {
        sender: by.contact.clone(),
        recipients: rua
            .iter()
            .map(|r| mail::Recipient::new(r.as_str()))
            .collect(),
        ..mail::Envelope::default()
    };
    let origin = Origin::Local {
        user: String::new(),
        full_name: None,
    };
    let socket = root.join("private/cleanup");
    let queued =
        Submission::begin(&socket, Duration::from_secs(300), envelope, origin).and_then(|mut s| {
            s.data(&msg)?;
            s.end()
        });
    match queued {
        Ok(qid) => {
            msg_info!(
                "tlsrpt: {domain}: report {}-{} ({} successful, {} failed sessions) to {} queued as {qid}",
                report::datetime(start),
                report::datetime(end),
                t.successes,
                t.failed(),
                rua.join(", ")
            );
            true
        }
        Err(e) if e.is_permanent() => {
            msg_warn!("tlsrpt: {domain}: report refused: {e}");
            true
        }
        Err(e) => {
            msg_warn!("tlsrpt: {domain}: report not queued: {e}; it waits");
            false
        }
    }
}
