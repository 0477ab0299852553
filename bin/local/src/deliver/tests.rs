use super::*;

#[test]
fn extensions_split_at_the_first_delimiter() {
    let cases = [
        ("user+ext", "+", ("user", Some("ext"))),
        ("user+a+b", "+", ("user", Some("a+b"))),
        ("user-x", "+-", ("user", Some("x"))),
        ("user", "+", ("user", None)),
        ("+lead", "+", ("+lead", None)),
        ("user+ext", "", ("user+ext", None)),
    ];
    for (local, delim, want) in cases {
        assert_eq!(split_extension(local, delim), want, "{local}");
    }
}

#[test]
fn forward_path_expansion() {
    let u = sys::privilege::Identity {
        name: "bob".into(),
        uid: 1000,
        gid: 1000,
        home: "/home/bob".into(),
    };
    let spec = "$home/.forward${recipient_delimiter}${extension}, $home/.forward";
    assert_eq!(
        forward_paths(spec, &u, Some("lists"), "+-"),
        ["/home/bob/.forward+lists", "/home/bob/.forward"]
    );
    assert_eq!(forward_paths(spec, &u, None, "+"), ["/home/bob/.forward"]);
    assert!(forward_paths("$unknown/x", &u, None, "+").is_empty());
    assert_eq!(
        forward_paths("/var/fwd/$user", &u, None, ""),
        ["/var/fwd/bob"]
    );
}

#[test]
fn owner_senders() {
    let o = |v, expand| owner_sender("list", v, expand, "example.org");
    assert_eq!(o("bob", false), "owner-list@example.org");
    assert_eq!(o("bob", true), "bob@example.org");
    assert_eq!(o("Bob@Else.Example", true), "Bob@Else.Example");
    for several in ["bob, carol", "|cmd", "/file", ":include:/x", "\\bob"] {
        assert_eq!(o(several, true), "owner-list@example.org", "{several}");
    }
}

#[test]
fn forward_files_are_checked_as_postfix_does() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // chown needs root's effective uid, which other tests switch away from.
    let _serial = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join(".forward");
    std::fs::write(&f, "me\n").unwrap();
    let mine = std::fs::metadata(&f).unwrap().uid();
    let check = |uid| {
        let meta = std::fs::symlink_metadata(&f).unwrap();
        forward_problem(&meta, "F", uid)
    };
    assert_eq!(check(mine), None);
    if mine == 0 {
        // Root's file is anyone's; someone else's is nobody else's.
        assert_eq!(check(4243), None);
        std::os::unix::fs::chown(&f, Some(4242), None).unwrap();
        assert_eq!(check(4242), None);
        assert_eq!(check(4243), Some("file F has bad owner uid 4242".into()));
        std::os::unix::fs::chown(&f, Some(0), None).unwrap();
    } else {
        assert_eq!(
            check(mine + 1),
            Some(format!("file F has bad owner uid {mine}"))
        );
    }
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o620)).unwrap();
    assert_eq!(
        check(mine),
        None,
        "group-writable is allowed, as in Postfix"
    );
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(check(mine), Some("file F is world writable".into()));
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert_eq!(
        forward_problem(&meta, "L", mine),
        Some("file L is not a regular file".into())
    );
}

fn transaction() -> Transaction {
    Transaction {
        queue_id: "TESTID".into(),
        sender: "alice@example.com".into(),
        ret: None,
        envid: None,
        body: mail::BodyType::SevenBit,
        smtputf8: false,
        size: 0,
        arrival_us: 0,
        recipients: vec![],
        data: ipc::delivery::Data::Inline(vec![]),
    }
}

fn settings(spool: &std::path::Path, as_root: bool) -> Settings {
    Settings {
        spool: spool.to_path_buf(),
        home_mailbox: String::new(),
        mailbox_command: String::new(),
        size_limit: 0,
        alias_maps: vec![],
        commands_from: vec!["alias".into()],
        files_from: vec![],
        delimiter: "+".into(),
        local_domains: vec!["mx.test.example".into()],
        myhostname: "mx.test.example".into(),
        bounce_size_limit: 50_000,
        soft_bounce: false,
        command_timeout: Duration::from_secs(10),
        forward_path: String::new(),
        luser_relay: String::new(),
        default_privs: "nobody".into(),
        owner_request_special: true,
        expand_owner_alias: false,
        myorigin: "mx.test.example".into(),
        as_root,
        allow_root: true,
        cleanup: spool.join("no-cleanup-here"),
        logger: agent::Logger::default(),
    }
}

