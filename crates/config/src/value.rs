//! Typed parameter values: the parameter types and the parsers for each.
//!
//! A parameter's text is expanded first (see `expand`) and then parsed by its
//! type here. The loader runs every parser once at load time, so the typed
//! getters of `Config` cannot fail afterwards. Lists are split on commas and
//! white space, except inside `{ ... }`, so that `inline:{ a = b, c = d }`
//! stays one item (Postfix's `mystrtokq`). Limits: sizes take binary `k`, `m`,
//! `g` suffixes (1024-based), a Sluice extension; times take one number and
//! one unit letter, as Postfix does. Nothing here panics.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use crate::error::ValueProblem;

/// The unit a time value has when written without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    /// Seconds (`s`).
    Seconds,
    /// Minutes (`m`).
    Minutes,
    /// Hours (`h`).
    Hours,
    /// Days (`d`).
    Days,
    /// Weeks (`w`).
    Weeks,
}

impl TimeUnit {
    /// The unit's letter as written in main.cf.
    pub fn letter(self) -> char {
        match self {
            TimeUnit::Seconds => 's',
            TimeUnit::Minutes => 'm',
            TimeUnit::Hours => 'h',
            TimeUnit::Days => 'd',
            TimeUnit::Weeks => 'w',
        }
    }

    fn from_letter(c: char) -> Option<TimeUnit> {
        Some(match c.to_ascii_lowercase() {
            's' => TimeUnit::Seconds,
            'm' => TimeUnit::Minutes,
            'h' => TimeUnit::Hours,
            'd' => TimeUnit::Days,
            'w' => TimeUnit::Weeks,
            _ => return None,
        })
    }

    fn seconds(self) -> u64 {
        match self {
            TimeUnit::Seconds => 1,
            TimeUnit::Minutes => 60,
            TimeUnit::Hours => 3600,
            TimeUnit::Days => 86_400,
            TimeUnit::Weeks => 604_800,
        }
    }
}

/// The type of a parameter, which decides how its value is validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    /// Free text.
    String,
    /// A signed decimal integer.
    Int,
    /// `yes` or `no` (any case).
    Bool,
    /// A duration: a number with an optional unit; the default unit is given.
    Time(TimeUnit),
    /// A byte count, with an optional `k`, `m` or `g` suffix.
    Size,
    /// Items separated by commas and/or white space.
    List,
    /// A list of integers, e.g. `10, 1000`.
    IntList,
    /// Addresses and networks, plus `type:table` references.
    CidrList,
    /// A list of `type:name` table references.
    MapRef,
    /// One word of a fixed set (compared without case).
    Enum(&'static [&'static str]),
    /// A list of words of a fixed set, e.g. `nexthop, dot-nexthop`.
    EnumList(&'static [&'static str]),
    /// Concurrency feedback: `1/concurrency`, `1/sqrt_concurrency` or a number.
    Feedback,
    /// A TCP address to listen on, `address:port` or `[v6]:port`; empty for none.
    Listen,
    /// A message header field name (RFC 5322 ftext), without the colon; empty for none.
    HeaderName,
    /// Milters: `unix:/path` or `inet:host:port` items; empty for none.
    MilterList,
    /// Sendmail macro names: one character or `{name}`; empty for none.
    MacroList,
    /// TCP addresses to connect to, `address:port` or `[v6]:port` each; empty for none.
    AddrList,
}

impl ParamType {
    /// A short name of the type for documentation.
    pub fn describe(&self) -> String {
        match self {
            ParamType::String => "string".into(),
            ParamType::Int => "integer".into(),
            ParamType::Bool => "boolean (yes or no)".into(),
            ParamType::Time(u) => format!("time (default unit {})", u.letter()),
            ParamType::Size => "size in bytes".into(),
            ParamType::List => "list".into(),
            ParamType::IntList => "list of integers".into(),
            ParamType::CidrList => "list of networks and tables".into(),
            ParamType::MapRef => "list of type:name tables".into(),
            ParamType::Enum(c) => format!("one of {}", c.join(", ")),
            ParamType::EnumList(c) => format!("list of {}", c.join(", ")),
            ParamType::Feedback => {
                "feedback (1/concurrency, 1/sqrt_concurrency or a number)".into()
            }
            ParamType::Listen => "address:port, or empty".into(),
            ParamType::HeaderName => "header name, or empty".into(),
            ParamType::MilterList => "list of unix:/path or inet:host:port".into(),
            ParamType::MacroList => "list of macro names (j, {name})".into(),
            ParamType::AddrList => "list of address:port".into(),
        }
    }

