//! Sluice's internal protocols and the framing they travel in.
//!
//! Every service speaks frames `[len u32 big-endian][bincode payload]` over a
//! Unix stream socket. The first frame of a connection is a [`Hello`] naming
//! the protocol and its version; a server answers with a [`HelloReply`] and
//! closes on a mismatch, so two builds can never misread each other. After
//! that each request carries an id and its response carries the same id, so a
//! client may pipeline and a server may answer out of order.
//!
//! One module per protocol holds its message types, one enum per direction,
//! variant = verb (OpenSMTPD's imsg types, with named fields instead of
//! positional encoding). Bump a protocol's `VERSION` on every change to it.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod anvil;
pub mod cleanup;
pub mod client;
pub mod control;
pub mod delivery;
pub mod endpoint;
pub mod frame;
pub mod link;
pub mod peer;
pub mod qmgr;
pub mod queuectl;
pub mod router;
pub mod status;
pub mod submission;
pub mod verify;

pub use client::Client;
pub use endpoint::Endpoint;
pub use frame::{Filled, FrameBuf, MAX_FRAME};
pub use link::Link;
pub use peer::Peer;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A protocol: its name, version and the message types of each direction.
pub trait Protocol {
    /// The name sent in the handshake.
    const NAME: &'static str;
    /// Bumped on every change to the message types.
    const VERSION: u32;
    /// What clients send.
    type Request: Serialize + DeserializeOwned + std::fmt::Debug;
    /// What servers answer.
    type Response: Serialize + DeserializeOwned + std::fmt::Debug;
}

/// The first frame a client sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The protocol's name.
    pub protocol: String,
    /// The protocol's version as the client was built with it.
    pub version: u32,
}

/// The server's answer to a [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HelloReply {
    /// Same protocol and version: go ahead.
    Accepted,
    /// Not served here: the server's protocol name and version.
    Refused {
        /// What this server speaks.
        protocol: String,
        /// Its version.
        version: u32,
    },
}

impl Hello {
    /// The hello for protocol `P`.
    pub fn of<P: Protocol>() -> Hello {
        Hello {
            protocol: P::NAME.to_string(),
            version: P::VERSION,
        }
    }

    /// The reply a server for protocol `P` gives to this hello.
    pub fn answer<P: Protocol>(&self) -> HelloReply {
        if self.protocol == P::NAME && self.version == P::VERSION {
            HelloReply::Accepted
        } else {
            HelloReply::Refused {
                protocol: P::NAME.to_string(),
                version: P::VERSION,
            }
        }
    }
}

/// A request or response with the id that pairs them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tagged<T> {
    /// Chosen by the client, echoed by the server.
    pub id: u64,
    /// The message.
    pub body: T,
}

/// Why an IPC operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum IpcError {
    /// The socket failed.
    Io(std::io::Error),
    /// A frame was larger than [`MAX_FRAME`] or its length was zero.
    BadFrame(u32),
    /// A payload did not decode as the expected type.
    Decode(String),
    /// The peer speaks another protocol or version.
    Refused {
        /// What we asked for.
        wanted: String,
        /// What the peer said it speaks.
        got: String,
    },
    /// The peer closed the connection.
    Closed,
    /// The peer did not answer in time.
    Timeout,
    /// Our own outgoing buffer is over its bound: the peer is not reading.
    Backlog,
    /// Content lent to a link that failed after part of it went out: it
    /// cannot be sent again whole, on this link or another.
    ContentLost,
}

impl std::fmt::Display for IpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpcError::Io(e) => write!(f, "{e}"),
            IpcError::BadFrame(n) => write!(f, "bad frame length {n}"),
            IpcError::Decode(e) => write!(f, "undecodable message: {e}"),
            IpcError::Refused { wanted, got } => {
                write!(f, "protocol mismatch: wanted {wanted}, peer speaks {got}")
            }
            IpcError::Closed => write!(f, "connection closed by peer"),
            IpcError::Timeout => write!(f, "timed out"),
            IpcError::Backlog => write!(f, "peer is not reading its messages"),
            IpcError::ContentLost => {
                write!(f, "content partly written on a link that failed")
            }
        }
    }
}

impl std::error::Error for IpcError {}

impl From<std::io::Error> for IpcError {
    fn from(e: std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => IpcError::Timeout,
            std::io::ErrorKind::UnexpectedEof => IpcError::Closed,
            _ => IpcError::Io(e),
        }
    }
}

/// Serializes a message into a whole frame, length prefix included.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut out = Vec::new();
    if let Err(e) = encode_into(&mut out, msg) {
        panic!("ipc: {e}: a message of our own over MAX_FRAME");
    }
    out
}

