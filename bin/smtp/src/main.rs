//! smtp(8): the SMTP delivery agent (see the library's header).
#![forbid(unsafe_code)]

fn main() {
    smtp::run(false)
}
