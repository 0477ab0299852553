//! Interoperation with a real Postfix (Debian's) as the receiving MTA:
//! Sluice relays to a throw-away Postfix instance on a loopback port,
//! which accepts the mail into its hold queue; `postqueue -j` then shows
//! the message with the envelope Sluice gave it; a body with dot lines and
//! 8-bit text goes with BDAT (Postfix offers CHUNKING) and `postcat` shows
//! it unchanged; a large message whose sender Postfix refuses costs it one
//! BDAT chunk, not a pipeline of them, and one refused at MAIL leaves the
//! connection fit for the next. Needs root (Postfix's master runs as root) and modifies
//! /etc/postfix/main.cf only to list the instance's directory in
//! alternate_config_directories, as Postfix requires for `postfix -c`.

use std::process::Command;

use sluice_suite::postfix::{Postfix, PostfixOptions};
use sluice_suite::{free_port, queued_id, relay_instance, swaks, wait_for, Instance};

#[test]
fn mail_relayed_to_a_real_postfix_arrives_there() {
    let tmp = tempfile::Builder::new()
        .prefix("sluice-pf")
        .tempdir()
        .unwrap();
    let (pf, mut inst, port) = relaying_to_postfix(tmp.path(), &PostfixOptions::default(), "");
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "alice@example.com",
        "--to",
        "bob@dest.test.example",
        "--header",
        "Subject: interop",
    ]);
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    let sent = inst.wait_log(20, &format!("{id}: to=<bob@dest.test.example>"));
    assert!(
        sent.contains("status=sent") && sent.contains(&format!("[127.0.0.1]:{}", pf.port)),
        "{sent}"
    );
    // Postfix has it, on hold, with Sluice's envelope.
    pf.wait_queued("bob@dest.test.example");
    let json = pf.queue_json();
    assert!(
        json.contains("\"sender\": \"alice@example.com\"")
            || json.contains("\"sender\":\"alice@example.com\""),
        "{json}"
    );
    assert!(
        json.contains("\"queue_name\": \"hold\"") || json.contains("\"queue_name\":\"hold\""),
        "{json}"
    );
    // Postfix's smtpd offers CHUNKING: a body with dot lines and 8-bit
    // text goes with BDAT, and Postfix stores it unchanged.
    let body = ".leading dot\r\n.\r\n..two\r\nmid.line\r\n\u{e9}t\u{e9}\r\nlast\r\n";
    let msg = format!("From: alice@example.com\r\nSubject: chunks\r\n\r\n{body}");
    let script = "import smtplib,sys\n\
                  s=smtplib.SMTP('127.0.0.1',int(sys.argv[1]))\n\
                  s.sendmail('alice@example.com',['carol@dest.test.example'],sys.stdin.buffer.read(),mail_options=['BODY=8BITMIME'])\n\
                  s.quit()\n";
    let mut child = Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(msg.as_bytes())
            .unwrap();
    }
    assert!(child.wait().unwrap().success());
    let sent = inst.wait_log(20, "to=<carol@dest.test.example>");
    assert!(sent.contains("status=sent"), "{sent}");
    // Postfix's smtpd counts the BDAT commands it took in its disconnect line.
    wait_for(20, "Postfix's smtpd to log BDAT", || {
        pf.log()
            .lines()
            .any(|l| l.contains("disconnect from") && l.contains("bdat="))
            .then_some(())
    });
    let qid = pf.wait_queued("carol@dest.test.example");
    let out = pf.postcat("-bq", &qid);
    // postcat -b starts at the empty line after the headers.
    assert_eq!(
        String::from_utf8_lossy(&out),
        format!("\n{}", body.replace("\r\n", "\n")),
    );
    inst.stop();
}

/// A Postfix instance with `opts`, and a Sluice instance relaying to it
/// with `extra` in its main.cf; the Sluice instance's SMTP port.
fn relaying_to_postfix(
    tmp: &std::path::Path,
    opts: &PostfixOptions,
    extra: &str,
) -> (Postfix, Instance, u16) {
    let pf_port = free_port();
    let pf = Postfix::start(tmp, pf_port, opts);
    let (inst, port) = relay_instance(pf_port, extra);
    (pf, inst, port)
}

/// Sends a message of about `size` bytes of 78-byte lines through Sluice's
/// port with Python's smtplib; Sluice's queue id.
fn send_lines(port: u16, size: usize, from: &str, to: &str) -> String {
    let script = "import smtplib,sys\n\
                  n=int(sys.argv[2])\n\
                  line=b'y'*76+b'\\r\\n'\n\
                  msg=b'Subject: lines\\r\\n\\r\\n'+line*(n//len(line))\n\
                  s=smtplib.SMTP('127.0.0.1',int(sys.argv[1]))\n\
                  s.mail(sys.argv[3]); s.rcpt(sys.argv[4])\n\
                  print(s.data(msg)[1].decode())\n\
                  s.quit()\n";
    let out = Command::new("python3")
        .args(["-c", script, &port.to_string(), &size.to_string(), from, to])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let reply = String::from_utf8_lossy(&out.stdout).to_string();
    reply.split("queued as ").nth(1).unwrap().trim().to_string()
}

