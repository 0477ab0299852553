//! The `sluice` command's configuration tools against files on disk:
//! `config` (print, -n, -d, edit in place) and `check`.

use sluice_suite::Instance;

fn text(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn config_prints_effective_nondefault_and_default_values() {
    let inst = Instance::new(
        "anvil unix - - n - 1 anvil\n",
        "myhostname = mx.example.org\nmydomain = example.org\n",
    );
    let (all, _) = text(&inst.sluice(&["config"]));
    assert!(
        all.lines().any(|l| l == "myhostname = mx.example.org"),
        "{all}"
    );
    // $myhostname in myorigin's default is expanded in the effective view.
    assert!(
        all.lines().any(|l| l == "myorigin = mx.example.org"),
        "{all}"
    );
    assert!(
        all.lines()
            .any(|l| l == "initial_destination_concurrency = 5"),
        "{all}"
    );
    let (n, _) = text(&inst.sluice(&["config", "-n"]));
    assert!(n.lines().any(|l| l == "mydomain = example.org"));
    assert!(
        !n.contains("initial_destination_concurrency"),
        "-n shows only main.cf settings:\n{n}"
    );
    let (d, _) = text(&inst.sluice(&[
        "config",
        "-d",
        "maximal_queue_lifetime",
        "message_size_limit",
    ]));
    assert_eq!(
        d,
        "maximal_queue_lifetime = 5d\nmessage_size_limit = 10240000\n"
    );
    let out = inst.sluice(&["config", "no_such_parameter"]);
    assert!(!out.status.success());
}

#[test]
fn config_edits_main_cf_in_place_keeping_comments_and_order() {
    let inst = Instance::new(
        "relay unix - - n - - anvil\n",
        "# keep me\nrelay_destination_concurrency_limit = 2\n  # and me\n",
    );
    let before = std::fs::read_to_string(inst.etc().join("main.cf")).unwrap();
    let out = inst.sluice(&[
        "config",
        "relay_destination_concurrency_limit=7",
        "smtpd_timeout=60s",
    ]);
    assert!(out.status.success(), "{}", text(&out).1);
    let after = std::fs::read_to_string(inst.etc().join("main.cf")).unwrap();
    assert!(
        after.contains("# keep me\nrelay_destination_concurrency_limit = 7\n"),
        "{after}"
    );
    assert!(after.ends_with("smtpd_timeout = 60s\n"), "{after}");
    assert_eq!(before.lines().count() + 1, after.lines().count());
    let (v, _) = text(&inst.sluice(&["config", "relay_destination_concurrency_limit"]));
    assert_eq!(v, "relay_destination_concurrency_limit = 7\n");
    // A bad value is refused, naming the parameter, and the file is untouched.
    let out = inst.sluice(&["config", "message_size_limit=ten"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).1.contains("message_size_limit"),
        "{}",
        text(&out).1
    );
    assert_eq!(
        std::fs::read_to_string(inst.etc().join("main.cf")).unwrap(),
        after
    );
}

#[test]
fn check_reports_every_problem_with_file_line_and_parameter() {
    let inst = Instance::new(
        "anvil unix - - n - 1 anvil\nghost unix - - n - 1 no-such-daemon\n",
        "message_size_limit = 10M0\n",
    );
    let out = inst.sluice(&["check"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let main_cf = inst.etc().join("main.cf").display().to_string();
    assert!(
        err.lines().any(|l| l.contains(&main_cf)
            && l.contains("line 7")
            && l.contains("message_size_limit")),
        "{err}"
    );
    // Fix main.cf: the master.cf problem is still reported on its own.
    std::fs::write(
        inst.etc().join("main.cf"),
        std::fs::read_to_string(inst.etc().join("main.cf"))
            .unwrap()
            .replace("10M0", "10240000"),
    )
    .unwrap();
    let out = inst.sluice(&["check"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("line 2") && err.contains("no-such-daemon"),
        "{err}"
    );
    assert!(!err.contains("message_size_limit"), "{err}");
}

/// One run of sluice check reports every mistake of main.cf and master.cf,
/// each with the file's full path, its line and the parameter or service:
/// two bad values and a bad restriction list in main.cf, two bad master.cf
/// lines, a missing daemon and a bad -o on the lines that are right.
/// Before: a master.cf that did not parse stopped at its first bad line
/// and hid every service check; a bad main.cf value hid the restriction,
/// table and service checks; master.cf's messages said only "master.cf".
#[test]
fn check_reports_every_mistake_of_main_cf_and_master_cf_in_one_run() {
    let inst = Instance::new(
        "anvil unix - - n - 1 anvil\n\
         bad unix - - x - 1 anvil\n\
         short unix -\n\
         ghost unix - - n - 1 no-such-daemon\n\
         cleanup unix - - n - 0 cleanup -o message_size_limit=zz\n",
        "message_size_limit = 10M0\nsmtpd_recipient_limit = abc\n\
         smtpd_helo_restrictions = reject_nosuch\n",
    );
    let out = inst.sluice(&["check"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let main_cf = inst.etc().join("main.cf").display().to_string();
    let master_cf = inst.etc().join("master.cf").display().to_string();
    for (file, want) in [
        (&main_cf, ["line 7", "\"message_size_limit\"", "10M0"]),
        (&main_cf, ["line 8", "\"smtpd_recipient_limit\"", "abc"]),
        (
            &main_cf,
            ["line 9", "\"smtpd_helo_restrictions\"", "reject_nosuch"],
        ),
        (&master_cf, ["line 2", "chroot", "\"x\""]),
        (&master_cf, ["line 3", "3 fields", "at least 8"]),
        (&master_cf, ["line 4", "service ghost", "no-such-daemon"]),
        (
            &master_cf,
            ["line 5", "service cleanup", "message_size_limit=zz"],
        ),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("error: {file}, "))
                    && want.iter().all(|w| l.contains(w))),
            "{want:?} in {file}: {err}"
        );
    }
    assert!(!err.contains("error: master.cf"), "{err}");
}

/// A luser_relay name local(8) does not expand (a typo for $user) is a
/// warning naming the line: it would expand to nothing, as in Postfix.
#[test]
fn check_warns_about_an_unknown_luser_relay_name() {
    let inst = Instance::new(
        "anvil unix - - n - 1 anvil\n",
        "luser_relay = ${usr}${extension?+$extension}@relay.example\n",
    );
    let out = inst.sluice(&["check"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("luser_relay")).collect();
    assert!(
        warnings.len() == 1 && warnings[0].contains("line 7") && warnings[0].contains("\"$usr\""),
        "{err}"
    );
}

#[test]
fn check_refuses_bad_address_verification_parameters_with_their_lines() {
    let inst = Instance::new(
        "anvil unix - - n - 1 anvil\n",
        "unverified_recipient_reject_code = 250\naddress_verify_map = btree:/var/lib/postfix/verify_cache\n",
    );
    let out = inst.sluice(&["check"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let main_cf = inst.etc().join("main.cf").display().to_string();
    assert!(
        err.lines().any(|l| l.contains(&main_cf)
            && l.contains("line 7")
            && l.contains("\"unverified_recipient_reject_code\": 250 is not an SMTP reply code from 400 to 599")),
        "{err}"
    );
    assert!(
        err.lines()
            .any(|l| l.contains("line 8") && l.contains("a file name, not a btree: table")),
        "{err}"
    );
}

#[test]
fn check_passes_a_sound_configuration_and_start_refuses_a_bad_one() {
    let mut inst = Instance::new("anvil unix - - n - 1 anvil\n", "unknown_thing = 1\n");
    let out = inst.sluice(&["check"]);
    let (stdout, err) = text(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("unknown_thing"),
        "unknown parameters are warned about: {err}"
    );
    assert!(stdout.contains("no errors"));
    inst.start();
    inst.stop();
    let main = inst.etc().join("main.cf");
    std::fs::write(
        &main,
        std::fs::read_to_string(&main).unwrap() + "default_process_limit = many\n",
    )
    .unwrap();
    let out = inst.sluice(&["start"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).1.contains("default_process_limit"),
        "{}",
        text(&out).1
    );
}

#[test]
fn check_finds_unsafe_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let mut inst = Instance::new("anvil unix - - n - 1 anvil\n", "");
    inst.start();
    inst.stop();
    let private = inst.root().join("spool/private");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o777)).unwrap();
    let main = inst.etc().join("main.cf");
    std::fs::set_permissions(&main, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = inst.sluice(&["check"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains(&format!("{}: world-writable", private.display())),
        "{err}"
    );
    assert!(err.contains("writable by group or others"), "{err}");
}

#[test]
fn newaliases_names_file_and_line_of_each_problem() {
    let inst = Instance::new("", "");
    let aliases = inst.root().join("aliases");
    std::fs::write(
        &aliases,
        "postmaster: root\nteam: alice,\n  bob\nno colon here\nlist: :include:/nonexistent/list\n",
    )
    .unwrap();
    let out = inst.sluice(&["config", &format!("alias_maps=hash:{}", aliases.display())]);
    assert!(out.status.success(), "{out:?}");
    let out = inst.sluice(&["newaliases"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let file = aliases.display().to_string();
    assert!(
        stderr.contains(&format!("{file}, line 4: need name:value pair")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{file}, line 5: list: /nonexistent/list:")),
        "{stderr}"
    );
    // Fixed, the file checks clean and says what it holds.
    std::fs::write(&aliases, "postmaster: root\nteam: alice,\n  bob\n").unwrap();
    let out = inst.sluice(&["newaliases"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains(&format!("{file}: 2 aliases")), "{stdout}");
}

#[test]
fn check_finds_restrictions_and_tables_that_would_stop_a_daemon() {
    let tables = tempfile::tempdir().unwrap();
    let transport = tables.path().join("transport");
    std::fs::write(&transport, "example.com smtp:[192.0.2.1]\nbroken.example\n").unwrap();
    let missing = tables.path().join("no-such-access");
    let inst = Instance::new(
        "anvil unix - - n - 1 anvil\n\
         submission inet n - n - - smtpd -o smtpd_client_restrictions=permit_sasl_wizardry\n\
         smtp unix - - n - - smtp -o smtp_tls_security_level=verify -o smtp_tls_CAfile=/nonexistent/ca.pem\n",
        "",
    );
    // main.cf's fixed lines end at 7; `config` appends these from line 8.
    let set = inst.sluice(&[
        "config",
        "smtpd_recipient_restrictions=permit_mynetworks, reject_bogus_thing",
        &format!("transport_maps=texthash:{}", transport.display()),
        &format!(
            "smtpd_sender_restrictions=check_sender_access texthash:{}",
            missing.display()
        ),
        "smtpd_tls_security_level=may",
        "smtpd_tls_cert_file=/nonexistent/cert.pem",
    ]);
    assert!(set.status.success(), "{set:?}");
    let out = inst.sluice(&["check"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let main_cf = inst.etc().join("main.cf").display().to_string();
    let line_with = |needles: &[&str]| err.lines().any(|l| needles.iter().all(|n| l.contains(n)));
    assert!(
        line_with(&[
            &main_cf,
            "line 8",
            "smtpd_recipient_restrictions",
            "reject_bogus_thing"
        ]),
        "{err}"
    );
    assert!(
        line_with(&[
            &main_cf,
            "line 9",
            "transport_maps",
            &format!("{}, line 2", transport.display())
        ]),
        "{err}"
    );
    assert!(
        line_with(&[
            &main_cf,
            "line 10",
            "smtpd_sender_restrictions",
            &missing.display().to_string()
        ]),
        "{err}"
    );
    assert!(
        line_with(&[
            "master.cf, line 2",
            "service submission",
            "smtpd_client_restrictions",
            "permit_sasl_wizardry"
        ]),
        "{err}"
    );
    assert!(
        line_with(&[
            "master.cf, line 2",
            "service submission",
            "smtpd_tls_cert_file",
            "/nonexistent/cert.pem"
        ]),
        "{err}"
    );
    assert!(
        line_with(&[
            "master.cf, line 3",
            "service smtp",
            "smtp_tls_CAfile",
            "/nonexistent/ca.pem"
        ]),
        "{err}"
    );
}

#[test]
fn check_refuses_an_error_transport_code_that_is_none() {
    let tables = tempfile::tempdir().unwrap();
    let transport = tables.path().join("transport");
    std::fs::write(
        &transport,
        "ok.example smtp:\ngone.example error:9.9.9 moved\n",
    )
    .unwrap();
    let inst = Instance::new("anvil unix - - n - 1 anvil\n", "");
    // main.cf's fixed lines end at 7; `config` appends these as 8 and 9.
    let set = inst.sluice(&[
        "config",
        &format!("transport_maps=texthash:{}", transport.display()),
        "default_transport=error:5.1 closed",
    ]);
    assert!(set.status.success(), "{set:?}");
    let out = inst.sluice(&["check"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let main_cf = inst.etc().join("main.cf").display().to_string();
    let line_with = |needles: &[&str]| err.lines().any(|l| needles.iter().all(|n| l.contains(n)));
    assert!(
        line_with(&[
            &main_cf,
            "line 8",
            "transport_maps",
            &format!("{}, line 2", transport.display()),
            "class must be 2, 4 or 5"
        ]),
        "{err}"
    );
    assert!(
        line_with(&[
            &main_cf,
            "line 9",
            "default_transport",
            "enhanced status code must be class.subject.detail"
        ]),
        "{err}"
    );
}

#[test]
fn check_reads_the_policy_file_and_the_source_pool_it_names() {
    let inst = Instance::new(
        "anvil unix - - n - 1 anvil\n\
         bulk unix - - n - - anvil -o smtp_source_pool=pool9\n",
        "",
    );
    let policy = inst.etc().join("policy.yaml");
    // A misspelt property on line 6, column 32.
    std::fs::write(
        &policy,
        "sources:\n  - id: pool1\n    localip: [127.0.0.2]\npolicies:\n  - fields: [localip]\n    default: { concurrency: 2, rat: 10/1 }\n",
    )
    .unwrap();
    // main.cf's fixed lines end at 7; `config` appends these as 8 and 9.
    let set = inst.sluice(&[
        "config",
        "policy_file=policy.yaml",
        "smtp_source_pool=pool2",
    ]);
    assert!(set.status.success(), "{set:?}");
    let out = inst.sluice(&["check"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.lines().any(|l| l
            == format!(
                "sluice: error: {}:6:32: unknown field `rat`, expected one of concurrency, rate, connectinterval, transactions, idletimeout, cluster",
                policy.display()
            )),
        "{err}"
    );

    // Read, the file is checked for the pools main.cf and master.cf name.
    std::fs::write(
        &policy,
        std::fs::read_to_string(&policy)
            .unwrap()
            .replace("rat:", "rate:"),
    )
    .unwrap();
    let out = inst.sluice(&["check"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let main_cf = inst.etc().join("main.cf").display().to_string();
    let line_with = |needles: &[&str]| err.lines().any(|l| needles.iter().all(|n| l.contains(n)));
    assert!(
        line_with(&[
            &main_cf,
            "line 9",
            "smtp_source_pool pool2",
            "has no such id"
        ]),
        "{err}"
    );
    assert!(
        line_with(&[
            "master.cf, line 2",
            "service bulk",
            "smtp_source_pool pool9"
        ]),
        "{err}"
    );
    assert!(!err.contains("policy.yaml:"), "the file reads: {err}");

    let set = inst.sluice(&["config", "smtp_source_pool=pool1"]);
    assert!(set.status.success(), "{set:?}");
    std::fs::write(inst.etc().join("master.cf"), "anvil unix - - n - 1 anvil\n").unwrap();
    let out = inst.sluice(&["check"]);
    let (stdout, err) = text(&out);
    assert!(out.status.success(), "{err}");
    assert!(stdout.contains("no errors"), "{stdout}");

    // A file that is not there is named with the reason.
    std::fs::remove_file(&policy).unwrap();
    let out = inst.sluice(&["check"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains(&format!("{}: No such file or directory", policy.display())),
        "{err}"
    );
}
