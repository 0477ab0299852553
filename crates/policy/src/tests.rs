//! Table-driven policy tests, with the relay tricks an open-relay tester tries.

use super::*;
use std::path::Path;

fn policy(main_cf: &str) -> Policy {
    let base =
        "myhostname = mx.example.org\nmydomain = example.org\nrelay_domains = relay.example\n";
    let cfg = Config::parse(&format!("{base}{main_cf}"), Path::new("main.cf"), &[])
        .unwrap()
        .config;
    Policy::from_config(&cfg).unwrap()
}

fn mbox(s: &str) -> Mailbox {
    let text = format!("<{s}>");
    let (path, rest) = smtp_proto::address::parse_path(&text, true).unwrap();
    assert!(rest.is_empty(), "{s}");
    path.mailbox().unwrap().clone()
}

fn check(p: &Policy, client: &str, sender: Option<&str>, rcpt: &str) -> Verdict {
    let s = sender.map(mbox);
    let r = mbox(rcpt);
    p.check(
        &Query {
            client_addr: client.parse().unwrap(),
            client_name: "unknown",
            helo: None,
            sender: s.as_ref(),
            recipient: &r,
            sasl_username: None,
        },
        &StaticOnly,
    )
}

fn accepted(v: &Verdict) -> bool {
    matches!(v, Verdict::Accept { .. })
}

#[test]
fn default_policy_is_not_an_open_relay() {
    let p = policy("");
    let outside = "192.0.2.10";
    let cases: &[(&str, &str, bool)] = &[
        // (client, recipient, accepted?)
        (outside, "user@mx.example.org", true),
        (outside, "user@localhost", true),
        (outside, "USER@MX.EXAMPLE.ORG", true),
        (outside, "user@relay.example", true),
        (outside, "user@sub.relay.example", true),
        (outside, "victim@elsewhere.example", false),
        // Routing in the local part must not pass as local mail.
        (outside, "victim%elsewhere.example@mx.example.org", false),
        (outside, "elsewhere.example!victim@mx.example.org", false),
        (
            outside,
            "\"victim@elsewhere.example\"@mx.example.org",
            false,
        ),
        (outside, "victim%elsewhere.example@relay.example", false),
        // A source route is stripped; what remains is judged.
        (outside, "@mx.example.org:victim@elsewhere.example", false),
        // Address literals are not our domains.
        (outside, "victim@[192.0.2.1]", false),
        // Look-alike domains.
        (outside, "victim@mx.example.org.evil.example", false),
        (outside, "victim@notrelay.example", false),
        // mynetworks may relay anywhere; IPv4-mapped IPv6 counts as IPv4.
        ("127.0.0.1", "victim@elsewhere.example", true),
        ("::ffff:127.0.0.1", "victim@elsewhere.example", true),
        ("::1", "victim@elsewhere.example", true),
        ("::2", "victim@elsewhere.example", false),
    ];
    for (client, rcpt, ok) in cases {
        let v = check(&p, client, Some("sender@example.com"), rcpt);
        assert_eq!(accepted(&v), *ok, "{client} → {rcpt}: {v:?}");
        if !ok {
            let Verdict::Refuse { reply, by, .. } = v else {
                unreachable!()
            };
            assert_eq!(
                (reply.code, reply.status.to_string().as_str()),
                (554, "5.7.1")
            );
            let text = reply.text;
            assert!(text.contains("Relay access denied"), "{text}");
            assert!(by.contains("reject_unauth_destination"), "{by}");
        }
    }
}

