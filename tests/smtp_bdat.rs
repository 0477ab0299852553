//! BDAT (RFC 3030) from the smtp agent: to a sink that offers CHUNKING and
//! records the chunks byte for byte (tests/scripts/bdat_sink.py: Postfix
//! 3.7's smtp-sink does not offer CHUNKING), and through two Sluice hops,
//! where the middle smtpd receives BDAT and its smtp sends BDAT again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ipc::delivery::{Data, Delivery, RcptResult, Request, Response, Transaction, TxnRecipient};
use ipc::Client;
use sluice_suite::{free_port, wait_for, Instance, Kill};

struct BdatSink {
    _child: Kill,
    port: u16,
    dir: tempfile::TempDir,
}

fn bdat_sink() -> BdatSink {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/bdat_sink.py");
    let child = Command::new("python3")
        .arg(script)
        .arg(port.to_string())
        .arg(dir.path())
        .spawn()
        .expect("python3");
    // Its own greeting, not another process's on the same port.
    wait_for(10, "the BDAT sink", || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        let mut banner = [0u8; 64];
        let n = std::io::Read::read(&mut s, &mut banner).ok()?;
        String::from_utf8_lossy(&banner[..n])
            .contains("bdat-sink")
            .then_some(())
    });
    BdatSink {
        _child: Kill(child),
        port,
        dir,
    }
}

impl BdatSink {
    /// The messages received so far: (commands, content), in order.
    fn received(&self) -> Vec<(String, Vec<u8>)> {
        let mut v = Vec::new();
        for n in 1.. {
            let base: PathBuf = self.dir.path().join(n.to_string());
            let (Ok(cmd), Ok(msg)) = (
                std::fs::read_to_string(base.with_extension("cmd")),
                std::fs::read(base.with_extension("msg")),
            ) else {
                break;
            };
            v.push((cmd, msg));
        }
        v
    }

    fn wait(&self, n: usize) -> Vec<(String, Vec<u8>)> {
        wait_for(20, &format!("{n} messages at the sink"), || {
            let r = self.received();
            (r.len() >= n).then_some(r)
        })
    }
}

fn agent(cf: &str) -> Instance {
    let mut inst = Instance::new(cf, "smtp_helo_name = client.test.example\n");
    inst.start();
    inst
}

fn connect(inst: &Instance, service: &str) -> Client<Delivery> {
    let sock = inst.root().join("spool/private").join(service);
    Client::<Delivery>::connect(&sock, Duration::from_secs(30)).expect("connect to the agent")
}

/// Dot-stuffs as the spool stores content.
fn stuff(plain: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut bol = true;
    for &b in plain {
        if bol && b == b'.' {
            out.push(b'.');
        }
        out.push(b);
        bol = b == b'\n';
    }
    out
}

fn txn(qid: &str, rcpts: &[&str], wire: Vec<u8>) -> Box<Transaction> {
    Box::new(Transaction {
        queue_id: qid.into(),
        sender: "s@test.example".into(),
        ret: None,
        envid: None,
        body: mail::BodyType::EightBitMime,
        smtputf8: false,
        size: wire.len() as u64,
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
        data: Data::Inline(wire),
    })
}

fn send(c: &mut Client<Delivery>, t: Box<Transaction>) -> Vec<RcptResult> {
    match c.call(&Request::Send { conn: 1, txn: t }).unwrap() {
        Response::Sent {
            results,
            conn_failed: false,
            ..
        } => results,
        other => panic!("expected results, got {other:?}"),
    }
}

fn open(c: &mut Client<Delivery>, port: u16) {
    let r = c
        .call(&Request::Open {
            conn: 1,
            host: "sink.test".into(),
            nexthop: "sink.test".into(),
            addrs: vec![format!("127.0.0.1:{port}").parse().unwrap()],
            source: None,
            dane: Default::default(),
        })
        .unwrap();
    assert!(matches!(r, Response::Opened { .. }), "{r:?}");
}

/// A message whose lines start with dots, has 8-bit text and a last line
/// without CRLF; and one of 300 KB, so several 64 KiB chunks, whose dot
/// lines fall on every kind of boundary.
fn messages() -> Vec<Vec<u8>> {
    let small = b"From: s@test.example\r\nSubject: Q1\r\n\r\n.leading dot\r\n.\r\n..\r\nmid.line dot\r\n\xc3\xa9t\xc3\xa9 8-bit \xff\r\nlast line without CRLF".to_vec();
    let mut big = b"From: s@test.example\r\nSubject: Q2\r\n\r\n".to_vec();
    let mut i = 0usize;
    while big.len() < 300_000 {
        big.extend(std::iter::repeat_n(b'.', i % 3));
        big.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, i % 101));
        big.extend_from_slice(b"\r\n");
        i += 1;
    }
    vec![small, big]
}

