//! master.cf text → parser and address resolution: must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(defs) = config::parse_master_cf(text, Path::new("master.cf")) {
        let cfg = config::Config::with_hostname("fuzz.example");
        for def in defs.iter().filter(|d| d.kind == config::ServiceKind::Inet) {
            let _ = config::inet_addresses(def, &cfg);
        }
    }
});
