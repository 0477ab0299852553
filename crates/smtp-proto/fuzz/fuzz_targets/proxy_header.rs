//! Fuzz the PROXY header parser: any input is complete, incomplete or
//! refused, a complete header never claims more bytes than it was given,
//! and an incomplete one is never longer than the bounds allow.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smtp_proto::proxy::{parse, Parsed, V1_MAX, V2_MAX_BODY};

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Parsed::Done(_, used) => assert!(used <= data.len() && used > 0),
        Parsed::Incomplete => assert!(data.len() < (16 + V2_MAX_BODY).max(V1_MAX)),
        Parsed::Bad(e) => assert!(!e.to_string().is_empty()),
    }
});
