//! smtpd's access policy, sans-IO: Postfix restriction lists evaluated for
//! one client, sender and recipient.
//!
//! Supported restrictions: `permit`, `reject`, `defer`, `permit_mynetworks`,
//! `permit_sasl_authenticated`,
//! `reject_unauth_destination`, `defer_unauth_destination`,
//! `reject_non_fqdn_sender`, `reject_non_fqdn_recipient`,
//! `reject_unverified_recipient`, `reject_unverified_sender` (through
//! [`Lookup::verified`]: a verdict of [`Verdict::Verify`] asks the caller
//! to find out, then to check again),
//! `check_client_access`, `check_sender_access`, `check_recipient_access`
//! (any lookup table the [`Lookup`] given can read), with the access(5)
//! actions OK, REJECT, DEFER, HOLD, DISCARD, DUNNO and `4NN`/`5NN text`,
//! and Sluice's TENANT and JOB, which name the message's traffic shaping
//! tenant and job and go on (the last one reached wins).
//!
//! With `smtpd_delay_reject = yes` (the default, as in Postfix) the client
//! and sender lists are evaluated at RCPT time, then `smtpd_relay_restrictions`
//! and `smtpd_recipient_restrictions`; the first list that rejects decides.
//! A list ends with the first OK or REJECT it reaches; DUNNO and the end of a
//! list pass on to the next. No open relay: with the defaults a client
//! outside `mynetworks` may send only to `mydestination` and `relay_domains`,
//! and an address whose local part hides a route (`%`, `!`, a quoted `@`)
//! never counts as local — the classic relay tricks.
//!
//! Unknown restriction names are refused when the policy is built, naming
//! the parameter, so a typo never opens the relay.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod access;
mod restriction;

pub use access::{parse_action, AccessAction};
pub use restriction::{parse_list, Restriction, RestrictionError};

use std::net::IpAddr;

use config::{Cidr, Config, MapRef};
use mail::{Refusal, StatusCode};
use smtp_proto::{Domain, Mailbox};

/// Reads lookup tables for check_*_access.
pub trait Lookup {
    /// The value for `key` in `table`, `Ok(None)` when absent; `Err` with
    /// why when the table cannot be read (the caller answers 451, as
    /// Postfix does, and logs why: the client reads no table names).
    fn lookup(&self, table: &MapRef, key: &str) -> Result<Option<String>, String>;

    /// Whether the router knows no such recipient (`Ok(true)`: unlisted);
    /// `Err` when it cannot say now, with why for the log, or `None` when
    /// the failure was logged where it happened (a broken link).
    /// Without a router nothing is unlisted.
    fn unlisted(&self, _recipient: &Mailbox) -> Result<bool, Option<String>> {
        Ok(false)
    }

    /// What address verification knows of `address` (external form,
    /// without brackets); `None` when it has not been asked yet.
    fn verified(&self, _address: &str) -> Option<VerifyState> {
        None
    }
}

/// What address verification said of an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyState {
    /// A probe found it deliverable.
    Deliverable,
    /// A probe found it undeliverable: the reply that said so.
    Undeliverable(String),
    /// A probe failed temporarily: the reply.
    Deferred(String),
    /// No result yet (a probe is under way): why.
    Unknown(String),
    /// The verification service could not be asked: why.
    Failed(String),
}

/// Answers `static:` tables only: for configurations without other tables,
/// and for tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct StaticOnly;

impl Lookup for StaticOnly {
    fn lookup(&self, table: &MapRef, _key: &str) -> Result<Option<String>, String> {
        if table.kind == "static" {
            // Postfix 3's `static:{text with spaces}` form.
            let v = table
                .name
                .strip_prefix('{')
                .and_then(|v| v.strip_suffix('}'))
                .unwrap_or(&table.name);
            Ok(Some(v.trim().to_string()))
        } else {
            Err(format!("table type {} is not available", table.kind))
        }
    }
}

