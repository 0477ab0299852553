//! main.cf text and one assignment → editor: must never panic, and the
//! assigned value must read back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&str, &str)| {
    let (text, value) = input;
    let out = config::edit_main_cf(text, &[("myorigin".to_string(), value.to_string())]);
    assert!(out.lines().any(|l| l.starts_with("myorigin =")));
});
