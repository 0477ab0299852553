//! Milter packets: a 32-bit big-endian length, a command byte, its data.
//!
//! [`encode`] frames what the MTA sends; [`Decoder`] takes the milter's
//! bytes as they come and yields whole [`Response`]s. A packet over
//! [`MAX_PACKET`] or one whose data does not parse is a
//! [`DecodeError`]: the caller drops the milter connection, as Postfix
//! does with a milter that breaks the protocol.

/// The protocol version this client speaks.
pub const VERSION: u32 = 6;

/// Largest packet accepted from a milter (libmilter's 2^20 body chunks plus room).
pub const MAX_PACKET: usize = (1 << 20) + 1024;

/// Largest body chunk sent (libmilter's MILTER_CHUNK_SIZE).
pub const BODY_CHUNK: usize = 65535;

/// Commands the MTA sends (SMFIC_*).
#[allow(missing_docs)]
pub mod cmd {
    pub const ABORT: u8 = b'A';
    pub const BODY: u8 = b'B';
    pub const CONNECT: u8 = b'C';
    pub const MACRO: u8 = b'D';
    pub const BODYEOB: u8 = b'E';
    pub const HELO: u8 = b'H';
    pub const HEADER: u8 = b'L';
    pub const MAIL: u8 = b'M';
    pub const EOH: u8 = b'N';
    pub const OPTNEG: u8 = b'O';
    pub const QUIT: u8 = b'Q';
    pub const RCPT: u8 = b'R';
    pub const DATA: u8 = b'T';
    pub const UNKNOWN: u8 = b'U';
}

/// Actions a milter may take at end of message (SMFIF_*).
#[allow(missing_docs)]
pub mod act {
    pub const ADDHDRS: u32 = 0x01;
    pub const CHGBODY: u32 = 0x02;
    pub const ADDRCPT: u32 = 0x04;
    pub const DELRCPT: u32 = 0x08;
    pub const CHGHDRS: u32 = 0x10;
    pub const QUARANTINE: u32 = 0x20;
    pub const CHGFROM: u32 = 0x40;
    pub const ADDRCPT_PAR: u32 = 0x80;
    pub const SETSYMLIST: u32 = 0x100;
    /// Everything this client carries out.
    pub const ALL: u32 = 0x1ff;
}

/// Protocol flags: stages a milter does not want, replies it does not send (SMFIP_*).
#[allow(missing_docs)]
pub mod proto {
    pub const NOCONNECT: u32 = 0x1;
    pub const NOHELO: u32 = 0x2;
    pub const NOMAIL: u32 = 0x4;
    pub const NORCPT: u32 = 0x8;
    pub const NOBODY: u32 = 0x10;
    pub const NOHDRS: u32 = 0x20;
    pub const NOEOH: u32 = 0x40;
    pub const NR_HDR: u32 = 0x80;
    pub const NOUNKNOWN: u32 = 0x100;
    pub const NODATA: u32 = 0x200;
    pub const SKIP: u32 = 0x400;
    pub const RCPT_REJ: u32 = 0x800;
    pub const NR_CONN: u32 = 0x1000;
    pub const NR_HELO: u32 = 0x2000;
    pub const NR_MAIL: u32 = 0x4000;
    pub const NR_RCPT: u32 = 0x8000;
    pub const NR_DATA: u32 = 0x10000;
    pub const NR_UNKN: u32 = 0x20000;
    pub const NR_EOH: u32 = 0x40000;
    pub const NR_BODY: u32 = 0x80000;
    pub const HDR_LEADSPC: u32 = 0x100000;
    /// What this client can honour (no RCPT_REJ: rejected recipients
    /// are not shown to milters, as Postfix by default).
    pub const OFFERED: u32 = 0x1fffff & !RCPT_REJ;
    /// The stages a milter may decline.
    pub const NOSEND_MASK: u32 =
        NOCONNECT | NOHELO | NOMAIL | NORCPT | NOBODY | NOHDRS | NOEOH | NOUNKNOWN | NODATA;

    /// The flags defined for a protocol version, as Postfix's
    /// MILTER8_V*_PROTO_MASK: version 2 knows no unknown-command and no
    /// DATA event, 3 no DATA event, and only 6 has SKIP, the no-reply
    /// flags and leading spaces.
    pub fn of_version(version: u32) -> u32 {
        let v2 = NOCONNECT | NOHELO | NOMAIL | NORCPT | NOBODY | NOHDRS | NOEOH;
        match version {
            0..=2 => v2,
            3 => v2 | NOUNKNOWN,
            4 | 5 => v2 | NOUNKNOWN | NODATA,
            _ => OFFERED,
        }
    }
}

/// Appends one packet to `out`.
pub fn encode(out: &mut Vec<u8>, cmd: u8, data: &[u8]) {
    out.extend_from_slice(&((data.len() + 1) as u32).to_be_bytes());
    out.push(cmd);
    out.extend_from_slice(data);
}

/// NUL-terminated strings, as most packets carry them.
pub fn strings<'a>(items: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut v = Vec::new();
    for s in items {
        // A NUL inside would shift every later field: cut there.
        v.extend_from_slice(s.split('\0').next().unwrap_or("").as_bytes());
        v.push(0);
    }
    v
}

