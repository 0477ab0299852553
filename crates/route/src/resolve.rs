//! The resolution pipeline: canonical → virtual alias → class → transport.
//!
//! Postfix's order and meaning (cleanup's canonical and virtual rewriting,
//! then trivial-rewrite's resolve): `recipient_canonical_maps`, then
//! `canonical_maps` (one lookup each); `virtual_alias_maps` expanded
//! recursively, an address that lists itself being kept as is, a cycle
//! through other addresses or more than `virtual_alias_recursion_limit`
//! levels or `virtual_alias_expansion_limit` addresses being a temporary
//! error (Postfix defers such mail: the table is broken, not the address);
//! then each resulting address is classed local (`mydestination`),
//! virtual alias domain without a match (error: user unknown), relay
//! (`relay_domains`) or default, and `transport_maps` may override.
//! Pure functions of the settings and the address: no I/O, no clock.

use std::collections::BTreeSet;

use crate::address::{self, Addr, AddressError};
use crate::settings::Settings;
use crate::transport::{error_status, split_transport, ERROR_DEFAULT};

/// How an address was classed, as Postfix's resolve flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// A `mydestination` domain.
    Local,
    /// A `virtual_alias_domains` domain.
    Virtual,
    /// A `relay_domains` domain.
    Relay,
    /// Anything else.
    Default,
}

/// Where one recipient goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The rewritten address, external form.
    pub address: String,
    /// The master.cf transport, or `error` for mail to bounce.
    pub transport: String,
    /// The next hop: a domain (MX lookup), `[host]` or `[host]:port`
    /// (no MX lookup); for `error`, the reason text as written.
    pub nexthop: String,
    /// For the `error` transport: the status to bounce with, parsed from
    /// the next hop once, here.
    pub error: Option<mail::Status>,
    /// The address class.
    pub class: Class,
    /// The recipient is not a known user (local_recipient_maps, or a
    /// virtual alias domain without a match): smtpd's reject_unlisted_recipient.
    pub unknown: bool,
    /// transport_maps decided the transport or next hop.
    pub by_table: bool,
}

impl Route {
    /// Whether the next hop is a literal host (`[host]`): no MX lookup.
    pub fn literal(&self) -> bool {
        self.nexthop.starts_with('[')
    }
}

/// Why an address could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResolveError {
    /// The address itself is malformed: permanent.
    Address(AddressError),
    /// Virtual aliases nest deeper than the recursion limit: temporary.
    RecursionLimit(String),
    /// Virtual aliases expand to more addresses than the limit: temporary.
    ExpansionLimit(String),
    /// Virtual aliases form a cycle through other addresses: temporary.
    AliasLoop(Vec<String>),
    /// A table result is not an address: temporary (the table is wrong).
    BadTableResult {
        /// The address looked up.
        key: String,
        /// What the table gave.
        result: String,
    },
    /// A table that might list the address could not be read (a missing
    /// file of virtual_alias_maps, transport_maps, a canonical map, or the
    /// alias_maps file in local_recipient_maps): temporary, as Postfix's
    /// "table lookup problem".
    TableUnavailable {
        /// The parameter naming the table.
        param: &'static str,
        /// The table and why it could not be read.
        error: tables::TableError,
    },
}

impl ResolveError {
    /// Whether a retry may succeed (the configuration may be fixed).
    pub fn is_temporary(&self) -> bool {
        !matches!(self, ResolveError::Address(_))
    }
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::Address(e) => write!(f, "{e}"),
            ResolveError::RecursionLimit(a) => {
                write!(f, "unreasonable virtual_alias_maps nesting for {a}")
            }
            ResolveError::ExpansionLimit(a) => {
                write!(f, "unreasonable virtual_alias_maps expansion size for {a}")
            }
            ResolveError::AliasLoop(chain) => {
                write!(f, "virtual alias loop: {}", chain.join(" -> "))
            }
            ResolveError::BadTableResult { key, result } => {
                write!(
                    f,
                    "table result for {key} is not an address: \"{}\"",
                    result.escape_debug()
                )
            }
            ResolveError::TableUnavailable { param, error } => {
                write!(f, "{param} lookup error: {error}")
            }
        }
    }
}

impl std::error::Error for ResolveError {}

impl From<AddressError> for ResolveError {
    fn from(e: AddressError) -> Self {
        ResolveError::Address(e)
    }
}

/// The most `%`/`!` rewrites of one address: each removes a character, so
/// this only stops hostile nesting early.
const MAX_HACKS: usize = 20;

