//! The TLS policy of one connection at Postfix's `dane` and `dane-only`
//! levels (RFC 7672 2.2), from the host's DANE standing in qmgr's Open.
//!
//! | what the router found | `dane` | `dane-only` |
//! |---|---|---|
//! | MX or addresses not validated, or no validated TLSA records | `may` | deferred |
//! | validated TLSA records, none usable | `encrypt` | deferred |
//! | usable TLSA records | TLS required, certificate matched by them | same |
//! | a validated host whose address or TLSA lookup failed | deferred | deferred |
//!
//! Other levels are left as they are. Deferrals are 4.7.5, as Postfix's
//! TLS policy failures; the reason names the host and port whose TLSA
//! records were (or could not be) used. A failed lookup's own status
//! (4.4.3 SERVFAIL, say) is not nested into that reason, which is
//! Postfix's "TLSA lookup error for host:port": it goes to the log.

use std::sync::Arc;

use ipc::delivery::Dane;
use smtp_proto::client_session::ClientTls;

use crate::results::nexthop_domain;
use crate::settings::TlsLevel;

/// What one connection does about TLS.
pub enum Policy {
    /// The level as configured, or what `dane` falls back to.
    Level(TlsLevel),
    /// STARTTLS required; the handshake succeeds only with a certificate
    /// that the host's usable TLSA records match.
    Tlsa(Arc<rustls::ClientConfig>),
    /// Do not deliver to this host.
    Refuse {
        /// Why, the text of the 4.7.5 deferral.
        why: String,
        /// What DNS said, when a lookup failed: for the log only.
        cause: Option<mail::Status>,
    },
}

impl Policy {
    /// The policy for a host at `level` with DANE standing `dane`; `host`
    /// and `nexthop` are the reference names of DANE-TA records, `port`
    /// the port its TLSA records are for.
    pub fn new(level: TlsLevel, dane: &Dane, host: &str, nexthop: &str, port: u16) -> Policy {
        let only = match level {
            TlsLevel::Dane => false,
            TlsLevel::DaneOnly => true,
            other => return Policy::Level(other),
        };
        let at = format!("{host}:{port}");
        let refuse = |why: String| Policy::Refuse { why, cause: None };
        match dane {
            Dane::Failed(status) => Policy::Refuse {
                why: format!("TLSA lookup error for {at}"),
                cause: Some(status.clone()),
            },
            Dane::Insecure if only => refuse(format!(
                "no DNSSEC-validated MX and address records for {at}, as dane-only requires"
            )),
            Dane::NoRecords if only => refuse(format!("no DNSSEC-validated TLSA records for {at}")),
            Dane::Insecure | Dane::NoRecords => Policy::Level(TlsLevel::May),
            Dane::Records(records) => {
                let records: Vec<tls::dane::TlsaRecord> = records
                    .iter()
                    .map(|r| tls::dane::TlsaRecord {
                        usage: r.usage,
                        selector: r.selector,
                        matching: r.matching,
                        data: r.data.clone(),
                    })
                    .filter(|r| r.usable())
                    .collect();
                if !records.is_empty() {
                    let mut names = vec![host.to_string()];
                    let domain = nexthop_domain(nexthop);
                    if !domain.is_empty() && domain != host {
                        names.push(domain.to_string());
                    }
                    Policy::Tlsa(tls::dane::dane_client_config(records, names))
                } else if only {
                    refuse(format!("all TLSA records for {at} are unusable"))
                } else {
                    // Unusable records still say TLS is offered (RFC 7672 2.2).
                    Policy::Level(TlsLevel::Encrypt)
                }
            }
        }
    }

    /// The level whose certificate rules apply after the handshake (the
    /// TLSA records' were applied during it).
    pub fn level(&self) -> TlsLevel {
        match self {
            Policy::Level(l) => *l,
            Policy::Tlsa(_) | Policy::Refuse { .. } => TlsLevel::Encrypt,
        }
    }

    /// What the session does about STARTTLS.
    pub fn client_tls(&self) -> ClientTls {
        match self {
            Policy::Level(TlsLevel::None) => ClientTls::Disabled,
            Policy::Level(TlsLevel::May) => ClientTls::Opportunistic,
            _ => ClientTls::Required,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::delivery::Tlsa;

    fn rec(usage: u8) -> Tlsa {
        Tlsa {
            usage,
            selector: 1,
            matching: 1,
            data: vec![9; 32],
        }
    }

    fn word(p: &Policy) -> String {
        match p {
            Policy::Level(l) => format!("{l:?}"),
            Policy::Tlsa(_) => "tlsa".into(),
            Policy::Refuse { why, cause: None } => format!("refuse: {why}"),
            Policy::Refuse {
                why,
                cause: Some(c),
            } => format!("refuse: {why} [{c}]"),
        }
    }

    #[test]
    fn rfc_7672_fallbacks_per_level() {
        let usable = Dane::Records(vec![rec(1), rec(3)]);
        let unusable = Dane::Records(vec![rec(0), rec(1)]);
        let failed = Dane::Failed(mail::Status::new(
            mail::StatusCode::known(4, 4, 3),
            "DNS server failure: SERVFAIL",
        ));
        let cases = [
            (TlsLevel::Dane, &Dane::Insecure, "May"),
            (TlsLevel::Dane, &Dane::NoRecords, "May"),
            (TlsLevel::Dane, &unusable, "Encrypt"),
            (TlsLevel::Dane, &usable, "tlsa"),
            // Postfix's reason, one status; DNS's status kept for the log.
            (TlsLevel::Dane, &failed, "refuse: TLSA lookup error for mx.example.test:25 [4.4.3 DNS server failure: SERVFAIL]"),
            (TlsLevel::DaneOnly, &failed, "refuse: TLSA lookup error for mx.example.test:25 [4.4.3 DNS server failure: SERVFAIL]"),
            (TlsLevel::DaneOnly, &Dane::Insecure, "refuse: no DNSSEC-validated MX and address records for mx.example.test:25, as dane-only requires"),
            (TlsLevel::DaneOnly, &Dane::NoRecords, "refuse: no DNSSEC-validated TLSA records for mx.example.test:25"),
            (TlsLevel::DaneOnly, &unusable, "refuse: all TLSA records for mx.example.test:25 are unusable"),
            (TlsLevel::DaneOnly, &usable, "tlsa"),
            // Other levels ignore DNSSEC altogether.
            (TlsLevel::Verify, &usable, "Verify"),
            (TlsLevel::May, &failed, "May"),
        ];
        for (level, dane, want) in cases {
            let p = Policy::new(level, dane, "mx.example.test", "example.test", 25);
            assert_eq!(word(&p), want, "{level:?} {dane:?}");
        }
        let p = Policy::new(
            TlsLevel::Dane,
            &usable,
            "mx.example.test",
            "example.test",
            25,
        );
        assert_eq!(p.client_tls(), ClientTls::Required);
        let p = Policy::new(TlsLevel::Dane, &Dane::Insecure, "mx", "example.test", 25);
        assert_eq!(p.client_tls(), ClientTls::Opportunistic);
    }
}
