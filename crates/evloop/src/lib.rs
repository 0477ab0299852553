//! The pieces every daemon's event loop is built from.
//!
//! A daemon is a thin loop: poll mio, hand readiness and expired timers to a
//! sans-IO core, write what it wants written. This crate holds the parts that
//! touch the outside world on the way: the clock (the only place that reads
//! it, so cores can be driven by a virtual one), a timer heap, and Unix
//! signals turned into readiness on a self-pipe.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod signals;
pub mod timers;

pub use clock::{Clock, SystemClock};
pub use signals::Signals;
pub use timers::{TimerId, Timers};

use std::time::{Duration, Instant};

/// The interest of a socket that is always read and written only while
/// output waits for room: reading, and writing when `writable`. A Unix
/// socket watched for writing all the time wakes its owner each time the
/// peer reads from it (the kernel reports the room freed whether or not
/// anything waits to be written), so the daemons add writing to a Unix
/// socket's interest only while output waits, as Postfix's
/// `event_enable_write` does.
pub fn interest(writable: bool) -> mio::Interest {
    if writable {
        mio::Interest::READABLE | mio::Interest::WRITABLE
    } else {
        mio::Interest::READABLE
    }
}

/// How long `Poll::poll` may sleep given the next deadline: `None` = forever.
pub fn poll_timeout(next: Option<Instant>, now: Instant) -> Option<Duration> {
    next.map(|t| t.saturating_duration_since(now))
}

/// Polls, treating EINTR as a wake-up with no events rather than an error.
pub fn poll(
    poll: &mut mio::Poll,
    events: &mut mio::Events,
    timeout: Option<Duration>,
) -> std::io::Result<()> {
    match poll.poll(events, timeout) {
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
            events.clear();
            Ok(())
        }
        other => other,
    }
}