    /// Checks that `text` (already expanded) is a valid value of this type.
    pub fn check(&self, text: &str) -> Result<(), ValueProblem> {
        match self {
            ParamType::String => Ok(()),
            ParamType::Int => parse_int(text).map(drop),
            ParamType::Bool => parse_bool(text).map(drop),
            ParamType::Time(u) => parse_time(text, *u).map(drop),
            ParamType::Size => parse_size(text).map(drop),
            ParamType::List => split_list(text).map(drop),
            ParamType::IntList => parse_int_list(text).map(drop),
            ParamType::CidrList => parse_net_list(text).map(drop),
            ParamType::MapRef => parse_maps(text).map(drop),
            ParamType::Enum(c) => parse_enum(text, c).map(drop),
            ParamType::EnumList(c) => split_list(text)?
                .iter()
                .try_for_each(|w| parse_enum(w, c).map(drop)),
            ParamType::Feedback => parse_feedback(text).map(drop),
            ParamType::Listen => parse_listen(text).map(drop),
            ParamType::HeaderName => parse_header_name(text).map(drop),
            ParamType::MilterList => parse_milters(text).map(drop),
            ParamType::MacroList => parse_macro_names(text).map(drop),
            ParamType::AddrList => parse_addr_list(text).map(drop),
        }
    }
}

/// Parses a `milter_*_macros` list: each name one character (`i`, `j`,
/// `_`) or braced (`{client_addr}`), as Sendmail names its macros.
pub fn parse_macro_names(text: &str) -> Result<Vec<String>, ValueProblem> {
    let words = split_list(text)?;
    for w in &words {
        let braced = w
            .strip_prefix('{')
            .and_then(|r| r.strip_suffix('}'))
            .is_some_and(|n| {
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            });
        let single = w.len() == 1 && w.bytes().all(|b| b.is_ascii_graphic());
        if !(braced || single) {
            return Err(ValueProblem::Macro(w.clone()));
        }
    }
    Ok(words)
}

/// Where a milter listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MilterAddr {
    /// `unix:/path`: a Unix-domain socket (relative paths are under the queue directory).
    Unix(std::path::PathBuf),
    /// `inet:host:port` (`inet:[v6]:port` for IPv6): host is a name or an address.
    Inet(String, u16),
}

impl std::fmt::Display for MilterAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MilterAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            MilterAddr::Inet(h, p) if h.contains(':') => write!(f, "inet:[{h}]:{p}"),
            MilterAddr::Inet(h, p) => write!(f, "inet:{h}:{p}"),
        }
    }
}

/// Parses `smtpd_milters`: `unix:/path` and `inet:host:port` items
/// (`local:` is `unix:`, as in Postfix), separated by commas or spaces.
pub fn parse_milters(text: &str) -> Result<Vec<MilterAddr>, ValueProblem> {
    let mut out = Vec::new();
    for item in split_list(text)? {
        let bad = |why: &str| ValueProblem::Milter(format!("{item}: {why}"));
        let (kind, rest) = item.split_once(':').ok_or_else(|| bad("no type"))?;
        match kind.to_ascii_lowercase().as_str() {
            "unix" | "local" => {
                if rest.is_empty() {
                    return Err(bad("no socket path"));
                }
                out.push(MilterAddr::Unix(rest.into()));
            }
            "inet" => {
                let (host, port) = if let Some(r) = rest.strip_prefix('[') {
                    let (h, p) = r.split_once(']').ok_or_else(|| bad("missing ]"))?;
                    (h, p.strip_prefix(':').ok_or_else(|| bad("missing :port"))?)
                } else {
                    rest.rsplit_once(':').ok_or_else(|| bad("missing :port"))?
                };
                let port = match port.parse::<u16>() {
                    Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
                    _ => return Err(bad("the port must be a number from 1 to 65535")),
                };
                if host.is_empty() {
                    return Err(bad("no host"));
                }
                out.push(MilterAddr::Inet(host.to_string(), port));
            }
            _ => return Err(bad("the type must be unix or inet")),
        }
    }
    Ok(out)
}

