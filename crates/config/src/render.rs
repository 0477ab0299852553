//! `sluice config` output, in the style of `postconf`.
//!
//! Three views of the parameters, one `name = value` line each, sorted by
//! name: the effective values expanded (`postconf`), only what main.cf sets,
//! as written (`postconf -n`), and the defaults (`postconf -d`, unexpanded
//! except for the computed host name and domain). Values are printed on one
//! line; nothing is wrapped.

use std::collections::BTreeSet;

use crate::config::Config;
use crate::error::ConfigError;
use crate::table::{self, DefaultValue};

/// Which values `render` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenderMode {
    /// Every parameter's effective value, expanded.
    All,
    /// Only parameters set in main.cf, as written.
    NonDefault,
    /// Every parameter's default.
    Defaults,
}

fn line(name: &str, value: &str) -> String {
    if value.is_empty() {
        format!("{name} =\n")
    } else {
        format!("{name} = {value}\n")
    }
}

/// The default of a table parameter as `postconf -d` shows it.
fn default_text(config: &Config, name: &str) -> Option<String> {
    let spec = table::spec(name)?;
    Some(match spec.default {
        DefaultValue::Text(t) => t.to_string(),
        DefaultValue::Hostname | DefaultValue::Domain | DefaultValue::Version => {
            Config::with_hostname(config.hostname())
                .expanded(name)
                .unwrap_or_default()
        }
    })
}

/// The value of one parameter in `mode`; empty text for NonDefault when the
/// parameter is not set.
pub fn render_one(config: &Config, name: &str, mode: RenderMode) -> Result<String, ConfigError> {
    let known = table::spec(name).is_some() || config.raw(name).is_some();
    if !known {
        return Err(ConfigError::UnknownParameter {
            name: name.to_string(),
        });
    }
    Ok(match mode {
        RenderMode::All => line(name, &config.expanded(name).unwrap_or_default()),
        RenderMode::NonDefault => config
            .main_cf_settings()
            .find(|(n, _)| n.as_str() == name)
            .map(|(n, s)| line(n, &s.value))
            .unwrap_or_default(),
        RenderMode::Defaults => match default_text(config, name) {
            Some(d) => line(name, &d),
            None => {
                return Err(ConfigError::UnknownParameter {
                    name: name.to_string(),
                })
            }
        },
    })
}

/// All parameters in `mode`, one line each, sorted by name.
pub fn render(config: &Config, mode: RenderMode) -> String {
    match mode {
        RenderMode::NonDefault => config
            .main_cf_settings()
            .map(|(n, s)| line(n, &s.value))
            .collect(),
        RenderMode::Defaults => table::params()
            .map(|s| s.name)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter_map(|n| default_text(config, n).map(|d| line(n, &d)))
            .collect(),
        RenderMode::All => {
            let mut names: BTreeSet<&str> = table::params().map(|s| s.name).collect();
            names.extend(config.set_names().into_iter().map(String::as_str));
            names
                .into_iter()
                .map(|n| line(n, &config.expanded(n).unwrap_or_default()))
                .collect()
        }
    }
}
