//! Fetching a policy: one HTTPS GET, as RFC 8461 section 3.3 allows it.
//!
//! Blocking: run it in a thread or a process of its own, never in an
//! event loop. The caller resolves `mta-sts.<domain>` (through its own
//! DNS, not the system resolver) and passes the addresses; each is tried
//! in turn. The server's certificate must chain to the trust anchors and
//! name `mta-sts.<domain>` (PKIX, as rustls checks it); a failure there is
//! told apart ([`FetchError::Webpki`]) because TLS reports count it
//! separately. Only `200` is accepted (redirects are not followed), the
//! media type must be `text/plain`, the body may be at most
//! [`MAX_POLICY`] bytes, and the whole exchange has one deadline. Both
//! `Content-Length` and chunked bodies are read.
//!
//! A small HTTP/1.1 client of our own over rustls, rather than ureq:
//! ureq resolves host names with the system resolver, while the policy
//! host must come from the DNS servers main.cf names (as every other
//! name the mail system looks up); and the RFC's restrictions (no
//! redirect, one status, one media type, a size cap) leave one request
//! shape to support.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest policy body read (RFC 8461 suggests 64 KiB).
pub const MAX_POLICY: usize = 64 * 1024;

/// Room for the status line and headers.
const MAX_HEAD: usize = 16 * 1024;

