//! Events into and actions out of the scheduler.
//!
//! The shell (qmgr or the simulator) feeds [`Event`]s with `handle(now, ev)`
//! and drains [`Action`]s with `poll_action()`. Ids in actions are the
//! scheduler's own typed ids; `Scheduler::host_name` and friends turn them
//! into names. Outcomes are typed (`mail::Status`: an enhanced code and
//! its text), never `"4.4.1 text"` strings to be split again. Panics: never.

pub use mail::{Status, StatusCode};

use crate::config::SchedConfig;
use crate::ids::{ConnId, DestId, EntryId, HostId, TransportId};
use crate::time::Time;

/// The caller's queue id of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueId(pub u64);

/// A message entering the active queue (its recipients come with `RecipientsRead`).
#[derive(Clone, Debug)]
pub struct NewMessage {
    /// Queue id.
    pub queue_id: QueueId,
    /// Envelope sender (the default class key).
    pub sender: String,
    /// Tenant, if the site has tenants.
    pub tenant: Option<String>,
    /// Job (campaign) id, if the message has one.
    pub job: Option<String>,
    /// Message size in bytes.
    pub size: u64,
    /// Arrival time (for expiry and back-off).
    pub arrival: Time,
    /// Delivery attempts made so far (0 for new mail).
    pub attempts: u32,
    /// Recipients still to deliver, all unread for now.
    pub recipients: u32,
}

/// Recipients of one message resolved to one (transport, nexthop).
#[derive(Clone, Debug)]
pub struct RecipientGroup {
    /// Transport name (master.cf service).
    pub transport: String,
    /// Nexthop (domain or `[host]:port`).
    pub nexthop: String,
    /// Hosts by MX preference level, best level first.
    pub hosts: Vec<Vec<String>>,
    /// The recipients' domain when the caller splits groups by domain for
    /// shaping (behind a relayhost the nexthop is not the domain); empty
    /// means the nexthop's.
    pub domain: String,
    /// Recipient indexes within the message.
    pub recipients: Vec<u32>,
}

/// Result of one recipient in a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RcptStatus {
    /// 2xx.
    Delivered,
    /// 4xx, with its status.
    Deferred(Status),
    /// 5xx, with its status.
    Bounced(Status),
}

/// Why a connection could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnFailure {
    /// Connect refused or timed out: the host was not reached.
    Unreachable,
    /// Reached, but the greeting or handshake failed (421, timeout, TLS).
    Handshake,
    /// The agent's side failed before the host was tried (no egress proxy
    /// answered, the source address cannot be bound): the entry is
    /// deferred, and nothing counts against the destination or its host.
    Local,
}

/// Input to the scheduler.
#[derive(Clone, Debug)]
pub enum Event {
    /// A message enters the active queue; the scheduler will ask for recipients.
    MessageAdded(NewMessage),
    /// Answer to `Action::ReadRecipients`; `remaining` are still unread after this batch.
    RecipientsRead {
        /// Message.
        queue_id: QueueId,
        /// The recipients read, resolved.
        groups: Vec<RecipientGroup>,
        /// Recipients left unread in the queue file.
        remaining: u32,
    },
    /// A connection asked for by `Action::Open` is up.
    ConnectionOpened {
        /// Connection.
        conn: ConnId,
    },
    /// A connection asked for by `Action::Open` could not be set up.
    ConnectionFailed {
        /// Connection.
        conn: ConnId,
        /// Kind of failure.
        failure: ConnFailure,
        /// What the deferral says.
        status: Status,
        /// The server's reply that refused the connection (at the greeting,
        /// EHLO, or a 421), as it was sent: the policy's reply rules see it.
        remote: Option<mail::RemoteReply>,
    },
    /// The peer or the agent closed a connection.
    ConnectionClosed {
        /// Connection.
        conn: ConnId,
    },
    /// A transaction started by `Action::Start` finished.
    DeliveryDone {
        /// Connection.
        conn: ConnId,
        /// Entry.
        entry: EntryId,
        /// Per recipient index.
        results: Vec<(u32, RcptStatus)>,
        /// The connection or handshake failed during the transaction.
        conn_failed: bool,
        /// The servers' replies that deferred or bounced recipients, as
        /// they were sent, each once: the policy's reply rules see them.
        remote: Vec<mail::RemoteReply>,
    },
    /// A delivery agent slot of this transport became free.
    AgentSlotFree {
        /// Transport name.
        transport: String,
    },
    /// Limiter shares changed (e.g. a cluster grant); wake rate-limited destinations.
    LimitsChanged,
    /// New configuration (main.cf reload).
    ConfigChanged(Box<SchedConfig>),
    /// The delivery agent holding the connection went away (it crashed or
    /// its link broke): the transaction running on it, if any, is deferred
    /// with `status` and the rest rescheduled, with no feedback to the
    /// destination, whose fault it was not.
    ConnectionLost {
        /// Connection.
        conn: ConnId,
        /// What the deferral says.
        status: Status,
    },
    /// The operator flushed the queue: unreachable hosts and dead
    /// destinations are tried again now, as Postfix's flush unthrottles
    /// its queues.
    Flush,
    /// Suspend mail with these field values (`sluice queue suspend`), until
    /// `until` or until resumed; answered with `Notice::Suspended`.
    Suspend {
        /// Field values of the mail to hold.
        when: Vec<(shaping::Field, String)>,
        /// End, if timed.
        until: Option<Time>,
        /// Free text.
        tag: Option<String>,
    },
    /// Restore a suspension saved before a restart.
    RestoreHold(shaping::Hold),
    /// Another instance of the cluster could not reach this host (an MX
    /// name): it is skipped here too until `until`.
    HostRetryElsewhere {
        /// The host.
        host: String,
        /// Until when.
        until: Time,
    },
    /// Another instance of the cluster found this next hop dead until
    /// `until`: its destinations here wait too, without connect timeouts.
    DeadElsewhere {
        /// The next hop.
        nexthop: String,
        /// When it is tried again.
        until: Time,
    },
    /// A connection closed by `Action::Close` is gone: the slots of its
    /// shaping binding are free.
    SlotReleased {
        /// The binding of `Action::Close`'s `release`.
        bind: shaping::BindId,
    },
    /// Lift a suspension or back-off by id.
    Resume {
        /// The hold's id.
        id: u64,
    },
}