/// What a milter sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// Option negotiation: version, actions, protocol flags.
    Negotiate {
        /// The milter's protocol version.
        version: u32,
        /// The actions it may take.
        actions: u32,
        /// The stages and replies it leaves out.
        protocol: u32,
        /// The macro lists it asks for, by SMFIM_* stage number.
        macros: Vec<(u32, String)>,
    },
    /// `c`: go on.
    Continue,
    /// `a`: accept the message (or connection); no more events for it.
    Accept,
    /// `r`: reject.
    Reject,
    /// `t`: temporary failure.
    Tempfail,
    /// `d`: accept and throw away.
    Discard,
    /// `s`: no more body chunks wanted.
    Skip,
    /// `y`: reject or tempfail with this SMTP reply (`550 5.7.1 text`).
    ReplyCode(String),
    /// `h`: add a header at the end.
    AddHeader(String, String),
    /// `i`: insert a header at this position (0: first).
    InsertHeader(u32, String, String),
    /// `m`: change the index-th (from 1) header of this name; empty value deletes it.
    ChangeHeader(u32, String, String),
    /// `+` / `2`: add a recipient (with ESMTP arguments).
    AddRecipient(String, Option<String>),
    /// `-`: delete a recipient.
    DeleteRecipient(String),
    /// `e`: change the sender (with ESMTP arguments).
    ChangeSender(String, Option<String>),
    /// `b`: a chunk of the new body.
    ReplaceBody(Vec<u8>),
    /// `q`: put the message on hold, for this reason.
    Quarantine(String),
    /// `p`: still working; restart the timer.
    Progress,
    /// `l`: the macros the milter wants at a stage (read and not honoured).
    SetSymbolList,
    /// `4` / `f`: shut this milter connection down.
    Shutdown,
}

/// A milter broke the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// A length over [`MAX_PACKET`] or of zero.
    BadLength(u32),
    /// A command byte this client does not know.
    UnknownResponse(u8),
    /// The data of a known response does not parse.
    Malformed(u8),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::BadLength(n) => write!(f, "bad packet length {n}"),
            DecodeError::UnknownResponse(c) => write!(f, "unknown response code 0x{c:02x}"),
            DecodeError::Malformed(c) => write!(f, "malformed '{}' response", *c as char),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Collects a milter's bytes into responses.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// Adds bytes read from the milter.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole response, if one is in.
    pub fn next_response(&mut self) -> Result<Option<Response>, DecodeError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        if len == 0 || len as usize > MAX_PACKET {
            return Err(DecodeError::BadLength(len));
        }
        if self.buf.len() < 4 + len as usize {
            return Ok(None);
        }
        let packet: Vec<u8> = self.buf.drain(..4 + len as usize).skip(4).collect();
        parse(packet[0], &packet[1..]).map(Some)
    }
}