/// The resolver: settings in, answers out.
#[derive(Debug, Default)]
pub struct Router {
    s: Settings,
}

/// How a map lookup matched: on the full key, or after dropping the
/// extension, or on `@domain`.
struct Hit {
    value: String,
    stripped_ext: Option<String>,
    catch_all: bool,
}

impl Router {
    /// A router over loaded settings.
    pub fn new(s: Settings) -> Router {
        Router { s }
    }

    /// The settings in use.
    pub fn settings(&self) -> &Settings {
        &self.s
    }

    /// Resolves one recipient address to one or more routes (more when
    /// virtual aliases expand it). `smtputf8`: the client may send UTF-8.
    pub fn resolve(&self, text: &str, smtputf8: bool) -> Result<Vec<Route>, ResolveError> {
        let (_, finals) = self.mapped(text, smtputf8)?;
        finals.iter().map(|a| self.route(a)).collect()
    }

    /// Resolves a recipient that cleanup has mapped already: trivial-rewrite's
    /// resolve only (no canonical or virtual alias mapping).
    pub fn resolve_queued(&self, text: &str, smtputf8: bool) -> Result<Route, ResolveError> {
        let a = self.canonicalize(text, smtputf8)?;
        self.route(&a)
    }

    /// What cleanup does to an envelope recipient before the message is
    /// queued (Postfix's cleanup_map11/cleanup_map1n): canonical maps, then
    /// recursive virtual alias expansion, duplicates dropped. `None` when
    /// no table changed the address, so the recipient stays as given.
    pub fn rewrite_recipient(
        &self,
        text: &str,
        smtputf8: bool,
    ) -> Result<Option<Vec<String>>, ResolveError> {
        let (given, finals) = self.mapped(text, smtputf8)?;
        match finals.as_slice() {
            [one] if *one == given => Ok(None),
            _ => Ok(Some(finals.iter().map(Addr::to_string).collect())),
        }
    }

    /// What cleanup does to the envelope sender (Postfix's cleanup_map11 on
    /// the sender): `sender_canonical_maps`, then `canonical_maps`, one
    /// lookup each. `None` for the null sender and when no table changed
    /// the address.
    pub fn rewrite_sender(
        &self,
        text: &str,
        smtputf8: bool,
    ) -> Result<Option<String>, ResolveError> {
        let Some(mut given) = address::parse(text, smtputf8)? else {
            return Ok(None);
        };
        if given.domain.is_empty() && self.s.append_at_myorigin {
            given.domain = self.s.myorigin.clone();
        }
        let maps = [
            ("sender_canonical_maps", &self.s.sender_canonical_maps),
            ("canonical_maps", &self.s.canonical_maps),
        ];
        let out = self.canonical_with(&maps, given.clone(), smtputf8)?;
        Ok((out != given).then(|| out.to_string()))
    }

    /// The address after parsing, and the addresses canonical and virtual
    /// alias mapping make of it, without duplicates, in table order.
    fn mapped(&self, text: &str, smtputf8: bool) -> Result<(Addr, Vec<Addr>), ResolveError> {
        let given = self.canonicalize(text, smtputf8)?;
        let addr = self.canonical(given.clone(), smtputf8)?;
        let mut finals = Vec::new();
        let mut chain = Vec::new();
        self.expand(addr, smtputf8, &mut chain, &mut finals)?;
        let mut seen = BTreeSet::new();
        finals.retain(|a| seen.insert(a.internal().to_lowercase()));
        Ok((given, finals))
    }

    /// The class of the address as given (after `%`/`!` rewriting, before
    /// canonical and virtual aliasing): what smtpd's relay check
    /// (reject_unauth_destination) asks, as Postfix's smtpd asks
    /// trivial-rewrite about the RCPT TO address itself.
    pub fn classify(&self, text: &str, smtputf8: bool) -> Result<Class, ResolveError> {
        let a = self.canonicalize(text, smtputf8)?;
        self.class_of(&a.domain)
    }

    /// mydestination, virtual_alias_domains, relay_domains, in that order;
    /// a list with a table that could not be read fails the address it
    /// might have listed (Postfix's trivial-rewrite: "lookup failure").
    fn class_of(&self, domain: &str) -> Result<Class, ResolveError> {
        if domain.is_empty() {
            return Ok(Class::Local);
        }
        let s = &self.s;
        for (param, list, class) in [
            ("mydestination", &s.mydestination, Class::Local),
            (
                "virtual_alias_domains",
                &s.virtual_alias_domains,
                Class::Virtual,
            ),
            ("relay_domains", &s.relay_domains, Class::Relay),
        ] {
            match list.find(domain) {
                Ok(true) => return Ok(class),
                Ok(false) => {}
                Err(error) => {
                    return Err(ResolveError::TableUnavailable {
                        param,
                        error: error.clone(),
                    })
                }
            }
        }
        Ok(Class::Default)
    }

