//! lmtp(8): the smtp agent speaking LMTP (see the library's header).
#![forbid(unsafe_code)]

fn main() {
    smtp::run(true)
}
