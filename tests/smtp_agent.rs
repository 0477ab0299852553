//! The smtp delivery agent against Postfix's smtp-sink, driven over the
//! delivery protocol by the test as qmgr would drive it.

use std::path::Path;
use std::time::Duration;

use ipc::delivery::{Data, Delivery, RcptResult, Request, Response, Transaction, TxnRecipient};
use ipc::Client;
use sluice_suite::testkit::ShapingSink;
use sluice_suite::{free_port, smtp_sink, wait_for, Instance, Sink};

fn sink(extra: &[&str]) -> Sink {
    smtp_sink(&format!("127.0.0.1:{}", free_port()), extra)
}

fn dumped(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .collect();
    v.sort();
    v
}

fn agent() -> (Instance, Client<Delivery>) {
    let mut inst = Instance::new(
        "smtp unix - - n - - smtp\n",
        "smtp_helo_name = client.test.example\n",
    );
    inst.start();
    let sock = inst.root().join("spool/private/smtp");
    let c = Client::<Delivery>::connect(&sock, Duration::from_secs(30))
        .expect("connect to the smtp agent");
    (inst, c)
}

fn txn(qid: &str, rcpts: &[&str], body: &str) -> Box<Transaction> {
    let data = format!("From: s@test.example\r\nSubject: {qid}\r\n\r\n{body}\r\n").into_bytes();
    Box::new(Transaction {
        queue_id: qid.into(),
        sender: "s@test.example".into(),
        ret: None,
        envid: None,
        body: mail::BodyType::SevenBit,
        smtputf8: false,
        size: data.len() as u64,
        arrival_us: 0,
        recipients: rcpts
            .iter()
            .enumerate()
            .map(|(i, a)| TxnRecipient {
                index: i as u32,
                address: a.to_string(),
                notify: mail::Notify::Default,
                orcpt: None,
            })
            .collect(),
        data: Data::Inline(data),
    })
}

fn open(c: &mut Client<Delivery>, conn: u64, port: u16) -> Response {
    open_from(c, conn, &format!("127.0.0.1:{port}"), None)
}

/// Opens a connection to `addr`, bound to `source` when given.
fn open_from(c: &mut Client<Delivery>, conn: u64, addr: &str, source: Option<&str>) -> Response {
    c.call(&Request::Open {
        conn,
        host: "sink.test".into(),
        nexthop: "sink.test".into(),
        addrs: vec![addr.parse().unwrap()],
        source: source.map(|s| s.parse().unwrap()),
        dane: Default::default(),
    })
    .unwrap()
}

fn results(r: Response) -> (Vec<RcptResult>, bool) {
    match r {
        Response::Sent {
            results,
            conn_failed,
            ..
        } => (results, conn_failed),
        other => panic!("expected Sent, got {other:?}"),
    }
}

#[test]
fn many_messages_over_one_connection_reach_smtp_sink() {
    let s = sink(&[]);
    let (inst, mut c) = agent();
    assert!(matches!(
        open(&mut c, 1, s.port),
        Response::Opened { conn: 1, .. }
    ));
    // Queue three transactions at once: the connection's backlog.
    let ids: Vec<u64> = (0..3)
        .map(|i| {
            c.send(&Request::Send {
                conn: 1,
                txn: txn(&format!("Q{i}"), &["a@dest.test", "b@dest.test"], "hello"),
            })
            .unwrap()
        })
        .collect();
    for id in ids {
        let (res, failed) = results(c.wait(id).unwrap());
        assert!(!failed);
        assert_eq!(res.len(), 2);
        assert!(res.iter().all(|r| r.status.is_success()), "{res:?}");
    }
    assert!(matches!(
        c.call(&Request::Close { conn: 1 }).unwrap(),
        Response::Closed { conn: 1, .. }
    ));
    let msgs = wait_for(10, "three dumps", || {
        let m = dumped(s.dir.path());
        (m.len() == 3).then_some(m)
    });
    assert!(
        msgs.iter()
            .all(|m| m.contains("hello") && m.contains("a@dest.test") && m.contains("b@dest.test")),
        "{msgs:?}"
    );
    inst.wait_log(5, "Q0: to=<a@dest.test>, relay=sink.test[127.0.0.1]");
    inst.wait_log(5, "status=sent (250 ");
    inst.wait_log(5, "conn_use=3");
}