/// What the policy decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Accept the recipient.
    Accept {
        /// Place the message on hold (access HOLD).
        hold: bool,
        /// Accept and discard the message (access DISCARD).
        discard: bool,
        /// The tenant an access TENANT action named.
        tenant: Option<String>,
        /// The job an access JOB action named.
        job: Option<String>,
    },
    /// The restriction reached needs address verification's answer about
    /// `address`: ask ([`Lookup::verified`] then has it), and check again.
    Verify {
        /// The address, external form, without brackets.
        address: String,
    },
    /// Refuse with this reply.
    Refuse {
        /// 4xx or 5xx, its enhanced code and text.
        reply: Refusal,
        /// Which restriction refused (for the log's `reject:` line).
        by: String,
        /// What failed behind a temporary refusal (a table, the router, an
        /// access value that is no action), for smtpd to log as a warning:
        /// as Postfix's, the reply names no table and quotes no error.
        warning: Option<String>,
    },
}

/// The client, sender and recipient under evaluation.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    /// The client address.
    pub client_addr: IpAddr,
    /// The client's host name, or `unknown`.
    pub client_name: &'a str,
    /// The HELO name, if given.
    pub helo: Option<&'a str>,
    /// The sender; `None` for the null sender.
    pub sender: Option<&'a Mailbox>,
    /// The recipient.
    pub recipient: &'a Mailbox,
    /// The SASL user name, when the client has authenticated.
    pub sasl_username: Option<&'a str>,
}

/// A built policy.
#[derive(Debug, Clone)]
pub struct Policy {
    mynetworks: Vec<Cidr>,
    mydestination: Vec<String>,
    relay_domains: Vec<String>,
    lists: Vec<(&'static str, Vec<Restriction>)>,
    relay_reject_code: u16,
    /// `access_map_reject_code` and `access_map_defer_code`: the codes of
    /// an access table's REJECT and DEFER.
    access_codes: AccessCodes,
    reject_unlisted: bool,
    unknown_code: u16,
    /// unverified_{recipient,sender}_{reject,defer}_code.
    unverified: Unverified,
    /// `soft_bounce`: a 5xx refusal is answered as 4xx.
    soft_bounce: bool,
}

/// The replies of reject_unverified_*: codes, what a temporary failure
/// does, and a reject text replacing the probe's.
#[derive(Debug, Clone)]
struct Unverified {
    recipient_reject: u16,
    recipient_defer: u16,
    sender_reject: u16,
    sender_defer: u16,
    /// `unverified_*_tempfail_action = defer_if_permit` (else defer).
    recipient_defer_if_permit: bool,
    sender_defer_if_permit: bool,
    recipient_reason: String,
    sender_reason: String,
}

/// The reply codes of an access table's REJECT and DEFER actions.
#[derive(Debug, Clone, Copy)]
struct AccessCodes {
    reject: u16,
    defer: u16,
}

/// The restriction list parameters, in evaluation order.
pub const LISTS: [&str; 5] = [
    "smtpd_client_restrictions",
    "smtpd_helo_restrictions",
    "smtpd_sender_restrictions",
    "smtpd_relay_restrictions",
    "smtpd_recipient_restrictions",
];

/// The reply code parameters of reject_unverified_*: recipient reject,
/// recipient defer, sender reject, sender defer.
pub const UNVERIFIED_CODES: [&str; 4] = [
    "unverified_recipient_reject_code",
    "unverified_recipient_defer_code",
    "unverified_sender_reject_code",
    "unverified_sender_defer_code",
];

/// The reply code parameters of an access table's REJECT and DEFER.
pub const ACCESS_CODES: [&str; 2] = ["access_map_reject_code", "access_map_defer_code"];

/// A reply code parameter's value, refused unless from 400 to 599.
pub fn reply_code(cfg: &Config, name: &str) -> Result<u16, RestrictionError> {
    let v = cfg.int(name);
    u16::try_from(v)
        .ok()
        .filter(|c| (400..=599).contains(c))
        .ok_or_else(|| RestrictionError {
            param: name.to_string(),
            message: format!("{v} is not an SMTP reply code from 400 to 599"),
        })
}

impl Policy {
    /// Builds the policy from main.cf; an unknown restriction is an error.
    pub fn from_config(cfg: &Config) -> Result<Policy, RestrictionError> {
        let [rr, rd, sr, sd] = UNVERIFIED_CODES;
        let unverified = Unverified {
            recipient_reject: reply_code(cfg, rr)?,
            recipient_defer: reply_code(cfg, rd)?,
            sender_reject: reply_code(cfg, sr)?,
            sender_defer: reply_code(cfg, sd)?,
            recipient_defer_if_permit: cfg.str("unverified_recipient_tempfail_action")
                == "defer_if_permit",
            sender_defer_if_permit: cfg.str("unverified_sender_tempfail_action")
                == "defer_if_permit",
            recipient_reason: cfg.str("unverified_recipient_reject_reason"),
            sender_reason: cfg.str("unverified_sender_reject_reason"),
        };
        let mut lists = Vec::new();
        for name in LISTS {
            let items = restriction::parse_list(&cfg.str(name)).map_err(|e| e.in_param(name))?;
            lists.push((name, items));
        }
        Ok(Policy {
            mynetworks: cfg.cidrs("mynetworks"),
            mydestination: cfg
                .list("mydestination")
                .into_iter()
                .map(|d| d.to_ascii_lowercase())
                .collect(),
            relay_domains: cfg
                .list("relay_domains")
                .into_iter()
                .map(|d| d.to_ascii_lowercase())
                .collect(),
            lists,
            relay_reject_code: cfg.int("relay_domains_reject_code").clamp(400, 599) as u16,
            access_codes: AccessCodes {
                reject: reply_code(cfg, ACCESS_CODES[0])?,
                defer: reply_code(cfg, ACCESS_CODES[1])?,
            },
            reject_unlisted: cfg.bool("smtpd_reject_unlisted_recipient"),
            unknown_code: cfg
                .int("unknown_local_recipient_reject_code")
                .clamp(400, 599) as u16,
            unverified,
            soft_bounce: cfg.bool("soft_bounce"),
        })
    }

