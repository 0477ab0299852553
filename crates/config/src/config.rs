//! The loaded configuration: main.cf settings, `-o` overrides and typed getters.
//!
//! Loading reads main.cf, keeps the last definition of each name (Postfix's
//! rule), warns about unknown names and then validates every parameter of the
//! table, and every set per-transport override, by expanding and parsing it.
//! After that the typed getters cannot fail on a value; they panic only when
//! asked for a name that is not in the table or with the wrong type, which is
//! a programmer error. Lookup order: `-o` override, main.cf, table default.
//! Values are expanded on every call (cheap; callers that care cache them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{ConfigError, Diagnostic, SyntaxProblem, ValueProblem};
use crate::expand::{self, Expander, Source};
use crate::maincf::{self, Scanned};
use crate::mastercf::ServiceDef;
use crate::table::{self, DefaultValue, ParamSpec};
use crate::value::{self, Cidr, Feedback, MapRef, NetEntry, ParamType};

/// Where a set value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Setting {
    pub value: String,
    pub file: PathBuf,
    pub line: usize,
}

/// The configuration: immutable after load except for `-o` overrides.
#[derive(Clone, Debug)]
pub struct Config {
    hostname: String,
    settings: BTreeMap<String, Setting>,
    overrides: BTreeMap<String, Setting>,
}

/// A loaded configuration and the warnings found while loading it.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// Non-fatal problems, in line order.
    pub warnings: Vec<Diagnostic>,
}

/// The system host name, read from the kernel; `localhost` if unavailable.
pub fn system_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace) && !s.contains('$'))
        .unwrap_or_else(|| "localhost".to_string())
}

/// The pseudo-file named in errors about `-o` overrides without a location.
const OVERRIDE_ORIGIN: &str = "-o";
/// The pseudo-file named in errors about table defaults.
const DEFAULT_ORIGIN: &str = "(default)";

fn spec_or_panic(name: &str) -> &'static ParamSpec {
    match table::spec(name) {
        Some(s) => s,
        None => panic!("config: parameter \"{name}\" is not in the parameter table"),
    }
}

impl Config {
    /// Every parameter at its default; the host name is read once here.
    pub fn defaults() -> Config {
        Config::with_hostname(&system_hostname())
    }

    /// Every parameter at its default, with a given system host name (for
    /// tests and for callers that already know it).
    pub fn with_hostname(hostname: &str) -> Config {
        Config {
            hostname: hostname.to_string(),
            settings: BTreeMap::new(),
            overrides: BTreeMap::new(),
        }
    }

    /// The system host name this configuration was built with.
    pub fn hostname(&self) -> &str {
        &self.hostname
    }

    /// Reads `config_dir/main.cf` and sets `config_directory` to `config_dir`.
    /// `service_names` are the master.cf services, which make
    /// `<service>_<param>` overrides known names.
    pub fn load(config_dir: &Path, service_names: &[String]) -> Result<Loaded, ConfigError> {
        Config::load_inner(config_dir, service_names, &[], false)
    }

    /// Like `load`, taking the service names from master.cf entries and
    /// treating names their `-o` values refer to (`$mua_client_restrictions`)
    /// as used, as Postfix does, so they draw no warning.
    pub fn load_with_master(
        config_dir: &Path,
        services: &[ServiceDef],
    ) -> Result<Loaded, ConfigError> {
        Config::load_with_master_inner(config_dir, services, false)
    }

    /// For `sluice check`, after [`Config::check_file`] has reported every
    /// problem of main.cf: [`Config::load_with_master`] with the lines in
    /// error left out and the settings whose values are bad dropped (their
    /// defaults in their place), so that the checks which need a loaded
    /// configuration (restriction lists, tables, services) still run and
    /// one mistake does not hide the others. Only an unreadable file fails.
    pub fn load_for_check(
        config_dir: &Path,
        services: &[ServiceDef],
    ) -> Result<Loaded, ConfigError> {
        Config::load_with_master_inner(config_dir, services, true)
    }

