//! Two next hops on one address and different ports are different hosts:
//! mail routed by transport_maps to a dead port must not put the relayhost,
//! a live port on the same address, in retry (Postfix keeps them apart).
//! The mail for the dead port waits saying what the failed connect said.

use sluice_suite::{free_port, queued_id, relay_instance, sink_dump, smtp_sink, swaks};

/// Sends one message with swaks; returns its queue id.
fn send(port: u16, to: &str) -> String {
    let server = format!("127.0.0.1:{port}");
    let args = [
        "--server",
        &server,
        "--from",
        "alice@example.com",
        "--to",
        to,
    ];
    let (code, out) = swaks(&args);
    assert_eq!(code, 0, "{out}");
    queued_id(&out)
}

#[test]
fn a_dead_port_does_not_hold_back_mail_for_a_live_port_on_the_same_address() {
    let live = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    // Nothing listens there: connects are refused.
    let dead = free_port();
    let (inst, port) = relay_instance(
        live.port,
        &format!("transport_maps = inline:{{ down.example=smtp:[127.0.0.1]:{dead} }}\n"),
    );
    let first = send(port, "x@down.example");
    let refused = format!("connect to 127.0.0.1[127.0.0.1]:{dead}: Connection refused");
    let line = inst.wait_log(30, &format!("{first}: to=<x@down.example>"));
    assert!(
        line.contains("status=deferred") && line.contains(&refused),
        "{line}"
    );

    // The relayhost shares the address, not the port: delivered at once.
    let second = send(port, "y@up.example");
    sink_dump(&live, &inst, &second, "y@up.example");
    let log = inst.log();
    assert!(
        !log.lines()
            .any(|l| l.contains(&second) && l.contains("status=deferred")),
        "{log}"
    );

    // More mail for the dead port waits without a connect, and says why
    // in words a postmaster knows.
    let third = send(port, "z@down.example");
    let line = inst.wait_log(30, &format!("{third}: to=<z@down.example>"));
    assert!(line.contains("status=deferred"), "{line}");
    assert!(
        line.contains(&format!("delivery temporarily suspended: {refused}")),
        "{line}"
    );
    assert!(!line.contains("destdb"), "{line}");
}
