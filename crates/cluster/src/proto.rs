//! The messages between an instance and clusterd, and their framing.
//!
//! One enum per direction, variant = verb. Frames are a big-endian u32
//! length and a postcard payload, as ipc's are; the first message each
//! way carries [`VERSION`], bumped on every change, and a peer of another
//! version is refused. Keys travel as their display form
//! (`localip=192.0.2.1,grouping=orange`): the coordinator only needs them
//! as names, and the instances, configured alike, agree on them. A frame
//! over [`MAX_FRAME`] or one that does not decode is an error for that
//! connection (the caller closes it); nothing here panics on a peer's bytes.

use serde::{Deserialize, Serialize};

/// The protocol version, in both hellos.
pub const VERSION: u16 = 1;

/// The largest frame accepted (a re-sync of many keys fits easily).
pub const MAX_FRAME: usize = 4 << 20;

/// A rate as it travels: tokens per `per_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRate {
    /// Tokens per interval.
    pub tokens: u32,
    /// The interval in milliseconds.
    pub per_ms: u64,
    /// Whether the policy's algorithm is `fixedwindow` (else `tokenbucket`).
    pub fixed_window: bool,
}

/// What an instance holds or asks of one concurrency key on (re)connect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The key.
    pub key: String,
    /// Its cluster-wide limit.
    pub limit: u32,
    /// Connections this instance has open on it.
    pub conns: u32,
    /// Whether mail waits for another slot.
    pub wants: bool,
}

/// An instance's use of one shared rate since its last report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateUse {
    /// The key.
    pub key: String,
    /// The cluster's rate.
    pub limit: WireRate,
    /// Tokens taken since the last report.
    pub used: u32,
    /// A transaction was refused for want of this instance's part.
    pub starved: bool,
}

/// News about a destination, relayed to every other instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DestNews {
    /// A destination (a next-hop domain) was declared dead for `secs`.
    Dead {
        /// The destination.
        dest: String,
        /// For how long, in seconds.
        secs: u32,
    },
    /// A host (an address) was put in retry for `secs`.
    HostRetry {
        /// The host.
        host: String,
        /// For how long, in seconds.
        secs: u32,
    },
}

/// Instance to coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToCoord {
    /// The first message: who this is and, after a reconnect, everything
    /// it holds (the re-sync is this one exchange).
    Hello {
        /// [`VERSION`].
        version: u16,
        /// The instance's `myhostname`.
        name: String,
        /// Concurrency keys held or wanted.
        held: Vec<Held>,
        /// Rates in use.
        rates: Vec<RateUse>,
    },
    /// Mail waits for a slot of `key`.
    Want {
        /// The key.
        key: String,
        /// Its cluster-wide limit.
        limit: u32,
    },
    /// A connection opened on a granted slot.
    Opened {
        /// The key.
        key: String,
    },
    /// A connection closed: its slot goes back.
    Release {
        /// The key.
        key: String,
    },
    /// Renews the instance's leases; carries its rate use.
    Heartbeat {
        /// Rates used since the last heartbeat.
        rates: Vec<RateUse>,
    },
    /// Destination knowledge to share.
    News(DestNews),
}

/// Coordinator to instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToInstance {
    /// The answer to a hello.
    Welcome {
        /// [`VERSION`].
        version: u16,
        /// Instances connected, this one included.
        instances: u32,
    },
    /// The hello was refused (another version, a name in use).
    Refused {
        /// Why, for the log.
        reason: String,
    },
    /// The number of instances changed.
    Count {
        /// Instances connected.
        instances: u32,
        /// Their names (`myhostname`), for `sluice cluster status`.
        names: Vec<String>,
    },
    /// The slots of `key` this instance holds now (open and reserved),
    /// as of its first `seen` messages.
    Grant {
        /// The key.
        key: String,
        /// Slots.
        slots: u32,
        /// Messages of this connection the coordinator had read.
        seen: u64,
        /// Whether it is still in line for another slot.
        waiting: bool,
    },
    /// This instance's part of `key`'s rate until the next one.
    Allot {
        /// The key.
        key: String,
        /// Tokens per interval (the interval may be the key's scaled).
        rate: WireRate,
    },
    /// Answers a heartbeat (the instance knows the coordinator lives).
    Beat,
    /// Another instance's destination knowledge.
    News {
        /// The instance it came from.
        from: String,
        /// The news.
        news: DestNews,
    },
}

/// Why a frame could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// A length over [`MAX_FRAME`].
    TooLong(usize),
    /// A payload that is not a message.
    Garbled,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLong(n) => write!(f, "frame of {n} bytes over {MAX_FRAME}"),
            FrameError::Garbled => f.write_str("malformed message"),
        }
    }
}

impl std::error::Error for FrameError {}

/// A message, framed.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let payload = postcard::to_allocvec(msg).expect("cluster: postcard encodes every message");
    let mut out = Vec::with_capacity(4 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Bytes in, messages out; holds at most one frame plus what was pushed.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// An empty decoder.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, if one is in.
    pub fn decode<T: for<'de> Deserialize<'de>>(&mut self) -> Result<Option<T>, FrameError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLong(len));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let msg = postcard::from_bytes(&self.buf[4..4 + len]).map_err(|_| FrameError::Garbled);
        self.buf.drain(..4 + len);
        msg.map(Some)
    }

    /// Bytes held that are not yet a message.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_survive_framing_split_anywhere() {
        let msgs = vec![
            ToCoord::Hello {
                version: VERSION,
                name: "mx1.example".into(),
                held: vec![Held {
                    key: "localip=192.0.2.1,grouping=orange".into(),
                    limit: 2,
                    conns: 1,
                    wants: true,
                }],
                rates: vec![],
            },
            ToCoord::Release { key: "k".into() },
            ToCoord::News(DestNews::Dead {
                dest: "example.org".into(),
                secs: 300,
            }),
        ];
        let bytes: Vec<u8> = msgs.iter().flat_map(encode).collect();
        for cut in 0..bytes.len() {
            let mut d = Decoder::new();
            let mut got = Vec::new();
            d.push(&bytes[..cut]);
            while let Some(m) = d.decode::<ToCoord>().unwrap() {
                got.push(m);
            }
            d.push(&bytes[cut..]);
            while let Some(m) = d.decode::<ToCoord>().unwrap() {
                got.push(m);
            }
            assert_eq!(got, msgs, "cut at {cut}");
            assert_eq!(d.pending(), 0);
        }
    }

    #[test]
    fn hostile_frames_are_errors_not_panics() {
        let mut d = Decoder::new();
        d.push(&u32::MAX.to_be_bytes());
        assert_eq!(
            d.decode::<ToCoord>(),
            Err(FrameError::TooLong(u32::MAX as usize))
        );
        let mut d = Decoder::new();
        d.push(&[0, 0, 0, 3, 0xff, 0xff, 0xff]);
        assert_eq!(d.decode::<ToCoord>(), Err(FrameError::Garbled));
        let mut d = Decoder::new();
        d.push(&[0, 0, 0, 0]);
        assert!(
            d.decode::<ToInstance>().is_err(),
            "an empty payload is no message"
        );
    }
}
