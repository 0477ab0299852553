//! The shaping sink itself, proven with Python's smtplib binding its
//! source addresses: what the end-to-end shaping tests rely on it to
//! record (sources, listening addresses, concurrency, transactions,
//! arrival times) and to answer (scripted replies per address).

use std::net::IpAddr;
use std::process::Command;

use sluice_suite::testkit::{ShapingSink, Stage};
use sluice_suite::wait_for;

/// Runs a Python smtplib script with the sink's port as `PORT`; gives its
/// standard output, asserting it ran to the end.
fn py(port: u16, script: &str) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(format!("import smtplib\nPORT = {port}\n{script}"))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn records_sources_listeners_concurrency_transactions_and_arrivals() {
    let sink = ShapingSink::start(&["127.0.0.10", "127.0.0.11"]);
    py(
        sink.port,
        "a = smtplib.SMTP('127.0.0.10', PORT, source_address=('127.0.0.2', 0))\n\
         b = smtplib.SMTP('127.0.0.10', PORT, source_address=('127.0.0.2', 0))\n\
         c = smtplib.SMTP('127.0.0.11', PORT, source_address=('127.0.0.3', 0))\n\
         a.sendmail('s@t.test', ['r1@d.test'], 'Subject: a1\\r\\n\\r\\nx\\r\\n')\n\
         a.sendmail('s@t.test', ['r2@d.test'], 'Subject: a2\\r\\n\\r\\nx\\r\\n')\n\
         b.sendmail('s@t.test', ['r3@d.test'], 'Subject: b1\\r\\n\\r\\nx\\r\\n')\n\
         c.sendmail('s@t.test', ['r4@d.test', 'r5@d.test'], 'Subject: c1\\r\\n\\r\\n.dot\\r\\n')\n\
         a.quit(); b.quit(); c.quit()\n\
         # One more from .2 after the others closed: not concurrent with them.\n\
         d = smtplib.SMTP('127.0.0.10', PORT, source_address=('127.0.0.2', 0))\n\
         d.quit()\n",
    );
    let conns = wait_for(10, "every connection closed", || {
        let c = sink.conns();
        (c.len() == 4 && c.iter().all(|c| c.closed.is_some())).then_some(c)
    });
    let who: Vec<(IpAddr, IpAddr, u16, usize)> = conns
        .iter()
        .map(|c| {
            (
                c.source.ip(),
                c.listen.ip(),
                c.listen.port(),
                c.transactions,
            )
        })
        .collect();
    let p = sink.port;
    assert_eq!(
        who,
        vec![
            (ip("127.0.0.2"), ip("127.0.0.10"), p, 2),
            (ip("127.0.0.2"), ip("127.0.0.10"), p, 1),
            (ip("127.0.0.3"), ip("127.0.0.11"), p, 1),
            (ip("127.0.0.2"), ip("127.0.0.10"), p, 0),
        ]
    );
    for c in &conns {
        assert!(c.closed.unwrap() >= c.connected, "{c:?}");
    }
    assert_eq!(sink.max_concurrent("127.0.0.2", "127.0.0.10"), 2);
    assert_eq!(sink.max_concurrent("127.0.0.3", "127.0.0.11"), 1);
    assert_eq!(sink.max_concurrent("127.0.0.3", "127.0.0.10"), 0);
    assert_eq!(sink.open_now("127.0.0.2", "127.0.0.10"), 0);
    // Across both addresses: .2 had two at once, all sources three.
    let from2 = sink.max_concurrent_where(|c| c.source.ip() == ip("127.0.0.2"));
    assert_eq!(from2, 2);
    assert_eq!(sink.max_concurrent_where(|_| true), 3);

    let msgs = sink.messages();
    let seen: Vec<(usize, IpAddr, IpAddr, Vec<String>)> = msgs
        .iter()
        .map(|m| (m.conn, m.source, m.listen, m.rcpts.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                0,
                ip("127.0.0.2"),
                ip("127.0.0.10"),
                vec!["r1@d.test".to_string()]
            ),
            (
                0,
                ip("127.0.0.2"),
                ip("127.0.0.10"),
                vec!["r2@d.test".to_string()]
            ),
            (
                1,
                ip("127.0.0.2"),
                ip("127.0.0.10"),
                vec!["r3@d.test".to_string()]
            ),
            (
                2,
                ip("127.0.0.3"),
                ip("127.0.0.11"),
                vec!["r4@d.test".to_string(), "r5@d.test".to_string()]
            ),
        ]
    );
    assert!(
        msgs[3].data.contains("\r\n.dot\r\n"),
        "unstuffed: {:?}",
        msgs[3].data
    );
    // Arrival times are in order, and inside their connection's lifetime.
    for w in msgs.windows(2) {
        assert!(w[0].at <= w[1].at);
    }
    for m in &msgs {
        let c = &conns[m.conn];
        assert!(
            c.connected <= m.at && m.at <= c.closed.unwrap(),
            "{m:?} {c:?}"
        );
    }
}

#[test]
fn scripted_replies_apply_to_their_listening_address_only() {
    let sink = ShapingSink::start(&["127.0.0.10", "127.0.0.11"]);
    sink.reply("127.0.0.11", Stage::Rcpt, "421 4.7.0 [TS04] try later");
    sink.reply("127.0.0.10", Stage::Data, "451 4.7.1 [TS02] slow down");
    let out = py(
        sink.port,
        "s = smtplib.SMTP('127.0.0.11', PORT, source_address=('127.0.0.2', 0))\n\
         s.ehlo(); s.mail('s@t.test')\n\
         print('rcpt', s.rcpt('r@d.test'))\n\
         try:\n    s.noop(); print('still open')\n\
         except smtplib.SMTPServerDisconnected:\n    print('closed after 421')\n\
         s = smtplib.SMTP('127.0.0.10', PORT, source_address=('127.0.0.3', 0))\n\
         try:\n    s.sendmail('s@t.test', ['r@d.test'], 'Subject: x\\r\\n\\r\\nx\\r\\n')\n\
         except smtplib.SMTPDataError as e:\n    print('data', e.smtp_code, e.smtp_error.decode())\n\
         s.quit()\n",
    );
    assert!(
        out.contains("rcpt (421, b'4.7.0 [TS04] try later')"),
        "{out}"
    );
    assert!(out.contains("closed after 421"), "{out}");
    assert!(out.contains("data 451 4.7.1 [TS02] slow down"), "{out}");
    assert!(sink.messages().is_empty());

    // Cleared: the same addresses accept again.
    sink.clear_replies();
    py(
        sink.port,
        "for host in ('127.0.0.10', '127.0.0.11'):\n    \
             s = smtplib.SMTP(host, PORT, source_address=('127.0.0.2', 0))\n    \
             s.sendmail('s@t.test', ['ok@d.test'], 'Subject: ok\\r\\n\\r\\nx\\r\\n')\n    \
             s.quit()\n",
    );
    let msgs = sink.wait_messages(2, 10);
    let to: Vec<IpAddr> = msgs.iter().map(|m| m.listen).collect();
    assert_eq!(to, vec![ip("127.0.0.10"), ip("127.0.0.11")]);
}
