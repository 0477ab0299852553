//! DANE for the SMTP client (RFC 7672, RFC 7671): server certificates
//! checked against DNSSEC-validated TLSA records.
//!
//! Only what SMTP may use counts (RFC 7672 3.1): DANE-EE(3) and DANE-TA(2),
//! selector 0 (the whole certificate) or 1 (its public key), matching
//! type 0 (exact), 1 (SHA-256) or 2 (SHA-512). PKIX-TA(0) and PKIX-EE(1)
//! records, other values and digests of the wrong length are unusable;
//! the caller decides what a set of only unusable records means.
//!
//! A DANE-EE(3) record matches the server's own certificate, and nothing
//! else is checked: not its names, not its dates (RFC 7672 3.1.1). A
//! DANE-TA(2) record names a certificate of the chain the server sent
//! (RFC 7671 5.2.2 wants it there): that certificate becomes the only
//! trust anchor, the chain from the server's certificate to it must
//! verify (signatures and dates), and the server's certificate must carry
//! one of the reference names (the MX host, the next-hop domain), as
//! RFC 7672 3.2.2 says.
//!
//! [`DaneVerifier`] is a rustls certificate verifier, so a certificate that
//! matches no record ends the handshake; [`dane_failure`] finds the reason
//! in the error the handshake returns. Limit: a DANE-TA(2) public key
//! that is not in the chain (a bare key, `2 1 0`) is not used.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme};

/// One TLSA record (RFC 6698 2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsaRecord {
    /// Certificate usage (2 DANE-TA, 3 DANE-EE).
    pub usage: u8,
    /// 0 the certificate, 1 its SubjectPublicKeyInfo.
    pub selector: u8,
    /// 0 exact, 1 SHA-256, 2 SHA-512.
    pub matching: u8,
    /// The certificate association data.
    pub data: Vec<u8>,
}

impl TlsaRecord {
    /// Whether an SMTP client may use it (RFC 7672 3.1).
    pub fn usable(&self) -> bool {
        let length_ok = match self.matching {
            0 => !self.data.is_empty(),
            1 => self.data.len() == 32,
            2 => self.data.len() == 64,
            _ => false,
        };
        matches!(self.usage, 2 | 3) && self.selector <= 1 && length_ok
    }

    /// Whether `cert` is what the record names (usage aside).
    fn matches(&self, cert: &CertificateDer<'_>) -> bool {
        let selected: Vec<u8> = match self.selector {
            0 => cert.as_ref().to_vec(),
            1 => match webpki::EndEntityCert::try_from(cert) {
                Ok(c) => c.subject_public_key_info().as_ref().to_vec(),
                Err(_) => return false,
            },
            _ => return false,
        };
        let digest = |alg| ring::digest::digest(alg, &selected).as_ref().to_vec();
        let value = match self.matching {
            0 => selected,
            1 => digest(&ring::digest::SHA256),
            2 => digest(&ring::digest::SHA512),
            _ => return false,
        };
        // The data is public: a comparison in constant time buys nothing.
        value == self.data
    }
}

impl std::fmt::Display for TlsaRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {} ", self.usage, self.selector, self.matching)?;
        // Enough of the data to recognise it in a zone file.
        for b in self.data.iter().take(8) {
            write!(f, "{b:02x}")?;
        }
        if self.data.len() > 8 {
            f.write_str("...")?;
        }
        Ok(())
    }
}

/// Why a certificate chain did not match the TLSA records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaneError(pub String);

impl std::fmt::Display for DaneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DaneError {}

