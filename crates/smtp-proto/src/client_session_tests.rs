//! Tests of the client session: against this crate's server session in memory,
//! and against scripted servers for the refusals a real server can give.

use super::*;
use crate::address::parse_mailbox;
use crate::command::Notify;
use crate::server::{Action as ServerAction, ServerConfig, Session, TlsPolicy};
use std::sync::Arc;

fn mbox(s: &str) -> Mailbox {
    parse_mailbox(s, false).unwrap()
}

fn env(from: &str, to: &[&str]) -> Envelope {
    Envelope {
        from: Path::Mailbox(mbox(from)),
        params: MailParams {
            size: Some(100),
            body: Some(Body::EightBitMime),
            ..MailParams::default()
        },
        recipients: to
            .iter()
            .map(|t| {
                let p = RcptParams {
                    notify: Some(Notify {
                        failure: true,
                        ..Notify::default()
                    }),
                    orcpt: None,
                };
                (mbox(t), p)
            })
            .collect(),
        utf8_required: false,
    }
}

/// A client and a server session wired together in memory.
struct Pair {
    c: ClientSession,
    s: Session,
    /// Messages the server received (wire format).
    received: Vec<Vec<u8>>,
    current: Vec<u8>,
    /// Client actions, in order.
    log: Vec<ClientAction>,
    /// Content the client sends when asked.
    content: Vec<u8>,
    /// Bytes the client wrote, all of them.
    client_wrote: Vec<u8>,
    /// How much of `content` was given to the client, while sending it.
    sending: Option<usize>,
}

impl Pair {
    fn new(scfg: ServerConfig, ccfg: ClientConfig) -> Self {
        Pair {
            c: ClientSession::new(ccfg, false),
            s: Session::new(Arc::new(scfg), false),
            received: Vec::new(),
            current: Vec::new(),
            log: Vec::new(),
            content: b"Subject: t\r\n\r\n.dot\r\nbody\r\n".to_vec(),
            client_wrote: Vec::new(),
            sending: None,
        }
    }

    /// Moves bytes both ways until nothing happens.
    fn run(&mut self) {
        for _ in 0..1000 {
            let mut progress = false;
            let sout = self.s.take_output();
            if !sout.is_empty() {
                progress = true;
                let n = self.c.feed(&sout);
                assert!(n == sout.len() || self.c.is_closed() || !self.c.tls_active());
            }
            while let Some(a) = self.c.poll_action() {
                progress = true;
                match &a {
                    ClientAction::SendContent => self.sending = Some(0),
                    ClientAction::StartTls => {
                        self.c.tls_established();
                    }
                    _ => {}
                }
                self.log.push(a);
            }
            // One to five bytes at a time, as fast as the client takes
            // them, given and read in turn (`send_content_from` offered
            // more room than the read fills): with BDAT each is a chunk.
            while let Some(pos) = self.sending.filter(|_| self.c.wants_content()) {
                progress = true;
                if pos < self.content.len() {
                    let end = (pos + 1 + pos % 5).min(self.content.len());
                    let piece = self.content[pos..end].to_vec();
                    if pos % 10 == 0 {
                        self.c.send_content(&piece);
                    } else {
                        let n = self
                            .c
                            .send_content_from(piece.len() + 3, |buf| {
                                buf[..piece.len()].copy_from_slice(&piece);
                                Ok::<_, ()>(piece.len())
                            })
                            .unwrap();
                        assert_eq!(n, piece.len());
                    }
                    self.sending = Some(end);
                } else {
                    self.c.end_content();
                    self.sending = None;
                }
            }
            let cout = self.c.take_output();
            if !cout.is_empty() {
                progress = true;
                self.client_wrote.extend_from_slice(&cout);
                let mut at = 0;
                loop {
                    at += self.s.feed(&cout[at..]);
                    let mut acted = false;
                    while let Some(a) = self.s.poll_action() {
                        acted = true;
                        self.server_action(a);
                    }
                    if at >= cout.len() || !acted {
                        break;
                    }
                }
            }
            if !progress {
                return;
            }
        }
        panic!("no quiescence");
    }