    /// Every lookup table the restrictions name, to compile before use.
    pub fn tables(&self) -> Vec<MapRef> {
        let mut out: Vec<MapRef> = Vec::new();
        for (_, items) in &self.lists {
            for r in items {
                if let Restriction::CheckClientAccess(m)
                | Restriction::CheckSenderAccess(m)
                | Restriction::CheckRecipientAccess(m) = r
                {
                    if !out.contains(m) {
                        out.push(m.clone());
                    }
                }
            }
        }
        out
    }

    /// Whether the client is in `mynetworks`.
    pub fn in_mynetworks(&self, addr: IpAddr) -> bool {
        let addr = unmap(addr);
        self.mynetworks.iter().any(|c| c.contains(addr))
    }

    /// Whether a domain is this host's (`mydestination`).
    pub fn is_local_domain(&self, domain: &str) -> bool {
        let d = domain.trim_end_matches('.').to_ascii_lowercase();
        self.mydestination.contains(&d)
    }

    /// Whether a domain is one we relay to (`relay_domains`; as with Postfix's
    /// parent_domain_matches_subdomains, `example.com` also covers its subdomains).
    pub fn is_relay_domain(&self, domain: &str) -> bool {
        let d = domain.trim_end_matches('.').to_ascii_lowercase();
        self.relay_domains
            .iter()
            .any(|r| match r.strip_prefix('.') {
                Some(parent) => d.ends_with(&format!(".{parent}")),
                None => d == *r || d.ends_with(&format!(".{r}")),
            })
    }

    /// Whether mail to this recipient may be accepted from anyone: its
    /// domain is ours or one we relay to, and its local part hides no route.
    pub fn authorized_destination(&self, rcpt: &Mailbox) -> bool {
        if rcpt.has_routing_chars() {
            return false;
        }
        match &rcpt.domain {
            Domain::Name(d) => self.is_local_domain(d) || self.is_relay_domain(d),
            _ => false,
        }
    }

    /// Evaluates every list for one recipient; with `soft_bounce` a
    /// permanent refusal becomes a temporary one, as in Postfix's
    /// smtpd_check (4xx and 4.x.x), so that a test setup loses no mail.
    pub fn check(&self, q: &Query<'_>, lookup: &dyn Lookup) -> Verdict {
        match self.check_lists(q, lookup) {
            Verdict::Refuse {
                mut reply,
                by,
                warning,
            } if self.soft_bounce && reply.code >= 500 => {
                reply.code -= 100;
                reply.status = StatusCode::known(4, reply.status.subject(), reply.status.detail());
                Verdict::Refuse { reply, by, warning }
            }
            v => v,
        }
    }

