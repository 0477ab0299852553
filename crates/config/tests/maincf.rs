//! main.cf loading through the public API: syntax, expansion, overrides,
//! warnings and refusals, with valid and hostile inputs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use config::{
    render, render_one, Config, ConfigError, ExpandProblem, Feedback, Loaded, RenderMode,
    SyntaxProblem, ValueProblem,
};

const MAIN_CF: &str = "/etc/sluice/main.cf";

fn parse(text: &str) -> Result<Loaded, ConfigError> {
    parse_with(text, &[])
}

fn parse_with(text: &str, services: &[&str]) -> Result<Loaded, ConfigError> {
    let services: Vec<String> = services.iter().map(|s| s.to_string()).collect();
    Config::with_hostname("mail.example.com").with_text(text, Path::new(MAIN_CF), &services)
}

fn ok(text: &str) -> Config {
    match parse(text) {
        Ok(l) => l.config,
        Err(e) => panic!("{text:?}: {e}"),
    }
}

#[test]
fn valid_inputs() {
    for (text, name, want) in [
        ("", "myorigin", "mail.example.com"),
        ("# only\n   # comments\n\n", "mydomain", "example.com"),
        ("myorigin = example.org", "myorigin", "example.org"),
        ("myorigin=example.org", "myorigin", "example.org"),
        ("  \nmyorigin   =   a b  \t\n", "myorigin", "a b"),
        (
            "a = 1\n  \n\tmyorigin = x\n",
            "myorigin",
            "mail.example.com",
        ),
        ("myorigin = a\nmyorigin = b\n", "myorigin", "b"),
        (
            "mydestination = a,\n  b,\n# c\n\tc\n",
            "mydestination",
            "a, b, c",
        ),
        (
            "mydomain = x.org\nmyorigin = $mydomain",
            "myorigin",
            "x.org",
        ),
        (
            "myorigin = ${mydomain}!$(mail_name)",
            "myorigin",
            "example.com!Sluice",
        ),
        ("myorigin = $$mydomain", "myorigin", "$mydomain"),
        (
            "relayhost = [mx.example.net]:587",
            "relayhost",
            "[mx.example.net]:587",
        ),
        ("myhostname = host.a.b.c", "mydomain", "a.b.c"),
        ("myhostname = host.tld", "mydomain", "localdomain"),
        ("mydomain = d.org\n", "mydomain", "d.org"),
        ("x = y\nmyorigin = ${x?set}", "myorigin", "set"),
        ("x =\nmyorigin = ${x:unset}", "myorigin", "unset"),
        ("a = 1\nb = 2\nmyorigin = ${a?${b}}", "myorigin", "2"),
        ("myorigin = # not a comment", "myorigin", "# not a comment"),
        ("myorigin = a\r\n", "myorigin", "a"),
        ("\u{feff}myorigin = bom", "myorigin", "bom"),
        (
            "smtpd_banner = $myhostname ESMTP",
            "smtpd_banner",
            "mail.example.com ESMTP",
        ),
        (
            "mail_name = Pipe",
            "smtpd_banner",
            "mail.example.com ESMTP Pipe",
        ),
        (
            "forward_path = $home/.forward",
            "forward_path",
            "$home/.forward",
        ),
        ("myorigin = héllo wörld", "myorigin", "héllo wörld"),
    ] {
        assert_eq!(ok(text).str(name), want, "{text:?}");
    }
}

