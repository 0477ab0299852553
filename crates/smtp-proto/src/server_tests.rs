//! Tests of the server session: a simulated shell with a scripted policy,
//! dialog tables, chunking invariance, hostile input, proptests and the golden
//! dialog files `testdata/*.in` → `*.ref` (regenerated with `SLUICE_REGEN=1`).

use super::*;
use crate::reply::ReplyParser;
use proptest::prelude::*;

/// A simulated smtpd shell: bounded input buffer, scripted policy answers.
struct Shell {
    s: Session,
    /// Everything the server wrote.
    out: Vec<u8>,
    /// Non-data actions, for comparisons across chunkings.
    actions: Vec<String>,
    /// Messages as received (wire format).
    messages: Vec<Vec<u8>>,
    current: Vec<u8>,
    /// Human-readable dialog: `S:` server lines, `A:` actions, `M:` message lines.
    transcript: String,
    /// STARTTLS seen: input is plaintext injection until the segment ends.
    tls_pending: bool,
    buf: Vec<u8>,
}

fn escape(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b {
        match c {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s
}

impl Shell {
    fn new(cfg: ServerConfig) -> Self {
        Self::with_session(Session::new(Arc::new(cfg), false))
    }

    fn with_session(s: Session) -> Self {
        let mut sh = Shell {
            s,
            out: Vec::new(),
            actions: Vec::new(),
            messages: Vec::new(),
            current: Vec::new(),
            transcript: String::new(),
            tls_pending: false,
            buf: Vec::new(),
        };
        sh.pump();
        sh
    }

    fn policy(&self, a: &Action) -> Option<Reply> {
        let starts = |p: Option<&Path>, w: &str| {
            p.and_then(Path::mailbox)
                .is_some_and(|m| m.local.to_ascii_lowercase().starts_with(w))
        };
        Some(match a {
            Action::CheckSender { from, .. } if starts(Some(from), "reject") => {
                Reply::enhanced(550, StatusCode::NOT_AUTHORIZED, "Sender address rejected")
            }
            Action::CheckSender { .. } => Reply::enhanced(250, StatusCode::SENDER_OK, "Ok"),
            Action::CheckRecipient { to, .. } if to.local.starts_with("reject") => Reply::enhanced(
                550,
                StatusCode::USER_UNKNOWN,
                format!("<{to}>: Recipient address rejected: User unknown"),
            ),
            Action::CheckRecipient { to, .. } if to.local.starts_with("defer") => {
                Reply::enhanced(450, StatusCode::known(4, 2, 0), "Try again later")
            }
            Action::CheckRecipient { .. } => Reply::enhanced(250, StatusCode::RECIPIENT_OK, "Ok"),
            Action::CheckData { .. } if starts(self.s.sender(), "nodata") => {
                Reply::enhanced(554, StatusCode::NOT_AUTHORIZED, "Data refused")
            }
            Action::CheckData { .. } => Reply::new(354, None, "go"),
            Action::CheckUnknown { line } if line.contains("defer") => {
                Reply::enhanced(451, StatusCode::known(4, 7, 1), "Try again later")
            }
            Action::CheckUnknown { .. } => CommandError::Unrecognized.reply(),
            Action::MessageEnd(_) => Reply::enhanced(
                250,
                StatusCode::OK,
                format!("Ok: queued as TEST{}", self.messages.len()),
            ),
            _ => return None,
        })
    }

    /// Handles actions and output until the session needs more input.
    fn pump(&mut self) -> bool {
        let mut any = false;
        while let Some(a) = self.s.poll_action() {
            any = true;
            match &a {
                Action::Data(chunk) => {
                    self.current.extend_from_slice(chunk);
                    continue;
                }
                Action::MessageEnd(_) => {
                    let m = std::mem::take(&mut self.current);
                    for line in m.split_inclusive(|&b| b == b'\n') {
                        self.transcript.push_str(&format!("M: {}\n", escape(line)));
                    }
                    self.messages.push(m);
                }
                Action::TransactionAborted(_) => self.current.clear(),
                // The simulated clock jumps to the end of the sleep.
                Action::Sleep(_) => self.s.wake(),
                Action::StartTls => {
                    // The shell drops every buffered plaintext byte.
                    self.buf.clear();
                    self.tls_pending = true;
                }
                _ => {}
            }
            let text = format!("{a:?}");
            self.transcript.push_str(&format!("A: {text}\n"));
            self.actions.push(text);
            if let Some(reply) = self.policy(&a) {
                self.s.decide(reply).expect("a question was pending");
            }
        }
        let o = self.s.take_output();
        for line in o.split_inclusive(|&b| b == b'\n') {
            self.transcript.push_str(&format!("S: {}\n", escape(line)));
        }
        self.out.extend_from_slice(&o);
        any || !o.is_empty()
    }

    /// Feeds a segment of client input in pieces of the given sizes (cycled).
    fn send(&mut self, input: &[u8], pieces: &[usize]) {
        self.feed_only(input, pieces);
        self.end_segment();
    }

    /// The client's segment is over: a pending TLS handshake completes.
    fn end_segment(&mut self) {
        if self.tls_pending {
            self.tls_pending = false;
            self.s.tls_established();
            self.transcript.push_str("T: TLS established\n");
        }
    }

    fn feed_only(&mut self, input: &[u8], pieces: &[usize]) {
        let mut at = 0;
        let mut k = 0;
        while at < input.len() {
            let n = pieces[k % pieces.len()].max(1);
            k += 1;
            let end = at.saturating_add(n).min(input.len());
            if !self.tls_pending {
                self.buf.extend_from_slice(&input[at..end]);
            }
            at = end;
            self.drive();
        }
        self.drive();
    }

    fn drive(&mut self) {
        loop {
            let n = self.s.feed(&self.buf);
            self.buf.drain(..n);
            let acted = self.pump();
            if n == 0 && !acted {
                break;
            }
        }
    }

    fn replies(&self) -> Vec<u16> {
        let mut p = ReplyParser::default();
        let mut input = &self.out[..];
        let mut codes = Vec::new();
        while !input.is_empty() {
            let (n, r) = p.parse(input);
            input = &input[n..];
            if let Some(r) = r {
                codes.push(r.expect("server replies parse").code);
            }
        }
        codes
    }
}

fn dialog(cfg: ServerConfig, input: &[u8]) -> Shell {
    let mut sh = Shell::new(cfg);
    sh.send(input, &[input.len().max(1)]);
    sh
}

#[test]
fn basic_transaction() {
    let sh = dialog(
        ServerConfig::default(),
        b"EHLO c.example\r\nMAIL FROM:<a@b.com>\r\nRCPT TO:<c@d.com>\r\nDATA\r\nSubject: x\r\n\r\nbody\r\n..dot\r\n.\r\nQUIT\r\n",
    );
    assert_eq!(sh.replies(), [220, 250, 250, 250, 354, 250, 221]);
    assert_eq!(
        sh.messages,
        [b"Subject: x\r\n\r\nbody\r\n..dot\r\n".to_vec()]
    );
    assert!(sh.s.is_closed());
    assert_eq!(
        sh.s.stats().summary(),
        "ehlo=1 mail=1 rcpt=1 data=1 quit=1 commands=5"
    );
}

#[test]
fn state_errors() {
    for (input, want) in [
        (&b"MAIL FROM:<a@b.com>\r\n"[..], &[220, 250][..]),
        (b"HELO x\r\nRCPT TO:<a@b.com>\r\n", &[220, 250, 503]),
        (b"HELO x\r\nDATA\r\n", &[220, 250, 503]),
        (b"HELO x\r\nMAIL FROM:<>\r\nDATA\r\n", &[220, 250, 250, 503]),
        (
            b"HELO x\r\nMAIL FROM:<>\r\nMAIL FROM:<>\r\n",
            &[220, 250, 250, 503],
        ),
        (
            b"HELO x\r\nMAIL FROM:<>\r\nBDAT 3\r\nabcRSET\r\n",
            &[220, 250, 250, 503, 250],
        ),
        (b"AUTH PLAIN\r\n", &[220, 503]),
        (b"EXPN list\r\n", &[220, 502]),
        (b"STARTTLS\r\n", &[220, 502]),
        (b"VRFY root\r\nHELP\r\nNOOP\r\n", &[220, 252, 214, 250]),
        (b"FOO\r\nQUIT\r\n", &[220, 502, 221]),
    ] {
        let sh = dialog(ServerConfig::default(), input);
        assert_eq!(sh.replies(), want, "{}", escape(input));
    }
}

#[test]
fn helo_required() {
    let cfg = ServerConfig {
        helo_required: true,
        ..ServerConfig::default()
    };
    let sh = dialog(
        cfg,
        b"MAIL FROM:<a@b.com>\r\nHELO x\r\nMAIL FROM:<a@b.com>\r\n",
    );
    assert_eq!(sh.replies(), [220, 503, 250, 250]);
}

/// soft_bounce: every 5xx reply goes out as 4xx, 5.x.x as 4.x.x (Postfix's
/// smtpd_chat), whoever made it: here the protocol's own 503 5.5.1.
#[test]
fn soft_bounce_sends_every_5xx_as_4xx() {
    let cfg = ServerConfig {
        helo_required: true,
        soft_bounce: true,
        ..ServerConfig::default()
    };
    let sh = dialog(cfg, b"MAIL FROM:<a@b.com>\r\nHELO x\r\n");
    assert_eq!(sh.replies(), [220, 403, 250]);
}

#[test]
fn unknown_commands_are_asked_about_only_when_configured() {
    let input = b"EHLO x\r\nXYZZY defer me\r\nXYZZY\r\nMAIL FROM:<a@b.com>\r\n";
    let sh = dialog(ServerConfig::default(), input);
    assert_eq!(sh.replies(), [220, 250, 502, 502, 250]);
    assert!(!sh.actions.iter().any(|a| a.contains("CheckUnknown")));
    let cfg = ServerConfig {
        ask_unknown: true,
        ..ServerConfig::default()
    };
    let sh = dialog(cfg, input);
    assert_eq!(sh.replies(), [220, 250, 451, 502, 250]);
    assert!(
        sh.actions
            .iter()
            .any(|a| a.contains("CheckUnknown { line: \"XYZZY defer me\" }")),
        "{:?}",
        sh.actions
    );
}

#[test]
fn extension_checks() {
    let cfg = ServerConfig {
        dsn: false,
        smtputf8: false,
        eight_bit_mime: false,
        max_message_size: 1000,
        vrfy: VrfyMode::Disabled502,
        ..ServerConfig::default()
    };
    for (cmd, want) in [
        (&b"MAIL FROM:<a@b.com> RET=FULL\r\n"[..], 555),
        (b"MAIL FROM:<a@b.com> ENVID=x\r\n", 555),
        (b"MAIL FROM:<a@b.com> SMTPUTF8\r\n", 555),
        (b"MAIL FROM:<a@b.com> BODY=8BITMIME\r\n", 555),
        (b"MAIL FROM:<a@b.com> BODY=BINARYMIME\r\n", 555),
        (b"MAIL FROM:<a@b.com> SIZE=1001\r\n", 552),
        (b"MAIL FROM:<a@b.com> SIZE=1000\r\n", 250),
        (b"MAIL FROM:<a@b.com> BODY=7BIT\r\n", 250),
        (b"VRFY x\r\n", 502),
    ] {
        let mut input = b"EHLO x\r\n".to_vec();
        input.extend_from_slice(cmd);
        let sh = dialog(cfg.clone(), &input);
        assert_eq!(sh.replies().last(), Some(&want), "{}", escape(cmd));
    }
    let sh = dialog(
        cfg,
        b"EHLO x\r\nMAIL FROM:<>\r\nRCPT TO:<a@b.com> NOTIFY=NEVER\r\n",
    );
    assert_eq!(sh.replies().last(), Some(&555));
}

#[test]
fn ehlo_capabilities() {
    let cfg = ServerConfig {
        hostname: "mx.example".into(),
        tls: TlsPolicy::May,
        binarymime: true,
        ..ServerConfig::default()
    };
    let sh = dialog(cfg, b"EHLO c\r\n");
    let text = String::from_utf8(sh.out).unwrap();
    assert!(text.ends_with(
        "250-mx.example\r\n250-PIPELINING\r\n250-SIZE 10240000\r\n250-VRFY\r\n250-STARTTLS\r\n\
         250-ENHANCEDSTATUSCODES\r\n250-8BITMIME\r\n250-DSN\r\n250-SMTPUTF8\r\n250-CHUNKING\r\n250 BINARYMIME\r\n"
    ), "{text}");
}

#[test]
fn starttls_discards_pipelined_plaintext() {
    let cfg = ServerConfig {
        tls: TlsPolicy::Encrypt,
        ..ServerConfig::default()
    };
    let mut sh = Shell::new(cfg);
    // An attacker pipelines commands behind STARTTLS in the same packet.
    sh.send(b"EHLO c\r\nMAIL FROM:<a@b.com>\r\nSTARTTLS\r\nMAIL FROM:<evil@x.com>\r\nRCPT TO:<v@x.com>\r\n", &[100]);
    assert_eq!(sh.replies(), [220, 250, 530, 220]);
    assert!(sh.s.tls_active());
    assert_eq!(sh.s.helo_name(), None, "HELO forgotten after TLS");
    assert!(!sh.actions.iter().any(|a| a.contains("evil")));
    sh.send(
        b"MAIL FROM:<a@b.com>\r\nEHLO c\r\nSTARTTLS\r\nMAIL FROM:<a@b.com>\r\n",
        &[7],
    );
    assert_eq!(sh.replies()[4..], [250, 250, 554, 250]);
    let text = String::from_utf8_lossy(&sh.out);
    assert_eq!(
        text.matches("STARTTLS\r\n").count(),
        1,
        "not offered once active"
    );
}

#[test]
fn refusing_mode() {
    let cfg = Arc::new(ServerConfig::default());
    let refusal = Reply::enhanced(554, StatusCode::NOT_AUTHORIZED, "Access denied");
    let mut sh = Shell::with_session(Session::new_refusing(cfg, false, refusal));
    sh.send(b"EHLO x\r\nMAIL FROM:<a@b.com>\r\nQUIT\r\n", &[3]);
    assert_eq!(sh.replies(), [554, 503, 503, 221]);
    assert!(sh.s.is_closed());
}

#[test]
fn hard_error_limit() {
    let cfg = ServerConfig {
        hard_error_limit: 3,
        ..ServerConfig::default()
    };
    let sh = dialog(cfg, b"FOO\r\nBAR\r\nBAZ\r\nNOOP\r\nNOOP\r\n");
    assert_eq!(sh.replies(), [220, 502, 502, 502, 421]);
    assert!(sh.s.is_closed());
    assert!(sh.actions.iter().any(|a| a.contains("TooManyErrors")));
}

#[test]
fn command_and_junk_limits() {
    let cfg = ServerConfig {
        max_commands: 2,
        ..ServerConfig::default()
    };
    let sh = dialog(cfg, b"NOOP\r\nNOOP\r\nNOOP\r\nNOOP\r\n");
    assert_eq!(sh.replies(), [220, 250, 250, 421]);
    let cfg = ServerConfig {
        junk_command_limit: 2,
        hard_error_limit: 2,
        ..ServerConfig::default()
    };
    let sh = dialog(cfg, b"NOOP\r\nNOOP\r\nNOOP\r\nNOOP\r\nNOOP\r\n");
    assert_eq!(sh.replies(), [220, 250, 250, 250, 250, 421]);
}

#[test]
fn recipient_limit() {
    let cfg = ServerConfig {
        max_recipients: 2,
        ..ServerConfig::default()
    };
    let sh = dialog(
        cfg,
        b"HELO x\r\nMAIL FROM:<>\r\nRCPT TO:<a@x.com>\r\nRCPT TO:<reject@x.com>\r\nRCPT TO:<b@x.com>\r\nRCPT TO:<c@x.com>\r\n",
    );
    assert_eq!(sh.replies(), [220, 250, 250, 250, 550, 250, 452]);
    assert_eq!(
        sh.s.error_count(),
        1,
        "452 too many recipients is not an error"
    );
}

#[test]
fn line_limits_and_bare_lf_commands() {
    let cfg = ServerConfig {
        max_command_line: 20,
        ..ServerConfig::default()
    };
    let mut long = b"NOOP ".to_vec();
    long.extend_from_slice(&vec![b'x'; 10 << 20]);
    long.extend_from_slice(b"\r\nNOOP\r\nNOOP\nQUIT\r\n");
    let mut sh = Shell::new(cfg);
    sh.send(&long, &[65536]);
    // A bare LF ends a command even under Reject (Postfix's default).
    assert_eq!(sh.replies(), [220, 500, 250, 250, 221]);
    assert!(sh.s.line.capacity() < 1024, "line buffer stayed bounded");
    let cfg = ServerConfig {
        bare_newline: BareNewline::Normalize,
        ..ServerConfig::default()
    };
    let sh = dialog(cfg, b"NOOP\nQUIT\n");
    assert_eq!(sh.replies(), [220, 250, 221]);
    // Reported once per session, however many commands end so.
    let sh = dialog(ServerConfig::default(), b"NOOP\nNOOP\nNOOP\nQUIT\n");
    let noted = sh
        .actions
        .iter()
        .filter(|a| a.contains("BareNewlineInCommand"))
        .count();
    assert_eq!(noted, 1, "{:?}", sh.actions);
    let sh = dialog(ServerConfig::default(), b"NOOP\0\r\nNO\rOP\r\n");
    assert_eq!(sh.replies(), [220, 500, 500]);
}

/// Past smtpd_soft_error_limit every reply waits for the shell's timer:
/// the session asks for a sleep, holds the reply back and reads no more
/// input until woken; a delivered message forgives the errors (Postfix).
#[test]
fn soft_error_limit_holds_replies_until_woken() {
    let sleep = std::time::Duration::from_secs(3);
    let cfg = ServerConfig {
        soft_error_limit: 2,
        error_sleep: sleep,
        ..ServerConfig::default()
    };
    let mut s = Session::new(Arc::new(cfg), false);
    s.take_output();
    let input = b"FOO\r\nFOO\r\nFOO\r\nHELO x\r\n";
    let used = s.feed(input);
    assert_eq!(used, 15, "nothing after the held reply is read");
    assert_eq!(s.poll_action(), Some(Action::Sleep(sleep)));
    assert_eq!(s.poll_action(), None);
    assert!(s.is_sleeping());
    let now = String::from_utf8(s.take_output()).unwrap();
    assert_eq!(now.matches("502 5.5.2").count(), 2, "{now}");
    assert!(!s.has_output() && !s.should_flush());
    assert_eq!(s.feed(&input[used..]), 0);
    s.wake();
    assert!(s.should_flush());
    assert!(String::from_utf8(s.take_output())
        .unwrap()
        .starts_with("502 5.5.2"));
    // Still past the limit: the next reply, a good one, waits too.
    assert_eq!(s.feed(&input[used..]), 8);
    assert_eq!(s.poll_action(), Some(Action::Sleep(sleep)));
    s.wake();
    assert!(String::from_utf8(s.take_output())
        .unwrap()
        .starts_with("250 "));
    // A delivered message forgives them: no more sleeping.
    let mut sh = Shell::with_session(s);
    sh.send(
        b"MAIL FROM:<a@x.com>\r\nRCPT TO:<b@x.com>\r\nDATA\r\nx\r\n.\r\nNOOP\r\n",
        &[1000],
    );
    let sleeps = sh.actions.iter().filter(|a| a.starts_with("Sleep")).count();
    assert_eq!(
        sleeps, 2,
        "MAIL and RCPT waited, then none: {:?}",
        sh.actions
    );
    assert_eq!(sh.s.error_count(), 0);
}

/// With ask_vrfy the shell answers VRFY (a recipient lookup); without it,
/// or with VRFY disabled, the session answers itself.
#[test]
fn vrfy_is_asked_only_with_ask_vrfy() {
    let cfg = ServerConfig {
        ask_vrfy: true,
        ..ServerConfig::default()
    };
    let mut s = Session::new(Arc::new(cfg), false);
    s.take_output();
    assert_eq!(
        s.feed(b"VRFY ghost\r\nNOOP\r\n"),
        12,
        "NOOP waits for the answer"
    );
    let arg = "ghost".to_string();
    assert_eq!(s.poll_action(), Some(Action::CheckVrfy { arg }));
    let unknown = Reply::enhanced(550, StatusCode::USER_UNKNOWN, "<ghost@x>: User unknown");
    s.decide(unknown).unwrap();
    assert!(String::from_utf8(s.take_output())
        .unwrap()
        .starts_with("550 5.1.1 <ghost@x>"));
    assert_eq!(s.error_count(), 1);
    let sh = dialog(ServerConfig::default(), b"VRFY ghost\r\n");
    assert!(!sh.actions.iter().any(|a| a.starts_with("CheckVrfy")));
    assert_eq!(sh.replies(), [220, 252]);
    let off = ServerConfig {
        ask_vrfy: true,
        vrfy: VrfyMode::Disabled502,
        ..ServerConfig::default()
    };
    assert_eq!(dialog(off, b"VRFY ghost\r\n").replies(), [220, 502]);
}

#[test]
fn help_lists_only_what_is_offered() {
    let help = |cfg: ServerConfig, tls: bool| {
        let mut s = Session::new(Arc::new(cfg), tls);
        s.take_output();
        s.feed(b"HELP\r\n");
        String::from_utf8(s.take_output()).unwrap()
    };
    let plain = help(ServerConfig::default(), false);
    assert!(plain.starts_with("214 2.0.0 Commands:"), "{plain}");
    assert!(
        !plain.contains("STARTTLS") && !plain.contains("AUTH"),
        "{plain}"
    );
    let may = ServerConfig {
        tls: TlsPolicy::May,
        ..ServerConfig::default()
    };
    assert!(help(may.clone(), false).contains(" STARTTLS"));
    assert!(!help(may, true).contains("STARTTLS"), "not once in TLS");
    let sasl = ServerConfig {
        sasl: true,
        tls_auth_only: false,
        ..ServerConfig::default()
    };
    let mut s = Session::new(Arc::new(sasl), false);
    s.set_auth_mechanisms(&["PLAIN".to_string()]);
    s.take_output();
    s.feed(b"HELP\r\n");
    let out = String::from_utf8(s.take_output()).unwrap();
    assert!(out.contains(" AUTH"), "{out}");
}

#[test]
fn data_refusals() {
    let cfg = ServerConfig {
        max_message_size: 10,
        ..ServerConfig::default()
    };
    let sh = dialog(
        cfg,
        b"HELO x\r\nMAIL FROM:<>\r\nRCPT TO:<a@x.com>\r\nDATA\r\n0123456789abc\r\n.\r\nMAIL FROM:<>\r\n",
    );
    assert_eq!(sh.replies(), [220, 250, 250, 250, 354, 552, 250]);
    assert!(sh.messages.is_empty());
    assert!(sh.actions.iter().any(|a| a.contains("TooBig")));
    let sh = dialog(
        ServerConfig::default(),
        b"HELO x\r\nMAIL FROM:<>\r\nRCPT TO:<a@x.com>\r\nDATA\r\nbare\nlf\r\n.\r\nRCPT TO:<a@x.com>\r\n",
    );
    assert_eq!(sh.replies(), [220, 250, 250, 250, 354, 550, 503]);
    let sh = dialog(
        ServerConfig::default(),
        b"HELO x\r\nMAIL FROM:<nodata@x.com>\r\nRCPT TO:<a@x.com>\r\nDATA\r\nRSET\r\n",
    );
    assert_eq!(sh.replies(), [220, 250, 250, 250, 554, 250]);
}

#[test]
fn smuggling_dialog() {
    // The smuggled transaction must stay message content in every mode.
    for bare in [
        BareNewline::Reject,
        BareNewline::Normalize,
        BareNewline::Allow,
    ] {
        for seq in [
            &b"\n.\n"[..],
            b"\r.\r",
            b"\r\n.\n",
            b"\n.\r\n",
            b"\r.\n",
            b"\n.\r",
        ] {
            let cfg = ServerConfig {
                bare_newline: bare,
                ..ServerConfig::default()
            };
            let mut input =
                b"EHLO x\r\nMAIL FROM:<a@x.com>\r\nRCPT TO:<b@x.com>\r\nDATA\r\nhello".to_vec();
            input.extend_from_slice(seq);
            input.extend_from_slice(b"MAIL FROM:<evil@x.com>\r\nRCPT TO:<victim@x.com>\r\nDATA\r\nforged\r\n.\r\nQUIT\r\n");
            let sh = dialog(cfg, &input);
            assert!(
                !sh.actions.iter().any(|a| a.contains("evil")),
                "{bare:?} {seq:?}"
            );
            let want = if bare == BareNewline::Reject {
                550
            } else {
                250
            };
            assert_eq!(
                sh.replies(),
                [220, 250, 250, 250, 354, want, 221],
                "{bare:?} {seq:?}"
            );
        }
    }
}

#[test]
fn data_after_bare_lf_command() {
    // `DATA LF . CRLF` is LF.CRLF: not an end of data, even when bare LF
    // commands are tolerated.
    for bare in [
        BareNewline::Reject,
        BareNewline::Normalize,
        BareNewline::Allow,
    ] {
        let cfg = ServerConfig {
            bare_newline: bare,
            ..ServerConfig::default()
        };
        let sh = dialog(
            cfg,
            b"HELO x\r\nMAIL FROM:<>\r\nRCPT TO:<a@x.com>\r\nDATA\n.\r\nx\r\n.\r\n",
        );
        assert_eq!(sh.replies(), [220, 250, 250, 250, 354, 250], "{bare:?}");
        assert_eq!(sh.messages, [b"..\r\nx\r\n".to_vec()], "{bare:?}");
    }
}

#[test]
fn bdat_dialogs() {
    let sh = dialog(
        ServerConfig::default(),
        b"EHLO x\r\nMAIL FROM:<>\r\nRCPT TO:<a@x.com>\r\nBDAT 5\r\n.a\r\nbBDAT 0 LAST\r\nQUIT\r\n",
    );
    assert_eq!(sh.replies(), [220, 250, 250, 250, 250, 250, 221]);
    assert_eq!(sh.messages, [b"..a\r\nb\r\n".to_vec()]);
    // A refused first chunk is consumed and ends the transaction; later chunks find none.
    let sh = dialog(
        ServerConfig::default(),
        b"EHLO x\r\nMAIL FROM:<nodata@x.com>\r\nRCPT TO:<a@x.com>\r\nBDAT 4\r\nQUITBDAT 3 LAST\r\nxyzNOOP\r\n",
    );
    assert_eq!(sh.replies(), [220, 250, 250, 250, 554, 503, 250]);
    // Size exceeded on a middle chunk: 552 at once, later chunks 503.
    let cfg = ServerConfig {
        max_message_size: 4,
        ..ServerConfig::default()
    };
    let sh = dialog(
        cfg,
        b"EHLO x\r\nMAIL FROM:<>\r\nRCPT TO:<a@x.com>\r\nBDAT 3\r\nabcBDAT 3\r\ndefBDAT 1 LAST\r\ngNOOP\r\n",
    );
    assert_eq!(sh.replies(), [220, 250, 250, 250, 250, 552, 503, 250]);
    // DATA after BDAT, BDAT when CHUNKING is off, BINARYMIME with DATA.
    let sh = dialog(
        ServerConfig::default(),
        b"EHLO x\r\nMAIL FROM:<>\r\nRCPT TO:<a@x.com>\r\nBDAT 1\r\nxDATA\r\n",
    );
    assert_eq!(sh.replies().last(), Some(&503));
    let cfg = ServerConfig {
        chunking: false,
        ..ServerConfig::default()
    };
    assert_eq!(
        dialog(cfg, b"EHLO x\r\nBDAT 1\r\n").replies().last(),
        Some(&502)
    );
    let cfg = ServerConfig {
        binarymime: true,
        ..ServerConfig::default()
    };
    let sh = dialog(
        cfg,
        b"EHLO x\r\nMAIL FROM:<> BODY=BINARYMIME\r\nRCPT TO:<a@x.com>\r\nDATA\r\nBDAT 4 LAST\r\na\nb\r",
    );
    assert_eq!(sh.replies(), [220, 250, 250, 250, 503, 250]);
    assert_eq!(sh.messages, [b"a\nb\r\r\n".to_vec()]);
}

#[test]
fn decide_without_question() {
    let mut s = Session::new(Arc::new(ServerConfig::default()), false);
    assert_eq!(s.decide(Reply::ok()), Err(NotWaiting));
    assert!(s.should_flush());
    assert_eq!(s.take_output(), b"220 localhost ESMTP Sluice\r\n");
    assert!(!s.should_flush());
}

#[test]
fn pipelining_flush_points() {
    let mut s = Session::new(Arc::new(ServerConfig::default()), false);
    s.take_output();
    let input = b"EHLO x\r\nMAIL FROM:<a@b.com>\r\n";
    let n = s.feed(input);
    assert!(s.should_flush(), "EHLO ends a group");
    assert_eq!(n, input.len(), "stopped after MAIL: decision pending");
    assert!(s.is_waiting());
    assert_eq!(
        s.feed(b"RCPT TO:<c@d.com>\r\n"),
        0,
        "no input used while waiting"
    );
    s.take_output();
    while s.poll_action().is_some() {}
    s.decide(Reply::ok()).unwrap();
    assert!(!s.should_flush(), "MAIL does not end a group");
    assert!(s.has_output());
    assert_eq!(s.feed(b"RCPT TO:<c@d.com>\r\n"), 19);
}

/// Splits input at every byte boundary and in random pieces: same dialog.
fn assert_chunking_invariant(cfg: &ServerConfig, input: &[u8], pieces: &[usize]) {
    let whole = dialog(cfg.clone(), input);
    for p in [&[1usize][..], &[2], &[3, 1, 4, 1, 5, 9, 2, 6], pieces] {
        let mut sh = Shell::new(cfg.clone());
        sh.send(input, p);
        assert_eq!(escape(&sh.out), escape(&whole.out), "pieces {p:?}");
        assert_eq!(sh.actions, whole.actions, "pieces {p:?}");
        assert_eq!(sh.messages, whole.messages, "pieces {p:?}");
    }
}

#[test]
fn chunking_invariance_on_dialogs() {
    let cfg = ServerConfig::default();
    let dialogs: &[&[u8]] = &[
        b"EHLO c\r\nMAIL FROM:<a@b.com> SIZE=10\r\nRCPT TO:<c@d.com>\r\nRCPT TO:<reject@d.com>\r\nDATA\r\nx\r\n..\r\n.\r\nQUIT\r\n",
        b"EHLO c\r\nMAIL FROM:<a@b.com>\r\nRCPT TO:<c@d.com>\r\nBDAT 3\r\nabcBDAT 4 LAST\r\n\r\n.\nRSET\r\n",
        b"EHLO c\r\nMAIL FROM:<a@b.com>\r\nRCPT TO:<c@d.com>\r\nDATA\r\nhello\n.\nworld\r.\r\n.\r\nNOOP\n",
        b"\0\0\0\r\nGARBAGE\r\n\r\n\r\nEHLO\r\nMAIL FROM:<\r\nQUIT\r\n",
    ];
    for d in dialogs {
        assert_chunking_invariant(&cfg, d, &[5, 7]);
    }
}

#[test]
fn split_at_every_boundary() {
    let cfg = ServerConfig::default();
    let input: &[u8] = b"EHLO c\r\nMAIL FROM:<a@b.com> BODY=8BITMIME\r\nRCPT TO:<c@d.com>\r\n\
        DATA\r\nx\r\n..y\r\n\n.\n\r\n.\r\nMAIL FROM:<>\r\nRCPT TO:<e@f.com>\r\nBDAT 4\r\n.\r\nzBDAT 0 LAST\r\nQUIT\r\n";
    let whole = dialog(cfg.clone(), input);
    assert_eq!(
        whole.replies(),
        [220, 250, 250, 250, 354, 550, 250, 250, 250, 250, 221]
    );
    for i in 0..=input.len() {
        let mut sh = Shell::new(cfg.clone());
        sh.send(input, &[i, input.len()]);
        assert_eq!(escape(&sh.out), escape(&whole.out), "split at {i}");
        assert_eq!(sh.actions, whole.actions, "split at {i}");
        assert_eq!(sh.messages, whole.messages, "split at {i}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut sh = Shell::new(ServerConfig { max_command_line: 64, ..ServerConfig::default() });
        sh.send(&input, &[17]);
        prop_assert!(sh.s.line.len() <= 66);
    }

    #[test]
    fn pipelined_garbage_chunking(
        parts in proptest::collection::vec(prop::sample::select(vec![
            &b"EHLO x\r\n"[..], b"MAIL FROM:<a@b.com>\r\n", b"RCPT TO:<c@d.com>\r\n", b"DATA\r\n",
            b".\r\n", b"x\r\n", b"\n", b"\r", b"BDAT 2\r\n", b"BDAT 1 LAST\r\n", b"RSET\r\n",
            b"RCPT TO:<reject@d.com>\r\n", b"\0", b"NOOP\r\n", b"STARTTLS\r\n",
        ]), 0..30),
        pieces in proptest::collection::vec(1usize..9, 1..6),
    ) {
        let input: Vec<u8> = parts.concat();
        let cfg = ServerConfig::default();
        let whole = dialog(cfg.clone(), &input);
        let mut sh = Shell::new(cfg);
        sh.send(&input, &pieces);
        prop_assert_eq!(escape(&sh.out), escape(&whole.out));
        prop_assert_eq!(&sh.actions, &whole.actions);
        prop_assert_eq!(&sh.messages, &whole.messages);
        // Every server reply parses.
        let _ = sh.replies();
    }
}

// ---- golden dialog files -------------------------------------------------

/// Parses a `.in` file: config directives, segments split at `!tls`.
fn parse_in(text: &str) -> (ServerConfig, Vec<Vec<u8>>) {
    let mut cfg = ServerConfig {
        hostname: "mx.test".into(),
        ..ServerConfig::default()
    };
    let mut segs = vec![Vec::new()];
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        if let Some(kv) = line.strip_prefix("!config ") {
            let (k, v) = kv.split_once('=').expect("!config key=value");
            match k {
                "tls" => {
                    cfg.tls = match v {
                        "may" => TlsPolicy::May,
                        "encrypt" => TlsPolicy::Encrypt,
                        _ => TlsPolicy::None,
                    }
                }
                "bare_newline" => {
                    cfg.bare_newline = match v {
                        "normalize" => BareNewline::Normalize,
                        "no" => BareNewline::Allow,
                        _ => BareNewline::Reject,
                    }
                }
                "max_message_size" => cfg.max_message_size = v.parse().unwrap(),
                "max_recipients" => cfg.max_recipients = v.parse().unwrap(),
                "hard_error_limit" => cfg.hard_error_limit = v.parse().unwrap(),
                "max_command_line" => cfg.max_command_line = v.parse().unwrap(),
                "vrfy" => {
                    cfg.vrfy = if v == "502" {
                        VrfyMode::Disabled502
                    } else {
                        VrfyMode::Ambiguous252
                    }
                }
                "enhanced_status_codes" => cfg.enhanced_status_codes = v == "yes",
                "helo_required" => cfg.helo_required = v == "yes",
                _ => panic!("unknown !config {k}"),
            }
            continue;
        }
        if line == "!tls" {
            segs.push(Vec::new());
            continue;
        }
        let seg = segs.last_mut().unwrap();
        if let Some(rest) = line.strip_prefix("!repeat ") {
            let (n, t) = rest.split_once(' ').expect("!repeat N text");
            for _ in 0..n.parse::<usize>().unwrap() {
                seg.extend_from_slice(&unescape(t));
            }
            seg.extend_from_slice(b"\r\n");
            continue;
        }
        match line.strip_suffix("\\c") {
            Some(l) => seg.extend_from_slice(&unescape(l)),
            None => {
                seg.extend_from_slice(&unescape(line));
                seg.extend_from_slice(b"\r\n");
            }
        }
    }
    (cfg, segs)
}

fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            i += 1;
            match b[i] {
                b'r' => out.push(b'\r'),
                b'n' => out.push(b'\n'),
                b'0' => out.push(0),
                b'x' => {
                    let h = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                    out.push(u8::from_str_radix(h, 16).unwrap());
                    i += 2;
                }
                c => out.push(c),
            }
        } else {
            out.push(b[i]);
        }
        i += 1;
    }
    out
}

