//! Local delivery end to end: swaks → smtpd → cleanup → qmgr → router →
//! local(8) → an mbox under a temporary mail_spool_directory, aliases to
//! users and commands, and the failures (unknown user, alias loop, mail
//! loop through Delivered-To:, command exit 75) with Postfix's log lines,
//! and remote alias targets forwarded through cleanup to smtp-sink.
//! Unprivileged: as root the instance runs as `nobody`, so mail goes to
//! the user `nobody` (and to the current user otherwise).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_suite::{free_port, instance_user, queued_id, smtp_sink, swaks, wait_for, Instance};

fn open_dir(p: &Path) -> PathBuf {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o1777)).unwrap();
    p.to_path_buf()
}

/// An instance delivering mydestination locally; returns it, its SMTP port,
/// the spool directory and a scratch directory commands may write.
fn instance(aliases: &str, extra: &str) -> (Instance, u16, PathBuf, PathBuf) {
    instance_with(aliases, extra, "")
}

/// [`instance`] with more master.cf lines.
fn instance_with(aliases: &str, extra: &str, cf_extra: &str) -> (Instance, u16, PathBuf, PathBuf) {
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nlocal unix - n n - - local\n{cf_extra}"
    );
    let mut inst = Instance::new(&cf, "");
    let spool = open_dir(&inst.root().join("mail"));
    let scratch = open_dir(&inst.root().join("scratch"));
    let aliases = aliases.replace("SCRATCH", &scratch.display().to_string());
    let alias_file = inst.root().join("aliases");
    std::fs::write(&alias_file, aliases).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(inst.etc().join("main.cf"))
        .unwrap();
    write!(
        f,
        "myhostname = mx.test.example\nmail_spool_directory = {}\nalias_maps = hash:{}\n\
         local_recipient_maps =\nrecipient_delimiter = +\n{extra}\n",
        spool.display(),
        alias_file.display()
    )
    .unwrap();
    inst.start();
    inst.wait_port(port);
    (inst, port, spool, scratch)
}

fn send(port: u16, to: &str, data: Option<&Path>) -> String {
    send_from(port, "alice@example.com", to, data)
}

fn send_from(port: u16, from: &str, to: &str, data: Option<&Path>) -> String {
    let server = format!("127.0.0.1:{port}");
    let mut args = vec!["--server", &server, "--from", from, "--to", to];
    let data = data.map(|d| d.display().to_string());
    if let Some(d) = &data {
        args.extend(["--data", d.as_str()]);
    }
    let (code, out) = swaks(&args);
    assert_eq!(code, 0, "{out}");
    queued_id(&out)
}

const BODY: &str = "From the start\n>From quoted\n.leading dot\n..two dots\n\nlast line\n";