    fn server_action(&mut self, a: ServerAction) {
        let reply = match a {
            ServerAction::CheckSender { from, .. } => {
                if from.to_string().contains("reject") {
                    Reply::enhanced(550, StatusCode::NOT_AUTHORIZED, "no")
                } else {
                    Reply::ok()
                }
            }
            ServerAction::CheckRecipient { to, .. } => {
                if to.local.starts_with("reject") {
                    Reply::enhanced(550, StatusCode::USER_UNKNOWN, "unknown")
                } else {
                    Reply::ok()
                }
            }
            ServerAction::CheckData { .. } => {
                if self
                    .s
                    .sender()
                    .is_some_and(|p| p.to_string().contains("nodata"))
                {
                    Reply::enhanced(554, StatusCode::NOT_AUTHORIZED, "no data")
                } else {
                    Reply::new(354, None, "go")
                }
            }
            ServerAction::Data(d) => {
                self.current.extend_from_slice(&d);
                return;
            }
            ServerAction::MessageEnd(_) => {
                self.received.push(std::mem::take(&mut self.current));
                Reply::enhanced(250, StatusCode::OK, "queued")
            }
            ServerAction::StartTls => {
                self.s.tls_established();
                return;
            }
            _ => return,
        };
        self.s.decide(reply).unwrap();
    }

