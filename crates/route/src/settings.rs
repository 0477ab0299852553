//! What resolution needs from main.cf, and the tables it names, loaded once.
//!
//! This is the only part of the crate that reads files: [`Settings::load`]
//! opens every table at start and on reload, so that [`crate::Router`]
//! answers from memory. Domain lists (`mydestination`, `relay_domains`,
//! `virtual_alias_domains`) take names, `type:name` tables and `/file`
//! names as Postfix's lists do.

use config::Config;
use tables::{MapRef, TableError, Tables};

/// A domain list: literal names plus tables looked up by domain.
#[derive(Debug, Default)]
pub struct DomainList {
    names: Vec<String>,
    tables: Tables,
    /// `example.com` also matches `sub.example.com` (relay_domains).
    subdomains: bool,
}

impl DomainList {
    /// A list of literal names (lower-cased here).
    pub fn names<S: AsRef<str>>(names: &[S], subdomains: bool) -> DomainList {
        DomainList {
            names: names.iter().map(|n| n.as_ref().to_lowercase()).collect(),
            tables: Tables::none(),
            subdomains,
        }
    }

    /// Parses main.cf list items, opening any tables and files they name;
    /// a table whose file cannot be read is left out (see
    /// [`DomainList::find`] and [`DomainList::unavailable`]).
    pub fn load(items: &[String], subdomains: bool) -> Result<DomainList, TableError> {
        let mut names = Vec::new();
        let mut refs = Vec::new();
        for item in items {
            if item.starts_with('/') {
                let text = std::fs::read_to_string(item).map_err(|e| TableError {
                    table: item.clone(),
                    file: item.clone(),
                    line: 0,
                    problem: tables::TableProblem::Io(e.to_string()),
                })?;
                names.extend(
                    text.lines()
                        .map(|l| l.split('#').next().unwrap_or("").trim())
                        .filter(|l| !l.is_empty())
                        .map(str::to_lowercase),
                );
            } else if !item.starts_with('[') && item.contains(':') {
                refs.push(tables::parse_ref(item)?);
            } else {
                names.push(item.to_lowercase());
            }
        }
        Ok(DomainList {
            names,
            tables: Tables::open_tolerant(&refs, &|_| Ok(()))?,
            subdomains,
        })
    }

    /// Whether `domain` (lower case) is in the list.
    pub fn contains(&self, domain: &str) -> bool {
        if domain.is_empty() {
            return false;
        }
        if self.matches_exact(domain) {
            return true;
        }
        // `.example.com` always means subdomains; a bare `example.com` does
        // only where Postfix's parent_domain_matches_subdomains says so.
        let mut rest = domain;
        while let Some(i) = rest.find('.') {
            let parent = &rest[i + 1..];
            let dotted = &rest[i..];
            if self.matches_exact(dotted) || (self.subdomains && self.matches_exact(parent)) {
                return true;
            }
            rest = parent;
        }
        false
    }

    /// Whether `domain` is in the list, or the error of a table that could
    /// not be read when no readable part of the list names it (it might).
    pub fn find(&self, domain: &str) -> Result<bool, &TableError> {
        match (self.contains(domain), self.tables.unavailable()) {
            (true, _) => Ok(true),
            (false, []) => Ok(false),
            (false, [e, ..]) => Err(e),
        }
    }

    /// The tables of the list that could not be read.
    pub fn unavailable(&self) -> &[TableError] {
        self.tables.unavailable()
    }

    fn matches_exact(&self, key: &str) -> bool {
        self.names.iter().any(|n| n == key) || self.tables.lookup(key).is_some()
    }

    /// Whether the list names nothing.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.tables.is_empty()
    }
}

