//! Fuzz a whole server session with a permissive policy: no panic, bounded
//! line buffer, every reply well formed.
#![no_main]
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use smtp_proto::server::{Action, ServerConfig, Session};
use smtp_proto::{Reply, ReplyParser};

fuzz_target!(|data: &[u8]| {
    let cfg = Arc::new(ServerConfig { max_command_line: 128, ask_unknown: true, ..ServerConfig::default() });
    let mut s = Session::new(cfg, false);
    let mut buf = data.to_vec();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let n = s.feed(&buf);
        buf.drain(..n);
        let mut acted = false;
        while let Some(a) = s.poll_action() {
            acted = true;
            match a {
                Action::CheckSender { .. } | Action::CheckRecipient { .. } | Action::CheckData { .. } | Action::MessageEnd(_) => {
                    s.decide(Reply::ok()).unwrap();
                }
                Action::CheckUnknown { .. } => {
                    s.decide(smtp_proto::CommandError::Unrecognized.reply()).unwrap();
                }
                Action::StartTls => {
                    buf.clear();
                    s.tls_established();
                }
                _ => {}
            }
        }
        out.extend(s.take_output());
        if n == 0 && !acted {
            break;
        }
    }
    let mut p = ReplyParser::default();
    let mut rest = &out[..];
    while !rest.is_empty() {
        let (n, r) = p.parse(rest);
        rest = &rest[n..];
        if let Some(r) = r {
            r.unwrap();
        }
    }
});