/// Checks `chain` (the server's certificate first) against the usable
/// records; `names` are the reference names for DANE-TA(2), in the
/// pattern form of [`crate::check_peer`]. Says which record matched.
pub fn verify_dane(
    chain: &[CertificateDer<'_>],
    records: &[TlsaRecord],
    names: &[String],
    now: UnixTime,
) -> Result<String, DaneError> {
    let Some(ee) = chain.first() else {
        return Err(DaneError("no certificate presented".into()));
    };
    let usable: Vec<&TlsaRecord> = records.iter().filter(|r| r.usable()).collect();
    if let Some(r) = usable.iter().find(|r| r.usage == 3 && r.matches(ee)) {
        return Ok(format!("DANE-EE TLSA {r} matched the server certificate"));
    }
    let mut problems = Vec::new();
    for r in usable.iter().filter(|r| r.usage == 2) {
        for (depth, ca) in chain.iter().enumerate().skip(1) {
            if !r.matches(ca) {
                continue;
            }
            match chain_to(ee, &chain[1..], ca, now) {
                Ok(()) => {}
                Err(e) => {
                    problems.push(format!("chain to the TLSA {r} anchor: {e}"));
                    continue;
                }
            }
            let cert_names = crate::verify::cert_names(ee);
            match cert_names
                .iter()
                .find(|n| names.iter().any(|p| crate::verify::name_matches(n, p)))
            {
                Some(n) => {
                    return Ok(format!(
                        "DANE-TA TLSA {r} matched the certificate at depth {depth}, name {n}"
                    ))
                }
                None => problems.push(format!(
                    "certificate names [{}] do not match {}",
                    cert_names.join(", "),
                    names.join(", ")
                )),
            }
        }
    }
    let mut why = "no TLSA record matched the certificate chain".to_string();
    if !problems.is_empty() {
        why = format!("{why} ({})", problems.join("; "));
    }
    Err(DaneError(why))
}

/// Verifies the path from `ee` to `anchor`, the only trust anchor.
fn chain_to(
    ee: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    anchor: &CertificateDer<'_>,
    now: UnixTime,
) -> Result<(), String> {
    let mut roots = RootCertStore::empty();
    roots
        .add(anchor.clone().into_owned())
        .map_err(|e| format!("unusable anchor: {e}"))?;
    let parsed = ParsedCertificate::try_from(ee).map_err(|e| e.to_string())?;
    let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    rustls::client::verify_server_cert_signed_by_trust_anchor(
        &parsed,
        &roots,
        intermediates,
        now,
        algs.all,
    )
    .map_err(|e| crate::verify::describe(&e))
}

/// A rustls verifier that accepts exactly what [`verify_dane`] accepts.
#[derive(Debug)]
pub struct DaneVerifier {
    records: Vec<TlsaRecord>,
    names: Vec<String>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl DaneVerifier {
    /// A verifier for these records and reference names.
    pub fn new(records: Vec<TlsaRecord>, names: Vec<String>) -> DaneVerifier {
        DaneVerifier {
            records,
            names,
            provider: Arc::new(rustls::crypto::ring::default_provider()),
        }
    }
}

impl ServerCertVerifier for DaneVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut chain = Vec::with_capacity(1 + intermediates.len());
        chain.push(end_entity.clone());
        chain.extend(intermediates.iter().cloned());
        verify_dane(&chain, &self.records, &self.names, now)
            .map(|_| ServerCertVerified::assertion())
            .map_err(|e| {
                rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(e))))
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A client configuration whose handshake succeeds only with a server
/// certificate that the usable `records` match (one per connection: the
/// records are the host's).
pub fn dane_client_config(
    records: Vec<TlsaRecord>,
    names: Vec<String>,
) -> Arc<rustls::ClientConfig> {
    let v = DaneVerifier::new(records, names);
    let p = v.provider.clone();
    let cfg = rustls::ClientConfig::builder_with_provider(p)
        .with_safe_default_protocol_versions()
        .expect("tls: ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(v))
        .with_no_client_auth();
    Arc::new(cfg)
}

/// The TLSA mismatch behind a failed handshake, if that is what failed it.
pub fn dane_failure(e: &std::io::Error) -> Option<String> {
    let rustls::Error::InvalidCertificate(CertificateError::Other(other)) =
        e.get_ref()?.downcast_ref::<rustls::Error>()?
    else {
        return None;
    };
    other.0.downcast_ref::<DaneError>().map(|d| d.0.clone())
}