#[test]
fn mbox_is_byte_exact_and_readable_by_python() {
    let (inst, port, spool, _) = instance("", "");
    let me = instance_user();
    let rcpt = format!("{me}+tag@mx.test.example");
    let data = inst.root().join("message");
    std::fs::write(
        &data,
        format!(
            "From: alice@example.com\nTo: {rcpt}\nSubject: mbox test\n\n{}",
            BODY.trim_end()
        ),
    )
    .unwrap();
    let ids = [
        send(port, &rcpt, Some(&data)),
        send(port, &rcpt, Some(&data)),
    ];
    for id in &ids {
        let line = inst.wait_log(20, &format!("{id}: to=<{rcpt}>, relay=local"));
        assert!(
            line.contains("dsn=2.0.0, status=sent (delivered to mailbox)"),
            "{line}"
        );
        assert!(line.contains(", delays="), "{line}");
    }
    let mbox = spool.join(&me);
    let text = std::fs::read(&mbox).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(!text.contains('\r'), "{text:?}");
    let entries: Vec<&str> = text.split("From alice@example.com  ").skip(1).collect();
    assert_eq!(entries.len(), 2, "{text}");
    for e in &entries {
        let (date, rest) = e.split_once('\n').unwrap();
        assert_eq!(date.len(), 24, "asctime date: {date:?}");
        assert!(
            rest.starts_with(&format!(
                "Return-Path: <alice@example.com>\nDelivered-To: {rcpt}\n"
            )),
            "{rest}"
        );
        assert!(rest.contains("\nSubject: mbox test\n"), "{rest}");
        let body = ">From the start\n>>From quoted\n.leading dot\n..two dots\n\nlast line\n\n";
        assert!(rest.ends_with(&format!("\n\n{body}")), "{rest:?}");
    }
    let mode = std::fs::metadata(&mbox).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(!spool.join(format!("{me}.lock")).exists());
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import mailbox, sys\n\
             msgs = list(mailbox.mbox(sys.argv[1]))\n\
             print(len(msgs))\n\
             for m in msgs:\n\
             \x20   print(m['Subject'], m['Delivered-To'], m.get_from().split()[0])\n",
        )
        .arg(&mbox)
        .output()
        .expect("python3");
    let got = String::from_utf8_lossy(&out.stdout);
    let line = format!("mbox test {rcpt} alice@example.com\n");
    assert_eq!(
        got,
        format!("2\n{line}{line}"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn aliases_commands_and_failures() {
    let me = instance_user();
    let aliases = format!(
        "# test aliases\npostmaster: {me}\nteam: postmaster,\n  \"|cat > SCRATCH/piped; echo $RECIPIENT $EXTENSION >> SCRATCH/piped\"\n\
         tempfail: |exit 75\nbroken: \"|echo broken pipe; exit 1\"\nloop1: loop2\nloop2: loop1\n\
         far: someone@remote.example\nlist: :include:SCRATCH/list\nlistcmd: :include:SCRATCH/listcmd\n"
    );
    let (inst, port, spool, scratch) = instance(&aliases, "");
    let h = "mx.test.example";
    std::fs::write(scratch.join("list"), format!("# members\n{me}\n")).unwrap();
    std::fs::write(scratch.join("listcmd"), "|cat > /dev/null\n").unwrap();

    let id = send(port, &format!("team+x@{h}"), None);
    let line = inst.wait_log(20, &format!("{id}: to=<{me}@{h}>, orig_to=<team+x@{h}>"));
    assert!(
        line.contains("status=sent (delivered to mailbox)"),
        "{line}"
    );
    let line = inst.wait_log(20, &format!("{id}: to=<team+x@{h}>, relay=local"));
    assert!(
        line.contains("status=sent (delivered to command: cat"),
        "{line}"
    );
    let piped = wait_for(10, "the command's output", || {
        std::fs::read_to_string(scratch.join("piped"))
            .ok()
            .filter(|t| t.ends_with('\n') && t.contains("team+x@"))
    });
    assert!(piped.starts_with("From alice@example.com  "), "{piped}");
    assert!(
        piped.contains(&format!("\nDelivered-To: team+x@{h}\n")),
        "{piped}"
    );
    assert!(piped.ends_with(&format!("team+x@{h} x\n")), "{piped}");
    assert!(std::fs::read_to_string(spool.join(&me))
        .unwrap()
        .contains("Delivered-To: team+x@"));

    let cases = [
        ("tempfail", "dsn=4.3.0, status=deferred"),
        (
            "broken",
            "dsn=5.3.0, status=bounced (Command died with status 1",
        ),
        ("loop1", "dsn=5.4.6, status=bounced (alias expansion loop"),
        (
            "ghost",
            "dsn=5.1.1, status=bounced (unknown user: \"ghost\")",
        ),
        ("far", "dsn=2.0.0, status=sent (forwarded as "),
        (
            "listcmd",
            "dsn=5.7.1, status=bounced (alias listcmd: mail to commands is restricted",
        ),
    ];
    for (name, want) in cases {
        let id = send(port, &format!("{name}@{h}"), None);
        let line = inst.wait_log(20, &format!("{id}: to=<{name}@{h}>, relay=local"));
        assert!(line.contains(want), "{name}: {line}");
    }
    assert!(
        inst.log().contains("broken pipe"),
        "command output in the reason"
    );

    let id = send(port, &format!("list@{h}"), None);
    let line = inst.wait_log(20, &format!("{id}: to=<{me}@{h}>, orig_to=<list@{h}>"));
    assert!(
        line.contains("status=sent (delivered to mailbox)"),
        "{line}"
    );

    // A message that already went through this mailbox is a loop.
    let data = inst.root().join("looped");
    std::fs::write(
        &data,
        format!("Delivered-To: {me}@{h}\nSubject: looped\n\nbody\n"),
    )
    .unwrap();
    let id = send(port, &format!("{me}@{h}"), Some(&data));
    let line = inst.wait_log(20, &format!("{id}: to=<{me}@{h}>, relay=local"));
    assert!(
        line.contains("dsn=5.4.6, status=bounced (mail forwarding loop for"),
        "{line}"
    );
}

#[test]
fn mailbox_size_limit_bounces() {
    let (inst, port, spool, _) =
        instance("", "mailbox_size_limit = 300\nmessage_size_limit = 300\n");
    let me = instance_user();
    std::fs::write(spool.join(&me), "x".repeat(290)).unwrap();
    if sys::is_root() {
        let u = sys::privilege::lookup_user(&me).unwrap().unwrap();
        std::os::unix::fs::chown(spool.join(&me), Some(u.uid), Some(u.gid)).unwrap();
    }
    let id = send(port, &format!("{me}@mx.test.example"), None);
    let line = inst.wait_log(20, &format!("{id}: to=<{me}@mx.test.example>, relay=local"));
    assert!(line.contains("dsn=5.2.2, status=bounced"), "{line}");
    assert_eq!(std::fs::read(spool.join(&me)).unwrap().len(), 290);
}

#[test]
fn soft_bounce_keeps_failed_local_mail_queued() {
    // soft_bounce = yes once let an alias loop and an unknown user bounce
    // (5.4.6, 5.1.1): Postfix defers them with 4.x.x, so nothing is lost,
    // and logs them as status=SOFTBOUNCE (bounce.c), not as deferrals.
    let (inst, port, _, _) = instance("loop1: loop2\nloop2: loop1\n", "soft_bounce = yes\n");
    let h = "mx.test.example";
    for (name, want) in [
        (
            "loop1",
            "dsn=4.4.6, status=SOFTBOUNCE (alias expansion loop",
        ),
        (
            "ghost",
            "dsn=4.1.1, status=SOFTBOUNCE (unknown user: \"ghost\")",
        ),
    ] {
        let id = send(port, &format!("{name}@{h}"), None);
        let line = inst.wait_log(20, &format!("{id}: to=<{name}@{h}>, relay=local"));
        assert!(line.contains(want), "{name}: {line}");
        assert!(
            inst.queued_ids().contains(&id),
            "{name}: the message stays queued"
        );
    }
    assert!(!inst.log().contains("status=bounced"), "{}", inst.log());
}

/// A system user made for a test (kept between runs), with a fresh home
/// directory of mode 0700.
fn test_user(name: &str, home: &Path) -> sys::privilege::Identity {
    if sys::privilege::lookup_user(name).unwrap().is_none() {
        let st = Command::new("useradd")
            .args(["--system", "--no-create-home", "--home-dir"])
            .arg(home)
            .args(["--shell", "/usr/sbin/nologin", name])
            .status()
            .expect("useradd");
        assert!(st.success() || sys::privilege::lookup_user(name).unwrap().is_some());
    }
    let u = sys::privilege::lookup_user(name).unwrap().unwrap();
    let _ = std::fs::remove_dir_all(home);
    std::fs::create_dir_all(home).unwrap();
    std::os::unix::fs::chown(home, Some(u.uid), Some(u.gid)).unwrap();
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o700)).unwrap();
    u
}

