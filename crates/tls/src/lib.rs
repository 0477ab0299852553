//! TLS for Sluice's SMTP server and client, on rustls with the ring provider.
//!
//! [`Stream`] wraps a non-blocking TCP (or Unix-domain) socket that starts in plaintext and
//! may switch to TLS (STARTTLS) or start in TLS (implicit TLS, port 465).
//! Reads append decrypted bytes to the caller's buffer up to a bound the
//! caller gives, so memory stays bounded whatever the peer sends; writes
//! are queued and flushed as the socket allows — the shape of rustls's
//! `tlsserver-mio` example, without its unbounded buffers.
//!
//! [`load_server_config`] reads the certificate chain and key named in
//! main.cf and says which file is wrong when one is. [`check_peer`] classes
//! a server's certificate for the client's `verify` and `secure` levels.
//! [`mutual_server_config`] and [`mutual_client_config`] are clusterd's
//! mutual TLS. [`dane`] checks a server's certificate against its TLSA
//! records (RFC 7672) during the handshake.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
pub mod dane;
mod mutual;
mod stream;
mod verify;

pub use config::{insecure_client_config, load_server_config, server_name, TlsError};
pub use mutual::{mutual_client_config, mutual_server_config, peer_names};
pub use stream::{ReadStatus, Sock, Stream};
pub use verify::{check_peer, load_trust_anchors, PeerTrust, SYSTEM_CA_FILE};

/// What a finished handshake agreed, for Received: headers and log lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsInfo {
    /// e.g. `TLSv1.3`.
    pub version: String,
    /// e.g. `TLS13_AES_256_GCM_SHA384`.
    pub cipher: String,
}