    fn check_lists(&self, q: &Query<'_>, lookup: &dyn Lookup) -> Verdict {
        let mut marks = Marks::default();
        for (list_name, items) in &self.lists {
            match self.eval_list(list_name, items, q, lookup, &mut marks) {
                ListResult::Refuse(v) => return v,
                ListResult::Permit | ListResult::Continue => {}
            }
        }
        // defer_if_permit: nothing rejected, so what would be accepted is
        // deferred (Postfix's unverified_*_tempfail_action).
        if let Some(v) = marks.defer_if_permit {
            return v;
        }
        // As Postfix's smtpd_reject_unlisted_recipient: even a permitted
        // recipient is refused when the router knows no such user.
        if self.reject_unlisted {
            let by = "smtpd_reject_unlisted_recipient".to_string();
            match self.unlisted_step(q.recipient, lookup) {
                Step::Refuse(reply) => {
                    return Verdict::Refuse {
                        reply,
                        by,
                        warning: None,
                    }
                }
                Step::Failed(reply, warning) => return Verdict::Refuse { reply, by, warning },
                _ => {}
            }
        }
        Verdict::Accept {
            hold: marks.hold,
            discard: marks.discard,
            tenant: marks.tenant,
            job: marks.job,
        }
    }

    /// Whether any list explicitly names reject_unlisted_recipient or the
    /// implicit check is on: smtpd needs the router then.
    pub fn needs_router(&self) -> bool {
        self.reject_unlisted
            || self
                .lists
                .iter()
                .any(|(_, l)| l.contains(&Restriction::RejectUnlistedRecipient))
    }

    /// Whether the recipient's domain has recipient lists, so that
    /// reject_unlisted_recipient asks about it: only our own domains
    /// (Postfix: the local, virtual and relay address classes); remote
    /// ones are never asked.
    pub fn has_recipient_list(&self, rcpt: &Mailbox) -> bool {
        match &rcpt.domain {
            Domain::Name(d) => self.is_local_domain(d) || self.is_relay_domain(d),
            _ => false,
        }
    }

    /// Whether checking this recipient may consult [`Lookup::unlisted`]:
    /// a caller whose router answers asynchronously asks it first, and
    /// only then.
    pub fn asks_router(&self, rcpt: &Mailbox) -> bool {
        self.needs_router() && self.has_recipient_list(rcpt)
    }

    /// VRFY's refusal: the unknown-user reply when the recipient lookup
    /// (with reject_unlisted_recipient in force) does not know `rcpt`;
    /// `None` (answer 252) otherwise, a failed lookup included. Postfix
    /// runs its recipient checks for VRFY; of these, only this one tells a
    /// prober anything it could not learn from RCPT.
    pub fn vrfy(&self, rcpt: &Mailbox, lookup: &dyn Lookup) -> Option<Refusal> {
        if !self.asks_router(rcpt) {
            return None;
        }
        match self.unlisted_step(rcpt, lookup) {
            Step::Refuse(r) => Some(r),
            _ => None,
        }
    }

    /// reject_unverified_recipient (`sender` false) or _sender: what
    /// verification knows of the address decides; asked first if need be.
    fn unverified_step(&self, m: &Mailbox, sender: bool, lookup: &dyn Lookup) -> Verified {
        let address = m.to_string();
        let u = &self.unverified;
        let (role, subject_detail, reject, defer, if_permit, reason) = if sender {
            let (r, d, p) = (u.sender_reject, u.sender_defer, u.sender_defer_if_permit);
            ("Sender", (1, 7), r, d, p, u.sender_reason.as_str())
        } else {
            let (r, d, p) = (
                u.recipient_reject,
                u.recipient_defer,
                u.recipient_defer_if_permit,
            );
            ("Recipient", (1, 1), r, d, p, u.recipient_reason.as_str())
        };
        let reply = |code: u16, text: String| {
            let (subject, detail) = subject_detail;
            let text = format!("<{address}>: {role} address rejected: {text}");
            Refusal::of_class(code, subject, detail, text)
        };
        let refuse = |code: u16, text: String| Verified::Step(Step::Refuse(reply(code, text)));
        // A temporary failure: at once, or only if nothing else rejects.
        let tempfail = |code: u16, text: String| {
            let r = reply(code, text);
            Verified::Step(if if_permit {
                Step::DeferIfPermit(r)
            } else {
                Step::Refuse(r)
            })
        };
        match lookup.verified(&address) {
            None => Verified::Ask(address.clone()),
            Some(VerifyState::Deliverable) => Verified::Step(Step::Dunno),
            Some(VerifyState::Undeliverable(_)) if !reason.is_empty() => {
                refuse(reject, reason.to_string())
            }
            // Postfix's words: "undeliverable" only with a permanent
            // code; a reject code of 4xx (its default, 450) says
            // "unverified".
            Some(VerifyState::Undeliverable(t)) if reject >= 500 => {
                refuse(reject, format!("undeliverable address: {t}"))
            }
            Some(VerifyState::Undeliverable(t)) => {
                refuse(reject, format!("unverified address: {t}"))
            }
            Some(VerifyState::Deferred(t) | VerifyState::Unknown(t)) => {
                tempfail(defer, format!("unverified address: {t}"))
            }
            // The service failed: Postfix's reply, without the inner error
            // (a socket path is nothing the client should read).
            Some(VerifyState::Failed(_)) => {
                tempfail(450, "address verification problem".to_string())
            }
        }
    }