/// As root, with a test user created here: local runs as root and writes
/// the user's Maildir as the user.
#[test]
fn as_root_maildir_is_written_as_the_instance_user() {
    sluice_suite::require_root("files are written as the instance user");
    const USER: &str = "sluicemaildir";
    let home = Path::new("/tmp/sluice-maildir-home");
    let u = test_user(USER, home);
    let forward = home.join(".forward");
    std::fs::write(
        &forward,
        format!(
            "# keep a copy\n\\{USER}\n\"|id -u > {}/fwd-out\"\n",
            home.display()
        ),
    )
    .unwrap();
    std::os::unix::fs::chown(&forward, Some(u.uid), Some(u.gid)).unwrap();

    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nlocal unix - n n - - local\n"
    );
    let main = "myhostname = mx.test.example\nhome_mailbox = Maildir/\nlocal_recipient_maps =\n\
                alias_maps =\n";
    let mut inst = Instance::with_identity(&cf, main, true);
    inst.start();
    inst.wait_port(port);
    let h = "mx.test.example";
    let id = send(port, &format!("{USER}@{h}"), None);
    let line = inst.wait_log(20, &format!("{id}: to=<{USER}@{h}>, relay=local"));
    assert!(
        line.contains("status=sent (delivered to maildir, delivered to command: id -u"),
        "{line}"
    );
    let fwd = std::fs::read_to_string(home.join("fwd-out")).unwrap();
    assert_eq!(
        fwd,
        format!("{}\n", u.uid),
        "the .forward command runs as the user"
    );
    let new: Vec<PathBuf> = std::fs::read_dir(home.join("Maildir/new"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(new.len(), 1);
    use std::os::unix::fs::MetadataExt;
    for p in [&new[0], &home.join("Maildir"), &home.join("Maildir/tmp")] {
        let m = std::fs::metadata(p).unwrap();
        assert_eq!((m.uid(), m.gid()), (u.uid, u.gid), "{}", p.display());
    }
    let text = std::fs::read_to_string(&new[0]).unwrap();
    assert!(
        text.starts_with(&format!(
            "Return-Path: <alice@example.com>\nDelivered-To: {USER}@{h}\n"
        )),
        "{text}"
    );
    assert!(!text.contains('\r'));
    let out = Command::new("python3")
        .arg("-c")
        .arg("import mailbox, sys\nm = list(mailbox.Maildir(sys.argv[1]))\nprint(len(m), m[0]['Delivered-To'])")
        .arg(home.join("Maildir"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("1 {USER}@{h}\n")
    );
    let _ = std::fs::remove_dir_all(home);
}

/// As root: a world-writable `.forward` is skipped with Postfix's warning
/// and the mail goes to the mailbox; alias commands run as the owner of
/// the alias table or `:include:` file, or `default_privs` when that is
/// root; root's own mailbox is refused (5.7.1) unless `allow_mail_to_root`,
/// then written as root.
#[test]
fn as_root_forward_checks_and_delivery_rights() {
    use std::os::unix::fs::MetadataExt;
    sluice_suite::require_root("files are written as the instance user");
    const USER: &str = "sluicefwd";
    let home = Path::new("/tmp/sluice-fwd-home");
    let u = test_user(USER, home);
    let nobody = sys::privilege::lookup_user("nobody").unwrap().unwrap();
    let forward = home.join(".forward");
    std::fs::write(
        &forward,
        format!("\"|id -u > {}/fwd-out\"\n", home.display()),
    )
    .unwrap();
    std::os::unix::fs::chown(&forward, Some(u.uid), Some(u.gid)).unwrap();
    std::fs::set_permissions(&forward, std::fs::Permissions::from_mode(0o666)).unwrap();

    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\nrouter unix - - n - 1 router\nlocal unix - n n - - local\n"
    );
    let mut inst = Instance::with_identity(&cf, "", true);
    // Commands run as other users must reach the scratch directory.
    std::fs::set_permissions(inst.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let spool = inst.root().join("mail");
    std::fs::create_dir(&spool).unwrap();
    let scratch = open_dir(&inst.root().join("scratch"));
    let s = scratch.display();
    // Root's table, and a table and an include file the user owns.
    let root_aliases = inst.root().join("aliases");
    std::fs::write(
        &root_aliases,
        format!("rootcmd: \"|id -u > {s}/rootcmd\"\ninc: :include:{s}/inc\n"),
    )
    .unwrap();
    std::fs::write(scratch.join("inc"), format!("\"|id -u > {s}/inccmd\"\n")).unwrap();
    let user_aliases = scratch.join("user-aliases");
    std::fs::write(
        &user_aliases,
        format!("usercmd: \"|id -u > {s}/usercmd\"\n"),
    )
    .unwrap();
    for p in [scratch.join("inc"), user_aliases.clone()] {
        std::os::unix::fs::chown(&p, Some(u.uid), Some(u.gid)).unwrap();
    }
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(inst.etc().join("main.cf"))
        .unwrap();
    write!(
        f,
        "myhostname = mx.test.example\nmail_spool_directory = {}\nlocal_recipient_maps =\n\
         alias_maps = hash:{}, hash:{}\nallow_mail_to_commands = alias, forward, include\n",
        spool.display(),
        root_aliases.display(),
        user_aliases.display()
    )
    .unwrap();
    inst.start();
    inst.wait_port(port);
    let h = "mx.test.example";

    let id = send(port, &format!("{USER}@{h}"), None);
    let line = inst.wait_log(20, &format!("{id}: to=<{USER}@{h}>, relay=local"));
    assert!(
        line.contains("status=sent (delivered to mailbox)"),
        "{line}"
    );
    assert!(
        inst.log().contains(&format!(
            "warning: {id}: file {}/.forward is world writable: skipping",
            home.display()
        )),
        "{}",
        inst.log()
    );
    assert!(!home.join("fwd-out").exists());
    let m = std::fs::metadata(spool.join(USER)).unwrap();
    assert_eq!((m.uid(), m.gid()), (u.uid, u.gid));

    for (name, uid) in [("rootcmd", nobody.uid), ("usercmd", u.uid), ("inc", u.uid)] {
        let id = send(port, &format!("{name}@{h}"), None);
        let line = inst.wait_log(20, &format!("{id}: to=<{name}@{h}>, relay=local"));
        assert!(
            line.contains("status=sent (delivered to command: id -u"),
            "{line}"
        );
        let out = if name == "inc" { "inccmd" } else { name };
        let got = std::fs::read_to_string(scratch.join(out)).unwrap();
        assert_eq!(got, format!("{uid}\n"), "{name} runs as uid {uid}");
    }

    // Root's mailbox is refused unless allow_mail_to_root says otherwise.
    let id = send(port, &format!("root@{h}"), None);
    let line = inst.wait_log(20, &format!("{id}: to=<root@{h}>, relay=local"));
    assert!(
        line.contains("dsn=5.7.1, status=bounced (mail for root is not delivered as root"),
        "{line}"
    );
    assert!(!spool.join("root").exists());
    assert!(inst
        .sluice(&["config", "allow_mail_to_root=yes"])
        .status
        .success());
    assert!(inst.sluice(&["reload"]).status.success());
    wait_for(20, "local delivering to root after the reload", || {
        let id = send(port, &format!("root@{h}"), None);
        let line = inst.wait_log(20, &format!("{id}: to=<root@{h}>, relay=local"));
        line.contains("status=sent (delivered to mailbox)")
            .then_some(())
    });
    let m = std::fs::metadata(spool.join("root")).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o600));
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn remote_alias_targets_are_forwarded_with_sender_and_delivered_to() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst, port, _spool, _scratch) = instance_with(
        "far: someone@remote.example\n",
        &format!("relayhost = [127.0.0.1]:{}\n", sink.port),
        "smtp unix - - n - - smtp\nrelay unix - - n - - smtp\n",
    );
    let id = send(port, "far@mx.test.example", None);
    let line = inst.wait_log(20, &format!("{id}: to=<far@mx.test.example>, relay=local"));
    assert!(line.contains("status=sent (forwarded as "), "{line}");
    let new_id = line
        .split("forwarded as ")
        .nth(1)
        .unwrap()
        .trim_end_matches(')')
        .to_string();
    // The new message goes out through the smtp agent with the old sender.
    let out = inst.wait_log(20, &format!("{new_id}: to=<someone@remote.example>"));
    assert!(out.contains("status=sent (250 "), "{out}");
    assert!(
        inst.log()
            .contains(&format!("{new_id}: from=<alice@example.com>")),
        "{}",
        inst.log()
    );
    let dumped = wait_for(10, "the forwarded message at the sink", || {
        std::fs::read_dir(sink.dir.path())
            .ok()?
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .find(|t| t.contains("Delivered-To: far@mx.test.example"))
    });
    assert!(dumped.contains("X-Mailer: swaks"), "{dumped}");
}

