//! Sluice configuration: the parameter table, main.cf, master.cf.
//!
//! One table (`table`) declares every parameter with its type, default and
//! description; `sluice config -d`, load-time validation and sluice.conf(5)
//! all come from it. main.cf uses Postfix's syntax and rules: the last
//! definition wins, continuation lines, `$name` expansion with loop
//! detection, per-transport overrides `<transport>_<name>`. Unknown names are
//! warnings; bad values are refused with file, line and parameter; after a
//! successful load the typed getters cannot fail. master.cf is Postfix's
//! service table limited to `inet` and `unix` services. Nothing in this crate
//! panics on any input; getters panic only on names missing from the table
//! (a programmer error).
//!
//! ```
//! use std::path::Path;
//! let text = "relayhost = [mx.example.net]:587\nrelay_destination_concurrency_limit = 5\n";
//! let loaded = config::Config::parse(text, Path::new("main.cf"), &["relay".to_string()])?;
//! let c = &loaded.config;
//! assert_eq!(c.str("relayhost"), "[mx.example.net]:587");
//! assert_eq!(c.transport("relay").int("default_destination_concurrency_limit"), 5);
//! assert_eq!(c.int("default_destination_concurrency_limit"), 20);
//! # Ok::<(), config::ConfigError>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod edit;
mod error;
mod expand;
mod inet;
mod maincf;
mod manpage;
mod mastercf;
mod render;
mod services;
mod table;
mod value;

pub use config::{system_hostname, Config, Loaded, TransportView};
pub use edit::{edit_file, edit_main_cf, parse_assignment};
pub use error::{
    AddressProblem, ConfigError, Diagnostic, ExpandProblem, MasterProblem, SyntaxProblem,
    ValueProblem,
};
pub use expand::{expand_vars, references};
pub use inet::inet_addresses;
pub use maincf::is_valid_name;
pub use manpage::man_page;
pub use mastercf::{
    check_master_cf, load_master_cf, parse_master_cf, parse_master_cf_all, ServiceDef, ServiceKind,
};
pub use render::{render, render_one, RenderMode};
pub use services::{parse_services, port_by_name};
pub use table::{spec, split_transport_param, DefaultValue, ParamSpec};
pub use value::{
    parse_addr_list, parse_header_name, parse_milters, parse_net, parse_net_list, parse_time,
    split_list, Cidr, Feedback, MapRef, MilterAddr, NetEntry, ParamType, TimeUnit,
};