    /// Whether any list names reject_unverified_recipient or
    /// reject_unverified_sender: smtpd needs qmgr's verification then.
    pub fn needs_verify(&self) -> bool {
        self.lists.iter().any(|(_, l)| {
            l.iter().any(|r| {
                matches!(
                    r,
                    Restriction::RejectUnverifiedRecipient | Restriction::RejectUnverifiedSender
                )
            })
        })
    }

    fn unlisted_step(&self, rcpt: &Mailbox, lookup: &dyn Lookup) -> Step {
        if !self.has_recipient_list(rcpt) {
            return Step::Dunno;
        }
        match lookup.unlisted(rcpt) {
            Ok(false) => Step::Dunno,
            Ok(true) => Step::Refuse(Refusal::of_class(
                self.unknown_code,
                1,
                1,
                format!(
                    "<{rcpt}>: Recipient address rejected: User unknown in local recipient table"
                ),
            )),
            Err(why) => Step::Failed(
                Refusal::new(
                    451,
                    StatusCode::SYSTEM_TEMP,
                    format!("<{rcpt}>: Temporary lookup failure"),
                ),
                why.map(|why| format!("router lookup error for <{rcpt}>: {why}")),
            ),
        }
    }

    fn eval_list(
        &self,
        list_name: &str,
        items: &[Restriction],
        q: &Query<'_>,
        lookup: &dyn Lookup,
        marks: &mut Marks,
    ) -> ListResult {
        let rcpt = q.recipient.to_string();
        for r in items {
            let step = match r {
                Restriction::Permit => Step::Permit,
                Restriction::Reject => Step::refuse(
                    554,
                    StatusCode::NOT_AUTHORIZED,
                    format!("<{rcpt}>: Access denied"),
                ),
                Restriction::Defer => {
                    Step::refuse(450, TEMP_DENIED, format!("<{rcpt}>: Try again later"))
                }
                Restriction::PermitMynetworks => {
                    if self.in_mynetworks(q.client_addr) {
                        Step::Permit
                    } else {
                        Step::Dunno
                    }
                }
                Restriction::PermitSaslAuthenticated => {
                    if q.sasl_username.is_some() {
                        Step::Permit
                    } else {
                        Step::Dunno
                    }
                }
                Restriction::RejectUnauthDestination | Restriction::DeferUnauthDestination => {
                    if self.authorized_destination(q.recipient) {
                        Step::Dunno
                    } else if *r == Restriction::DeferUnauthDestination {
                        Step::refuse(450, TEMP_DENIED, format!("<{rcpt}>: Relay access denied"))
                    } else {
                        Step::refuse(
                            self.relay_reject_code,
                            StatusCode::NOT_AUTHORIZED,
                            format!("<{rcpt}>: Relay access denied"),
                        )
                    }
                }
                Restriction::RejectNonFqdnRecipient => non_fqdn(q.recipient, "Recipient", 504),
                Restriction::RejectUnlistedRecipient => self.unlisted_step(q.recipient, lookup),
                Restriction::RejectUnverifiedRecipient | Restriction::RejectUnverifiedSender => {
                    let who = match r {
                        Restriction::RejectUnverifiedSender => q.sender.map(|s| (s, true)),
                        _ => Some((q.recipient, false)),
                    };
                    // The null sender is never verified (as Postfix).
                    match who.map(|(m, sender)| self.unverified_step(m, sender, lookup)) {
                        None => Step::Dunno,
                        Some(Verified::Step(s)) => s,
                        Some(Verified::Ask(address)) => {
                            return ListResult::Refuse(Verdict::Verify { address })
                        }
                    }
                }
                Restriction::RejectNonFqdnSender => match q.sender {
                    Some(s) => non_fqdn(s, "Sender", 504),
                    None => Step::Dunno,
                },
                Restriction::CheckClientAccess(map) => access_step(
                    lookup,
                    self.access_codes,
                    map,
                    &client_keys(q.client_addr, q.client_name),
                    // Postfix names the client `<name[address]>`.
                    &format!("<{}[{}]>", q.client_name, unmap(q.client_addr)),
                    "Client host rejected",
                ),
                Restriction::CheckSenderAccess(map) => match q.sender {
                    Some(s) => access_step(
                        lookup,
                        self.access_codes,
                        map,
                        &address_keys(s),
                        &format!("<{s}>"),
                        "Sender address rejected",
                    ),
                    // Postfix looks the null sender up as the empty
                    // string's stand-in, `smtpd_null_access_lookup_key`.
                    None => access_step(
                        lookup,
                        self.access_codes,
                        map,
                        &["<>".to_string()],
                        "<>",
                        "Sender address rejected",
                    ),
                },
                Restriction::CheckRecipientAccess(map) => access_step(
                    lookup,
                    self.access_codes,
                    map,
                    &address_keys(q.recipient),
                    &format!("<{rcpt}>"),
                    "Recipient address rejected",
                ),
            };
            match step {
                Step::Permit => return ListResult::Permit,
                Step::Dunno => {}
                Step::Hold => marks.hold = true,
                Step::Discard => marks.discard = true,
                Step::Tenant(t) => marks.tenant = Some(t),
                Step::Job(j) => marks.job = Some(j),
                Step::DeferIfPermit(reply) => {
                    // The first one is the answer, if it comes to that.
                    marks.defer_if_permit.get_or_insert(Verdict::Refuse {
                        reply,
                        by: format!("{list_name}: {}", r.name()),
                        warning: None,
                    });
                }
                Step::Refuse(reply) => {
                    return ListResult::Refuse(Verdict::Refuse {
                        reply,
                        by: format!("{list_name}: {}", r.name()),
                        warning: None,
                    })
                }
                Step::Failed(reply, warning) => {
                    return ListResult::Refuse(Verdict::Refuse {
                        reply,
                        by: format!("{list_name}: {}", r.name()),
                        warning,
                    })
                }
            }
        }
        ListResult::Continue
    }
}

/// What the non-terminal actions reached so far asked for.
#[derive(Default)]
struct Marks {
    /// A temporary failure to answer if the lists would accept.
    defer_if_permit: Option<Verdict>,
    hold: bool,
    discard: bool,
    tenant: Option<String>,
    job: Option<String>,
}

/// What reject_unverified_* made of what verification knows.
enum Verified {
    Step(Step),
    /// Nothing asked yet: ask about this address.
    Ask(String),
}

enum ListResult {
    Permit,
    Continue,
    Refuse(Verdict),
}

enum Step {
    Permit,
    Dunno,
    Hold,
    Discard,
    Tenant(String),
    Job(String),
    Refuse(Refusal),
    /// A lookup failed: refuse for now with this, and what failed for
    /// the log (`None`: logged already).
    Failed(Refusal, Option<String>),
    /// Refuse with this only if the lists would otherwise accept.
    DeferIfPermit(Refusal),
}

impl Step {
    fn refuse(code: u16, status: StatusCode, text: String) -> Step {
        Step::Refuse(Refusal::new(code, status, text))
    }
}

/// 4.7.1: refused for now by policy (defer, defer_unauth_destination).
const TEMP_DENIED: StatusCode = StatusCode::known(4, 7, 1);

fn unmap(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(addr),
        v4 => v4,
    }
}