    fn done_codes(&self) -> Vec<u16> {
        self.log
            .iter()
            .filter_map(|a| match a {
                ClientAction::MessageDone(r) => Some(r.code),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn pipelined_messages_over_one_connection() {
    let scfg = ServerConfig {
        chunking: false,
        ..ServerConfig::default()
    };
    let mut p = Pair::new(scfg, ClientConfig::default());
    p.run();
    assert!(p.c.is_ready());
    assert!(p.c.capabilities().unwrap().pipelining);
    assert!(p
        .c
        .send_message(&env("a@x.com", &["b@y.com", "reject@y.com"])));
    // One group: MAIL, both RCPTs and DATA before any reply.
    let group = String::from_utf8(p.c.output.clone()).unwrap();
    assert_eq!(group.matches("\r\n").count(), 4, "{group}");
    assert!(group.starts_with(
        "MAIL FROM:<a@x.com> SIZE=100 BODY=8BITMIME\r\nRCPT TO:<b@y.com> NOTIFY=FAILURE\r\n"
    ));
    p.run();
    assert!(p.c.send_message(&env("c@x.com", &["d@y.com"])));
    p.run();
    p.c.quit();
    p.run();
    assert!(p.c.is_closed() && p.s.is_closed());
    assert_eq!(
        p.received,
        [p.content.clone(), p.content.clone()],
        "wire format round trip"
    );
    assert_eq!(p.done_codes(), [250, 250]);
    let rcpt: Vec<u16> = p
        .log
        .iter()
        .filter_map(|a| match a {
            ClientAction::Recipient { reply, .. } => Some(reply.code),
            _ => None,
        })
        .collect();
    assert_eq!(rcpt, [250, 550, 250]);
    assert_eq!(
        p.s.stats().summary(),
        "ehlo=1 mail=2 rcpt=2/3 data=2 quit=1 commands=8/9"
    );
}

#[test]
fn without_pipelining_one_command_at_a_time() {
    let scfg = ServerConfig {
        pipelining: false,
        dsn: false,
        chunking: false,
        ..ServerConfig::default()
    };
    let mut p = Pair::new(scfg, ClientConfig::default());
    p.run();
    p.c.send_message(&env("a@x.com", &["reject@y.com", "reject2@y.com"]));
    assert_eq!(
        p.c.output,
        b"MAIL FROM:<a@x.com> SIZE=100 BODY=8BITMIME\r\n"
    );
    p.run();
    // No DATA was sent: every recipient was refused.
    assert!(!String::from_utf8_lossy(&p.client_wrote).contains("DATA"));
    assert_eq!(p.done_codes(), [554]);
    assert!(p.c.is_ready());
    // NOTIFY dropped: the server has no DSN.
    assert!(!String::from_utf8_lossy(&p.client_wrote).contains("NOTIFY"));
    p.c.send_message(&env("a@x.com", &["b@y.com"]));
    p.run();
    assert_eq!(p.received.len(), 1);
    // MAIL was accepted in the first transaction and never finished: RSET first.
    assert!(String::from_utf8_lossy(&p.client_wrote).contains("RSET\r\nMAIL"));
}

#[test]
fn refusals_and_rset() {
    let mut p = Pair::new(ServerConfig::default(), ClientConfig::default());
    p.run();
    p.c.send_message(&env("reject@x.com", &["b@y.com"]));
    p.run();
    assert!(p
        .log
        .iter()
        .any(|a| matches!(a, ClientAction::SenderRefused(_))));
    assert_eq!(p.done_codes(), [550]);
    p.c.send_message(&env("nodata@x.com", &["b@y.com"]));
    p.run();
    assert_eq!(p.done_codes(), [550, 554]);
    p.c.send_message(&env("a@x.com", &["b@y.com"]));
    p.run();
    assert_eq!(p.done_codes(), [550, 554, 250]);
    // RSET before the second message (a chunk without LAST went after
    // the refused MAIL: the server holds BDAT state) and before the third
    // (its transaction was open when its first chunk was refused).
    let wrote = String::from_utf8_lossy(&p.client_wrote).to_string();
    assert_eq!(wrote.matches("RSET").count(), 2, "{wrote}");
}

#[test]
fn starttls_with_server() {
    let scfg = ServerConfig {
        tls: TlsPolicy::Encrypt,
        ..ServerConfig::default()
    };
    let ccfg = ClientConfig {
        tls: ClientTls::Required,
        ..ClientConfig::default()
    };
    let mut p = Pair::new(scfg, ccfg);
    p.run();
    assert!(p.c.tls_active() && p.s.tls_active());
    assert!(p.c.is_ready());
    assert!(!p.c.capabilities().unwrap().starttls);
    p.c.send_message(&env("a@x.com", &["b@y.com"]));
    p.run();
    assert_eq!(p.done_codes(), [250]);
}

#[test]
fn tls_required_but_not_offered() {
    let ccfg = ClientConfig {
        tls: ClientTls::Required,
        ..ClientConfig::default()
    };
    let mut p = Pair::new(ServerConfig::default(), ccfg);
    p.run();
    assert!(p
        .log
        .contains(&ClientAction::Failed(ClientError::TlsUnavailable(None))));
    assert!(p.c.is_closed());
}

/// Feeds scripted server replies; returns what the client wrote after each.
fn script(c: &mut ClientSession, replies: &[&str]) -> Vec<String> {
    replies
        .iter()
        .map(|r| {
            let bytes = r.replace('\n', "\r\n");
            c.feed(bytes.as_bytes());
            String::from_utf8(c.take_output()).unwrap()
        })
        .collect()
}

fn actions(c: &mut ClientSession) -> Vec<ClientAction> {
    std::iter::from_fn(|| c.poll_action()).collect()
}

#[test]
fn helo_fallback() {
    let mut c = ClientSession::new(ClientConfig::default(), false);
    let wrote = script(&mut c, &["220 old\n", "502 what\n", "250 old\n"]);
    assert_eq!(wrote, ["EHLO localhost\r\n", "HELO localhost\r\n", ""]);
    assert!(c.is_ready() && c.capabilities().is_none());
    c.send_message(&env("a@x.com", &["b@y.com"]));
    // No ESMTP: no parameters, no pipelining.
    assert_eq!(c.take_output(), b"MAIL FROM:<a@x.com>\r\n");
}

#[test]
fn scripted_failures() {
    let mut c = ClientSession::new(ClientConfig::default(), false);
    script(&mut c, &["554 go away\n"]);
    assert!(matches!(
        actions(&mut c)[0],
        ClientAction::Failed(ClientError::Greeting(_))
    ));
    assert_eq!(c.take_output(), b"");

    // A 421 greeting is a refusal to talk too (Postfix logs it so), and
    // the server is gone: no QUIT.
    let mut c = ClientSession::new(ClientConfig::default(), false);
    script(&mut c, &["421 4.7.0 too many connections\n"]);
    assert!(matches!(
        actions(&mut c)[0],
        ClientAction::Failed(ClientError::Greeting(_))
    ));
    assert!(c.is_closed());
    assert_eq!(c.take_output(), b"");

    // 421 in the middle of a pipelined transaction.
    let mut c = ClientSession::new(ClientConfig::default(), false);
    script(&mut c, &["220 x\n", "250-x\n250 PIPELINING\n"]);
    actions(&mut c);
    c.send_message(&env("a@x.com", &["b@y.com"]));
    script(&mut c, &["250 ok\n421 4.3.2 shutting down\n"]);
    let a = actions(&mut c);
    assert!(
        matches!(a[0], ClientAction::Failed(ClientError::ServerClosing(_))),
        "{a:?}"
    );
    assert!(c.is_closed());

    // An endless multi-line reply is an error, not unbounded memory.
    let cfg = ClientConfig {
        max_reply_lines: 10,
        ..ClientConfig::default()
    };
    let mut c = ClientSession::new(cfg, false);
    c.feed("220-x\r\n".repeat(50).as_bytes());
    assert!(
        actions(&mut c).contains(&ClientAction::Failed(ClientError::BadReply(
            ReplyError::TooManyLines
        )))
    );

    // 354 with no recipient accepted: an empty message, its reply ignored.
    let mut c = ClientSession::new(ClientConfig::default(), false);
    script(&mut c, &["220 x\n", "250-x\n250 PIPELINING\n"]);
    actions(&mut c);
    c.send_message(&env("a@x.com", &["b@y.com"]));
    c.take_output();
    let wrote = script(
        &mut c,
        &["250 ok\n550 no\n354 go\n", "554 no valid recipients\n"],
    );
    assert_eq!(wrote, [".\r\n", ""]);
    let a = actions(&mut c);
    assert!(matches!(a.last(), Some(ClientAction::Ready)), "{a:?}");

    // SMTPUTF8 asked for but not needed (all ASCII), not offered: the
    // message goes as plain mail, as Postfix sends it.
    let mut c = ClientSession::new(ClientConfig::default(), false);
    script(&mut c, &["220 x\n", "250 x\n"]);
    actions(&mut c);
    let mut e = env("a@x.com", &["b@y.com"]);
    e.params.smtputf8 = true;
    c.send_message(&e);
    let mail = String::from_utf8(c.take_output()).unwrap();
    assert!(mail.starts_with("MAIL FROM:<a@x.com>"), "{mail}");
    assert!(!mail.contains("SMTPUTF8"), "{mail}");

    // SMTPUTF8 needed, not offered: fails locally.
    let mut c = ClientSession::new(ClientConfig::default(), false);
    script(&mut c, &["220 x\n", "250 x\n"]);
    actions(&mut c);
    let mut e = env("a@x.com", &["b@y.com"]);
    e.params.smtputf8 = true;
    e.utf8_required = true;
    c.send_message(&e);
    assert_eq!(c.take_output(), b"");
    let a = actions(&mut c);
    assert_eq!(a[0], ClientAction::Unsent(Unsent::Smtputf8Required));
    assert!(
        matches!(&a[1], ClientAction::MessageDone(r) if r.code == 553),
        "{a:?}"
    );
    let (code, text) = Unsent::Smtputf8Required.status("mx[192.0.2.1]:25");
    assert_eq!(code, StatusCode::UTF8_REQUIRED);
    assert_eq!(
        text,
        "SMTPUTF8 is required, but was not offered by host mx[192.0.2.1]:25"
    );
    // A reply nobody asked for.
    script(&mut c, &["250 surprise\n"]);
    assert!(matches!(
        actions(&mut c)[0],
        ClientAction::Failed(ClientError::Unexpected(_))
    ));
}

#[test]
fn content_without_final_crlf_is_terminated() {
    let mut c = ClientSession::new(ClientConfig::default(), false);
    script(&mut c, &["220 x\n", "250-x\n250 PIPELINING\n"]);
    c.send_message(&env("a@x.com", &["b@y.com"]));
    c.take_output();
    script(&mut c, &["250 a\n250 b\n354 go\n"]);
    assert!(actions(&mut c).contains(&ClientAction::SendContent));
    c.send_content(b"abc");
    c.end_content();
    assert_eq!(c.take_output(), b"abc\r\n.\r\n");
    script(&mut c, &["250 queued\n"]);
    assert!(actions(&mut c)
        .iter()
        .any(|a| matches!(a, ClientAction::MessageDone(r) if r.code == 250)));
}

#[test]
fn unstuffing_across_every_split() {
    let wire = b"..a\r\n...\r\nb.c\r\n.\r\n\r\n..\r\nend";
    let want = b".a\r\n..\r\nb.c\r\n\r\n\r\n.\r\nend";
    for cut in 0..=wire.len() {
        for cut2 in cut..=wire.len() {
            let mut out = Vec::new();
            let mut mid = false;
            for piece in [&wire[..cut], &wire[cut..cut2], &wire[cut2..]] {
                mid = unstuff(piece, mid, &mut out);
            }
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(want),
                "cuts {cut} {cut2}"
            );
        }
    }
}

#[test]
fn bdat_round_trip_with_dots_and_a_bare_last_line() {
    for pipelining in [true, false] {
        let scfg = ServerConfig {
            pipelining,
            ..ServerConfig::default()
        };
        let mut p = Pair::new(scfg, ClientConfig::default());
        // Spool form: stuffed, the last line without CRLF.
        p.content =
            b"Subject: t\r\n\r\n..leading dot\r\n..\r\n...\r\nmid.dot\r\n\xc3\xa9t\xe9\r\nlast"
                .to_vec();
        p.run();
        assert!(p.c.uses_bdat());
        assert!(p
            .c
            .send_message(&env("a@x.com", &["b@y.com", "reject@y.com"])));
        p.run();
        assert_eq!(p.done_codes(), [250], "pipelining {pipelining}");
        let wrote = String::from_utf8_lossy(&p.client_wrote).to_string();
        assert!(!wrote.contains("DATA\r\n"), "{wrote}");
        // The server's BDAT receiver stuffs again for its spool: the same
        // bytes as the sender's spool, plus the CRLF the last line lacked.
        let mut want = p.content.clone();
        want.extend_from_slice(b"\r\n");
        assert_eq!(p.received, [want]);
        // On the wire the chunks are not stuffed.
        let (payload, chunks) = bdat_payload(&p.client_wrote);
        assert_eq!(
            String::from_utf8_lossy(&payload),
            "Subject: t\r\n\r\n.leading dot\r\n.\r\n..\r\nmid.dot\r\n\u{e9}t\u{fffd}\r\nlast\r\n"
        );
        assert!(chunks > 2 && wrote.contains(" LAST\r\n"), "{wrote}");
        // A second message on the same connection.
        assert!(p.c.send_message(&env("c@x.com", &["d@y.com"])));
        p.run();
        assert_eq!(p.done_codes(), [250, 250]);
        assert_eq!(p.received.len(), 2);
    }
}

/// The bytes of every BDAT chunk the client wrote, and how many chunks.
fn bdat_payload(wrote: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut chunks = 0;
    let mut rest = wrote;
    while let Some(at) = rest.windows(5).position(|w| w == b"BDAT ") {
        rest = &rest[at + 5..];
        let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size: usize = std::str::from_utf8(&rest[..eol])
            .unwrap()
            .trim_end_matches(" LAST")
            .parse()
            .unwrap();
        out.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
        rest = &rest[eol + 2 + size..];
        chunks += 1;
    }
    (out, chunks)
}

#[test]
fn discarded_chunking_means_data() {
    let ccfg = ClientConfig {
        discard_ehlo_keywords: vec!["CHUNKING".into()],
        ..ClientConfig::default()
    };
    let mut p = Pair::new(ServerConfig::default(), ccfg);
    p.run();
    assert!(!p.c.uses_bdat());
    p.c.send_message(&env("a@x.com", &["b@y.com"]));
    p.run();
    assert_eq!(p.done_codes(), [250]);
    let wrote = String::from_utf8_lossy(&p.client_wrote).to_string();
    assert!(
        wrote.contains("DATA\r\n") && !wrote.contains("BDAT"),
        "{wrote}"
    );
    assert_eq!(p.received, [p.content.clone()]);
}

/// Runs a client golden dialog: `S: line` is a server reply line (CRLF
/// added), `send: from to...` starts a message, `chunk: text` gives content
/// (`\r`, `\n` and `\xNN` escapes), `end` ends it. The transcript shows the
/// client's bytes (`C:`), the replies (`S:`) and the actions (`A:`).
fn run_client_golden(text: &str) -> String {
    // The dialogs' servers lack 8BITMIME; their content is not MIME.
    let config = ClientConfig {
        mime_output_conversion: false,
        ..ClientConfig::default()
    };
    let mut c = ClientSession::new(config, false);
    let mut out = String::new();
    let unescape = |t: &str| -> Vec<u8> {
        let mut v = Vec::new();
        let b = t.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match (b[i], b.get(i + 1)) {
                (b'\\', Some(b'r')) => {
                    v.push(b'\r');
                    i += 2;
                }
                (b'\\', Some(b'n')) => {
                    v.push(b'\n');
                    i += 2;
                }
                (b'\\', Some(b'x')) => {
                    v.push(u8::from_str_radix(&t[i + 2..i + 4], 16).unwrap());
                    i += 4;
                }
                (x, _) => {
                    v.push(x);
                    i += 1;
                }
            }
        }
        v
    };
    let show = |bytes: &[u8], out: &mut String| {
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            out.push_str("C: ");
            out.push_str(&line.escape_ascii().to_string());
            out.push('\n');
        }
    };
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(reply) = line.strip_prefix("S: ") {
            out.push_str(&format!("S: {reply}\n"));
            c.feed(format!("{reply}\r\n").as_bytes());
        } else if let Some(args) = line.strip_prefix("send: ") {
            let mut w = args.split_whitespace();
            let from = w.next().unwrap();
            let to: Vec<&str> = w.collect();
            let ok = c.send_message(&env(from, &to));
            out.push_str(&format!("> send_message: {ok}\n"));
        } else if let Some(t) = line.strip_prefix("chunk: ") {
            out.push_str(&format!(
                "> send_content (wants_content: {})\n",
                c.wants_content()
            ));
            c.send_content(&unescape(t));
        } else if line == "end" {
            out.push_str(&format!(
                "> end_content (wants_content: {})\n",
                c.wants_content()
            ));
            c.end_content();
        } else {
            panic!("bad golden line: {line}");
        }
        while let Some(a) = c.poll_action() {
            out.push_str(&format!("A: {a:?}\n"));
        }
        show(&c.take_output(), &mut out);
    }
    out
}

