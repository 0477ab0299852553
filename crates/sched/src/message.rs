//! Messages in memory and the interned class keys they are counted under.
//!
//! A message holds only what scheduling needs: its queue id, interned class
//! key and tenant, arrival, attempts, size, recipient counters (unread in the
//! queue file, in core) and its per-transport jobs that carry recipient
//! slots (see `memory`). Sender strings are interned once per key, so a
//! million single-recipient messages from one sender share one string.
//! Panics: never. Limits: counters are `u32`.

use crate::entry::Class;
use crate::ids::{KeyId, TransportId};
use crate::slab::Slab;
use crate::time::Time;
use crate::QueueId;
use std::collections::BTreeMap;

/// A message's share of one transport's recipient slot pool (nqmgr's job).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// Transport.
    pub transport: TransportId,
    /// Recipient slots lent to this job.
    pub slots: u32,
    /// Recipients of the message in core on this transport.
    pub in_core: u32,
}

/// A message's jobs: the first inline (almost all mail uses one transport),
/// any others boxed, so a message costs no heap allocation for them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Jobs {
    first: Option<Job>,
    // A boxed Vec is a thin pointer (8 bytes) where a Vec is 24: this is
    // per queued recipient, and the rare extra allocation is worth it.
    #[allow(clippy::box_collection)]
    rest: Option<Box<Vec<Job>>>,
}

impl Jobs {
    /// The jobs.
    pub fn iter(&self) -> impl Iterator<Item = &Job> {
        self.first
            .iter()
            .chain(self.rest.iter().flat_map(|r| r.iter()))
    }

    /// The jobs, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Job> {
        self.first
            .iter_mut()
            .chain(self.rest.iter_mut().flat_map(|r| r.iter_mut()))
    }

    /// Appends a job.
    pub fn push(&mut self, j: Job) {
        if self.first.is_none() {
            self.first = Some(j);
        } else {
            self.rest.get_or_insert_with(Default::default).push(j);
        }
    }

    /// Number of jobs.
    pub fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.as_ref().map_or(0, |r| r.len())
    }

    /// True when there is no job.
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// The job of transport `t`.
    pub fn get_mut(&mut self, t: TransportId) -> Option<&mut Job> {
        self.iter_mut().find(|j| j.transport == t)
    }

    /// Heap bytes (memory accounting).
    pub fn heap_bytes(&self) -> usize {
        self.rest
            .as_ref()
            .map_or(0, |r| 24 + r.capacity() * std::mem::size_of::<Job>())
    }
}

/// A message in the active queue.
#[derive(Clone, Debug)]
pub struct Message {
    /// Caller's queue id.
    pub queue_id: QueueId,
    /// Class key (sender, sender domain, tenant or size bucket).
    pub key: KeyId,
    /// Tenant, for limiter keys (`KeyId(u32::MAX)`: none; see `tenant()`).
    tenant: KeyId,
    /// Size in KiB (only the `size` class key uses it).
    pub size_kib: u32,
    /// Arrival time.
    pub arrival: Time,
    /// Attempts before this one.
    pub attempts: u16,
    /// Recipients not yet read from the queue file.
    pub unread: u32,
    /// A `ReadRecipients` is outstanding.
    pub read_pending: bool,
    /// Entries alive (queued, on a connection or in flight).
    pub live_entries: u32,
    /// Recipients in core.
    pub in_core: u32,
    /// Entries assigned to connections (fanf's message concurrency).
    pub workers: u32,
    /// Per-transport jobs.
    pub jobs: Jobs,
}

impl Message {
    /// A message with nothing read yet.
    pub fn new(
        queue_id: QueueId,
        key: KeyId,
        tenant: Option<KeyId>,
        size: u64,
        arrival: Time,
        attempts: u32,
        unread: u32,
    ) -> Self {
        Message {
            queue_id,
            key,
            tenant: tenant.unwrap_or(KeyId(u32::MAX)),
            size_kib: u32::try_from(size / 1024).unwrap_or(u32::MAX),
            arrival,
            attempts: u16::try_from(attempts).unwrap_or(u16::MAX),
            unread,
            read_pending: false,
            live_entries: 0,
            in_core: 0,
            workers: 0,
            jobs: Jobs::default(),
        }
    }

    /// The job for `t`, created with `slots` if missing.
    pub fn job(&mut self, t: TransportId, slots: impl FnOnce() -> u32) -> &mut Job {
        if self.jobs.get_mut(t).is_none() {
            self.jobs.push(Job {
                transport: t,
                slots: slots(),
                in_core: 0,
            });
        }
        self.jobs
            .get_mut(t)
            .expect("sched::message: job just added")
    }

    /// The tenant key, if the message has a tenant.
    pub fn tenant(&self) -> Option<KeyId> {
        (self.tenant != KeyId(u32::MAX)).then_some(self.tenant)
    }
}

/// One interned key: its text, the entries in memory under it, messages using it.
#[derive(Clone, Debug)]
pub struct KeyRec {
    /// Key text.
    pub name: Box<str>,
    /// Entries in memory counted under this key (Wietse's "pending requests").
    pub entries: u32,
    /// Messages referring to this key.
    pub refs: u32,
    /// The class the key's queued entries belong in (see `reclass`).
    pub class: Class,
}

/// Interned strings with reference counts; freed when no message uses them.
#[derive(Clone, Debug, Default)]
pub struct Interner {
    by_name: BTreeMap<Box<str>, KeyId>,
    /// The records.
    pub recs: Slab<KeyId, KeyRec>,
}

impl Interner {
    /// Interns `name` and takes a reference.
    pub fn acquire(&mut self, name: &str) -> KeyId {
        if let Some(&k) = self.by_name.get(name) {
            self.recs[k].refs += 1;
            return k;
        }
        let k = self.recs.insert(KeyRec {
            name: name.into(),
            entries: 0,
            refs: 1,
            class: Class::Small,
        });
        self.by_name.insert(name.into(), k);
        k
    }

    /// Drops a reference; the key is forgotten at zero.
    pub fn release(&mut self, k: KeyId) {
        let r = &mut self.recs[k];
        r.refs -= 1;
        if r.refs == 0 {
            let rec = self.recs.remove(k);
            self.by_name.remove(&rec.name);
        }
    }

    /// The key's text.
    pub fn name(&self, k: KeyId) -> &str {
        &self.recs[k].name
    }

    /// Number of live keys.
    pub fn len(&self) -> usize {
        self.recs.len()
    }

    /// True when no key is live.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interner_counts_references() {
        let mut i = Interner::default();
        let a = i.acquire("alice@example.org");
        let b = i.acquire("alice@example.org");
        assert_eq!(a, b);
        assert_eq!(i.len(), 1);
        i.release(a);
        assert_eq!(i.name(a), "alice@example.org");
        i.release(a);
        assert!(i.is_empty());
        let c = i.acquire("bob@example.org");
        assert_eq!(i.name(c), "bob@example.org");
    }

    #[test]
    fn jobs_are_created_once() {
        let mut m = Message::new(QueueId(1), KeyId(0), None, 4096, Time(0), 0, 0);
        assert_eq!(m.size_kib, 4);
        assert_eq!(m.job(TransportId(0), || 7).slots, 7);
        assert_eq!(m.job(TransportId(0), || 99).slots, 7);
        m.job(TransportId(1), || 3);
        assert_eq!(m.jobs.len(), 2);
        assert_eq!(m.jobs.iter().map(|j| j.slots).sum::<u32>(), 10);
        assert!(std::mem::size_of::<Message>() <= 72, "message stays small");
        assert_eq!(m.tenant(), None);
    }
}