/// A remote alias target's copy keeps the recipient's DSN options, as
/// Postfix's local(8) passes dsn_notify and dsn_orcpt on: NOTIFY=NEVER
/// means no notice when the copy fails; NOTIFY=SUCCESS is reported by the
/// expansion, and dropped from the copy (so that it becomes NEVER: no
/// failure notice either); without NOTIFY the copy's failure is reported.
/// The copy's recipient is logged with the ORCPT the client gave, or the
/// alias, as `orig_to=`.
#[test]
fn forwarded_copies_keep_notify_and_orcpt() {
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &["-f", "rcpt"]);
    let h = "mx.test.example";
    let (inst, port, _spool, _scratch) = instance_with(
        "far: someone@remote.example\n",
        &format!("relayhost = [127.0.0.1]:{}\n", sink.port),
        "smtp unix - - n - - smtp\nrelay unix - - n - - smtp\n",
    );
    let script = r#"
import smtplib, sys
s = smtplib.SMTP("127.0.0.1", int(sys.argv[1]))
s.ehlo("client.test.example")
s.mail("alice@example.com")
c, m = s.rcpt(sys.argv[2], sys.argv[3:])
assert c == 250, (c, m)
c, m = s.data(b"Subject: forwarded\r\n\r\nbody\r\n")
print(c, m.decode())
s.quit()
"#;
    let send = |options: &[&str]| {
        let out = Command::new("python3")
            .args(["-c", script, &port.to_string(), &format!("far@{h}")])
            .args(options)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("250"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.split("queued as ").nth(1).unwrap().trim().to_string()
    };
    // The copy of `id` for the alias's target, failed at the sink, logged
    // with `orig_to`.
    let copy_of = |id: &str, orig_to: &str| {
        let line = inst.wait_log(20, &format!("{id}: to=<far@{h}>, "));
        assert!(
            line.contains("relay=local") && line.contains("status=sent (forwarded as "),
            "{line}"
        );
        let copy = line.split("forwarded as ").nth(1).unwrap();
        let copy = copy.trim_end_matches(')').to_string();
        let line = inst.wait_log(
            20,
            &format!("{copy}: to=<someone@remote.example>, orig_to=<{orig_to}>"),
        );
        assert!(line.contains("status=bounced"), "{line}");
        inst.wait_log(20, &format!("{copy}: removed"));
        copy
    };
    let notified = |id: &str| {
        inst.log()
            .contains(&format!("{id}: sender non-delivery notification"))
    };

    let given = send(&[]);
    let copy = copy_of(&given, &format!("far@{h}"));
    inst.wait_log(20, &format!("{copy}: sender non-delivery notification"));

    let never = send(&["NOTIFY=NEVER", "ORCPT=rfc822;given@client.example"]);
    let copy = copy_of(&never, "given@client.example");
    assert!(!notified(&copy), "NOTIFY=NEVER: {}", inst.log());

    let success = send(&["NOTIFY=SUCCESS"]);
    let copy = copy_of(&success, &format!("far@{h}"));
    inst.wait_log(
        20,
        &format!("{success}: sender delivery status notification"),
    );
    assert!(!notified(&copy), "NOTIFY=SUCCESS: {}", inst.log());
}