#[test]
fn defaults_follow_postfix() {
    let c = Config::with_hostname("mail.example.com");
    assert_eq!(c.int("initial_destination_concurrency"), 5);
    assert_eq!(c.int("default_destination_concurrency_limit"), 20);
    assert_eq!(c.time("minimal_backoff_time"), Duration::from_secs(300));
    assert_eq!(c.time("maximal_backoff_time"), Duration::from_secs(4000));
    assert_eq!(
        c.time("maximal_queue_lifetime"),
        Duration::from_secs(5 * 86400)
    );
    assert_eq!(c.time("delay_warning_time"), Duration::ZERO);
    assert_eq!(c.size("message_size_limit"), 10_240_000);
    assert_eq!(c.size("mailbox_size_limit"), 51_200_000);
    assert_eq!(
        c.str("mydestination"),
        "mail.example.com, localhost.example.com, localhost"
    );
    assert_eq!(
        c.list("mydestination"),
        ["mail.example.com", "localhost.example.com", "localhost"]
    );
    assert_eq!(c.str("local_transport"), "local:mail.example.com");
    assert_eq!(c.str("smtpd_banner"), "mail.example.com ESMTP Sluice");
    assert_eq!(c.maps("alias_maps")[0].to_string(), "hash:/etc/aliases");
    assert_eq!(c.choice("smtpd_forbid_bare_newline"), "reject");
    assert_eq!(c.choice("inet_protocols"), "all");
    assert!(!c.bool("always_add_missing_headers"));
    assert_eq!(c.ints("sender_class_thresholds"), [10, 1000]);
    assert_eq!(
        c.feedback("default_destination_concurrency_positive_feedback"),
        Feedback::InverseConcurrency
    );
    let nets: Vec<String> = c
        .cidrs("mynetworks")
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(nets, ["127.0.0.0/8", "[::1]/128"]);
    assert!(c.cidrs("mynetworks")[0].contains("127.0.0.1".parse().unwrap()));
    assert_eq!(c.str("metrics_listen"), "");
    assert!(c.transport("smtp").addrs("default_proxy").is_empty());
    assert_eq!(c.list("allow_mail_to_commands"), ["alias", "forward"]);
    assert_eq!(
        c.list("smtpd_relay_restrictions"),
        ["permit_mynetworks", "reject_unauth_destination"]
    );
    assert!(c.is_default("myorigin"));
    assert_eq!(c.raw("myorigin"), None);
    // Unqualified system host names get .localdomain, as in Postfix.
    let bare = Config::with_hostname("box");
    assert_eq!(bare.str("myhostname"), "box.localdomain");
    assert_eq!(bare.str("mydomain"), "localdomain");
    let bare = Config::with_hostname("box")
        .with_text("mydomain = example.org", Path::new(MAIN_CF), &[])
        .unwrap()
        .config;
    assert_eq!(bare.str("myhostname"), "box.example.org");
}

#[test]
fn system_hostname_is_read() {
    let h = config::system_hostname();
    assert!(!h.is_empty() && !h.contains(char::is_whitespace));
    assert_eq!(Config::defaults().hostname(), h);
}

#[test]
fn per_transport_overrides() {
    let c = parse_with(
        "relay_destination_concurrency_limit = 7\n\
         relay_initial_destination_concurrency = 2\n\
         smtp_destination_recipient_limit = $relay_destination_concurrency_limit\n\
         default_destination_concurrency_limit = 30\n\
         smtp_connection_cache_time_limit = 5\n\
         smtp_proxy = 127.0.0.1:3025, [::1]:3026 localhost:3027\n",
        &["relay", "smtp"],
    )
    .unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let c = c.config;
    let relay = c.transport("relay");
    assert_eq!(relay.name(), "relay");
    assert_eq!(relay.int("default_destination_concurrency_limit"), 7);
    assert_eq!(relay.int("initial_destination_concurrency"), 2);
    assert_eq!(relay.int("default_destination_recipient_limit"), 50);
    let smtp = c.transport("smtp");
    assert_eq!(smtp.int("default_destination_concurrency_limit"), 30);
    assert_eq!(smtp.int("default_destination_recipient_limit"), 7);
    assert_eq!(
        smtp.time("connection_cache_time_limit"),
        Duration::from_secs(5)
    );
    assert_eq!(
        c.time("connection_cache_time_limit"),
        Duration::from_secs(2)
    );
    let proxies: Vec<String> = smtp
        .addrs("default_proxy")
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert_eq!(proxies, ["127.0.0.1:3025", "[::1]:3026", "127.0.0.1:3027"]);
    assert!(
        relay.addrs("default_proxy").is_empty(),
        "relay has none of its own"
    );
    // Postfix's own per-transport defaults for local.
    let local = c.transport("local");
    assert_eq!(local.int("default_destination_concurrency_limit"), 2);
    assert_eq!(local.int("default_destination_recipient_limit"), 1);
    assert_eq!(c.int("default_destination_concurrency_limit"), 30);
    // Not per-transport: the transport prefix is not consulted.
    assert_eq!(relay.size("message_size_limit"), 10_240_000);
    assert_eq!(
        c.transport("").int("default_destination_concurrency_limit"),
        30
    );
}

