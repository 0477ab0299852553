//! smtpd_client_message_rate_limit and smtpd_client_recipient_rate_limit
//! through anvil, as Postfix's smtpd and anvil(8) enforce them: every MAIL
//! (RCPT) a client sends within anvil_rate_time_unit is counted, across its
//! connections, and the one over the limit gets 450 4.7.1 with Postfix's
//! warning; a client in smtpd_client_event_limit_exceptions is not counted;
//! without anvil there is no limit. Clients are Python's smtplib, bound to
//! 127.0.0.1 or 127.0.0.2 to be two clients.

use sluice_suite::{free_port, receive_master_cf, Instance, RECEIVE_MAIN_CF};

fn run(inst: &Instance, port: u16, source: &str, steps: &[&str]) -> Vec<String> {
    let mut args = vec![port.to_string(), source.to_string()];
    args.extend(steps.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = inst.python("rate_client.py", &args);
    assert!(
        out.status.success(),
        "rate_client.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn start(master_cf: &str, limits: &str) -> Instance {
    let main = format!(
        "{RECEIVE_MAIN_CF}smtpd_client_message_rate_limit = 2\n\
         smtpd_client_recipient_rate_limit = 3\n{limits}"
    );
    let mut inst = Instance::new(master_cf, &main);
    inst.start();
    inst
}

const STEPS: &[&str] = &[
    "mail", "rcpt:1", "rcpt:2", "vrfy:3", "rcpt:4", "rset", "mail", "rset", "mail",
];

#[test]
fn messages_and_recipients_over_the_limits_get_450_except_for_exempt_clients() {
    let port = free_port();
    let inst = start(
        &receive_master_cf(port, ""),
        "smtpd_client_event_limit_exceptions = 127.0.0.2\n",
    );
    inst.wait_port(port);

    let out = run(&inst, port, "127.0.0.1", STEPS);
    let codes: Vec<&str> = out.iter().map(|l| &l[..l.find(' ').unwrap() + 4]).collect();
    // VRFY counts as a recipient (Postfix's vrfy_cmd), so the second RCPT
    // after it is the fourth recipient event.
    assert_eq!(
        codes,
        [
            "mail: 250",
            "rcpt:1: 250",
            "rcpt:2: 250",
            "vrfy:3: 252",
            "rcpt:4: 450",
            "rset: 250",
            "mail: 250",
            "rset: 250",
            "mail: 450"
        ],
        "{out:?}"
    );
    assert_eq!(
        out[4],
        "rcpt:4: 450 4.7.1 Error: too many recipients from 127.0.0.1"
    );
    assert_eq!(
        out[8],
        "mail: 450 4.7.1 Error: too much mail from 127.0.0.1"
    );
    let line = inst.wait_log(10, "Message delivery request rate limit exceeded");
    assert!(
        line.contains(": 3 from unknown[127.0.0.1] for service"),
        "{line}"
    );
    let line = inst.wait_log(10, "Recipient address rate limit exceeded");
    assert!(
        line.contains(": 4 from unknown[127.0.0.1] for service"),
        "{line}"
    );

    // Counted across connections: a new one from the same client is refused.
    let out = run(&inst, port, "127.0.0.1", &["mail"]);
    assert_eq!(out, ["mail: 450 4.7.1 Error: too much mail from 127.0.0.1"]);

    // An exempt client is not limited, and a message goes through.
    let out = run(&inst, port, "127.0.0.2", STEPS);
    assert!(
        out.iter()
            .all(|l| l.contains(": 250 ") || l.starts_with("vrfy:3: 252")),
        "{out:?}"
    );
    let out = run(
        &inst,
        port,
        "127.0.0.2",
        &["mail", "rcpt:1", "rcpt:2", "rcpt:3", "rcpt:4", "data"],
    );
    assert!(out.iter().all(|l| l.contains(": 250 ")), "{out:?}");
}

#[test]
fn without_anvil_there_is_no_limit_and_one_warning() {
    let port = free_port();
    // No anvil service: smtpd cannot ask.
    let cf = receive_master_cf(port, "").replace("anvil unix - - n - 1 anvil\n", "");
    let inst = start(&cf, "smtpd_client_event_limit_exceptions =\n");
    inst.wait_port(port);
    let out = run(&inst, port, "127.0.0.1", STEPS);
    assert!(
        out.iter()
            .all(|l| l.contains(": 250 ") || l.starts_with("vrfy:3: 252")),
        "{out:?}"
    );
    inst.wait_log(10, "client limits not enforced until anvil answers");
    let log = inst.log();
    assert_eq!(
        log.matches("client limits not enforced until anvil answers")
            .count(),
        1,
        "{log}"
    );
    assert!(!log.contains("rate limit exceeded"), "{log}");
}