    fn load_with_master_inner(
        config_dir: &Path,
        services: &[ServiceDef],
        lenient: bool,
    ) -> Result<Loaded, ConfigError> {
        let names: Vec<String> = services.iter().map(|s| s.name.clone()).collect();
        let refs: Vec<String> = services
            .iter()
            .flat_map(|s| s.overrides.iter())
            .flat_map(|(_, v)| expand::references(v))
            .collect();
        let mut loaded = Config::load_inner(config_dir, &names, &refs, lenient)?;
        let master_cf = config_dir.join("master.cf");
        // Once per parameter: main.cf's warning covers the -o ones too.
        let mut warned: BTreeSet<String> = loaded
            .config
            .settings
            .iter()
            .filter(|(name, s)| is_unimplemented(name, &s.value))
            .map(|(name, _)| name.clone())
            .collect();
        for s in services {
            for (name, value) in &s.overrides {
                if is_unimplemented(name, value) && warned.insert(name.clone()) {
                    loaded
                        .warnings
                        .push(not_implemented(&master_cf, s.line, name));
                }
            }
        }
        Ok(loaded)
    }

    fn load_inner(
        config_dir: &Path,
        service_names: &[String],
        extra_refs: &[String],
        lenient: bool,
    ) -> Result<Loaded, ConfigError> {
        let path = config_dir.join("main.cf");
        let bytes = std::fs::read(&path).map_err(|e| ConfigError::io(&path, e))?;
        if let Some(line) = maincf::first_bad_utf8_line(&bytes).filter(|_| !lenient) {
            return Err(ConfigError::Syntax {
                file: path,
                line,
                problem: SyntaxProblem::NotUtf8,
            });
        }
        let text = String::from_utf8_lossy(&bytes);
        let mut loaded =
            Config::defaults().parse_inner(&text, &path, service_names, extra_refs, lenient)?;
        loaded.config.overrides.insert(
            "config_directory".to_string(),
            Setting {
                value: config_dir.display().to_string().replace('$', "$$"),
                file: path,
                line: 0,
            },
        );
        Ok(loaded)
    }

    /// Parses main.cf text; `origin` names the file in messages.
    pub fn parse(
        text: &str,
        origin: &Path,
        service_names: &[String],
    ) -> Result<Loaded, ConfigError> {
        Config::defaults().with_text(text, origin, service_names)
    }

    /// Like `parse`, on top of this configuration's host name.
    pub fn with_text(
        self,
        text: &str,
        origin: &Path,
        service_names: &[String],
    ) -> Result<Loaded, ConfigError> {
        self.parse_inner(text, origin, service_names, &[], false)
    }

    fn parse_inner(
        mut self,
        text: &str,
        origin: &Path,
        service_names: &[String],
        extra_refs: &[String],
        lenient: bool,
    ) -> Result<Loaded, ConfigError> {
        let (errors, mut warnings) = self.read_text(text, origin, lenient);
        if let Some(e) = errors.into_iter().next().filter(|_| !lenient) {
            return Err(e);
        }
        warnings.extend(self.unknown_warnings(service_names, extra_refs));
        warnings.extend(self.unimplemented_warnings());
        if lenient {
            self.drop_bad_values();
        } else if let Some(e) = self.check(false).into_iter().next() {
            return Err(e);
        }
        Ok(Loaded {
            config: self,
            warnings,
        })
    }

    /// Every problem in main.cf text, for `sluice check`: all syntax errors
    /// and all bad values rather than only the first, then the warnings.
    /// Lines with syntax errors are left out and values are checked one by
    /// one, so one mistake does not hide the next.
    pub fn check_text(
        text: &str,
        origin: &Path,
        service_names: &[String],
    ) -> (Vec<ConfigError>, Vec<Diagnostic>) {
        let mut config = Config::defaults();
        let (mut errors, mut warnings) = config.read_text(text, origin, true);
        warnings.extend(config.unknown_warnings(service_names, &[]));
        errors.extend(config.check(true));
        (errors, warnings)
    }