/// The routing parameters and tables.
#[derive(Debug, Default)]
pub struct Settings {
    /// `myhostname`.
    pub myhostname: String,
    /// `myorigin`, appended to addresses without a domain.
    pub myorigin: String,
    /// `mydestination`.
    pub mydestination: DomainList,
    /// `relay_domains`.
    pub relay_domains: DomainList,
    /// `virtual_alias_domains`.
    pub virtual_alias_domains: DomainList,
    /// `relayhost`.
    pub relayhost: String,
    /// `local_transport`.
    pub local_transport: String,
    /// `relay_transport`.
    pub relay_transport: String,
    /// `default_transport`.
    pub default_transport: String,
    /// `recipient_delimiter`: each character is a delimiter.
    pub recipient_delimiter: String,
    /// `propagate_unmatched_extensions` names canonical.
    pub propagate_canonical: bool,
    /// `propagate_unmatched_extensions` names virtual.
    pub propagate_virtual: bool,
    /// `swap_bangpath`.
    pub swap_bangpath: bool,
    /// `allow_percent_hack`.
    pub allow_percent_hack: bool,
    /// `append_at_myorigin`.
    pub append_at_myorigin: bool,
    /// `empty_address_recipient`.
    pub empty_address_recipient: String,
    /// `virtual_alias_recursion_limit`.
    pub recursion_limit: usize,
    /// `virtual_alias_expansion_limit`.
    pub expansion_limit: usize,
    /// `canonical_maps`.
    pub canonical_maps: Tables,
    /// `recipient_canonical_maps`.
    pub recipient_canonical_maps: Tables,
    /// `sender_canonical_maps`.
    pub sender_canonical_maps: Tables,
    /// `virtual_alias_maps`.
    pub virtual_alias_maps: Tables,
    /// `transport_maps`.
    pub transport_maps: Tables,
    /// `local_recipient_maps`; `None` when empty (every local user exists).
    pub local_recipient_maps: Option<Tables>,
}

/// Why the routing configuration could not be loaded.
#[derive(Debug)]
#[non_exhaustive]
pub enum SettingsError {
    /// A table failed to open or compile.
    Table {
        /// The parameter naming it.
        param: &'static str,
        /// What went wrong.
        error: TableError,
    },
    /// A `*_transport` parameter's `error:` next hop is no status.
    Transport {
        /// The parameter.
        param: &'static str,
        /// Where it is set: `file, line N: `, or empty for a default.
        at: String,
        /// What is wrong.
        error: String,
    },
}

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SettingsError::Table { param, error } => write!(f, "{param}: {error}"),
            SettingsError::Transport { param, at, error } => write!(f, "{at}{param}: {error}"),
        }
    }
}

impl std::error::Error for SettingsError {}

impl Settings {
    /// Settings for tests and tools: Postfix defaults for host `myhostname`,
    /// no tables, mydestination = the host name and `localhost`.
    pub fn minimal(myhostname: &str) -> Settings {
        Settings {
            myhostname: myhostname.to_string(),
            myorigin: myhostname.to_string(),
            mydestination: DomainList::names(&[myhostname, "localhost"], false),
            local_transport: format!("local:{myhostname}"),
            relay_transport: "relay".into(),
            default_transport: "smtp".into(),
            propagate_canonical: true,
            propagate_virtual: true,
            swap_bangpath: true,
            allow_percent_hack: true,
            append_at_myorigin: true,
            empty_address_recipient: "MAILER-DAEMON".into(),
            recursion_limit: 1000,
            expansion_limit: 1000,
            ..Settings::default()
        }
    }

