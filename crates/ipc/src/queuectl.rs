//! The queue control protocol: `sluice queue` asking qmgr about messages,
//! and `sluice status` / `sluice top` asking it for its figures.

use serde::{Deserialize, Serialize};

/// Marker type for the queue control protocol.
#[derive(Debug)]
pub enum QueueCtl {}

impl crate::Protocol for QueueCtl {
    const NAME: &'static str = "sluice-queuectl";
    const VERSION: u32 = 9;
    type Request = Request;
    type Response = Response;
}

/// What `sluice queue` asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Every message in the queue, oldest first.
    List,
    /// Make every deferred message due now (`sendmail -q`, `sluice queue flush`).
    Flush,
    /// One message in detail.
    Show {
        /// Its queue id.
        id: String,
    },
    /// Put the selected messages on hold (not delivered until released).
    Hold(Selector),
    /// Release the selected messages from hold.
    Release(Selector),
    /// Delete the selected messages, without notice to anyone.
    Delete(Selector),
    /// Deliver the selected messages now, routing them afresh.
    Requeue(Selector),
    /// Queue sizes, delivery rates and the `top` busiest destinations, from
    /// qmgr's memory (no journal reads, unlike `List`).
    Summary {
        /// How many destinations to report.
        top: u32,
    },
    /// Suspend delivery of mail with these shaping field values
    /// (`sluice queue suspend FIELD=VALUE…`).
    Suspend {
        /// (field, value) pairs, as `localip`, `grouping`, `tenantid`…
        when: Vec<(String, String)>,
        /// For this many seconds (none: until resumed).
        for_secs: Option<u64>,
        /// Free text shown with it.
        tag: Option<String>,
    },
    /// Lift a suspension or back-off (`sluice queue resume ID`).
    Resume {
        /// Its id.
        id: u64,
    },
    /// The suspensions and back-offs in force (`sluice queue suspensions`).
    Suspensions,
    /// The shaping policy's keys and holds (`sluice policy show`).
    Policy,
    /// Take the selected messages out of delivery to move them
    /// (`sluice queue move`), a page at a time: at most `max` (qmgr may
    /// take fewer) after `after`; answered with the ids now moving and
    /// where the next page starts.
    MoveBegin {
        /// The selection.
        sel: Selector,
        /// The previous page's `next`.
        after: Option<String>,
        /// Most ids in this page.
        max: u32,
    },
    /// Moving messages' states and data locations, each once no delivery
    /// of it is under way (many per request: one round trip for a batch).
    MoveTake {
        /// Their queue ids.
        ids: Vec<String>,
    },
    /// Receivers have these messages: remove them here.
    MoveDone {
        /// Per message: its queue id here, the receiving instance, its
        /// queue id there.
        moved: Vec<(String, String, String)>,
    },
    /// The link to clusterd and this instance's share of the cluster's
    /// limits (`sluice cluster status`).
    Cluster,
    /// One page of the queue as `sluice sim` replays it: at most `max`
    /// messages or destinations (qmgr may give fewer) from where `from`
    /// says; the first page of messages also carries the holds in force.
    Snapshot {
        /// Which part, and where the page starts.
        from: SnapFrom,
        /// Messages or destinations per page.
        max: u32,
    },
}

/// Which part of a snapshot a page holds, and after what: messages are
/// paged first, then destinations, each in its own key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapFrom {
    /// Messages after this queue id (none: from the first).
    Messages(Option<String>),
    /// Destinations after this (transport, nexthop) (none: from the first).
    Destinations(Option<(String, String)>),
}

/// Which messages an operation applies to: those that match every
/// filter given (ids, when named, are one of the filters).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selector {
    /// These queue ids (empty: any).
    pub ids: Vec<String>,
    /// Messages from this envelope sender (exact, case-insensitive).
    pub sender: Option<String>,
    /// Messages with a pending recipient in this domain.
    pub domain: Option<String>,
    /// Messages of this tenant.
    pub tenant: Option<String>,
    /// Messages of this job.
    pub job: Option<String>,
    /// Only deferred messages (tried, waiting for a retry).
    pub deferred: bool,
    /// Only messages on hold.
    pub held: bool,
    /// Every message: said so that an empty selection is never taken for
    /// "all" (sluice(1) gives it alone; with filters, they apply).
    pub all: bool,
}

impl Selector {
    /// Every message.
    pub fn all() -> Selector {
        Selector {
            all: true,
            ..Selector::default()
        }
    }

    /// These queue ids.
    pub fn ids(ids: Vec<String>) -> Selector {
        Selector {
            ids,
            ..Selector::default()
        }
    }