    /// `check_text` on a file; unreadable or non-UTF-8 files are one error.
    pub fn check_file(
        path: &Path,
        service_names: &[String],
    ) -> (Vec<ConfigError>, Vec<Diagnostic>) {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => return (vec![ConfigError::io(path, e)], Vec::new()),
        };
        if let Some(line) = maincf::first_bad_utf8_line(&bytes) {
            let e = ConfigError::Syntax {
                file: path.to_path_buf(),
                line,
                problem: SyntaxProblem::NotUtf8,
            };
            return (vec![e], Vec::new());
        }
        Config::check_text(&String::from_utf8_lossy(&bytes), path, service_names)
    }

    /// Reads definitions into the settings; returns the syntax errors (only
    /// the first unless `all`) and the orphan-line warnings.
    fn read_text(
        &mut self,
        text: &str,
        origin: &Path,
        all: bool,
    ) -> (Vec<ConfigError>, Vec<Diagnostic>) {
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        // Editors on some systems start files with a byte order mark.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for item in maincf::scan(text) {
            let logical = match item {
                Scanned::Orphan(line) => {
                    warnings.push(Diagnostic {
                        file: origin.to_path_buf(),
                        line,
                        param: String::new(),
                        message: "logical line must not start with white space; line ignored"
                            .to_string(),
                    });
                    continue;
                }
                Scanned::Line(l) => l,
            };
            match maincf::definition(&logical.text) {
                Ok(def) => {
                    self.settings.insert(
                        def.name,
                        Setting {
                            value: def.value,
                            file: origin.to_path_buf(),
                            line: logical.line,
                        },
                    );
                }
                Err(problem) => {
                    errors.push(ConfigError::Syntax {
                        file: origin.to_path_buf(),
                        line: logical.line,
                        problem,
                    });
                    if !all {
                        break;
                    }
                }
            }
        }
        (errors, warnings)
    }

    /// Warnings for main.cf settings, other than to their default, of
    /// parameters Sluice does not implement: a postmaster who set
    /// `header_checks` must not believe mail is checked.
    fn unimplemented_warnings(&self) -> Vec<Diagnostic> {
        let mut out: Vec<Diagnostic> = self
            .settings
            .iter()
            .filter(|(name, s)| is_unimplemented(name, &s.value))
            .map(|(name, s)| not_implemented(&s.file, s.line, name))
            .collect();
        out.sort_by_key(|d| d.line);
        out
    }

    /// Warnings for set names that are neither in the table, nor overrides for
    /// a known service, nor referenced by another value.
    fn unknown_warnings(&self, service_names: &[String], extra: &[String]) -> Vec<Diagnostic> {
        let mut referenced: BTreeSet<String> = extra.iter().cloned().collect();
        // Restriction classes are user-defined parameters by design.
        if let Ok(v) = self.expanded("smtpd_restriction_classes") {
            referenced.extend(value::split_list(&v).unwrap_or_default());
        }
        for s in self.settings.values().chain(self.overrides.values()) {
            referenced.extend(expand::references(&s.value));
        }
        for spec in table::params() {
            if let DefaultValue::Text(d) = spec.default {
                referenced.extend(expand::references(d));
            }
        }
        let mut out: Vec<Diagnostic> = self
            .settings
            .iter()
            .filter(|(name, _)| table::spec(name).is_none() && !referenced.contains(*name))
            .filter_map(|(name, s)| {
                let message = match table::split_transport_param(name) {
                    Some((tr, _)) if service_names.iter().any(|n| n == tr) => return None,
                    Some((tr, _)) => format!(
                        "unknown parameter (no service \"{}\" in master.cf)",
                        crate::error::escape(tr)
                    ),
                    None => "unknown parameter".to_string(),
                };
                Some(Diagnostic {
                    file: s.file.clone(),
                    line: s.line,
                    param: name.clone(),
                    message,
                })
            })
            .collect();
        out.sort_by_key(|d| d.line);
        out
    }

    /// Expands and type-checks every value that a getter may later return;
    /// stops at the first error unless `all`.
    /// Drops the settings whose values are bad until the rest check out
    /// (a value can be bad only through another it refers to: a few
    /// rounds at most).
    fn drop_bad_values(&mut self) {
        for _ in 0..8 {
            let mut dropped = false;
            for e in self.check(true) {
                if let ConfigError::BadValue { param, .. } | ConfigError::Expand { param, .. } = e {
                    dropped |= self.settings.remove(&param).is_some();
                    dropped |= self.overrides.remove(&param).is_some();
                }
            }
            if !dropped {
                return;
            }
        }
    }

    fn check(&self, all: bool) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        let mut set: Vec<(&String, &Setting)> =
            self.overrides.iter().chain(self.settings.iter()).collect();
        // Report the earliest line first, as a reader goes through the file.
        set.sort_by_key(|(_, s)| (s.line == 0, s.line));
        for (name, s) in set {
            let ty = table::spec(name)
                .or_else(|| table::split_transport_param(name).map(|(_, spec)| spec))
                .map(|spec| spec.ty);
            if let Err(e) = self.check_one(name, ty, &s.file, s.line) {
                errors.push(e);
                if !all {
                    return errors;
                }
            }
        }
        // Defaults can still fail through what they refer to.
        for spec in table::params().filter(|s| self.setting(s.name).is_none()) {
            if let Err(e) = self.check_one(spec.name, Some(spec.ty), Path::new(DEFAULT_ORIGIN), 0) {
                errors.push(e);
                if !all {
                    return errors;
                }
            }
        }
        errors
    }

    fn check_one(
        &self,
        name: &str,
        ty: Option<ParamType>,
        file: &Path,
        line: usize,
    ) -> Result<(), ConfigError> {
        let value = self.expanded(name).map_err(|problem| ConfigError::Expand {
            file: file.to_path_buf(),
            line,
            param: name.to_string(),
            problem,
        })?;
        if let Some(ty) = ty {
            ty.check(&value).map_err(|problem| ConfigError::BadValue {
                file: file.to_path_buf(),
                line,
                param: name.to_string(),
                value,
                problem,
            })?;
        }
        Ok(())
    }

    /// Sets a master.cf `-o name=value` override, validated; on error the
    /// configuration is unchanged.
    pub fn set_override(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        self.set_override_at(name, value, Path::new(OVERRIDE_ORIGIN), 0)
    }

    /// Like `set_override`, naming the file and line the override came from.
    pub fn set_override_at(
        &mut self,
        name: &str,
        value: &str,
        file: &Path,
        line: usize,
    ) -> Result<(), ConfigError> {
        if !maincf::is_valid_name(name) {
            return Err(ConfigError::Syntax {
                file: file.to_path_buf(),
                line,
                problem: SyntaxProblem::BadName(name.to_string()),
            });
        }
        if value.contains('\0') {
            return Err(ConfigError::Syntax {
                file: file.to_path_buf(),
                line,
                problem: SyntaxProblem::Nul,
            });
        }
        let new = Setting {
            value: value.trim().to_string(),
            file: file.to_path_buf(),
            line,
        };
        let old = self.overrides.insert(name.to_string(), new);
        if let Some(e) = self.check(false).into_iter().next() {
            match old {
                Some(o) => self.overrides.insert(name.to_string(), o),
                None => self.overrides.remove(name),
            };
            return Err(e);
        }
        Ok(())
    }

    /// The file and line that set `name` (an override before main.cf);
    /// `None` when it has its default value.
    pub fn origin(&self, name: &str) -> Option<(&Path, usize)> {
        self.setting(name).map(|s| (s.file.as_path(), s.line))
    }

    pub(crate) fn setting(&self, name: &str) -> Option<&Setting> {
        self.overrides.get(name).or_else(|| self.settings.get(name))
    }

    /// main.cf definitions (not overrides), by name.
    pub(crate) fn main_cf_settings(&self) -> impl Iterator<Item = (&String, &Setting)> {
        self.settings.iter()
    }

    /// Names set in main.cf or by overrides.
    pub(crate) fn set_names(&self) -> BTreeSet<&String> {
        self.settings.keys().chain(self.overrides.keys()).collect()
    }

    fn source(&self, name: &str) -> Option<Source<'_>> {
        let spec = table::spec(name);
        let expand = !matches!(spec, Some(s) if !s.expand);
        if let Some(s) = self.setting(name) {
            return Some(if expand {
                Source::Text(&s.value)
            } else {
                Source::Literal(&s.value)
            });
        }
        Some(match spec?.default {
            DefaultValue::Text(t) if expand => Source::Text(t),
            DefaultValue::Text(t) => Source::Literal(t),
            DefaultValue::Hostname => Source::Hostname(&self.hostname),
            DefaultValue::Domain => Source::Domain,
            DefaultValue::Version => Source::Literal(env!("CARGO_PKG_VERSION")),
        })
    }

    /// The expanded value of any name, set or in the table.
    pub(crate) fn expanded(&self, name: &str) -> Result<String, crate::error::ExpandProblem> {
        let lookup = |n: &str| self.source(n);
        Expander::new(&lookup).param(name)
    }

    /// Expands arbitrary text against this configuration, e.g. a master.cf
    /// argument; the text may refer to any parameter.
    pub fn expand_text(&self, text: &str) -> Result<String, crate::error::ExpandProblem> {
        let lookup = |n: &str| self.source(n);
        Expander::new(&lookup).text(text)
    }

    /// The expanded value of table parameter `name`.
    ///
    /// # Panics
    /// If `name` is not in the parameter table (a programmer error).
    pub fn str(&self, name: &str) -> String {
        spec_or_panic(name);
        self.expanded(name).unwrap_or_default()
    }

    /// An integer parameter. Panics if `name` is not an Int (or Size) in the table.
    pub fn int(&self, name: &str) -> i64 {
        self.transport("").int(name)
    }

    /// A yes/no parameter. Panics if `name` is not a Bool in the table.
    pub fn bool(&self, name: &str) -> bool {
        self.transport("").bool(name)
    }

    /// A time parameter. Panics if `name` is not a Time in the table.
    pub fn time(&self, name: &str) -> Duration {
        self.transport("").time(name)
    }

    /// A size parameter (Size or non-negative Int). Panics on other types.
    pub fn size(&self, name: &str) -> u64 {
        self.transport("").size(name)
    }

    /// Any parameter split as a list. Panics if `name` is not in the table.
    pub fn list(&self, name: &str) -> Vec<String> {
        self.transport("").list(name)
    }

    /// A list of integers. Panics if `name` is not an IntList.
    pub fn ints(&self, name: &str) -> Vec<i64> {
        self.transport("").ints(name)
    }

    /// The networks of a CIDR list (table entries left out: see `cidr_maps`).
    /// Panics if `name` is not a CidrList.
    pub fn cidrs(&self, name: &str) -> Vec<Cidr> {
        self.transport("").cidrs(name)
    }

    /// The `type:table` entries of a CIDR list. Panics if not a CidrList.
    pub fn cidr_maps(&self, name: &str) -> Vec<MapRef> {
        self.transport("").cidr_maps(name)
    }

    /// A list of table references. Panics if `name` is not a MapRef.
    pub fn maps(&self, name: &str) -> Vec<MapRef> {
        self.transport("").maps(name)
    }

    /// An enum parameter, spelled as in the table. Panics if not an Enum.
    pub fn choice(&self, name: &str) -> &'static str {
        self.transport("").choice(name)
    }

    /// A feedback parameter. Panics if `name` is not a Feedback.
    pub fn feedback(&self, name: &str) -> Feedback {
        self.transport("").feedback(name)
    }

    /// A listening address; `None` when empty. Panics if not a Listen.
    pub fn listen(&self, name: &str) -> Option<std::net::SocketAddr> {
        self.transport("").listen(name)
    }

    /// Getters that look up `<transport>_<name>` first for per-transport
    /// parameters. An empty transport name means the global values.
    pub fn transport<'a>(&'a self, transport: &'a str) -> TransportView<'a> {
        TransportView {
            config: self,
            transport,
        }
    }

    /// Whether `name` is neither set in main.cf nor overridden.
    pub fn is_default(&self, name: &str) -> bool {
        self.setting(name).is_none()
    }

    /// The unexpanded value as set (override first), `None` if not set.
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.setting(name).map(|s| s.value.as_str())
    }

    /// The parameter table.
    pub fn params() -> impl Iterator<Item = &'static ParamSpec> {
        table::params()
    }
}