/// Appends a message as a whole frame to `out`, serialized in place (no
/// payload copied again to prefix its length). `BadFrame` when it would be
/// over [`MAX_FRAME`]; `out` is then as it was.
pub fn encode_into<T: Serialize>(out: &mut Vec<u8>, msg: &T) -> Result<(), IpcError> {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    bincode::serde::encode_into_std_write(msg, out, bincode::config::standard())
        .expect("ipc: in-memory serialization of our own types cannot fail");
    let len = out.len() - at - 4;
    if len == 0 || len > MAX_FRAME as usize {
        out.truncate(at);
        return Err(IpcError::BadFrame(u32::try_from(len).unwrap_or(u32::MAX)));
    }
    out[at..at + 4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// Appends `msg` as the head of a whole frame whose last byte string is
/// left out to be written from where it lies (`writev`, see
/// [`Endpoint::queue_spliced`]): in `msg` that byte string is empty and
/// `after` bytes of encoding follow it; on the wire it is `body_len` bytes
/// long. Gives the position in `out` where the body goes; the frame's
/// bytes are then `out[start..at]`, the body, `out[at..]`, exactly what
/// [`encode_into`] writes for the message with the body in place.
pub fn encode_spliced<T: Serialize>(
    out: &mut Vec<u8>,
    msg: &T,
    body_len: usize,
    after: usize,
) -> Result<usize, IpcError> {
    let start = out.len();
    encode_into(out, msg)?;
    // The empty byte string is its length alone: one varint 0.
    let zero = match out.len().checked_sub(after + 1) {
        Some(z) if z >= start + 4 && out[z] == 0 => z,
        _ => panic!("ipc: spliced message without an empty byte string {after} bytes from its end"),
    };
    let suffix = out.split_off(zero + 1);
    out.truncate(zero);
    varint(out, body_len as u64);
    let at = out.len();
    out.extend_from_slice(&suffix);
    let len = out.len() - start - 4 + body_len;
    if len > MAX_FRAME as usize {
        out.truncate(start);
        return Err(IpcError::BadFrame(u32::try_from(len).unwrap_or(u32::MAX)));
    }
    out[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(at)
}

/// bincode's variable-length integer (its standard configuration), as it
/// writes a byte string's length.
fn varint(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=250 => out.push(n as u8),
        251..=0xffff => {
            out.push(251);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(252);
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        _ => {
            out.push(253);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// Deserializes one frame's payload.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, IpcError> {
    let cfg = bincode::config::standard().with_limit::<{ MAX_FRAME as usize }>();
    match bincode::serde::decode_from_slice(payload, cfg) {
        Ok((v, used)) if used == payload.len() => Ok(v),
        Ok((_, used)) => Err(IpcError::Decode(format!(
            "{} trailing bytes after the message",
            payload.len() - used
        ))),
        Err(e) => Err(IpcError::Decode(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_answers() {
        let h = Hello::of::<anvil::Anvil>();
        assert_eq!(h.answer::<anvil::Anvil>(), HelloReply::Accepted);
        assert!(matches!(
            h.answer::<control::Control>(),
            HelloReply::Refused { .. }
        ));
    }

    #[test]
    fn decode_rejects_trailing_and_garbage() {
        let f = encode(&Tagged {
            id: 7,
            body: anvil::Request::Lookup {
                service: "smtp".into(),
                client: "1.2.3.4".into(),
            },
        });
        let payload = &f[4..];
        let back: Tagged<anvil::Request> = decode(payload).unwrap();
        assert_eq!(back.id, 7);
        let mut longer = payload.to_vec();
        longer.push(0);
        assert!(decode::<Tagged<anvil::Request>>(&longer).is_err());
        assert!(decode::<Tagged<anvil::Request>>(&[0xff; 9]).is_err());
    }

    /// A frame written in pieces is byte for byte the frame written
    /// whole, at every length class of bincode's varint, with and without
    /// encoding after the body.
    #[test]
    fn spliced_frames_are_the_whole_frames() {
        for n in [1usize, 250, 251, 4096, 65_535, 65_536, 70_000] {
            let body: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            let whole = encode(&Tagged {
                id: 9,
                body: cleanup::Request::Data {
                    bytes: body.clone(),
                },
            });
            let mut out = vec![0xee];
            let head = Tagged {
                id: 9,
                body: cleanup::Request::Data { bytes: Vec::new() },
            };
            let at = encode_spliced(&mut out, &head, n, 0).unwrap();
            let mut joined = out[1..at].to_vec();
            joined.extend_from_slice(&body);
            joined.extend_from_slice(&out[at..]);
            assert_eq!(joined, whole, "Data of {n} bytes");

            let arrived = |data: Vec<u8>| Tagged {
                id: 3,
                body: qmgr::Request::Arrived {
                    head: queue::MessageHead {
                        id: mail::QueueId::from_parts(1_700_000_000_000_000, 1, 2).unwrap(),
                        envelope: mail::Envelope {
                            sender: "a@example.org".into(),
                            recipients: vec![mail::Recipient::new("b@example.net")],
                            ..mail::Envelope::default()
                        },
                        data: queue::DataRef::Inline(data),
                    },
                    hold: true,
                },
            };
            let whole = encode(&arrived(body.clone()));
            let mut out = Vec::new();
            let at = encode_spliced(&mut out, &arrived(Vec::new()), n, qmgr::ARRIVED_AFTER_DATA)
                .unwrap();
            let mut joined = out[..at].to_vec();
            joined.extend_from_slice(&body);
            joined.extend_from_slice(&out[at..]);
            assert_eq!(joined, whole, "Arrived of {n} bytes");
        }
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = decode::<Tagged<control::Response>>(&bytes);
            let _ = decode::<Tagged<anvil::Request>>(&bytes);
        }
    }
}
