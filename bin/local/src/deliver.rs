//! One recipient: from the address qmgr gives to mailboxes and commands.
//!
//! `user+ext@domain` → `user+ext` → aliases (the full name first, then the
//! base name) → targets. A user's mailbox is written with the user's
//! effective uid/gid when we are root (Postfix's set_eugid: the saved uid
//! stays root so the next delivery can switch again). In
//! `mail_spool_directory` the mailbox file is created by root and given to
//! the user first, so a spool the user cannot write still works, and the
//! dotlock is taken with root's rights; under the user's home
//! (`home_mailbox`) every step is the user's. A user's `.forward` (the
//! first `forward_path` file there is, read as the user; skipped with a
//! warning unless it is a regular file owned by the user or root and not
//! world-writable, as Postfix) replaces the mailbox with what it lists.
//! Root's own mailbox is written as root only with `allow_mail_to_root`
//! (Postfix always does); otherwise mail for root bounces with 5.7.1.
//! Commands run as a child with the target uid/gid (std's `Command::uid`)
//! and files are written with them; those are never root's: a command or
//! file whose rights would be root's (root's `.forward` or
//! `mailbox_command`, a root-owned alias table) gets `default_privs`.
//! Unprivileged, everything runs as the current user.
//!
//! An alias `name` with an alias `owner-name` hands its errors to the
//! owner (Postfix's local(8)): its addresses (users and remote) are
//! forwarded as one new message whose envelope sender is the owner, so
//! their failures bounce there; its commands and files are delivered here
//! with the owner as sender, and a permanent failure of one is reported to
//! the owner at once by a notice of its own (Postfix's bounce_one), which
//! settles that target.
//!
//! Each target is logged in Postfix's format; the recipient's result is
//! the worst of its targets' (deferred over bounced over sent). Targets
//! delivered before another deferred are skipped on the retry
//! ([`crate::progress`]).

use mail::StatusCode;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use daemon::{msg_info, msg_warn};
use ipc::delivery::Transaction;

use crate::alias::{self, Origin, Target};
use crate::content;
use crate::mailbox::{self, Failure};
use crate::message::Message;
use crate::pipe;
use crate::progress::Progress;
use crate::resubmit::{Dsn, Piece};

/// Settings from main.cf.
pub struct Settings {
    /// `mail_spool_directory`.
    pub spool: PathBuf,
    /// `home_mailbox`.
    pub home_mailbox: String,
    /// `mailbox_command`.
    pub mailbox_command: String,
    /// `mailbox_size_limit`.
    pub size_limit: u64,
    /// `alias_maps`.
    pub alias_maps: Vec<config::MapRef>,
    /// `allow_mail_to_commands`.
    pub commands_from: Vec<String>,
    /// `allow_mail_to_files`.
    pub files_from: Vec<String>,
    /// `recipient_delimiter`.
    pub delimiter: String,
    /// `mydestination`, lower case.
    pub local_domains: Vec<String>,
    /// `myhostname`.
    pub myhostname: String,
    /// `bounce_size_limit`: an owner's notice returns a larger original
    /// as headers only (0: whole).
    pub bounce_size_limit: u64,
    /// `soft_bounce`: an owned target's permanent failure is deferred, not
    /// reported to the owner.
    pub soft_bounce: bool,
    /// `command_time_limit`.
    pub command_timeout: Duration,
    /// `forward_path`, unexpanded.
    pub forward_path: String,
    /// `luser_relay`, unexpanded.
    pub luser_relay: String,
    /// `default_privs`: who runs alias commands and writes alias files.
    pub default_privs: String,
    /// `owner_request_special`.
    pub owner_request_special: bool,
    /// `expand_owner_alias`.
    pub expand_owner_alias: bool,
    /// `myorigin`, for `owner-name@$myorigin`.
    pub myorigin: String,
    /// Running as root.
    pub as_root: bool,
    /// `allow_mail_to_root`.
    pub allow_root: bool,
    /// cleanup's socket, for forwarding to remote addresses.
    pub cleanup: PathBuf,
    /// The delivery log line's settings.
    pub logger: agent::Logger,
}

