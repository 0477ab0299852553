//! smtpd asks anvil about each new client without blocking its event loop:
//! with anvil stopped (SIGSTOP, so it neither answers nor closes its
//! socket), a session already connected is served at once (measured), a
//! new client is greeted with 220 after `smtpd_anvil_timeout` (no limit, as
//! in Postfix when anvil cannot be reached) with one warning for the
//! outage, and once anvil runs again the count limit gives 421 4.7.0 as
//! the greeting and disconnections are counted. One smtpd process, so
//! every session shares its loop.

use std::time::{Duration, Instant};

use sluice_suite::smtp_client::SmtpClient;
use sluice_suite::{free_port, wait_for, Instance};

/// Sends SIGCONT to a stopped process when dropped, so a failing test does
/// not leave the instance unable to stop.
struct Stopped(i32);

impl Stopped {
    fn stop(pid: i32) -> Stopped {
        sys::process::signal(pid, libc_sig::STOP).expect("SIGSTOP anvil");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = sys::process::signal(self.0, libc_sig::CONT);
    }
}

/// Linux signal numbers.
mod libc_sig {
    pub const STOP: i32 = 19;
    pub const CONT: i32 = 18;
}

#[test]
fn a_stopped_anvil_delays_no_session_and_limits_return_with_it() {
    let port = free_port();
    // maxproc 1: the sessions share one smtpd process and loop.
    let cf = format!(
        "127.0.0.1:{port} inet n - n - 1 smtpd\n\
         anvil unix - - n - 1 anvil\n\
         cleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\n"
    );
    // Loopback is counted (not exempt), at most 2 connections.
    let main = "myhostname = mx.test.example\nmydomain = test.example\n\
                smtpd_client_connection_count_limit = 2\n\
                smtpd_client_event_limit_exceptions =\n\
                smtpd_anvil_timeout = 1s\n";
    let mut inst = Instance::new(&cf, main);
    inst.start();
    inst.wait_port(port);

    // A first client starts anvil and smtpd's link to it.
    let (mut a, greeting) = SmtpClient::connect(port);
    assert!(greeting.starts_with("220"), "{greeting}");
    a.expect("EHLO a.example", "250");
    let anvil = wait_for(10, "the anvil process", || {
        inst.pids("anvil").first().copied()
    });
    let stopped = Stopped::stop(anvil);

    // A new client: its session waits for anvil, in another thread.
    let connecting = Instant::now();
    let b = std::thread::spawn(move || {
        let (b, greeting) = SmtpClient::connect(port);
        (b, greeting, connecting.elapsed())
    });
    std::thread::sleep(Duration::from_millis(100));

    // Meanwhile the session already connected is served at once.
    let slowest = a.slowest(&[
        ("MAIL FROM:<a@example.com>", "250"),
        ("RCPT TO:<someone@remote.example>", "250"),
        ("RSET", "250"),
        ("NOOP", "250"),
        ("EHLO a.example", "250"),
    ]);
    assert!(
        slowest.1 < Duration::from_millis(50),
        "{} took {:?} while a new session waited on a stopped anvil",
        slowest.0,
        slowest.1
    );
    assert!(
        !b.is_finished(),
        "the new client was greeted before anvil's deadline"
    );

    // No answer within smtpd_anvil_timeout: greeted, no limit applied.
    let (mut b, greeting, waited) = b.join().unwrap();
    assert!(greeting.starts_with("220"), "{greeting}");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "greeted after {waited:?} with smtpd_anvil_timeout = 1s"
    );
    // A third client is over the limit of 2, but anvil cannot say so.
    let (mut c, greeting) = SmtpClient::connect(port);
    assert!(greeting.starts_with("220"), "{greeting}");
    let log = inst.log();
    let warnings = log
        .matches("no answer within smtpd_anvil_timeout (1s)")
        .count();
    assert_eq!(warnings, 1, "one warning per outage:\n{log}");
    assert!(log.contains("client limits not enforced"), "{log}");

    // anvil runs again: it counted b and c from the questions it owed, so a
    // fourth client gets 421 4.7.0 as its greeting.
    drop(stopped);
    let (_d, greeting) = SmtpClient::connect(port);
    assert!(
        greeting.starts_with("421 4.7.0 Error: too many connections from 127.0.0.1"),
        "{greeting}"
    );

    // Disconnections are told without waiting: once b and c are gone, a
    // client within the limit is greeted again.
    b.expect("QUIT", "221");
    c.expect("QUIT", "221");
    drop(_d);
    let (mut e, greeting) = wait_for(10, "a 220 greeting after disconnections", || {
        let (e, greeting) = SmtpClient::connect(port);
        greeting.starts_with("220").then_some((e, greeting))
    });
    assert!(greeting.starts_with("220"), "{greeting}");
    e.expect("QUIT", "221");
    a.expect("QUIT", "221");
}
