//! `sluice queue` against a running instance: list (mailq and JSON), show,
//! hold, release, delete, requeue, flush — every change journaled, so it
//! survives a restart.

use sluice_suite::{
    free_port, queued_id, receive_master_cf, swaks, wait_for, Instance, RECEIVE_MAIN_CF,
};

fn queued(inst: &Instance) -> Vec<String> {
    inst.queue_json()
}

fn send(port: u16, from: &str, to: &str) -> String {
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        from,
        "--to",
        to,
    ]);
    assert_eq!(code, 0, "{out}");
    queued_id(&out)
}

fn ok(inst: &Instance, args: &[&str]) -> String {
    let out = inst.sluice(args);
    assert!(
        out.status.success(),
        "sluice {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn operators_can_see_and_steer_every_message() {
    // No delivery agents: accepted mail stays in the queue to be steered.
    let port = free_port();
    let mut inst = Instance::new(&receive_master_cf(port, ""), RECEIVE_MAIN_CF);
    inst.start();
    inst.wait_port(port);
    let a = send(port, "alice@example.com", "one@dest-a.example");
    let b = send(port, "bob@example.com", "two@dest-b.example");
    let c = send(port, "bob@example.com", "three@dest-b.example");
    assert_eq!(queued(&inst).len(), 3);

    // show: envelope, recipients, headers.
    let shown = ok(&inst, &["queue", "show", &a]);
    assert!(
        shown.contains(&format!("queue id: {a}")) && shown.contains("sender: <alice@example.com>"),
        "{shown}"
    );
    assert!(
        shown.contains("<one@dest-a.example>: pending") && shown.contains("Received: from"),
        "{shown}"
    );
    assert!(!inst.sluice(&["queue", "show", "NOTANID"]).status.success());

    // hold by sender, shown with '!' and as "hold" in JSON.
    assert!(
        ok(&inst, &["queue", "hold", "--sender", "bob@example.com"]).contains("hold: 2 message(s)")
    );
    let held: Vec<String> = queued(&inst)
        .into_iter()
        .filter(|l| l.contains("\"queue_name\":\"hold\""))
        .collect();
    assert_eq!(held.len(), 2, "{held:?}");
    let listing = ok(&inst, &["queue", "list"]);
    assert!(
        listing.contains(&format!("{b}!")) && listing.contains(&format!("{c}!")),
        "{listing}"
    );

    // The hold is journaled: it survives a restart.
    inst.stop();
    inst.start();
    let held = wait_for(20, "qmgr after restart", || {
        std::panic::catch_unwind(|| queued(&inst)).ok()
    });
    assert_eq!(
        held.iter()
            .filter(|l| l.contains("\"queue_name\":\"hold\""))
            .count(),
        2
    );

    // release by id, delete by domain, requeue all.
    assert!(ok(&inst, &["queue", "release", &b]).contains("release: 1 message(s)"));
    assert!(
        ok(&inst, &["queue", "delete", "--domain", "dest-a.example"])
            .contains("delete: 1 message(s)")
    );
    let left = queued(&inst);
    assert_eq!(left.len(), 2);
    assert!(!left.iter().any(|l| l.contains(&a)));
    inst.wait_log(5, &format!("{a}: removed by the administrator"));
    assert!(
        ok(&inst, &["queue", "requeue", "--all"]).contains("requeue: 1 message(s)"),
        "the held one is not requeued"
    );
    ok(&inst, &["queue", "flush"]);
    // Usage errors are refused before asking qmgr.
    assert_eq!(inst.sluice(&["queue", "hold"]).status.code(), Some(2));
    assert_eq!(
        inst.sluice(&["queue", "hold", "--all", "--sender", "x"])
            .status
            .code(),
        Some(2)
    );
    // postsuper's habits: a name that is not a queue id is refused, not
    // taken for one that matches nothing; `ALL` is every message.
    let bad = inst.sluice(&["queue", "delete", "NOSUCH"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("NOSUCH: not a queue id"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(ok(&inst, &["queue", "delete", "ALL"]).contains("delete: 2 message(s)"));
    assert!(queued(&inst).is_empty());
}

#[test]
fn queue_shape_counts_like_qshape() {
    let port = free_port();
    let mut inst = Instance::new(&receive_master_cf(port, ""), RECEIVE_MAIN_CF);
    inst.start();
    inst.wait_port(port);
    send(port, "alice@example.com", "one@dest-a.example");
    send(port, "bob@example.com", "two@dest-b.example");
    send(port, "bob@example.com", "three@Dest-B.example");
    wait_for(10, "three queued", || {
        (queued(&inst).len() == 3).then_some(())
    });
    let rows = |out: &str| -> Vec<String> {
        out.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    let t = rows(&ok(&inst, &["queue", "shape"]));
    assert_eq!(t[0], "T 5 10 20 40 80 160 320 640 1280 1280+", "{t:?}");
    assert_eq!(t[1], "TOTAL 3 3 0 0 0 0 0 0 0 0 0", "{t:?}");
    assert_eq!(t[2], "dest-b.example 2 2 0 0 0 0 0 0 0 0 0", "{t:?}");
    assert_eq!(t[3], "dest-a.example 1 1 0 0 0 0 0 0 0 0 0", "{t:?}");
    let s = rows(&ok(&inst, &["queue", "shape", "-s", "-b", "3", "-t", "60"]));
    assert_eq!(s, ["T 60 120 120+", "TOTAL 3 3 0 0", "example.com 3 3 0 0"]);
    // Held mail is left out unless asked for, as qshape leaves out the hold queue.
    ok(&inst, &["queue", "hold", "--sender", "bob@example.com"]);
    let t = rows(&ok(&inst, &["queue", "shape"]));
    assert_eq!(t[1], "TOTAL 1 1 0 0 0 0 0 0 0 0 0", "{t:?}");
    let h = rows(&ok(&inst, &["queue", "shape", "hold"]));
    assert_eq!(h[1], "TOTAL 2 2 0 0 0 0 0 0 0 0 0", "{h:?}");
    let bad = inst.sluice(&["queue", "shape", "incoming-ish"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown queue state"));
    inst.stop();
}