#[test]
fn access_actions_from_static_tables() {
    let cases: &[(&str, Option<(u16, &str)>)] = &[
        ("OK", None),
        ("REJECT", Some((554, "5.7.1"))),
        ("REJECT go away", Some((554, "5.7.1"))),
        ("DEFER", Some((450, "4.7.1"))),
        ("550 5.7.9 no thanks", Some((550, "5.7.9"))),
        ("421 bye", Some((421, "4.7.1"))),
        ("DUNNO", None),
        ("HOLD", None),
        ("DISCARD", None),
        ("NONSENSE", Some((451, "4.3.5"))),
        ("TENANT acme", None),
        ("JOB j-1", None),
        ("TENANT", Some((451, "4.3.5"))),
        ("TENANT two words", Some((451, "4.3.5"))),
        ("JOB", Some((451, "4.3.5"))),
    ];
    for (action, want) in cases {
        let p = policy(&format!(
            "smtpd_recipient_restrictions = check_sender_access static:{{{action}}}\n"
        ));
        // From mynetworks the relay list permits; the recipient list still runs.
        let v = check(&p, "127.0.0.1", Some("s@example.com"), "u@mx.example.org");
        match (want, &v) {
            (None, Verdict::Accept { hold, discard, .. }) => {
                assert_eq!(*hold, *action == "HOLD", "{action}");
                assert_eq!(*discard, *action == "DISCARD", "{action}");
            }
            (Some((code, enh)), Verdict::Refuse { reply, .. }) => {
                let got = (reply.code, reply.status.to_string());
                assert_eq!(got, (*code, enh.to_string()), "{action}");
            }
            _ => panic!("{action}: {v:?}"),
        }
    }
}

/// A client refused by `check_client_access` is named as Postfix names
/// it, `<name[address]>`, an IPv4-mapped address as IPv4.
#[test]
fn a_refused_client_is_named_by_name_and_address() {
    let p = policy("smtpd_client_restrictions = check_client_access static:{REJECT}\n");
    for (client, named) in [
        ("192.0.2.7", "<unknown[192.0.2.7]>"),
        ("2001:db8::1", "<unknown[2001:db8::1]>"),
        ("::ffff:192.0.2.7", "<unknown[192.0.2.7]>"),
    ] {
        match check(&p, client, Some("s@example.com"), "u@mx.example.org") {
            Verdict::Refuse { reply, .. } => assert!(
                reply
                    .text
                    .starts_with(&format!("{named}: Client host rejected")),
                "{client}: {}",
                reply.text
            ),
            v => panic!("{client}: {v:?}"),
        }
    }
}

#[test]
fn first_decision_in_a_list_wins_and_lists_run_in_order() {
    let p = policy("smtpd_client_restrictions = permit_mynetworks, reject\n");
    assert!(accepted(&check(&p, "127.0.0.1", None, "u@mx.example.org")));
    let v = check(&p, "192.0.2.1", None, "u@mx.example.org");
    assert!(
        matches!(v, Verdict::Refuse { ref reply, ref by, .. } if reply.code == 554 && by.starts_with("smtpd_client_restrictions")),
        "{v:?}"
    );
    // A permit in the relay list does not skip the recipient list.
    let p = policy("smtpd_relay_restrictions = permit\nsmtpd_recipient_restrictions = reject_non_fqdn_recipient\n");
    assert!(!accepted(&check(&p, "192.0.2.1", None, "u@host")));
    assert!(accepted(&check(
        &p,
        "192.0.2.1",
        None,
        "u@elsewhere.example"
    )));
}

#[test]
fn unknown_restrictions_and_bad_arguments_are_refused() {
    let text = "myhostname = a.b\nsmtpd_relay_restrictions = permit_mynetwork, reject_unauth_destination\n";
    let cfg = Config::parse(text, Path::new("main.cf"), &[])
        .unwrap()
        .config;
    let e = Policy::from_config(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("smtpd_relay_restrictions") && e.contains("permit_mynetwork"),
        "{e}"
    );
    let cfg = Config::parse(
        "smtpd_recipient_restrictions = check_client_access\n",
        Path::new("main.cf"),
        &[],
    )
    .unwrap()
    .config;
    assert!(Policy::from_config(&cfg).is_err());
}

#[test]
fn unreadable_tables_defer_instead_of_permitting() {
    let p = policy("smtpd_recipient_restrictions = check_recipient_access hash:/nonexistent\n");
    let v = check(&p, "127.0.0.1", None, "u@mx.example.org");
    let Verdict::Refuse { reply, warning, .. } = v else {
        panic!("{v:?}")
    };
    // As Postfix: the client reads no table name and no error; the log does.
    assert_eq!(
        reply.to_string(),
        "451 4.3.0 <u@mx.example.org>: Temporary lookup failure"
    );
    let warning = warning.expect("a warning for the log");
    assert!(
        warning.starts_with("hash:/nonexistent lookup error for \"u@mx.example.org\": "),
        "{warning}"
    );
    // A value that is no access action: Postfix's reply, the value logged.
    let p = policy("smtpd_recipient_restrictions = check_recipient_access static:NONSENSE\n");
    let v = check(&p, "127.0.0.1", None, "u@mx.example.org");
    let Verdict::Refuse { reply, warning, .. } = v else {
        panic!("{v:?}")
    };
    assert_eq!(reply.to_string(), "451 4.3.5 Server configuration error");
    assert_eq!(
        warning.as_deref(),
        Some("access table static:NONSENSE: bad action \"NONSENSE\" for key \"u@mx.example.org\"")
    );
}