    /// Messages with a pending recipient in this domain.
    pub fn domain(domain: &str) -> Selector {
        Selector {
            domain: Some(domain.to_string()),
            ..Selector::default()
        }
    }

    /// Whether it names anything: ids, a filter, or `all`.
    pub fn is_given(&self) -> bool {
        self.all
            || !self.ids.is_empty()
            || self.sender.is_some()
            || self.domain.is_some()
            || self.tenant.is_some()
            || self.job.is_some()
            || self.deferred
            || self.held
    }
}

/// A message taken out of delivery for a move, as the mover sends it on:
/// everything the receiver needs to queue it as it was here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Movable {
    /// Queue id, envelope (all original recipients) and where the data is.
    pub head: queue::MessageHead,
    /// Recipient indices still to deliver.
    pub remaining: Vec<u32>,
    /// Next attempt, seconds since the epoch (0: due now).
    pub next_attempt: u64,
    /// Attempts made here.
    pub attempts: u32,
    /// On hold before the move (stays so at the receiver).
    pub held: bool,
    /// The sender was warned of the delay already.
    pub warned: bool,
    /// Notices owed for recipients already done (bounced, or delivered
    /// with NOTIFY=SUCCESS): the receiver sends them.
    pub owed: Vec<Owed>,
    /// Where to read the data, relative to the queue directory.
    pub data: crate::delivery::Data,
}

/// A notice owed for one recipient of a moved message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owed {
    /// Recipient index.
    pub index: u32,
    /// Its enhanced status.
    pub status: mail::StatusCode,
    /// The reason as logged.
    pub reason: String,
    /// A success notice (`Some(relayed)`) rather than a bounce.
    pub success: Option<bool>,
}

/// qmgr's answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to `List`.
    List(Vec<QueuedMessage>),
    /// The answer to `Flush`: how many messages became due.
    Flushed(u64),
    /// The answer to `Show`: the message as text, or why not.
    Shown(Result<String, String>),
    /// The answer to hold, release, delete and requeue: how many messages it changed.
    Done(u64),
    /// The answer to `Summary`.
    Summary(Box<Summary>),
    /// The answer to `Suspend`: the new hold's id, or why not.
    Suspended(Result<u64, String>),
    /// The answer to `Resume`: whether there was such a hold.
    Resumed(bool),
    /// The answer to `Suspensions`, or why there are none (no policy).
    Holds(Result<Vec<HoldView>, String>),
    /// The answer to `Policy`, or why there is none.
    Policy(Result<Box<PolicyView>, String>),
    /// The answer to `Cluster`, or why there is none (no cluster_server).
    Cluster(Result<Box<ClusterView>, String>),
    /// The answer to `MoveBegin`: the ids now moving, and where the next
    /// page starts (`None`: that was the last).
    Moving {
        /// The ids.
        ids: Vec<String>,
        /// The next page's `after`.
        next: Option<String>,
    },
    /// The answer to `MoveTake`, per id in its order: the message, `None`
    /// while a delivery of it is under way (ask again), or why not.
    Movable(Vec<Result<Option<Box<Movable>>, String>>),
    /// The answer to `Snapshot`.
    Snapshot(Box<Snapshot>),
}

/// One page of the queue for `sluice sim`, taken without stopping delivery.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// qmgr's clock, milliseconds since the epoch.
    pub now_ms: u64,
    /// Messages in queue id order.
    pub messages: Vec<SnapMessage>,
    /// Whether more of this page's part (messages or destinations) follow.
    pub more: bool,
    /// Destinations the scheduler knows, with their recent behaviour, in
    /// (transport, nexthop) order.
    pub destinations: Vec<SnapDest>,
    /// Suspensions and back-offs in force (first page of messages).
    pub holds: Vec<HoldView>,
    /// The same holds in the form qmgr saves them across a restart
    /// (`shaping::holdfile`), for the replay to put in force.
    pub holds_saved: String,
    /// Recent times from a message's arrival to the scheduler (cleanup's
    /// commit, qmgr's pickup, routing) in ms, first attempts only, oldest
    /// first (first page of messages).
    pub pickup_ms: Vec<u32>,
}

/// A queued message as `sluice sim` replays it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapMessage {
    /// Queue id.
    pub id: String,
    /// Arrival, milliseconds since the epoch.
    pub arrival_ms: u64,
    /// Envelope sender.
    pub sender: String,
    /// Size in bytes.
    pub size: u64,
    /// Tenant, if any.
    pub tenant: Option<String>,
    /// Job, if any.
    pub job: Option<String>,
    /// On hold.
    pub held: bool,
    /// Next attempt, seconds since the epoch (0: due now).
    pub next_attempt: u64,
    /// In delivery now (in the scheduler's active queue).
    pub active: bool,
    /// Recipients still to deliver, grouped by domain and route.
    pub recipients: Vec<SnapRcpt>,
}