#[test]
fn client_golden_dialogs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/client");
    let regen = std::env::var_os("SLUICE_REGEN").is_some_and(|v| v == "1");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("testdata/client directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "in"))
        .collect();
    names.sort();
    assert!(!names.is_empty());
    let mut failed = Vec::new();
    for path in names {
        let got = run_client_golden(&std::fs::read_to_string(&path).unwrap());
        let ref_path = path.with_extension("ref");
        if regen {
            std::fs::write(&ref_path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&ref_path)
            .unwrap_or_else(|_| panic!("{} missing: run with SLUICE_REGEN=1", ref_path.display()));
        if want != got {
            eprintln!("--- {} differs; got:\n{got}", ref_path.display());
            failed.push(ref_path);
        }
    }
    assert!(
        failed.is_empty(),
        "golden mismatches (SLUICE_REGEN=1 to accept): {failed:?}"
    );
}

#[test]
fn lmtp_replies_per_recipient_after_the_content() {
    let lmtp = ClientConfig {
        lmtp: true,
        ..ClientConfig::default()
    };
    let mut c = ClientSession::new(lmtp.clone(), false);
    // LHLO; CHUNKING and STARTTLS offered are not used.
    let wrote = script(
        &mut c,
        &[
            "220 lmtp\n",
            "250-x\n250-PIPELINING\n250-CHUNKING\n250 STARTTLS\n",
        ],
    );
    assert_eq!(wrote, ["LHLO localhost\r\n", ""]);
    assert!(c.is_ready());
    actions(&mut c);
    c.send_message(&env("a@x.com", &["b@y.com", "c@y.com", "d@y.com"]));
    let out = String::from_utf8(c.take_output()).unwrap();
    assert!(out.ends_with("DATA\r\n"), "{out}");
    script(&mut c, &["250 ok\n250 b\n550 5.1.1 no c\n250 d\n354 go\n"]);
    c.send_content(b"x\r\n");
    c.end_content();
    assert_eq!(c.take_output(), b"x\r\n.\r\n");
    // Only two replies are due: one per accepted recipient, in order.
    script(&mut c, &["250 2.0.0 b saved\n"]);
    let a = actions(&mut c);
    assert!(
        matches!(&a[..], [.., ClientAction::Delivered { index: 0, reply }] if reply.code == 250),
        "{a:?}"
    );
    assert!(!c.is_ready());
    script(&mut c, &["552 5.2.2 d over quota\n"]);
    let a = actions(&mut c);
    assert!(
        matches!(&a[0], ClientAction::Delivered { index: 2, reply } if reply.code == 552),
        "{a:?}"
    );
    assert!(matches!(a[1], ClientAction::MessageDone(_)), "{a:?}");
    assert!(matches!(a[2], ClientAction::Ready), "{a:?}");

    // No HELO fallback: a refused LHLO ends the session.
    let mut c = ClientSession::new(lmtp, false);
    script(&mut c, &["220 x\n", "500 what\n"]);
    assert!(matches!(
        actions(&mut c)[0],
        ClientAction::Failed(ClientError::Helo(_))
    ));
}

#[test]
fn a_probe_stops_after_rcpt_with_rset_and_a_message_may_follow() {
    for pipelining in [true, false] {
        let scfg = ServerConfig {
            pipelining,
            ..ServerConfig::default()
        };
        let mut p = Pair::new(scfg, ClientConfig::default());
        p.run();
        assert!(p
            .c
            .send_probe(&env("a@x.com", &["b@y.com", "reject@y.com"])));
        p.run();
        let wrote = String::from_utf8_lossy(&p.client_wrote).to_string();
        assert!(
            !wrote.contains("DATA") && !wrote.contains("BDAT"),
            "{wrote}"
        );
        assert!(wrote.ends_with("RCPT TO:<reject@y.com> NOTIFY=FAILURE\r\nRSET\r\n"));
        let rcpt: Vec<(usize, u16)> = p
            .log
            .iter()
            .filter_map(|a| match a {
                ClientAction::Recipient { index, reply } => Some((*index, reply.code)),
                _ => None,
            })
            .collect();
        assert_eq!(rcpt, [(0, 250), (1, 550)]);
        assert_eq!(p.done_codes().len(), 1);
        assert!(p.c.is_ready() && p.received.is_empty());
        // The RSET ended the probe's transaction: no second RSET before MAIL.
        p.c.send_message(&env("a@x.com", &["b@y.com"]));
        p.run();
        assert_eq!(p.received.len(), 1);
        let wrote = String::from_utf8_lossy(&p.client_wrote).to_string();
        assert_eq!(wrote.matches("RSET").count(), 1, "{wrote}");
    }
}

#[test]
fn long_lines_are_broken_as_postfix_does_with_data_and_with_bdat() {
    let long: String = (0..3000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let exact = "e".repeat(500);
    let dotted = format!(".{}", "d".repeat(599));
    let header = format!("Subject: {}", "h".repeat(700));
    let queued = format!("{header}\r\n\r\n{long}\r\n{exact}\r\n{dotted}\r\nend\r\n");
    // The spool's form: dot-stuffed.
    let spool = queued.replace("\r\n.", "\r\n..");
    for chunking in [false, true] {
        let scfg = ServerConfig {
            chunking,
            ..ServerConfig::default()
        };
        let ccfg = ClientConfig {
            line_length_limit: 500,
            ..ClientConfig::default()
        };
        let mut p = Pair::new(scfg, ccfg);
        p.content = spool.as_bytes().to_vec();
        p.run();
        assert_eq!(p.c.uses_bdat(), chunking);
        assert!(p.c.send_message(&env("a@x.com", &["b@y.com"])));
        p.run();
        // BDAT sizes that left out the breaks would desynchronise the server.
        assert_eq!(p.done_codes(), [250], "chunking {chunking}");
        let got = String::from_utf8(p.received[0].clone()).unwrap();
        for l in got.split("\r\n") {
            let n = l.len() - usize::from(l.starts_with('.'));
            assert!(n <= 500, "chunking {chunking}: a line of {n}");
        }
        // header 709: 1 break; 3000 = 500 + 5 * 499 + 5: 6; 500: none; 600: 1.
        assert_eq!(got.matches("\r\n ").count(), 8, "chunking {chunking}");
        assert_eq!(got.replace("\r\n ", ""), spool, "chunking {chunking}");
        assert!(got.contains(&format!("\r\n{exact}\r\n")));
        assert!(got.starts_with(&format!("Subject: {}\r\n h", "h".repeat(491))));
        let d = |n| "d".repeat(n);
        assert!(
            got.contains(&format!("\r\n..{}\r\n {}\r\n", d(499), d(100))),
            "a stuffing dot is not counted: chunking {chunking}"
        );
    }
}

/// The spool's wire form of an 8-bit message: one line starts with a dot.
const EIGHT_BIT_WIRE: &[u8] = b"Subject: s\r\nMIME-Version: 1.0\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n\
caf\xc3\xa9\r\n..dot caf\xc3\xa9\r\n";

/// The same with DATA to a server without 8BITMIME: converted, dot-stuffed again.
const EIGHT_BIT_CONVERTED: &[u8] = b"Subject: s\r\nMIME-Version: 1.0\r\n\
Content-Type: text/plain; charset=utf-8\r\n\
Content-Transfer-Encoding: quoted-printable\r\n\r\n\
caf=C3=A9\r\n..dot caf=C3=A9\r\n";

/// The content a session writes for `wire`, given in pieces of `step`, to a
/// server that says `ehlo`; also the MAIL command.
fn content_sent(ccfg: ClientConfig, ehlo: &str, wire: &[u8], step: usize) -> (String, Vec<u8>) {
    let mut c = ClientSession::new(ccfg, false);
    script(&mut c, &["220 x\n", ehlo]);
    actions(&mut c);
    c.send_message(&env("a@x.com", &["b@y.com"]));
    let mail = String::from_utf8(c.take_output()).unwrap();
    let bdat = c.uses_bdat();
    if bdat {
        script(&mut c, &["250 a\n250 b\n"]);
    } else {
        script(&mut c, &["250 a\n250 b\n354 go\n"]);
    }
    assert!(actions(&mut c).contains(&ClientAction::SendContent));
    for piece in wire.chunks(step) {
        c.send_content(piece);
    }
    c.end_content();
    (mail, c.take_output())
}

#[test]
fn eight_bit_content_is_converted_for_a_server_without_8bitmime() {
    let pipe = "250-x\n250-SIZE 1000\n250 PIPELINING\n";
    for step in [1, 5, EIGHT_BIT_WIRE.len()] {
        let (mail, out) = content_sent(ClientConfig::default(), pipe, EIGHT_BIT_WIRE, step);
        // No BODY=, and no SIZE: the converted message is larger.
        assert_eq!(mail.lines().next(), Some("MAIL FROM:<a@x.com>"));
        assert_eq!(out, [EIGHT_BIT_CONVERTED, b".\r\n"].concat(), "step {step}");
    }
    // Without BODY= (a client that never says 8BITMIME) the content may
    // still be converted: no SIZE either, as Postfix.
    let mut c = ClientSession::new(ClientConfig::default(), false);
    script(&mut c, &["220 x\n", pipe]);
    actions(&mut c);
    let mut e = env("a@x.com", &["b@y.com"]);
    e.params.body = None;
    c.send_message(&e);
    let mail = String::from_utf8(c.take_output()).unwrap();
    assert_eq!(mail.lines().next(), Some("MAIL FROM:<a@x.com>"), "{mail}");
    // Sent as it is to a server with 8BITMIME, or with SMTPUTF8 (as
    // Postfix), or with the conversion off.
    for (ehlo, on) in [
        ("250-x\n250-8BITMIME\n250 PIPELINING\n", true),
        ("250-x\n250-SMTPUTF8\n250 PIPELINING\n", true),
        (pipe, false),
    ] {
        let ccfg = ClientConfig {
            mime_output_conversion: on,
            ..ClientConfig::default()
        };
        let (_, out) = content_sent(ccfg, ehlo, EIGHT_BIT_WIRE, 7);
        assert_eq!(out, [EIGHT_BIT_WIRE, b".\r\n"].concat(), "{ehlo}");
    }
}

#[test]
fn bdat_chunks_are_sized_after_conversion() {
    let ehlo = "250-x\n250-CHUNKING\n250 PIPELINING\n";
    let (_, out) = content_sent(
        ClientConfig::default(),
        ehlo,
        EIGHT_BIT_WIRE,
        EIGHT_BIT_WIRE.len(),
    );
    let mut plain = Vec::new();
    unstuff(EIGHT_BIT_CONVERTED, false, &mut plain);
    let want = [format!("BDAT {} LAST\r\n", plain.len()).as_bytes(), &plain].concat();
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&want)
    );
}

#[test]
fn content_that_cannot_be_converted_drops_the_connection() {
    let mut wire = Vec::new();
    for i in 0..=crate::mime8::NESTING_LIMIT + 1 {
        wire.extend_from_slice(
            format!("Content-Type: multipart/mixed; boundary=b{i}\r\n\r\n--b{i}\r\n").as_bytes(),
        );
    }
    let mut c = ClientSession::new(ClientConfig::default(), false);
    script(&mut c, &["220 x\n", "250-x\n250 PIPELINING\n"]);
    actions(&mut c);
    c.send_message(&env("a@x.com", &["b@y.com"]));
    c.take_output();
    script(&mut c, &["250 a\n250 b\n354 go\n"]);
    actions(&mut c);
    c.send_content(&wire);
    c.end_content();
    assert_eq!(c.take_output(), b"", "no end of data, no QUIT");
    let a = actions(&mut c);
    assert_eq!(a[0], ClientAction::Unsent(Unsent::Mime(MimeError::Nesting)));
    assert!(
        matches!(&a[1], ClientAction::MessageDone(r) if r.code == 554),
        "{a:?}"
    );
    assert_eq!(a[2], ClientAction::Close);
    assert!(c.is_closed());
}