#[test]
fn per_transport_values_are_validated() {
    let err = parse("relay_destination_concurrency_limit = lots\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "/etc/sluice/main.cf, line 1: parameter \"relay_destination_concurrency_limit\": bad integer value \"lots\""
    );
}

#[test]
fn unknown_parameters_warn_with_file_and_line() {
    let l = parse_with(
        "# header\nbogus = 1\nmy_list = a, b\nsmtpd_client_restrictions = $my_list\n\
         relay_destination_concurrency_limit = 3\nfoo_destination_concurrency_limit = 3\n",
        &["relay"],
    )
    .unwrap();
    let w: Vec<String> = l.warnings.iter().map(|d| d.to_string()).collect();
    assert_eq!(
        w,
        [
            "/etc/sluice/main.cf, line 2: parameter \"bogus\": unknown parameter",
            "/etc/sluice/main.cf, line 6: parameter \"foo_destination_concurrency_limit\": unknown parameter (no service \"foo\" in master.cf)",
        ]
    );
    assert_eq!(l.warnings[0].line, 2);
    assert_eq!(l.warnings[0].file, PathBuf::from(MAIN_CF));
    assert_eq!(l.config.list("smtpd_client_restrictions"), ["a", "b"]);
    assert_eq!(l.config.raw("bogus"), Some("1"));
    // An orphan continuation line is a warning, as in Postfix.
    let l = parse("   indented = 1\nmyorigin = x\n").unwrap();
    assert_eq!(l.warnings.len(), 1);
    assert_eq!(l.warnings[0].line, 1);
    assert!(l.warnings[0]
        .to_string()
        .starts_with("/etc/sluice/main.cf, line 1: logical line"));
}

