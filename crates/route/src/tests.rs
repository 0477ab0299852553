//! Table-driven tests of every resolution rule, hostile addresses included.

use super::*;
use tables::{Table, Tables};

fn maps(src: &str) -> Tables {
    Tables::from_tables(vec![Table::from_text("texthash:test", "test", src).unwrap()])
}

fn regexp(src: &str) -> Tables {
    Tables::from_tables(vec![Table::from_regexp("regexp:test", "test", src).unwrap()])
}

/// A site: host mail.example.com, local domains example.com and localhost,
/// relay for relay.test and its subdomains, a virtual alias domain, and
/// transport and alias tables exercising every lookup form.
fn site() -> Router {
    let mut s = Settings::minimal("mail.example.com");
    s.myorigin = "example.com".into();
    s.mydestination = DomainList::names(
        &[
            "mail.example.com",
            "example.com",
            "localhost",
            "[192.0.2.25]",
        ],
        false,
    );
    s.relay_domains = DomainList::names(&["relay.test"], true);
    s.virtual_alias_domains = DomainList::names(&["virt.test"], false);
    s.recipient_delimiter = "+-".into();
    s.recipient_canonical_maps =
        maps("oldname@example.com newname@example.com\n@old.test @new.test\n");
    s.canonical_maps = maps("newname@example.com final@example.com\n");
    s.virtual_alias_maps = maps(
        "sales@virt.test alice@example.com, bob@example.com\n\
         list@virt.test list@virt.test, carol@remote.test\n\
         team@virt.test sales@virt.test dave@example.com\n\
         loop1@virt.test loop2@virt.test\n\
         loop2@virt.test loop1@virt.test\n\
         ext@virt.test extuser@example.com\n\
         @catch.test @elsewhere.test\n\
         info nobody@example.com\n\
         bad@virt.test \"unterminated\n",
    );
    s.transport_maps = maps(
        "special.test smtp:[10.0.0.1]:2525\n\
         .sub.test relay:\n\
         vip@remote2.test :[vip-gw.test]\n\
         bounce.test error:5.7.1 we do not serve this domain\n\
         lmtp.test lmtp:unix:private/lmtp\n",
    );
    s.local_recipient_maps = Some(maps(
        "alice x\nbob x\ndave x\nfinal x\nextuser x\nnobody x\nmailer-daemon x\npostmaster x\n",
    ));
    Router::new(s)
}

type Want<'a> = (&'a str, &'a str, &'a str, Class, bool);