#[test]
fn access_lookup_keys_follow_postfix_order() {
    assert_eq!(
        client_keys("192.0.2.7".parse().unwrap(), "mail.example.com"),
        [
            "192.0.2.7",
            "192.0.2",
            "192.0",
            "192",
            "mail.example.com",
            "example.com",
            "com"
        ]
    );
    assert_eq!(
        address_keys(&mbox("Joe@Sub.Example.COM")),
        [
            "Joe@sub.example.com",
            "sub.example.com",
            "example.com",
            "com",
            "Joe@"
        ]
    );
}

#[test]
fn parse_action_edge_cases() {
    assert_eq!(parse_action("  ok "), AccessAction::Ok);
    assert_eq!(parse_action("12345"), AccessAction::Ok);
    assert_eq!(
        parse_action("reject   spam source"),
        AccessAction::Reject(Some("spam source".into()))
    );
    assert_eq!(parse_action(""), AccessAction::Bad(String::new()));
    assert_eq!(
        parse_action("550"),
        AccessAction::Code(mail::Refusal::new(550, StatusCode::NOT_AUTHORIZED, ""))
    );
    // The enhanced code is parsed once, here: one of the other class is text.
    assert_eq!(
        parse_action("450 5.1.1 later"),
        AccessAction::Code(mail::Refusal::new(
            450,
            StatusCode::known(4, 7, 1),
            "5.1.1 later"
        ))
    );
    assert_eq!(
        parse_action("550\t5.1.1\tgone"),
        AccessAction::Code(mail::Refusal::new(550, StatusCode::USER_UNKNOWN, "gone"))
    );
    assert!(matches!(
        parse_action("250 fine"),
        AccessAction::Ok | AccessAction::Bad(_)
    ));
}

struct Unlisted(&'static [&'static str], bool);

impl Lookup for Unlisted {
    fn lookup(&self, t: &MapRef, k: &str) -> Result<Option<String>, String> {
        StaticOnly.lookup(t, k)
    }
    fn unlisted(&self, r: &Mailbox) -> Result<bool, Option<String>> {
        if self.1 {
            return Err(Some("4.4.3 router down".into()));
        }
        Ok(!self.0.contains(&r.to_string().as_str()))
    }
}

#[test]
fn unlisted_recipients_are_refused_even_from_mynetworks() {
    let p = policy("");
    let r = mbox("ghost@mx.example.org");
    let q = Query {
        client_addr: "127.0.0.1".parse().unwrap(),
        client_name: "unknown",
        helo: None,
        sender: None,
        recipient: &r,
        sasl_username: None,
    };
    let known = Unlisted(&["root@mx.example.org"], false);
    match p.check(&q, &known) {
        Verdict::Refuse { reply, .. } if reply.code == 550 => {
            assert_eq!(reply.status, mail::StatusCode::USER_UNKNOWN);
            let text = reply.text;
            assert!(
                text.contains("User unknown in local recipient table"),
                "{text}"
            );
        }
        v => panic!("{v:?}"),
    }
    let r2 = mbox("root@mx.example.org");
    let q2 = Query {
        recipient: &r2,
        ..q.clone()
    };
    assert!(accepted(&p.check(&q2, &known)));
    // The router cannot answer: a temporary error, never an acceptance.
    match p.check(&q2, &Unlisted(&[], true)) {
        Verdict::Refuse { reply, warning, .. } => {
            assert_eq!(
                reply.to_string(),
                "451 4.3.0 <root@mx.example.org>: Temporary lookup failure"
            );
            assert_eq!(
                warning.as_deref(),
                Some("router lookup error for <root@mx.example.org>: 4.4.3 router down")
            );
        }
        v => panic!("{v:?}"),
    }
    // Turned off, nothing is asked.
    let off = policy("smtpd_reject_unlisted_recipient = no\n");
    assert!(accepted(&off.check(&q, &Unlisted(&[], true))));
    assert!(!off.needs_router());
    let explicit = policy("smtpd_reject_unlisted_recipient = no\nsmtpd_recipient_restrictions = reject_unlisted_recipient\n");
    assert!(explicit.needs_router());
    assert!(!accepted(&explicit.check(&q, &known)));
}