#[test]
fn bdat_sends_unstuffed_bytes_in_chunks() {
    let sink = bdat_sink();
    let inst = agent("smtp unix - - n - - smtp\n");
    let mut c = connect(&inst, "smtp");
    open(&mut c, sink.port);
    let msgs = messages();
    for (i, plain) in msgs.iter().enumerate() {
        let qid = format!("Q{}", i + 1);
        let res = send(&mut c, txn(&qid, &["a@sink.test"], stuff(plain)));
        assert!(res[0].status.is_success(), "{res:?}");
    }
    let got = sink.wait(2);
    for (i, plain) in msgs.iter().enumerate() {
        let (cmds, content) = &got[i];
        let mut want = plain.clone();
        if !want.ends_with(b"\r\n") {
            want.extend_from_slice(b"\r\n");
        }
        assert!(
            content == &want,
            "message {} differs: got {} bytes, want {}",
            i + 1,
            content.len(),
            want.len()
        );
        assert!(
            cmds.contains("MAIL FROM:<s@test.example> BODY=8BITMIME") && !cmds.contains("DATA"),
            "{cmds}"
        );
        let last = cmds.lines().last().unwrap();
        assert!(
            last.starts_with("BDAT ") && last.ends_with(" LAST"),
            "{cmds}"
        );
    }
    // The big one went in several chunks.
    assert!(got[1].0.matches("BDAT ").count() >= 4, "{}", got[1].0);
    inst.wait_log(5, "Q2: to=<a@sink.test>, relay=sink.test[127.0.0.1]");
}

#[test]
fn a_refused_chunk_bounces_and_the_connection_goes_on() {
    let sink = bdat_sink();
    let inst = agent("smtp unix - - n - - smtp\n");
    let mut c = connect(&inst, "smtp");
    open(&mut c, sink.port);
    let plain = b"Subject: refused\r\n\r\nbody\r\n".to_vec();
    let res = send(
        &mut c,
        txn(
            "QR",
            &["reject-bdat@sink.test", "reject-rcpt@sink.test"],
            plain.clone(),
        ),
    );
    assert_eq!(res[0].status.code.to_string(), "5.6.0", "{res:?}");
    assert!(
        res[0]
            .status
            .text
            .contains("Chunk refused by the test sink (in reply to BDAT command)"),
        "{res:?}"
    );
    assert!(
        res[1].status.is_permanent()
            && res[1].status.text.contains("(in reply to RCPT TO command)"),
        "{res:?}"
    );
    inst.wait_log(5, "QR: to=<reject-bdat@sink.test>");
    assert!(inst.log().contains("dsn=5.6.0, status=bounced"));
    // The same connection delivers the next message (after RSET).
    let res = send(&mut c, txn("QN", &["a@sink.test"], plain.clone()));
    assert!(res[0].status.is_success(), "{res:?}");
    let got = sink.wait(1);
    assert_eq!(got[0].1, plain);
    inst.wait_log(5, "QN: to=<a@sink.test>, relay=sink.test[127.0.0.1]");
    inst.wait_log(5, "conn_use=2");
}

#[test]
fn discarded_chunking_sends_data() {
    let sink = bdat_sink();
    let inst = agent("nochunk unix - - n - - smtp -o smtp_discard_ehlo_keywords=chunking\n");
    let mut c = connect(&inst, "nochunk");
    open(&mut c, sink.port);
    let plain = messages().remove(0);
    let res = send(&mut c, txn("QD", &["a@sink.test"], stuff(&plain)));
    assert!(res[0].status.is_success(), "{res:?}");
    let got = sink.wait(1);
    assert!(
        got[0].0.contains("DATA") && !got[0].0.contains("BDAT"),
        "{}",
        got[0].0
    );
    let mut want = plain;
    want.extend_from_slice(b"\r\n");
    assert_eq!(got[0].1, want);
}

