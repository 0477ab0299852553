//! main.cf text → parser and every getter: must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(loaded) = config::Config::with_hostname("fuzz.example").with_text(text, Path::new("main.cf"), &[]) {
        let _ = config::render(&loaded.config, config::RenderMode::All);
        let _ = config::render(&loaded.config, config::RenderMode::NonDefault);
    }
});