/// A router that must not be asked.
struct NoRouter;

impl Lookup for NoRouter {
    fn lookup(&self, t: &MapRef, k: &str) -> Result<Option<String>, String> {
        StaticOnly.lookup(t, k)
    }
    fn unlisted(&self, r: &Mailbox) -> Result<bool, Option<String>> {
        panic!("the router was asked about {r}, which asks_router says it never is")
    }
}

#[test]
fn the_router_is_asked_only_about_domains_with_recipient_lists() {
    let p = policy("relay_domains = relay.example.net\n");
    let client = "127.0.0.1".parse().unwrap();
    for (rcpt, asks) in [
        ("root@mx.example.org", true),
        ("someone@relay.example.net", true),
        ("someone@sub.relay.example.net", true),
        ("someone@elsewhere.example.com", false),
        ("someone@[192.0.2.1]", false),
    ] {
        let r = mbox(rcpt);
        assert_eq!(p.asks_router(&r), asks, "{rcpt}");
        if !asks {
            // smtpd does not ask first, so the policy must not need it.
            let q = Query {
                client_addr: client,
                client_name: "unknown",
                helo: None,
                sender: None,
                recipient: &r,
                sasl_username: None,
            };
            assert!(accepted(&p.check(&q, &NoRouter)), "{rcpt}");
        }
    }
    let off = policy("smtpd_reject_unlisted_recipient = no\n");
    assert!(!off.asks_router(&mbox("root@mx.example.org")));
}

#[test]
fn tenant_and_job_actions_are_non_terminal_and_the_last_wins() {
    // The client list names a tenant and goes on; the sender list names
    // another tenant and a job; the recipient list still decides.
    let p = policy(
        "smtpd_client_restrictions = check_client_access static:{TENANT first}\n\
         smtpd_sender_restrictions = check_sender_access static:{TENANT acme}, check_client_access static:{JOB spring-sale}\n\
         smtpd_recipient_restrictions = permit_mynetworks, reject\n",
    );
    let v = check(&p, "127.0.0.1", Some("s@example.com"), "u@mx.example.org");
    assert_eq!(
        v,
        Verdict::Accept {
            hold: false,
            discard: false,
            tenant: Some("acme".into()),
            job: Some("spring-sale".into()),
        }
    );
    // Outside mynetworks the recipient list refuses: a tenant does not permit.
    let v = check(&p, "192.0.2.1", Some("s@example.com"), "u@mx.example.org");
    assert!(
        matches!(&v, Verdict::Refuse { reply, .. } if reply.code == 554),
        "{v:?}"
    );
    assert_eq!(
        parse_action("tenant Acme"),
        AccessAction::Tenant("Acme".into())
    );
    assert_eq!(parse_action("JOB  j1 "), AccessAction::Job("j1".into()));
    let long = format!("TENANT {}", "x".repeat(65));
    assert_eq!(parse_action(&long), AccessAction::Bad(long.clone()));
    assert_eq!(
        parse_action("TENANT a\u{7}b"),
        AccessAction::Bad("TENANT a\u{7}b".into())
    );
}