fn non_fqdn(m: &Mailbox, role: &str, code: u16) -> Step {
    match &m.domain {
        Domain::Name(d) if !d.trim_end_matches('.').contains('.') => Step::refuse(
            code,
            StatusCode::SYNTAX_ERROR,
            format!("<{m}>: {role} address rejected: need fully-qualified address"),
        ),
        _ => Step::Dunno,
    }
}

/// Postfix's client lookup order: the address, its shorter networks
/// (1.2.3, 1.2, 1 for IPv4), then the host name and its parent domains.
fn client_keys(addr: IpAddr, name: &str) -> Vec<String> {
    let addr = unmap(addr);
    let mut keys = vec![addr.to_string()];
    if let IpAddr::V4(v4) = addr {
        let o = v4.octets();
        keys.push(format!("{}.{}.{}", o[0], o[1], o[2]));
        keys.push(format!("{}.{}", o[0], o[1]));
        keys.push(format!("{}", o[0]));
    }
    if name != "unknown" && !name.is_empty() {
        keys.extend(domain_keys(name));
    }
    keys
}

/// A domain and its parent domains, most specific first (`a.b.c`, `b.c`,
/// `c`), as Postfix looks them up with parent_domain_matches_subdomains.
fn domain_keys(domain: &str) -> Vec<String> {
    let d = domain.trim_end_matches('.').to_ascii_lowercase();
    let mut keys = vec![d.clone()];
    let mut rest = d.as_str();
    while let Some((_, parent)) = rest.split_once('.') {
        keys.push(parent.to_string());
        rest = parent;
    }
    keys
}

