//! MTA-STS for one connection: what the policy of its domain demands, and
//! the session's line in the TLS report log.
//!
//! With `smtp_mta_sts = yes`, a connection for a domain next hop reads the
//! policy router(8) cached for that domain (`sts::cache`; router fetched
//! it before it gave qmgr the hosts). `enforce` makes STARTTLS required,
//! whatever `smtp_tls_security_level` says, and the certificate must chain
//! to the trust anchors (`smtp_tls_CAfile`, else the system bundle) and
//! name the MX host; an MX host no `mx:` pattern matches is not used
//! (router leaves such hosts out already; this is the check at the point
//! of use). A failure defers the mail with 4.7.5. `testing` tries STARTTLS
//! whatever the level and delivers anyway; the failure is logged. Both
//! append the session's outcome to the report log (`sts::report`), once
//! per connection: `success`, or the first failure seen.

use std::net::SocketAddr;
use std::path::PathBuf;

use daemon::{msg_info, msg_warn};
use rustls::pki_types::{CertificateDer, UnixTime};
use smtp_proto::client_session::ClientTls;
use sts::report::{Event, Outcome};
use sts::{Cached, Mode};

use crate::results::nexthop_domain;

/// The policy of a connection's domain and what the session showed so far.
pub struct Check {
    root: PathBuf,
    domain: String,
    host: String,
    cached: Cached,
    failure: Option<(Outcome, String)>,
    logged: bool,
}

impl Check {
    /// The check for a connection to `host` for `nexthop`, when the
    /// domain has an active policy in the cache.
    pub fn for_open(root: &std::path::Path, host: &str, nexthop: &str) -> Option<Check> {
        if nexthop.starts_with('[') {
            return None;
        }
        let domain = nexthop_domain(nexthop).to_ascii_lowercase();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let cached = sts::cache::load(root, &domain).filter(|c| c.valid(now) && c.active())?;
        Some(Check {
            root: root.to_path_buf(),
            domain,
            host: host.trim_end_matches('.').to_ascii_lowercase(),
            cached,
            failure: None,
            logged: false,
        })
    }

    fn enforce(&self) -> bool {
        self.cached.policy.mode == Mode::Enforce
    }

    /// The STARTTLS setting of the session under the policy.
    pub fn client_tls(&self, level: ClientTls) -> ClientTls {
        match (self.enforce(), level) {
            (true, _) => ClientTls::Required,
            (false, ClientTls::Disabled) => ClientTls::Opportunistic,
            (false, l) => l,
        }
    }

    /// Notes a failure; in enforce mode, the reason to defer with.
    fn failed(&mut self, outcome: Outcome, why: String, ip: Option<SocketAddr>) -> Option<String> {
        let mode = self.cached.policy.mode.as_str();
        msg_info!(
            "MTA-STS policy of {} ({mode}): {why}, host {}",
            self.domain,
            self.host
        );
        self.failure.get_or_insert((outcome, why.clone()));
        if self.enforce() {
            self.log(ip);
            Some(format!("MTA-STS policy of {}: {why}", self.domain))
        } else {
            None
        }
    }

    /// Before connecting: an MX host the policy does not list.
    pub fn host_refused(&mut self) -> Option<String> {
        if self.cached.policy.mx_matches(&self.host) {
            return None;
        }
        let why = format!(
            "MX host {} does not match mx: {}",
            self.host,
            self.cached.policy.mx.join(" ")
        );
        self.failed(Outcome::ValidationFailure, why, None)
    }