#[test]
fn connect_failure_is_reported_as_unreachable() {
    let (_inst, mut c) = agent();
    let closed = free_port();
    match open(&mut c, 7, closed) {
        Response::OpenFailed {
            conn: 7,
            failure: ipc::delivery::OpenFailure::Unreachable,
            reason,
            remote: None,
        } => assert!(reason.text.contains("Connection refused"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_source_address_of_the_open_request_is_bound_for_the_connection() {
    let sink = ShapingSink::start(&["127.0.0.10", "127.0.0.11"]);
    let (inst, mut c) = agent();
    for (conn, to, from) in [
        (1, "127.0.0.10", "127.0.0.2"),
        (2, "127.0.0.11", "127.0.0.3"),
    ] {
        let r = open_from(&mut c, conn, &format!("{to}:{}", sink.port), Some(from));
        assert!(matches!(r, Response::Opened { .. }), "{r:?}");
        let id = c
            .send(&Request::Send {
                conn,
                txn: txn(&format!("S{conn}"), &["a@dest.test"], "from a source"),
            })
            .unwrap();
        let (res, _) = results(c.wait(id).unwrap());
        assert!(res[0].status.is_success(), "{res:?}");
        c.call(&Request::Close { conn }).unwrap();
    }
    let msgs = sink.wait_messages(2, 10);
    let got: Vec<(String, String)> = msgs
        .iter()
        .map(|m| (m.source.to_string(), m.listen.to_string()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("127.0.0.2".to_string(), "127.0.0.10".to_string()),
            ("127.0.0.3".to_string(), "127.0.0.11".to_string())
        ]
    );
    inst.wait_log(5, "S1: to=<a@dest.test>, relay=sink.test[127.0.0.10]");
}

#[test]
fn a_source_that_cannot_be_bound_is_a_clear_local_deferral() {
    let sink = ShapingSink::start(&["127.0.0.10"]);
    let (inst, mut c) = agent();
    // 192.0.2.1 (TEST-NET-1) is no address of this host.
    match open_from(
        &mut c,
        3,
        &format!("127.0.0.10:{}", sink.port),
        Some("192.0.2.1"),
    ) {
        Response::OpenFailed {
            conn: 3,
            failure: ipc::delivery::OpenFailure::Local,
            reason,
            remote: None,
        } => {
            assert_eq!(reason.code, mail::StatusCode::NETWORK_TEMP, "{reason}");
            assert!(
                reason
                    .text
                    .starts_with("cannot bind source address 192.0.2.1: "),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    inst.wait_log(5, "cannot bind source address 192.0.2.1");
    assert!(
        sink.conns().is_empty(),
        "nothing may connect from elsewhere"
    );
}

#[test]
fn recipient_and_data_failures_become_per_recipient_results() {
    // 4xx for RCPT: deferred per recipient, the connection stays usable.
    let s = sink(&["-r", "rcpt"]);
    let (inst, mut c) = agent();
    assert!(matches!(open(&mut c, 1, s.port), Response::Opened { .. }));
    let (res, failed) = results(
        c.call(&Request::Send {
            conn: 1,
            txn: txn("T4", &["x@dest.test"], "b"),
        })
        .unwrap(),
    );
    assert!(!failed);
    assert_eq!(res[0].status.code.class(), 4, "{res:?}");
    assert!(
        res[0].status.text.contains("in reply to RCPT TO command"),
        "{res:?}"
    );
    inst.wait_log(5, "T4: to=<x@dest.test>");
    inst.wait_log(5, "status=deferred");
    drop(s);
    // 5xx: bounced.
    let s = sink(&["-f", "rcpt"]);
    assert!(matches!(open(&mut c, 2, s.port), Response::Opened { .. }));
    let (res, _) = results(
        c.call(&Request::Send {
            conn: 2,
            txn: txn("T5", &["y@dest.test"], "b"),
        })
        .unwrap(),
    );
    assert_eq!(res[0].status.code.class(), 5, "{res:?}");
    inst.wait_log(5, "status=bounced");
    drop(s);
    // A peer that hangs up after DATA: the transaction fails with the connection.
    let s = sink(&["-q", "data"]);
    assert!(matches!(open(&mut c, 3, s.port), Response::Opened { .. }));
    let (res, failed) = results(
        c.call(&Request::Send {
            conn: 3,
            txn: txn("T6", &["z@dest.test"], "b"),
        })
        .unwrap(),
    );
    assert!(failed, "{res:?}");
    assert_eq!(
        res[0].status.code.class(),
        4,
        "never a bounce for a lost connection: {res:?}"
    );
}

#[test]
fn journal_data_is_read_by_reference_and_unknown_connections_are_answered() {
    let s = sink(&[]);
    let (inst, mut c) = agent();
    // A small message as qmgr journals it: the agent reads its bytes from
    // the segment file, by the span the journal gave.
    let data = b"From: s@test.example\r\nSubject: J1\r\n\r\njournal body\r\n".to_vec();
    let mut j = queue::Journal::open(
        &inst.root().join("spool/journal"),
        queue::JournalConfig::default(),
    )
    .unwrap();
    let rec = queue::Record::Arrived(queue::MessageHead {
        id: mail::QueueId::from_parts(1_700_000_000_000_000, 1, 1).unwrap(),
        envelope: mail::Envelope {
            sender: "s@test.example".into(),
            recipients: vec![mail::Recipient::new("a@dest.test")],
            ..mail::Envelope::default()
        },
        data: queue::DataRef::Inline(data.clone()),
    });
    let (_, span) = j.append_with_span(&rec).unwrap();
    let span = span.unwrap();
    j.commit().unwrap();
    assert!(matches!(open(&mut c, 1, s.port), Response::Opened { .. }));
    let mut t = txn("J1", &["a@dest.test"], "");
    t.data = Data::Journal(span);
    t.size = data.len() as u64;
    let (res, _) = results(c.call(&Request::Send { conn: 1, txn: t }).unwrap());
    assert!(res[0].status.is_success(), "{res:?}");
    let msgs = wait_for(10, "the dump", || {
        let m = dumped(s.dir.path());
        (m.len() == 1).then_some(m)
    });
    assert!(
        msgs[0].contains("Subject: J1") && msgs[0].contains("journal body"),
        "{msgs:?}"
    );
    // A span past the segment's end is a local problem: deferred, nothing sent.
    let mut t = txn("J2", &["a@dest.test"], "");
    t.data = Data::Journal(queue::DataSpan {
        len: span.len + 100_000,
        ..span
    });
    let (res, failed) = results(c.call(&Request::Send { conn: 1, txn: t }).unwrap());
    assert!(!failed, "the connection is fine: {res:?}");
    assert_eq!(res[0].status.code.to_string(), "4.3.0", "{res:?}");
    assert!(
        res[0].status.text.contains("cannot read the message"),
        "{res:?}"
    );
    // qmgr's bookkeeping errors are answered, and the open connection stays.
    match open(&mut c, 1, s.port) {
        Response::OpenFailed {
            conn: 1, reason, ..
        } => {
            assert!(reason.text.contains("already exists"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    let (res, failed) = results(
        c.call(&Request::Send {
            conn: 9,
            txn: txn("J3", &["a@dest.test"], "x"),
        })
        .unwrap(),
    );
    assert!(failed, "{res:?}");
    assert_eq!(res[0].status.to_string(), "4.4.0 connection is not open");
    assert!(matches!(
        c.call(&Request::Close { conn: 9 }).unwrap(),
        Response::Closed {
            conn: 9,
            reason: None
        }
    ));
    let (res, _) = results(
        c.call(&Request::Send {
            conn: 1,
            txn: txn("J4", &["a@dest.test"], "still open"),
        })
        .unwrap(),
    );
    assert!(res[0].status.is_success(), "{res:?}");
    let msgs = wait_for(10, "J4's dump", || {
        let m = dumped(s.dir.path());
        (m.len() >= 2).then_some(m)
    });
    assert_eq!(msgs.len(), 2, "nothing was sent for J2 or J3: {msgs:?}");
}
