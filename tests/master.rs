//! master supervising a real service (anvil), started unprivileged on a
//! temporary spool through the `sluice` command.

use std::time::Duration;

use ipc::anvil::{Anvil, Request, Response};
use ipc::Client;
use sluice_suite::{running, wait_for, Instance};

const ANVIL: &str = "anvil unix - - n 60 1 anvil\n";

fn anvil_connect(inst: &Instance, client: &str) -> (u32, u32) {
    let sock = inst.root().join("spool/private/anvil");
    let mut c = Client::<Anvil>::connect(&sock, Duration::from_secs(5)).expect("connect anvil");
    match c
        .call(&Request::Connect {
            service: "smtp".into(),
            client: client.into(),
        })
        .expect("anvil answers")
    {
        Response::Counts { count, rate } => (count, rate),
        other => panic!("anvil answered a connection with {other:?}"),
    }
}

#[test]
fn killed_child_is_logged_and_restarted() {
    let mut inst = Instance::new(ANVIL, "");
    inst.start();
    let first = inst.wait_pid("anvil", &[]);
    assert_eq!(anvil_connect(&inst, "192.0.2.1"), (1, 1));
    sluice_suite::wait_for(5, "anvil to serve", || {
        (inst.status().services[0].processes[0].uses > 0).then_some(())
    });
    sys::process::signal(first, 9).unwrap();
    inst.wait_log(10, &format!("anvil pid {first} killed by signal 9"));
    let second = inst.wait_pid("anvil", &[first]);
    assert_ne!(first, second);
    // The new process serves: its counters start afresh.
    assert_eq!(anvil_connect(&inst, "192.0.2.1"), (1, 1));
    assert!(
        !inst.log().contains("throttling"),
        "a child that had served must not be throttled:\n{}",
        inst.log()
    );
}

#[test]
fn on_demand_service_starts_when_a_client_connects() {
    let mut inst = Instance::new("anvil unix - - n - 1 anvil\n", "");
    inst.start();
    assert!(
        inst.pids("anvil").is_empty(),
        "no process before the first client"
    );
    assert_eq!(anvil_connect(&inst, "192.0.2.7"), (1, 1));
    assert_eq!(anvil_connect(&inst, "192.0.2.7"), (2, 2));
    assert_eq!(
        inst.pids("anvil").len(),
        1,
        "maxproc 1: one process serves both clients"
    );
}

#[test]
fn child_failing_at_startup_is_throttled_not_respawned_in_a_loop() {
    // A bad -o value makes the daemon exit 1 before it serves anything.
    let mut inst = Instance::new(
        "anvil unix - - n 1 1 anvil -o anvil_rate_time_unit=soon\n",
        "",
    );
    inst.start();
    inst.wait_log(10, "bad command startup -- throttling");
    std::thread::sleep(Duration::from_secs(3));
    let starts = inst.log().matches("exit status 1").count();
    // Back-off 1 s, 2 s, 4 s: at most three failed starts in about 3.5 s.
    assert!(
        (1..=3).contains(&starts),
        "{starts} failed starts:\n{}",
        inst.log()
    );
    assert!(inst.status().services[0].throttled_for > 0 || starts >= 2);
}