/// Postfix's address lookup order: `user@domain`, the domain and its
/// parents, then `user@`.
fn address_keys(m: &Mailbox) -> Vec<String> {
    let local = m.local_unquoted();
    let mut keys = Vec::new();
    match &m.domain {
        Domain::Name(d) => {
            keys.push(format!("{local}@{}", d.to_ascii_lowercase()));
            keys.extend(domain_keys(d));
        }
        other => {
            keys.push(format!("{local}@{other}"));
            keys.push(other.to_string());
        }
    }
    keys.push(format!("{local}@"));
    keys
}

fn access_step(
    lookup: &dyn Lookup,
    codes: AccessCodes,
    map: &MapRef,
    keys: &[String],
    what: &str,
    default_text: &str,
) -> Step {
    for key in keys {
        let value = match lookup.lookup(map, key) {
            Ok(Some(v)) => v,
            Ok(None) => continue,
            Err(e) => {
                return Step::Failed(
                    Refusal::new(
                        451,
                        StatusCode::SYSTEM_TEMP,
                        format!("{what}: Temporary lookup failure"),
                    ),
                    Some(format!("{map} lookup error for \"{key}\": {e}")),
                )
            }
        };
        return match parse_action(&value) {
            AccessAction::Ok => Step::Permit,
            AccessAction::Dunno => Step::Dunno,
            AccessAction::Hold => Step::Hold,
            AccessAction::Discard => Step::Discard,
            AccessAction::Tenant(t) => Step::Tenant(t),
            AccessAction::Job(j) => Step::Job(j),
            // X.7.1 of the code's class, as Postfix's smtpd_check.c
            // whatever access_map_{reject,defer}_code say.
            AccessAction::Reject(text) => Step::Refuse(Refusal::of_class(
                codes.reject,
                7,
                1,
                format!(
                    "{what}: {default_text}: {}",
                    text.unwrap_or_else(|| "Access denied".into())
                ),
            )),
            AccessAction::Defer(text) => Step::Refuse(Refusal::of_class(
                codes.defer,
                7,
                1,
                format!(
                    "{what}: {default_text}: {}",
                    text.unwrap_or_else(|| "Access denied".into())
                ),
            )),
            AccessAction::Code(r) => {
                let text = format!("{what}: {default_text}: {}", r.text);
                Step::Refuse(Refusal { text, ..r })
            }
            AccessAction::Bad(v) => Step::Failed(
                Refusal::new(
                    451,
                    StatusCode::known(4, 3, 5),
                    "Server configuration error".to_string(),
                ),
                Some(format!(
                    "access table {map}: bad action \"{v}\" for key \"{key}\""
                )),
            ),
        };
    }
    Step::Dunno
}

#[cfg(test)]
mod tests;
