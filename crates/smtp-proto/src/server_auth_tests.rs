//! AUTH dialogs against a scripted authenticator: `\0alice\0secret` (PLAIN,
//! `AGFsaWNlAHNlY3JldA==`) and LOGIN `alice`/`secret` succeed, anything
//! else fails with 535 5.7.8.

use std::sync::Arc;

use crate::reply::{Reply, StatusCode};
use crate::server::{Action, ServerConfig, Session, TlsPolicy};

const GOOD_PLAIN: &str = "AGFsaWNlAHNlY3JldA==";
const ALICE: &str = "YWxpY2U=";
const SECRET: &str = "c2VjcmV0";

struct Dialog {
    s: Session,
    /// LOGIN: the user name given so far.
    login_user: Option<String>,
    actions: Vec<Action>,
}

impl Dialog {
    fn new(cfg: ServerConfig, tls: bool) -> Self {
        let mut s = Session::new(Arc::new(cfg), tls);
        s.set_auth_mechanisms(&["PLAIN".into(), "LOGIN".into()]);
        s.take_output();
        Dialog {
            s,
            login_user: None,
            actions: Vec::new(),
        }
    }

    fn answer(&mut self, a: &Action) -> Option<Reply> {
        let fail = || {
            Reply::enhanced(
                535,
                StatusCode::known(5, 7, 8),
                "Error: authentication failed",
            )
        };
        let ok = || Reply::enhanced(235, StatusCode::known(2, 7, 0), "Authentication successful");
        Some(match a {
            Action::CheckSender { .. } => Reply::enhanced(250, StatusCode::SENDER_OK, "Ok"),
            Action::Authenticate { mechanism, initial } => {
                match (mechanism.as_str(), initial.as_deref()) {
                    ("PLAIN", Some(GOOD_PLAIN)) => ok(),
                    ("PLAIN", None) => Reply::new(334, None, ""),
                    ("LOGIN", _) => Reply::new(334, None, "VXNlcm5hbWU6"),
                    _ => fail(),
                }
            }
            Action::AuthResponse(r) => match (self.login_user.take(), r.as_str()) {
                (None, ALICE) => {
                    self.login_user = Some("alice".into());
                    Reply::new(334, None, "UGFzc3dvcmQ6")
                }
                (Some(_), SECRET) => ok(),
                (None, GOOD_PLAIN) => ok(),
                _ => fail(),
            },
            _ => return None,
        })
    }

    /// Sends `input` and returns the server's reply lines.
    fn say(&mut self, input: &str) -> String {
        let mut rest = input.as_bytes().to_vec();
        loop {
            let used = self.s.feed(&rest);
            rest.drain(..used);
            let mut acted = false;
            while let Some(a) = self.s.poll_action() {
                acted = true;
                if let Some(reply) = self.answer(&a) {
                    self.s.decide(reply).unwrap();
                }
                self.actions.push(a);
            }
            if used == 0 && !acted {
                break;
            }
        }
        String::from_utf8(self.s.take_output()).unwrap()
    }
}

fn sasl(tls_auth_only: bool) -> ServerConfig {
    ServerConfig {
        sasl: true,
        tls_auth_only,
        tls: TlsPolicy::May,
        hard_error_limit: 5,
        ..ServerConfig::default()
    }
}

#[test]
fn offered_only_under_tls_when_tls_auth_only() {
    let mut d = Dialog::new(sasl(true), false);
    let ehlo = d.say("EHLO c\r\n");
    assert!(!ehlo.contains("AUTH"), "{ehlo}");
    assert_eq!(
        d.say("AUTH PLAIN AGFsaWNlAHNlY3JldA==\r\n"),
        "530 5.7.0 Must issue a STARTTLS command first\r\n"
    );
    assert!(!d
        .actions
        .iter()
        .any(|a| matches!(a, Action::Authenticate { .. })));
    let mut d = Dialog::new(sasl(true), true);
    assert!(d.say("EHLO c\r\n").contains("250-AUTH PLAIN LOGIN\r\n"));
    let mut d = Dialog::new(sasl(false), false);
    assert!(d.say("EHLO c\r\n").contains("AUTH PLAIN LOGIN"));
}

#[test]
fn not_enabled() {
    let mut d = Dialog::new(ServerConfig::default(), true);
    assert!(!d.say("EHLO c\r\n").contains("AUTH"));
    assert_eq!(
        d.say("AUTH PLAIN\r\n"),
        "503 5.5.1 Error: authentication not enabled\r\n"
    );
    assert_eq!(
        d.say("MAIL FROM:<a@b.c> AUTH=<>\r\n"),
        "555 5.5.4 Unsupported option: AUTH\r\n"
    );
}

#[test]
fn plain_initial_response() {
    let mut d = Dialog::new(sasl(true), true);
    assert_eq!(
        d.say("AUTH PLAIN AGFsaWNlAHNlY3JldA==\r\n"),
        "503 5.5.1 Error: send HELO/EHLO first\r\n"
    );
    d.say("EHLO c\r\n");
    assert_eq!(
        d.say("AUTH plain AGFsaWNlAHNlY3JldA==\r\n"),
        "235 2.7.0 Authentication successful\r\n"
    );
    assert!(d.s.is_authenticated());
    assert_eq!(
        d.say("AUTH PLAIN AGFsaWNlAHNlY3JldA==\r\n"),
        "503 5.5.1 Error: already authenticated\r\n"
    );
    assert_eq!(
        d.say("MAIL FROM:<a@b.c> AUTH=a@b.c\r\n"),
        "250 2.1.0 Ok\r\n"
    );
    assert!(
        d.s.stats().summary().contains("auth=1/3"),
        "{}",
        d.s.stats().summary()
    );
}