#[test]
fn reload_restarts_only_the_changed_service() {
    let two = "anvil unix - - n 60 1 anvil\nanvil2 unix - - n 60 1 anvil\n";
    let mut inst = Instance::new(two, "");
    inst.start();
    let a = inst.wait_pid("anvil", &[]);
    let b = inst.wait_pid("anvil2", &[]);
    let changed = "anvil unix - - n 60 1 anvil\nanvil2 unix - - n 60 1 anvil\n  -o anvil_status_update_time=300s\n";
    std::fs::write(inst.etc().join("master.cf"), changed).unwrap();
    let out = inst.sluice(&["reload"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    inst.wait_log(10, "service anvil2: definition changed, restarting");
    let b2 = inst.wait_pid("anvil2", &[b]);
    wait_for(10, "the old anvil2 to exit", || (!running(b)).then_some(()));
    assert_ne!(b, b2);
    assert_eq!(
        inst.pids("anvil"),
        vec![a],
        "the unchanged service keeps its process"
    );
    assert!(running(a));
    assert!(!inst.log().contains("service anvil: definition changed"));
}

#[test]
fn reload_with_a_broken_master_cf_keeps_running() {
    let mut inst = Instance::new(ANVIL, "");
    inst.start();
    let a = inst.wait_pid("anvil", &[]);
    std::fs::write(inst.etc().join("master.cf"), "anvil unix - - n 60 1\n").unwrap();
    // sluice reload refuses; a SIGHUP straight to master is logged and ignored.
    assert!(!inst.sluice(&["reload"]).status.success());
    sys::process::signal(inst.master_pid(), 1).unwrap();
    inst.wait_log(10, "keeping the running configuration");
    assert_eq!(inst.pids("anvil"), vec![a]);
}

#[test]
fn stop_leaves_no_process_behind() {
    let mut inst = Instance::new(
        "anvil unix - - n 60 1 anvil\nanvil2 unix - - n 60 1 anvil\n",
        "",
    );
    inst.start();
    let master = inst.master_pid();
    let kids = [inst.wait_pid("anvil", &[]), inst.wait_pid("anvil2", &[])];
    inst.stop();
    assert!(!running(master), "master still running");
    for k in kids {
        assert!(!running(k), "child {k} still running");
    }
    inst.wait_log(5, "terminating on signal 15");
    let out = inst.sluice(&["status"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "status of a stopped system exits 3"
    );
    // And it starts again on the same spool.
    inst.start();
    inst.wait_pid("anvil", &[]);
}

#[test]
fn second_master_on_the_same_queue_is_refused() {
    let mut inst = Instance::new(ANVIL, "");
    inst.start();
    let pid = inst.master_pid();
    let out = inst.sluice(&["start"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already running") && err.contains(&pid.to_string()),
        "{err}"
    );
    // master itself refuses too, naming the running master's pid.
    let mut cmd = std::process::Command::new(sluice_suite::bin_dir().join("master"));
    cmd.arg("-c").arg(inst.etc());
    if let Some((uid, gid)) = inst.run_as {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(gid);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("master pid {pid}")), "{err}");
    assert!(running(pid));
}

#[test]
fn children_exit_when_master_is_killed() {
    let mut inst = Instance::new(ANVIL, "");
    inst.start();
    let child = inst.wait_pid("anvil", &[]);
    sys::process::signal(inst.master_pid(), 9).unwrap();
    wait_for(10, "the child to notice master's death", || {
        (!running(child)).then_some(())
    });
    // The lock died with master: a new one starts on the same spool.
    inst.start();
    inst.wait_pid("anvil", &[]);
}

#[test]
fn status_lists_services_and_processes() {
    let mut inst = Instance::new(ANVIL, "");
    inst.start();
    let pid = inst.wait_pid("anvil", &[]);
    let out = inst.sluice(&["status"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("master pid {}", inst.master_pid())),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("anvil") && l.contains(&pid.to_string())),
        "{text}"
    );
}

#[test]
fn idle_daemons_exit_after_max_idle_and_come_back_on_demand() {
    let port = sluice_suite::free_port();
    let cf = format!("127.0.0.1:{port} inet n - n - - smtpd -o max_idle=1s\n");
    let mut inst = Instance::new(&cf, "smtpd_reject_unlisted_recipient = no\n");
    inst.start();
    inst.wait_port(port);
    let svc = format!("127.0.0.1:{port}");
    let first = inst.wait_pid(&svc, &[]);
    wait_for(15, "smtpd to exit when idle", || {
        inst.pids(&svc).is_empty().then_some(())
    });
    assert!(!running(first));
    assert!(
        !inst.log().contains(&format!("pid {first} exit status")),
        "an idle exit is not an error:\n{}",
        inst.log()
    );
    // The next client brings a new process.
    inst.wait_port(port);
    let second = inst.wait_pid(&svc, &[first]);
    assert_ne!(first, second);
}