/// Parses a header field name (printable ASCII but the colon, RFC 5322's
/// ftext); `None` when empty. A trailing colon, as in `X-Tenant-ID:`, is
/// allowed and dropped.
pub fn parse_header_name(text: &str) -> Result<Option<&str>, ValueProblem> {
    let t = text.trim();
    let t = t.strip_suffix(':').unwrap_or(t);
    if t.is_empty() {
        return Ok(None);
    }
    match t.chars().find(|&c| !matches!(c, '!'..='9' | ';'..='~')) {
        None => Ok(Some(t)),
        Some(c) => Err(ValueProblem::HeaderName(format!(
            "{t}: {c:?} is not allowed in a header name"
        ))),
    }
}

/// Parses a listening address: `address:port`, `[v6]:port` or
/// `localhost:port` (127.0.0.1); `None` when empty. Names are not resolved,
/// so that a typo cannot open a port somewhere unexpected.
pub fn parse_listen(text: &str) -> Result<Option<std::net::SocketAddr>, ValueProblem> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    let bad = |why: &str| ValueProblem::Listen(format!("{t}: {why}"));
    let (host, port) = if let Some(rest) = t.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(|| bad("missing ]"))?;
        let p = after
            .strip_prefix(':')
            .ok_or_else(|| bad("missing :port"))?;
        (h, p)
    } else {
        let (h, p) = t.rsplit_once(':').ok_or_else(|| bad("missing :port"))?;
        if h.contains(':') {
            return Err(bad("write an IPv6 address in brackets, [::1]:port"));
        }
        (h, p)
    };
    let ip: IpAddr = if host.eq_ignore_ascii_case("localhost") {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        host.parse()
            .map_err(|_| bad("the host must be an IP address or localhost"))?
    };
    let port: u16 = match port.parse() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
        _ => return Err(bad("the port must be a number from 1 to 65535")),
    };
    Ok(Some(std::net::SocketAddr::new(ip, port)))
}

/// Parses a list of addresses to connect to (`address:port`, `[v6]:port`,
/// `localhost:port`), as `smtp_proxy` lists its proxies. Names are not
/// resolved: an agent must not wait on DNS to reach its own proxies.
pub fn parse_addr_list(text: &str) -> Result<Vec<std::net::SocketAddr>, ValueProblem> {
    let mut out = Vec::new();
    for item in split_list(text)? {
        let addr = parse_listen(&item).map_err(|e| match e {
            ValueProblem::Listen(why) => ValueProblem::Addr(why),
            other => other,
        })?;
        if let Some(a) = addr {
            if a.ip().is_unspecified() {
                return Err(ValueProblem::Addr(format!(
                    "{item}: the unspecified address cannot be connected to"
                )));
            }
            out.push(a);
        }
    }
    Ok(out)
}

/// Parses a decimal integer (optional sign), surrounding blanks ignored.
pub fn parse_int(text: &str) -> Result<i64, ValueProblem> {
    let t = text.trim();
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ValueProblem::Integer);
    }
    t.parse().map_err(|_| ValueProblem::Integer)
}

/// Parses `yes` or `no`, in any case.
pub fn parse_bool(text: &str) -> Result<bool, ValueProblem> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("yes") {
        Ok(true)
    } else if t.eq_ignore_ascii_case("no") {
        Ok(false)
    } else {
        Err(ValueProblem::Bool)
    }
}