/// smtplib → Sluice A → (BDAT) Sluice B → (BDAT) the sink: the middle
/// smtpd says it received BDAT, and the body arrives unchanged.
#[test]
fn two_sluice_hops_with_bdat() {
    let sink = bdat_sink();
    let relay = |listen: u16, next: u16| {
        let cf = format!(
            "127.0.0.1:{listen} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
             qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
        );
        let main = format!(
            "myhostname = hop{listen}.test.example\nrelayhost = [127.0.0.1]:{next}\n\
             smtpd_reject_unlisted_recipient = no\ninet_protocols = ipv4\n"
        );
        let mut inst = Instance::new(&cf, &main);
        inst.start();
        inst.wait_port(listen);
        inst
    };
    let (pa, pb) = (free_port(), free_port());
    let b = relay(pb, sink.port);
    let a = relay(pa, pb);
    let body = b".leading dot\r\n.\r\nmid.line\r\n\xc3\xa9t\xc3\xa9\r\n..two dots\r\nlast\r\n";
    let mut msg = b"From: s@test.example\r\nTo: u@far.test\r\nSubject: hops\r\n\r\n".to_vec();
    msg.extend_from_slice(body);
    // smtplib stuffs the dots and sends the 8-bit bytes as given.
    let script = "import smtplib,sys\n\
                  m=sys.stdin.buffer.read()\n\
                  s=smtplib.SMTP('127.0.0.1',int(sys.argv[1]))\n\
                  s.sendmail('s@test.example',['u@far.test'],m,mail_options=['BODY=8BITMIME'])\n\
                  s.quit()\n";
    let mut child = Command::new("python3")
        .args(["-c", script, &pa.to_string()])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&msg).unwrap();
    }
    assert!(child.wait().unwrap().success());
    let got = sink.wait(1);
    let (cmds, content) = &got[0];
    assert!(cmds.contains("BDAT") && !cmds.contains("DATA"), "{cmds}");
    assert!(
        content.ends_with(&msg),
        "the message arrives unchanged after the Received: headers:\n{}",
        String::from_utf8_lossy(content)
    );
    // B's smtpd received it with BDAT; A's smtp sent it with BDAT.
    let disconnect = b.wait_log(10, "bdat=");
    assert!(disconnect.contains("disconnect from"), "{disconnect}");
    a.wait_log(
        10,
        &format!("to=<u@far.test>, relay=127.0.0.1[127.0.0.1]:{pb}"),
    );
}

/// A 5xx to a chunk through the whole path: qmgr bounces the recipient and
/// its notice to the (remote) sender goes out too, quoting the reply.
#[test]
fn a_refused_chunk_becomes_a_bounce_notice() {
    let sink = bdat_sink();
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let main = format!(
        "myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{}\n\
         smtpd_reject_unlisted_recipient = no\ninet_protocols = ipv4\n",
        sink.port
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);
    let (code, out) = sluice_suite::swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "sender@far.test",
        "--to",
        "reject-bdat@far.test",
    ]);
    assert_eq!(code, 0, "{out}");
    let line = inst.wait_log(20, "to=<reject-bdat@far.test>");
    assert!(
        line.contains("dsn=5.6.0, status=bounced") && line.contains("(in reply to BDAT command)"),
        "{line}"
    );
    // The notice reaches the sink, from <>, for the sender.
    let got = sink.wait(1);
    let (cmds, content) = &got[0];
    assert!(
        cmds.contains("MAIL FROM:<>") && cmds.contains("RCPT TO:<sender@far.test>"),
        "{cmds}"
    );
    let text = String::from_utf8_lossy(content);
    assert!(
        text.contains("reject-bdat@far.test") && text.contains("Chunk refused by the test sink"),
        "{text}"
    );
    inst.stop();
}

/// CHUNKING without 8BITMIME (the sink's 8BITMIME and SMTPUTF8 discarded):
/// the 8-bit part goes quoted-printable, and the chunk sizes count the
/// converted bytes (the sink reads exactly what each BDAT says).
#[test]
fn bdat_without_8bitmime_sends_converted_chunks() {
    let sink = bdat_sink();
    let mut inst = Instance::new(
        "smtp unix - - n - - smtp\n",
        "smtp_helo_name = client.test.example\nsmtp_discard_ehlo_keywords = 8bitmime, smtputf8\n",
    );
    inst.start();
    let mut c = connect(&inst, "smtp");
    open(&mut c, sink.port);
    let head = b"Subject: Q8\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=latin1\r\n";
    let mut plain = [&head[..], b"Content-Transfer-Encoding: 8bit\r\n\r\n"].concat();
    let mut want = [
        &head[..],
        b"Content-Transfer-Encoding: quoted-printable\r\n\r\n",
    ]
    .concat();
    // 150 KB of 8-bit lines, some with a leading dot: several spool reads.
    for i in 0..6000 {
        let dots = ".".repeat(i % 3);
        plain.extend_from_slice(format!("{dots}line {i} caf").as_bytes());
        plain.extend_from_slice(b"\xe9 = x\r\n");
        want.extend_from_slice(format!("{dots}line {i} caf=E9 =3D x\r\n").as_bytes());
    }
    let res = send(&mut c, txn("Q8", &["a@sink.test"], stuff(&plain)));
    assert!(res[0].status.is_success(), "{res:?}");
    let got = sink.wait(1);
    let (cmds, content) = &got[0];
    assert!(
        content == &want,
        "got:\n{}",
        String::from_utf8_lossy(content)
    );
    assert!(cmds.starts_with("MAIL FROM:<s@test.example>\n"), "{cmds}");
    let sizes: usize = cmds
        .lines()
        .filter_map(|l| l.strip_prefix("BDAT "))
        .map(|l| l.split(' ').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(sizes, want.len(), "{cmds}");
    assert!(cmds.matches("BDAT ").count() >= 2, "{cmds}");
}