impl Settings {
    /// Reads the settings for transport `service`.
    pub fn from(cfg: &config::Config, service: &str) -> Settings {
        let t = cfg.transport(service);
        Settings {
            spool: PathBuf::from(cfg.str("mail_spool_directory")),
            home_mailbox: cfg.str("home_mailbox"),
            mailbox_command: cfg.str("mailbox_command"),
            size_limit: cfg.size("mailbox_size_limit"),
            alias_maps: cfg.maps("alias_maps"),
            commands_from: cfg.list("allow_mail_to_commands"),
            files_from: cfg.list("allow_mail_to_files"),
            delimiter: cfg.str("recipient_delimiter"),
            local_domains: cfg
                .list("mydestination")
                .iter()
                .map(|d| d.to_lowercase())
                .collect(),
            myhostname: cfg.str("myhostname"),
            bounce_size_limit: cfg.size("bounce_size_limit"),
            soft_bounce: cfg.bool("soft_bounce"),
            command_timeout: t.time("command_time_limit"),
            forward_path: cfg.str("forward_path"),
            luser_relay: cfg.str("luser_relay"),
            default_privs: cfg.str("default_privs"),
            owner_request_special: cfg.bool("owner_request_special"),
            expand_owner_alias: cfg.bool("expand_owner_alias"),
            myorigin: cfg.str("myorigin"),
            as_root: sys::is_root(),
            allow_root: cfg.bool("allow_mail_to_root"),
            cleanup: PathBuf::from(cfg.str("queue_directory")).join("private/cleanup"),
            logger: agent::Logger::from_config(cfg),
        }
    }
}

/// Splits `user+ext` at the first delimiter character.
pub fn split_extension<'a>(local: &'a str, delimiters: &str) -> (&'a str, Option<&'a str>) {
    match local.find(|c| delimiters.contains(c)) {
        Some(i) if i > 0 && !delimiters.is_empty() => (&local[..i], Some(&local[i + 1..])),
        _ => (local, None),
    }
}

