//! Table source text and a key → every parser and its lookup: must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&str, &str)| {
    let (src, key) = input;
    if let Ok(t) = tables::Table::from_text("hash:fuzz", "fuzz", src) {
        let _ = t.lookup(key);
    }
    if let Ok(t) = tables::Table::from_regexp("regexp:fuzz", "fuzz", src) {
        let _ = t.lookup(key);
    }
    if let Ok(t) = tables::Table::from_inline("inline", src) {
        let _ = t.lookup(key);
    }
});