/// Why a fetch failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FetchError {
    /// The server's certificate did not verify for `mta-sts.<domain>`.
    Webpki(String),
    /// Anything else: no address, connection, HTTP status, media type,
    /// size, time.
    Fetch(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Webpki(e) => write!(f, "certificate: {e}"),
            FetchError::Fetch(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for FetchError {}

/// A TLS client configuration that verifies servers against `roots`.
pub fn client_config(roots: Arc<rustls::RootCertStore>) -> Arc<rustls::ClientConfig> {
    let p = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(p)
        .with_safe_default_protocol_versions()
        .expect("sts: ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(cfg)
}

/// GETs `https://mta-sts.<domain>/.well-known/mta-sts.txt` from the first
/// of `addrs` (port 443 unless given) that answers; the body as text.
pub fn fetch(
    domain: &str,
    addrs: &[SocketAddr],
    tls: &Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<String, FetchError> {
    let host = format!("mta-sts.{domain}");
    let deadline = Instant::now() + timeout;
    let mut last = FetchError::Fetch(format!("{host}: no address"));
    for addr in addrs {
        match fetch_from(&host, *addr, tls, deadline) {
            Ok(body) => return Ok(body),
            // Another address will present the same certificate.
            Err(e @ FetchError::Webpki(_)) => return Err(e),
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    Err(last)
}

/// The addresses of `ips` at port 443.
pub fn https_addrs(ips: &[IpAddr]) -> Vec<SocketAddr> {
    ips.iter().map(|ip| SocketAddr::new(*ip, 443)).collect()
}

fn left(deadline: Instant) -> Result<Duration, FetchError> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err(FetchError::Fetch("timed out".into()))
    } else {
        Ok(d)
    }
}

fn fetch_from(
    host: &str,
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    deadline: Instant,
) -> Result<String, FetchError> {
    let fe = |e: String| FetchError::Fetch(format!("{host}[{}]: {e}", addr.ip()));
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| fe(format!("bad name: {e}")))?;
    let sock = TcpStream::connect_timeout(&addr, left(deadline)?).map_err(|e| fe(e.to_string()))?;
    let conn = rustls::ClientConnection::new(tls.clone(), name).map_err(|e| fe(e.to_string()))?;
    let mut s = rustls::StreamOwned::new(conn, sock);
    let req = format!(
        "GET /.well-known/mta-sts.txt HTTP/1.1\r\nHost: {host}\r\nUser-Agent: Sluice MTA-STS\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    );
    let io = |e: std::io::Error| -> FetchError {
        // rustls reports a certificate it refused as an InvalidData error
        // wrapping the rustls error.
        if let Some(rustls::Error::InvalidCertificate(c)) =
            e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
        {
            return FetchError::Webpki(format!("{host}[{}]: {c:?}", addr.ip()));
        }
        fe(e.to_string())
    };
    s.sock
        .set_write_timeout(Some(left(deadline)?))
        .map_err(io)?;
    s.write_all(req.as_bytes()).map_err(io)?;
    s.flush().map_err(io)?;
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut closed = false;
    loop {
        if let Some(done) = complete(&buf, closed).map_err(fe)? {
            return Ok(done);
        }
        if closed {
            return Err(fe("connection closed before the end of the response".into()));
        }
        if buf.len() > MAX_HEAD + MAX_POLICY + 4096 {
            return Err(fe(format!("policy larger than {MAX_POLICY} bytes")));
        }
        s.sock.set_read_timeout(Some(left(deadline)?)).map_err(io)?;
        match s.read(&mut chunk) {
            Ok(0) => closed = true,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            // Many servers close without TLS's close_notify; what was
            // read is judged by its length fields.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => closed = true,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return Err(fe("timed out".into()))
            }
            Err(e) => return Err(io(e)),
        }
    }
}

/// The policy once `buf` holds a whole response: `Ok(None)` while more is
/// needed; an error for a response that cannot be used.
fn complete(buf: &[u8], closed: bool) -> Result<Option<String>, String> {
    let Some(end) = find(buf, b"\r\n\r\n") else {
        if buf.len() > MAX_HEAD {
            return Err("response header too long".into());
        }
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "response header is not text")?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or("");
    let mut words = status.splitn(3, ' ');
    let (ver, code) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if !ver.starts_with("HTTP/1.") {
        return Err(format!(
            "not an HTTP response: \"{}\"",
            status.escape_debug()
        ));
    }
    if code != "200" {
        // RFC 8461 3.3: redirects are not followed; only 200 is a policy.
        return Err(format!("HTTP status \"{}\"", status.escape_debug()));
    }
    let (mut ctype, mut length, mut chunked) = (None, None, false);
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            return Err(format!("bad header line \"{}\"", l.escape_debug()));
        };
        let v = v.trim();
        match k.trim().to_ascii_lowercase().as_str() {
            "content-type" => ctype = Some(v.to_ascii_lowercase()),
            "content-length" => {
                length = Some(v.parse::<usize>().map_err(|_| "bad Content-Length")?)
            }
            "transfer-encoding" => chunked = v.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    let media = ctype
        .as_deref()
        .map(|c| c.split(';').next().unwrap_or("").trim());
    if media != Some("text/plain") {
        return Err(format!(
            "media type {} is not text/plain",
            ctype.as_deref().unwrap_or("(none)")
        ));
    }
    let body = &buf[end + 4..];
    let body: Vec<u8> = if chunked {
        match dechunk(body)? {
            Some(b) => b,
            None => return Ok(None),
        }
    } else if let Some(n) = length {
        if n > MAX_POLICY {
            return Err(format!("policy larger than {MAX_POLICY} bytes"));
        }
        if body.len() < n {
            return Ok(None);
        }
        body[..n].to_vec()
    } else if closed {
        body.to_vec()
    } else {
        return Ok(None);
    };
    if body.len() > MAX_POLICY {
        return Err(format!("policy larger than {MAX_POLICY} bytes"));
    }
    String::from_utf8(body)
        .map(Some)
        .map_err(|_| "policy is not UTF-8 text".into())
}

/// A chunked body once its last chunk is in.
fn dechunk(mut b: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = find(b, b"\r\n") else {
            return Ok(None);
        };
        let size = std::str::from_utf8(&b[..eol]).map_err(|_| "bad chunk size")?;
        let size = size.split(';').next().unwrap_or("").trim();
        let n = usize::from_str_radix(size, 16).map_err(|_| "bad chunk size")?;
        if out.len() + n > MAX_POLICY {
            return Err(format!("policy larger than {MAX_POLICY} bytes"));
        }
        b = &b[eol + 2..];
        if n == 0 {
            return Ok(Some(out));
        }
        if b.len() < n + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&b[..n]);
        b = &b[n + 2..];
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "version: STSv1\r\nmode: enforce\r\nmx: a.test\r\nmax_age: 60\r\n";

    #[test]
    fn responses_are_read_as_the_rfc_allows() {
        let ok = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n{P}", P.len());
        assert_eq!(complete(ok.as_bytes(), false).unwrap().as_deref(), Some(P));
        assert_eq!(
            complete(&ok.as_bytes()[..ok.len() - 3], false).unwrap(),
            None
        );
        let chunked = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{P}\r\n0\r\n\r\n",
            P.len()
        );
        assert_eq!(
            complete(chunked.as_bytes(), false).unwrap().as_deref(),
            Some(P)
        );
        let bare = format!("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n{P}");
        assert_eq!(complete(bare.as_bytes(), false).unwrap(), None);
        assert_eq!(complete(bare.as_bytes(), true).unwrap().as_deref(), Some(P));
    }

    #[test]
    fn redirects_other_types_and_big_bodies_are_refused() {
        let cases = [
            ("HTTP/1.1 301 Moved\r\nLocation: https://x/\r\nContent-Type: text/plain\r\n\r\n", "HTTP status"),
            ("HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n\r\n", "HTTP status"),
            ("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1\r\n\r\nx", "not text/plain"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", "not text/plain"),
            ("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 70000\r\n\r\n", "larger than"),
            ("SSH-2.0-x\r\n\r\n", "not an HTTP response"),
            ("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk"),
        ];
        for (resp, want) in cases {
            let e = complete(resp.as_bytes(), true).unwrap_err();
            assert!(e.contains(want), "{resp:?}: {e}");
        }
    }
}
