//! A one-shot driver for tools and tests: run `hosts()` or lookups to the end.
//!
//! `sluice route --hosts` and the tests use it; the router daemon drives
//! [`Dns`] from its own event loop instead. It reads the clock, as shells do.

use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};

use crate::hosts::{Dns, HostList, JobId};
use crate::resolver::{Lookup, Outcome, QueryId};
use crate::transport::Transport;
use crate::wire::QType;
use crate::DnsError;

/// Owns a poll loop, a transport and a [`Dns`].
pub struct Driver {
    poll: Poll,
    events: Events,
    /// The resolver and hosts jobs.
    pub dns: Dns,
    transport: Transport,
    next_token: usize,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("dns", &self.dns).finish()
    }
}

impl Driver {
    /// A driver for `dns` (its resolver's servers decide the sockets).
    pub fn new(dns: Dns) -> std::io::Result<Driver> {
        let poll = Poll::new()?;
        let timeout = dns.resolver.config().timeout;
        let transport = Transport::new(timeout);
        Ok(Driver {
            poll,
            events: Events::with_capacity(256),
            dns,
            transport,
            next_token: 2,
        })
    }

    /// Runs the loop once: send, wait until `deadline` at most, receive, expire.
    pub fn turn(&mut self, deadline: Instant) -> std::io::Result<()> {
        let now = Instant::now();
        let mut next = self.next_token;
        self.transport.flush(
            &mut self.dns,
            self.poll.registry(),
            &mut || {
                next += 1;
                Token(next)
            },
            now,
        );
        self.next_token = next;
        // A tool may block: the system resolver is asked right here.
        let mut answered = false;
        while let Some(req) = self.dns.poll_native() {
            let r = crate::native_addresses(&req.name);
            self.dns.native_done(&req, r, now);
            answered = true;
        }
        let wake = [
            Some(deadline),
            self.dns.resolver.poll_timeout(),
            self.transport.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(deadline);
        let wake = if answered { now } else { wake };
        match self
            .poll
            .poll(&mut self.events, Some(wake.saturating_duration_since(now)))
        {
            Err(e) if e.kind() != std::io::ErrorKind::Interrupted => return Err(e),
            _ => {}
        }
        let now = Instant::now();
        let tokens: Vec<Token> = self.events.iter().map(|e| e.token()).collect();
        for t in tokens {
            self.transport
                .ready(t, &mut self.dns, self.poll.registry(), now);
        }
        self.dns.resolver.handle_timeout(now);
        self.transport
            .expire(&mut self.dns, self.poll.registry(), now);
        self.dns.poll(now);
        Ok(())
    }

    /// Runs `hosts(nexthop)` to its end, or `limit` at most.
    pub fn hosts(&mut self, nexthop: &str, limit: Duration) -> Result<HostList, DnsError> {
        let id = self.dns.hosts(nexthop, Instant::now());
        self.wait_job(id, limit)
    }

    /// Waits for a job started on [`Driver::dns`].
    pub fn wait_job(&mut self, id: JobId, limit: Duration) -> Result<HostList, DnsError> {
        let deadline = Instant::now() + limit;
        loop {
            // One-shot use: answers to other jobs are not wanted by anyone.
            while let Some((j, r)) = self.dns.poll_event() {
                if j == id {
                    return r;
                }
            }
            if Instant::now() >= deadline {
                return Err(DnsError::Timeout);
            }
            self.turn(deadline)
                .map_err(|e| DnsError::ServFail(e.to_string()))?;
        }
    }

    /// One lookup to its end.
    pub fn lookup(&mut self, name: &str, qtype: QType, limit: Duration) -> Outcome {
        let q: QueryId = match self.dns.lookup(name, qtype, Instant::now()) {
            Lookup::Ready(r) => return r,
            Lookup::Pending(q) => q,
        };
        let deadline = Instant::now() + limit;
        loop {
            self.dns.poll(Instant::now());
            while let Some((id, r)) = self.dns.poll_lookup() {
                if id == q {
                    return r;
                }
            }
            if Instant::now() >= deadline {
                return Err(DnsError::Timeout);
            }
            self.turn(deadline)
                .map_err(|e| DnsError::ServFail(e.to_string()))?;
        }
    }
}
