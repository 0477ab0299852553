//! The parameter table: every main.cf parameter Sluice knows, in one place.
//!
//! Each entry gives the name, the type (which decides validation), the
//! default as Postfix writes it (it may contain `$name`), a one-line
//! description, and whether a transport may override it with
//! `<transport>_<name>` (a leading `default_` is dropped first, Postfix's
//! rule). `sluice config -d`, load-time validation and sluice.conf(5) are all
//! generated from this table, so adding a parameter here is all it takes.
//! Defaults follow Postfix where the meaning is the same. Two defaults are
//! computed from the system rather than written down: `myhostname` and
//! `mydomain` (see `DefaultValue`).

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::value::{ParamType, TimeUnit};

/// Where a parameter's default comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultValue {
    /// Literal text as in main.cf (may contain `$name`).
    Text(&'static str),
    /// The system host name; `.localdomain` (or `.$mydomain` when set) is
    /// appended when it has no dot, as Postfix does.
    Hostname,
    /// `$myhostname` without its first label, or `localdomain`.
    Domain,
    /// The version of this build (kept out of the man page so that it does
    /// not change with every release).
    Version,
}

/// One row of the parameter table.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    /// The parameter name.
    pub name: &'static str,
    /// Its type.
    pub ty: ParamType,
    /// Its default.
    pub default: DefaultValue,
    /// One-line description.
    pub doc: &'static str,
    /// Whether `<transport>_<name>` overrides it per transport.
    pub per_transport: bool,
    /// Whether `$name` is expanded at lookup; false for values that the
    /// program expands later with its own variables (e.g. `forward_path`).
    pub expand: bool,
    /// False for a parameter accepted only so that a Postfix main.cf loads:
    /// no program reads it, its doc says what happens instead, and setting
    /// it draws a warning.
    pub implemented: bool,
}

impl ParamSpec {
    /// The name of the override of this parameter for `transport`.
    pub fn transport_name(&self, transport: &str) -> String {
        format!("{transport}_{}", self.short_name())
    }

    /// The name without a leading `default_`.
    pub fn short_name(&self) -> &'static str {
        self.name.strip_prefix("default_").unwrap_or(self.name)
    }

    /// The default as text for documentation: computed defaults are described.
    pub fn default_doc(&self) -> &'static str {
        match self.default {
            DefaultValue::Text(t) => t,
            DefaultValue::Hostname => "(the system host name)",
            DefaultValue::Domain => "(myhostname without its first label)",
            DefaultValue::Version => "(the Sluice version)",
        }
    }
}

const fn p(
    name: &'static str,
    ty: ParamType,
    default: &'static str,
    doc: &'static str,
) -> ParamSpec {
    ParamSpec {
        name,
        ty,
        default: DefaultValue::Text(default),
        doc,
        per_transport: false,
        expand: true,
        implemented: true,
    }
}

/// Per-transport parameter.
const fn t(
    name: &'static str,
    ty: ParamType,
    default: &'static str,
    doc: &'static str,
) -> ParamSpec {
    ParamSpec {
        per_transport: true,
        ..p(name, ty, default, doc)
    }
}

/// Parameter whose value is not `$`-expanded by the configuration.
const fn raw(name: &'static str, default: &'static str, doc: &'static str) -> ParamSpec {
    ParamSpec {
        expand: false,
        ..p(name, ParamType::String, default, doc)
    }
}

/// Parameter that Sluice accepts but does not implement.
const fn no(spec: ParamSpec) -> ParamSpec {
    ParamSpec {
        implemented: false,
        ..spec
    }
}

/// The phrase every unimplemented parameter's doc carries.
#[cfg(test)]
const NOT_IMPLEMENTED_DOC: &str =
    "Accepted so that a Postfix main.cf loads; Sluice does not implement it: ";

use ParamType as T;
const S: ParamType = T::String;
const I: ParamType = T::Int;
const B: ParamType = T::Bool;
const SEC: ParamType = T::Time(TimeUnit::Seconds);
const DAY: ParamType = T::Time(TimeUnit::Days);
const HOUR: ParamType = T::Time(TimeUnit::Hours);
const Z: ParamType = T::Size;
const L: ParamType = T::List;
const M: ParamType = T::MapRef;
const N: ParamType = T::CidrList;
const F: ParamType = T::Feedback;

