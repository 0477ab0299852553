//! Typed ids of the scheduler's slabs.
//!
//! One `u32` newtype per structure so that a connection id cannot be used
//! where an entry id is meant. Panics: never.

use crate::slab::typed_id;

typed_id!(
    /// A message in memory.
    MsgId
);
typed_id!(
    /// An entry (delivery request).
    EntryId
);
typed_id!(
    /// A destination (transport, nexthop).
    DestId
);
typed_id!(
    /// A connection (worker).
    ConnId
);
typed_id!(
    /// A host record in destdb.
    HostId
);
typed_id!(
    /// A transport (index into the configuration).
    TransportId
);
typed_id!(
    /// An interned class key or tenant.
    KeyId
);
