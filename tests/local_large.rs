//! Local delivery of a large message (25 MB, with `From ` lines, `>From `
//! lines and lines that start with dots) to an mbox, to a Maildir (an
//! alias target ending in `/`, as in Postfix), to a command, and forwarded
//! through cleanup (to an address that virtual_alias_maps brings back to
//! a second Maildir): everything is checked byte for byte, the mailboxes
//! are read back with Python's mailbox module, and local(8)'s peak memory
//! (VmHWM) shows it streamed the message instead of holding it.
//! Unprivileged: as root the instance runs as `nobody`.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_suite::{free_port, instance_user, smtplib_send, Instance};

/// The message's body size.
const BODY_SIZE: usize = 25 * 1024 * 1024;

/// local's peak resident set may not exceed this while it delivers the
/// 25 MB message. Measured with this test: local peaks at about 6 MB
/// (debug build) having delivered it to all its targets, against 83 MB
/// when it read the whole message and made an unstuffed or quoted copy
/// of it (the code before streaming, mbox alone). 20 MB leaves room for
/// allocator and build differences and is still below the size of one
/// copy of the message, so passing it means no copy was held.
const LOCAL_PEAK_LIMIT_KB: u64 = 20 * 1024;

fn open_dir(p: &Path) -> PathBuf {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o1777)).unwrap();
    p.to_path_buf()
}

/// The body's lines (LF ends): mostly text, with every kind of line the
/// wire and mailbox formats treat specially.
fn body() -> String {
    let mut b = String::with_capacity(BODY_SIZE + 100);
    let mut i = 0u64;
    while b.len() < BODY_SIZE {
        match i % 50 {
            0 => b.push_str(&format!("From line {i} of the big message\n")),
            10 => b.push_str(&format!(">From quoted {i}\n")),
            15 => b.push_str(&format!(">>>From deeper {i}\n")),
            20 => b.push_str(&format!(".leading dot {i}\n")),
            25 => b.push_str(&format!("..two dots {i}\n")),
            30 => b.push_str(".\n"),
            35 => b.push_str(".From a dot first\n"),
            40 => b.push('\n'),
            _ => {
                b.push_str(&format!("{i:08} "));
                b.push_str("the quick brown fox jumps over the lazy dog 0123456789 abcdef");
                b.push('\n');
            }
        }
        i += 1;
    }
    b
}

/// mboxrd quoting: a line matching `^>*From ` gets one more `>`.
fn quoted(body: &str) -> String {
    let mut out = String::with_capacity(body.len() + body.len() / 100);
    for line in body.split_inclusive('\n') {
        if line.trim_start_matches('>').starts_with("From ") {
            out.push('>');
        }
        out.push_str(line);
    }
    out
}

/// The highest VmHWM (peak resident set, kB) of the instance's local processes.
fn local_peak_kb(inst: &Instance) -> u64 {
    let pids = inst.pids("local");
    assert!(
        !pids.is_empty(),
        "no local process is left to measure (it exited after the delivery)"
    );
    pids.iter()
        .map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status"))
        })
        .max()
        .unwrap()
}

/// Sends `data` (LF line ends) with Python's smtplib, which makes it wire
/// format (CRLF, dot-stuffed) as any client would.
fn send(port: u16, to: &str, data: &Path) {
    smtplib_send(port, "alice@example.com", to, data);
}

/// Splits a delivered message at its first empty line: (headers, body).
fn split(msg: &[u8]) -> (&[u8], &[u8]) {
    let at = msg
        .windows(2)
        .position(|w| w == b"\n\n")
        .expect("a header section");
    (&msg[..at + 1], &msg[at + 2..])
}