    /// Reads the parameters and opens every table they name.
    pub fn load(cfg: &Config) -> Result<(Settings, Vec<String>), SettingsError> {
        let mut warnings = Vec::new();
        let at = |param: &str| {
            cfg.origin(param)
                .map(|(file, line)| format!("{}, line {line}: ", file.display()))
                .unwrap_or_default()
        };
        // A table file that is missing or unreadable must not stop routing
        // for every domain: as Postfix's surrogate tables, it is a warning,
        // and the lookups that reach it fail temporarily (the mail waits)
        // until it can be read and the router reloads. A bad line is still
        // fatal: that file is there and wrong.
        let mut checked = |param: &'static str, check: tables::Check<'_>| {
            let refs: Vec<MapRef> = cfg.maps(param);
            let t = Tables::open_tolerant(&refs, check)
                .map_err(|error| SettingsError::Table { param, error })?;
            let at = at(param);
            for e in t.unavailable() {
                let who = match param {
                    "local_recipient_maps" => "local recipients are",
                    "sender_canonical_maps" => "mail from the senders it maps is",
                    _ => "mail whose lookup reaches it is",
                };
                warnings.push(format!(
                    "{at}{param}: {e}: {who} deferred until it can be read and sluice reload"
                ));
            }
            for table in t.tables() {
                warnings.extend(table.warnings().iter().map(|w| format!("{param}: {w}")));
            }
            Ok(t)
        };
        let transport_maps = checked("transport_maps", &crate::transport::check_transport)?;
        let mut maps = |param: &'static str| checked(param, &|_| Ok(()));
        let transport = |param: &'static str| {
            let v = cfg.str(param);
            crate::transport::check_transport(&v).map_err(|error| SettingsError::Transport {
                param,
                at: at(param),
                error,
            })?;
            Ok(v)
        };
        let propagate = cfg.list("propagate_unmatched_extensions");
        let canonical_maps = maps("canonical_maps")?;
        let recipient_canonical_maps = maps("recipient_canonical_maps")?;
        let sender_canonical_maps = maps("sender_canonical_maps")?;
        let virtual_alias_maps = maps("virtual_alias_maps")?;
        let local = maps("local_recipient_maps")?;
        let mut list = |param: &'static str, sub: bool| {
            let l = DomainList::load(&cfg.list(param), sub)
                .map_err(|error| SettingsError::Table { param, error })?;
            // virtual_alias_domains names $virtual_alias_maps by default:
            // that table was warned about already.
            let told = |e: &TableError| {
                virtual_alias_maps
                    .unavailable()
                    .iter()
                    .any(|v| v.table == e.table)
            };
            for e in l.unavailable().iter().filter(|e| !told(e)) {
                warnings.push(format!(
                    "{}{param}: {e}: mail whose domain is not listed elsewhere is deferred until it can be read and sluice reload",
                    at(param)
                ));
            }
            Ok(l)
        };
        let local_recipient_maps = (!local.is_empty()).then_some(local);
        let s = Settings {
            myhostname: cfg.str("myhostname").to_lowercase(),
            myorigin: cfg.str("myorigin").to_lowercase(),
            mydestination: list("mydestination", false)?,
            relay_domains: list("relay_domains", true)?,
            virtual_alias_domains: list("virtual_alias_domains", false)?,
            relayhost: cfg.str("relayhost"),
            local_transport: transport("local_transport")?,
            relay_transport: transport("relay_transport")?,
            default_transport: transport("default_transport")?,
            recipient_delimiter: cfg.str("recipient_delimiter"),
            propagate_canonical: propagate.iter().any(|p| p == "canonical"),
            propagate_virtual: propagate.iter().any(|p| p == "virtual"),
            swap_bangpath: cfg.bool("swap_bangpath"),
            allow_percent_hack: cfg.bool("allow_percent_hack"),
            append_at_myorigin: cfg.bool("append_at_myorigin"),
            empty_address_recipient: cfg.str("empty_address_recipient"),
            recursion_limit: cfg.int("virtual_alias_recursion_limit").max(1) as usize,
            expansion_limit: cfg.int("virtual_alias_expansion_limit").max(1) as usize,
            canonical_maps,
            recipient_canonical_maps,
            sender_canonical_maps,
            virtual_alias_maps,
            transport_maps,
            local_recipient_maps,
        };
        Ok((s, warnings))
    }
}
