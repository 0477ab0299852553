//! Large messages leave at disk speed and no process holds one in memory:
//! 5, 25 and 50 MB messages relayed by the smtp agent to Postfix's
//! smtp-sink (DATA, in clear, the sink writing each message to disk so it
//! reads slower than Sluice sends) and to a real Postfix (BDAT in clear,
//! BDAT over TLS, DATA over TLS), each checked byte for byte at the
//! receiver, with the peak memory of every process of the instance read
//! from /proc afterwards.

use std::path::Path;

use sluice_suite::postfix::{Postfix, PostfixOptions};
use sluice_suite::*;

const MB: usize = 1024 * 1024;

/// Writes a message of `mb` megabytes to `path` and returns its body with
/// LF line ends and no dot-stuffing, as receivers store it. Lines of 76
/// letters, with a numbered line starting with a dot every thousand lines,
/// so a lost, repeated or unstuffed-twice piece shows.
fn write_message(path: &Path, mb: usize, subject: &str) -> Vec<u8> {
    use std::io::Write;
    let line: String = (0..76).map(|i| (b'A' + (i % 26) as u8) as char).collect();
    let mut body = Vec::with_capacity(mb * MB);
    let mut i = 0;
    while body.len() < mb * MB {
        if i % 1000 == 0 {
            body.extend_from_slice(format!(".{i}\n").as_bytes());
        }
        body.extend_from_slice(line.as_bytes());
        body.push(b'\n');
        i += 1;
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    write!(
        f,
        "From: big@example.org\r\nSubject: {subject}\r\nMessage-ID: <{subject}@example.org>\r\n\r\n"
    )
    .unwrap();
    for l in body.split_inclusive(|b| *b == b'\n') {
        f.write_all(&l[..l.len() - 1]).unwrap();
        f.write_all(b"\r\n").unwrap();
    }
    f.flush().unwrap();
    body
}

/// Sends the message in `path` with Python's smtplib (it dot-stuffs).
fn send(port: u16, to: &str, path: &Path) {
    smtplib_send(port, "big@example.org", to, path);
}

/// Peak resident memory (VmHWM, kB) of master and every process it
/// started, by program name.
fn peak_memory(master: i32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
        };
        let ppid: i32 = field("PPid:").and_then(|v| v.parse().ok()).unwrap_or(0);
        if pid != master && ppid != master {
            continue;
        }
        let hwm = field("VmHWM:")
            .and_then(|v| v.trim_end_matches(" kB").trim().parse().ok())
            .unwrap_or(0);
        out.push((field("Name:").unwrap_or_default(), hwm));
    }
    out
}

/// No process reached half the largest message's size: one that held a
/// whole message (or one copy of it) in memory would have.
fn assert_no_process_held(inst: &Instance, largest_mb: usize) {
    let peaks = peak_memory(inst.master_pid());
    assert!(peaks.len() >= 5, "processes found: {peaks:?}");
    for (name, kb) in &peaks {
        assert!(
            (*kb as usize) < largest_mb * 1024 / 2,
            "{name} peaked at {kb} kB passing a {largest_mb} MB message: {peaks:?}"
        );
    }
}

/// The body smtp-sink dumped (it stores lines with LF, after its own
/// header lines and ours, up to the blank line).
fn dumped_bodies(sink: &Sink) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(sink.dir.path()).unwrap().flatten() {
        let text = std::fs::read(e.path()).unwrap();
        let start = text
            .windows(2)
            .position(|w| w == b"\n\n")
            .expect("a blank line after the headers")
            + 2;
        out.push(text[start..].to_vec());
    }
    out
}

#[test]
fn five_twenty_five_and_fifty_megabytes_reach_smtp_sink_whole() {
    let sink_port = free_port();
    let sink = smtp_sink(&format!("127.0.0.1:{sink_port}"), &[]);
    let (inst, port) = relay_instance(sink_port, "message_size_limit = 60000000\n");
    let dir = tempfile::tempdir().unwrap();
    let mut bodies = Vec::new();
    for mb in [5, 25, 50] {
        let path = dir.path().join(format!("m{mb}.eml"));
        bodies.push(write_message(&path, mb, &format!("m{mb}")));
        send(port, &format!("rcpt{mb}@example.com"), &path);
    }
    for mb in [5, 25, 50] {
        let line = inst.wait_log(120, &format!("to=<rcpt{mb}@example.com>"));
        assert!(line.contains("status=sent"), "{line}");
    }
    wait_for(20, "three dumps", || (dumped(&sink) == 3).then_some(()));
    let mut got = dumped_bodies(&sink);
    got.sort_by_key(|b| b.len());
    for (want, got) in bodies.iter().zip(&got) {
        // smtp-sink adds nothing after the body but may keep a final empty line.
        assert!(
            got.starts_with(want) && got.len() - want.len() <= 1,
            "a body of {} bytes arrived as {} bytes",
            want.len(),
            got.len()
        );
    }
    assert_no_process_held(&inst, 50);
}