/// Parses a time such as `300s`, `5d` or `60` (in the default unit).
pub fn parse_time(text: &str, default_unit: TimeUnit) -> Result<Duration, ValueProblem> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(ValueProblem::Time);
    }
    let unit = match unit.chars().collect::<Vec<_>>()[..] {
        [] => default_unit,
        [c] => TimeUnit::from_letter(c).ok_or(ValueProblem::Time)?,
        _ => return Err(ValueProblem::Time),
    };
    let n: u64 = digits.parse().map_err(|_| ValueProblem::Time)?;
    n.checked_mul(unit.seconds())
        .map(Duration::from_secs)
        .ok_or(ValueProblem::Time)
}

/// Parses a byte count: digits with an optional `k`, `m` or `g` (1024-based).
pub fn parse_size(text: &str) -> Result<u64, ValueProblem> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    if digits.is_empty() {
        return Err(ValueProblem::Size);
    }
    let mult: u64 = match suffix {
        "" => 1,
        "k" | "K" => 1 << 10,
        "m" | "M" => 1 << 20,
        "g" | "G" => 1 << 30,
        _ => return Err(ValueProblem::Size),
    };
    let n: u64 = digits.parse().map_err(|_| ValueProblem::Size)?;
    n.checked_mul(mult).ok_or(ValueProblem::Size)
}

/// Splits a list on commas and white space, keeping `{ ... }` groups whole.
pub fn split_list(text: &str) -> Result<Vec<String>, ValueProblem> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '{' => {
                depth += 1;
                cur.push(c);
            }
            '}' => {
                depth = depth.checked_sub(1).ok_or(ValueProblem::Braces)?;
                cur.push(c);
            }
            c if depth == 0 && (c == ',' || c.is_whitespace()) => {
                if !cur.is_empty() {
                    items.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if depth != 0 {
        return Err(ValueProblem::Braces);
    }
    if !cur.is_empty() {
        items.push(cur);
    }
    Ok(items)
}

/// Parses a list of integers such as `10, 1000`.
pub fn parse_int_list(text: &str) -> Result<Vec<i64>, ValueProblem> {
    split_list(text)?.iter().map(|s| parse_int(s)).collect()
}

/// Matches one word of `choices` without case; returns the table's spelling.
pub fn parse_enum(
    text: &str,
    choices: &'static [&'static str],
) -> Result<&'static str, ValueProblem> {
    let t = text.trim();
    choices
        .iter()
        .copied()
        .find(|c| c.eq_ignore_ascii_case(t))
        .ok_or(ValueProblem::Enum(choices))
}

/// Concurrency feedback as in Postfix 2.5's scheduler.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Feedback {
    /// `1/concurrency`.
    InverseConcurrency,
    /// `1/sqrt_concurrency`.
    InverseSqrtConcurrency,
    /// A constant amount per event.
    Constant(f64),
}

/// Parses a feedback value.
pub fn parse_feedback(text: &str) -> Result<Feedback, ValueProblem> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("1/concurrency") {
        return Ok(Feedback::InverseConcurrency);
    }
    if t.eq_ignore_ascii_case("1/sqrt_concurrency") {
        return Ok(Feedback::InverseSqrtConcurrency);
    }
    // Only plain decimals: f64's parser would also take "inf" and "NaN".
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(ValueProblem::Feedback);
    }
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(Feedback::Constant(v)),
        _ => Err(ValueProblem::Feedback),
    }
}

/// A lookup table reference `type:name`, e.g. `hash:/etc/aliases`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MapRef {
    /// The table type, e.g. `hash`, `inline`, `static`.
    pub kind: String,
    /// Everything after the first colon, e.g. `/etc/aliases` or `{ a = b }`.
    pub name: String,
}

impl fmt::Display for MapRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.name)
    }
}

/// Parses one `type:name` item.
pub fn parse_map_ref(item: &str) -> Result<MapRef, ValueProblem> {
    let Some((kind, name)) = item.split_once(':') else {
        return Err(ValueProblem::MapRef("expected type:name".into()));
    };
    let kind_ok = !kind.is_empty()
        && kind
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !kind_ok {
        return Err(ValueProblem::MapRef(format!(
            "bad table type \"{}\"",
            crate::error::escape(kind)
        )));
    }
    if name.is_empty() {
        return Err(ValueProblem::MapRef("empty table name".into()));
    }
    Ok(MapRef {
        kind: kind.to_string(),
        name: name.to_string(),
    })
}

