//! Mutual TLS between clusterd and the instances' qmgr.
//!
//! Both ends present a certificate signed by the CA of
//! `cluster_tls_CAfile` and verify the other's against it: clusterd
//! refuses a client without one (the handshake fails and clusterd logs
//! why), and qmgr checks clusterd's against the host of `cluster_server`.
//! An instance's certificate carries its `myhostname`; [`peer_names`]
//! gives the names, for the log.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

use crate::{load_trust_anchors, TlsError};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn chain_and_key(
    cert_file: &Path,
    key_file: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let file_err = |path: &Path, problem: String| TlsError::File {
        path: path.to_path_buf(),
        problem,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| file_err(cert_file, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(cert_file, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_err(
            cert_file,
            "no certificate found (expected PEM)".into(),
        ));
    }
    let key =
        PrivateKeyDer::from_pem_file(key_file).map_err(|e| file_err(key_file, e.to_string()))?;
    Ok((certs, key))
}

/// clusterd's side: its certificate, and clients' verified against `ca_file`.
pub fn mutual_server_config(
    cert_file: &Path,
    key_file: &Path,
    ca_file: &Path,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let roots = load_trust_anchors(ca_file)?;
    let (certs, key) = chain_and_key(cert_file, key_file)?;
    let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| TlsError::File {
            path: ca_file.to_path_buf(),
            problem: e.to_string(),
        })?;
    let cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(TlsError::Rustls)?;
    Ok(Arc::new(cfg))
}

/// An instance's side: its certificate, and clusterd's verified against `ca_file`.
pub fn mutual_client_config(
    cert_file: &Path,
    key_file: &Path,
    ca_file: &Path,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let roots = load_trust_anchors(ca_file)?;
    let (certs, key) = chain_and_key(cert_file, key_file)?;
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(TlsError::Rustls)?;
    Ok(Arc::new(cfg))
}

/// The DNS names of a peer's end-entity certificate.
pub fn peer_names(chain: &[CertificateDer<'_>]) -> Vec<String> {
    let Some(ee) = chain.first() else {
        return Vec::new();
    };
    match webpki::EndEntityCert::try_from(ee) {
        Ok(c) => c.valid_dns_names().map(|n| n.to_string()).collect(),
        Err(_) => Vec::new(),
    }
}