/// `forward_path` with `$home`, `$user`, `$extension`, `$recipient_delimiter`
/// (also as `${name}`) substituted; an entry with anything else left, or
/// naming an extension there is none of, is skipped.
pub fn forward_paths(
    spec: &str,
    u: &sys::privilege::Identity,
    ext: Option<&str>,
    delimiter: &str,
) -> Vec<String> {
    let home = u.home.display().to_string();
    let delim: String = delimiter.chars().take(1).collect();
    let vars = [
        ("home", home.as_str()),
        ("user", u.name.as_str()),
        ("extension", ext.unwrap_or("")),
        ("recipient_delimiter", delim.as_str()),
    ];
    spec.split([',', ' ', '\t'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .filter(|p| ext.is_some() || !p.contains("extension"))
        .filter_map(|p| {
            let mut p = p.to_string();
            for (k, v) in vars {
                p = p
                    .replace(&format!("${{{k}}}"), v)
                    .replace(&format!("${k}"), v);
            }
            (!p.contains('$')).then_some(p)
        })
        .collect()
}

/// Whether `list` (allow_mail_to_commands or _files) admits `origin`.
fn allowed(list: &[String], origin: Origin) -> bool {
    let want = match origin {
        Origin::Alias => "alias",
        Origin::Include => "include",
        Origin::Forward => "forward",
    };
    list.iter().any(|v| v == want)
}

/// Why a `.forward` file may not be used (Postfix's checks, in its order),
/// or `None` when it may.
pub fn forward_problem(meta: &std::fs::Metadata, path: &str, uid: u32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    if !meta.file_type().is_file() {
        Some(format!("file {path} is not a regular file"))
    } else if meta.uid() != 0 && meta.uid() != uid {
        Some(format!("file {path} has bad owner uid {}", meta.uid()))
    } else if meta.mode() & 0o002 != 0 {
        Some(format!("file {path} is world writable"))
    } else {
        None
    }
}

/// The sender for an alias's deliveries when it has an owner: the owner
/// alias's value when `expand_owner_alias` asks for it and that is one
/// address, else `owner-name@$myorigin`.
pub fn owner_sender(name: &str, value: &str, expand: bool, myorigin: &str) -> String {
    let items = tables::split_alias_value(value);
    match items.as_slice() {
        [one] if expand && !one.starts_with(['|', '/', ':', '\\']) && !one.contains(' ') => {
            if one.contains('@') {
                one.clone()
            } else {
                format!("{one}@{myorigin}")
            }
        }
        _ => format!("owner-{name}@{myorigin}"),
    }
}

/// What was delivered where, for a 2xx result.
type Done = String;

/// One transaction's deliveries.
pub struct Delivery<'a> {
    /// The settings.
    pub settings: &'a Settings,
    /// The aliases (opened per transaction, so edits take effect).
    pub aliases: &'a tables::Tables,
    /// The uid owning each alias table, in the same order (0: root's, or
    /// not a file).
    pub alias_uids: &'a [u32],
    /// The transaction.
    pub txn: &'a Transaction,
    /// Its content, wire format, read a chunk at a time.
    pub wire: &'a Message,
    /// When qmgr's request arrived.
    pub started: Instant,
    /// The recipient's ORCPT, for `orig_to=` when cleanup rewrote it, and
    /// for the copies an alias or `.forward` sends on.
    pub orcpt: Option<&'a str>,
    /// The recipient's NOTIFY, for the copies an alias or `.forward` sends on.
    pub notify: mail::Notify,
}

impl Delivery<'_> {
    /// [`Delivery::deliver`] with nothing remembered between attempts.
    #[cfg(test)]
    pub fn recipient(&self, address: &str) -> Result<Done, Failure> {
        self.deliver(address, &mut Progress::none())
    }

    /// Delivers to one recipient address, skipping the targets `progress`
    /// says an earlier attempt delivered; the result's text for qmgr.
    pub fn deliver(&self, address: &str, progress: &mut Progress) -> Result<Done, Failure> {
        let addr = address.to_lowercase();
        if content::delivered_to(self.wire.head(), &addr) {
            let f = Failure::bounce(
                StatusCode::known(5, 4, 6),
                format!("mail forwarding loop for {addr}"),
            );
            self.log(&addr, None, Err(&f));
            return Err(f);
        }
        let (local, domain) = addr.rsplit_once('@').unwrap_or((addr.as_str(), ""));
        let s = self.settings;
        // Postfix does not split owner-list and list-request at a '-'.
        let special = s.owner_request_special
            && s.delimiter.contains('-')
            && (local.starts_with("owner-") || local.ends_with("-request"));
        let (base, ext) = if special {
            (local, None)
        } else {
            split_extension(local, &s.delimiter)
        };
        // A lookup that reaches an alias table that could not be read
        // defers the recipient once the expansion is done (Postfix's
        // local/alias.c: 4.3.0 "alias database unavailable"), before any
        // target is delivered.
        let unavailable = std::cell::Cell::new(None);
        let lookup = |k: &str| match self.aliases.find_in(k) {
            Ok(hit) => hit.map(|(i, v)| (v, self.alias_uids.get(i).copied().unwrap_or(0))),
            Err(e) => {
                unavailable.set(Some(e.clone()));
                None
            }
        };
        let name = if lookup(local).is_some() { local } else { base };
        let is_local = |d: &str| s.local_domains.iter().any(|x| x == d);
        let include = |p: &str| self.read_include(p);
        let src = alias::Sources {
            lookup: &lookup,
            local_domain: &is_local,
            include: &include,
        };
        let unreadable = || {
            let e = unavailable.take()?;
            msg_warn!(
                "{}: alias_maps: {e}: lookup of '{name}' failed",
                self.txn.queue_id
            );
            let f = Failure::defer(StatusCode::known(4, 3, 0), "alias database unavailable");
            self.log(&addr, None, Err(&f));
            Some(f)
        };
        let expanded = alias::expand(name, &src);
        if let Some(f) = unreadable() {
            return Err(f);
        }
        let targets = match expanded.and_then(|t| self.luser_relay(t, &addr, name, ext, &src)) {
            Ok(t) => t,
            Err(f) => {
                self.log(&addr, None, Err(&f));
                return Err(f);
            }
        };
        let owner = match lookup(name) {
            Some(_) if s.owner_request_special => lookup(&format!("owner-{name}"))
                .map(|(v, _)| owner_sender(name, &v, s.expand_owner_alias, &s.myorigin)),
            _ => None,
        };
        if let Some(f) = unreadable() {
            return Err(f);
        }
        if let Some(owner) = owner {
            let txn = Transaction {
                queue_id: self.txn.queue_id.clone(),
                sender: owner,
                ret: self.txn.ret,
                envid: self.txn.envid.clone(),
                body: self.txn.body,
                smtputf8: self.txn.smtputf8,
                size: self.txn.size,
                arrival_us: self.txn.arrival_us,
                recipients: Vec::new(),
                data: ipc::delivery::Data::Inline(Vec::new()),
            };
            let owned = Delivery { txn: &txn, ..*self };
            return owned.owned_targets(&targets, &addr, name, domain, ext, progress);
        }
        let mut results = Vec::new();
        let mut delivered = Vec::new();
        for t in &targets {
            let key = t.key();
            if progress.contains(&key) {
                continue;
            }
            let r = self.target(t, &addr, name, ext);
            let shown = match t {
                Target::User(u) if u != name => Some(format!("{u}@{}", self.settings.myhostname)),
                _ => None,
            };
            match &shown {
                Some(to) => self.log(to, Some(&addr), r.as_ref()),
                None => self.log(&addr, None, r.as_ref()),
            }
            if r.is_ok() {
                delivered.push(key);
            }
            results.push(r);
        }
        settled(results, &delivered, progress)
    }

    /// An alias lookup: the value and the uid owning the table it is in.
    fn alias(&self, key: &str) -> Option<(String, u32)> {
        let uids = self.alias_uids.iter().chain(std::iter::repeat(&0));
        self.aliases
            .tables()
            .iter()
            .zip(uids)
            .find_map(|(t, uid)| t.lookup(key).map(|v| (v, *uid)))
    }

    /// Delivers an alias's targets when it has an owner (`self.txn.sender`
    /// is the owner): the addresses as one new message from the owner, the
    /// rest here, their permanent failures reported to the owner.
    fn owned_targets(
        &self,
        targets: &[Target],
        addr: &str,
        name: &str,
        domain: &str,
        ext: Option<&str>,
        progress: &mut Progress,
    ) -> Result<Done, Failure> {
        let mut forward = Vec::new();
        let mut here = Vec::new();
        for t in targets {
            match t {
                Target::Remote(r) => forward.push(r.clone()),
                // A user that is also an alias came from `\name` or the
                // alias itself: sent on, it would be expanded again.
                Target::User(u) if u != name && self.alias(u).is_none() => {
                    forward.push(format!("{u}@{domain}"))
                }
                _ => here.push(t),
            }
        }
        let mut results = Vec::new();
        let mut delivered = Vec::new();
        let batch = format!("forward:{}", forward.join(", ").replace(['\r', '\n'], " "));
        if !forward.is_empty() && !progress.contains(&batch) {
            // A list with an owner is a new distribution (Postfix's
            // alias.c): the original recipient, RET and ENVID are not
            // passed on.
            let dsn = Dsn {
                notify: self.notify.forwarded(),
                orcpt: None,
                ret: None,
                envid: None,
            };
            let r = crate::resubmit::resubmit(
                &self.settings.cleanup,
                self.txn,
                self.wire,
                addr,
                &forward,
                dsn,
            )
            .map(|id| format!("forwarded as {id}"));
            for to in &forward {
                self.log(to, Some(addr), r.as_ref());
            }
            let r = self.settle(r, addr);
            if r.is_ok() {
                delivered.push(batch);
            }
            results.push(r);
        }
        for t in here {
            let key = t.key();
            if progress.contains(&key) {
                continue;
            }
            let r = self.target(t, addr, name, ext);
            match t {
                Target::User(u) if u != name => {
                    let to = format!("{u}@{}", self.settings.myhostname);
                    self.log(&to, Some(addr), r.as_ref());
                }
                _ => self.log(addr, None, r.as_ref()),
            }
            let r = self.settle(r, addr);
            if r.is_ok() {
                delivered.push(key);
            }
            results.push(r);
        }
        settled(results, &delivered, progress)
    }

    /// A permanent failure of an owned target goes to the owner in a notice
    /// of its own, which settles it; when the notice cannot be queued the
    /// target is tried again later.
    fn settle(&self, r: Result<Done, Failure>, addr: &str) -> Result<Done, Failure> {
        let f = match r {
            Err(f) if f.is_permanent() => f,
            other => return other,
        };
        if self.settings.soft_bounce {
            // Postfix's bounce_one defers under soft_bounce: no notice,
            // the target is tried again.
            return Err(Failure::defer(f.status.softened(), f.text));
        }
        let owner = &self.txn.sender;
        let cx_date = sys::time::rfc5322_date(SystemTime::now());
        let arrival = SystemTime::UNIX_EPOCH + Duration::from_micros(self.txn.arrival_us);
        let arrived = sys::time::rfc5322_date(arrival);
        // An original over bounce_size_limit comes back as headers only,
        // as qmgr's notices.
        let limit = self.settings.bounce_size_limit;
        let env = mail::Envelope {
            sender: owner.clone(),
            recipients: vec![mail::Recipient::new(addr)],
            ret: if limit > 0 && self.wire.len() > limit {
                Some(mail::Ret::Hdrs)
            } else {
                self.txn.ret
            },
            envid: self.txn.envid.clone(),
            arrival: mail::Timestamp::from_micros(self.txn.arrival_us),
            smtputf8: self.txn.smtputf8,
            ..mail::Envelope::default()
        };
        let failed = mail::notice::Failed {
            index: 0,
            status: f.status,
            reason: f.text.clone(),
        };
        let parts = mail::notice::parts_of(
            mail::notice::Kind::Failure,
            &env,
            &self.txn.queue_id,
            &[&failed],
            mail::notice::Context {
                hostname: &self.settings.myhostname,
                to: owner,
                date: &cx_date,
                arrival: &arrived,
                retry_until: None,
                postmaster: false,
            },
        );
        // The original goes in as it is read, never whole.
        let headers = mail::notice::header_section(self.wire.head());
        let (original, ended) = if parts.headers_only {
            let ended = headers.is_empty() || headers.ends_with(b"\r\n");
            (Piece::Bytes(headers), ended)
        } else {
            let ended = self.wire.ends_with_crlf().map_err(|e| {
                Failure::defer(
                    StatusCode::known(4, 3, 0),
                    format!("{}; cannot read the message: {e}", f.text),
                )
            })?;
            (Piece::Message(self.wire), ended)
        };
        let tail = parts.tail(ended);
        let report = [Piece::Bytes(&parts.head), original, Piece::Bytes(&tail)];
        // As qmgr's notices: 8BITMIME for a global report or an 8-bit
        // original returned in it, SMTPUTF8 only for a UTF-8 owner.
        let notice = mail::Envelope {
            sender: String::new(),
            smtputf8: !owner.is_ascii(),
            recipients: vec![mail::Recipient::new(owner.as_str())],
            body_type: if self.txn.smtputf8 || self.txn.body != mail::BodyType::SevenBit {
                mail::BodyType::EightBitMime
            } else {
                mail::BodyType::default()
            },
            ..mail::Envelope::default()
        };
        match crate::resubmit::submit(&self.settings.cleanup, notice, true, &report) {
            Ok(id) => {
                msg_info!(
                    "{}: sender non-delivery notification: {id}",
                    self.txn.queue_id
                );
                Ok(format!("{}: notice to {owner} as {id}", f.text))
            }
            Err(e) => Err(Failure::defer(
                StatusCode::known(4, 3, 0),
                format!("{}; the notice to {owner} failed: {}", f.text, e.text),
            )),
        }
    }

    fn log(&self, to: &str, orig: Option<&str>, r: Result<&Done, &Failure>) {
        let status = match r {
            Ok(t) => mail::Status::new(StatusCode::OK, t.as_str()),
            Err(f) => f.to_status(),
        };
        let orig = orig.or_else(|| mail::orig_to(to, self.orcpt));
        let delays = agent::Timing::at(self.started).delays(self.txn, Instant::now());
        self.settings
            .logger
            .target(self.txn, to, orig, "local", delays, &status);
    }

    fn target(
        &self,
        t: &Target,
        addr: &str,
        name: &str,
        ext: Option<&str>,
    ) -> Result<Done, Failure> {
        let s = self.settings;
        match t {
            Target::User(u) => self.user(u, addr, ext, 0),
            Target::Remote(r) => self.resubmit(addr, r),
            Target::File(_, o, _) if !allowed(&s.files_from, *o) => Err(Failure::bounce(
                StatusCode::known(5, 7, 1),
                format!("alias {name}: mail to files is restricted"),
            )),
            Target::Command(_, o, _) if !allowed(&s.commands_from, *o) => Err(Failure::bounce(
                StatusCode::known(5, 7, 1),
                format!("alias {name}: mail to commands is restricted"),
            )),
            Target::Command(c, _, uid) => {
                let (ids, home) = self.rights(*uid)?;
                self.command(c, addr, name, ext, ids, home)
            }
            Target::File(f, _, uid) => {
                let (ids, _) = self.rights(*uid)?;
                self.file(f, addr, ids)
            }
        }
    }

    /// Forwards to a remote address as a new message (Postfix logs
    /// `forwarded as ID`), with the recipient's NOTIFY (less SUCCESS, which
    /// this delivery reports) and its ORCPT, or `addr` as ORCPT when it
    /// had none, as Postfix's local(8) passes dsn_notify and dsn_orcpt on.
    fn resubmit(&self, addr: &str, to: &str) -> Result<Done, Failure> {
        let orcpt = self
            .orcpt
            .and_then(mail::Orcpt::parse)
            .or_else(|| mail::Orcpt::of_address(addr));
        let dsn = Dsn {
            notify: self.notify.forwarded(),
            orcpt: orcpt.map(|o| o.to_string()),
            ret: self.txn.ret,
            envid: self.txn.envid.clone(),
        };
        crate::resubmit::resubmit(
            &self.settings.cleanup,
            self.txn,
            self.wire,
            addr,
            &[to.to_string()],
            dsn,
        )
        .map(|id| format!("forwarded as {id}"))
    }

    /// Reads a `:include:` file (as default_privs when root; at most 1 MB):
    /// its text and its owner's uid.
    fn read_include(&self, path: &str) -> Result<(String, u32), Failure> {
        use std::os::unix::fs::MetadataExt;
        let (ids, _) = self.rights(0)?;
        let _guard = match ids {
            Some((uid, gid)) => Some(switch(uid, gid)?),
            None => None,
        };
        let mut text = String::new();
        let owner = std::fs::File::open(path)
            .and_then(|f| {
                let owner = f.metadata()?.uid();
                std::io::Read::read_to_string(&mut std::io::Read::take(f, 1 << 20), &mut text)?;
                Ok(owner)
            })
            .map_err(|e| {
                Failure::defer(
                    StatusCode::known(4, 3, 0),
                    format!("cannot read :include:{path}: {e}"),
                )
            })?;
        Ok((text, owner))
    }

    /// The identity commands and files run with when `uid`'s rights apply
    /// (Postfix's rule): that user, or default_privs for root (0) — never
    /// root itself. Unprivileged, the current user.
    fn rights(&self, uid: u32) -> Result<(Option<(u32, u32)>, PathBuf), Failure> {
        if !self.settings.as_root {
            return Ok((None, PathBuf::from("/")));
        }
        if uid != 0 {
            return match sys::privilege::lookup_uid(uid) {
                Ok(Some(u)) => Ok((Some((u.uid, u.gid)), u.home)),
                Ok(None) => Err(Failure::defer(
                    StatusCode::known(4, 3, 0),
                    format!("mail system configuration error: no user has uid {uid}"),
                )),
                Err(e) => Err(Failure::defer(
                    StatusCode::known(4, 3, 0),
                    format!("uid {uid}: {e}"),
                )),
            };
        }
        let who = &self.settings.default_privs;
        match sys::privilege::lookup_user(who) {
            Ok(Some(u)) if u.uid != 0 => Ok((Some((u.uid, u.gid)), u.home)),
            Ok(_) => Err(Failure::defer(
                StatusCode::known(4, 3, 0),
                format!("default_privs {who}: no such user, or root"),
            )),
            Err(e) => Err(Failure::defer(
                StatusCode::known(4, 3, 0),
                format!("default_privs {who}: {e}"),
            )),
        }
    }

    fn command(
        &self,
        command: &str,
        addr: &str,
        user: &str,
        ext: Option<&str>,
        ids: Option<(u32, u32)>,
        home: PathBuf,
    ) -> Result<Done, Failure> {
        let (ids, home) = match ids {
            Some((0, _)) => self.rights(0)?,
            _ => (ids, home),
        };
        let (local, domain) = addr.rsplit_once('@').unwrap_or((addr, ""));
        let dir = if home.is_dir() {
            home.clone()
        } else {
            PathBuf::from("/")
        };
        let job = pipe::PipeJob {
            command,
            input: self.command_input(addr),
            env: vec![
                ("SENDER", self.txn.sender.clone()),
                ("RECIPIENT", addr.to_string()),
                ("USER", user.to_string()),
                ("HOME", home.display().to_string()),
                ("LOCAL", local.to_string()),
                ("DOMAIN", domain.to_string()),
                ("EXTENSION", ext.unwrap_or("").to_string()),
                ("SHELL", "/bin/sh".to_string()),
            ],
            ids,
            dir,
            timeout: self.settings.command_timeout,
        };
        pipe::run(&job)?;
        Ok(format!("delivered to command: {command}"))
    }

    fn user(
        &self,
        name: &str,
        addr: &str,
        ext: Option<&str>,
        depth: usize,
    ) -> Result<Done, Failure> {
        let s = self.settings;
        let u = match sys::privilege::lookup_user(name) {
            Ok(Some(u)) => u,
            Ok(None) => {
                return Err(Failure::bounce(
                    StatusCode::known(5, 1, 1),
                    format!("unknown user: \"{name}\""),
                ))
            }
            Err(e) => {
                return Err(Failure::defer(
                    StatusCode::known(4, 3, 0),
                    format!("user {name}: {e}"),
                ))
            }
        };
        let ids = s.as_root.then_some((u.uid, u.gid));
        if let Some(text) = self.read_forward(&u, ext, ids)? {
            return self.forward(&u, &text, addr, ext, ids, depth);
        }
        if s.as_root && u.uid == 0 && !s.allow_root {
            return Err(Failure::bounce(
                StatusCode::known(5, 7, 1),
                "mail for root is not delivered as root: alias root to a person (or set allow_mail_to_root = yes)",
            ));
        }
        self.mailbox(&u, addr, ext, ids)
    }

    /// Reads the first `forward_path` file that exists, as the user.
    fn read_forward(
        &self,
        u: &sys::privilege::Identity,
        ext: Option<&str>,
        ids: Option<(u32, u32)>,
    ) -> Result<Option<String>, Failure> {
        let s = self.settings;
        let _guard = match ids {
            Some((uid, gid)) => Some(switch(uid, gid)?),
            None => None,
        };
        for path in forward_paths(&s.forward_path, u, ext, &s.delimiter) {
            // The first file there is decides, as in Postfix: a bad one
            // means the mailbox, not the next name.
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(Failure::defer(
                        StatusCode::known(4, 3, 0),
                        format!("cannot read {path}: {e}"),
                    ))
                }
            };
            if let Some(problem) = forward_problem(&meta, &path, u.uid) {
                msg_warn!("{}: {problem}: skipping", self.txn.queue_id);
                return Ok(None);
            }
            let mut text = String::new();
            let read = std::os::unix::fs::OpenOptionsExt::custom_flags(
                std::fs::OpenOptions::new().read(true),
                sys::O_NOFOLLOW,
            )
            .open(&path)
            .and_then(|f| {
                use std::os::unix::fs::MetadataExt;
                // The file checked must be the file read.
                let now = f.metadata()?;
                if now.ino() != meta.ino() || now.dev() != meta.dev() {
                    return Err(std::io::Error::other("replaced while being read"));
                }
                std::io::Read::read_to_string(&mut std::io::Read::take(f, 1 << 20), &mut text)
            });
            return match read {
                Ok(_) => Ok(Some(text)),
                Err(e) => Err(Failure::defer(
                    StatusCode::known(4, 3, 0),
                    format!("cannot read {path}: {e}"),
                )),
            };
        }
        Ok(None)
    }

    /// Delivers to what a user's `.forward` lists: the user's own name (or
    /// `\\name`) is the mailbox, commands and files run as the user, other
    /// local users are delivered to in turn (at most five deep).
    fn forward(
        &self,
        u: &sys::privilege::Identity,
        text: &str,
        addr: &str,
        ext: Option<&str>,
        ids: Option<(u32, u32)>,
        depth: usize,
    ) -> Result<Done, Failure> {
        let s = self.settings;
        let name = u.name.as_str();
        if depth >= 5 {
            return Err(Failure::bounce(
                StatusCode::known(5, 4, 6),
                format!("forwarding loop through {name}'s .forward"),
            ));
        }
        let is_local = |d: &str| s.local_domains.iter().any(|x| x == d);
        let include = |p: &str| self.read_include(p);
        let src = alias::Sources {
            lookup: &|_| None,
            local_domain: &is_local,
            include: &include,
        };
        let targets = alias::expand_list(name, text, Origin::Forward, u.uid, &src)?;
        let mut done = Vec::new();
        let mut failed: Option<Failure> = None;
        for t in targets {
            let r = match &t {
                Target::User(x) if x == name => self.mailbox(u, addr, ext, ids),
                Target::User(x) => self.user(x, addr, None, depth + 1),
                Target::Remote(r) => self.resubmit(addr, r),
                Target::Command(_, o, _) if !allowed(&s.commands_from, *o) => Err(Failure::bounce(
                    StatusCode::known(5, 7, 1),
                    format!("{name}'s .forward: mail to commands is restricted"),
                )),
                Target::File(_, o, _) if !allowed(&s.files_from, *o) => Err(Failure::bounce(
                    StatusCode::known(5, 7, 1),
                    format!("{name}'s .forward: mail to files is restricted"),
                )),
                Target::Command(c, _, _) => self.command(c, addr, name, ext, ids, u.home.clone()),
                Target::File(f, _, _) => {
                    let ids = match ids {
                        Some((0, _)) => self.rights(0)?.0,
                        _ => ids,
                    };
                    self.file(f, addr, ids)
                }
            };
            match r {
                Ok(d) => done.push(d),
                Err(f) => {
                    let worse = failed
                        .as_ref()
                        .is_none_or(|old| !f.is_permanent() && old.is_permanent());
                    if worse {
                        failed = Some(f);
                    }
                }
            }
        }
        match failed {
            Some(f) => Err(f),
            None => Ok(done.join(", ")),
        }
    }

    fn mailbox(
        &self,
        u: &sys::privilege::Identity,
        addr: &str,
        ext: Option<&str>,
        ids: Option<(u32, u32)>,
    ) -> Result<Done, Failure> {
        let s = self.settings;
        let name = u.name.as_str();
        if !s.mailbox_command.is_empty() {
            return self.command(&s.mailbox_command, addr, name, ext, ids, u.home.clone());
        }
        if s.home_mailbox.ends_with('/') {
            let dir = u.home.join(&s.home_mailbox);
            let _guard = match ids {
                Some((uid, gid)) => Some(switch(uid, gid)?),
                None => None,
            };
            self.maildir(&dir, addr)?;
            return Ok("delivered to maildir".into());
        }
        let owner = ids.map_or(sys::current_ids().0, |(uid, _)| uid);
        if !s.home_mailbox.is_empty() {
            // Under the user's home every step is the user's: root must not
            // create files along a path the user controls.
            let mbox = u.home.join(&s.home_mailbox);
            let _guard = match ids {
                Some((uid, gid)) => Some(switch(uid, gid)?),
                None => None,
            };
            let _dotlock = mailbox::DotLock::take(&mbox)?;
            self.append(&mbox, addr, Some(owner))?;
            return Ok("delivered to mailbox".into());
        }
        // The spool is root's: the lock and an empty mailbox are made with
        // root's rights (O_EXCL, no symbolic links), the append as the user.
        let mbox = s.spool.join(name);
        let _dotlock = mailbox::DotLock::take(&mbox)?;
        if let Some((uid, gid)) = ids {
            mailbox::create_owned(&mbox, uid, gid)?;
        }
        let _guard = match ids {
            Some((uid, gid)) => Some(switch(uid, gid)?),
            None => None,
        };
        self.append(&mbox, addr, Some(owner))?;
        Ok("delivered to mailbox".into())
    }
}