fn parse(code: u8, data: &[u8]) -> Result<Response, DecodeError> {
    let bad = || DecodeError::Malformed(code);
    let u32_at = |i: usize| -> Result<u32, DecodeError> {
        data.get(i..i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(bad)
    };
    Ok(match code {
        b'O' => {
            // After the three numbers: (stage number, NUL-ended list)
            // pairs, when the milter sets its own macro lists.
            let mut macros = Vec::new();
            let mut rest = data.get(12..).ok_or_else(bad)?;
            while !rest.is_empty() {
                let stage = rest
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                    .ok_or_else(bad)?;
                let end = rest[4..].iter().position(|&b| b == 0).ok_or_else(bad)?;
                let list = String::from_utf8(rest[4..4 + end].to_vec()).map_err(|_| bad())?;
                macros.push((stage, list));
                rest = &rest[4 + end + 1..];
            }
            Response::Negotiate {
                version: u32_at(0)?,
                actions: u32_at(4)?,
                protocol: u32_at(8)?,
                macros,
            }
        }
        b'c' => Response::Continue,
        b'a' => Response::Accept,
        b'r' => Response::Reject,
        b't' => Response::Tempfail,
        b'd' => Response::Discard,
        b's' => Response::Skip,
        b'p' => Response::Progress,
        b'l' => Response::SetSymbolList,
        b'4' | b'f' => Response::Shutdown,
        b'y' => {
            let s = fields(data, 1).ok_or_else(bad)?;
            Response::ReplyCode(s[0].clone())
        }
        b'h' => {
            let s = fields(data, 2).ok_or_else(bad)?;
            Response::AddHeader(s[0].clone(), s[1].clone())
        }
        b'i' | b'm' => {
            let index = u32_at(0)?;
            let s = fields(&data[4..], 2).ok_or_else(bad)?;
            if code == b'i' {
                Response::InsertHeader(index, s[0].clone(), s[1].clone())
            } else {
                Response::ChangeHeader(index, s[0].clone(), s[1].clone())
            }
        }
        b'+' => Response::AddRecipient(fields(data, 1).ok_or_else(bad)?.remove(0), None),
        b'2' | b'e' => {
            let mut s = split(data).ok_or_else(bad)?;
            if s.is_empty() {
                return Err(bad());
            }
            let addr = s.remove(0);
            let args = s.into_iter().next().filter(|a| !a.is_empty());
            if code == b'2' {
                Response::AddRecipient(addr, args)
            } else {
                Response::ChangeSender(addr, args)
            }
        }
        b'-' => Response::DeleteRecipient(fields(data, 1).ok_or_else(bad)?.remove(0)),
        b'b' => Response::ReplaceBody(data.to_vec()),
        b'q' => Response::Quarantine(fields(data, 1).ok_or_else(bad)?.remove(0)),
        other => return Err(DecodeError::UnknownResponse(other)),
    })
}

/// The NUL-terminated strings of `data` (a last one without its NUL is taken too).
fn split(data: &[u8]) -> Option<Vec<String>> {
    if data.is_empty() {
        return Some(Vec::new());
    }
    let body = data.strip_suffix(b"\0").unwrap_or(data);
    body.split(|&b| b == 0)
        .map(|s| String::from_utf8(s.to_vec()).ok())
        .collect()
}

/// Exactly `n` strings first (more are ignored).
fn fields(data: &[u8], n: usize) -> Option<Vec<String>> {
    let s = split(data)?;
    (s.len() >= n).then(|| s.into_iter().take(n).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(code: u8, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        encode(&mut v, code, data);
        v
    }

    #[test]
    fn frames_and_parses_every_response() {
        let mut neg = 6u32.to_be_bytes().to_vec();
        neg.extend_from_slice(&0x1ffu32.to_be_bytes());
        neg.extend_from_slice(&0x80u32.to_be_bytes());
        let mut neg_lists = neg.clone();
        neg_lists.extend_from_slice(b"\0\0\0\x02{client_addr} i\0\0\0\0\x05\0");
        let mut ins = 0u32.to_be_bytes().to_vec();
        ins.extend_from_slice(b"DKIM-Signature\0v=1; a=rsa\0");
        let cases: Vec<(Vec<u8>, Response)> = vec![
            (
                packet(b'O', &neg),
                Response::Negotiate {
                    version: 6,
                    actions: 0x1ff,
                    protocol: 0x80,
                    macros: vec![],
                },
            ),
            (
                packet(b'O', &neg_lists),
                Response::Negotiate {
                    version: 6,
                    actions: 0x1ff,
                    protocol: 0x80,
                    macros: vec![(2, "{client_addr} i".into()), (5, String::new())],
                },
            ),
            (packet(b'c', b""), Response::Continue),
            (
                packet(b'y', b"550 5.7.1 go away\0"),
                Response::ReplyCode("550 5.7.1 go away".into()),
            ),
            (
                packet(b'h', b"X-A\0one\0"),
                Response::AddHeader("X-A".into(), "one".into()),
            ),
            (
                packet(b'i', &ins),
                Response::InsertHeader(0, "DKIM-Signature".into(), "v=1; a=rsa".into()),
            ),
            (
                packet(b'2', b"<b@x>\0NOTIFY=NEVER\0"),
                Response::AddRecipient("<b@x>".into(), Some("NOTIFY=NEVER".into())),
            ),
            (
                packet(b'e', b"<s@x>\0"),
                Response::ChangeSender("<s@x>".into(), None),
            ),
            (
                packet(b'b', b"new\r\nbody\r\n"),
                Response::ReplaceBody(b"new\r\nbody\r\n".to_vec()),
            ),
            (packet(b'q', b"spam\0"), Response::Quarantine("spam".into())),
        ];
        // All at once, then byte by byte: framing does not depend on reads.
        let mut d = Decoder::default();
        for (bytes, _) in &cases {
            d.feed(bytes);
        }
        for (_, want) in &cases {
            assert_eq!(d.next_response().unwrap().as_ref(), Some(want));
        }
        assert_eq!(d.next_response().unwrap(), None);
        for (bytes, want) in &cases {
            let mut d = Decoder::default();
            for b in bytes {
                d.feed(std::slice::from_ref(b));
            }
            assert_eq!(d.next_response().unwrap().as_ref(), Some(want));
        }
    }

    #[test]
    fn hostile_packets_are_errors() {
        let mut d = Decoder::default();
        d.feed(&u32::MAX.to_be_bytes());
        assert_eq!(d.next_response(), Err(DecodeError::BadLength(u32::MAX)));
        let mut d = Decoder::default();
        d.feed(&0u32.to_be_bytes());
        assert!(d.next_response().is_err());
        for (code, data) in [
            (b'Z', &b""[..]),
            (b'O', b"\0\0"),
            (b'O', b"\0\0\0\x06\0\0\0\0\0\0\0\0\0\0\0\x02no-nul"),
            (b'i', b"\0\0"),
            (b'h', b"only-name"),
            (b'h', b"\xff\xfe\0v\0"),
        ] {
            let mut d = Decoder::default();
            d.feed(&packet(code, data));
            assert!(d.next_response().is_err(), "{}", code as char);
        }
    }

    #[test]
    fn strings_cut_at_nul() {
        assert_eq!(strings(["a", "b\0c"]), b"a\0b\0");
    }
}
