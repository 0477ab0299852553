//! Fuzz the client-side reply parser: no panic, bounded memory, every byte
//! consumed or an error returned.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smtp_proto::ReplyParser;

fuzz_target!(|data: &[u8]| {
    let mut p = ReplyParser::new(512, 50);
    let mut rest = data;
    while !rest.is_empty() {
        let (n, r) = p.parse(rest);
        assert!(n > 0 && n <= rest.len());
        rest = &rest[n..];
        if let Some(Err(_)) = r {
            break;
        }
    }
});