static PARAMS: &[ParamSpec] = &[
    // Installation and identity.
    p("config_directory", S, "/etc/sluice", "Directory with main.cf and master.cf; set from the -c option, not from main.cf."),
    p("queue_directory", S, "/var/spool/sluice", "Root of the queue: message files, journal, service sockets, pid files."),
    p("daemon_directory", S, "/usr/lib/sluice", "Directory where master finds the service programs."),
    no(p("command_directory", S, "/usr/sbin", "Directory of the administrative commands (sluice, sendmail). Accepted so that a Postfix main.cf loads; Sluice does not implement it: the administrative commands are found through PATH.")),
    p("data_directory", S, "/var/lib/sluice", "Directory for caches and other data that survive a reboot."),
    no(p("process_id_directory", S, "pid", "Directory for pid and lock files, relative to queue_directory. Accepted so that a Postfix main.cf loads; Sluice does not implement it: pid and lock files go to the fixed pid/ directory under queue_directory.")),
    p("mail_owner", S, "sluice", "Unprivileged user that owns the queue and runs the unpriv services."),
    no(p("setgid_group", S, "sluicedrop", "Group used by local submission to reach the public sockets. Accepted so that a Postfix main.cf loads; Sluice does not implement it: sendmail reaches the queue through its own setgid program, whatever the group is called.")),
    p("allow_mail_to_root", B, "no", "Let local, running as root, write root's own mailbox; otherwise mail for root that no alias or .forward takes bounces with 5.7.1."),
    p("default_privs", S, "nobody", "User whose rights local gives commands and files that would otherwise run as root (root-owned aliases, root's .forward)."),
    p("mail_name", S, "Sluice", "Name of the mail system, used in the SMTP greeting and in bounces."),
    no(ParamSpec { default: DefaultValue::Version, ..p("mail_version", S, "", "Version of the mail system (informational). Accepted so that a Postfix main.cf loads; Sluice does not implement it: it only changes what sluice config prints.") }),
    ParamSpec { default: DefaultValue::Hostname, ..p("myhostname", S, "", "Fully qualified host name of this system.") },
    ParamSpec { default: DefaultValue::Domain, ..p("mydomain", S, "", "Internet domain of this system.") },
    p("myorigin", S, "$myhostname", "Domain appended to unqualified sender addresses of local mail."),
    p("mydestination", L, "$myhostname, localhost.$mydomain, localhost", "Domains delivered locally by local_transport."),
    p("mynetworks", N, "127.0.0.0/8 [::1]/128", "Trusted client networks (permit_mynetworks); addresses, CIDRs and type:table entries."),
    p("inet_interfaces", L, "all", "Addresses to listen on for inet services without a host: all, loopback-only or addresses."),
    p("inet_protocols", T::Enum(&["ipv4", "ipv6", "all"]), "all", "IP protocols to use for listening and for connections."),
    // Logging.
    p("maillog_file", S, "", "Log to this file instead of syslog when set."),
    p("syslog_name", S, "sluice", "Prefix of the syslog ident (sluice/<service>)."),
    no(p("syslog_facility", S, "mail", "Syslog facility. Accepted so that a Postfix main.cf loads; Sluice does not implement it: logging always uses the mail facility.")),
    p("delay_logging_resolution_limit", I, "2", "Digits after the decimal point in delay= and delays= log fields."),
    no(p("debug_peer_list", N, "", "Clients and servers whose sessions are logged in detail. Accepted so that a Postfix main.cf loads; Sluice does not implement it: no session is logged in more detail.")),
    no(p("debug_peer_level", I, "2", "Extra verbosity for sessions with debug_peer_list peers. Accepted so that a Postfix main.cf loads; Sluice does not implement it: no session is logged in more detail.")),
    // Master and the daemon skeleton.
    p("max_use", I, "100", "Requests a daemon process serves before it exits."),
    p("max_idle", SEC, "100s", "Time an idle daemon process waits for a request before it exits."),
    p("default_process_limit", I, "100", "Process limit of a master.cf service whose maxproc is -."),
    p("service_throttle_time", SEC, "60s", "Time master waits before restarting a service whose process failed at once."),
    no(p("ipc_timeout", SEC, "3600s", "Time limit for an internal request or reply. Accepted so that a Postfix main.cf loads; Sluice does not implement it: each internal client applies its own timeouts (smtpd_cleanup_timeout, cleanup_qmgr_timeout and the like).")),
    p("ipc_idle", SEC, "5s", "Time an idle client keeps an internal connection open."),
    no(p("daemon_timeout", SEC, "18000s", "Time limit for a daemon process to handle one request. Accepted so that a Postfix main.cf loads; Sluice does not implement it: a daemon process is not limited in time per request.")),
    p("master_stop_timeout", SEC, "10s", "Time master waits after SIGTERM to its children before SIGKILL."),
    no(p("cleanup_service_name", S, "cleanup", "Name of the cleanup service. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the cleanup service is always named cleanup.")),
    no(p("queue_service_name", S, "qmgr", "Name of the queue manager service. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the queue manager service is always named qmgr.")),
    no(p("router_service_name", S, "router", "Name of the address resolution service. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the address resolution service is always named router.")),
    // Queue storage.
    p("journal_segment_size", Z, "64m", "Size at which qmgr starts a new journal segment; segments written ahead (zeros synced before records go in, see qmgr(8)) start at 1 MiB and double up to it."),
    p("queue_minfree", Z, "0", "Free space the queue file system must keep for smtpd to accept MAIL FROM (452 4.3.1 below it); whatever its value, MAIL FROM is also refused while free space is under 1.5 times message_size_limit, or under a SIZE= estimate plus queue_minfree, as Postfix does."),
    p("cleanup_router_timeout", SEC, "10s", "Time cleanup waits at end of data for the router's canonical and virtual alias mapping before the message gets 451 4.3.0."),
    p("cleanup_qmgr_timeout", SEC, "10s", "Time cleanup waits for qmgr to journal a message before the client gets 451 4.3.0."),
    p("message_size_limit", Z, "10240000", "Largest message accepted, in bytes (0: no limit)."),
    p("header_size_limit", Z, "102400", "Longest message header (with its continuation lines) that cleanup keeps, in bytes, as Postfix: the lines of a longer header are kept while it is shorter than this (a line longer than 2048 bytes counts in pieces of 2048), the rest is dropped without a log line and the message is delivered. Applies to the message's own headers, and to those of MIME parts and attached messages when a content check table is set (then the body is walked for its MIME structure)."),
    p("message_drop_headers", L, "bcc, content-length, resent-bcc, return-path", "Headers cleanup removes from every message, after header_checks and before the milters, as Postfix 3.0 and later: a Bcc: a client left in goes to no recipient."),
    p("hopcount_limit", I, "50", "Received: headers (the one Sluice adds included) at which a message is refused as a mail loop: smtpd answers the end of DATA with 554 5.4.0 Error: too many hops, a local submission fails with the same; 0: no limit."),
    p("line_length_limit", I, "2048", "Longest line kept in one piece by SMTP receivers; longer ones are split."),
    p("always_add_missing_headers", B, "no", "Add missing From:, To:, Date:, Message-ID: headers to remote mail too."),
    p("header_checks", M, "", "Tables (regexp:, pcre:, or any other type) of patterns and actions that cleanup applies to each logical header of the message itself (not its MIME headers, which go to mime_header_checks, nor those of attached messages, which go to nested_header_checks) as the client sent it, unfolded, as header_checks(5) describes: REJECT [text] (550 5.7.1, or the 4.x.x or 5.x.x code the text starts with; nothing is queued), DISCARD, HOLD, WARN, INFO, IGNORE (delete the header), PREPEND and REPLACE (with a \"Name: value\" text), DUNNO and OK; FILTER, REDIRECT, BCC, PASS and STRIP are logged as unsupported and do nothing. The Received: header Sluice adds is not checked. A table that cannot be read, a bad pattern or an unknown action stops cleanup at start with the file and line, as sluice check reports them; empty: no header is checked."),
    p("body_checks", M, "", "Tables of patterns and actions that cleanup applies to each body line (without its line end), with the actions of header_checks (PREPEND and REPLACE take any text); the headers of MIME parts and attached messages go to mime_header_checks and nested_header_checks instead, boundary lines and the body of every part to body_checks. Only the first body_checks_size_limit bytes of each body are checked; empty: no body line is checked."),
    p("body_checks_size_limit", Z, "51200", "Body bytes that body_checks inspects in each body (the message's, and each MIME part's when a check table is set, as Postfix counts them); the lines after them are not checked (0: no limit)."),
    p("mime_header_checks", M, "$header_checks", "Tables of patterns and actions, as header_checks, that cleanup applies to the MIME headers (Content-Description, Content-Disposition, Content-ID, Content-Transfer-Encoding, Content-Type, MIME-Version) of the message and of its attached messages, and to every header of a MIME part (the lines after a multipart boundary), as Postfix does; header_checks then does not see the message's own MIME headers. Set when header_checks is, unless set apart; empty: those headers are not checked."),
    p("nested_header_checks", M, "$header_checks", "Tables of patterns and actions, as header_checks, that cleanup applies to the headers of attached messages (message/rfc822 parts, multipart/digest parts) other than their MIME headers, as Postfix does. Set when header_checks is, unless set apart; empty: those headers are not checked."),
    no(p("enable_original_recipient", B, "yes", "Keep the original recipient address for DSN and logging. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the original recipient is always kept.")),
    // Where traffic shaping's tenant and job ids come from.
    p("tenant_id_header", T::HeaderName, "", "Header whose value cleanup takes as the message's tenant id (e.g. X-Tenant-ID); the first such header counts; an empty, over-64-byte or control-character value is ignored; an smtpd access TENANT action wins over it; empty: off."),
    p("job_id_header", T::HeaderName, "", "Header whose value cleanup takes as the message's job id (e.g. X-Job-ID), under the same rules as tenant_id_header; an access JOB action wins over it; empty: off."),
    p("shaping_header_keep", B, "no", "Keep the tenant_id_header and job_id_header headers in the delivered message; by default cleanup removes every one of them."),
    p("tenant_from_sasl", B, "no", "Make the SASL login name of an authenticated submission the message's tenant id when no access action and no tenant_id_header set one."),
    // DKIM signing in cleanup.
    p("dkim_signing_table", M, "", "Tables mapping a From: address, or else its domain, to a key name of dkim_key_table, as opendkim's SigningTable; empty: cleanup signs nothing."),
    p("dkim_key_table", M, "", "Tables (texthash, hash, lmdb or inline) mapping key names to domain:selector:/path/to/key.pem, as opendkim's KeyTable; every key is read when cleanup starts or reloads."),
    p("dkim_signed_headers", L, "From, Reply-To, Subject, Date, To, Cc, Message-ID, In-Reply-To, References, MIME-Version, Content-Type, Content-Transfer-Encoding, Content-ID, Content-Description, List-Id, List-Unsubscribe, List-Unsubscribe-Post", "Header fields DKIM signatures cover, each instance present; From is signed whether listed or not (RFC 6376)."),
    p("dkim_oversigned_headers", L, "From", "Header fields signed once more than they occur, so that none can be added to a signed message."),
    p("dkim_canonicalization", T::Enum(&["relaxed/relaxed", "relaxed/simple", "simple/relaxed", "simple/simple"]), "relaxed/relaxed", "DKIM header/body canonicalization."),
    p("dkim_signing_origins", T::EnumList(&["mynetworks", "sasl_authenticated", "local", "all"]), "mynetworks, sasl_authenticated, local", "Mail cleanup signs: from SMTP clients in mynetworks, from SASL-authenticated clients, submitted locally (sendmail, forwards, notices), or all."),
    // Queue manager and scheduler.
    p("qmgr_message_active_limit", I, "20000", "Most messages in delivery at once; the others wait and are admitted in turn by sender."),
    p("qmgr_message_recipient_limit", I, "20000", "Most recipients in qmgr's memory."),
    p("qmgr_message_recipient_minimum", I, "10", "Fewest recipient slots a message gets when memory is short."),
    no(p("default_recipient_refill_limit", I, "100", "Recipients read into memory at a time for a message with many. Accepted so that a Postfix main.cf loads; Sluice does not implement it: qmgr reads a message's recipients as the scheduler's memory limits allow.")),
    no(p("default_recipient_refill_delay", SEC, "5s", "Delay after which more recipients are read even if not all slots are free. Accepted so that a Postfix main.cf loads; Sluice does not implement it: qmgr reads a message's recipients as the scheduler's memory limits allow.")),
    no(p("qmgr_clog_warn_time", SEC, "300s", "Minimal interval between warnings that the active queue is congested. Accepted so that a Postfix main.cf loads; Sluice does not implement it: no congestion warning is logged.")),
    p("metrics_listen", T::Listen, "", "Address (address:port) where qmgr serves Prometheus metrics at GET /metrics; empty: off."),
    // clusterd: cluster-wide shaping across instances.
    p("cluster_listen", T::Listen, "", "Address (address:port) where clusterd, the cluster's coordinator, takes its instances' connections (mutual TLS); empty: clusterd does not run."),
    p("transfer_listen", T::Listen, "", "Address (address:port) where transferd takes mail moved from other instances by sluice queue move (mutual TLS with the cluster_tls_* certificates); empty: none is taken."),
    p("cluster_server", T::Listen, "", "Address (address:port) of clusterd, to which qmgr connects to share the shaping policy's limits with the other instances; empty: this instance is alone."),
    p("cluster_tls_server_name", S, "", "Name clusterd's certificate must carry; empty: the address of cluster_server (an IP subjectAltName)."),
    p("cluster_tls_cert_file", S, "", "PEM certificate chain this end presents on the cluster link (clusterd's, or an instance's issued to its myhostname)."),
    p("cluster_tls_key_file", S, "$cluster_tls_cert_file", "PEM private key of cluster_tls_cert_file."),
    p("cluster_tls_CAfile", S, "", "PEM file of the CA that signs every certificate of the cluster; a peer without a certificate from it is refused."),
    p("cluster_rate_division", T::Enum(&["backlog", "equal"]), "backlog", "How clusterd divides a shared rate: equal gives each instance tokens/(interval x n) (tokenbucket) or max(1, tokens/n) (fixedwindow); backlog is max-min fair by what each instance has waiting."),
    p("cluster_shared_concurrency", B, "yes", "Take cluster-wide slots from clusterd for the concurrency of keys by localip and grouping; no: each limit divided by the number of instances, at least 1."),
    p("cluster_heartbeat_interval", SEC, "1s", "How often an instance renews its slots with clusterd; it counts clusterd as lost after 3 s of silence and divides the limits by the last known number of instances."),
    p("cluster_lease_time", SEC, "10s", "How long clusterd keeps the slots of an instance it no longer hears from (killed, cut off) before giving them to others."),
    p("queue_run_delay", SEC, "300s", "How often the deferred queue is checked for mail that is due."),
    p("minimal_backoff_time", SEC, "300s", "Least time between delivery attempts of deferred mail."),
    p("maximal_backoff_time", SEC, "4000s", "Longest time between delivery attempts of deferred mail."),
    p("maximal_queue_lifetime", DAY, "5d", "Time after which undeliverable mail bounces."),
    p("bounce_queue_lifetime", DAY, "5d", "Time after which an undeliverable bounce is dropped."),
    p("delay_warning_time", HOUR, "0h", "Time after arrival when a still-deferred message earns its sender one delay warning (0: never)."),
    p("defer_transports", L, "", "Transports whose mail is queued and delivered only when flushed."),
    p("soft_bounce", B, "no", "Turn permanent failures into temporary ones (for testing), as Postfix does: smtpd answers every 5xx reply as 4xx and 5.x.x as 4.x.x (its restrictions' refusals, a message too large, too many hops, a milter's or a protocol refusal alike, as Postfix's smtpd_chat does), and qmgr defers with 4.x.x a recipient that would bounce (unknown user, alias loop, 5xx from a server), logged as status=SOFTBOUNCE. Mail that outlives maximal_queue_lifetime is still returned to the sender, as Postfix's defer flush returns it."),
    t("initial_destination_concurrency", I, "5", "Starting concurrency of a destination."),
    t("default_destination_concurrency_limit", I, "20", "Most parallel deliveries to one destination."),
    t("default_destination_recipient_limit", I, "50", "Most recipients per delivery request."),
    t("default_destination_concurrency_positive_feedback", F, "1/concurrency", "Concurrency increase after a delivery without connection or handshake failure."),
    t("default_destination_concurrency_negative_feedback", F, "1/concurrency", "Concurrency decrease after a connection or handshake failure."),
    t("default_destination_concurrency_failed_cohort_limit", I, "1", "Failed pseudo-cohorts after which a destination at concurrency 1 is declared dead."),
    t("default_destination_dead_while_delivering", B, "no", "Declare a destination dead after the failed pseudo-cohorts even while one of its connections is open and delivers (Postfix's rule); with no, its concurrency window drops to those connections instead (a server that takes a few sessions and answers 421 to the rest)."),
    no(t("default_destination_rate_delay", SEC, "0s", "Pause between deliveries to one destination (0: none). Accepted so that a Postfix main.cf loads; Sluice does not implement it: deliveries to a destination are not spaced out; use a rate in the policy_file.")),
    no(t("default_transport_rate_delay", SEC, "0s", "Pause between deliveries through one transport (0: none). Accepted so that a Postfix main.cf loads; Sluice does not implement it: deliveries through a transport are not spaced out; use a rate in the policy_file.")),
    t("transport_retry_time", SEC, "60s", "After a delivery agent's own side failed to set up a connection (no egress proxy answered, the source address could not be bound), how long the destination opens no new connection; its queued mail is deferred until then. 0 turns this off."),
    t("default_recipient_limit", I, "20000", "Most recipients of one transport in qmgr's memory."),
    no(t("default_extra_recipient_limit", I, "1000", "Extra recipient slots a transport may borrow. Accepted so that a Postfix main.cf loads; Sluice does not implement it: a transport has no extra recipient slots beyond default_recipient_limit.")),
    no(t("default_delivery_slot_cost", I, "5", "nqmgr preemption: delivery slots a message must earn before it may be preempted. Accepted so that a Postfix main.cf loads; Sluice does not implement it: Sluice's scheduler serves three sender classes and never preempts (nqmgr's preemption is a comparison policy in scripts/sim, with Postfix's defaults).")),
    no(t("default_delivery_slot_loan", I, "3", "nqmgr preemption: slots lent ahead of time. Accepted so that a Postfix main.cf loads; Sluice does not implement it: Sluice's scheduler serves three sender classes and never preempts (nqmgr's preemption is a comparison policy in scripts/sim, with Postfix's defaults).")),
    no(t("default_delivery_slot_discount", I, "50", "nqmgr preemption: percentage of slots taken back on loan. Accepted so that a Postfix main.cf loads; Sluice does not implement it: Sluice's scheduler serves three sender classes and never preempts (nqmgr's preemption is a comparison policy in scripts/sim, with Postfix's defaults).")),
    no(t("default_minimum_delivery_slots", I, "3", "nqmgr preemption: fewest slots before a message may preempt. Accepted so that a Postfix main.cf loads; Sluice does not implement it: Sluice's scheduler serves three sender classes and never preempts (nqmgr's preemption is a comparison policy in scripts/sim, with Postfix's defaults).")),
    p("destination_concurrency_feedback_debug", B, "no", "Log every concurrency window change."),
    p("local_destination_concurrency_limit", I, "2", "Most parallel deliveries to one local recipient."),
    p("local_destination_recipient_limit", I, "1", "Recipients per local delivery request."),
    t("sender_class_thresholds", T::IntList, "10, 1000", "Entries of one class key in memory at which mail moves to the medium and large class."),
    t("class_slot_reserve_recipients", I, "10", "Mean recipients per transaction at which a medium or large class leaves a destination's last free connection slot to a smaller class while no smaller class holds a connection there (0: never): a small sender then starts at once beside a mailing list's long transactions, and a bulk sender of one-recipient messages keeps its whole window."),
    t("scheduler_class_key", T::Enum(&["sender", "sender_domain", "tenant", "size"]), "sender", "What the three-class scheduler counts entries by."),
    p("policy_file", S, "", "Traffic-shaping policy file, sluice.policy(5): concurrency, rates, source pools, suspensions and reply rules by field keys; a relative name is taken from config_directory (empty: no shaping)."),
    t("max_message_concurrency", I, "20", "Workers one message may hold when the transport is busy."),
    t("scale_max_concurrency", I, "10", "Factor on free workers up to which one message may grow when the system is idle."),
    t("connection_backlog_limit", I, "5", "Transactions queued on one connection before another is opened; mail of the small and medium sender classes waits at most one behind the running transaction."),
    t("connection_cache_time_limit", SEC, "2s", "Time an idle connection is kept open for reuse."),
    t("connection_reuse_count_limit", I, "0", "Transactions after which a connection is closed (0: no limit)."),
    t("connection_reuse_time_limit", SEC, "300s", "Age after which a connection gets no new transactions."),
    t("host_retry_time", SEC, "60s", "How long a host (an address and a port) that could not be reached is skipped while other MX hosts are tried (0: never skipped)."),
    // Bounces and notices.
    p("2bounce_notice_recipient", S, "postmaster", "Recipient of undeliverable bounces, when notify_classes has bounce or 2bounce."),
    p("bounce_notice_recipient", S, "postmaster", "Recipient of the postmaster copy of every non-delivery notice, when notify_classes has bounce: headers only, from double_bounce_sender, subject Postmaster Copy: Undelivered Mail."),
    p("delay_notice_recipient", S, "postmaster", "Recipient of the postmaster copy of every delay warning, when notify_classes has delay: headers only, from double_bounce_sender, subject Postmaster Warning: Delayed Mail."),
    no(p("error_notice_recipient", S, "postmaster", "Recipient of reports about mail system problems. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the postmaster gets no reports about mail system problems.")),
    p("notify_classes", L, "resource, software", "Problem classes reported to the postmaster. bounce: a copy of every non-delivery notice goes to bounce_notice_recipient; bounce or 2bounce: a notice that cannot be delivered goes to 2bounce_notice_recipient (without either, Postfix's default, it is dropped); delay: a copy of every delay warning goes to delay_notice_recipient. Copies go with the original's headers only, once the sender's notice is queued, whatever the recipients' NOTIFY, as Postfix's. The other classes (resource, software, policy, protocol) are not implemented."),
    p("bounce_size_limit", Z, "50000", "An original message larger than this is returned in its notice (a bounce, an alias owner's notice) as its headers only (text/rfc822-headers), as Postfix does, even with RET=FULL; 0: returned whole whatever its size."),
    p("double_bounce_sender", S, "double-bounce", "Sender of bounces whose own bounces are discarded."),
    // Address resolution.
    p("relayhost", S, "", "Next hop for remote mail when no transport_maps entry applies."),
    p("relay_domains", L, "", "Domains this system relays mail to (besides mydestination)."),
    p("relay_transport", S, "relay", "Transport for relay_domains."),
    p("local_transport", S, "local:$myhostname", "Transport for mydestination."),
    no(p("virtual_transport", S, "virtual", "Transport for virtual mailbox domains. Accepted so that a Postfix main.cf loads; Sluice does not implement it: no virtual mailbox domains exist; list virtual alias domains in virtual_alias_domains.")),
    p("default_transport", S, "smtp", "Transport for all other remote mail."),
    p("transport_maps", M, "", "Tables mapping recipients and domains to transport:nexthop."),
    p("virtual_alias_maps", M, "", "Tables of address aliases for any domain."),
    p("virtual_alias_domains", L, "$virtual_alias_maps", "Domains whose every address is aliased through virtual_alias_maps."),
    p("virtual_alias_recursion_limit", I, "1000", "Deepest nesting of virtual alias expansion."),
    p("virtual_alias_expansion_limit", I, "1000", "Most addresses one virtual alias expands to."),
    p("receive_override_options", T::EnumList(&["no_address_mappings"]), "", "Processing that cleanup leaves out: no_address_mappings skips canonical and virtual alias mapping (the cleanup in front of an after-queue content filter)."),
    p("canonical_maps", M, "", "Tables rewriting sender and recipient addresses."),
    p("sender_canonical_maps", M, "", "Tables rewriting sender addresses."),
    p("recipient_canonical_maps", M, "", "Tables rewriting recipient addresses."),
    p("recipient_delimiter", S, "", "Characters that separate a user name from an address extension (user+ext)."),
    p("propagate_unmatched_extensions", L, "canonical, virtual", "Rewrites that keep the address extension."),
    p("swap_bangpath", B, "yes", "Rewrite site!user into user@site."),
    p("allow_percent_hack", B, "yes", "Rewrite user%domain into user@domain."),
    p("append_at_myorigin", B, "yes", "Append @$myorigin to unqualified local addresses."),
    no(p("append_dot_mydomain", B, "no", "Append .$mydomain to host names without a dot. Accepted so that a Postfix main.cf loads; Sluice does not implement it: host names without a dot are left as they are.")),
    no(p("resolve_dequoted_address", B, "yes", "Resolve user@domain from the unquoted form of a quoted local part. Accepted so that a Postfix main.cf loads; Sluice does not implement it: a quoted local part is resolved as it is written.")),
    no(p("resolve_null_domain", B, "no", "Resolve user@ (empty domain) as if it were local. Accepted so that a Postfix main.cf loads; Sluice does not implement it: user@ with an empty domain is refused as a bad address.")),
    no(p("resolve_numeric_domain", B, "no", "Resolve user@ipaddress as local when the address is ours. Accepted so that a Postfix main.cf loads; Sluice does not implement it: user@[ipaddress] is resolved as a remote address.")),
    p("empty_address_recipient", S, "MAILER-DAEMON", "Recipient of mail addressed to the null address."),
    p("local_recipient_maps", M, "unix:passwd.byname $alias_maps", "Tables of valid local recipients (empty: accept any)."),
    // DNS.
    p("dns_servers", L, "", "Name servers to query instead of those in /etc/resolv.conf (address or address:port)."),
    p("dns_timeout", SEC, "5s", "Time to wait for one DNS reply before retrying."),
    p("dns_attempts", I, "2", "Times each name server is tried for one query."),
    p("dns_cache_size", I, "10000", "Most DNS answers kept in the router's cache."),
    p("smtp_dns_support_level", T::Enum(&["enabled", "dnssec"]), "enabled", "DNS for the SMTP client: enabled, or dnssec (ask a validating resolver, trust its AD bit, and look up TLSA records for DANE)."),
    // SMTP server.
    p("smtpd_banner", S, "$myhostname ESMTP $mail_name", "Text after 220 in the SMTP greeting."),
    p("smtpd_client_restrictions", L, "", "Access restrictions applied at connect time."),
    p("smtpd_helo_restrictions", L, "", "Access restrictions applied to HELO/EHLO."),
    p("smtpd_sender_restrictions", L, "", "Access restrictions applied to MAIL FROM."),
    p("smtpd_relay_restrictions", L, "permit_mynetworks, reject_unauth_destination", "Relay control applied to RCPT TO before smtpd_recipient_restrictions."),
    p("smtpd_recipient_restrictions", L, "", "Access restrictions applied to RCPT TO."),
    no(p("smtpd_data_restrictions", L, "", "Access restrictions applied to DATA. Accepted so that a Postfix main.cf loads; Sluice does not implement it: DATA is not checked against any restriction: a REJECT here lets the mail through.")),
    no(p("smtpd_restriction_classes", L, "", "Names of user-defined parameters that hold restriction lists. Accepted so that a Postfix main.cf loads; Sluice does not implement it: a class name in a restriction list is refused as an unknown restriction.")),
    p("smtpd_helo_required", B, "no", "Require HELO or EHLO before MAIL: MAIL without it gets 503 5.5.1 Error: send HELO/EHLO first."),
    no(p("smtpd_delay_reject", B, "yes", "Apply client, HELO and sender restrictions at RCPT TO. Accepted so that a Postfix main.cf loads; Sluice does not implement it: client, HELO and sender restrictions are always applied at RCPT TO, as with yes.")),
    p("smtpd_reject_unlisted_recipient", B, "yes", "Reject local recipients that local_recipient_maps does not list."),
    no(p("smtpd_reject_unlisted_sender", B, "no", "Reject local senders that local_recipient_maps does not list. Accepted so that a Postfix main.cf loads; Sluice does not implement it: local senders are not checked against local_recipient_maps.")),
    p("disable_vrfy_command", B, "no", "Answer VRFY with 502 instead of 252 (or, for a local user reject_unlisted_recipient would refuse, 550 5.1.1)."),
    p("smtpd_forbid_bare_newline", T::Enum(&["reject", "normalize", "no"]), "reject", "What to do with a bare LF or CR in message data; a command line ending in a bare LF is accepted in every mode, as Postfix's default does."),
    p("smtpd_anvil_timeout", SEC, "2s", "Time a new client waits for anvil's connection count and rate before its greeting; after it the client is greeted with no limit applied (as when anvil is down)."),
    p("smtpd_router_timeout", SEC, "10s", "Time smtpd waits for the router's answer about a recipient (reject_unlisted_recipient) before that RCPT gets 451 4.3.0."),
    p("smtpd_cleanup_timeout", SEC, "60s", "Time smtpd waits for cleanup to start a message or to answer the end of data before the client gets 451 4.3.0; keep it above cleanup_router_timeout plus cleanup_qmgr_timeout."),
    p("smtpd_timeout", SEC, "300s", "Time limit for each read or write of the SMTP server (per record with smtpd_per_record_deadline)."),
    p("smtpd_per_record_deadline", B, "yes", "Apply smtpd_timeout to each whole record (a line, or line_length_limit bytes of one) rather than to each read, so a client that trickles a byte at a time is ended."),
    p("smtpd_recipient_limit", I, "1000", "Most recipients accepted per message."),
    p("smtpd_hard_error_limit", I, "20", "Errors after which the SMTP server disconnects."),
    p("smtpd_soft_error_limit", I, "10", "Errors after which each SMTP server reply waits smtpd_error_sleep_time (a delivered message forgives earlier errors)."),
    p("smtpd_error_sleep_time", SEC, "1s", "Delay before each SMTP server reply once the client has made smtpd_soft_error_limit errors (0: no delay); only that session waits."),
    p("smtpd_junk_command_limit", I, "100", "NOOP, RSET, VRFY and similar commands allowed per session."),
    p("smtpd_client_connection_count_limit", I, "50", "Most simultaneous connections from one client (0: no limit)."),
    p("smtpd_client_connection_rate_limit", I, "0", "Most connections from one client per anvil_rate_time_unit (0: no limit)."),
    p("smtpd_client_message_rate_limit", I, "0", "Most MAIL commands from one client per anvil_rate_time_unit, counted by anvil whether accepted or not (0: no limit, and anvil is not asked); over it MAIL gets 450 4.7.1 Error: too much mail from <addr>."),
    p("smtpd_client_recipient_rate_limit", I, "0", "Most RCPT and VRFY commands from one client per anvil_rate_time_unit, counted by anvil whether accepted or not (0: no limit, and anvil is not asked); over it RCPT gets 450 4.7.1 Error: too many recipients from <addr>."),
    p("smtpd_client_event_limit_exceptions", N, "$mynetworks", "Clients exempt from the connection count and rate, message rate, recipient rate and AUTH rate limits: anvil does not count them."),
    p("anvil_rate_time_unit", SEC, "60s", "Time unit of the client rate limits."),
    p("anvil_status_update_time", SEC, "600s", "How often the peak client rates are logged."),
    p("smtpd_tls_security_level", T::Enum(&["none", "may", "encrypt"]), "none", "STARTTLS policy of the SMTP server."),
    p("smtpd_tls_cert_file", S, "", "PEM file with the server certificate chain."),
    p("smtpd_tls_key_file", S, "$smtpd_tls_cert_file", "PEM file with the server private key."),
    p("smtpd_tls_wrappermode", B, "no", "Start TLS at connect time (port 465 style) instead of with STARTTLS."),
    no(p("smtpd_tls_loglevel", I, "0", "TLS logging detail of the SMTP server. Accepted so that a Postfix main.cf loads; Sluice does not implement it: smtpd logs TLS sessions at its one fixed level.")),
    no(p("smtpd_tls_received_header", B, "no", "Record the TLS protocol and cipher in the Received: header. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the Received: header never records the TLS protocol and cipher.")),
    p("smtpd_sasl_auth_enable", B, "no", "Offer SASL AUTH (RFC 4954) in the SMTP server, checked by the SASL server of smtpd_sasl_type."),
    no(p("smtpd_sasl_type", T::Enum(&["dovecot"]), "dovecot", "The SASL server smtpd asks: dovecot (Dovecot's authentication protocol). Accepted so that a Postfix main.cf loads; Sluice does not implement it: smtpd always speaks Dovecot's protocol (the only value accepted).")),
    p("smtpd_sasl_path", S, "private/auth", "Dovecot's auth socket for smtpd: relative to queue_directory, or absolute."),
    p("smtpd_sasl_security_options", T::EnumList(&["noanonymous", "noplaintext", "nodictionary", "noactive"]), "noanonymous", "Mechanisms not to offer, by the flags of Dovecot's MECH lines."),
    p("smtpd_tls_auth_only", B, "yes", "Offer and accept AUTH only under TLS (AUTH before STARTTLS gets 530 5.7.0)."),
    p("smtpd_sasl_timeout", SEC, "30s", "Time smtpd waits for each answer of the SASL server before the client gets 454 4.7.0."),
    p("smtpd_sasl_authenticated_header", B, "no", "Add the SASL login name to the Received: header of authenticated mail, as (Authenticated sender: name); the name is then visible to every recipient."),
    p("smtpd_milters", T::MilterList, "", "Milters (mail filters) for mail received by smtpd: unix:/path (relative: under queue_directory) or inet:host:port, consulted one after another at every SMTP stage, each seeing the message as the ones before it left it."),
    p("non_smtpd_milters", T::MilterList, "", "Milters for mail submitted with sendmail(1) (not for bounces and other mail Sluice makes itself, nor for mail local(8) forwards): cleanup pretends it came over ESMTP from localhost [127.0.0.1]."),
    p("milter_default_action", T::Enum(&["accept", "reject", "tempfail", "quarantine"]), "tempfail", "What to do when a milter cannot be reached, times out or breaks the protocol: accept (go on without it), reject (550 5.5.0 to every later command), tempfail (451 4.3.5) or quarantine (accept and hold)."),
    p("milter_protocol", T::Enum(&["2", "3", "4", "6"]), "6", "The milter protocol version offered to milters; below 6 the events and flags that version lacks are not used (2: no DATA and no unknown-command events; 3: no DATA event; 4: no SKIP, no-reply flags or leading spaces)."),
    p("milter_connect_timeout", SEC, "30s", "Time to wait for a connection to a milter and its option negotiation."),
    p("milter_command_timeout", SEC, "30s", "Time to wait for a milter's answer to an SMTP event (connect, HELO, MAIL, RCPT, DATA)."),
    p("milter_content_timeout", SEC, "300s", "Time to wait for a milter's answer to message content (a header, a body chunk, the end of the message)."),
    p("milter_macro_daemon_name", S, "$myhostname", "The {daemon_name} macro sent to milters."),
    p("milter_connect_macros", T::MacroList, "j {daemon_name} {daemon_addr} v _", "Macros sent to milters with the connect event (a milter may ask for its own list)."),
    p("milter_helo_macros", T::MacroList, "{tls_version} {cipher} {cipher_bits} {cert_subject} {cert_issuer}", "Macros sent to milters with HELO/EHLO."),
    p("milter_mail_macros", T::MacroList, "i {auth_type} {auth_authen} {auth_author} {mail_addr} {mail_host} {mail_mailer}", "Macros sent to milters with MAIL FROM."),
    p("milter_rcpt_macros", T::MacroList, "i {rcpt_addr} {rcpt_host} {rcpt_mailer}", "Macros sent to milters with RCPT TO."),
    p("milter_data_macros", T::MacroList, "i", "Macros sent to milters with DATA."),
    p("milter_end_of_header_macros", T::MacroList, "i", "Macros sent to milters at the end of the headers."),
    p("milter_end_of_data_macros", T::MacroList, "i", "Macros sent to milters at the end of the message."),
    p("milter_unknown_command_macros", T::MacroList, "", "Macros sent to milters with an SMTP command smtpd does not know."),
    p("smtpd_upstream_proxy_protocol", T::Enum(&["", "haproxy"]), "", "The proxy in front of the SMTP server: empty for none, haproxy for a PROXY protocol header (v1 or v2) before the greeting, whose client address smtpd then uses."),
    p("smtpd_upstream_proxy_timeout", SEC, "5s", "Time to wait for the PROXY protocol header before dropping the connection."),
    p("smtpd_client_auth_rate_limit", I, "0", "Most failed AUTH commands from one client per anvil_rate_time_unit (0: no limit); over it AUTH gets 450 4.7.1."),
    p("access_map_reject_code", I, "554", "SMTP reply code (400-599) for an access table's REJECT action."),
    p("access_map_defer_code", I, "450", "SMTP reply code (400-599) for an access table's DEFER (and DEFER_IF_PERMIT, DEFER_IF_REJECT) action."),
    p("relay_domains_reject_code", I, "554", "SMTP reply code for reject_unauth_destination."),
    p("unknown_local_recipient_reject_code", I, "550", "SMTP reply code for unknown local recipients."),
    // Address verification (reject_unverified_recipient, reject_unverified_sender).
    p("unverified_recipient_reject_code", I, "450", "SMTP reply code (400-599) for reject_unverified_recipient when a probe found the recipient undeliverable."),
    p("unverified_recipient_defer_code", I, "450", "SMTP reply code (400-599) for reject_unverified_recipient while the recipient's probe has no result, or found a temporary failure."),
    p("unverified_sender_reject_code", I, "450", "SMTP reply code (400-599) for reject_unverified_sender when a probe found the sender undeliverable."),
    p("unverified_sender_defer_code", I, "450", "SMTP reply code (400-599) for reject_unverified_sender while the sender's probe has no result, or found a temporary failure."),
    p("unverified_recipient_tempfail_action", T::Enum(&["defer_if_permit", "defer"]), "defer_if_permit", "What reject_unverified_recipient does when the recipient's probe failed temporarily, has no result yet, or verification itself failed: defer_if_permit (go on with the restrictions, and answer unverified_recipient_defer_code only if they would accept) or defer (answer it at once)."),
    p("unverified_sender_tempfail_action", T::Enum(&["defer_if_permit", "defer"]), "defer_if_permit", "What reject_unverified_sender does when the sender's probe failed temporarily, has no result yet, or verification itself failed: defer_if_permit or defer (see unverified_recipient_tempfail_action)."),
    p("unverified_recipient_reject_reason", S, "", "The text of reject_unverified_recipient's reply when the probe found the recipient undeliverable, after \"<address>: Recipient address rejected: \" (empty: the probe's own reply)."),
    p("unverified_sender_reject_reason", S, "", "The text of reject_unverified_sender's reply when the probe found the sender undeliverable, after \"<address>: Sender address rejected: \" (empty: the probe's own reply)."),
    p("address_verify_poll_count", I, "3", "How many times smtpd would look for a probe's result, address_verify_poll_delay apart: it waits up to (count - 1) x delay for the result before answering unverified (1: answer at once)."),
    p("address_verify_poll_delay", SEC, "3s", "The time between two looks for a probe's result (see address_verify_poll_count)."),
    p("address_verify_sender", S, "$double_bounce_sender", "Envelope sender of address verification probes; qualified with myorigin when it has no @; <> for the null sender."),
    p("address_verify_map", S, "state/verify_cache", "File where qmgr keeps the address verification cache across restarts, relative to queue_directory (mail_owner's state/ by default); empty: the cache is kept in memory only; a Postfix type:table value is refused (the file is Sluice's own text)."),
    p("address_verify_positive_expire_time", DAY, "31d", "How long a probe's positive result is used."),
    p("address_verify_positive_refresh_time", DAY, "7d", "Age of a positive result past which the address is probed again (the old result is used meanwhile)."),
    p("address_verify_negative_expire_time", DAY, "3d", "How long a probe's negative or temporary result is used."),
    p("address_verify_negative_refresh_time", HOUR, "3h", "Age of a negative result past which the address is probed again (the old result is used meanwhile)."),
    p("address_verify_negative_cache", B, "yes", "Keep negative and temporary probe results in the cache (no: only positive ones, every other query probes again)."),
    p("address_verify_cache_limit", I, "100000", "Most addresses in the verification cache; the results updated longest ago go first."),
    p("address_verify_pending_limit", I, "1000", "Most address verification probes waiting or under way; an address that would need another is answered unverified without a probe."),
    p("address_verify_concurrency_limit", I, "10", "Most probes of one transport with the scheduler at once: each transport sends its probes as one pseudo-message of at most this many recipients at a time, beside real mail."),
    p("address_verify_rate_limit", I, "0", "Most probes one transport starts per second (0: no limit beyond address_verify_concurrency_limit)."),
    // SMTP client.
    p("smtp_bind_address", S, "", "IPv4 source address of outgoing SMTP connections."),
    no(p("smtp_bind_address6", S, "", "IPv6 source address of outgoing SMTP connections. Accepted so that a Postfix main.cf loads; Sluice does not implement it: IPv6 connections take the address the kernel picks; smtp_source_pool may name IPv6 addresses.")),
    p("smtp_source_pool", S, "", "Id of the policy file's sources: pool whose addresses outgoing SMTP connections take in turn when no pool selects itself by tenant, sender domain or grouping (empty: smtp_bind_address)."),
    t("default_proxy", T::AddrList, "", "HAProxy instances (address:port, each bound with accept-proxy) that the SMTP client reaches destinations through, tried in turn: a PROXY protocol v2 header names the destination and the source address (the policy's localip or smtp_bind_address, an address on the proxy), and a proxy that is down is skipped for 60s without counting against any destination; empty: connect directly. Per transport as smtp_proxy, relay_proxy; lmtp does not use it."),
    p("smtp_helo_name", S, "$myhostname", "Name the SMTP client sends in EHLO/HELO."),
    p("smtp_host_lookup", L, "dns", "How the SMTP client finds server addresses."),
    p("smtp_address_preference", T::Enum(&["ipv4", "ipv6", "any"]), "any", "Address family tried first when a host has both."),
    no(p("smtp_mx_address_limit", I, "5", "Most server addresses tried per delivery (0: no limit). Accepted so that a Postfix main.cf loads; Sluice does not implement it: every address of every MX host is tried.")),
    no(p("smtp_mx_session_limit", I, "2", "Most SMTP sessions tried per delivery (0: no limit). Accepted so that a Postfix main.cf loads; Sluice does not implement it: sessions are tried until a server answers or the addresses run out.")),
    p("smtp_connect_timeout", SEC, "30s", "Time limit for a TCP connection to complete."),
    p("smtp_helo_timeout", SEC, "300s", "Time limit for the greeting and the EHLO/HELO reply."),
    no(p("smtp_starttls_timeout", SEC, "300s", "Time limit for the STARTTLS reply and handshake. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the STARTTLS reply and handshake are limited by the timeouts of the greeting and of commands (smtp_helo_timeout, smtp_rcpt_timeout).")),
    no(p("smtp_mail_timeout", SEC, "300s", "Time limit for the MAIL FROM reply. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the MAIL FROM reply is limited by smtp_rcpt_timeout.")),
    p("smtp_rcpt_timeout", SEC, "300s", "Time limit for each RCPT TO reply."),
    no(p("smtp_data_init_timeout", SEC, "120s", "Time limit for the DATA reply. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the DATA reply is limited by smtp_rcpt_timeout.")),
    p("smtp_data_xfer_timeout", SEC, "180s", "Time limit for each write of message content."),
    p("smtp_data_done_timeout", SEC, "600s", "Time limit for the reply to the end of data."),
    no(p("smtp_rset_timeout", SEC, "20s", "Time limit for the RSET reply. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the RSET reply is limited by smtp_rcpt_timeout.")),
    no(p("smtp_quit_timeout", SEC, "300s", "Time limit for the QUIT reply. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the QUIT reply is limited by smtp_rcpt_timeout.")),
    no(p("smtp_skip_5xx_greeting", B, "yes", "Try the next server when one greets with 5xx. Accepted so that a Postfix main.cf loads; Sluice does not implement it: a server greeting with 5xx ends the attempt with that host and the next one is tried, as with yes.")),
    p("disable_mime_output_conversion", B, "no", "Send 8-bit content as it is to a server that does not announce 8BITMIME; by default the SMTP and LMTP clients convert each MIME part declared 8bit or binary to quoted-printable (multipart and message/rfc822 parts walked into), as Postfix does; a DKIM signature over a converted body no longer verifies."),
    p("smtp_discard_ehlo_keywords", L, "", "EHLO keywords the SMTP client ignores in server replies (e.g. chunking, pipelining, starttls)."),
    // lmtp(8) reads these in place of the smtp_ parameters, as Postfix's does.
    p("lmtp_lhlo_name", S, "$myhostname", "Name the LMTP client sends in LHLO (smtp_helo_name for lmtp)."),
    p("lmtp_bind_address", S, "", "IPv4 source address of outgoing LMTP connections over TCP."),
    p("lmtp_connect_timeout", SEC, "30s", "Time limit for an LMTP connection to complete (Postfix's 0s, the kernel's limit, is not offered)."),
    p("lmtp_lhlo_timeout", SEC, "300s", "Time limit for the LMTP greeting and the LHLO reply."),
    p("lmtp_rcpt_timeout", SEC, "300s", "Time limit for each MAIL FROM and RCPT TO reply over LMTP."),
    p("lmtp_data_xfer_timeout", SEC, "180s", "Time limit for each write of message content over LMTP."),
    p("lmtp_data_done_timeout", SEC, "600s", "Time limit for the per-recipient replies after the end of data over LMTP."),
    p("lmtp_discard_lhlo_keywords", L, "", "LHLO keywords the LMTP client ignores in server replies (e.g. pipelining)."),
    p("smtp_line_length_limit", I, "998", "Longest content line the SMTP client sends; a longer one is broken with CR LF SPACE after this many bytes and at most one less in each continuation, as Postfix does (0: no limit)."),
    p("lmtp_line_length_limit", I, "998", "Longest content line the LMTP client sends (smtp_line_length_limit for lmtp)."),
    p("smtp_tls_security_level", T::Enum(&["none", "may", "encrypt", "verify", "secure", "dane", "dane-only"]), "none", "STARTTLS policy of the SMTP client; dane and dane-only take it from DNSSEC-validated TLSA records (RFC 7672) and need smtp_dns_support_level = dnssec."),
    p("smtp_tls_CAfile", S, "", "PEM file of trusted roots for verify and secure (empty: /etc/ssl/certs/ca-certificates.crt)."),
    p("smtp_tls_verify_cert_match", T::EnumList(&["hostname", "nexthop", "dot-nexthop"]), "hostname", "Names the server certificate must match at the verify level."),
    p("smtp_tls_secure_cert_match", T::EnumList(&["hostname", "nexthop", "dot-nexthop"]), "nexthop, dot-nexthop", "Names the server certificate must match at the secure level."),
    no(p("smtp_tls_loglevel", I, "0", "TLS logging detail of the SMTP client. Accepted so that a Postfix main.cf loads; Sluice does not implement it: the SMTP client logs TLS sessions at its one fixed level.")),
    p("smtp_mta_sts", B, "no", "Honour the MTA-STS policies (RFC 8461) of recipient domains: router fetches and caches them, enforce mode keeps mail to matching MX hosts over verified TLS, testing mode only logs and reports."),
    p("smtp_mta_sts_fetch_timeout", SEC, "10s", "Time limit for fetching one MTA-STS policy over HTTPS (connection, TLS and the response)."),
    p("smtp_tls_report_interval", SEC, "1d", "Period of the TLS reports (RFC 8460) sent for domains with an MTA-STS policy to the rua of their _smtp._tls record; 0 sends none."),
    p("smtp_tls_report_organization", S, "$myhostname", "organization-name of the TLS reports."),
    p("smtp_tls_report_contact", S, "postmaster@$myhostname", "Sender address and contact-info of the TLS reports."),
    // Local delivery.
    p("alias_maps", M, "hash:/etc/aliases", "Alias tables used by local delivery."),
    no(p("alias_database", M, "hash:/etc/aliases", "Alias tables that sluice newaliases compiles. Accepted so that a Postfix main.cf loads; Sluice does not implement it: sluice newaliases checks the alias_maps sources.")),
    p("home_mailbox", S, "", "Mailbox file relative to the home directory; a trailing / means Maildir (empty: mail_spool_directory)."),
    p("mail_spool_directory", S, "/var/mail", "Directory of mbox mailboxes."),
    p("mailbox_size_limit", Z, "51200000", "Largest mailbox or mailbox file local delivery appends to (0: no limit)."),
    no(p("mailbox_delivery_lock", L, "fcntl, dotlock", "Locks taken on an mbox before appending. Accepted so that a Postfix main.cf loads; Sluice does not implement it: local always locks an mbox with fcntl and a dot-lock file, as with the default.")),
    raw("mailbox_command", "", "Command that delivers to the mailbox instead of local (expanded at delivery time)."),
    raw("forward_path", "$home/.forward${recipient_delimiter}${extension}, $home/.forward", "Files searched for forwarding (expanded at delivery time)."),
    raw("luser_relay", "", "Destination of mail for unknown local users instead of a bounce, when local_recipient_maps did not refuse them at RCPT ($user, $extension, $domain, $local, $recipient, $recipient_delimiter and ${name?value}/${name:value} expanded at delivery time; @$myorigin added to a bare name)."),
    no(raw("command_execution_directory", "", "Working directory of pipe deliveries (expanded at delivery time). Accepted so that a Postfix main.cf loads; Sluice does not implement it: pipe deliveries run in local's own working directory.")),
    p("allow_mail_to_commands", L, "alias, forward", "Where | command destinations are allowed: alias, forward, include."),
    p("allow_mail_to_files", L, "alias, forward", "Where /file destinations are allowed: alias, forward, include."),
    p("command_time_limit", SEC, "1000s", "Time limit for a pipe delivery."),
    no(p("local_command_shell", S, "", "Shell for pipe deliveries (empty: /bin/sh with a simple-command shortcut). Accepted so that a Postfix main.cf loads; Sluice does not implement it: pipe deliveries run under /bin/sh.")),
    no(p("export_environment", L, "TZ LANG", "Environment variables passed to pipe deliveries. Accepted so that a Postfix main.cf loads; Sluice does not implement it: pipe deliveries get local's fixed environment.")),
    no(p("prepend_delivered_header", L, "command, file, forward", "Deliveries that get a Delivered-To: header. Accepted so that a Postfix main.cf loads; Sluice does not implement it: local adds Delivered-To: by its own fixed rule, whatever the value.")),
    no(p("require_home_directory", B, "no", "Defer delivery when the recipient's home directory is missing. Accepted so that a Postfix main.cf loads; Sluice does not implement it: local never defers delivery for a missing home directory, as with no.")),
    no(p("strict_mailbox_ownership", B, "yes", "Defer delivery to an mbox not owned by its recipient. Accepted so that a Postfix main.cf loads; Sluice does not implement it: local always defers delivery to an mbox that is not a regular file with one link owned by its recipient, as with yes.")),
    p("owner_request_special", B, "yes", "Send the errors of alias name to alias owner-name when it exists; never split owner-name or name-request at a - delimiter."),
    p("expand_owner_alias", B, "no", "Use the value of alias owner-name (when one address) as the sender of name's deliveries, not owner-name@$myorigin."),
];

