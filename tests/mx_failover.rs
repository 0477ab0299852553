//! A dead primary MX with a live secondary, served by a real DNS server
//! (dnsmasq on a loopback port): the router finds both, the scheduler moves
//! to the secondary after the primary refuses, and the message is delivered
//! there. Needs root, to listen on port 25 of a loopback address.

use sluice_suite::{dnsmasq, free_port, queued_id, smtp_sink, swaks, wait_for, Instance};

#[test]
fn dead_primary_mx_falls_back_to_the_secondary() {
    sluice_suite::require_root("the MX hosts listen on port 25");
    // The secondary MX: Postfix's smtp-sink on 127.0.0.3:25.
    let sink = smtp_sink("127.0.0.3:25", &[]);
    // DNS: dest.test has MX 10 mx1 (127.0.0.2, nothing listens) and MX 20 mx2.
    let (_dns, dns) = dnsmasq(&[
        "--mx-host=dest.test,mx1.dest.test,10",
        "--mx-host=dest.test,mx2.dest.test,20",
        "--host-record=mx1.dest.test,127.0.0.2",
        "--host-record=mx2.dest.test,127.0.0.3",
    ]);
    let smtpd = free_port();
    let cf = format!(
        "127.0.0.1:{smtpd} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nsmtpd_reject_unlisted_recipient = no\ndns_servers = {dns}\n\
         inet_protocols = ipv4\nminimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n"
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(smtpd);
    // dnsmasq may still be starting; the router retries, and so does qmgr.
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{smtpd}"),
        "--from",
        "a@example.com",
        "--to",
        "user@dest.test",
    ]);
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    let sent = inst.wait_log(
        30,
        &format!("{id}: to=<user@dest.test>, relay=mx2.dest.test[127.0.0.3]:25"),
    );
    assert!(sent.contains("status=sent"), "{sent}");
    assert!(
        inst.log()
            .contains("connect to mx1.dest.test[127.0.0.2]:25"),
        "the primary was tried first:\n{}",
        inst.log()
    );
    wait_for(10, "the dump at the secondary", || {
        (sluice_suite::dumped(&sink) == 1).then_some(())
    });
    inst.stop();
}