/// Prints what a test checks of each message of an mbox, one line each:
/// the Return-Path, and for a delivery status notification its To:, and per
/// recipient Final-Recipient, Action, Status and Diagnostic-Code.
const MBOX_SUMMARY: &str = "import mailbox, sys
for m in mailbox.mbox(sys.argv[1]):
    line = ['return-path=' + m['Return-Path']]
    if m.get_content_type() == 'multipart/report':
        line.append('to=' + m['To'])
        for part in m.get_payload():
            if part.get_content_type() == 'message/delivery-status':
                for b in part.get_payload()[1:]:
                    line += [b['Final-Recipient'], b['Action'], b['Status'], b['Diagnostic-Code']]
    else:
        line.append('subject=' + str(m['Subject']))
    print(' | '.join(line))
";

/// An alias with an `owner-` alias: its members get a copy from the owner,
/// and the failures (a member that does not exist, a command that exits 67)
/// come back to the owner's mailbox as RFC 3464 notices, never to the
/// original sender.
#[test]
fn owner_aliases_get_the_errors_of_their_lists() {
    let me = instance_user();
    let h = "mx.test.example";
    let aliases = format!(
        "list: :include:SCRATCH/members, \"|echo no thanks; exit 67\"\nowner-list: {me}\n\
         sender: SCRATCH/sender.mbox\n"
    );
    let (inst, port, spool, scratch) = instance(&aliases, "");
    std::fs::write(scratch.join("members"), format!("{me}\nnosuchuser\n")).unwrap();
    // With ENVID and RET, which the list's copy must not carry on (Postfix's
    // alias.c: a list with an owner is a new distribution).
    let script = "import smtplib, sys
s = smtplib.SMTP('127.0.0.1', int(sys.argv[1]))
s.ehlo('client.test.example')
s.mail(sys.argv[2], ['ENVID=list-envid', 'RET=HDRS'])
s.rcpt(sys.argv[3])
c, m = s.data(b'Subject: to the list\\r\\n\\r\\nhello list\\r\\n')
print(m.decode())
s.quit()
";
    let out = Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .arg(format!("sender@{h}"))
        .arg(format!("list@{h}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text
        .split("queued as ")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}{}", String::from_utf8_lossy(&out.stderr)))
        .trim()
        .to_string();

    // The members are forwarded as one new message from the owner.
    let line = inst.wait_log(20, &format!("{id}: to=<{me}@{h}>, orig_to=<list@{h}>"));
    assert!(line.contains("status=sent (forwarded as "), "{line}");
    let copy = line
        .split("forwarded as ")
        .nth(1)
        .unwrap()
        .trim_end_matches(')');
    let line = inst.wait_log(
        20,
        &format!("{id}: to=<nosuchuser@{h}>, orig_to=<list@{h}>"),
    );
    assert!(line.contains(&format!("forwarded as {copy})")), "{line}");
    inst.wait_log(20, &format!("{copy}: from=<owner-list@{h}>"));
    // The command fails for good here; its notice goes to the owner.
    let line = inst.wait_log(20, &format!("{id}: to=<list@{h}>, relay=local"));
    assert!(
        line.contains("dsn=5.3.0, status=bounced (Command died with status 67"),
        "{line}"
    );
    let line = inst.wait_log(20, &format!("{id}: sender non-delivery notification: "));
    let notice = line.rsplit(' ').next().unwrap().to_string();
    // The unknown member bounces in the copy, whose sender is the owner.
    let line = inst.wait_log(20, &format!("{copy}: to=<nosuchuser@{h}>, relay=local"));
    assert!(line.contains("dsn=5.1.1, status=bounced"), "{line}");
    let line = inst.wait_log(20, &format!("{copy}: sender non-delivery notification: "));
    let notice2 = line.rsplit(' ').next().unwrap().to_string();
    for n in [&notice, &notice2] {
        let line = inst.wait_log(20, &format!("{n}: to=<{me}@{h}>, orig_to=<owner-list@{h}>"));
        assert!(
            line.contains("status=sent (delivered to mailbox)"),
            "{line}"
        );
    }
    inst.wait_log(20, &format!("{id}: removed"));
    // The original message is settled without a notice to its sender.
    let notices = inst
        .log()
        .lines()
        .filter(|l| l.contains(&format!("{id}: sender non-delivery notification")))
        .count();
    assert_eq!(notices, 1, "{}", inst.log());
    assert!(!scratch.join("sender.mbox").exists());

    let out = Command::new("python3")
        .arg("-c")
        .arg(MBOX_SUMMARY)
        .arg(spool.join(&me))
        .output()
        .unwrap();
    let got = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<&str> = got.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            format!("return-path=<> | to=owner-list@{h} | rfc822; list@{h} | failed | 5.3.0 | X-Sluice; Command died with status 67: \"echo no thanks; exit 67\". Command output: no thanks"),
            format!("return-path=<> | to=owner-list@{h} | rfc822; nosuchuser@{h} | failed | 5.1.1 | X-Sluice; unknown user: \"nosuchuser\""),
            format!("return-path=<owner-list@{h}> | subject=to the list"),
        ],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The original's notice names its ENVID; the copy's has none.
    let envids = "import mailbox, sys
for m in mailbox.mbox(sys.argv[1]):
    if m.get_content_type() == 'multipart/report':
        for part in m.get_payload():
            if part.get_content_type() == 'message/delivery-status':
                b = part.get_payload()
                print(b[1]['Final-Recipient'], '|', b[0]['Original-Envelope-Id'])
";
    let out = Command::new("python3")
        .args(["-c", envids])
        .arg(spool.join(&me))
        .output()
        .unwrap();
    let got = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<&str> = got.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            format!("rfc822; list@{h} | list-envid"),
            format!("rfc822; nosuchuser@{h} | None"),
        ],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A recipient with several targets, one of which defers: the retry
