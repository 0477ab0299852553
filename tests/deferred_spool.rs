//! The synthetic deferred spool of `spool-bench deferred` (the restart
//! benchmark's input, `scripts/bench restart`) is a real spool: qmgr starts
//! on it, lists every message as deferred, delivers nothing before its
//! retry time, and delivers all of it after `sluice queue flush`.

use std::os::unix::process::CommandExt;
use std::process::Command;

use sluice_suite::{bin_dir, dumped, free_port, smtp_sink, wait_for, Instance};

const N: usize = 200;

#[test]
fn generated_deferred_spool_starts_lists_and_delivers_after_flush() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let cf = "cleanup unix - - n - 0 cleanup\nqmgr unix - - n 300 1 qmgr\n\
              router unix - - n - 1 router\nsmtp unix - - n - - smtp\nrelay unix - - n - - smtp\n";
    let main = format!(
        "myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{}\n",
        sink.port
    );
    let mut inst = Instance::new(cf, &main);
    let gen = bin_dir().join("spool-bench");
    assert!(
        gen.is_file(),
        "{} not built: run `cargo build -p queue` (scripts/test does)",
        gen.display()
    );
    let mut cmd = Command::new(&gen);
    cmd.arg("deferred")
        .arg("--dir")
        .arg(inst.root().join("spool"))
        .args(["--messages", &N.to_string(), "--size", "1500"]);
    if let Some((uid, gid)) = inst.run_as {
        // Written as the daemons that will read it.
        cmd.uid(uid).gid(gid);
    }
    let out = cmd.output().expect("run spool-bench");
    assert!(
        out.status.success(),
        "spool-bench deferred: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let first = said
        .split("first id ")
        .nth(1)
        .expect("first id in the output")
        .trim()
        .to_string();

    inst.start();
    inst.wait_log(30, &format!("recovered {N} messages ({N} deferred)"));
    let q = inst.queue_json();
    assert_eq!(q.len(), N, "{q:?}");
    let mut ids = std::collections::BTreeSet::new();
    for line in &q {
        assert!(line.contains("\"queue_name\":\"deferred\""), "{line}");
        assert!(line.contains("\"sender\":\"user"), "{line}");
        let id = line
            .split("\"queue_id\":\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("queue_id");
        ids.insert(id.to_string());
    }
    assert_eq!(ids.len(), N, "distinct queue ids");
    assert!(ids.contains(&first), "{first} not listed");
    let show = inst.sluice(&["queue", "show", &first]);
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success(), "{shown}");
    assert!(shown.contains("state: deferred"), "{shown}");
    assert!(shown.contains("next attempt: "), "{shown}");
    // Every retry is an hour away: nothing has been tried.
    assert!(!inst.log().contains(": to=<"), "{}", inst.log());
    assert_eq!(dumped(&sink), 0);

    let out = inst.sluice(&["queue", "flush"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(120, "an empty queue", || {
        inst.queue_json().is_empty().then_some(())
    });
    let log = inst.log();
    for id in &ids {
        assert!(log.contains(&format!("{id}: removed")), "{id} not removed");
    }
    assert_eq!(
        log.matches("status=sent (250 ").count(),
        N + N / 10,
        "one per recipient (every tenth message has two)"
    );
    assert!(dumped(&sink) >= N, "sink has {}", dumped(&sink));
    // The data went out as stored: one dumped message, whole.
    let mut found = false;
    for e in std::fs::read_dir(sink.dir.path()).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap_or_default();
        if text
            .lines()
            .any(|l| l.trim_end() == "Subject: deferred message 0")
        {
            assert!(text.contains(&format!("by sluice.bench.test with ESMTP id {first}")));
            assert!(text.contains("Lorem ipsum dolor sit amet"), "{text}");
            found = true;
        }
    }
    assert!(found, "message 0 not at the sink");
}