#[test]
fn a_25_mb_message_is_streamed_to_mbox_and_maildir() {
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nlocal unix - n n - 1 local\n"
    );
    let mut inst = Instance::new(&cf, "");
    let spool = open_dir(&inst.root().join("mail"));
    let scratch = open_dir(&inst.root().join("scratch"));
    let maildir = scratch.join("Maildir");
    let copies = scratch.join("Copies");
    let piped = scratch.join("piped");
    let alias_file = inst.root().join("aliases");
    std::fs::write(
        &alias_file,
        format!(
            "bigdir: {}/\nbigcopies: {}/\nbigpipe: \"|cat > {}\"\nbigfwd: big@far.example\n",
            maildir.display(),
            copies.display(),
            piped.display()
        ),
    )
    .unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(inst.etc().join("main.cf"))
        .unwrap();
    write!(
        f,
        "myhostname = mx.test.example\nmail_spool_directory = {}\nalias_maps = hash:{}\n\
         local_recipient_maps =\nmessage_size_limit = 60000000\n\
         virtual_alias_maps = inline:{{ big@far.example = bigcopies@mx.test.example }}\n",
        spool.display(),
        alias_file.display()
    )
    .unwrap();
    inst.start();
    inst.wait_port(port);

    let me = instance_user();
    let h = "mx.test.example";
    let body = body();
    let data = inst.root().join("message");
    let targets = [
        (format!("{me}@{h}"), "mbox"),
        (format!("bigdir@{h}"), "maildir"),
        (format!("bigpipe@{h}"), "command"),
        (format!("bigfwd@{h}"), "forward"),
    ];
    let mut forwarded = String::new();
    for (to, name) in &targets {
        std::fs::write(
            &data,
            format!("From: alice@example.com\nTo: {to}\nSubject: large {name}\n\n{body}"),
        )
        .unwrap();
        send(port, to, &data);
        let line = inst.wait_log(300, &format!("to=<{to}>, relay=local"));
        let want = if *name == "forward" {
            "forwarded as "
        } else {
            "delivered to "
        };
        assert!(
            line.contains(&format!("dsn=2.0.0, status=sent ({want}")),
            "{line}"
        );
        if let Some(id) = line.split("forwarded as ").nth(1) {
            forwarded = id.trim_end_matches(')').to_string();
        }
    }
    let line = inst.wait_log(300, &format!("{forwarded}: to=<bigcopies@{h}>"));
    assert!(
        line.contains("status=sent (delivered to maildir)"),
        "{line}"
    );
    let peak = local_peak_kb(&inst);
    eprintln!("local's peak resident set: {peak} kB");
    assert!(
        peak < LOCAL_PEAK_LIMIT_KB,
        "local peaked at {peak} kB delivering a {} kB message",
        BODY_SIZE / 1024
    );

    // The mbox, byte for byte after the From line.
    let mbox = spool.join(&me);
    let text = std::fs::read(&mbox).unwrap();
    let prefix = b"From alice@example.com  ";
    assert!(text.starts_with(prefix));
    let nl = text.iter().position(|&b| b == b'\n').unwrap();
    assert_eq!(nl, prefix.len() + 24, "an asctime date on the From line");
    let (headers, rest) = split(&text[nl + 1..]);
    let headers = String::from_utf8_lossy(headers);
    assert!(
        headers.starts_with(&format!(
            "Return-Path: <alice@example.com>\nDelivered-To: {me}@{h}\n"
        )),
        "{headers}"
    );
    assert!(headers.contains("\nSubject: large mbox\n"), "{headers}");
    let want = quoted(&body) + "\n";
    assert!(
        rest == want.as_bytes(),
        "the mbox body differs from the body sent, quoted"
    );

    // The Maildir files, byte for byte after the headers: the forwarded
    // copy also says which alias it came through.
    let maildirs = [
        (&maildir, "bigdir", None),
        (&copies, "bigcopies", Some("bigfwd")),
    ];
    for (dir, rcpt, via) in maildirs {
        let new: Vec<PathBuf> = std::fs::read_dir(dir.join("new"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(new.len(), 1, "{new:?}");
        assert_eq!(std::fs::read_dir(dir.join("tmp")).unwrap().count(), 0);
        let text = std::fs::read(&new[0]).unwrap();
        let (headers, rest) = split(&text);
        let headers = String::from_utf8_lossy(headers);
        assert!(
            headers.starts_with(&format!(
                "Return-Path: <alice@example.com>\nDelivered-To: {rcpt}@{h}\n"
            )),
            "{headers}"
        );
        if let Some(via) = via {
            let mark = format!("\nDelivered-To: {via}@{h}\n");
            assert!(headers.contains(&mark), "{headers}");
        }
        assert!(
            rest == body.as_bytes(),
            "the body in {} differs",
            dir.display()
        );
    }

    // The command's input: the From line, local's headers, the message.
    let text = std::fs::read(&piped).unwrap();
    assert!(text.starts_with(prefix));
    let nl = text.iter().position(|&b| b == b'\n').unwrap();
    let (headers, rest) = split(&text[nl + 1..]);
    let headers = String::from_utf8_lossy(headers);
    assert!(
        headers.starts_with(&format!(
            "Return-Path: <alice@example.com>\nDelivered-To: bigpipe@{h}\n"
        )),
        "{headers}"
    );
    assert!(
        rest == body.as_bytes(),
        "the command's input differs from the body"
    );

    // What a mail reader sees: Python's mailbox module, against the body
    // (quoted for the mbox, whose readers undo the quoting themselves).
    let expect_mbox = inst.root().join("expect.mbox");
    std::fs::write(&expect_mbox, quoted(&body)).unwrap();
    let expect_body = inst.root().join("expect.body");
    std::fs::write(&expect_body, &body).unwrap();
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import mailbox, sys\n\
             def show(box, want):\n\
             \x20   msgs = list(box.keys())\n\
             \x20   raw = box.get_bytes(msgs[0])\n\
             \x20   m = box[msgs[0]]\n\
             \x20   body = raw.split(b'\\n\\n', 1)[1]\n\
             \x20   print(len(msgs), m['Subject'], m['Delivered-To'], body == open(want, 'rb').read())\n\
             show(mailbox.mbox(sys.argv[1]), sys.argv[2])\n\
             show(mailbox.Maildir(sys.argv[3]), sys.argv[4])\n",
        )
        .arg(&mbox)
        .arg(&expect_mbox)
        .arg(&maildir)
        .arg(&expect_body)
        .output()
        .expect("python3");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("1 large mbox {me}@{h} True\n1 large maildir bigdir@{h} True\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
