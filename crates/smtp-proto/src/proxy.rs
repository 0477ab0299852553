//! The PROXY protocol header (HAProxy's, versions 1 and 2), sans-IO.
//!
//! With `smtpd_upstream_proxy_protocol = haproxy`, a load balancer in
//! front of smtpd opens each connection with a header that names the
//! client's address; smtpd reads it before its greeting and uses that
//! address for everything (logs, anvil, `mynetworks`, Received:).
//! [`parse`] takes the bytes read so far and says whether the header is
//! complete, incomplete or bad. Version 1 is one text line of at most
//! [`V1_MAX`] bytes (`PROXY TCP4|TCP6|UNKNOWN ...` CRLF); version 2 is a
//! 16-byte binary prefix and a length-counted body of at most
//! [`V2_MAX_BODY`] bytes, whose TLVs are skipped. `LOCAL` (v2) and
//! `UNKNOWN` (v1) carry no client (the balancer's own health checks): the
//! connection's own addresses stand. Anything else is an error naming
//! what is wrong; nothing here panics or grows without bound.
//!
//! The other way, [`encode_v2`] writes the version 2 header that smtp(8)
//! sends to an egress proxy (`smtp_proxy`): the source address the proxy
//! is to bind and the destination it is to connect to.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Longest version 1 header, CRLF included (the specification's bound).
pub const V1_MAX: usize = 107;
/// Longest version 2 body accepted (addresses and TLVs).
pub const V2_MAX_BODY: usize = 1024;

const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// What a complete header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    /// The connection is the balancer's own (v2 LOCAL, v1 UNKNOWN).
    Local,
    /// A proxied connection.
    Proxied {
        /// The client's address and port.
        source: SocketAddr,
        /// The address and port the client connected to.
        destination: SocketAddr,
    },
}

/// Why a header is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyError {
    /// The input starts with neither `PROXY ` nor the version 2 signature.
    NotProxy,
    /// A version 1 line longer than [`V1_MAX`].
    TooLong,
    /// A version 1 line that does not parse, quoted (shortened).
    BadV1(String),
    /// A version 2 header whose version, command or family is unusable, or
    /// whose length does not fit its addresses or [`V2_MAX_BODY`].
    BadV2(&'static str),
}

impl std::fmt::Display for ProxyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProxyError::NotProxy => f.write_str("no PROXY protocol header"),
            ProxyError::TooLong => write!(f, "PROXY v1 header longer than {V1_MAX} bytes"),
            ProxyError::BadV1(l) => write!(f, "malformed PROXY v1 header \"{l}\""),
            ProxyError::BadV2(why) => write!(f, "malformed PROXY v2 header: {why}"),
        }
    }
}

impl std::error::Error for ProxyError {}

/// The outcome of [`parse`] on the bytes read so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed.
    Incomplete,
    /// The header, and how many bytes it took (the rest is SMTP).
    Done(Header, usize),
    /// Not a usable header: drop the connection.
    Bad(ProxyError),
}

/// Parses a PROXY header at the start of `input`.
pub fn parse(input: &[u8]) -> Parsed {
    if input.is_empty() {
        return Parsed::Incomplete;
    }
    let n = input.len().min(V2_SIGNATURE.len());
    if input[..n] == V2_SIGNATURE[..n] {
        if input.len() < 16 {
            return Parsed::Incomplete;
        }
        return parse_v2(input);
    }
    let n = input.len().min(6);
    if input[..n] != b"PROXY "[..n] {
        return Parsed::Bad(ProxyError::NotProxy);
    }
    match input.iter().position(|&b| b == b'\n') {
        Some(i) if i + 1 > V1_MAX => Parsed::Bad(ProxyError::TooLong),
        Some(i) => match parse_v1(&input[..i + 1]) {
            Ok(h) => Parsed::Done(h, i + 1),
            Err(e) => Parsed::Bad(e),
        },
        None if input.len() >= V1_MAX => Parsed::Bad(ProxyError::TooLong),
        None => Parsed::Incomplete,
    }
}

