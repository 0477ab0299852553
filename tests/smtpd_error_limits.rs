//! smtpd_soft_error_limit and smtpd_error_sleep_time: once a client has
//! made the soft limit's errors, each reply to it waits error_sleep_time
//! (Postfix's smtpd_chat), and the wait is that session's alone: with one
//! smtpd process, a second client is answered while the first waits.

use std::sync::mpsc;
use std::time::Duration;

use sluice_suite::smtp_client::SmtpClient;
use sluice_suite::{free_port, receive_master_cf, Instance, RECEIVE_MAIN_CF};

/// Long enough that the second session is done well before it ends.
const SLEEP_SECS: u64 = 4;

#[test]
fn errors_past_the_soft_limit_wait_without_holding_other_sessions() {
    let port = free_port();
    // One smtpd process: both clients are sessions of the same event loop.
    let master = receive_master_cf(port, "").replacen("n - - smtpd", "n - 1 smtpd", 1);
    assert!(master.contains("n - 1 smtpd"), "{master}");
    let main = format!(
        "{RECEIVE_MAIN_CF}smtpd_soft_error_limit = 2\n\
         smtpd_error_sleep_time = {SLEEP_SECS}s\n\
         smtpd_hard_error_limit = 20\n"
    );
    let mut inst = Instance::new(&master, &main);
    inst.start();
    inst.wait_port(port);

    let (mut slow, greeting) = SmtpClient::connect(port);
    assert!(greeting.starts_with("220"), "{greeting}");
    // Below the soft limit errors are answered at once.
    slow.expect("FOO", "502 5.5.2");
    slow.expect("BAR", "502 5.5.2");
    // The third reply waits; meanwhile another client is served.
    slow.send("BAZ\r\n");
    let (tx, rx) = mpsc::channel();
    let late = tx.clone();
    let waiter = std::thread::spawn(move || {
        let reply = slow.reply();
        late.send(format!("slow: {reply}")).unwrap();
        // Still past the limit: a good command's reply waits too. (A lower
        // bound only: the sleep happened; how long beyond it is not tested.)
        let (reply, took) = slow.timed("NOOP");
        assert!(
            took >= Duration::from_secs(SLEEP_SECS) - Duration::from_millis(500),
            "the reply to NOOP came after {took:?}, not after the error sleep"
        );
        late.send(format!("slow: {reply}")).unwrap();
    });
    let (mut quick, greeting) = SmtpClient::connect(port);
    assert!(greeting.starts_with("220"), "{greeting}");
    quick.expect("EHLO client.test.example", "250");
    quick.expect("NOOP", "250");
    quick.expect("QUIT", "221");
    tx.send("quick: done".to_string()).unwrap();
    let events: Vec<String> = (0..3)
        .map(|_| rx.recv_timeout(Duration::from_secs(60)).expect("an event"))
        .collect();
    waiter.join().unwrap();
    assert_eq!(
        events[0], "quick: done",
        "the other session was answered during the sleep: {events:?}"
    );
    assert!(events[1].starts_with("slow: 502 5.5.2"), "{events:?}");
    assert!(events[2].starts_with("slow: 250"), "{events:?}");
}
