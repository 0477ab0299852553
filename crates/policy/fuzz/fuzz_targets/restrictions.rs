//! Restriction lists and access(5) values → parser and evaluation: must
//! never panic, and a refusal is always a well-formed 4xx/5xx reply.
//!
//! The first string is main.cf text (restriction lists, mynetworks,
//! relay_domains…), the second the value every non-static access table
//! answers, the next two the sender and recipient, the bytes the client
//! address.
#![no_main]

use libfuzzer_sys::fuzz_target;
use policy::{parse_action, parse_list, Lookup, Policy, Query, StaticOnly, Verdict};
use smtp_proto::address::parse_mailbox;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

struct Answer<'a>(&'a str);

impl Lookup for Answer<'_> {
    fn lookup(&self, table: &config::MapRef, key: &str) -> Result<Option<String>, String> {
        match table.kind.as_str() {
            "static" => StaticOnly.lookup(table, key),
            "fail" => Err("table unavailable".into()),
            _ if key.len() % 2 == 0 => Ok(Some(self.0.to_string())),
            _ => Ok(None),
        }
    }
}

fuzz_target!(|input: (&str, &str, &str, &str, [u8; 17])| {
    let (main_cf, value, sender, rcpt, addr) = input;
    let _ = parse_list(main_cf);
    let _ = parse_action(value);
    let Ok(loaded) = config::Config::with_hostname("mx.fuzz.example").with_text(
        main_cf,
        Path::new("main.cf"),
        &[],
    ) else {
        return;
    };
    let Ok(p) = Policy::from_config(&loaded.config) else {
        return;
    };
    let _ = p.tables();
    let Ok(recipient) = parse_mailbox(rcpt, addr[0] & 1 == 1) else {
        return;
    };
    let sender = parse_mailbox(sender, addr[0] & 1 == 1).ok();
    let client_addr = if addr[0] & 2 == 0 {
        IpAddr::V4(Ipv4Addr::new(addr[1], addr[2], addr[3], addr[4]))
    } else {
        let mut b = [0u8; 16];
        b.copy_from_slice(&addr[1..]);
        IpAddr::V6(Ipv6Addr::from(b))
    };
    let q = Query {
        client_addr,
        client_name: "unknown",
        helo: Some(value),
        sender: sender.as_ref(),
        recipient: &recipient,
        sasl_username: None,
    };
    let _ = p.in_mynetworks(client_addr);
    let _ = p.authorized_destination(&recipient);
    if let Verdict::Refuse { reply, .. } = p.check(&q, &Answer(value)) {
        let code = reply.code;
        assert!((400..600).contains(&code), "refusal code {code}");
        assert_eq!(
            u16::from(reply.status.class()),
            code / 100,
            "enhanced {} for {code}",
            reply.status
        );
    }
});
