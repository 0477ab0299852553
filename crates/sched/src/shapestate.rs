//! The scheduler's traffic-shaping state: the [`Shaper`] that counts, the
//! message sides interned, the source pools' cursors, and how a shaper's
//! refusal reads to the dispatcher. What the scheduler does with them is
//! `shape`.

use crate::ids::{DestId, EntryId, KeyId, MsgId};
use crate::time::Time;
use shaping::{Binding, Block, FieldSet, Policy, Shaper};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The scheduler's shaping state.
#[derive(Debug)]
pub(crate) struct Shaping {
    /// The policy's live counts, holds and suspensions.
    pub(crate) shaper: Shaper,
    /// The fields an entry's side carries (`refresh_used`).
    pub(crate) used: FieldSet,
    /// Destinations parked on `Park::Shaping`.
    pub(crate) waiters: Vec<DestId>,
    /// The next address of each source pool.
    pub(crate) cursor: HashMap<String, usize>,
    /// The grouping of destinations whose entries carry no domain of their own.
    pub(crate) groupings: HashMap<DestId, Option<Box<str>>>,
    /// When the change timer is armed for.
    pub(crate) timer: Option<Time>,
    /// Sides interned: (values, pool) → id.
    pub(crate) sides: HashMap<(Binding, Option<Box<str>>), u32>,
    /// The id the next side interned gets.
    pub(crate) next_side: u32,
    /// Sides by (destination, tenant, job, sender domain, own domain) key ids.
    pub(crate) cache: HashMap<(DestId, u32, u32, u32, u32), Arc<Side>>,
}

/// Message-side values kept only while shaping is on or a message has them.
#[derive(Debug, Default)]
pub(crate) struct ShapeSide {
    /// Job id of messages that have one (interned in the scheduler's keys).
    pub(crate) jobs: BTreeMap<MsgId, KeyId>,
    /// Sender domain of messages, interned (only while a policy is loaded).
    pub(crate) sender_domains: BTreeMap<MsgId, KeyId>,
    /// Domain of entries whose domain is not their destination's nexthop
    /// (behind a relayhost), interned.
    pub(crate) domains: BTreeMap<EntryId, KeyId>,
}

impl Shaping {
    /// Shaping under `policy`, nothing counted yet.
    pub(crate) fn new(policy: Arc<Policy>) -> Shaping {
        let used = policy.fields_used();
        Shaping {
            shaper: Shaper::new(policy),
            used,
            waiters: Vec::new(),
            cursor: HashMap::new(),
            groupings: HashMap::new(),
            timer: None,
            sides: HashMap::new(),
            next_side: 1,
            cache: HashMap::new(),
        }
    }

    /// A new policy: the shaper takes it; cached sides and groupings go.
    pub(crate) fn reload(&mut self, policy: Arc<Policy>) {
        self.shaper.reload(policy);
        self.refresh_used();
        self.groupings.clear();
        // Connections keep their side ids; new entries get fresh ones.
        self.cache.clear();
    }
}

/// A refusal to open or send, as the dispatcher acts on it.
pub(crate) enum Refusal {
    /// Park until then.
    Until(Time),
    /// Park until a shaped connection closes or the limits change.
    Wait,
}

impl From<Block> for Refusal {
    fn from(b: Block) -> Refusal {
        match b {
            Block::Until(t) => Refusal::Until(Time(t)),
            Block::Full(_) | Block::Suspended => Refusal::Wait,
        }
    }
}

/// The message side of an entry as shaping sees it: the values of the
/// fields some policy uses, and the source pool its mail leaves from.
/// Entries with the same side may share a connection.
#[derive(Debug)]
pub(crate) struct Side {
    /// Its interned id (what a connection keeps).
    pub(crate) id: u32,
    /// The values, of used fields only.
    pub(crate) binding: Binding,
    /// The `sources:` pool, if one applies.
    pub(crate) pool: Option<Box<str>>,
    /// The tenant, job, sender domain and own domain it was made for: the
    /// cache is keyed by their interned ids, which are reused once freed.
    pub(crate) names: [Box<str>; 4],
}

impl Shaping {
    /// The fields an entry's side carries: those the policy uses and those
    /// the holds in force name (an operator may suspend by a field no
    /// policy counts by). A change empties the sides' cache.
    pub(crate) fn refresh_used(&mut self) {
        let mut used = self.shaper.policy().fields_used();
        for h in self.shaper.active_holds(0) {
            for (f, _) in &h.when {
                used.insert(*f);
            }
        }
        if used != self.used {
            self.used = used;
            self.cache.clear();
            self.groupings.clear();
        }
    }
}
