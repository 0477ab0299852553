//! Private keys: read from PEM files (PKCS#8 `PRIVATE KEY` holding RSA or
//! Ed25519, or PKCS#1 `RSA PRIVATE KEY` as older opendkim-genkey wrote),
//! the signatures DKIM makes with them, and the public half as the DNS
//! TXT record publishes it. RSA keys under 2048 bits are refused (ring
//! does not sign with them, and RFC 8301 retires 1024-bit keys).

use std::fmt;
use std::path::Path;

use ring::rand::SystemRandom;
use ring::signature::{self, Ed25519KeyPair, KeyPair, RsaKeyPair};

use crate::base64;

/// The signing algorithm, as `a=` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// `rsa-sha256` (RFC 6376).
    RsaSha256,
    /// `ed25519-sha256` (RFC 8463).
    Ed25519Sha256,
}

impl Algorithm {
    /// Its name in `a=`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::RsaSha256 => "rsa-sha256",
            Algorithm::Ed25519Sha256 => "ed25519-sha256",
        }
    }
}

/// Why a key cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The file could not be read.
    Read(String),
    /// No PEM block, or one whose base64 does not decode.
    NotPem,
    /// A PEM block of a kind that is not a private key.
    Label(String),
    /// The key inside was refused (kind, size or encoding).
    Rejected(String),
    /// Signing failed (the system's random source).
    Sign,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Read(e) => write!(f, "{e}"),
            KeyError::NotPem => f.write_str("no PEM private key block"),
            KeyError::Label(l) => write!(f, "PEM block \"{l}\" is not a private key"),
            KeyError::Rejected(e) => write!(
                f,
                "unusable key: {e} (RSA of 2048 to 8192 bits or Ed25519, PKCS#8 or PKCS#1)"
            ),
            KeyError::Sign => f.write_str("signing failed"),
        }
    }
}

impl std::error::Error for KeyError {}

enum Pair {
    Rsa(RsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

/// A private key DKIM signs with.
pub struct PrivateKey {
    pair: Pair,
    rng: SystemRandom,
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateKey({})", self.algorithm().name())
    }
}

impl PrivateKey {
    /// Reads a PEM key file.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let text =
            std::fs::read(path).map_err(|e| KeyError::Read(format!("{}: {e}", path.display())))?;
        Self::from_pem(&text)
    }

    /// Parses PEM text.
    pub fn from_pem(text: &[u8]) -> Result<Self, KeyError> {
        let (label, der) = pem_block(text).ok_or(KeyError::NotPem)?;
        let reject = |e: ring::error::KeyRejected| KeyError::Rejected(e.to_string());
        let pair = match label.as_str() {
            "PRIVATE KEY" => match RsaKeyPair::from_pkcs8(&der) {
                Ok(k) => Pair::Rsa(k),
                Err(rsa) => match Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der) {
                    Ok(k) => Pair::Ed25519(k),
                    // Name the RSA reason unless the key was Ed25519-shaped.
                    Err(_) => return Err(reject(rsa)),
                },
            },
            "RSA PRIVATE KEY" => Pair::Rsa(RsaKeyPair::from_der(&der).map_err(reject)?),
            other => return Err(KeyError::Label(other.to_string())),
        };
        Ok(PrivateKey {
            pair,
            rng: SystemRandom::new(),
        })
    }

    /// The algorithm this key signs with.
    pub fn algorithm(&self) -> Algorithm {
        match self.pair {
            Pair::Rsa(_) => Algorithm::RsaSha256,
            Pair::Ed25519(_) => Algorithm::Ed25519Sha256,
        }
    }

    /// Bytes in a signature.
    pub fn signature_len(&self) -> usize {
        match &self.pair {
            Pair::Rsa(k) => k.public().modulus_len(),
            Pair::Ed25519(_) => 64,
        }
    }

    /// Signs the header hash input (RFC 6376 section 3.7): RSA over the
    /// data with SHA-256; Ed25519 over its SHA-256 digest (RFC 8463).
    pub fn sign(&self, data: &[u8]) -> Result<Vec<u8>, KeyError> {
        match &self.pair {
            Pair::Rsa(k) => {
                let mut sig = vec![0; k.public().modulus_len()];
                k.sign(&signature::RSA_PKCS1_SHA256, &self.rng, data, &mut sig)
                    .map_err(|_| KeyError::Sign)?;
                Ok(sig)
            }
            Pair::Ed25519(k) => {
                let digest = ring::digest::digest(&ring::digest::SHA256, data);
                Ok(k.sign(digest.as_ref()).as_ref().to_vec())
            }
        }
    }

    /// The DNS TXT record's text: `v=DKIM1; k=rsa; p=…` (the RSA key as a
    /// SubjectPublicKeyInfo, as opendkim-genkey publishes it) or `k=ed25519`
    /// with the raw 32-byte key (RFC 8463).
    pub fn dns_record(&self) -> String {
        match &self.pair {
            Pair::Rsa(k) => format!(
                "v=DKIM1; k=rsa; p={}",
                base64::encode(&rsa_spki(k.public().as_ref()))
            ),
            Pair::Ed25519(k) => format!(
                "v=DKIM1; k=ed25519; p={}",
                base64::encode(k.public_key().as_ref())
            ),
        }
    }
}

