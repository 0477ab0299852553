//! Every end of data is answered within seconds, whatever cleanup waits
//! on: a router that never answers the address mapping gives 451 4.3.0
//! after `cleanup_router_timeout`, a stopped qmgr (SIGSTOP) gives 451 4.3.0
//! after `cleanup_qmgr_timeout`, and in neither case is anything queued
//! behind the client's back when the stopped process comes back.

use std::time::{Duration, Instant};

use sluice_suite::fake_router::{Behaviour, FakeRouter};
use sluice_suite::smtp_client::SmtpClient;
use sluice_suite::{free_port, receive_master_cf, wait_for, Instance};

fn instance(extra: &str) -> (Instance, u16) {
    let port = free_port();
    let main = format!(
        "myhostname = mx.test.example\nmydomain = test.example\n\
         smtpd_reject_unlisted_recipient = no\n{extra}"
    );
    let mut inst = Instance::new(&receive_master_cf(port, ""), &main);
    inst.start();
    inst.wait_port(port);
    (inst, port)
}

/// Sends one message; returns the reply to the final dot and how long it took.
fn send(port: u16, rcpt: &str) -> (String, Duration) {
    let (mut c, _) = SmtpClient::connect(port);
    c.expect("EHLO client.example", "250");
    c.expect("MAIL FROM:<a@example.com>", "250");
    c.expect(&format!("RCPT TO:<{rcpt}>"), "250");
    c.expect("DATA", "354");
    let start = Instant::now();
    c.send("Subject: deadline\r\n\r\nbody\r\n.\r\n");
    let r = c.reply();
    let took = start.elapsed();
    let _ = c.timed("QUIT");
    (r, took)
}

struct Continue(i32);

impl Drop for Continue {
    fn drop(&mut self) {
        // Never leave a stopped qmgr behind, even when an assertion fails.
        let _ = sys::process::signal(self.0, 18);
    }
}

#[test]
fn a_router_that_never_maps_gives_451_and_queues_nothing() {
    let (inst, port) = instance(
        "virtual_alias_maps = inline:{ { team@mx.test.example = bob@mx.test.example } }\n\
         cleanup_router_timeout = 2s\n",
    );
    let fake = FakeRouter::bind(&inst.root().join("spool/private/router"), Behaviour::Never);
    let (r, took) = send(port, "team@mx.test.example");
    assert!(r.starts_with("451 4.3.0 "), "{r}");
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
        "451 after {took:?} with cleanup_router_timeout = 2s"
    );
    assert!(matches!(
        fake.next_request(1),
        ipc::router::Request::Rewrite { .. }
    ));
    inst.wait_log(5, "within cleanup_router_timeout (2s)");
    assert!(inst.queue_json().is_empty(), "{:?}", inst.queue_json());
    // A router that answers again: mail flows.
    fake.set(Behaviour::After(Duration::ZERO));
    let (r, _) = send(port, "team@mx.test.example");
    assert!(r.starts_with("250"), "{r}");
    assert_eq!(inst.queue_json().len(), 1);
}

#[test]
fn a_stopped_qmgr_gives_451_within_the_deadline_and_nothing_is_queued() {
    let (inst, port) = instance("cleanup_qmgr_timeout = 2s\n");
    let qmgr = wait_for(10, "qmgr running", || inst.pids("qmgr").first().copied());
    sys::process::signal(qmgr, 19).expect("SIGSTOP qmgr");
    let cont = Continue(qmgr);
    let (r, took) = send(port, "bob@mx.test.example");
    assert!(r.starts_with("451 4.3.0 "), "{r}");
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
        "451 after {took:?} with cleanup_qmgr_timeout = 2s"
    );
    inst.wait_log(
        5,
        "no queue manager answered within cleanup_qmgr_timeout (2s)",
    );
    // qmgr comes back: the refused message was never committed, so it is
    // not queued behind the client's back; the next one is.
    drop(cont);
    let (r, _) = send(port, "carol@mx.test.example");
    assert!(r.starts_with("250"), "{r}");
    let q = inst.queue_json();
    assert_eq!(q.len(), 1, "{q:?}");
    assert!(q[0].contains("carol@mx.test.example"), "{q:?}");

    // Stopped again while cleanup's link to it is established: the
    // message is announced and not confirmed, and the client still hears
    // 451 within the deadline (qmgr may journal it when it resumes: see
    // cleanup(8)).
    sys::process::signal(qmgr, 19).expect("SIGSTOP qmgr");
    let _cont = Continue(qmgr);
    let (r, took) = send(port, "dave@mx.test.example");
    assert!(r.starts_with("451 4.3.0 "), "{r}");
    assert!(took < Duration::from_secs(6), "451 after {took:?}");
    inst.wait_log(5, "qmgr did not commit within cleanup_qmgr_timeout (2s)");
}

#[test]
fn a_stopped_cleanup_gives_451_within_smtpd_cleanup_timeout() {
    let (inst, port) = instance("smtpd_cleanup_timeout = 2s\n");
    let (r, _) = send(port, "bob@mx.test.example");
    assert!(r.starts_with("250"), "{r}");
    let pids = inst.pids("cleanup");
    assert!(!pids.is_empty(), "no cleanup process after a message");
    let _cont: Vec<Continue> = pids
        .iter()
        .map(|&p| {
            sys::process::signal(p, 19).expect("SIGSTOP cleanup");
            Continue(p)
        })
        .collect();
    let (mut c, _) = SmtpClient::connect(port);
    c.expect("EHLO client.example", "250");
    c.expect("MAIL FROM:<a@example.com>", "250");
    c.expect("RCPT TO:<bob@mx.test.example>", "250");
    // DATA is answered at once (the start of message goes to cleanup with
    // the content); the session's link to cleanup (the first message's,
    // kept by the pool) takes the message, and the end of data waits for
    // cleanup's answer and gets 451 at the deadline instead.
    c.expect("DATA", "354");
    let start = Instant::now();
    c.send("Subject: stopped\r\n\r\nbody\r\n.\r\n");
    let r = c.reply();
    let took = start.elapsed();
    assert!(r.starts_with("451 4.3.0 "), "{r}");
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
        "451 after {took:?} with smtpd_cleanup_timeout = 2s"
    );
    inst.wait_log(5, "within smtpd_cleanup_timeout (2s)");
    c.expect("QUIT", "221");
}