/// delivers only to that one, not again to those that already have it.
#[test]
fn a_deferred_target_is_retried_alone() {
    let me = instance_user();
    let h = "mx.test.example";
    let aliases =
        format!("split: {me}, \"|test -e SCRATCH/go || exit 75; cat > SCRATCH/split-out\"\n");
    let (inst, port, spool, scratch) = instance(&aliases, "");
    let id = send(port, &format!("split@{h}"), None);
    let line = inst.wait_log(20, &format!("{id}: to=<split@{h}>, relay=local"));
    assert!(line.contains("dsn=4.3.0, status=deferred"), "{line}");
    let line = inst.wait_log(20, &format!("{id}: to=<{me}@{h}>, orig_to=<split@{h}>"));
    assert!(
        line.contains("status=sent (delivered to mailbox)"),
        "{line}"
    );

    std::fs::write(scratch.join("go"), "").unwrap();
    assert!(inst.sluice(&["queue", "flush"]).status.success());
    let line = wait_for(20, "the command's delivery on the retry", || {
        inst.log()
            .lines()
            .find(|l| {
                l.contains(&format!("{id}: to=<split@{h}>, relay=local"))
                    && l.contains("status=sent")
            })
            .map(str::to_string)
    });
    assert!(line.contains("delivered to command: test -e"), "{line}");
    inst.wait_log(20, &format!("{id}: removed"));
    let mailbox_lines = inst
        .log()
        .lines()
        .filter(|l| l.contains(&format!("{id}: to=<{me}@{h}>")))
        .count();
    assert_eq!(mailbox_lines, 1, "{}", inst.log());
    let mbox = std::fs::read_to_string(spool.join(&me)).unwrap();
    assert_eq!(mbox.matches(&format!("Delivered-To: split@{h}")).count(), 1);
    assert!(std::fs::read_to_string(scratch.join("split-out"))
        .unwrap()
        .contains(&format!("Delivered-To: split@{h}")));
    // Settled: nothing is left remembered.
    let left: Vec<_> = std::fs::read_dir(inst.root().join("data/local"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_recipient_cleanup_rewrote_is_logged_with_orig_to() {
    // virtual_alias_maps are applied by cleanup; local logs the address the
    // sender used as Postfix does: to=<user>, orig_to=<alias>.
    let me = instance_user();
    let (inst, port, spool, _) = instance(
        "",
        &format!("virtual_alias_maps = inline:{{ team@mx.test.example = {me}@mx.test.example }}"),
    );
    let id = send(port, "team@mx.test.example", None);
    let line = inst.wait_log(20, &format!("{id}: to=<{me}@mx.test.example>"));
    assert!(
        line.contains(", orig_to=<team@mx.test.example>, relay=local")
            && line.contains("status=sent"),
        "{line}"
    );
    assert!(spool.join(&me).exists());
}

#[test]
fn a_mailbox_locked_by_another_writer_is_waited_for() {
    // Python's mailbox module holds the mbox (fcntl and dotlock, as mail
    // readers do) while writing its own message; local must not write in
    // between, and delivers once the lock is gone.
    let (inst, port, spool, _) =
        instance("", "minimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n");
    let me = instance_user();
    let mbox = spool.join(&me);
    let script = r#"
import mailbox, sys, time, email.message
box = mailbox.mbox(sys.argv[1])
box.lock()
m = email.message.Message()
m["From"] = "writer@example.com"
m["Subject"] = "written under lock"
m.set_payload("held\n")
box.add(m)
box.flush()
print("locked", flush=True)
time.sleep(3)
box.unlock()
box.close()
"#;
    // The writer is the mailbox's owner, as a mail reader would be.
    let mut cmd = Command::new("python3");
    if sys::is_root() {
        use std::os::unix::process::CommandExt;
        let u = sys::privilege::lookup_user(&me).unwrap().unwrap();
        cmd.uid(u.uid).gid(u.gid);
    }
    let mut writer = cmd
        .args(["-c", script, mbox.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(writer.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    let rcpt = format!("{me}@mx.test.example");
    let id = send(port, &rcpt, None);
    let sent = inst.wait_log(30, &format!("{id}: to=<{rcpt}>, relay=local, "));
    let sent = if sent.contains("status=sent") {
        sent
    } else {
        wait_for(30, "delivery after the lock", || {
            inst.log()
                .lines()
                .find(|l| l.contains(&format!("{id}: to=<{rcpt}>")) && l.contains("status=sent"))
                .map(String::from)
        })
    };
    assert!(writer.wait().unwrap().success());
    assert!(sent.contains("delivered to mailbox"), "{sent}");
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import mailbox,sys\nb=mailbox.mbox(sys.argv[1])\nprint('|'.join(str(m['Subject']) for m in b))",
        )
        .arg(&mbox)
        .output()
        .unwrap();
    let subjects = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let parts: Vec<&str> = subjects.split('|').collect();
    assert_eq!(parts.len(), 2, "{subjects}");
    assert_eq!(parts[0], "written under lock", "{subjects}");
}

/// soft_bounce with an owner- alias: a target that fails for good is
/// deferred, as Postfix's bounce_one under soft_bounce, and its owner gets
/// no notice (before: the owner was notified while the log said deferred).
#[test]
fn soft_bounce_defers_an_owned_target_without_a_notice() {
    let me = instance_user();
    let h = "mx.test.example";
    let aliases = format!("list: \"|echo no thanks; exit 67\"\nowner-list: {me}\n");
    let (inst, port, _spool, _scratch) = instance(&aliases, "soft_bounce = yes\n");
    let (code, out) = swaks(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        &format!("sender@{h}"),
        "--to",
        &format!("list@{h}"),
    ]);
    assert_eq!(code, 0, "{out}");
    let id = queued_id(&out);
    let line = inst.wait_log(20, &format!("{id}: to=<list@{h}>, relay=local"));
    assert!(line.contains("dsn=4.3.0, status=SOFTBOUNCE"), "{line}");
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(
        !inst.log().contains("non-delivery notification"),
        "{}",
        inst.log()
    );
    assert!(inst.queue_json().iter().any(|l| l.contains(&id)));
}

/// An alias file that cannot be read defers local mail (4.3.0 "alias
/// database unavailable", as Postfix's local(8)) instead of delivering a
/// passwd user without the aliases that might send it elsewhere; once the
/// file is back, the next try delivers. Before: delivered to the user's
/// mailbox as if no alias existed.
#[test]
fn an_unreadable_alias_file_defers_local_mail() {
    let me = instance_user();
    let (inst, port, spool, _) = instance(&format!("team: {me}\n"), "");
    let h = "mx.test.example";
    let aliases = inst.root().join("aliases");
    std::fs::remove_file(&aliases).unwrap();
    let id = send(port, &format!("{me}@{h}"), None);
    let line = inst.wait_log(20, &format!("{id}: to=<{me}@{h}>, relay=local"));
    assert!(
        line.contains("dsn=4.3.0, status=deferred (alias database unavailable)"),
        "{line}"
    );
    assert!(inst.queued_ids().contains(&id), "the message stays queued");
    assert!(!spool.join(&me).exists(), "nothing delivered meanwhile");
    let log = inst.log();
    assert!(
        log.contains("warning: ") && log.contains("alias_maps: table hash:"),
        "{log}"
    );

    std::fs::write(&aliases, format!("team: {me}\n")).unwrap();
    assert!(inst.sluice(&["queue", "flush"]).status.success());
    wait_for(20, "the retry delivered", || {
        inst.log()
            .lines()
            .any(|l| l.contains(&id) && l.contains("status=sent (delivered to mailbox)"))
            .then_some(())
    });
    assert!(std::fs::read_to_string(spool.join(&me))
        .unwrap()
        .contains("X-Mailer: swaks"));
}

/// luser_relay: mail for an unknown local user goes to the expanded
/// address instead of bouncing (Postfix's local/unknown.c): a bare name to
/// that local user's mailbox, through the aliases, and an address with
/// `${user}` and `${extension?{...}:{...}}` forwarded to another host. Before: both
/// bounced with 5.1.1 unknown user.
#[test]
fn luser_relay_takes_mail_for_unknown_users() {
    let me = instance_user();
    let h = "mx.test.example";
    let (inst, port, spool, _) = instance(&format!("catchall: {me}\n"), "luser_relay = catchall\n");
    let id = send(port, &format!("ghost@{h}"), None);
    let line = inst.wait_log(20, &format!("{id}: to=<{me}@{h}>, orig_to=<ghost@{h}>"));
    assert!(
        line.contains("status=sent (delivered to mailbox)"),
        "{line}"
    );
    assert!(std::fs::read_to_string(spool.join(&me))
        .unwrap()
        .contains("X-Mailer: swaks"));
    drop(inst);

    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst, port, _, _) = instance_with(
        "",
        &format!(
            "relayhost = [127.0.0.1]:{}\nluser_relay = ${{user}}${{extension?{{.$extension}}:{{.none}}}}@remote.example\n",
            sink.port
        ),
        "smtp unix - - n - - smtp\nrelay unix - - n - - smtp\n",
    );
    for (rcpt, want) in [
        ("ghost+tag", "ghost.tag@remote.example"),
        ("wraith", "wraith.none@remote.example"),
    ] {
        let id = send(port, &format!("{rcpt}@{h}"), None);
        let line = inst.wait_log(20, &format!("{id}: to=<{rcpt}@{h}>, relay=local"));
        assert!(line.contains("status=sent (forwarded as "), "{line}");
        let out = inst.wait_log(20, &format!("to=<{want}>"));
        assert!(out.contains("status=sent (250 "), "{out}");
    }
    // A user that exists is not relayed.
    let id = send(port, &format!("{me}@{h}"), None);
    let line = inst.wait_log(20, &format!("{id}: to=<{me}@{h}>, relay=local"));
    assert!(
        line.contains("status=sent (delivered to mailbox)"),
        "{line}"
    );
    assert!(!inst.log().contains("status=bounced"), "{}", inst.log());
}