/// A new Ed25519 key as PKCS#8 PEM text.
pub fn generate_ed25519() -> Result<String, KeyError> {
    let doc = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).map_err(|_| KeyError::Sign)?;
    Ok(pem("PRIVATE KEY", doc.as_ref()))
}

/// `der` as a PEM block.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The first PEM block: its label and decoded bytes.
fn pem_block(text: &[u8]) -> Option<(String, Vec<u8>)> {
    let text = std::str::from_utf8(text).ok()?;
    let start = text.find("-----BEGIN ")?;
    let rest = &text[start + 11..];
    let label_end = rest.find("-----")?;
    let label = rest[..label_end].to_string();
    let body = &rest[label_end + 5..];
    let end = body.find(&format!("-----END {label}-----"))?;
    let der = base64::decode(&body.as_bytes()[..end])?;
    Some((label, der))
}

fn der_len(n: usize, out: &mut Vec<u8>) {
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
}

/// SubjectPublicKeyInfo around a PKCS#1 RSAPublicKey.
fn rsa_spki(pkcs1: &[u8]) -> Vec<u8> {
    const ALG: &[u8] = &[
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
    ];
    let mut bits = vec![0x03];
    der_len(pkcs1.len() + 1, &mut bits);
    bits.push(0);
    bits.extend_from_slice(pkcs1);
    let mut out = vec![0x30];
    der_len(ALG.len() + bits.len(), &mut out);
    out.extend_from_slice(ALG);
    out.extend_from_slice(&bits);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ed25519_round_trip() {
        let pem_text = generate_ed25519().unwrap();
        let key = PrivateKey::from_pem(pem_text.as_bytes()).unwrap();
        assert_eq!(key.algorithm(), Algorithm::Ed25519Sha256);
        let sig = key.sign(b"data").unwrap();
        assert_eq!(sig.len(), key.signature_len());
        let record = key.dns_record();
        let p = record.strip_prefix("v=DKIM1; k=ed25519; p=").unwrap();
        let public = base64::decode(p.as_bytes()).unwrap();
        let digest = ring::digest::digest(&ring::digest::SHA256, b"data");
        signature::UnparsedPublicKey::new(&signature::ED25519, &public)
            .verify(digest.as_ref(), &sig)
            .unwrap();
    }

    #[test]
    fn refusals_are_named() {
        assert_eq!(PrivateKey::from_pem(b"junk").unwrap_err(), KeyError::NotPem);
        let cert = pem("CERTIFICATE", b"xyz");
        assert_eq!(
            PrivateKey::from_pem(cert.as_bytes()).unwrap_err(),
            KeyError::Label("CERTIFICATE".into())
        );
        let bad = pem("PRIVATE KEY", b"not a key");
        assert!(matches!(
            PrivateKey::from_pem(bad.as_bytes()),
            Err(KeyError::Rejected(_))
        ));
    }

    #[test]
    fn der_lengths() {
        let mut v = Vec::new();
        der_len(0x7f, &mut v);
        der_len(0x80, &mut v);
        der_len(0x1234, &mut v);
        assert_eq!(v, [0x7f, 0x81, 0x80, 0x82, 0x12, 0x34]);
    }
}
