//! Framed postcard messages between Sluice instances, and the server side
//! of their mutual-TLS connections.
//!
//! clusterd and transferd speak to other instances over TCP with mutual
//! TLS, in frames of a big-endian u32 length and a postcard payload (the
//! local daemons' bincode frames are `ipc`'s). [`frame`] is the codec,
//! sans-IO, used by both ends; [`peer`] is the accepted connection a
//! daemon's loop drives: TLS, bounded reads, decoding, a bounded queue of
//! frames out.

pub mod frame;
pub mod peer;

pub use frame::{encode, Decoder, FrameError};
pub use peer::{Got, Peer};