/// The version 2 `PROXY` header for a TCP connection from `source` to
/// `destination`; `None` when their families differ (the header has one
/// family for both).
pub fn encode_v2(source: SocketAddr, destination: SocketAddr) -> Option<Vec<u8>> {
    let mut h = V2_SIGNATURE.to_vec();
    // Version 2, command PROXY.
    h.push(0x21);
    match (source.ip(), destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            h.extend_from_slice(&[0x11, 0, 12]);
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            h.extend_from_slice(&[0x21, 0, 36]);
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
        }
        _ => return None,
    }
    h.extend_from_slice(&source.port().to_be_bytes());
    h.extend_from_slice(&destination.port().to_be_bytes());
    Some(h)
}

fn parse_v1(line: &[u8]) -> Result<Header, ProxyError> {
    let bad = || {
        let shown: String = String::from_utf8_lossy(line)
            .trim_end()
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .take(V1_MAX)
            .collect();
        ProxyError::BadV1(shown)
    };
    let text = std::str::from_utf8(line).map_err(|_| bad())?;
    let text = text.strip_suffix("\r\n").ok_or_else(bad)?;
    let mut f = text.split(' ');
    let (_proxy, proto) = (f.next(), f.next().ok_or_else(bad)?);
    if proto == "UNKNOWN" {
        // The rest of the line is to be ignored (the specification's words).
        return Ok(Header::Local);
    }
    let fields: Vec<&str> = f.collect();
    let [src, dst, sport, dport] = fields[..] else {
        return Err(bad());
    };
    let ip = |s: &str| -> Result<IpAddr, ProxyError> {
        match proto {
            "TCP4" => s.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| bad()),
            "TCP6" => s.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| bad()),
            _ => Err(bad()),
        }
    };
    // Ports are decimal without sign or leading zeros, 0 to 65535.
    let port = |s: &str| -> Result<u16, ProxyError> {
        if s.is_empty() || s.len() > 5 || (s.len() > 1 && s.starts_with('0')) {
            return Err(bad());
        }
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    Ok(Header::Proxied {
        source: SocketAddr::new(ip(src)?, port(sport)?),
        destination: SocketAddr::new(ip(dst)?, port(dport)?),
    })
}

