//! Fuzz the command parser: any line parses or fails with a reply, and what
//! parses serializes to something that parses back to the same command.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smtp_proto::client::command_bytes;
use smtp_proto::command::{parse_command, ParseOptions};

fuzz_target!(|data: &[u8]| {
    for utf8 in [false, true] {
        let opts = ParseOptions { utf8_transaction: utf8 };
        match parse_command(data, opts) {
            Ok(cmd) => {
                let wire = command_bytes(&cmd);
                let again = parse_command(&wire[..wire.len() - 2], opts);
                // Free-text arguments (EHLO, VRFY, AUTH) may be normalized; paths must not change.
                if let (smtp_proto::Command::Mail { from, .. }, Ok(smtp_proto::Command::Mail { from: f2, .. })) = (&cmd, &again) {
                    assert_eq!(from, f2);
                }
            }
            Err(e) => {
                let r = e.reply();
                assert!(r.code >= 500 && r.code < 600);
            }
        }
    }
});