/// A journal record the shell must write.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// Recipients delivered.
    Delivered {
        /// Message.
        queue_id: QueueId,
        /// Recipient indexes.
        recipients: Vec<u32>,
    },
    /// Recipients deferred until `next_attempt`.
    Deferred {
        /// Message.
        queue_id: QueueId,
        /// Recipient indexes.
        recipients: Vec<u32>,
        /// Why.
        status: Status,
        /// Earliest retry.
        next_attempt: Time,
    },
    /// Recipients bounced.
    Bounced {
        /// Message.
        queue_id: QueueId,
        /// Recipient indexes.
        recipients: Vec<u32>,
        /// Why.
        status: Status,
    },
}

/// Something the shell logs (cores do not log).
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    /// Failed pseudo-cohorts passed the limit: the destination is dead until `retry_at`.
    DestinationDead {
        /// Destination.
        destination: DestId,
        /// When it is tried again.
        retry_at: Time,
    },
    /// The dead period ended; deliveries resume at `window`.
    DestinationRetry {
        /// Destination.
        destination: DestId,
        /// Window after the retry.
        window: u32,
    },
    /// A delivery succeeded to a dead destination: it is alive again.
    DestinationRevived {
        /// Destination.
        destination: DestId,
    },
    /// Concurrency window changed (only with `destination_concurrency_feedback_debug`).
    Window {
        /// Destination.
        destination: DestId,
        /// Old window.
        from: u32,
        /// New window.
        to: u32,
    },
    /// A hold was put in place (by the operator or by a reply rule, whose
    /// index is given); the shell saves holds to survive a restart.
    Suspended {
        /// The hold.
        hold: shaping::Hold,
    },
    /// A hold was lifted by the operator.
    Resumed {
        /// Its id.
        id: u64,
    },
    /// destdb will skip this host until `until`.
    HostRetry {
        /// Host.
        host: HostId,
        /// Retry time.
        until: Time,
    },
}

/// Output of the scheduler.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Read up to `max` more recipients of the message and answer with `RecipientsRead`.
    ReadRecipients {
        /// Message.
        queue_id: QueueId,
        /// Maximum batch size.
        max: u32,
    },
    /// Open a connection.
    Open {
        /// New connection id.
        conn: ConnId,
        /// Transport.
        transport: TransportId,
        /// Destination.
        destination: DestId,
        /// Host to connect to.
        host: HostId,
        /// Local source address to bind (from the policy's pool), if any.
        source: Option<std::net::IpAddr>,
    },
    /// Start a transaction for an entry on an open connection.
    Start {
        /// Connection.
        conn: ConnId,
        /// Entry.
        entry: EntryId,
        /// Message.
        queue_id: QueueId,
        /// Recipient indexes.
        recipients: Vec<u32>,
    },
    /// Close a connection (QUIT); no `ConnectionClosed` is expected back.
    Close {
        /// Connection.
        conn: ConnId,
        /// The shaping binding whose slots the connection still holds: the
        /// remote server counts it until it is really gone, so the shell
        /// hands it back with `Event::SlotReleased` once the agent says the
        /// connection closed (or at once when nothing is to be closed).
        release: Option<shaping::BindId>,
    },
    /// An entry's recipients are deferred.
    Defer {
        /// Message.
        queue_id: QueueId,
        /// Recipient indexes.
        recipients: Vec<u32>,
        /// Why.
        status: Status,
        /// Earliest retry.
        next_attempt: Time,
    },
    /// An entry's recipients bounce (5xx or expired).
    Bounce {
        /// Message.
        queue_id: QueueId,
        /// Recipient indexes.
        recipients: Vec<u32>,
        /// Why.
        status: Status,
    },
    /// Write a journal record.
    Journal(Record),
    /// The message left memory; with `next_attempt` it has deferred recipients to retry then.
    MessageDone {
        /// Message.
        queue_id: QueueId,
        /// Retry time, if recipients were deferred.
        next_attempt: Option<Time>,
    },
    /// Something to log.
    Notice(Notice),
}
