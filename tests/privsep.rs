//! Privilege separation as root: daemons marked unpriv run as mail_owner,
//! daemons marked chroot run inside the queue directory, and master refuses
//! to run without a proper mail_owner. Skipped (with a message) when the
//! tests do not run as root; CI runs them as root.

use sluice_suite::{wait_for, Instance};

const OWNER: &str = "sluicetest";

fn ensure_owner() -> sys::privilege::Identity {
    if sys::privilege::lookup_user(OWNER).unwrap().is_none() {
        let st = std::process::Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                OWNER,
            ])
            .status()
            .expect("useradd");
        // Another test thread may have created it in the meantime.
        assert!(st.success() || sys::privilege::lookup_user(OWNER).unwrap().is_some());
    }
    sys::privilege::lookup_user(OWNER).unwrap().unwrap()
}

fn proc_ids(pid: i32, field: &str) -> Vec<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect()
}

#[test]
fn daemons_run_as_mail_owner_and_chrooted_where_marked() {
    sluice_suite::require_root("privileges are dropped only by root");
    let owner = ensure_owner();
    let cf =
        "jailed unix - - y 60 1 anvil\nplain unix - - n 60 1 anvil\nrootly unix - n n 60 1 anvil\n";
    let mut inst = Instance::with_identity(cf, &format!("mail_owner = {OWNER}"), true);
    inst.start();
    let jailed = inst.wait_pid("jailed", &[]);
    let plain = inst.wait_pid("plain", &[]);
    let rootly = inst.wait_pid("rootly", &[]);
    // The drop happens right after start-up; wait until it has.
    wait_for(10, "privileges dropped", || {
        (proc_ids(plain, "Uid:")[0] != 0).then_some(())
    });
    wait_for(10, "privileges dropped", || {
        (proc_ids(jailed, "Uid:")[0] != 0).then_some(())
    });
    for pid in [jailed, plain] {
        assert_eq!(
            proc_ids(pid, "Uid:"),
            vec![owner.uid; 4],
            "pid {pid}: real, effective, saved, fs uid"
        );
        assert_eq!(proc_ids(pid, "Gid:"), vec![owner.gid; 4]);
        assert_eq!(proc_ids(pid, "Groups:"), vec![owner.gid]);
    }
    assert_eq!(proc_ids(rootly, "Uid:")[0], 0, "unpriv n keeps root");
    let spool = std::fs::canonicalize(inst.root().join("spool")).unwrap();
    assert_eq!(
        std::fs::read_link(format!("/proc/{jailed}/root")).unwrap(),
        spool
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{plain}/root")).unwrap(),
        std::path::PathBuf::from("/")
    );
    // The private directory belongs to mail_owner, with no access for others.
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = std::fs::metadata(inst.root().join("spool/private")).unwrap();
    assert_eq!(m.uid(), owner.uid);
    assert_eq!(m.permissions().mode() & 0o777, 0o700);
    // And master itself stays root, as it must to restart daemons.
    assert_eq!(proc_ids(inst.master_pid(), "Uid:")[0], 0);
}

#[test]
fn master_refuses_a_missing_or_root_mail_owner() {
    sluice_suite::require_root("privileges are dropped only by root");
    for (owner, needle) in [("no-such-user-sluice", "no such user"), ("root", "uid 0")] {
        let inst = Instance::with_identity(
            "anvil unix - - n - 1 anvil\n",
            &format!("mail_owner = {owner}"),
            true,
        );
        let out = inst.sluice(&["start"]);
        assert_eq!(out.status.code(), Some(1), "mail_owner = {owner}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "mail_owner = {owner}: {err}");
    }
}