#[test]
fn resolution_rules() {
    let r = site();
    let cases: &[(&str, &[Want])] = &[
        // Local domains, case folding, unqualified, null address.
        (
            "alice@Example.COM",
            &[(
                "alice@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        (
            "alice",
            &[(
                "alice@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        (
            "<>",
            &[(
                "MAILER-DAEMON@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        (
            "ghost@example.com",
            &[(
                "ghost@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                true,
            )],
        ),
        (
            "alice@[192.0.2.25]",
            &[(
                "alice@[192.0.2.25]",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        // Extensions: known user with any extension.
        (
            "alice+news@example.com",
            &[(
                "alice+news@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        (
            "bob-list@example.com",
            &[(
                "bob-list@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        // Canonical: recipient map then canonical map; @domain rewrite.
        (
            "oldname@example.com",
            &[(
                "final@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        (
            "oldname+x@example.com",
            &[(
                "final+x@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        (
            "joe@old.test",
            &[("joe@new.test", "smtp", "new.test", Class::Default, false)],
        ),
        // Virtual aliases: fan-out, self-reference kept, nesting, extension, catch-all, bare user on local domain.
        (
            "sales@virt.test",
            &[
                (
                    "alice@example.com",
                    "local",
                    "mail.example.com",
                    Class::Local,
                    false,
                ),
                (
                    "bob@example.com",
                    "local",
                    "mail.example.com",
                    Class::Local,
                    false,
                ),
            ],
        ),
        (
            "list@virt.test",
            &[
                (
                    "list@virt.test",
                    "error",
                    "5.1.1 User unknown in virtual alias table",
                    Class::Virtual,
                    true,
                ),
                (
                    "carol@remote.test",
                    "smtp",
                    "remote.test",
                    Class::Default,
                    false,
                ),
            ],
        ),
        (
            "team@virt.test",
            &[
                (
                    "alice@example.com",
                    "local",
                    "mail.example.com",
                    Class::Local,
                    false,
                ),
                (
                    "bob@example.com",
                    "local",
                    "mail.example.com",
                    Class::Local,
                    false,
                ),
                (
                    "dave@example.com",
                    "local",
                    "mail.example.com",
                    Class::Local,
                    false,
                ),
            ],
        ),
        (
            "ext+tag@virt.test",
            &[(
                "extuser+tag@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        (
            "who@catch.test",
            &[(
                "who@elsewhere.test",
                "smtp",
                "elsewhere.test",
                Class::Default,
                false,
            )],
        ),
        (
            "info@example.com",
            &[(
                "nobody@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        (
            "info@remote.test",
            &[(
                "info@remote.test",
                "smtp",
                "remote.test",
                Class::Default,
                false,
            )],
        ),
        (
            "nobody-here@virt.test",
            &[(
                "nobody-here@virt.test",
                "error",
                "5.1.1 User unknown in virtual alias table",
                Class::Virtual,
                true,
            )],
        ),
        // Relay domains and their subdomains.
        (
            "x@relay.test",
            &[("x@relay.test", "relay", "relay.test", Class::Relay, false)],
        ),
        (
            "x@deep.sub.relay.test",
            &[(
                "x@deep.sub.relay.test",
                "relay",
                "deep.sub.relay.test",
                Class::Relay,
                false,
            )],
        ),
        (
            "x@notrelay.test",
            &[(
                "x@notrelay.test",
                "smtp",
                "notrelay.test",
                Class::Default,
                false,
            )],
        ),
        // transport_maps: domain, .parent, user@domain with :nexthop, error:, transport: alone.
        (
            "x@special.test",
            &[(
                "x@special.test",
                "smtp",
                "[10.0.0.1]:2525",
                Class::Default,
                false,
            )],
        ),
        (
            "x@a.sub.test",
            &[("x@a.sub.test", "relay", "a.sub.test", Class::Default, false)],
        ),
        (
            "x@sub.test",
            &[("x@sub.test", "smtp", "sub.test", Class::Default, false)],
        ),
        (
            "vip@remote2.test",
            &[(
                "vip@remote2.test",
                "smtp",
                "[vip-gw.test]",
                Class::Default,
                false,
            )],
        ),
        (
            "vip+x@remote2.test",
            &[(
                "vip+x@remote2.test",
                "smtp",
                "[vip-gw.test]",
                Class::Default,
                false,
            )],
        ),
        (
            "other@remote2.test",
            &[(
                "other@remote2.test",
                "smtp",
                "remote2.test",
                Class::Default,
                false,
            )],
        ),
        (
            "x@bounce.test",
            &[(
                "x@bounce.test",
                "error",
                "5.7.1 we do not serve this domain",
                Class::Default,
                false,
            )],
        ),
        (
            "x@lmtp.test",
            &[(
                "x@lmtp.test",
                "lmtp",
                "unix:private/lmtp",
                Class::Default,
                false,
            )],
        ),
        // Hostile forms: source route, % and ! hacks through local domains only.
        (
            "@a.test,@b.test:alice@example.com",
            &[(
                "alice@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        (
            "joe%remote.test@example.com",
            &[(
                "joe@remote.test",
                "smtp",
                "remote.test",
                Class::Default,
                false,
            )],
        ),
        (
            "joe%remote.test@other.test",
            &[(
                "joe%remote.test@other.test",
                "smtp",
                "other.test",
                Class::Default,
                false,
            )],
        ),
        (
            "remote.test!joe@example.com",
            &[(
                "joe@remote.test",
                "smtp",
                "remote.test",
                Class::Default,
                false,
            )],
        ),
        (
            "a%b%alice@example.com",
            &[("a%b@alice", "smtp", "alice", Class::Default, false)],
        ),
        (
            "\"alice\"@example.com",
            &[(
                "alice@example.com",
                "local",
                "mail.example.com",
                Class::Local,
                false,
            )],
        ),
        (
            "\"john doe\"@remote.test",
            &[(
                "\"john doe\"@remote.test",
                "smtp",
                "remote.test",
                Class::Default,
                false,
            )],
        ),
        ("jöran@exämple.se", &[]),
    ];
    for (input, want) in cases {
        let got = r.resolve(input, false);
        if want.is_empty() {
            assert!(got.is_err(), "{input}: {got:?}");
            continue;
        }
        let got = got.unwrap_or_else(|e| panic!("{input}: {e}"));
        let got: Vec<Want> = got
            .iter()
            .map(|x| {
                (
                    x.address.as_str(),
                    x.transport.as_str(),
                    x.nexthop.as_str(),
                    x.class,
                    x.unknown,
                )
            })
            .collect();
        assert_eq!(&got, want, "{input}");
    }
}

#[test]
fn classify_answers_for_the_address_as_given() {
    let r = site();
    let cases = [
        ("sales@virt.test", Class::Virtual),
        ("alice@example.com", Class::Local),
        ("x@deep.relay.test", Class::Relay),
        ("x@far.test", Class::Default),
        ("joe%far.test@example.com", Class::Default),
        ("oldname@example.com", Class::Local),
        ("joe@old.test", Class::Default),
    ];
    for (a, want) in cases {
        assert_eq!(r.classify(a, false), Ok(want), "{a}");
    }
    assert!(r.classify("a b@x", false).is_err());
    // Resolution follows aliases to other classes; the relay check must not.
    assert_eq!(
        r.resolve("sales@virt.test", false).unwrap()[0].class,
        Class::Local
    );
}

#[test]
fn errors_are_typed_and_classified() {
    let r = site();
    let long = format!("{}@example.com", "a".repeat(400));
    let cases: &[(&str, bool)] = &[
        ("loop1@virt.test", true),
        ("bad@virt.test", true),
        ("@example.com", false),
        ("\"\"@example.com", false),
        ("a\nb@example.com", false),
        ("a\0b@example.com", false),
        (&long, false),
        ("user@bad..domain", false),
        ("%@example.com", false),
        ("x%@example.com", false),
        ("!joe@example.com", false),
    ];
    for (input, temporary) in cases {
        let e = r.resolve(input, false).expect_err(input);
        assert_eq!(e.is_temporary(), *temporary, "{input}: {e}");
    }
    assert!(
        matches!(r.resolve("loop1@virt.test", false), Err(ResolveError::AliasLoop(c)) if c.len() == 3)
    );
}

#[test]
fn utf8_needs_smtputf8() {
    let r = site();
    assert!(matches!(
        r.resolve("jöran@example.com", false),
        Err(ResolveError::Address(AddressError::NeedsSmtputf8))
    ));
    let got = r.resolve("jöran@ÉXAMPLE.se", true).unwrap();
    assert_eq!(got[0].address, "jöran@éxample.se");
    assert_eq!(got[0].nexthop, "éxample.se");
}

#[test]
fn relayhost_and_transport_defaults() {
    let mut s = Settings::minimal("h.test");
    s.relayhost = "[smarthost.test]:587".into();
    s.relay_domains = DomainList::names(&["r.test"], true);
    s.relay_transport = "relay:[relay-gw.test]".into();
    let r = Router::new(s);
    let one = |a: &str| r.resolve(a, false).unwrap().remove(0);
    assert_eq!(one("x@far.test").nexthop, "[smarthost.test]:587");
    assert!(one("x@far.test").literal());
    assert_eq!(one("x@r.test").nexthop, "[relay-gw.test]");
    assert_eq!(one("x@r.test").transport, "relay");
    assert_eq!(one("x@h.test").transport, "local");
    assert!(
        !one("x@h.test").unknown,
        "no local_recipient_maps: every user exists"
    );
}

#[test]
fn limits_on_expansion_and_recursion() {
    let mut s = Settings::minimal("h.test");
    let chain: String = (0..20)
        .map(|i| format!("a{i}@v.test a{}@v.test\n", i + 1))
        .collect();
    s.virtual_alias_maps = maps(&chain);
    s.recursion_limit = 10;
    let r = Router::new(s);
    assert!(matches!(
        r.resolve("a0@v.test", false),
        Err(ResolveError::RecursionLimit(_))
    ));
    assert_eq!(
        r.resolve("a15@v.test", false).unwrap()[0].address,
        "a20@v.test"
    );

    let mut s = Settings::minimal("h.test");
    let fan: Vec<String> = (0..30).map(|i| format!("u{i}@x.test")).collect();
    s.virtual_alias_maps = maps(&format!("big@v.test {}\n", fan.join(", ")));
    s.expansion_limit = 10;
    let r = Router::new(s);
    assert!(matches!(
        r.resolve("big@v.test", false),
        Err(ResolveError::ExpansionLimit(_))
    ));
}

#[test]
fn duplicate_results_are_merged_and_regexp_maps_work() {
    let mut s = Settings::minimal("h.test");
    s.virtual_alias_maps =
        regexp("/^dup@/ x@r.test, X@R.test, y@r.test\n/^(.*)@old\\.test$/ $1@new.test\n");
    let r = Router::new(s);
    let got: Vec<String> = r
        .resolve("dup@a.test", false)
        .unwrap()
        .into_iter()
        .map(|x| x.address)
        .collect();
    assert_eq!(got, ["x@r.test", "y@r.test"]);
    assert_eq!(
        r.resolve("joe@old.test", false).unwrap()[0].address,
        "joe@new.test"
    );
}

#[test]
fn settings_load_from_main_cf() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("transport"), "slow.test slow:\n").unwrap();
    std::fs::write(d.join("virtual"), "a@v.test b@example.net\n").unwrap();
    let main = format!(
        "myhostname = mx.example.net\nmydomain = example.net\nmydestination = $myhostname, $mydomain\n\
         relay_domains = inline:{{ r.test = ok }}\ntransport_maps = hash:{}/transport\n\
         virtual_alias_maps = texthash:{}/virtual\nlocal_recipient_maps =\nrecipient_delimiter = +\n",
        d.display(),
        d.display()
    );
    std::fs::write(d.join("main.cf"), main).unwrap();
    let cfg = config::Config::load(d, &[]).unwrap().config;
    let (s, warnings) = Settings::load(&cfg).unwrap();
    assert!(warnings.is_empty());
    let r = Router::new(s);
    let one = |a: &str| r.resolve(a, false).unwrap().remove(0);
    assert_eq!(one("x@slow.test").transport, "slow");
    assert_eq!(one("x@sub.r.test").transport, "relay");
    assert_eq!(one("a@v.test").address, "b@example.net");
    assert_eq!(one("a@v.test").transport, "local");
    assert_eq!(one("x").address, "x@mx.example.net");

    std::fs::write(d.join("transport"), "good x:\nbad-line\n").unwrap();
    let e = Settings::load(&cfg).unwrap_err().to_string();
    assert!(e.contains("transport_maps") && e.contains("line 2"), "{e}");
}

#[test]
fn the_error_transport_status_is_parsed_when_its_table_is_read() {
    let r = site();
    let one = |a: &str| r.resolve(a, false).unwrap().remove(0);
    let status = |code, text| Some(mail::Status::new(code, text));
    assert_eq!(
        one("x@bounce.test").error,
        status(
            mail::StatusCode::NOT_AUTHORIZED,
            "we do not serve this domain"
        )
    );
    assert_eq!(
        r.resolve_queued("team@virt.test", false).unwrap().error,
        status(
            mail::StatusCode::USER_UNKNOWN,
            "User unknown in virtual alias table"
        )
    );
    assert_eq!(one("x@special.test").error, None);

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let load = |main: &str, transport: &str| {
        std::fs::write(d.join("transport"), transport).unwrap();
        let main = format!("transport_maps = hash:{}/transport\n{main}", d.display());
        std::fs::write(d.join("main.cf"), main).unwrap();
        let cfg = config::Config::load(d, &[]).unwrap().config;
        Settings::load(&cfg).map(|(s, _)| Router::new(s))
    };
    // Text without a code: error(8)'s 5.0.0.
    let r = load(
        "",
        "a.test error:no such domain here\nb.test error:4.4.7 later\n",
    )
    .unwrap();
    let s = r
        .resolve("x@a.test", false)
        .unwrap()
        .remove(0)
        .error
        .unwrap();
    assert_eq!(s.to_string(), "5.0.0 no such domain here");
    let s = r
        .resolve("x@b.test", false)
        .unwrap()
        .remove(0)
        .error
        .unwrap();
    assert_eq!(s.to_string(), "4.4.7 later");
    // A bad code is refused at start, with the table's file and line,
    // not bounced with the code as text when mail meets it.
    for (entry, why) in [
        (
            "error:5.1 short",
            "enhanced status code must be class.subject.detail",
        ),
        ("error:9.1.1 odd", "class must be 2, 4 or 5"),
        ("error:2.0.0 fine", "must be 4.x.x or 5.x.x"),
    ] {
        let e = load("", &format!("ok.test smtp:\nbad.test {entry}\n"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("transport_maps") && e.contains("line 2") && e.contains(why),
            "{e}"
        );
    }
    // A parameter: its main.cf line.
    let e = load(
        "mydomain = x.test\ndefault_transport = error:5.7 closed\n",
        "",
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("main.cf, line 3: default_transport: error transport:"),
        "{e}"
    );
    let r = load("default_transport = error:5.7.1 closed\n", "").unwrap();
    let s = r
        .resolve("x@far.test", false)
        .unwrap()
        .remove(0)
        .error
        .unwrap();
    assert_eq!(s.to_string(), "5.7.1 closed");
}

proptest::proptest! {
    #[test]
    fn any_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400), utf8 in proptest::bool::ANY) {
        let r = site();
        let text = String::from_utf8_lossy(&bytes);
        match r.resolve(&text, utf8) {
            Ok(routes) => proptest::prop_assert!(!routes.is_empty()),
            Err(e) => proptest::prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn address_shaped_input_never_panics(local in "[a-zA-Z0-9%!+\"@.\\\\ -]{0,30}", domain in "[a-zA-Z0-9.\\[\\]:-]{0,30}") {
        let r = site();
        let _ = r.resolve(&format!("{local}@{domain}"), false);
    }
}

#[test]
fn default_local_recipients_are_passwd_and_aliases() {
    if !std::path::Path::new("/etc/aliases").exists() {
        eprintln!("skipped: no /etc/aliases");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("main.cf"), "myhostname = h.example.test\n").unwrap();
    let cfg = config::Config::load(dir.path(), &[]).unwrap().config;
    let r = Router::new(Settings::load(&cfg).unwrap().0);
    let unknown = |a: &str| r.resolve(a, false).unwrap()[0].unknown;
    assert!(
        !unknown("root@h.example.test"),
        "root is in the password file"
    );
    assert!(!unknown("Root"), "found whatever the case");
    assert!(unknown("no-such-user-here@h.example.test"));
    let aliases = std::fs::read_to_string("/etc/aliases").unwrap();
    if let Some(name) = aliases.lines().find_map(|l| {
        l.split_once(':')
            .map(|(k, _)| k.trim())
            .filter(|k| !k.starts_with('#') && !k.is_empty())
    }) {
        assert!(
            !unknown(&format!("{name}@h.example.test")),
            "{name} is in /etc/aliases"
        );
    }
}

/// `cargo test --release -p route -- --ignored --nocapture bench`: the
/// resolution core alone, without IPC.
#[test]
#[ignore]
fn bench_in_process() {
    let r = site();
    let addrs = [
        "alice+x@example.com",
        "sales@virt.test",
        "x@a.sub.test",
        "joe@far.test",
        "vip@remote2.test",
    ];
    let n = 1_000_000;
    let t0 = std::time::Instant::now();
    let mut routes = 0;
    for i in 0..n {
        routes += r
            .resolve(addrs[i % addrs.len()], false)
            .map_or(0, |v| v.len());
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "BENCH route core: {n} resolutions ({routes} routes) in {secs:.2} s = {:.0}/s",
        n as f64 / secs
    );
}

#[test]
fn cleanup_rewrites_recipients_through_canonical_and_virtual_maps() {
    let r = site();
    let rw = |a: &str| r.rewrite_recipient(a, false);
    let some = |v: &[&str]| Ok(Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
    // No table matches: the recipient stays as given.
    assert_eq!(rw("alice@example.com"), Ok(None));
    assert_eq!(rw("someone@remote.test"), Ok(None));
    // One to one, canonical then canonical again (one lookup per map).
    assert_eq!(rw("oldname@example.com"), some(&["final@example.com"]));
    assert_eq!(rw("joe@old.test"), some(&["joe@new.test"]));
    // One to many, nested, in table order, duplicates dropped.
    assert_eq!(
        rw("team@virt.test"),
        some(&["alice@example.com", "bob@example.com", "dave@example.com"])
    );
    // The address listed in its own expansion is kept, and only once.
    assert_eq!(
        rw("list@virt.test"),
        some(&["list@virt.test", "carol@remote.test"])
    );
    assert_eq!(rw("x@catch.test"), some(&["x@elsewhere.test"]));
    // Loops and broken results are temporary errors; bad syntax is permanent.
    let e = rw("loop1@virt.test").unwrap_err();
    assert!(
        matches!(e, ResolveError::AliasLoop(_)) && e.is_temporary(),
        "{e}"
    );
    let e = rw("bad@virt.test").unwrap_err();
    assert!(e.is_temporary(), "{e}");
    let e = rw("a b@example.com").unwrap_err();
    assert!(!e.is_temporary(), "{e}");
}

#[test]
fn cleanup_rewrites_the_sender_through_sender_canonical_then_canonical_maps() {
    let mut s = Settings::minimal("mail.example.com");
    s.myorigin = "example.com".into();
    s.sender_canonical_maps = maps("joe@example.com joseph@example.com\n@old.test @new.test\n");
    s.canonical_maps = maps("joseph@example.com j.smith@example.com\n");
    s.recipient_canonical_maps = maps("ann@example.com recipient-only@example.com\n");
    let r = Router::new(s);
    let rw = |a: &str| r.rewrite_sender(a, false);
    assert_eq!(
        rw("joe@example.com"),
        Ok(Some("j.smith@example.com".into()))
    );
    assert_eq!(rw("joe"), Ok(Some("j.smith@example.com".into())));
    assert_eq!(rw("kim@old.test"), Ok(Some("kim@new.test".into())));
    assert_eq!(rw("ann@example.com"), Ok(None));
    assert_eq!(rw(""), Ok(None));
    assert_eq!(rw("other@example.net"), Ok(None));
}

#[test]
fn rewriting_is_settled_after_one_pass() {
    // An address cleanup produced must not expand again, should it come
    // through cleanup once more (forwarding, a content filter's reinjection),
    // except one that lists itself.
    let r = site();
    for a in ["team@virt.test", "oldname@example.com", "x@catch.test"] {
        for out in r.rewrite_recipient(a, false).unwrap().unwrap() {
            assert_eq!(r.rewrite_recipient(&out, false), Ok(None), "{a} -> {out}");
        }
    }
}

#[test]
fn a_queued_recipient_is_resolved_without_mapping_again() {
    // qmgr's view: cleanup made oldname@ into final@ (recipient canonical,
    // then canonical); resolving the queued address must not map it again.
    let r = site();
    let q = r.resolve_queued("newname@example.com", false).unwrap();
    assert_eq!(q.address, "newname@example.com");
    let mapped = r.resolve("newname@example.com", false).unwrap();
    assert_eq!(mapped[0].address, "final@example.com", "Resolve still maps");
    // An alias of a virtual alias domain that cleanup did not expand is no
    // such user, as Postfix's trivial-rewrite answers qmgr.
    let t = r.resolve_queued("team@virt.test", false).unwrap();
    assert!(t.unknown && t.transport == "error", "{t:?}");
}

#[test]
fn a_missing_alias_file_defers_local_recipients_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("users"), "known x\n").unwrap();
    let main = format!(
        "myhostname = mx.example.net\nmydestination = $myhostname\nrelayhost = [192.0.2.1]\n\
         alias_maps = hash:{0}/aliases\nlocal_recipient_maps = hash:{0}/users $alias_maps\n",
        d.display()
    );
    std::fs::write(d.join("main.cf"), main).unwrap();
    let cfg = config::Config::load(d, &[]).unwrap().config;
    // Before: the router exited, and took remote mail with it.
    let (s, warnings) = Settings::load(&cfg).unwrap();
    assert!(
        warnings.len() == 1 && warnings[0].contains("aliases") && warnings[0].contains("deferred"),
        "{warnings:?}"
    );
    let r = Router::new(s);
    assert_eq!(
        r.resolve("far@remote.test", false).unwrap()[0].nexthop,
        "[192.0.2.1]"
    );
    // Listed in a table that could be read: known, whatever the other holds.
    assert!(!r.resolve("known@mx.example.net", false).unwrap()[0].unknown);
    for e in [
        r.resolve("postmaster@mx.example.net", false).unwrap_err(),
        r.resolve_queued("postmaster@mx.example.net", false)
            .unwrap_err(),
    ] {
        assert!(e.is_temporary());
        assert!(
            e.to_string().contains("local_recipient_maps") && e.to_string().contains("aliases"),
            "{e}"
        );
    }
    std::fs::write(d.join("aliases"), "postmaster: root\n").unwrap();
    let r = Router::new(Settings::load(&cfg).unwrap().0);
    assert!(!r.resolve("postmaster@mx.example.net", false).unwrap()[0].unknown);
    assert!(r.resolve("nobody@mx.example.net", false).unwrap()[0].unknown);
}

#[test]
fn a_missing_map_file_defers_the_lookups_that_reach_it_and_a_reload_heals_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (param, file) in [
        ("virtual_alias_maps", "virtual"),
        ("transport_maps", "transport"),
        ("canonical_maps", "canonical"),
        ("recipient_canonical_maps", "rcanonical"),
        ("sender_canonical_maps", "scanonical"),
    ] {
        let main = format!(
            "myhostname = mx.example.net\nmydestination = $myhostname\nrelayhost = [192.0.2.1]\n\
             local_recipient_maps =\n{param} = hash:{}/{file}\n",
            d.display()
        );
        std::fs::write(d.join("main.cf"), main).unwrap();
        let _ = std::fs::remove_file(d.join(file));
        let cfg = config::Config::load(d, &[]).unwrap().config;
        // Before: Settings::load failed and the router exited at start.
        let (s, warnings) = Settings::load(&cfg).unwrap();
        assert!(
            warnings.len() == 1
                && warnings[0].contains(&format!("main.cf, line 5: {param}: "))
                && warnings[0].contains(file)
                && warnings[0].contains("deferred"),
            "{param}: {warnings:?}"
        );
        let r = Router::new(s);
        if param == "sender_canonical_maps" {
            let e = r.rewrite_sender("a@remote.test", false).unwrap_err();
            assert!(e.is_temporary() && e.to_string().contains(param), "{e}");
            assert!(r.resolve("far@remote.test", false).is_ok());
        } else {
            let e = r.resolve("far@remote.test", false).unwrap_err();
            assert!(e.is_temporary(), "{e}");
            assert!(
                e.to_string().contains(&format!("{param} lookup error")),
                "{e}"
            );
            // canonical_maps serves senders too.
            let sender = r.rewrite_sender("a@remote.test", false);
            assert_eq!(sender.is_ok(), param != "canonical_maps", "{sender:?}");
        }
        if param == "transport_maps" {
            // Queued mail is routed again: it waits too.
            assert!(r.resolve_queued("far@remote.test", false).is_err());
        }
        std::fs::write(d.join(file), "other@remote.test x@remote.test\n").unwrap();
        let r = Router::new(Settings::load(&cfg).unwrap().0);
        assert_eq!(
            r.resolve("far@remote.test", false).unwrap()[0].nexthop,
            "[192.0.2.1]"
        );
    }
}