/// Parses a list of table references.
pub fn parse_maps(text: &str) -> Result<Vec<MapRef>, ValueProblem> {
    split_list(text)?.iter().map(|s| parse_map_ref(s)).collect()
}

/// An IPv4 or IPv6 network: an address and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Builds a network; `None` if the prefix is too long or host bits are set.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let c = Cidr { addr, prefix };
        (prefix <= c.max_prefix() && c.mask(addr) == Some(addr)).then_some(c)
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    fn max_prefix(&self) -> u8 {
        match self.addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        }
    }

    /// `ip` with the bits past the prefix cleared, if it is of the same family.
    fn mask(&self, ip: IpAddr) -> Option<IpAddr> {
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(a)) => {
                let bits = u32::from(a);
                let m = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                Some(IpAddr::V4(Ipv4Addr::from(bits & m)))
            }
            (IpAddr::V6(_), IpAddr::V6(a)) => {
                let bits = u128::from(a);
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                Some(IpAddr::V6(Ipv6Addr::from(bits & m)))
            }
            _ => None,
        }
    }

    /// Whether `ip` is inside this network. IPv4-mapped IPv6 addresses
    /// (`::ffff:a.b.c.d`) match IPv4 networks, as a dual-stack socket reports
    /// IPv4 clients that way.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) if self.addr.is_ipv4() => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            other => other,
        };
        self.mask(ip) == Some(self.addr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}/{}", self.prefix),
            IpAddr::V6(a) => write!(f, "[{a}]/{}", self.prefix),
        }
    }
}

impl std::str::FromStr for Cidr {
    type Err = ValueProblem;

    /// Parses `10.0.0.0/8`, `::1`, `[::1]/128` and the like (not tables).
    fn from_str(s: &str) -> Result<Cidr, ValueProblem> {
        match parse_net(s.trim())? {
            NetEntry::Net(c) => Ok(c),
            NetEntry::Table(_) => Err(ValueProblem::Cidr("a table, not an address".into())),
        }
    }
}

impl std::str::FromStr for MapRef {
    type Err = ValueProblem;

    /// Parses `type:name`.
    fn from_str(s: &str) -> Result<MapRef, ValueProblem> {
        parse_map_ref(s.trim())
    }
}

/// One entry of a CIDR list: a network, or a table to look client addresses up in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetEntry {
    /// An address or network.
    Net(Cidr),
    /// A `type:name` table, for the caller to consult.
    Table(MapRef),
}

/// Parses one CIDR list entry: `1.2.3.4`, `10.0.0.0/8`, `::1`, `[::1]/128`,
/// `[2001:db8::]/32` or `type:name`. `!pattern` and `/file/name` entries
/// are refused: Sluice does not implement them.
pub fn parse_net(item: &str) -> Result<NetEntry, ValueProblem> {
    if item.starts_with('!') {
        return Err(ValueProblem::Cidr(
            "!pattern negation is not supported".into(),
        ));
    }
    if item.starts_with('/') {
        return Err(ValueProblem::Cidr(
            "/file/name patterns are not supported; use a type:table".into(),
        ));
    }
    let (addr_text, prefix_text) = match item.strip_prefix('[') {
        Some(rest) => {
            let Some((inside, after)) = rest.split_once(']') else {
                return Err(ValueProblem::Cidr("missing ]".into()));
            };
            match after {
                "" => (inside, None),
                _ => match after.strip_prefix('/') {
                    Some(p) => (inside, Some(p)),
                    None => return Err(ValueProblem::Cidr("text after ]".into())),
                },
            }
        }
        None => match item.rsplit_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (item, None),
        },
    };
    let addr: IpAddr = match addr_text.parse() {
        Ok(a) => a,
        // Not an address: a table reference if it looks like one.
        Err(_) if !item.starts_with('[') && item.contains(':') => {
            return parse_map_ref(item).map(NetEntry::Table).map_err(|_| {
                ValueProblem::Cidr(format!(
                    "not an address: \"{}\"",
                    crate::error::escape(item)
                ))
            });
        }
        Err(_) => {
            return Err(ValueProblem::Cidr(format!(
                "not an address: \"{}\"",
                crate::error::escape(addr_text)
            )))
        }
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix_text {
        None => max,
        Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()) => {
            p.parse::<u8>().unwrap_or(u8::MAX)
        }
        Some(p) => {
            return Err(ValueProblem::Cidr(format!(
                "bad prefix length \"{}\"",
                crate::error::escape(p)
            )))
        }
    };
    if prefix > max {
        return Err(ValueProblem::Cidr(format!(
            "prefix length {prefix} is too long"
        )));
    }
    let probe = Cidr { addr, prefix };
    let net = probe.mask(addr).unwrap_or(addr);
    if net != addr {
        let suggestion = Cidr { addr: net, prefix };
        return Err(ValueProblem::Cidr(format!(
            "non-null host address bits in \"{}\", perhaps you should use \"{suggestion}\" instead",
            crate::error::escape(item)
        )));
    }
    Ok(NetEntry::Net(probe))
}

