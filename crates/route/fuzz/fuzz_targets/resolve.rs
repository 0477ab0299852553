//! Any address, with and without SMTPUTF8, through a router with aliases,
//! canonical and transport tables: must never panic, and a success has routes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use route::{DomainList, Router, Settings};
use tables::{Table, Tables};

fn maps(src: &str) -> Tables {
    Tables::from_tables(vec![Table::from_text("t", "t", src).expect("fuzz: fixed table")])
}

fuzz_target!(|input: (&str, bool)| {
    let mut s = Settings::minimal("h.test");
    s.mydestination = DomainList::names(&["h.test", "example.test"], false);
    s.recipient_delimiter = "+".into();
    s.virtual_alias_maps = maps("a@example.test b@example.test, c@r.test\n@v.test @example.test\nloop@x.test loop2@x.test\nloop2@x.test loop@x.test\n");
    s.canonical_maps = maps("old@example.test new@example.test\n");
    s.transport_maps = maps(".r.test relay:[gw]\n");
    let r = Router::new(s);
    if let Ok(routes) = r.resolve(input.0, input.1) {
        assert!(!routes.is_empty());
    }
});
