//! smtpd asks the router about recipients without blocking its event loop:
//! a slow router delays only the session that asked (the others' replies
//! stay prompt, measured), a silent one gives that RCPT 451 4.3.0 within
//! `smtpd_router_timeout`, and one that drops the connection gives 451 at
//! once and is reconnected for the next question; one that answers a
//! temporary failure gives the client Postfix's bare "Temporary lookup
//! failure" and the log the router's status. The router is
//! `support::fake_router` bound at `private/router` (master.cf has no
//! router service), with one smtpd process so every session shares its loop.

use std::time::{Duration, Instant};

use sluice_suite::fake_router::{Behaviour, FakeRouter};
use sluice_suite::smtp_client::SmtpClient;
use sluice_suite::{free_port, Instance};

fn instance(extra: &str) -> (Instance, u16) {
    let port = free_port();
    // maxproc 1: the sessions of a test share one smtpd process and loop.
    let cf = format!(
        "127.0.0.1:{port} inet n - n - 1 smtpd\n\
         anvil unix - - n - 1 anvil\n\
         cleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nmydomain = test.example\n\
         smtpd_reject_unlisted_recipient = yes\n{extra}"
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);
    (inst, port)
}

fn router(inst: &Instance, b: Behaviour) -> FakeRouter {
    FakeRouter::bind(&inst.root().join("spool/private/router"), b)
}

#[test]
fn a_slow_router_delays_only_the_session_that_asked() {
    let (inst, port) = instance("");
    let fake = router(&inst, Behaviour::After(Duration::from_secs(5)));

    let (mut a, _) = SmtpClient::connect(port);
    a.expect("EHLO a.example", "250");
    a.expect("MAIL FROM:<a@example.com>", "250");
    // A local recipient: smtpd asks the router, which takes 5 s. The next
    // command is pipelined behind it and must be answered after it.
    let asked = Instant::now();
    a.send("RCPT TO:<bob@mx.test.example>\r\nRCPT TO:broken\r\n");
    fake.next_request(5);

    // Meanwhile another session is served at once, by the same process.
    let start = Instant::now();
    let (mut b, greeting) = SmtpClient::connect(port);
    let greeted = ("greeting", start.elapsed());
    assert!(greeting.starts_with("220"), "{greeting}");
    let commands = b.slowest(&[
        ("EHLO b.example", "250"),
        ("MAIL FROM:<b@example.com>", "250"),
        // Remote, relay permitted from mynetworks: no router question.
        ("RCPT TO:<someone@remote.example>", "250"),
        ("RSET", "250"),
        ("NOOP", "250"),
    ]);
    let slowest = if commands.1 > greeted.1 {
        commands
    } else {
        greeted
    };
    b.expect("QUIT", "221");
    assert!(
        slowest.1 < Duration::from_millis(50),
        "{} took {:?} while another session waited on the router",
        slowest.0,
        slowest.1
    );
    // The first session still had no answer: the router has not replied.
    assert!(asked.elapsed() < Duration::from_secs(5));

    // Its answers come in order once the router replies.
    let first = a.reply();
    let waited = asked.elapsed();
    assert!(first.starts_with("250"), "{first}");
    assert!(
        waited >= Duration::from_millis(4500),
        "answered after {waited:?}, before the router did"
    );
    let second = a.reply();
    assert!(
        second.starts_with("501"),
        "pipelined reply out of order: {second}"
    );
    a.expect("QUIT", "221");
}

#[test]
fn a_silent_router_gives_451_within_the_deadline() {
    let (inst, port) = instance("smtpd_router_timeout = 2s\n");
    let fake = router(&inst, Behaviour::Never);
    let (mut c, _) = SmtpClient::connect(port);
    c.expect("EHLO a.example", "250");
    c.expect("MAIL FROM:<a@example.com>", "250");
    let (r, took) = c.timed("RCPT TO:<bob@mx.test.example>");
    assert!(r.starts_with("451 4.3.0 "), "{r}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
        "451 after {took:?} with smtpd_router_timeout = 2s"
    );
    assert!(matches!(
        fake.next_request(1),
        ipc::router::Request::Resolve { .. }
    ));
    assert_eq!(
        r.trim_end(),
        "451 4.3.0 <bob@mx.test.example>: Temporary lookup failure"
    );
    // Only that recipient: the transaction goes on.
    c.expect("RCPT TO:<someone@remote.example>", "250");
    c.expect("QUIT", "221");
    inst.wait_log(5, "no answer within smtpd_router_timeout (2s)");
    // The link said why; the policy adds no second warning.
    let warnings = smtpd_warnings(&inst);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
}

/// smtpd's warnings in the instance's log.
fn smtpd_warnings(inst: &Instance) -> Vec<String> {
    inst.log()
        .lines()
        .filter(|l| l.contains("/smtpd[") && l.contains("warning:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_router_failure_is_logged_not_told_to_the_client() {
    let (inst, port) = instance("");
    let _fake = router(&inst, Behaviour::Fail);
    let (mut c, _) = SmtpClient::connect(port);
    c.expect("EHLO a.example", "250");
    c.expect("MAIL FROM:<a@example.com>", "250");
    // As Postfix: the router's status, map names and DNS errors are the
    // postmaster's business, not the client's.
    let (r, _) = c.timed("RCPT TO:<bob@mx.test.example>");
    assert_eq!(
        r.trim_end(),
        "451 4.3.0 <bob@mx.test.example>: Temporary lookup failure"
    );
    c.expect("QUIT", "221");
    let reject = inst.wait_log(5, "NOQUEUE: reject: RCPT from");
    assert!(
        reject.contains(
            ": 451 4.3.0 <bob@mx.test.example>: Temporary lookup failure; from=<a@example.com>"
        ),
        "{reject}"
    );
    let warnings = smtpd_warnings(&inst);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains(&format!(
            "warning: router lookup error for <bob@mx.test.example>: 4.4.3 {}",
            sluice_suite::fake_router::FAILURE
        )),
        "{warnings:#?}"
    );
}

#[test]
fn a_router_that_drops_the_link_gives_451_and_is_reconnected() {
    let (inst, port) = instance("");
    let fake = router(&inst, Behaviour::Close);
    let (mut c, _) = SmtpClient::connect(port);
    c.expect("EHLO a.example", "250");
    c.expect("MAIL FROM:<a@example.com>", "250");
    let (r, took) = c.timed("RCPT TO:<bob@mx.test.example>");
    assert!(r.starts_with("451 4.3.0 "), "{r}");
    assert!(took < Duration::from_secs(2), "451 after {took:?}");
    // The router is back: the next question opens a new link.
    fake.set(Behaviour::After(Duration::ZERO));
    c.expect("RCPT TO:<bob@mx.test.example>", "250");
    assert_eq!(fake.connections(), 2);
    c.expect("QUIT", "221");
}