/// All parameters in table order.
pub fn params() -> impl Iterator<Item = &'static ParamSpec> {
    PARAMS.iter()
}

/// The row for `name`, if it is in the table.
pub fn spec(name: &str) -> Option<&'static ParamSpec> {
    static INDEX: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    let index = INDEX.get_or_init(|| {
        PARAMS
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name, i))
            .collect()
    });
    index.get(name).map(|&i| &PARAMS[i])
}

/// Splits a per-transport override name such as
/// `relay_destination_concurrency_limit` into its transport and the table row
/// it overrides. The longest matching suffix wins; table names never match.
pub fn split_transport_param(name: &str) -> Option<(&str, &'static ParamSpec)> {
    if spec(name).is_some() {
        return None;
    }
    PARAMS
        .iter()
        .filter(|s| s.per_transport)
        .filter_map(|s| {
            let short = s.short_name();
            let prefix = name.strip_suffix(short)?.strip_suffix('_')?;
            (!prefix.is_empty()).then_some((prefix, s))
        })
        .max_by_key(|(_, s)| s.short_name().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let mut seen = std::collections::HashSet::new();
        for s in params() {
            assert!(seen.insert(s.name), "duplicate {}", s.name);
            assert!(!s.doc.is_empty() && !s.doc.contains('\n'), "{}", s.name);
            assert_eq!(
                s.doc.contains(NOT_IMPLEMENTED_DOC),
                !s.implemented,
                "{}: the doc of an unimplemented parameter, and only its, says so",
                s.name
            );
            if let DefaultValue::Text(d) = s.default {
                if s.expand && !d.contains('$') {
                    assert_eq!(s.ty.check(d), Ok(()), "default of {}", s.name);
                }
            }
            assert!(
                s.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                "{}",
                s.name
            );
        }
    }

    #[test]
    fn transport_names() {
        let s = spec("default_destination_concurrency_limit").unwrap();
        assert_eq!(
            s.transport_name("relay"),
            "relay_destination_concurrency_limit"
        );
        let s = spec("initial_destination_concurrency").unwrap();
        assert_eq!(
            s.transport_name("relay"),
            "relay_initial_destination_concurrency"
        );
        let (tr, s) = split_transport_param("relay_destination_concurrency_limit").unwrap();
        assert_eq!(
            (tr, s.name),
            ("relay", "default_destination_concurrency_limit")
        );
        let (tr, s) = split_transport_param("my-smtp_initial_destination_concurrency").unwrap();
        assert_eq!((tr, s.name), ("my-smtp", "initial_destination_concurrency"));
        assert!(split_transport_param("default_destination_concurrency_limit").is_none());
        assert!(split_transport_param("_destination_concurrency_limit").is_none());
        assert!(split_transport_param("destination_concurrency_limit").is_none());
        assert!(split_transport_param("relay_bogus").is_none());
        // local_destination_concurrency_limit is a table row of its own.
        assert!(split_transport_param("local_destination_concurrency_limit").is_none());
    }
}