/// Runs a golden file; `pieces` empty means line by line, with `C:` lines in
/// the transcript so that each reply follows the line that caused it.
fn run_golden(text: &str, pieces: &[usize]) -> Shell {
    let (cfg, segs) = parse_in(text);
    let mut sh = Shell::new(cfg);
    for seg in segs {
        if !pieces.is_empty() {
            sh.send(&seg, pieces);
            continue;
        }
        for l in seg.split_inclusive(|&b| b == b'\n') {
            if sh.tls_pending {
                // The rest of the segment is plaintext injection: dropped.
                break;
            }
            let shown = if l.len() > 120 {
                format!("{}... ({} octets)", escape(&l[..60]), l.len())
            } else {
                escape(l)
            };
            sh.transcript.push_str(&format!("C: {shown}\n"));
            sh.feed_only(l, &[l.len()]);
        }
        sh.end_segment();
    }
    sh
}

#[test]
fn golden_dialogs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let regen = std::env::var_os("SLUICE_REGEN").is_some_and(|v| v == "1");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("testdata directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "in"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no golden files in {}", dir.display());
    let mut failed = Vec::new();
    for path in names {
        let text = std::fs::read_to_string(&path).unwrap();
        let sh = run_golden(&text, &[]);
        let whole = run_golden(&text, &[usize::MAX]);
        assert_eq!(
            escape(&whole.out),
            escape(&sh.out),
            "{}: whole-input output differs",
            path.display()
        );
        assert_eq!(
            whole.actions,
            sh.actions,
            "{}: whole-input actions differ",
            path.display()
        );
        // The same dialog byte by byte gives the same bytes and actions.
        let slow = run_golden(&text, &[1]);
        assert_eq!(
            escape(&slow.out),
            escape(&sh.out),
            "{}: byte-by-byte output differs",
            path.display()
        );
        assert_eq!(
            slow.actions,
            sh.actions,
            "{}: byte-by-byte actions differ",
            path.display()
        );
        let ref_path = path.with_extension("ref");
        if regen {
            std::fs::write(&ref_path, &sh.transcript).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&ref_path)
            .unwrap_or_else(|_| panic!("{} missing: run with SLUICE_REGEN=1", ref_path.display()));
        if want != sh.transcript {
            eprintln!(
                "--- {} differs; got:\n{}",
                ref_path.display(),
                sh.transcript
            );
            failed.push(ref_path);
        }
    }
    assert!(
        failed.is_empty(),
        "golden mismatches (SLUICE_REGEN=1 to accept): {failed:?}"
    );
}