/// Pending recipients of one message with the same domain and, when qmgr
/// has routed them, the same transport and nexthop (grouped, so that a
/// mailing list is a few entries, not a million addresses).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapRcpt {
    /// Their domain, lower-cased.
    pub domain: String,
    /// Their transport; empty while not routed.
    pub transport: String,
    /// Their nexthop; empty while not routed.
    pub nexthop: String,
    /// How many.
    pub count: u32,
}

/// A destination with what the scheduler's counters saw of it recently.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapDest {
    /// Transport.
    pub transport: String,
    /// Nexthop.
    pub nexthop: String,
    /// Entries in the active queue.
    pub entries: u32,
    /// Concurrency window.
    pub window: u32,
    /// Connections open or opening.
    pub busy: u32,
    /// When it is tried again, milliseconds since the epoch, if dead.
    pub dead_until_ms: Option<u64>,
    /// Recent transaction times in ms with their recipient counts.
    pub txn_ms: Vec<(u32, u16)>,
    /// Recent connect-plus-greeting times in ms.
    pub greeting_ms: Vec<u32>,
    /// Recipients answered 2xx, 4xx, 5xx, and failed connections, recently.
    pub replies: [u64; 4],
    /// Most connections open while one delivered.
    pub busy_ok: u32,
    /// Connections open at its last handshake failure, if any.
    pub refused_at: Option<u32>,
    /// How long each of its transactions under way had run, in ms.
    pub running_ms: Vec<u32>,
}

/// The link to clusterd, as `sluice status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterLink {
    /// clusterd's address (`cluster_server`).
    pub coordinator: String,
    /// `linked`, `connecting`, or `degraded`: limits divided by the last
    /// known count.
    pub state: String,
    /// Instances connected, as last announced (0: never heard).
    pub instances: u32,
    /// Times the link was lost since qmgr started.
    pub losses: u64,
}

/// One shared key as `sluice cluster status` shows it: the cluster's
/// limit beside this instance's share and use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterKeyView {
    /// `field=value,…`.
    pub key: String,
    /// The cluster's concurrency, when it is shared.
    pub concurrency: Option<u32>,
    /// This instance's share of it now.
    pub local_concurrency: Option<u32>,
    /// Connections this instance has open.
    pub connections: u32,
    /// The cluster's rate (`N/S`), when it is shared.
    pub rate: Option<String>,
    /// This instance's part of it now.
    pub local_rate: Option<String>,
}

/// `sluice cluster status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterView {
    /// The link.
    pub link: ClusterLink,
    /// The instances connected, by name.
    pub names: Vec<String>,
    /// Shared keys in use.
    pub keys: Vec<ClusterKeyView>,
}

/// A suspension or back-off as `sluice queue suspensions` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldView {
    /// Its id.
    pub id: u64,
    /// `operator`, `static` (the policy file) or `reply` (a reply rule).
    pub origin: String,
    /// The held values, `field=value,…`.
    pub when: String,
    /// Seconds until the hold proper ends (none: until lifted).
    pub remaining: Option<u64>,
    /// `suspend`, or the limits of a back-off (`concurrency=1 rate=1/10s`).
    pub action: String,
    /// Whether it is ramping back after its end.
    pub ramping: bool,
    /// Its tag.
    pub tag: String,
}

/// One policy key as `sluice policy show` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyView {
    /// `field=value,…`.
    pub key: String,
    /// Configured concurrency.
    pub concurrency: Option<u32>,
    /// Concurrency allowed now (lower during a hold or ramp; 0 suspended).
    pub concurrency_now: Option<u32>,
    /// Configured rate, `N/S` seconds.
    pub rate: Option<String>,
    /// Rate allowed now.
    pub rate_now: Option<String>,
    /// Other configured properties, as written in the file.
    pub other: String,
    /// Properties that stay per instance in a cluster (`cluster: false`).
    pub local: String,
    /// This instance's share of a concurrency granted cluster-wide.
    pub local_concurrency: Option<u32>,
    /// This instance's part of a rate divided between the instances.
    pub local_rate: Option<String>,
    /// Connections open now.
    pub connections: u32,
    /// Connections opened and transactions started since it was first seen.
    pub opened: u64,
    /// Transactions started.
    pub transactions: u64,
}