#[test]
fn plain_with_empty_challenge_and_login() {
    let mut d = Dialog::new(sasl(true), true);
    d.say("EHLO c\r\n");
    assert_eq!(d.say("AUTH PLAIN\r\n"), "334 \r\n");
    assert_eq!(
        d.say("AGFsaWNlAHNlY3JldA==\r\n"),
        "235 2.7.0 Authentication successful\r\n"
    );
    let mut d = Dialog::new(sasl(true), true);
    d.say("EHLO c\r\n");
    assert_eq!(d.say("AUTH LOGIN\r\n"), "334 VXNlcm5hbWU6\r\n");
    assert_eq!(d.say("YWxpY2U=\r\n"), "334 UGFzc3dvcmQ6\r\n");
    assert_eq!(
        d.say("c2VjcmV0\r\n"),
        "235 2.7.0 Authentication successful\r\n"
    );
    assert!(d.actions.contains(&Action::AuthResponse("c2VjcmV0".into())));
}

#[test]
fn refusals_and_cancel() {
    let cfg = ServerConfig {
        hard_error_limit: 20,
        ..sasl(true)
    };
    let mut d = Dialog::new(cfg, true);
    d.say("EHLO c\r\n");
    let cases = [
        ("AUTH\r\n", "501 5.5.4 Syntax: AUTH mechanism\r\n"),
        ("AUTH PLAIN a b\r\n", "501 5.5.4 Syntax: AUTH mechanism\r\n"),
        (
            "AUTH CRAM-MD5\r\n",
            "504 5.5.4 Unsupported authentication mechanism\r\n",
        ),
        (
            "AUTH PLAIN not*base64\r\n",
            "501 5.5.2 Cannot decode response\r\n",
        ),
        (
            "AUTH PLAIN =\r\n",
            "535 5.7.8 Error: authentication failed\r\n",
        ),
    ];
    for (cmd, want) in cases {
        assert_eq!(d.say(cmd), want, "{cmd}");
    }
    assert_eq!(d.say("AUTH LOGIN\r\n"), "334 VXNlcm5hbWU6\r\n");
    assert_eq!(d.say("*\r\n"), "501 5.7.0 Authentication aborted\r\n");
    assert_eq!(d.actions.last(), Some(&Action::AuthCancelled));
    assert_eq!(d.say("AUTH LOGIN\r\n"), "334 VXNlcm5hbWU6\r\n");
    assert_eq!(
        d.say("\u{e9}t\u{e9}\r\n"),
        "501 5.5.2 Cannot decode response\r\n"
    );
    assert!(!d.s.is_authenticated());
    // A command pipelined inside the exchange is read as a response.
    assert_eq!(
        d.say("AUTH LOGIN\r\nEHLO c\r\n"),
        "334 VXNlcm5hbWU6\r\n501 5.5.2 Cannot decode response\r\n"
    );
    assert!(!d.s.is_closed());
}

#[test]
fn long_response_line() {
    let mut d = Dialog::new(sasl(true), true);
    d.say("EHLO c\r\n");
    d.say("AUTH LOGIN\r\n");
    let long = format!("{}\r\n", "A".repeat(4096));
    assert_eq!(
        d.say(&long),
        "500 5.5.6 Authentication Exchange line is too long\r\n"
    );
    assert_eq!(d.say("NOOP\r\n"), "250 2.0.0 Ok\r\n");
}

#[test]
fn guessing_ends_at_the_hard_error_limit() {
    let mut d = Dialog::new(sasl(true), true);
    d.say("EHLO c\r\n");
    let mut out = String::new();
    for _ in 0..6 {
        out += &d.say("AUTH PLAIN AGJvYgB3cm9uZw==\r\n");
    }
    assert_eq!(out.matches("535 5.7.8").count(), 5, "{out}");
    assert!(
        out.ends_with("421 4.7.0 localhost Error: too many errors\r\n"),
        "{out}"
    );
    assert!(d.s.is_closed());
}

#[test]
fn no_auth_in_a_transaction_and_tls_forgets_it() {
    let mut d = Dialog::new(sasl(false), false);
    d.say("EHLO c\r\n");
    d.say("MAIL FROM:<a@b.c>\r\n");
    assert_eq!(
        d.say("AUTH PLAIN AGFsaWNlAHNlY3JldA==\r\n"),
        "503 5.5.1 Error: MAIL transaction in progress\r\n"
    );
    d.say("RSET\r\n");
    assert_eq!(
        d.say("AUTH PLAIN AGFsaWNlAHNlY3JldA==\r\n"),
        "235 2.7.0 Authentication successful\r\n"
    );
    assert_eq!(d.say("STARTTLS\r\n"), "220 2.0.0 Ready to start TLS\r\n");
    d.s.tls_established();
    assert!(
        !d.s.is_authenticated(),
        "RFC 3207 §4.2: knowledge from before TLS is discarded"
    );
}

#[test]
fn mechanisms_follow_the_shell() {
    let mut d = Dialog::new(sasl(false), false);
    d.s.set_auth_mechanisms(&[]);
    assert!(!d.say("EHLO c\r\n").contains("AUTH"));
    assert_eq!(
        d.say("AUTH PLAIN\r\n"),
        "503 5.5.1 Error: authentication not enabled\r\n"
    );
    d.s.set_auth_mechanisms(&["PLAIN".into()]);
    assert!(d.say("EHLO c\r\n").contains("250-AUTH PLAIN\r\n"));
}
