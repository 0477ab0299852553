//! The messages between an instance and clusterd, and their framing.
//!
//! One enum per direction, variant = verb. Frames are `wire`'s (a
//! big-endian u32 length and a postcard payload); the first message each
//! way carries [`VERSION`], bumped on every change, and a peer of another
//! version is refused. Keys are named by their display form
//! (`localip=192.0.2.1,grouping=orange`): the coordinator only needs them
//! as names, and the instances, configured alike, agree on them. A name
//! travels once per connection and direction: the sender numbers it
//! ([`KeyId`], its own numbering, which may outlive the connection) in the hello or a `Key`
//! message before its first use, and the messages after carry the number
//! (a heartbeat of a thousand keys is then numbers, not a thousand strings
//! to decode and look up every second). A number never named is a
//! protocol error that ends the connection. A number whose key went
//! unused is retired with a `Forget` message, after which the sender may
//! name it again for another key: both sides' tables hold the keys in use,
//! not every key ever heard (recipient domains, job ids). A frame
//! over [`MAX_FRAME`] or one that does not decode is an error for that
//! connection (the caller closes it); nothing here panics on a peer's bytes.

use serde::{Deserialize, Serialize};
pub use wire::{encode, Decoder, FrameError};

/// The protocol version, in both hellos.
pub const VERSION: u16 = 4;

/// A key's number on one connection, in one direction.
pub type KeyId = u32;

/// Names one connection may hold at once in one direction (far above any
/// policy's keys in use; a peer past it is broken and dropped).
pub const MAX_NAMES: usize = 1 << 20;

/// The longest key name accepted.
pub const MAX_NAME: usize = 1024;

/// The largest frame accepted (a re-sync of many keys fits easily).
pub const MAX_FRAME: usize = 4 << 20;

/// A decoder for this protocol's frames (at most [`MAX_FRAME`]).
pub fn decoder() -> Decoder {
    Decoder::new(MAX_FRAME)
}

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
    pub key: KeyId,
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
    pub key: KeyId,
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
    /// A host was put in retry for `secs`: its name as destdb keeps it,
    /// with the port when that is not 25 (`127.0.0.1:9`; version 4 on).
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
        /// Instances it last heard of (0: none), for a restarted
        /// coordinator's recovery window.
        known: u32,
        /// Names of the keys `held` and `rates` use: (number, name).
        keys: Vec<(KeyId, String)>,
        /// Concurrency keys held or wanted.
        held: Vec<Held>,
        /// Rates in use.
        rates: Vec<RateUse>,
    },
    /// Names a key before its first use on this connection.
    Key {
        /// Its number (the instance's own, kept across its connections).
        id: KeyId,
        /// Its name.
        name: String,
    },
    /// Retires a number: the instance no longer uses the key (no
    /// connection, want or rate use for a while).
    Forget {
        /// Its number.
        id: KeyId,
    },
    /// Mail waits for a slot of `key`.
    Want {
        /// The key.
        key: KeyId,
        /// Its cluster-wide limit.
        limit: u32,
    },
    /// A connection opened on a granted slot.
    Opened {
        /// The key.
        key: KeyId,
    },
    /// A connection closed: its slot goes back.
    Release {
        /// The key.
        key: KeyId,
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
    /// Names a key before its first use on this connection (the
    /// coordinator's own numbering).
    Key {
        /// Its number.
        id: KeyId,
        /// Its name.
        name: String,
    },
    /// Retires one of the coordinator's numbers: no instance uses the key.
    Forget {
        /// Its number.
        id: KeyId,
    },
    /// The slots of `key` this instance holds now (open and reserved),
    /// as of its first `seen` messages.
    Grant {
        /// The key.
        key: KeyId,
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
        key: KeyId,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_survive_framing() {
        let msgs = vec![
            ToCoord::Hello {
                version: VERSION,
                name: "mx1.example".into(),
                known: 0,
                keys: vec![(0, "localip=192.0.2.1,grouping=orange".into())],
                held: vec![Held {
                    key: 0,
                    limit: 2,
                    conns: 1,
                    wants: true,
                }],
                rates: vec![],
            },
            ToCoord::Key {
                id: 1,
                name: "k".into(),
            },
            ToCoord::Release { key: 1 },
            ToCoord::Forget { id: 1 },
            ToCoord::News(DestNews::Dead {
                dest: "example.org".into(),
                secs: 300,
            }),
        ];
        // The framing itself is wire's (tested there); every variant here
        // goes through it whole.
        let bytes: Vec<u8> = msgs.iter().flat_map(encode).collect();
        let mut d = decoder();
        d.push(&bytes);
        let got: Vec<ToCoord> = std::iter::from_fn(|| d.decode().unwrap()).collect();
        assert_eq!(got, msgs);
    }

    #[test]
    fn hostile_frames_are_errors_not_panics() {
        let mut d = decoder();
        d.push(&u32::MAX.to_be_bytes());
        assert_eq!(
            d.decode::<ToCoord>(),
            Err(FrameError::TooLong(u32::MAX as usize, MAX_FRAME))
        );
        let mut d = decoder();
        d.push(&[0, 0, 0, 3, 0xff, 0xff, 0xff]);
        assert_eq!(d.decode::<ToCoord>(), Err(FrameError::Garbled));
        let mut d = decoder();
        d.push(&[0, 0, 0, 0]);
        assert!(
            d.decode::<ToInstance>().is_err(),
            "an empty payload is no message"
        );
    }
}