#[test]
fn as_root_mailboxes_belong_to_the_user_and_commands_never_run_as_root() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !sys::is_root() {
        return; // needs root: covered unprivileged by tests/local.rs
    }
    let _serial = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let nobody = sys::privilege::lookup_user("nobody").unwrap().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A root-owned spool the user cannot write, as /var/mail often is.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let text = format!(
        "pipe: \"|id -u > {0}/uid; id -G >> {0}/uid\"\nboss: root\n",
        scratch.display()
    );
    let table = tables::Table::from_text("texthash:test", "test", &text).unwrap();
    let aliases = tables::Tables::from_tables(vec![table]);
    let s = settings(dir.path(), true);
    let txn = transaction();
    let d = Delivery {
        settings: &s,
        aliases: &aliases,
        alias_uids: &[],
        txn: &txn,
        wire: &Message::inline(b"Subject: hi\r\n\r\n..dot\r\n".to_vec()),
        started: Instant::now(),
        orcpt: None,
        notify: mail::Notify::Default,
    };
    assert_eq!(
        d.recipient("Nobody+x@MX.test.example").unwrap(),
        "delivered to mailbox"
    );
    assert!(sys::is_root(), "back to root after the delivery");
    let mbox = dir.path().join("nobody");
    let meta = std::fs::metadata(&mbox).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (nobody.uid, nobody.gid));
    assert_eq!(meta.mode() & 0o777, 0o600);
    let got = String::from_utf8(std::fs::read(&mbox).unwrap()).unwrap();
    assert!(got.starts_with("From alice@example.com  "), "{got}");
    assert!(
        got.ends_with(
            "\nReturn-Path: <alice@example.com>\nDelivered-To: nobody+x@mx.test.example\n\
             Subject: hi\n\n.dot\n\n"
        ),
        "{got:?}"
    );
    // Root's own mailbox is written as root, as Postfix does.
    for who in ["root@mx.test.example", "boss@mx.test.example"] {
        assert_eq!(d.recipient(who).unwrap(), "delivered to mailbox", "{who}");
    }
    let meta = std::fs::metadata(dir.path().join("root")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));
    let got = std::fs::read_to_string(dir.path().join("root")).unwrap();
    assert_eq!(got.matches("\nDelivered-To: ").count(), 2, "{got}");
    d.recipient("pipe@mx.test.example").unwrap();
    let ids = std::fs::read_to_string(scratch.join("uid")).unwrap();
    assert_eq!(
        ids,
        format!("{}\n{}\n", nobody.uid, nobody.gid),
        "no root groups left"
    );
    assert!(sys::is_root());
    // Without allow_mail_to_root, root's mailbox is refused.
    let mut refuse = settings(dir.path(), true);
    refuse.allow_root = false;
    let d3 = Delivery {
        settings: &refuse,
        ..d
    };
    let err = d3.recipient("root@mx.test.example").unwrap_err();
    assert_eq!(err.status.to_string(), "5.7.1", "{err:?}");
    // A mailbox_command for root runs as default_privs, never as root.
    let mut s2 = settings(dir.path(), true);
    s2.mailbox_command = format!("id -u > {}/cmd-uid", scratch.display());
    let d2 = Delivery { settings: &s2, ..d };
    assert!(d2
        .recipient("root@mx.test.example")
        .unwrap()
        .starts_with("delivered to command: "));
    let uid = std::fs::read_to_string(scratch.join("cmd-uid")).unwrap();
    assert_eq!(uid, format!("{}\n", nobody.uid));
    assert!(sys::is_root());
}

#[test]
fn unprivileged_deliveries_and_unknown_users() {
    let _serial = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let me = sys::privilege::lookup_uid(sys::current_ids().0)
        .unwrap()
        .unwrap();
    let mut s = settings(dir.path(), false);
    s.size_limit = 200;
    let aliases = tables::Tables::none();
    let txn = transaction();
    let d = Delivery {
        settings: &s,
        aliases: &aliases,
        alias_uids: &[],
        txn: &txn,
        wire: &Message::inline(b"Subject: hi\r\n\r\nFrom here\r\n".to_vec()),
        started: Instant::now(),
        orcpt: None,
        notify: mail::Notify::Default,
    };
    let e = d
        .recipient("no-such-user-here@mx.test.example")
        .unwrap_err();
    assert_eq!(e.status.to_string(), "5.1.1");
    let hostile = [
        "",
        "@",
        "@mx.test.example",
        "../../etc/passwd@mx.test.example",
        "a\0b@mx.test.example",
        "a\r\nb@x",
        "+@x",
        "\u{1F600}@x",
    ];
    for bad in hostile {
        assert!(d.recipient(bad).is_err(), "{bad:?}");
    }
    assert_eq!(crate::content::clean("a\r\nX: y"), "a??X: y");
    if sys::is_root() {
        return; // root's own mailbox is refused; covered above
    }
    let addr = format!("{}@mx.test.example", me.name);
    d.recipient(&addr).unwrap();
    let got = std::fs::read_to_string(dir.path().join(&me.name)).unwrap();
    assert!(got.ends_with("\n\n>From here\n\n"), "{got:?}");
    let full = d
        .recipient(&addr)
        .and_then(|_| d.recipient(&addr))
        .unwrap_err();
    assert_eq!(full.status.to_string(), "5.2.2");
}