fn parse_v2(input: &[u8]) -> Parsed {
    let ver_cmd = input[12];
    let family = input[13];
    let len = usize::from(u16::from_be_bytes([input[14], input[15]]));
    if ver_cmd >> 4 != 2 {
        return Parsed::Bad(ProxyError::BadV2("version is not 2"));
    }
    if len > V2_MAX_BODY {
        return Parsed::Bad(ProxyError::BadV2("longer than smtpd accepts"));
    }
    if input.len() < 16 + len {
        return Parsed::Incomplete;
    }
    let body = &input[16..16 + len];
    let header = match ver_cmd & 0x0f {
        // LOCAL: the addresses, if any, are to be ignored.
        0 => Header::Local,
        1 => match family {
            // TCP or UDP over IPv4.
            0x11 | 0x12 => {
                if body.len() < 12 {
                    return Parsed::Bad(ProxyError::BadV2("too short for IPv4 addresses"));
                }
                let a = |i: usize| Ipv4Addr::new(body[i], body[i + 1], body[i + 2], body[i + 3]);
                let p = |i: usize| u16::from_be_bytes([body[i], body[i + 1]]);
                Header::Proxied {
                    source: SocketAddr::new(IpAddr::V4(a(0)), p(8)),
                    destination: SocketAddr::new(IpAddr::V4(a(4)), p(10)),
                }
            }
            0x21 | 0x22 => {
                if body.len() < 36 {
                    return Parsed::Bad(ProxyError::BadV2("too short for IPv6 addresses"));
                }
                let a = |i: usize| {
                    let mut o = [0u8; 16];
                    o.copy_from_slice(&body[i..i + 16]);
                    Ipv6Addr::from(o)
                };
                let p = |i: usize| u16::from_be_bytes([body[i], body[i + 1]]);
                Header::Proxied {
                    source: SocketAddr::new(IpAddr::V6(a(0)), p(32)),
                    destination: SocketAddr::new(IpAddr::V6(a(16)), p(34)),
                }
            }
            // UNSPEC: no address to use, as LOCAL.
            0x00 => Header::Local,
            _ => {
                return Parsed::Bad(ProxyError::BadV2(
                    "address family not TCP over IPv4 or IPv6",
                ))
            }
        },
        _ => return Parsed::Bad(ProxyError::BadV2("command is neither LOCAL nor PROXY")),
    };
    Parsed::Done(header, 16 + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn v2(cmd: u8, family: u8, body: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.push(0x20 | cmd);
        h.push(family);
        h.extend_from_slice(&(body.len() as u16).to_be_bytes());
        h.extend_from_slice(body);
        h
    }

    #[test]
    fn v1_lines() {
        let cases: &[(&[u8], Parsed)] = &[
            (
                b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 25\r\nEHLO x\r\n",
                Parsed::Done(
                    Header::Proxied {
                        source: sa("192.0.2.7:56324"),
                        destination: sa("198.51.100.1:25"),
                    },
                    44,
                ),
            ),
            (
                b"PROXY TCP6 2001:db8::7 2001:db8::1 65535 587\r\n",
                Parsed::Done(
                    Header::Proxied {
                        source: sa("[2001:db8::7]:65535"),
                        destination: sa("[2001:db8::1]:587"),
                    },
                    46,
                ),
            ),
            (b"PROXY UNKNOWN\r\n", Parsed::Done(Header::Local, 15)),
            (
                b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n",
                Parsed::Done(Header::Local, 59),
            ),
            (b"", Parsed::Incomplete),
            (b"PRO", Parsed::Incomplete),
            (b"PROXY TCP4 192.0.2.7", Parsed::Incomplete),
        ];
        for (input, want) in cases {
            assert_eq!(&parse(input), want, "{}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn v1_refusals() {
        let bad: &[&[u8]] = &[
            b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 25\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 56324\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 25 9\r\n",
            b"PROXY TCP4 2001:db8::7 198.51.100.1 1 25\r\n",
            b"PROXY TCP6 192.0.2.7 2001:db8::1 1 25\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 65536 25\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 025 25\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 +25 25\r\n",
            b"PROXY TCP4  192.0.2.7 198.51.100.1 1 25\r\n",
            b"PROXY UDP4 192.0.2.7 198.51.100.1 1 25\r\n",
            b"PROXY TCP4 192.0.2.7\0 198.51.100.1 1 25\r\n",
            b"PROXY TCP4 \xff 198.51.100.1 1 25\r\n",
        ];
        for input in bad {
            assert!(
                matches!(parse(input), Parsed::Bad(ProxyError::BadV1(_))),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
        assert_eq!(parse(b"EHLO client\r\n"), Parsed::Bad(ProxyError::NotProxy));
        assert_eq!(parse(b"proxy TCP4"), Parsed::Bad(ProxyError::NotProxy));
        // Bounded: a line that does not end within 107 bytes is refused
        // whether or not its end has come.
        let long = format!("PROXY TCP4 {}", "1".repeat(200));
        assert_eq!(parse(long.as_bytes()), Parsed::Bad(ProxyError::TooLong));
        let long = format!("{long}\r\n");
        assert_eq!(parse(long.as_bytes()), Parsed::Bad(ProxyError::TooLong));
        let exact = format!("PROXY UNKNOWN {}\r\n", "x".repeat(V1_MAX - 16));
        assert_eq!(exact.len(), V1_MAX);
        assert_eq!(parse(exact.as_bytes()), Parsed::Done(Header::Local, V1_MAX));
    }

    #[test]
    fn v2_headers() {
        let mut v4 = vec![192, 0, 2, 7, 198, 51, 100, 1];
        v4.extend_from_slice(&56324u16.to_be_bytes());
        v4.extend_from_slice(&25u16.to_be_bytes());
        let h = v2(1, 0x11, &v4);
        let want = Header::Proxied {
            source: sa("192.0.2.7:56324"),
            destination: sa("198.51.100.1:25"),
        };
        assert_eq!(parse(&h), Parsed::Done(want, 28));
        // Every prefix is incomplete, never wrong.
        for cut in 0..h.len() {
            assert_eq!(parse(&h[..cut]), Parsed::Incomplete, "cut at {cut}");
        }
        // TLVs after the addresses are skipped; the SMTP bytes after stay.
        let mut with_tlv = v4.clone();
        with_tlv.extend_from_slice(&[0x04, 0x00, 0x02, 0xab, 0xcd]);
        let mut h = v2(1, 0x11, &with_tlv);
        h.extend_from_slice(b"EHLO");
        assert_eq!(parse(&h), Parsed::Done(want, 33));
        let mut v6 = Vec::new();
        v6.extend_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&[0xdc, 0x04, 0x02, 0x4b]);
        assert_eq!(
            parse(&v2(1, 0x21, &v6)),
            Parsed::Done(
                Header::Proxied {
                    source: sa("[2001:db8::7]:56324"),
                    destination: sa("[2001:db8::1]:587"),
                },
                52
            )
        );
        assert_eq!(parse(&v2(0, 0x00, &[])), Parsed::Done(Header::Local, 16));
        assert_eq!(parse(&v2(0, 0x11, &v4)), Parsed::Done(Header::Local, 28));
    }

    #[test]
    fn encoded_v2_headers_parse_back() {
        for (src, dst, len) in [
            ("127.0.0.2:0", "192.0.2.25:25", 28),
            ("0.0.0.0:0", "198.51.100.1:2525", 28),
            ("[2001:db8::7]:0", "[2001:db8::1]:25", 52),
        ] {
            let h = encode_v2(sa(src), sa(dst)).unwrap();
            assert_eq!(h.len(), len);
            let want = Header::Proxied {
                source: sa(src),
                destination: sa(dst),
            };
            assert_eq!(parse(&h), Parsed::Done(want, len), "{src} -> {dst}");
        }
        assert_eq!(encode_v2(sa("127.0.0.2:0"), sa("[2001:db8::1]:25")), None);
        assert_eq!(encode_v2(sa("[::]:0"), sa("192.0.2.25:25")), None);
    }

    #[test]
    fn v2_refusals() {
        let v4 = [0u8; 12];
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (v2(1, 0x11, &v4[..8]), "too short for IPv4 addresses"),
            (v2(1, 0x21, &v4), "too short for IPv6 addresses"),
            (v2(1, 0x31, &v4), "address family not TCP over IPv4 or IPv6"),
            (v2(2, 0x11, &v4), "command is neither LOCAL nor PROXY"),
            (
                v2(1, 0x11, &[0u8; V2_MAX_BODY + 1]),
                "longer than smtpd accepts",
            ),
        ];
        for (h, why) in cases {
            assert_eq!(parse(&h), Parsed::Bad(ProxyError::BadV2(why)));
        }
        let mut v1_version = v2(1, 0x11, &v4);
        v1_version[12] = 0x11;
        assert_eq!(
            parse(&v1_version),
            Parsed::Bad(ProxyError::BadV2("version is not 2"))
        );
        // A length beyond the bound is refused before its bytes come.
        let mut huge = V2_SIGNATURE.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        assert_eq!(
            parse(&huge),
            Parsed::Bad(ProxyError::BadV2("longer than smtpd accepts"))
        );
    }
}