    /// Parsing plus the rewrites Postfix's trivial-rewrite does before
    /// lookups: null address, `@myorigin`, and `%`/`!` on local domains.
    fn canonicalize(&self, text: &str, smtputf8: bool) -> Result<Addr, AddressError> {
        let mut a = match address::parse(text, smtputf8)? {
            Some(a) => a,
            None => match address::parse(&self.s.empty_address_recipient, true)? {
                Some(a) => a,
                None => return Err(AddressError::EmptyLocalPart),
            },
        };
        for _ in 0..MAX_HACKS {
            // Unqualified addresses are local either way; with
            // append_at_myorigin they also say so in their form.
            if a.domain.is_empty() && self.s.append_at_myorigin {
                a.domain = self.s.myorigin.clone();
            }
            if !self.is_local(&a.domain) {
                return Ok(a);
            }
            // user%remote@local and remote!user@local route onwards, as
            // Postfix does; the result is resolved (and relay-checked) anew.
            if self.s.allow_percent_hack {
                if let Some(i) = a.local.rfind('%') {
                    let domain = address::normalize_domain(&a.local[i + 1..])?;
                    a = Addr {
                        local: a.local[..i].to_string(),
                        domain,
                    };
                    if a.local.is_empty() {
                        return Err(AddressError::EmptyLocalPart);
                    }
                    continue;
                }
            }
            if self.s.swap_bangpath {
                if let Some((site, user)) = a.local.split_once('!') {
                    let domain = address::normalize_domain(site)?;
                    a = Addr {
                        local: user.to_string(),
                        domain,
                    };
                    if a.local.is_empty() {
                        return Err(AddressError::EmptyLocalPart);
                    }
                    continue;
                }
            }
            return Ok(a);
        }
        Err(AddressError::TooManyRewrites)
    }

    fn is_local(&self, domain: &str) -> bool {
        domain.is_empty() || self.s.mydestination.contains(domain)
    }

    /// recipient_canonical_maps then canonical_maps: one lookup each.
    fn canonical(&self, a: Addr, smtputf8: bool) -> Result<Addr, ResolveError> {
        let maps = [
            ("recipient_canonical_maps", &self.s.recipient_canonical_maps),
            ("canonical_maps", &self.s.canonical_maps),
        ];
        self.canonical_with(&maps, a, smtputf8)
    }

