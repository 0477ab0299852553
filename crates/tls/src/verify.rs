//! Server certificate checks for the SMTP client, the way Postfix makes them.
//!
//! The handshake itself accepts any certificate (its signature over the
//! handshake is still checked, so the peer holds the key); once it is done,
//! [`check_peer`] verifies the chain against the trust anchors and matches
//! the certificate's names against a list of patterns, and classes the
//! connection as Postfix does: `Untrusted`, `Trusted` (chain good, no name
//! matched) or `Verified`. The delivery agent decides what its security
//! level requires, so opportunistic TLS can still log what it got.
//!
//! Patterns are Postfix's internal form of `smtp_tls_*_cert_match`: a name
//! matches itself; a name with a leading dot matches any name below it
//! (`dot-nexthop`). A certificate name `*.example.com` matches one label
//! in its place. Only subjectAltName DNS names are used (RFC 6125, rustls);
//! Postfix's fallback to the CommonName of a certificate without them is
//! not made. Revocation is not checked (neither does Postfix by default).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::RootCertStore;

use crate::TlsError;

/// Where trust anchors come from when `smtp_tls_CAfile` is empty.
pub const SYSTEM_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Reads a PEM bundle of trust anchors; certificates that cannot be used as
/// anchors are skipped (system bundles hold a few), but a file with none is
/// an error.
pub fn load_trust_anchors(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let file_err = |problem: String| TlsError::File {
        path: path.to_path_buf(),
        problem,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(e.to_string()))?;
    let mut roots = RootCertStore::empty();
    let (added, _skipped) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(file_err(
            "no usable CA certificate found (expected PEM)".into(),
        ));
    }
    Ok(Arc::new(roots))
}

/// What the server's certificate proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerTrust {
    /// No certificate was presented.
    Anonymous,
    /// The chain did not verify; why.
    Untrusted(String),
    /// The chain verified but no name matched; the names the certificate has.
    Trusted(Vec<String>),
    /// The chain verified and this certificate name matched a pattern.
    Verified(String),
}

impl PeerTrust {
    /// Postfix's word for the connection in "... TLS connection established".
    pub fn word(&self) -> &'static str {
        match self {
            PeerTrust::Anonymous => "Anonymous",
            PeerTrust::Untrusted(_) => "Untrusted",
            PeerTrust::Trusted(_) => "Trusted",
            PeerTrust::Verified(_) => "Verified",
        }
    }
}

/// Verifies `chain` (end entity first, as the server sent it) against
/// `roots` at time `now`, then matches its names against `patterns`.
pub fn check_peer(
    chain: &[CertificateDer<'_>],
    roots: &RootCertStore,
    patterns: &[String],
    now: UnixTime,
) -> PeerTrust {
    let Some(ee) = chain.first() else {
        return PeerTrust::Anonymous;
    };
    let parsed = match ParsedCertificate::try_from(ee) {
        Ok(p) => p,
        Err(e) => return PeerTrust::Untrusted(format!("unusable certificate: {e}")),
    };
    let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    if let Err(e) = rustls::client::verify_server_cert_signed_by_trust_anchor(
        &parsed,
        roots,
        &chain[1..],
        now,
        algs.all,
    ) {
        return PeerTrust::Untrusted(describe(&e));
    }
    let names = cert_names(ee);
    for name in &names {
        if patterns.iter().any(|p| name_matches(name, p)) {
            return PeerTrust::Verified(name.clone());
        }
    }
    PeerTrust::Trusted(names)
}

/// The subjectAltName DNS names of a certificate, wildcards included.
pub(crate) fn cert_names(ee: &CertificateDer<'_>) -> Vec<String> {
    webpki::EndEntityCert::try_from(ee)
        .map(|c| c.valid_dns_names().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Postfix's `match_servername`: exact (no case), `.domain` for any name
/// below the domain, and a certificate wildcard standing for one label.
pub(crate) fn name_matches(cert_name: &str, pattern: &str) -> bool {
    let cert_name = cert_name.trim_end_matches('.');
    let pattern = pattern.trim_end_matches('.');
    if pattern.is_empty() {
        return false;
    }
    if let Some(domain) = pattern.strip_prefix('.') {
        // ".example.com" matches "mx.example.com" and "*.example.com", not
        // "example.com" itself (that is what plain "nexthop" is for).
        return !domain.is_empty()
            && cert_name.len() > pattern.len()
            && cert_name[cert_name.len() - pattern.len()..].eq_ignore_ascii_case(pattern);
    }
    if cert_name.eq_ignore_ascii_case(pattern) {
        return true;
    }
    match (cert_name.strip_prefix("*."), pattern.split_once('.')) {
        (Some(parent), Some((label, rest))) => {
            !label.is_empty() && !parent.is_empty() && parent.eq_ignore_ascii_case(rest)
        }
        _ => false,
    }
}

/// Postfix-like wording of a chain error.
pub(crate) fn describe(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => "unable to get local issuer certificate".into(),
            C::Expired | C::ExpiredContext { .. } => "certificate has expired".into(),
            C::NotValidYet | C::NotValidYetContext { .. } => "certificate is not yet valid".into(),
            C::BadSignature => "certificate signature failure".into(),
            other => format!("{other:?}"),
        },
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_as_in_postfix() {
        let cases = [
            ("mx.example.com", "mx.example.com", true),
            ("MX.Example.COM", "mx.example.com", true),
            ("mx.example.com.", "mx.example.com", true),
            ("mx.example.com", "example.com", false),
            ("mx.example.com", ".example.com", true),
            ("a.b.example.com", ".example.com", true),
            ("example.com", ".example.com", false),
            ("badexample.com", ".example.com", false),
            ("*.example.com", "mx.example.com", true),
            ("*.example.com", "a.mx.example.com", false),
            ("*.example.com", "example.com", false),
            ("*.example.com", ".example.com", true),
            ("mx.example.com", "", false),
            ("mx.example.com", ".", false),
        ];
        for (cert, pat, want) in cases {
            assert_eq!(name_matches(cert, pat), want, "{cert} vs {pat}");
        }
    }

    #[test]
    fn no_certificate_is_anonymous() {
        let roots = RootCertStore::empty();
        assert_eq!(
            check_peer(&[], &roots, &[], UnixTime::now()),
            PeerTrust::Anonymous
        );
    }

    #[test]
    fn garbage_certificate_is_untrusted() {
        let roots = RootCertStore::empty();
        let junk = CertificateDer::from(vec![0x30, 0x03, 0x01, 0x01, 0x00]);
        assert!(matches!(
            check_peer(&[junk], &roots, &["x".into()], UnixTime::now()),
            PeerTrust::Untrusted(_)
        ));
    }

    #[test]
    fn a_bundle_without_certificates_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ca.pem");
        std::fs::write(&p, "not pem\n").unwrap();
        let e = load_trust_anchors(&p).unwrap_err().to_string();
        assert!(e.contains("ca.pem") && e.contains("no usable CA"), "{e}");
        let missing = dir.path().join("none.pem");
        let e = load_trust_anchors(&missing).unwrap_err().to_string();
        assert!(e.contains("none.pem"), "{e}");
    }

    #[test]
    fn the_system_bundle_loads() {
        if Path::new(SYSTEM_CA_FILE).is_file() {
            assert!(!load_trust_anchors(Path::new(SYSTEM_CA_FILE))
                .unwrap()
                .is_empty());
        }
    }
}