#[test]
fn unimplemented_parameters_warn_unless_left_at_their_default() {
    let l = parse_with(
        "debug_peer_list = 127.0.0.1\nenable_original_recipient = yes\n\
         relay_destination_rate_delay = 1s\nmyorigin = x\nbody_checks =\n",
        &["relay"],
    )
    .unwrap();
    let w: Vec<String> = l.warnings.iter().map(|d| d.to_string()).collect();
    assert_eq!(
        w,
        [
            "/etc/sluice/main.cf, line 1: parameter debug_peer_list is not implemented by Sluice and has no effect",
            "/etc/sluice/main.cf, line 3: parameter relay_destination_rate_delay is not implemented by Sluice and has no effect",
        ]
    );
    // master.cf -o settings warn with master.cf's line, once per parameter.
    let dir = std::env::temp_dir().join(format!("sluice-cfg-unimpl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("main.cf"), "debug_peer_list = 127.0.0.1\n").unwrap();
    std::fs::write(
        dir.join("master.cf"),
        "smtp inet n - n - - smtpd\n  -o debug_peer_list=127.0.0.2\n  -o smtpd_data_restrictions=reject\n",
    )
    .unwrap();
    let services = config::load_master_cf(&dir.join("master.cf")).unwrap();
    let l = Config::load_with_master(&dir, &services).unwrap();
    let w: Vec<String> = l.warnings.iter().map(|d| d.to_string()).collect();
    let main = dir.join("main.cf").display().to_string();
    let master = dir.join("master.cf").display().to_string();
    assert_eq!(
        w,
        [
            format!("{main}, line 1: parameter debug_peer_list is not implemented by Sluice and has no effect"),
            format!("{master}, line 1: parameter smtpd_data_restrictions is not implemented by Sluice and has no effect"),
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_values_are_refused_with_file_line_and_parameter() {
    let text = "# comment\n".repeat(11) + "message_size_limit = 10M0\n";
    let err = parse(&text).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "/etc/sluice/main.cf, line 12: parameter \"message_size_limit\": bad integer value \"10M0\""
        ),
        "{err}"
    );
    for (text, line, param, problem) in [
        (
            "smtpd_recipient_limit = abc",
            1,
            "smtpd_recipient_limit",
            ValueProblem::Integer,
        ),
        (
            "a = 1\nsoft_bounce = maybe",
            2,
            "soft_bounce",
            ValueProblem::Bool,
        ),
        (
            "minimal_backoff_time = 5x",
            1,
            "minimal_backoff_time",
            ValueProblem::Time,
        ),
        (
            "minimal_backoff_time = 5 s",
            1,
            "minimal_backoff_time",
            ValueProblem::Time,
        ),
        (
            "message_size_limit = -1",
            1,
            "message_size_limit",
            ValueProblem::Size,
        ),
        (
            "inet_protocols = ipv5",
            1,
            "inet_protocols",
            ValueProblem::Enum(&["ipv4", "ipv6", "all"]),
        ),
        (
            "myhostname = h.test\nreceive_override_options = no_address_mappings, no_milters",
            2,
            "receive_override_options",
            ValueProblem::Enum(&["no_address_mappings"]),
        ),
        (
            "alias_maps = /etc/aliases",
            1,
            "alias_maps",
            ValueProblem::MapRef("expected type:name".into()),
        ),
        (
            "alias_maps = inline:{ a = b",
            1,
            "alias_maps",
            ValueProblem::Braces,
        ),
        (
            "metrics_listen = 9103",
            1,
            "metrics_listen",
            ValueProblem::Listen("9103: missing :port".into()),
        ),
        (
            "smtp_proxy = 127.0.0.1",
            1,
            "smtp_proxy",
            ValueProblem::Addr("127.0.0.1: missing :port".into()),
        ),
        (
            "myhostname = h.test\nrelay_proxy = 192.0.2.1:3025, proxy.example:3025",
            2,
            "relay_proxy",
            ValueProblem::Addr(
                "proxy.example:3025: the host must be an IP address or localhost".into(),
            ),
        ),
        (
            "default_proxy = [2001:db8::1]:3025 0.0.0.0:3025",
            1,
            "default_proxy",
            ValueProblem::Addr(
                "0.0.0.0:3025: the unspecified address cannot be connected to".into(),
            ),
        ),
        (
            "default_destination_concurrency_positive_feedback = lots",
            1,
            "default_destination_concurrency_positive_feedback",
            ValueProblem::Feedback,
        ),
        (
            "x = 10M0\nmessage_size_limit = $x\n",
            2,
            "message_size_limit",
            ValueProblem::Size,
        ),
    ] {
        match parse(text) {
            Err(ConfigError::BadValue {
                file,
                line: l,
                param: p,
                problem: pr,
                ..
            }) => {
                assert_eq!(
                    (file.as_path(), l, p.as_str(), pr),
                    (Path::new(MAIN_CF), line, param, problem),
                    "{text:?}"
                );
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
    let err = parse("mynetworks = 10.0.0.0/8, 127.0.0.1/8")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("perhaps you should use \"127.0.0.0/8\""),
        "{err}"
    );
    let err = parse("smtpd_tls_security_level = encrpyt")
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("bad value \"encrpyt\" (use one of: none, may, encrypt)"),
        "{err}"
    );
}

#[test]
fn syntax_errors() {
    for (text, line, problem) in [
        ("myorigin", 1, SyntaxProblem::MissingEquals),
        ("\n\n= value", 3, SyntaxProblem::MissingName),
        ("my origin = x", 1, SyntaxProblem::MissingEquals),
        ("a/b = x", 1, SyntaxProblem::BadName("a/b".into())),
        ("myorigin = a\0b", 1, SyntaxProblem::Nul),
        ("a = 1\nb = 2\n  \0", 2, SyntaxProblem::Nul),
    ] {
        match parse(text) {
            Err(ConfigError::Syntax {
                line: l,
                problem: p,
                ..
            }) => {
                assert_eq!((l, p), (line, problem), "{text:?}")
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
    assert_eq!(
        parse("\nmyorigin").unwrap_err().to_string(),
        "/etc/sluice/main.cf, line 2: missing '=' after parameter name"
    );
}

#[test]
fn expansion_loops_and_limits() {
    let err = parse("a = $b\nb = ${a}\n").unwrap_err();
    match &err {
        ConfigError::Expand {
            line: 1,
            param,
            problem: ExpandProblem::Loop(chain),
            ..
        } => {
            assert_eq!(param, "a");
            assert_eq!(chain, &["a", "b", "a"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string().contains("parameter loop: a -> b -> a"),
        "{err}"
    );
    // A loop through defaults is found too.
    assert!(matches!(
        parse("myhostname = $myorigin").unwrap_err(),
        ConfigError::Expand {
            problem: ExpandProblem::Loop(_),
            ..
        }
    ));
    assert!(matches!(
        parse("mydomain = $myhostname\n").map(|l| l.config.str("myhostname")),
        Ok(h) if h == "mail.example.com"
    ));
    // Deep chains and exponential values are refused, not run.
    let chain: String = (0..300).map(|i| format!("v{i} = $v{}\n", i + 1)).collect();
    assert!(matches!(
        parse(&chain).unwrap_err(),
        ConfigError::Expand {
            problem: ExpandProblem::TooDeep,
            ..
        }
    ));
    let bomb: String = (0..40)
        .map(|i| format!("w{i} = $w{0}$w{0}$w{0}\n", i + 1))
        .collect::<String>()
        + "w40 = x\n";
    assert!(matches!(
        parse(&bomb).unwrap_err(),
        ConfigError::Expand {
            problem: ExpandProblem::TooLong,
            ..
        }
    ));
    assert!(matches!(
        parse("myorigin = ${oops").unwrap_err(),
        ConfigError::Expand {
            problem: ExpandProblem::Unterminated,
            ..
        }
    ));
    let nested = format!(
        "a = 1\nmyorigin = {}x{}\n",
        "${a?".repeat(50),
        "}".repeat(50)
    );
    assert_eq!(ok(&nested).str("myorigin"), "x");
}

#[test]
fn huge_and_binary_inputs() {
    let big = "x".repeat(1 << 20);
    assert_eq!(
        ok(&format!("myorigin = {big}\n")).str("myorigin").len(),
        1 << 20
    );
    let wide = format!("mydestination = {}\n", "a, ".repeat(300_000));
    assert_eq!(ok(&wide).list("mydestination").len(), 300_000);
    let garbage: String = (0u32..2000)
        .filter_map(|i| char::from_u32(i * 37 % 0x3000))
        .collect();
    let _ = parse(&garbage);
    let dir = std::env::temp_dir().join(format!("sluice-cfg-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("main.cf"), b"myorigin = ok\nmydomain = \xff\xfe\n").unwrap();
    match Config::load(&dir, &[]) {
        Err(ConfigError::Syntax {
            line: 2,
            problem: SyntaxProblem::NotUtf8,
            file,
        }) => {
            assert_eq!(file, dir.join("main.cf"))
        }
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn load_sets_config_directory_and_reports_io_errors() {
    let dir = std::env::temp_dir().join(format!("sluice-cfg-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let err = Config::load(&dir, &[]).unwrap_err();
    assert!(matches!(err, ConfigError::Io { .. }));
    assert!(
        err.to_string()
            .starts_with(&dir.join("main.cf").display().to_string()),
        "{err}"
    );
    std::fs::write(dir.join("main.cf"), "queue_directory = /tmp/q\nfoo = 1\n").unwrap();
    let l = Config::load(&dir, &[]).unwrap();
    assert_eq!(l.config.str("config_directory"), dir.display().to_string());
    assert_eq!(l.config.str("queue_directory"), "/tmp/q");
    assert_eq!(l.warnings[0].line, 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn overrides_are_validated_and_win() {
    let mut c = ok("smtpd_banner = $myhostname hello\nmail_name = X\n");
    c.set_override("myhostname", "other.example.net").unwrap();
    assert_eq!(c.str("smtpd_banner"), "other.example.net hello");
    assert_eq!(c.raw("myhostname"), Some("other.example.net"));
    assert!(!c.is_default("myhostname"));
    let err = c.set_override("smtpd_timeout", "forever").unwrap_err();
    assert_eq!(err.to_string(), "-o: parameter \"smtpd_timeout\": bad time value \"forever\" (use a number and one of the units s m h d w)");
    assert_eq!(c.time("smtpd_timeout"), Duration::from_secs(300));
    let err = c
        .set_override_at("smtpd_timeout", "1y", Path::new("/etc/sluice/master.cf"), 7)
        .unwrap_err();
    assert!(err
        .to_string()
        .starts_with("/etc/sluice/master.cf, line 7: parameter \"smtpd_timeout\""));
    // A user-defined parameter referenced from main.cf, as with
    // -o smtpd_client_restrictions=$mua_client_restrictions.
    c.set_override("mua_client_restrictions", "permit_mynetworks, reject")
        .unwrap();
    c.set_override("smtpd_client_restrictions", "$mua_client_restrictions")
        .unwrap();
    assert_eq!(
        c.list("smtpd_client_restrictions"),
        ["permit_mynetworks", "reject"]
    );
    // An override that breaks another value is undone.
    c.set_override("x", "5").unwrap();
    c.set_override("smtpd_recipient_limit", "$x").unwrap();
    assert!(c.set_override("x", "five").is_err());
    assert_eq!(c.int("smtpd_recipient_limit"), 5);
    assert!(c.set_override("bad name", "1").is_err());
    assert!(c.set_override("a", "$a").is_err());
    assert_eq!(c.raw("a"), None);
    c.set_override("smtpd_tls_security_level", "MAY").unwrap();
    assert_eq!(c.choice("smtpd_tls_security_level"), "may");
}

#[test]
#[should_panic(expected = "not in the parameter table")]
fn unknown_getter_name_is_a_programmer_error() {
    Config::with_hostname("h.example").int("no_such_parameter");
}

#[test]
#[should_panic(expected = "not Int")]
fn wrong_getter_type_is_a_programmer_error() {
    Config::with_hostname("h.example").int("myorigin");
}

#[test]
fn rendering() {
    let c = ok("myorigin = $mydomain\n# c\nmail_name = Test\nbogus = 1\n");
    let non_default = render(&c, RenderMode::NonDefault);
    assert_eq!(
        non_default,
        "bogus = 1\nmail_name = Test\nmyorigin = $mydomain\n"
    );
    let all = render(&c, RenderMode::All);
    assert!(all.contains("\nmyorigin = example.com\n"), "{all}");
    assert!(all.contains("\nsmtpd_banner = mail.example.com ESMTP Test\n"));
    assert!(all.contains("\nrelayhost =\n"));
    assert!(all.contains("\nbogus = 1\n"));
    let names: Vec<&str> = all.lines().map(|l| l.split(" =").next().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    let defaults = render(&c, RenderMode::Defaults);
    assert!(defaults.contains("\nmyorigin = $myhostname\n"));
    assert!(defaults.contains("\nmail_name = Sluice\n"));
    assert!(defaults.contains("\nmyhostname = mail.example.com\n"));
    assert!(defaults.contains("\nmydomain = example.com\n"));
    assert_eq!(defaults.lines().count(), Config::params().count());
    assert_eq!(
        render_one(&c, "myorigin", RenderMode::All).unwrap(),
        "myorigin = example.com\n"
    );
    assert_eq!(
        render_one(&c, "myorigin", RenderMode::NonDefault).unwrap(),
        "myorigin = $mydomain\n"
    );
    assert_eq!(
        render_one(&c, "relayhost", RenderMode::NonDefault).unwrap(),
        ""
    );
    assert_eq!(
        render_one(&c, "myorigin", RenderMode::Defaults).unwrap(),
        "myorigin = $myhostname\n"
    );
    assert!(matches!(
        render_one(&c, "nope", RenderMode::All),
        Err(ConfigError::UnknownParameter { .. })
    ));
    assert!(render_one(&c, "bogus", RenderMode::Defaults).is_err());
    assert_eq!(
        render_one(&c, "bogus", RenderMode::All).unwrap(),
        "bogus = 1\n"
    );
}

#[test]
fn table_is_exposed() {
    let names: Vec<&str> = Config::params().map(|p| p.name).collect();
    for required in [
        "config_directory",
        "queue_directory",
        "daemon_directory",
        "mail_owner",
        "myhostname",
        "mynetworks",
        "inet_interfaces",
        "master_stop_timeout",
        "smtpd_forbid_bare_newline",
        "2bounce_notice_recipient",
        "scheduler_class_key",
        "connection_backlog_limit",
        "connection_reuse_count_limit",
        "max_message_concurrency",
        "scale_max_concurrency",
        "metrics_listen",
        "dns_servers",
        "allow_mail_to_files",
        "line_length_limit",
    ] {
        assert!(names.contains(&required), "{required}");
    }
    let spec = config::spec("initial_destination_concurrency").unwrap();
    assert!(spec.per_transport);
    assert_eq!(
        spec.transport_name("relay"),
        "relay_initial_destination_concurrency"
    );
}

#[test]
fn master_cf_references_and_restriction_classes_are_known() {
    let dir = std::env::temp_dir().join(format!("sluice-cfg-master-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("main.cf"),
        "mua_client_restrictions = permit_mynetworks, reject\n\
         smtpd_restriction_classes = special\nspecial = reject\n\
         submission_destination_recipient_limit = 5\nunused = 1\n",
    )
    .unwrap();
    let services = config::parse_master_cf(
        "submission inet n - n - - smtpd\n  -o smtpd_client_restrictions=$mua_client_restrictions\n",
        Path::new("master.cf"),
    )
    .unwrap();
    let l = Config::load_with_master(&dir, &services).unwrap();
    let params: Vec<&str> = l.warnings.iter().map(|d| d.param.as_str()).collect();
    // The empty one: restriction classes are accepted, not implemented.
    assert_eq!(params, ["unused", ""]);
    assert!(l.warnings[1]
        .message
        .starts_with("parameter smtpd_restriction_classes is not implemented"));
    assert_eq!(
        l.config
            .transport("submission")
            .int("default_destination_recipient_limit"),
        5
    );
    let l = Config::load(&dir, &[]).unwrap();
    let params: Vec<&str> = l.warnings.iter().map(|d| d.param.as_str()).collect();
    assert_eq!(
        params,
        [
            "mua_client_restrictions",
            "submission_destination_recipient_limit",
            "unused",
            ""
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn int_reads_sizes_too() {
    let c = ok("message_size_limit = 1k");
    assert_eq!(c.int("message_size_limit"), 1024);
    assert_eq!(c.size("smtpd_recipient_limit"), 1000);
}

#[test]
fn check_reports_every_problem() {
    let text = "myorigin\nmessage_size_limit = 10M0\nbogus = 1\nsoft_bounce = maybe\n= x\na = $a\n";
    let (errors, warnings) = Config::check_text(text, Path::new(MAIN_CF), &[]);
    let lines: Vec<usize> = errors
        .iter()
        .map(|e| match e {
            ConfigError::Syntax { line, .. }
            | ConfigError::BadValue { line, .. }
            | ConfigError::Expand { line, .. } => *line,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(lines, [1, 5, 2, 4, 6]);
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].param, "bogus");
    let (errors, warnings) = Config::check_text("myorigin = x\n", Path::new(MAIN_CF), &[]);
    assert!(errors.is_empty() && warnings.is_empty());
    let (errors, _) = Config::check_file(Path::new("/nonexistent/sluice/main.cf"), &[]);
    assert!(matches!(errors[..], [ConfigError::Io { .. }]));
}

#[test]
fn load_for_check_keeps_the_good_values_and_defaults_the_bad() {
    let dir = std::env::temp_dir().join(format!("sluice-cfg-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("main.cf"),
        "message_size_limit = 10M0\nmyhostname = mx.example.org\nsmtpd_recipient_limit = abc\n",
    )
    .unwrap();
    assert!(Config::load_with_master(&dir, &[]).is_err());
    let c = Config::load_for_check(&dir, &[]).unwrap().config;
    assert_eq!(c.str("myhostname"), "mx.example.org");
    assert!(c.is_default("message_size_limit") && c.is_default("smtpd_recipient_limit"));
    assert_eq!(c.int("smtpd_recipient_limit"), 1000);
    std::fs::remove_dir_all(&dir).unwrap();
}