/// The shaping state as `sluice policy show` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyView {
    /// `tokenbucket` or `fixedwindow`.
    pub algorithm: String,
    /// Keys in use, sorted.
    pub keys: Vec<KeyView>,
    /// Holds in force.
    pub holds: Vec<HoldView>,
}

/// qmgr's figures for monitoring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// qmgr's clock, seconds since the epoch.
    pub now: u64,
    /// Messages queued.
    pub messages: u64,
    /// Not yet handed to delivery (new, released, or due again).
    pub incoming: u64,
    /// Being delivered.
    pub active: u64,
    /// Waiting for their retry time.
    pub deferred: u64,
    /// On hold.
    pub hold: u64,
    /// Recipients of active messages in the scheduler's memory.
    pub active_recipients: u64,
    /// Recipients delivered since qmgr started.
    pub sent: Counter,
    /// Recipient deferrals since qmgr started.
    pub deferrals: Counter,
    /// Recipients bounced since qmgr started.
    pub bounced: Counter,
    /// The active queue per transport and class.
    pub transports: Vec<TransportSummary>,
    /// The busiest destinations, most queued first.
    pub destinations: Vec<DestSummary>,
    /// The shaping policy's busiest keys (most connections, then most
    /// messages), when a policy is in force.
    pub policy_keys: Vec<KeyView>,
    /// Suspensions and back-offs in force.
    pub holds: Vec<HoldView>,
    /// Egress proxies (`smtp_proxy`) that failed since qmgr started.
    pub proxies: Vec<ProxySummary>,
    /// The link to clusterd, when `cluster_server` is set.
    pub cluster: Option<ClusterLink>,
}

/// One egress proxy's failures, as the delivery agents reported them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxySummary {
    /// The transport whose agent tried it.
    pub transport: String,
    /// The proxy, `address:port`.
    pub proxy: String,
    /// Connections it could not take (refused, timed out).
    pub failures: u64,
}

/// An event counter: its total and its recent counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// Since qmgr started.
    pub total: u64,
    /// In the last 10 seconds.
    pub last_10s: u64,
    /// In the last 60 seconds.
    pub last_60s: u64,
}

impl Counter {
    /// Events per second over the last 10 seconds.
    pub fn rate_10s(&self) -> f64 {
        self.last_10s as f64 / 10.0
    }

    /// Events per second over the last 60 seconds.
    pub fn rate_60s(&self) -> f64 {
        self.last_60s as f64 / 60.0
    }
}

/// The scheduling class names, in the order of the per-class arrays.
pub const CLASSES: [&str; 3] = ["small", "medium", "large"];

/// One transport's share of the active queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportSummary {
    /// The transport (master.cf service) name.
    pub name: String,
    /// Entries waiting, per class (see [`CLASSES`]).
    pub queued: [u64; 3],
    /// Entries on connections, per class.
    pub inflight: [u64; 3],
    /// Connections open or opening.
    pub connections: u32,
    /// Destinations the scheduler knows.
    pub destinations: u64,
    /// Of which dead.
    pub dead: u64,
}

/// One destination as `sluice top` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestSummary {
    /// Its transport.
    pub transport: String,
    /// Its nexthop.
    pub destination: String,
    /// Entries in the active queue: waiting, on connections, in flight.
    pub queued: u64,
    /// Entries on its connections.
    pub inflight: u64,
    /// Messages deferred for it and waiting for their retry.
    pub deferred: u64,
    /// Its concurrency window.
    pub window: u32,
    /// Connections open or opening (busy workers).
    pub busy: u32,
    /// Whether it is dead (not tried until `retry_at`).
    pub dead: bool,
    /// When a dead destination is tried again, seconds since the epoch.
    pub retry_at: Option<u64>,
    /// Recipients delivered to it.
    pub sent: Counter,
}

/// One queued message as `mailq` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedMessage {
    /// The queue id.
    pub id: String,
    /// Message size in bytes.
    pub size: u64,
    /// Arrival time, seconds since the epoch.
    pub arrival: u64,
    /// The envelope sender ("" for the null sender).
    pub sender: String,
    /// `active`, `deferred` or `hold`.
    pub state: String,
    /// Recipients still to be delivered, with the last reason if deferred.
    pub recipients: Vec<QueuedRecipient>,
    /// The traffic shaping tenant, if the message has one.
    pub tenant: Option<String>,
    /// The traffic shaping job, if the message has one.
    pub job: Option<String>,
}