#[test]
fn large_messages_reach_a_real_postfix_with_bdat_and_data_in_clear_and_over_tls() {
    let tmp = tempfile::Builder::new()
        .prefix("sluice-pf-large")
        .tempdir()
        .unwrap();
    let pf_port = free_port();
    let pf = Postfix::start(
        tmp.path(),
        pf_port,
        &PostfixOptions {
            tls: Some(make_cert(tmp.path())),
            message_size_limit: Some(60_000_000),
            ..PostfixOptions::default()
        },
    );
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nsmtp unix - - n - - smtp\n\
         clear unix - - n - - smtp\n\
         tls unix - - n - - smtp -o smtp_tls_security_level=encrypt\n\
         datatls unix - - n - - smtp -o smtp_tls_security_level=encrypt -o smtp_discard_ehlo_keywords=chunking\n"
    );
    let hop = format!("[127.0.0.1]:{pf_port}");
    let main = format!(
        "myhostname = mx.test.example\nmessage_size_limit = 60000000\nsmtpd_reject_unlisted_recipient = no\n\
         relay_domains = bdat-clear.test, bdat-tls.test, data-tls.test\n\
         transport_maps = inline:{{ bdat-clear.test=clear:{hop}, bdat-tls.test=tls:{hop}, data-tls.test=datatls:{hop} }}\n"
    );
    let mut inst = Instance::new(&cf, &main);
    inst.start();
    inst.wait_port(port);
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (5, "data-tls.test"),
        (25, "bdat-clear.test"),
        (50, "bdat-tls.test"),
    ];
    let mut bodies = Vec::new();
    for (mb, domain) in cases {
        let path = dir.path().join(format!("m{mb}.eml"));
        bodies.push(write_message(&path, mb, &format!("m{mb}")));
        send(port, &format!("big@{domain}"), &path);
    }
    for (mb, domain) in cases {
        let line = inst.wait_log(120, &format!("to=<big@{domain}>"));
        assert!(
            line.contains("status=sent") && line.contains(&format!(":{pf_port}")),
            "{mb} MB to {domain}: {line}"
        );
    }
    // Two sessions went over TLS, one in clear.
    let log = inst.log();
    assert_eq!(
        log.matches("TLS connection established to").count(),
        2,
        "{log}"
    );
    // Postfix's smtpd counts what it took in its disconnect lines: BDAT for
    // two sessions (clear and TLS), DATA for the one that hid CHUNKING.
    // (The probe that waited for its port is a session without MAIL.)
    let sessions = |log: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.contains("disconnect from") && l.contains(" mail=1"))
            .map(str::to_string)
            .collect()
    };
    let pflog = wait_for(20, "Postfix's three disconnect lines", || {
        let log = pf.log();
        (sessions(&log).len() >= 3).then_some(log)
    });
    let disconnects = sessions(&pflog);
    assert_eq!(
        disconnects.iter().filter(|l| l.contains(" bdat=")).count(),
        2,
        "{pflog}"
    );
    assert_eq!(
        disconnects.iter().filter(|l| l.contains(" data=1")).count(),
        1,
        "{pflog}"
    );
    for ((mb, domain), want) in cases.iter().zip(&bodies) {
        let qid = pf.wait_queued(&format!("big@{domain}"));
        let body = pf.postcat("-bq", &qid);
        // postcat -b starts at the empty line after the headers.
        assert!(
            body.len() == want.len() + 1 && body[1..] == want[..],
            "{mb} MB to {domain}: a body of {} bytes is {} bytes in Postfix's queue",
            want.len(),
            body.len()
        );
    }
    assert_no_process_held(&inst, 50);
    inst.stop();
}
