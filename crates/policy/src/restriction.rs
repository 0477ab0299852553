//! Parsing restriction lists (`smtpd_*_restrictions`).

use config::MapRef;

/// One restriction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restriction {
    /// `permit`.
    Permit,
    /// `reject`.
    Reject,
    /// `defer`.
    Defer,
    /// `permit_mynetworks`.
    PermitMynetworks,
    /// `permit_sasl_authenticated`: the client authenticated with AUTH.
    PermitSaslAuthenticated,
    /// `reject_unauth_destination`.
    RejectUnauthDestination,
    /// `defer_unauth_destination`.
    DeferUnauthDestination,
    /// `reject_non_fqdn_recipient`.
    RejectNonFqdnRecipient,
    /// `reject_non_fqdn_sender`.
    RejectNonFqdnSender,
    /// `reject_unlisted_recipient`: the router does not know the recipient.
    RejectUnlistedRecipient,
    /// `reject_unverified_recipient`: a probe found the recipient undeliverable.
    RejectUnverifiedRecipient,
    /// `reject_unverified_sender`: a probe found the sender undeliverable.
    RejectUnverifiedSender,
    /// `check_client_access type:name`.
    CheckClientAccess(MapRef),
    /// `check_sender_access type:name`.
    CheckSenderAccess(MapRef),
    /// `check_recipient_access type:name`.
    CheckRecipientAccess(MapRef),
}

impl Restriction {
    /// The name as written in main.cf.
    pub fn name(&self) -> String {
        match self {
            Restriction::Permit => "permit".into(),
            Restriction::Reject => "reject".into(),
            Restriction::Defer => "defer".into(),
            Restriction::PermitMynetworks => "permit_mynetworks".into(),
            Restriction::PermitSaslAuthenticated => "permit_sasl_authenticated".into(),
            Restriction::RejectUnauthDestination => "reject_unauth_destination".into(),
            Restriction::DeferUnauthDestination => "defer_unauth_destination".into(),
            Restriction::RejectNonFqdnRecipient => "reject_non_fqdn_recipient".into(),
            Restriction::RejectNonFqdnSender => "reject_non_fqdn_sender".into(),
            Restriction::RejectUnlistedRecipient => "reject_unlisted_recipient".into(),
            Restriction::RejectUnverifiedRecipient => "reject_unverified_recipient".into(),
            Restriction::RejectUnverifiedSender => "reject_unverified_sender".into(),
            Restriction::CheckClientAccess(m) => format!("check_client_access {m}"),
            Restriction::CheckSenderAccess(m) => format!("check_sender_access {m}"),
            Restriction::CheckRecipientAccess(m) => format!("check_recipient_access {m}"),
        }
    }
}

/// A restriction list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestrictionError {
    /// The parameter, once known.
    pub param: String,
    /// What is wrong.
    pub message: String,
}

impl RestrictionError {
    pub(crate) fn in_param(mut self, param: &str) -> Self {
        self.param = param.to_string();
        self
    }
}

impl std::fmt::Display for RestrictionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "parameter \"{}\": {}", self.param, self.message)
    }
}

impl std::error::Error for RestrictionError {}

/// Splits a list on commas and white space, keeping `inline:{ … }` whole.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '{' => {
                depth += 1;
                cur.push(c);
            }
            '}' => {
                depth = depth.saturating_sub(1);
                cur.push(c);
            }
            c if depth == 0 && (c == ',' || c.is_whitespace()) => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Parses a restriction list.
pub fn parse_list(text: &str) -> Result<Vec<Restriction>, RestrictionError> {
    let err = |m: String| RestrictionError {
        param: String::new(),
        message: m,
    };
    let toks = tokens(text);
    let mut it = toks.into_iter();
    let mut out = Vec::new();
    while let Some(t) = it.next() {
        let r = match t.to_ascii_lowercase().as_str() {
            "permit" => Restriction::Permit,
            "reject" => Restriction::Reject,
            "defer" => Restriction::Defer,
            "permit_mynetworks" => Restriction::PermitMynetworks,
            "permit_sasl_authenticated" => Restriction::PermitSaslAuthenticated,
            "reject_unauth_destination" => Restriction::RejectUnauthDestination,
            "defer_unauth_destination" => Restriction::DeferUnauthDestination,
            "reject_non_fqdn_recipient" => Restriction::RejectNonFqdnRecipient,
            "reject_non_fqdn_sender" => Restriction::RejectNonFqdnSender,
            "reject_unlisted_recipient" => Restriction::RejectUnlistedRecipient,
            "reject_unverified_recipient" => Restriction::RejectUnverifiedRecipient,
            "reject_unverified_sender" => Restriction::RejectUnverifiedSender,
            name @ ("check_client_access" | "check_sender_access" | "check_recipient_access") => {
                let table = it
                    .next()
                    .ok_or_else(|| err(format!("{name} needs a type:table argument")))?;
                let (kind, tname) = table
                    .split_once(':')
                    .ok_or_else(|| err(format!("{name} {table}: expected type:table")))?;
                let map = MapRef {
                    kind: kind.to_string(),
                    name: tname.to_string(),
                };
                match name {
                    "check_client_access" => Restriction::CheckClientAccess(map),
                    "check_sender_access" => Restriction::CheckSenderAccess(map),
                    _ => Restriction::CheckRecipientAccess(map),
                }
            }
            other => return Err(err(format!("unknown restriction \"{other}\""))),
        };
        out.push(r);
    }
    Ok(out)
}