/// A message of many BDAT chunks whose sender Postfix refuses: Sluice's
/// client sends the first chunk with MAIL and RCPT and waits for their
/// replies before the others, so Postfix answers one chunk with an error,
/// not dozens (each an error its smtpd counts: after
/// `smtpd_hard_error_limit` of them it hangs up with "too many errors").
#[test]
fn a_refused_sender_costs_postfix_one_bdat_chunk() {
    let tmp = tempfile::Builder::new()
        .prefix("sluice-pf")
        .tempdir()
        .unwrap();
    let opts = PostfixOptions {
        main_extra:
            "smtpd_sender_restrictions = check_sender_access inline:{refused@example.com=REJECT}\n"
                .to_string(),
        ..PostfixOptions::default()
    };
    let (pf, mut inst, port) = relaying_to_postfix(tmp.path(), &opts, "");
    // 4 MB: some 64 chunks of the 64 KiB the agent reads at a time.
    let id = send_lines(
        port,
        4 << 20,
        "refused@example.com",
        "dave@dest.test.example",
    );
    let line = inst.wait_log(30, &format!("{id}: to=<dave@dest.test.example>"));
    assert!(
        line.contains("status=bounced") && line.contains("Sender address rejected"),
        "{line}"
    );
    // The connection also carries the bounce back to Postfix (with the
    // message, in chunks Postfix takes): one BDAT refused in all.
    let disconnect = wait_for(20, "Postfix's smtpd to log the disconnect", || {
        pf.log()
            .lines()
            .find(|l| l.contains("disconnect from") && l.contains(" bdat="))
            .map(str::to_string)
    });
    let log = pf.log();
    assert!(!log.contains("too many errors"), "{log}");
    let bdat: Vec<u32> = disconnect
        .split(" bdat=")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .map(|s| s.split('/').map(|n| n.parse().unwrap()).collect())
        .unwrap();
    assert_eq!(bdat[1] - bdat[0], 1, "{disconnect}");
    inst.stop();
}

/// A message refused at MAIL (SIZE over Postfix's `message_size_limit`)
/// whose first BDAT chunk went without LAST: Postfix's smtpd holds BDAT
/// state until LAST or RSET and answers a MAIL "503 5.5.1 Error: MAIL
/// after BDAT", so the next message on the cached connection must start
/// with RSET, or it bounces though Postfix would take it.
#[test]
fn a_message_refused_at_mail_leaves_the_connection_fit_for_the_next() {
    let tmp = tempfile::Builder::new()
        .prefix("sluice-pf")
        .tempdir()
        .unwrap();
    let opts = PostfixOptions {
        message_size_limit: Some(200_000),
        ..PostfixOptions::default()
    };
    // The big message's bounce is discarded here, so that nothing but the
    // two messages goes to Postfix, in this order.
    let (pf, mut inst, port) = relaying_to_postfix(
        tmp.path(),
        &opts,
        "transport_maps = inline:{ bounces.test = discard: }\n",
    );
    // 400 KB: over the limit, and more than one 64 KiB chunk.
    let big = send_lines(port, 400_000, "a@bounces.test", "dave@dest.test.example");
    let line = inst.wait_log(30, &format!("{big}: to=<dave@dest.test.example>"));
    assert!(
        line.contains("status=bounced") && line.contains("552 5.3.4"),
        "{line}"
    );
    let small = send_lines(port, 2_000, "b@example.com", "erin@dest.test.example");
    let line = inst.wait_log(30, &format!("{small}: to=<erin@dest.test.example>"));
    assert!(
        line.contains("status=sent") && line.contains("conn_use=2"),
        "{line}"
    );
    pf.wait_queued("erin@dest.test.example");
    inst.stop();
}

/// A `utf-8` ORCPT (RFC 6533) sent as UTF-8 in an SMTPUTF8 transaction is
/// taken (it was refused as bad xtext), logged decoded, and relayed in
/// RFC 6533's escaped form, which Postfix decodes back into its queue
/// file's original recipient.
#[test]
fn a_utf8_orcpt_reaches_postfix_as_it_was_given() {
    let tmp = tempfile::Builder::new()
        .prefix("sluice-pf")
        .tempdir()
        .unwrap();
    let (pf, mut inst, port) = relaying_to_postfix(tmp.path(), &PostfixOptions::default(), "");
    let script = "import smtplib,sys\n\
                  s=smtplib.SMTP('127.0.0.1',int(sys.argv[1]))\n\
                  s.ehlo()\n\
                  s.mail('alice@example.com',['SMTPUTF8'])\n\
                  c,t=s.rcpt('dave@dest.test.example',['NOTIFY=FAILURE','ORCPT=utf-8;d\\u00e4ve+x@orig.example'])\n\
                  print(c)\n\
                  print(s.data(b'Subject: orcpt\\r\\n\\r\\nhi\\r\\n')[0])\n\
                  s.quit()\n";
    let out = Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.lines().eq(["250", "250"]),
        "{out:?}"
    );
    let sent = inst.wait_log(20, "to=<dave@dest.test.example>");
    assert!(
        sent.contains("orig_to=<däve+x@orig.example>") && sent.contains("status=sent"),
        "{sent}"
    );
    let qid = pf.wait_queued("dave@dest.test.example");
    let env = String::from_utf8_lossy(&pf.postcat("-eq", &qid)).into_owned();
    assert!(
        env.contains("dsn_orig_rcpt=utf-8;däve+x@orig.example"),
        "{env}"
    );
    inst.stop();
}