    /// One lookup in each of `list`, in order, each on the previous result.
    fn canonical_with(
        &self,
        list: &[(&'static str, &tables::Tables)],
        mut a: Addr,
        smtputf8: bool,
    ) -> Result<Addr, ResolveError> {
        for (param, maps) in list {
            if maps.is_empty() {
                continue;
            }
            if let Some(hit) = self.lookup(param, maps, &a)? {
                let mut out =
                    self.apply(&a, &hit, &hit.value, self.s.propagate_canonical, smtputf8)?;
                if out.domain.is_empty() {
                    out.domain = self.s.myorigin.clone();
                }
                a = out;
            }
        }
        Ok(a)
    }

    /// Recursive virtual alias expansion, depth-first, in table order.
    fn expand(
        &self,
        a: Addr,
        smtputf8: bool,
        chain: &mut Vec<Addr>,
        out: &mut Vec<Addr>,
    ) -> Result<(), ResolveError> {
        if self.s.virtual_alias_maps.is_empty() {
            out.push(a);
            return Ok(());
        }
        if chain.len() >= self.s.recursion_limit {
            return Err(ResolveError::RecursionLimit(chain[0].to_string()));
        }
        let Some(hit) = self.lookup("virtual_alias_maps", &self.s.virtual_alias_maps, &a)? else {
            out.push(a);
            return Ok(());
        };
        let key = a.internal().to_lowercase();
        chain.push(a.clone());
        for item in split_results(&hit.value) {
            let b = self.apply(&a, &hit, item, self.s.propagate_virtual, smtputf8)?;
            let b = if b.domain.is_empty() {
                Addr {
                    domain: self.s.myorigin.clone(),
                    ..b
                }
            } else {
                b
            };
            let bkey = b.internal().to_lowercase();
            if bkey == key {
                // "a -> a, b": the address is kept and not expanded again.
                out.push(b);
            } else if let Some(pos) = chain
                .iter()
                .position(|c| c.internal().to_lowercase() == bkey)
            {
                let mut names: Vec<String> = chain[pos..].iter().map(|c| c.to_string()).collect();
                names.push(b.to_string());
                return Err(ResolveError::AliasLoop(names));
            } else {
                self.expand(b, smtputf8, chain, out)?;
            }
            if out.len() > self.s.expansion_limit {
                return Err(ResolveError::ExpansionLimit(chain[0].to_string()));
            }
        }
        chain.pop();
        Ok(())
    }

    /// Splits a local part at the first delimiter: (user, Some(delimiter+ext)).
    fn split_ext<'a>(&self, local: &'a str) -> (&'a str, Option<&'a str>) {
        if self.s.recipient_delimiter.is_empty() {
            return (local, None);
        }
        match local.find(|c| self.s.recipient_delimiter.contains(c)) {
            Some(i) if i > 0 => (&local[..i], Some(&local[i..])),
            _ => (local, None),
        }
    }

    /// Whether a table that could be read lists `a` (under any of the keys
    /// of [`Router::lookup`]).
    fn lookup_readable(&self, maps: &tables::Tables, a: &Addr) -> bool {
        matches!(self.lookup_with(a, |key| Ok(maps.lookup(key))), Ok(Some(_)))
    }

    /// Postfix's mail_addr_find order: `user+ext@domain`, `user@domain`,
    /// then for local domains `user+ext` and `user`, then `@domain`. A
    /// table of `param` that could not be read fails the lookup that
    /// reaches it (temporary), as Postfix's mail_addr_find.
    fn lookup(
        &self,
        param: &'static str,
        maps: &tables::Tables,
        a: &Addr,
    ) -> Result<Option<Hit>, ResolveError> {
        self.lookup_with(a, |key| {
            maps.find(key)
                .map_err(|error| ResolveError::TableUnavailable {
                    param,
                    error: error.clone(),
                })
        })
    }

    /// [`Router::lookup`]'s keys, in order, through `find`.
    fn lookup_with(
        &self,
        a: &Addr,
        find: impl Fn(&str) -> Result<Option<String>, ResolveError>,
    ) -> Result<Option<Hit>, ResolveError> {
        let (user, ext) = self.split_ext(&a.local);
        let hit = |value: String, stripped: bool, catch_all: bool| Hit {
            value,
            stripped_ext: if stripped {
                ext.map(str::to_string)
            } else {
                None
            },
            catch_all,
        };
        if let Some(v) = find(&a.internal())? {
            return Ok(Some(hit(v, false, false)));
        }
        if ext.is_some() {
            if let Some(v) = find(&format!("{user}@{}", a.domain))? {
                return Ok(Some(hit(v, true, false)));
            }
        }
        if self.is_local(&a.domain) {
            if let Some(v) = find(&a.local)? {
                return Ok(Some(hit(v, false, false)));
            }
            if ext.is_some() {
                if let Some(v) = find(user)? {
                    return Ok(Some(hit(v, true, false)));
                }
            }
        }
        Ok(find(&format!("@{}", a.domain))?.map(|v| hit(v, false, true)))
    }

    /// Turns one table result into an address: `@domain` keeps the local
    /// part of a catch-all match; an extension dropped for the lookup is
    /// added back when propagation is on.
    fn apply(
        &self,
        from: &Addr,
        hit: &Hit,
        result: &str,
        propagate: bool,
        smtputf8: bool,
    ) -> Result<Addr, ResolveError> {
        let bad = || ResolveError::BadTableResult {
            key: from.to_string(),
            result: result.to_string(),
        };
        let mut b = if let Some(domain) = result.strip_prefix('@').filter(|_| hit.catch_all) {
            let domain = address::normalize_domain(domain).map_err(|_| bad())?;
            Addr {
                local: from.local.clone(),
                domain,
            }
        } else {
            address::parse(result, smtputf8)
                .map_err(|_| bad())?
                .ok_or_else(bad)?
        };
        if let (true, Some(ext)) = (propagate, &hit.stripped_ext) {
            if self.split_ext(&b.local).1.is_none() {
                b.local.push_str(ext);
            }
        }
        Ok(b)
    }

    /// Classes an address and picks its transport and next hop.
    fn route(&self, a: &Addr) -> Result<Route, ResolveError> {
        let s = &self.s;
        let class = self.class_of(&a.domain)?;
        let channel = match class {
            Class::Local => &s.local_transport,
            // Aliases were expanded already: no match means no such user.
            Class::Virtual => {
                return Ok(Route {
                    address: a.to_string(),
                    transport: "error".into(),
                    nexthop: "5.1.1 User unknown in virtual alias table".into(),
                    error: Some(mail::Status::new(
                        mail::StatusCode::USER_UNKNOWN,
                        "User unknown in virtual alias table",
                    )),
                    class,
                    unknown: true,
                    by_table: false,
                })
            }
            Class::Relay => &s.relay_transport,
            Class::Default => &s.default_transport,
        };
        let (t0, nh) = split_transport(channel);
        let mut transport = t0.to_string();
        let default_nexthop = match class {
            Class::Local => s.myhostname.clone(),
            _ if !s.relayhost.is_empty() => s.relayhost.clone(),
            _ => a.domain.clone(),
        };
        let mut nexthop = if nh.is_empty() {
            default_nexthop
        } else {
            nh.to_string()
        };
        let mut by_table = false;
        if let Some(v) = self.transport_lookup(a)? {
            by_table = true;
            let (t, n) = split_transport(&v);
            if t == "error" {
                return Ok(Route {
                    address: a.to_string(),
                    transport: t.into(),
                    nexthop: n.into(),
                    error: Some(error_status_at_lookup(n)),
                    class,
                    unknown: false,
                    by_table,
                });
            }
            if !t.is_empty() {
                transport = t.to_string();
                // "transport:" alone means the recipient domain itself.
                nexthop = if class == Class::Local {
                    s.myhostname.clone()
                } else {
                    a.domain.clone()
                };
            }
            if !n.is_empty() {
                nexthop = n.to_string();
            }
        }
        // A table that could not be read might list the user: temporary.
        // Whether the user exists does not depend on the order of the
        // tables: listed in one that could be read is enough.
        let unknown = match s.local_recipient_maps.as_ref() {
            Some(m) if class == Class::Local => match (self.lookup_readable(m, a), m.unavailable())
            {
                (true, _) => false,
                (false, []) => true,
                (false, [e, ..]) => {
                    return Err(ResolveError::TableUnavailable {
                        param: "local_recipient_maps",
                        error: e.clone(),
                    })
                }
            },
            _ => false,
        };
        let error = (transport == "error").then(|| error_status_at_lookup(&nexthop));
        Ok(Route {
            address: a.to_string(),
            transport,
            nexthop,
            error,
            class,
            unknown,
            by_table,
        })
    }

    /// transport(5) order: `user+ext@domain`, `user@domain`, `domain`,
    /// `.parent` for each parent domain, then `*`. A table that could not
    /// be read fails the lookup (trivial-rewrite defers the recipient).
    fn transport_lookup(&self, a: &Addr) -> Result<Option<String>, ResolveError> {
        let maps = &self.s.transport_maps;
        if maps.is_empty() {
            return Ok(None);
        }
        let find = |key: &str| {
            maps.find(key)
                .map_err(|error| ResolveError::TableUnavailable {
                    param: "transport_maps",
                    error: error.clone(),
                })
        };
        let (user, ext) = self.split_ext(&a.local);
        if let Some(v) = find(&a.internal())? {
            return Ok(Some(v));
        }
        if ext.is_some() {
            if let Some(v) = find(&format!("{user}@{}", a.domain))? {
                return Ok(Some(v));
            }
        }
        if let Some(v) = find(&a.domain)? {
            return Ok(Some(v));
        }
        let mut rest = a.domain.as_str();
        while let Some(i) = rest.find('.') {
            if let Some(v) = find(&rest[i..])? {
                return Ok(Some(v));
            }
            rest = &rest[i + 1..];
        }
        find("*")
    }
}

/// [`error_status`] at lookup: only a regexp table's `$n` result can
/// still be bad here (every other value was checked when it was read);
/// its text is then the reason, under 5.0.0, as error(8) would read it.
fn error_status_at_lookup(nexthop: &str) -> mail::Status {
    error_status(nexthop).unwrap_or_else(|_| mail::Status::new(ERROR_DEFAULT, nexthop))
}

/// Splits a virtual alias result list at commas and white space outside quotes.
fn split_results(v: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in v.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            c if !in_quotes && (c == ',' || c.is_whitespace()) => {
                if start < i {
                    out.push(&v[start..i]);
                }
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if start < v.len() {
        out.push(&v[start..]);
    }
    out
}