#[test]
fn submission_relays_only_for_authenticated_clients() {
    // The submission service's override, as the shipped master.cf has it.
    let p = policy("smtpd_recipient_restrictions = permit_sasl_authenticated, reject\nsmtpd_relay_restrictions =\n");
    let r = mbox("far@remote.example");
    let q = Query {
        client_addr: "192.0.2.10".parse().unwrap(),
        client_name: "unknown",
        helo: None,
        sender: None,
        recipient: &r,
        sasl_username: None,
    };
    match p.check(&q, &StaticOnly) {
        Verdict::Refuse { reply, by, .. } => {
            assert_eq!(reply.code, 554);
            assert_eq!(by, "smtpd_recipient_restrictions: reject");
        }
        v => panic!("{v:?}"),
    }
    let authed = Query {
        sasl_username: Some("alice"),
        ..q.clone()
    };
    assert!(accepted(&p.check(&authed, &StaticOnly)));
    // With the default relay restrictions, authentication alone does not
    // open the relay; Postfix's usual main.cf puts it first.
    let relay = policy("smtpd_relay_restrictions = permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination\n");
    assert!(accepted(&relay.check(&authed, &StaticOnly)));
    assert!(!accepted(&relay.check(&q, &StaticOnly)));
}

/// What verification knows, by address.
struct Verifier(Vec<(&'static str, VerifyState)>);

impl Lookup for Verifier {
    fn lookup(&self, t: &MapRef, k: &str) -> Result<Option<String>, String> {
        StaticOnly.lookup(t, k)
    }
    fn verified(&self, address: &str) -> Option<VerifyState> {
        self.0
            .iter()
            .find(|(a, _)| *a == address)
            .map(|(_, s)| s.clone())
    }
}

#[test]
fn unverified_recipients_and_senders_ask_then_follow_the_probe() {
    let p = policy(
        "smtpd_reject_unlisted_recipient = no\n\
         smtpd_recipient_restrictions = permit_mynetworks, reject_unverified_recipient, reject_unauth_destination\n\
         smtpd_sender_restrictions = reject_unverified_sender\n\
         unverified_recipient_reject_code = 550\n",
    );
    assert!(p.needs_verify() && !policy("").needs_verify());
    let outside = "192.0.2.10";
    let said = "host mx.relay.example[192.0.2.1] said: 550 5.1.1 no such user (in reply to RCPT TO command)";
    let v = Verifier(vec![
        ("s@example.net", VerifyState::Deliverable),
        ("ok@relay.example", VerifyState::Deliverable),
        ("no@relay.example", VerifyState::Undeliverable(said.into())),
        (
            "new@relay.example",
            VerifyState::Unknown("Address verification in progress".into()),
        ),
        (
            "bad@example.net",
            VerifyState::Undeliverable("550 5.1.1 gone".into()),
        ),
        (
            "down@relay.example",
            VerifyState::Failed("qmgr is not answering".into()),
        ),
    ]);
    let run = |sender: Option<&str>, rcpt: &str| {
        let s = sender.map(mbox);
        let r = mbox(rcpt);
        let q = Query {
            client_addr: outside.parse().unwrap(),
            client_name: "unknown",
            helo: None,
            sender: s.as_ref(),
            recipient: &r,
            sasl_username: None,
        };
        p.check(&q, &v)
    };
    // Nothing known of the sender yet: ask about it first.
    assert_eq!(
        run(Some("who@example.net"), "ok@relay.example"),
        Verdict::Verify {
            address: "who@example.net".into()
        }
    );
    assert_eq!(
        run(Some("s@example.net"), "other@relay.example"),
        Verdict::Verify {
            address: "other@relay.example".into()
        }
    );
    assert!(accepted(&run(Some("s@example.net"), "ok@relay.example")));
    // The null sender is not verified.
    assert!(accepted(&run(None, "ok@relay.example")));
    let refused = |v: Verdict| match v {
        Verdict::Refuse { reply, .. } => (reply.code, reply.status.to_string(), reply.text),
        v => panic!("{v:?}"),
    };
    assert_eq!(
        refused(run(None, "no@relay.example")),
        (
            550,
            "5.1.1".to_string(),
            format!(
                "<no@relay.example>: Recipient address rejected: undeliverable address: {said}"
            )
        )
    );
    assert_eq!(
        refused(run(None, "new@relay.example")),
        (
            450,
            "4.1.1".to_string(),
            "<new@relay.example>: Recipient address rejected: unverified address: Address verification in progress".to_string()
        )
    );
    assert_eq!(
        refused(run(Some("bad@example.net"), "ok@relay.example")),
        (
            450,
            "4.1.7".to_string(),
            // A 4xx reject code (Postfix's default) says "unverified".
            "<bad@example.net>: Sender address rejected: unverified address: 550 5.1.1 gone"
                .to_string()
        )
    );
    // The service failed: Postfix's reply, not the inner error.
    assert_eq!(
        refused(run(None, "down@relay.example")),
        (
            450,
            "4.1.1".to_string(),
            "<down@relay.example>: Recipient address rejected: address verification problem"
                .to_string()
        )
    );
    // From mynetworks the recipient list permits first: nothing is asked.
    let r = mbox("unasked@relay.example");
    let q = Query {
        client_addr: "127.0.0.1".parse().unwrap(),
        client_name: "unknown",
        helo: None,
        sender: None,
        recipient: &r,
        sasl_username: None,
    };
    assert!(accepted(&p.check(&q, &v)));
}

#[test]
fn a_bad_unverified_reply_code_is_refused_naming_its_parameter() {
    let cfg = Config::parse(
        "unverified_sender_defer_code = 250\n",
        Path::new("main.cf"),
        &[],
    )
    .unwrap()
    .config;
    let e = Policy::from_config(&cfg).unwrap_err();
    assert_eq!(e.param, "unverified_sender_defer_code");
    assert!(e.message.contains("400 to 599"), "{}", e.message);
}

#[test]
fn a_temporary_verification_failure_defers_only_what_would_be_accepted() {
    // Postfix's default (defer_if_permit): the lists go on; a relay
    // attempt is still refused for good, a recipient they would accept
    // is deferred with the verification's reply.
    let lists = "smtpd_reject_unlisted_recipient = no\n\
                 smtpd_relay_restrictions =\n\
                 smtpd_recipient_restrictions = reject_unverified_recipient, reject_unauth_destination\n";
    let v = Verifier(vec![
        (
            "new@relay.example",
            VerifyState::Unknown("Address verification in progress".into()),
        ),
        (
            "new@elsewhere.example",
            VerifyState::Deferred("connect to mx.elsewhere.example: timed out".into()),
        ),
    ]);
    let outside = "192.0.2.10";
    let code = |p: &Policy, rcpt: &str| match check_with(p, outside, rcpt, &v) {
        Verdict::Refuse { reply, .. } => (reply.code, reply.text),
        other => panic!("{other:?}"),
    };
    let p = policy(lists);
    assert_eq!(
        code(&p, "new@relay.example"),
        (
            450,
            "<new@relay.example>: Recipient address rejected: unverified address: Address verification in progress".into()
        )
    );
    assert_eq!(
        code(&p, "new@elsewhere.example"),
        (554, "<new@elsewhere.example>: Relay access denied".into()),
        "the relay refusal after it wins"
    );
    // defer: the verification's 450 at once, before the relay check.
    let p = policy(&format!(
        "{lists}unverified_recipient_tempfail_action = defer\n"
    ));
    assert_eq!(code(&p, "new@elsewhere.example").0, 450);
}

#[test]
fn a_reject_reason_replaces_the_probes_reply() {
    let p = policy(
        "smtpd_reject_unlisted_recipient = no\n\
         smtpd_recipient_restrictions = reject_unverified_recipient, reject_unauth_destination\n\
         unverified_recipient_reject_code = 550\n\
         unverified_recipient_reject_reason = Address lookup failed\n",
    );
    let v = Verifier(vec![(
        "gone@relay.example",
        VerifyState::Undeliverable(
            "host mx.relay.example[192.0.2.1] said: 550 5.1.1 no such user".into(),
        ),
    )]);
    match check_with(&p, "192.0.2.10", "gone@relay.example", &v) {
        Verdict::Refuse { reply, .. } => {
            assert_eq!(
                (reply.code, reply.status),
                (550, mail::StatusCode::USER_UNKNOWN)
            );
            assert_eq!(
                reply.text,
                "<gone@relay.example>: Recipient address rejected: Address lookup failed"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_bad_tempfail_action_is_refused_naming_file_line_and_parameter() {
    let e = Config::parse(
        "myhostname = mx.example.org\nunverified_sender_tempfail_action = maybe\n",
        Path::new("main.cf"),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("main.cf, line 2")
            && e.contains("unverified_sender_tempfail_action")
            && e.contains("defer_if_permit, defer"),
        "{e}"
    );
}

/// [`check`] with a verifier, for a null sender.
fn check_with(p: &Policy, client: &str, rcpt: &str, v: &Verifier) -> Verdict {
    let r = mbox(rcpt);
    p.check(
        &Query {
            client_addr: client.parse().unwrap(),
            client_name: "unknown",
            helo: None,
            sender: None,
            recipient: &r,
            sasl_username: None,
        },
        v,
    )
}

#[test]
fn soft_bounce_turns_permanent_refusals_temporary() {
    let outside = "192.0.2.10";
    let codes = |main_cf: &str| {
        let p = policy(main_cf);
        ["victim@elsewhere.example", "x@mx.example.org"].map(|rcpt| {
            match check(&p, outside, Some("s@example.com"), rcpt) {
                Verdict::Refuse { reply, .. } => {
                    format!("{} {}", reply.code, reply.status)
                }
                v => format!("{v:?}"),
            }
        })
    };
    let rules = "smtpd_recipient_restrictions = defer\n";
    assert_eq!(codes(rules), ["554 5.7.1", "450 4.7.1"]);
    let soft = codes(&format!("{rules}soft_bounce = yes\n"));
    assert_eq!(soft, ["454 4.7.1", "450 4.7.1"]);
}

/// access_map_reject_code and access_map_defer_code set the codes of
/// REJECT and DEFER, with X.7.1 of the code's class (Postfix's
/// smtpd_check.c); an explicit `5NN text` keeps its own; a code outside
/// 400-599 is refused naming its parameter.
#[test]
fn access_map_codes_set_reject_and_defer() {
    let base = "access_map_reject_code = 550\naccess_map_defer_code = 451\n";
    for (action, code, enh) in [
        ("REJECT", 550, "5.7.1"),
        ("DEFER", 451, "4.7.1"),
        ("DEFER_IF_PERMIT", 451, "4.7.1"),
        ("554 5.7.9 own code", 554, "5.7.9"),
    ] {
        let p = policy(&format!(
            "{base}smtpd_recipient_restrictions = check_sender_access static:{{{action}}}\n"
        ));
        match check(&p, "127.0.0.1", Some("s@example.com"), "u@mx.example.org") {
            Verdict::Refuse { reply, .. } => {
                assert_eq!(
                    (reply.code, reply.status.to_string()),
                    (code, enh.into()),
                    "{action}"
                );
            }
            v => panic!("{action}: {v:?}"),
        }
    }
    // A 4xx reject code makes a temporary refusal, 4.7.1.
    let p = policy(
        "access_map_reject_code = 450\nsmtpd_recipient_restrictions = check_sender_access static:REJECT\n",
    );
    match check(&p, "127.0.0.1", Some("s@example.com"), "u@mx.example.org") {
        Verdict::Refuse { reply, .. } => assert_eq!(reply.to_string().get(..9), Some("450 4.7.1")),
        v => panic!("{v:?}"),
    }
    for name in ACCESS_CODES {
        let cfg = Config::parse(&format!("{name} = 250\n"), Path::new("main.cf"), &[])
            .unwrap()
            .config;
        let e = Policy::from_config(&cfg).unwrap_err();
        assert_eq!(e.param, name);
        assert!(e.message.contains("400 to 599"), "{}", e.message);
    }
}

/// VRFY is refused only for a user the recipient lookup says is unknown;
/// a known, remote or unanswered address is left to 252.
#[test]
fn vrfy_refuses_only_unknown_local_users() {
    let p = policy("");
    let known = Unlisted(&["root@mx.example.org"], false);
    let refusal = p
        .vrfy(&mbox("ghost@mx.example.org"), &known)
        .expect("a refusal");
    assert_eq!(
        refusal.to_string(),
        "550 5.1.1 <ghost@mx.example.org>: Recipient address rejected: User unknown in local recipient table"
    );
    assert_eq!(p.vrfy(&mbox("root@mx.example.org"), &known), None);
    assert_eq!(
        p.vrfy(&mbox("ghost@mx.example.org"), &Unlisted(&[], true)),
        None
    );
    assert_eq!(p.vrfy(&mbox("x@elsewhere.example.com"), &NoRouter), None);
    let off = policy("smtpd_reject_unlisted_recipient = no\n");
    assert_eq!(off.vrfy(&mbox("ghost@mx.example.org"), &NoRouter), None);
}