/// One pending recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedRecipient {
    /// The address.
    pub address: String,
    /// The last deferral reason, if any.
    pub reason: Option<String>,
}

/// The listing in Postfix's `mailq` / `postqueue -p` format, so that
/// scripts and qshape-style tools keep working.
pub fn mailq(list: &[QueuedMessage]) -> String {
    if list.is_empty() {
        return "Mail queue is empty\n".to_string();
    }
    let mut out =
        String::from("-Queue ID-  --Size-- ----Arrival Time---- -Sender/Recipient-------\n");
    let mut bytes = 0u64;
    for m in list {
        let mark = match m.state.as_str() {
            "active" => "*",
            "hold" => "!",
            _ => "",
        };
        let when = sys::time::mailq_stamp(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(m.arrival),
        );
        let sender = if m.sender.is_empty() {
            "MAILER-DAEMON"
        } else {
            &m.sender
        };
        out.push_str(&format!(
            "{:<11} {:>8} {} {}\n",
            format!("{}{mark}", m.id),
            m.size,
            when,
            sender
        ));
        for r in &m.recipients {
            if let Some(reason) = &r.reason {
                out.push_str(&format!("{:<41} ({reason})\n", ""));
            }
            out.push_str(&format!("{:<41} {}\n", "", r.address));
        }
        out.push('\n');
        bytes += m.size;
    }
    let n = list.len();
    out.push_str(&format!(
        "-- {} Kbytes in {n} Request{}.\n",
        bytes.div_ceil(1024),
        if n == 1 { "" } else { "s" }
    ));
    out
}

/// The listing as JSON: one object per line, as `postqueue -j` prints it,
/// plus `tenant` and `job` when the message has them.
pub fn json_lines(list: &[QueuedMessage]) -> String {
    let mut out = String::new();
    for m in list {
        let rcpts: Vec<String> = m
            .recipients
            .iter()
            .map(|r| {
                format!(
                    "{{\"address\":{}{}}}",
                    json_str(&r.address),
                    r.reason
                        .as_deref()
                        .map(|x| format!(",\"delay_reason\":{}", json_str(x)))
                        .unwrap_or_default()
                )
            })
            .collect();
        let ids: String = [("tenant", &m.tenant), ("job", &m.job)]
            .iter()
            .filter_map(|(k, v)| Some(format!(",\"{k}\":{}", json_str(v.as_deref()?))))
            .collect();
        out.push_str(&format!(
            "{{\"queue_name\":{},\"queue_id\":{},\"arrival_time\":{},\"message_size\":{},\"sender\":{}{ids},\"recipients\":[{}]}}\n",
            json_str(&m.state),
            json_str(&m.id),
            m.arrival,
            m.size,
            json_str(&m.sender),
            rcpts.join(",")
        ));
    }
    out
}

/// A JSON string literal (RFC 8259 escaping).
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<QueuedMessage> {
        vec![QueuedMessage {
            id: "ABC123".into(),
            size: 2048,
            arrival: 0,
            sender: String::new(),
            state: "hold".into(),
            recipients: vec![
                QueuedRecipient {
                    address: "a@example.org".into(),
                    reason: None,
                },
                QueuedRecipient {
                    address: "b\"q@example.org".into(),
                    reason: Some("connect timeout".into()),
                },
            ],
            tenant: None,
            job: None,
        }]
    }

    #[test]
    fn mailq_shape_matches_postfix() {
        let text = mailq(&sample());
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("-Queue ID-"));
        assert!(
            lines[1].starts_with("ABC123!") && lines[1].ends_with("MAILER-DAEMON"),
            "{text}"
        );
        assert_eq!(lines[2].trim(), "a@example.org");
        assert_eq!(lines[3].trim(), "(connect timeout)");
        assert_eq!(lines.last().unwrap(), &"-- 2 Kbytes in 1 Request.");
        assert_eq!(mailq(&[]), "Mail queue is empty\n");
    }

    #[test]
    fn json_escapes() {
        let j = json_lines(&sample());
        assert!(
            j.contains(r#""address":"b\"q@example.org","delay_reason":"connect timeout""#),
            "{j}"
        );
        assert_eq!(json_str("a\u{1}b"), "\"a\\u0001b\"");
        assert!(!j.contains("tenant") && !j.contains("\"job\""), "{j}");
        let mut m = sample();
        m[0].tenant = Some("acme".into());
        m[0].job = Some("spring \"sale\"".into());
        let j = json_lines(&m);
        assert!(
            j.contains(r#""sender":"","tenant":"acme","job":"spring \"sale\"","recipients":["#),
            "{j}"
        );
    }
}