/// The recipient's result from this attempt's targets (those not already
/// delivered), remembering the delivered ones when another is deferred.
fn settled(
    results: Vec<Result<Done, Failure>>,
    delivered: &[String],
    progress: &mut Progress,
) -> Result<Done, Failure> {
    let deferred = results
        .iter()
        .any(|r| matches!(r, Err(f) if !f.is_permanent()));
    progress.finish(deferred, delivered);
    if results.is_empty() {
        return Ok("delivered on an earlier attempt".into());
    }
    worst(results)
}

/// The recipient's result from its targets': deferred over bounced over
/// delivered (then what was delivered where, joined).
fn worst(results: Vec<Result<Done, Failure>>) -> Result<Done, Failure> {
    let first = |class: u8| {
        results
            .iter()
            .find(|r| matches!(r, Err(f) if f.status.class() == class))
    };
    if let Some(Err(f)) = first(4).or_else(|| first(5)) {
        return Err(f.clone());
    }
    let done: Vec<String> = results.into_iter().filter_map(Result::ok).collect();
    Ok(done.join(", "))
}

pub(crate) fn switch(uid: u32, gid: u32) -> Result<sys::privilege::EffectiveIds, Failure> {
    sys::privilege::switch_effective(uid, gid).map_err(|e| {
        Failure::defer(
            StatusCode::known(4, 3, 0),
            format!("cannot switch to uid {uid}: {e}"),
        )
    })
}

#[cfg(test)]
mod tests;
