//! Unix signals delivered as readiness on a self-pipe.
//!
//! A signal handler may do almost nothing, so signal-hook's handlers set a
//! flag and write a byte to a socket pair; the loop polls the read end like
//! any other source and, when it is readable, asks which flags were set.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mio::net::UnixStream;
use mio::{Interest, Registry, Token};

/// Signals watched through the event loop.
#[derive(Debug)]
pub struct Signals {
    flags: Vec<(i32, Arc<AtomicBool>)>,
    read: UnixStream,
    ids: Vec<signal_hook::SigId>,
}

impl Signals {
    /// Starts catching `signals` and registers the self-pipe under `token`.
    pub fn new(registry: &Registry, token: Token, signals: &[i32]) -> std::io::Result<Signals> {
        let (read, write) = std::os::unix::net::UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        let mut read = UnixStream::from_std(read);
        registry.register(&mut read, token, Interest::READABLE)?;
        let mut flags = Vec::new();
        let mut ids = Vec::new();
        for &sig in signals {
            let flag = Arc::new(AtomicBool::new(false));
            ids.push(signal_hook::flag::register(sig, flag.clone())?);
            ids.push(signal_hook::low_level::pipe::register(
                sig,
                write.try_clone()?,
            )?);
            flags.push((sig, flag));
        }
        Ok(Signals { flags, read, ids })
    }

    /// Empties the self-pipe and returns the signals that arrived, in the
    /// order they were registered.
    pub fn drain(&mut self) -> Vec<i32> {
        let mut buf = [0u8; 64];
        while let Ok(n) = self.read.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
        self.flags
            .iter()
            .filter(|(_, f)| f.swap(false, Ordering::SeqCst))
            .map(|(s, _)| *s)
            .collect()
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// SIGHUP's number.
pub const SIGHUP: i32 = signal_hook::consts::SIGHUP;
/// SIGTERM's number.
pub const SIGTERM: i32 = signal_hook::consts::SIGTERM;
/// SIGINT's number.
pub const SIGINT: i32 = signal_hook::consts::SIGINT;
/// SIGCHLD's number.
pub const SIGCHLD: i32 = signal_hook::consts::SIGCHLD;
/// SIGUSR1's number.
pub const SIGUSR1: i32 = signal_hook::consts::SIGUSR1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raised_signal_becomes_readiness() {
        let mut poll = mio::Poll::new().unwrap();
        let mut events = mio::Events::with_capacity(8);
        let mut s = Signals::new(poll.registry(), Token(1), &[SIGUSR1]).unwrap();
        signal_hook::low_level::raise(SIGUSR1).unwrap();
        poll.poll(&mut events, Some(std::time::Duration::from_secs(5)))
            .unwrap();
        assert!(events.iter().any(|e| e.token() == Token(1)));
        assert_eq!(s.drain(), vec![SIGUSR1]);
        assert!(s.drain().is_empty());
    }
}