/// Per-transport view of a configuration: `<transport>_<name>` overrides the
/// global value of per-transport parameters (with `default_` dropped).
#[derive(Clone, Copy, Debug)]
pub struct TransportView<'a> {
    config: &'a Config,
    transport: &'a str,
}

impl TransportView<'_> {
    /// The transport this view is for.
    pub fn name(&self) -> &str {
        self.transport
    }

    /// Which name to read for `spec`: the transport's override if it is set
    /// or has a default of its own in the table, else the global name.
    fn effective_name(&self, spec: &ParamSpec) -> String {
        if spec.per_transport && !self.transport.is_empty() {
            let tname = spec.transport_name(self.transport);
            if self.config.setting(&tname).is_some() || table::spec(&tname).is_some() {
                return tname;
            }
        }
        spec.name.to_string()
    }

    fn typed<T: Default>(
        &self,
        name: &str,
        want: &str,
        accept: impl Fn(&ParamType) -> bool,
        parse: impl Fn(&ParamType, &str) -> Result<T, ValueProblem>,
    ) -> T {
        let spec = spec_or_panic(name);
        if !accept(&spec.ty) {
            panic!("config: parameter \"{name}\" is {:?}, not {want}", spec.ty);
        }
        let effective = self.effective_name(spec);
        // Validation at load makes the first branch the only one taken; the
        // fallbacks keep a getter from ever panicking on a value.
        self.config
            .expanded(&effective)
            .ok()
            .and_then(|v| parse(&spec.ty, &v).ok())
            .or_else(|| match spec.default {
                DefaultValue::Text(d) => parse(&spec.ty, d).ok(),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The expanded value of `name`. Panics if not in the table.
    pub fn str(&self, name: &str) -> String {
        let spec = spec_or_panic(name);
        self.config
            .expanded(&self.effective_name(spec))
            .unwrap_or_default()
    }

    /// An integer parameter (Int, or Size saturated to `i64::MAX`).
    pub fn int(&self, name: &str) -> i64 {
        self.typed(
            name,
            "Int",
            |t| matches!(t, ParamType::Int | ParamType::Size),
            |t, v| match t {
                ParamType::Size => {
                    value::parse_size(v).map(|n| i64::try_from(n).unwrap_or(i64::MAX))
                }
                _ => value::parse_int(v),
            },
        )
    }

    /// A yes/no parameter.
    pub fn bool(&self, name: &str) -> bool {
        self.typed(
            name,
            "Bool",
            |t| *t == ParamType::Bool,
            |_, v| value::parse_bool(v),
        )
    }

    /// A time parameter.
    pub fn time(&self, name: &str) -> Duration {
        self.typed(
            name,
            "Time",
            |t| matches!(t, ParamType::Time(_)),
            |t, v| match t {
                ParamType::Time(u) => value::parse_time(v, *u),
                _ => Err(ValueProblem::Time),
            },
        )
    }

    /// A size parameter (Size, or an Int that is not negative).
    pub fn size(&self, name: &str) -> u64 {
        self.typed(
            name,
            "Size",
            |t| matches!(t, ParamType::Size | ParamType::Int),
            |t, v| match t {
                ParamType::Size => value::parse_size(v),
                _ => value::parse_int(v)
                    .and_then(|n| u64::try_from(n).map_err(|_| ValueProblem::Size)),
            },
        )
    }

    /// Any parameter split as a list.
    pub fn list(&self, name: &str) -> Vec<String> {
        self.typed(name, "any", |_| true, |_, v| value::split_list(v))
    }

    /// A list of integers.
    pub fn ints(&self, name: &str) -> Vec<i64> {
        self.typed(
            name,
            "IntList",
            |t| *t == ParamType::IntList,
            |_, v| value::parse_int_list(v),
        )
    }

    fn nets(&self, name: &str) -> Vec<NetEntry> {
        self.typed(
            name,
            "CidrList",
            |t| *t == ParamType::CidrList,
            |_, v| value::parse_net_list(v),
        )
    }

    /// The networks of a CIDR list.
    pub fn cidrs(&self, name: &str) -> Vec<Cidr> {
        self.nets(name)
            .into_iter()
            .filter_map(|e| match e {
                NetEntry::Net(c) => Some(c),
                NetEntry::Table(_) => None,
            })
            .collect()
    }

    /// The `type:table` entries of a CIDR list.
    pub fn cidr_maps(&self, name: &str) -> Vec<MapRef> {
        self.nets(name)
            .into_iter()
            .filter_map(|e| match e {
                NetEntry::Table(m) => Some(m),
                NetEntry::Net(_) => None,
            })
            .collect()
    }

    /// A list of table references.
    pub fn maps(&self, name: &str) -> Vec<MapRef> {
        self.typed(
            name,
            "MapRef",
            |t| *t == ParamType::MapRef,
            |_, v| value::parse_maps(v),
        )
    }

    /// An enum parameter, spelled as in the table.
    pub fn choice(&self, name: &str) -> &'static str {
        let spec = spec_or_panic(name);
        let ParamType::Enum(choices) = spec.ty else {
            panic!("config: parameter \"{name}\" is {:?}, not Enum", spec.ty);
        };
        self.config
            .expanded(&self.effective_name(spec))
            .ok()
            .and_then(|v| value::parse_enum(&v, choices).ok())
            .or_else(|| choices.first().copied())
            .unwrap_or("")
    }

    /// A listening address parameter; `None` when empty (off).
    pub fn listen(&self, name: &str) -> Option<std::net::SocketAddr> {
        self.typed(
            name,
            "Listen",
            |t| *t == ParamType::Listen,
            |_, v| value::parse_listen(v),
        )
    }

    /// A list of addresses to connect to; empty when none.
    pub fn addrs(&self, name: &str) -> Vec<std::net::SocketAddr> {
        self.typed(
            name,
            "AddrList",
            |t| *t == ParamType::AddrList,
            |_, v| value::parse_addr_list(v),
        )
    }

    /// A feedback parameter.
    pub fn feedback(&self, name: &str) -> Feedback {
        let spec = spec_or_panic(name);
        if spec.ty != ParamType::Feedback {
            panic!(
                "config: parameter \"{name}\" is {:?}, not Feedback",
                spec.ty
            );
        }
        self.config
            .expanded(&self.effective_name(spec))
            .ok()
            .and_then(|v| value::parse_feedback(&v).ok())
            .unwrap_or(Feedback::InverseConcurrency)
    }
}

/// The end of the warning for a parameter Sluice does not implement.
const NOT_IMPLEMENTED: &str = "is not implemented by Sluice and has no effect";

/// Whether setting `name` to `value` asks for something Sluice does not do:
/// the parameter (or the one it overrides per transport) is marked so in the
/// table, and the value is not its default.
fn is_unimplemented(name: &str, value: &str) -> bool {
    let Some(spec) =
        table::spec(name).or_else(|| table::split_transport_param(name).map(|(_, s)| s))
    else {
        return false;
    };
    let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    match spec.default {
        _ if spec.implemented => false,
        DefaultValue::Text(d) => words(d) != words(value),
        _ => true,
    }
}

/// The warning for `name`, set at `file`, `line`.
fn not_implemented(file: &Path, line: usize, name: &str) -> Diagnostic {
    Diagnostic {
        file: file.to_path_buf(),
        line,
        param: String::new(),
        message: format!("parameter {name} {NOT_IMPLEMENTED}"),
    }
}