    /// After the handshake: the certificate against the MX host name; in
    /// enforce mode the reason to defer when it does not do.
    pub fn certificate(
        &mut self,
        chain: &[CertificateDer<'_>],
        roots: Option<&rustls::RootCertStore>,
        ip: Option<SocketAddr>,
    ) -> Option<String> {
        let trust = match roots {
            Some(r) => tls::check_peer(chain, r, std::slice::from_ref(&self.host), UnixTime::now()),
            None => tls::PeerTrust::Untrusted("no trust anchors".into()),
        };
        let (outcome, why) = match trust {
            tls::PeerTrust::Verified(_) => return None,
            tls::PeerTrust::Anonymous => (
                Outcome::CertificateNotTrusted,
                "no server certificate".to_string(),
            ),
            tls::PeerTrust::Untrusted(e) if e.contains("expired") => (
                Outcome::CertificateExpired,
                format!("server certificate not trusted ({e})"),
            ),
            tls::PeerTrust::Untrusted(e) => (
                Outcome::CertificateNotTrusted,
                format!("server certificate not trusted ({e})"),
            ),
            tls::PeerTrust::Trusted(names) => (
                Outcome::CertificateHostMismatch,
                format!(
                    "server certificate names [{}] do not match {}",
                    names.join(", "),
                    self.host
                ),
            ),
        };
        self.failed(outcome, why, ip)
    }

    /// The session is ready for mail (`tls`: over TLS).
    pub fn opened(&mut self, tls: bool, ip: Option<SocketAddr>) {
        if !tls {
            self.failed(
                Outcome::StarttlsNotSupported,
                "STARTTLS not offered".into(),
                ip,
            );
        }
        self.log(ip);
    }

    /// The session ended because TLS was required and not offered.
    pub fn no_starttls(&mut self, ip: Option<SocketAddr>) {
        self.failed(
            Outcome::StarttlsNotSupported,
            "STARTTLS not offered".into(),
            ip,
        );
        self.log(ip);
    }

    /// Appends the session's outcome to the report log, once.
    fn log(&mut self, ip: Option<SocketAddr>) {
        if self.logged {
            return;
        }
        self.logged = true;
        let (outcome, detail) = self
            .failure
            .clone()
            .unwrap_or((Outcome::Success, String::new()));
        let e = Event {
            time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            domain: self.domain.clone(),
            outcome,
            mx_host: self.host.clone(),
            ip: ip.map(|a| a.ip().to_string()).unwrap_or_default(),
            detail,
        };
        if let Err(err) = sts::report::record(&self.root, &e) {
            msg_warn!("tlsrpt: cannot log the session with {}: {err}", self.host);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(mode: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let text =
            format!("version: STSv1\r\nmode: {mode}\r\nmx: mx.example.com\r\nmax_age: 86400\r\n");
        let c = Cached {
            id: "1".into(),
            fetched: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            policy: sts::policy::parse(&text).unwrap(),
            text,
        };
        sts::cache::store(dir.path(), "example.com", &c).unwrap();
        dir
    }

    fn events(root: &std::path::Path) -> Vec<Event> {
        sts::report::events(
            &std::fs::read_to_string(root.join("tlsrpt/events")).unwrap_or_default(),
        )
    }

    #[test]
    fn enforce_requires_tls_and_the_listed_host() {
        let dir = root_with("enforce");
        assert!(Check::for_open(dir.path(), "mx.example.com", "[mx.example.com]:25").is_none());
        assert!(Check::for_open(dir.path(), "mx.example.org", "example.org").is_none());
        let mut c = Check::for_open(dir.path(), "mx.example.com", "example.com:25").unwrap();
        assert_eq!(c.client_tls(ClientTls::Disabled), ClientTls::Required);
        assert_eq!(c.host_refused(), None);
        // No anchors: the certificate cannot be trusted, the mail waits.
        let why = c
            .certificate(&[], None, Some("192.0.2.1:25".parse().unwrap()))
            .unwrap();
        assert!(
            why.starts_with("MTA-STS policy of example.com: server certificate not trusted"),
            "{why}"
        );
        let mut other = Check::for_open(dir.path(), "mx.attacker.test", "example.com").unwrap();
        let why = other.host_refused().unwrap();
        assert!(
            why.contains("MX host mx.attacker.test does not match mx: mx.example.com"),
            "{why}"
        );
        let ev = events(dir.path());
        assert_eq!(ev.len(), 2, "{ev:?}");
        assert_eq!(
            (ev[0].outcome, ev[0].ip.as_str()),
            (Outcome::CertificateNotTrusted, "192.0.2.1")
        );
        assert_eq!(ev[1].outcome, Outcome::ValidationFailure);
    }

    #[test]
    fn testing_tries_tls_delivers_and_logs_once() {
        let dir = root_with("testing");
        let mut c = Check::for_open(dir.path(), "mx.example.com", "example.com").unwrap();
        assert_eq!(c.client_tls(ClientTls::Disabled), ClientTls::Opportunistic);
        assert_eq!(c.client_tls(ClientTls::Required), ClientTls::Required);
        assert_eq!(
            c.certificate(&[], None, None),
            None,
            "testing never refuses"
        );
        c.opened(true, None);
        c.opened(true, None);
        let mut plain = Check::for_open(dir.path(), "mx.example.com", "example.com").unwrap();
        plain.opened(false, None);
        let ev = events(dir.path());
        let outcomes: Vec<Outcome> = ev.iter().map(|e| e.outcome).collect();
        assert_eq!(
            outcomes,
            [
                Outcome::CertificateNotTrusted,
                Outcome::StarttlsNotSupported
            ]
        );
        assert!(
            Check::for_open(root_with("none").path(), "mx.example.com", "example.com").is_none()
        );
    }
}