/// Parses a whole CIDR list.
pub fn parse_net_list(text: &str) -> Result<Vec<NetEntry>, ValueProblem> {
    split_list(text)?.iter().map(|s| parse_net(s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_lists() {
        let t = ParamType::EnumList(&["hostname", "nexthop", "dot-nexthop"]);
        assert!(t.check("nexthop, dot-nexthop").is_ok());
        assert!(t.check("Hostname").is_ok());
        assert!(t.check("").is_ok());
        assert_eq!(
            t.check("nexthop, example.com"),
            Err(ValueProblem::Enum(&["hostname", "nexthop", "dot-nexthop"]))
        );
    }

    #[test]
    fn a_bad_enum_list_names_file_line_and_parameter() {
        let text = "myhostname = a.example\nsmtp_tls_secure_cert_match = nexthop, bogus\n";
        let e = crate::Config::parse(text, std::path::Path::new("/etc/sluice/main.cf"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/etc/sluice/main.cf")
                && e.contains('2')
                && e.contains("smtp_tls_secure_cert_match"),
            "{e}"
        );
    }

    #[test]
    fn integers() {
        for (text, want) in [
            ("0", Some(0)),
            ("10240000", Some(10_240_000)),
            (" 5 ", Some(5)),
            ("-1", Some(-1)),
            ("+3", Some(3)),
            ("10M0", None),
            ("abc", None),
            ("", None),
            ("-", None),
            ("99999999999999999999", None),
            ("1.5", None),
            ("1\0", None),
        ] {
            assert_eq!(parse_int(text).ok(), want, "{text:?}");
        }
    }

    #[test]
    fn listening_addresses() {
        let a = |s: &str| Some(Some(s.parse::<std::net::SocketAddr>().unwrap()));
        for (text, want) in [
            ("", Some(None)),
            ("  ", Some(None)),
            ("127.0.0.1:9103", a("127.0.0.1:9103")),
            ("localhost:9103", a("127.0.0.1:9103")),
            ("[::1]:9103", a("[::1]:9103")),
            ("0.0.0.0:80", a("0.0.0.0:80")),
            ("9103", None),
            ("::1:9103", None),
            ("127.0.0.1:0", None),
            ("127.0.0.1:65536", None),
            ("127.0.0.1:+9", None),
            ("metrics.example:9103", None),
            ("[::1]9103", None),
            ("[::1:9103", None),
        ] {
            assert_eq!(parse_listen(text).ok(), want, "{text:?}");
        }
        let e = parse_listen("9103").unwrap_err().to_string();
        assert!(
            e.starts_with("bad listening address (9103: missing :port"),
            "{e}"
        );
    }

    #[test]
    fn header_names() {
        for (text, want) in [
            ("", Some(None)),
            ("X-Tenant-ID", Some(Some("X-Tenant-ID"))),
            (" X-Job-ID: ", Some(Some("X-Job-ID"))),
            ("X Tenant", None),
            ("X-Tenant:ID", None),
            ("X-Tenänt", None),
            ("X-\tTab", None),
        ] {
            assert_eq!(parse_header_name(text).ok(), want, "{text:?}");
        }
        let text = "myhostname = h.test\ntenant_id_header = X Tenant\n";
        let e = crate::Config::parse(text, std::path::Path::new("/etc/sluice/main.cf"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("main.cf, line 2")
                && e.contains("tenant_id_header")
                && e.contains("bad header name"),
            "{e}"
        );
    }

    #[test]
    fn milter_macro_names() {
        for (text, ok) in [
            ("", true),
            ("i j _ {client_addr}", true),
            ("i, {auth_authen}", true),
            ("{cert_subject} {daemon_name} {daemon_addr} v", true),
            ("client_addr", false),
            ("{client addr}", false),
            ("{}", false),
            ("{client_addr", false),
        ] {
            assert_eq!(parse_macro_names(text).is_ok(), ok, "{text:?}");
        }
        let text = "myhostname = h.test\nmilter_mail_macros = i client_addr\n";
        let e = crate::Config::parse(text, std::path::Path::new("/etc/sluice/main.cf"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("main.cf, line 2")
                && e.contains("milter_mail_macros")
                && e.contains("bad macro name")
                && e.contains("(client_addr; use one character or a name in braces"),
            "{e}"
        );
        // Postfix's defaults are good values.
        let text = "myhostname = h.test\n";
        let c =
            crate::Config::parse(text, std::path::Path::new("/etc/sluice/main.cf"), &[]).unwrap();
        assert_eq!(
            c.config.str("milter_helo_macros"),
            "{tls_version} {cipher} {cipher_bits} {cert_subject} {cert_issuer}"
        );
    }

    #[test]
    fn times() {
        let d = |s| Some(Duration::from_secs(s));
        for (text, unit, want) in [
            ("300s", TimeUnit::Seconds, d(300)),
            ("300", TimeUnit::Seconds, d(300)),
            ("5d", TimeUnit::Seconds, d(432_000)),
            ("5", TimeUnit::Days, d(432_000)),
            ("2w", TimeUnit::Days, d(1_209_600)),
            ("1H", TimeUnit::Days, d(3600)),
            ("0h", TimeUnit::Hours, d(0)),
            ("10x", TimeUnit::Seconds, None),
            ("10ss", TimeUnit::Seconds, None),
            ("s", TimeUnit::Seconds, None),
            ("", TimeUnit::Seconds, None),
            ("-5s", TimeUnit::Seconds, None),
            ("99999999999999999999w", TimeUnit::Seconds, None),
            ("18446744073709551615w", TimeUnit::Seconds, None),
        ] {
            assert_eq!(parse_time(text, unit).ok(), want, "{text:?}");
        }
    }

    #[test]
    fn sizes() {
        for (text, want) in [
            ("10240000", Some(10_240_000)),
            ("10k", Some(10_240)),
            ("1M", Some(1 << 20)),
            ("2g", Some(2 << 30)),
            ("10M0", None),
            ("1t", None),
            ("k", None),
            ("18446744073709551615g", None),
        ] {
            assert_eq!(parse_size(text).ok(), want, "{text:?}");
        }
    }

    #[test]
    fn lists_keep_braces() {
        let l = split_list("hash:/a, inline:{ a = b, c = d }  static:x,,").unwrap();
        assert_eq!(l, ["hash:/a", "inline:{ a = b, c = d }", "static:x"]);
        assert_eq!(split_list("").unwrap(), Vec::<String>::new());
        assert_eq!(split_list("a {b"), Err(ValueProblem::Braces));
        assert_eq!(split_list("a }b"), Err(ValueProblem::Braces));
        assert_eq!(split_list("{{a}}").unwrap(), ["{{a}}"]);
    }

    #[test]
    fn map_refs() {
        let m = parse_maps("hash:/etc/aliases proxy:unix:passwd.byname").unwrap();
        assert_eq!(m[0].kind, "hash");
        assert_eq!(m[1].name, "unix:passwd.byname");
        assert_eq!(m[1].to_string(), "proxy:unix:passwd.byname");
        assert!(parse_maps("/etc/aliases").is_err());
        assert!(parse_maps("hash:").is_err());
        assert!(parse_maps(":x").is_err());
        assert!(parse_maps("ha sh:x").is_err(), "'ha' alone is no table");
    }

    #[test]
    fn cidrs() {
        let net = |s: &str| match parse_net(s) {
            Ok(NetEntry::Net(c)) => Some(c.to_string()),
            _ => None,
        };
        for (text, want) in [
            ("127.0.0.0/8", Some("127.0.0.0/8")),
            ("10.1.2.3", Some("10.1.2.3/32")),
            ("[::1]/128", Some("[::1]/128")),
            ("[::1]", Some("[::1]/128")),
            ("::1", Some("[::1]/128")),
            ("2001:db8::/32", Some("[2001:db8::]/32")),
            ("[2001:db8::]/32", Some("[2001:db8::]/32")),
            ("0.0.0.0/0", Some("0.0.0.0/0")),
            ("127.0.0.1/8", None),
            ("10.0.0.0/33", None),
            ("10.0.0.0/", None),
            ("10.0.0.0/-1", None),
            ("[::1", None),
            ("[::1]x", None),
            ("[10.0.0.1]/32", Some("10.0.0.1/32")),
            ("999.0.0.1", None),
            ("!10.0.0.0/8", None),
            ("/etc/networks", None),
            ("example.com", None),
        ] {
            assert_eq!(net(text).as_deref(), want, "{text:?}");
        }
        assert_eq!(
            parse_net("hash:/etc/sluice/nets"),
            Ok(NetEntry::Table(MapRef {
                kind: "hash".into(),
                name: "/etc/sluice/nets".into()
            }))
        );
        let msg = parse_net("127.0.0.1/8").unwrap_err().to_string();
        assert!(msg.contains("127.0.0.0/8"), "{msg}");
    }

    #[test]
    fn contains() {
        let c = |s: &str| match parse_net(s).unwrap() {
            NetEntry::Net(c) => c,
            NetEntry::Table(_) => unreachable!(),
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(c("127.0.0.0/8").contains(ip("127.1.2.3")));
        assert!(!c("127.0.0.0/8").contains(ip("128.0.0.1")));
        assert!(c("127.0.0.0/8").contains(ip("::ffff:127.0.0.9")));
        assert!(!c("127.0.0.0/8").contains(ip("::1")));
        assert!(c("[::1]/128").contains(ip("::1")));
        assert!(!c("[::1]/128").contains(ip("127.0.0.1")));
        assert!(c("0.0.0.0/0").contains(ip("1.2.3.4")));
        assert!(c("::/0").contains(ip("2001:db8::1")));
        assert!(Cidr::new(ip("10.0.0.1"), 8).is_none());
        assert_eq!("10.0.0.0/8".parse::<Cidr>().map(|c| c.prefix()), Ok(8));
        assert!("hash:/x".parse::<Cidr>().is_err());
        assert_eq!(
            "static:OK".parse::<MapRef>().map(|m| m.name),
            Ok("OK".to_string())
        );
        assert!(Cidr::new(ip("10.0.0.0"), 8).is_some());
    }

    #[test]
    fn enums_and_feedback() {
        const C: &[&str] = &["reject", "normalize", "no"];
        assert_eq!(parse_enum("Reject", C), Ok("reject"));
        assert!(parse_enum("maybe", C).is_err());
        assert_eq!(
            parse_feedback("1/concurrency"),
            Ok(Feedback::InverseConcurrency)
        );
        assert_eq!(
            parse_feedback("1/sqrt_concurrency"),
            Ok(Feedback::InverseSqrtConcurrency)
        );
        assert_eq!(parse_feedback("0.5"), Ok(Feedback::Constant(0.5)));
        assert!(parse_feedback("inf").is_err());
        assert!(parse_feedback("1/x").is_err());
        assert!(parse_feedback("1..2").is_err());
    }
}
