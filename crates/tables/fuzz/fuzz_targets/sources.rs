//! Table source text and a key → every parser and its lookup: must never panic.
//! The key is also read as a table reference (`type:name`; only the types
//! that need no file are opened) and the source as an aliases(5) value.
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
    let _ = tables::split_alias_value(src);
    let _ = tables::logical_lines(src);
    if let Ok(r) = tables::parse_ref(key) {
        if matches!(r.kind.as_str(), "inline" | "static") {
            if let Ok(t) = tables::Table::open(&r) {
                let _ = t.lookup(src);
            }
        }
    }
});
