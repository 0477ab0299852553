//! Table-driven tests of every table type, bad lines included.

use super::*;

fn mref(kind: &str, name: &str) -> MapRef {
    MapRef {
        kind: kind.into(),
        name: name.into(),
    }
}

#[test]
fn text_tables_fold_keys_continue_lines_and_skip_comments() {
    let src = "# comment\n\nexample.com   smtp:[mx.example.com]\nUser@Example.com relay:\n   [gw]:2525\n  # indented comment\nfirst a\nfirst b\n";
    let t = Table::from_text("hash:x", "x", src).unwrap();
    let cases: &[(&str, Option<&str>)] = &[
        ("example.com", Some("smtp:[mx.example.com]")),
        ("EXAMPLE.COM", Some("smtp:[mx.example.com]")),
        ("user@example.com", Some("relay: [gw]:2525")),
        ("first", Some("a")),
        ("other", None),
        ("", None),
    ];
    for (k, v) in cases {
        assert_eq!(t.lookup(k).as_deref(), *v, "key {k:?}");
    }
    assert_eq!(t.warnings().len(), 1);
    assert!(t.warnings()[0].contains("line 8"));
}

#[test]
fn aliases_form_is_read_too() {
    let t = Table::from_text(
        "hash:/etc/aliases",
        "/etc/aliases",
        "# c\npostmaster:    root\nMailer-Daemon: postmaster\n",
    )
    .unwrap();
    assert_eq!(t.lookup("postmaster").as_deref(), Some("root"));
    assert_eq!(t.lookup("mailer-daemon").as_deref(), Some("postmaster"));
}

#[test]
fn text_table_errors_name_file_and_line() {
    let e = Table::from_text("hash:/etc/x", "/etc/x", "a b\nlonely\n").unwrap_err();
    assert_eq!((e.line, e.problem.clone()), (2, TableProblem::NoValue));
    assert_eq!(
        e.to_string(),
        "table hash:/etc/x: /etc/x, line 2: expected format: key whitespace value"
    );
}

#[test]
fn open_reads_files_of_every_text_type() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t");
    std::fs::write(&p, "k v\n").unwrap();
    for kind in ["hash", "texthash", "lmdb"] {
        let t = Table::open(&mref(kind, p.to_str().unwrap())).unwrap();
        assert_eq!(t.lookup("k").as_deref(), Some("v"));
        assert_eq!(t.spec(), format!("{kind}:{}", p.display()));
    }
    let e = Table::open(&mref("hash", "/nonexistent/x")).unwrap_err();
    assert!(matches!(e.problem, TableProblem::Io(_)));
    let e = Table::open(&mref("mysql", "/x")).unwrap_err();
    assert_eq!(e.problem, TableProblem::UnsupportedType("mysql".into()));
}

#[test]
fn inline_and_static() {
    let t = Table::from_inline("inline", "{ a = b, C=d e, { k = v, w } }").unwrap();
    assert_eq!(t.lookup("a").as_deref(), Some("b"));
    assert_eq!(t.lookup("c").as_deref(), Some("d e"));
    assert_eq!(t.lookup("k").as_deref(), Some("v, w"));
    assert!(Table::from_inline("inline", "a = b").is_err());
    assert!(Table::from_inline("inline", "{ a = b, {").is_err());
    assert!(Table::from_inline("inline", "{ novalue }").is_err());
    let s = Table::open(&mref("static", "{ error:5.1.1 go away }")).unwrap();
    assert_eq!(s.lookup("anything").as_deref(), Some("error:5.1.1 go away"));
    assert!(s.is_static());
    let s = open_str("static:relay").unwrap();
    assert_eq!(s.lookup("").as_deref(), Some("relay"));
}

#[test]
fn regexp_rules_flags_negation_and_substitution() {
    let src = r#"
/^(.*)\+.*@(example\.com)$/  $1@$2
/^postmaster@/i              Postmaster-Exact
!/@/                         no-domain
if /\.org$/
/^abuse@/                    abuse-org ${0} $$
endif
#/never/ x
/^x@(a|b)\.net$/             $1-${1}
"#;
    let t = Table::from_regexp("regexp:t", "t", src).unwrap();
    let cases: &[(&str, Option<&str>)] = &[
        ("joe+list@EXAMPLE.com", Some("joe@EXAMPLE.com")),
        ("postmaster@x", Some("Postmaster-Exact")),
        ("POSTMASTER@x", None),
        ("local", Some("no-domain")),
        ("abuse@foo.org", Some("abuse-org abuse@ $")),
        ("abuse@foo.net", None),
        ("x@b.net", Some("b-b")),
        ("never", Some("no-domain")),
    ];
    for (k, v) in cases {
        assert_eq!(t.lookup(k).as_deref(), *v, "key {k:?}");
    }
}

#[test]
fn pcre_syntax_with_other_delimiters() {
    let t = Table::from_regexp("pcre:t", "t", "|^/a/b$| slash\n/^(?:x|y)\\d+$/ digits\n").unwrap();
    assert_eq!(t.lookup("/A/B").as_deref(), Some("slash"));
    assert_eq!(t.lookup("y42").as_deref(), Some("digits"));
}

#[test]
fn regexp_errors_have_lines() {
    let cases: &[(&str, usize)] = &[
        ("/ok/ r\n/unclosed r\n", 2),
        ("/a/ r\n/(/ r\n", 2),
        ("/a/q r\n", 1),
        ("/a/\n", 1),
        ("endif\n", 1),
        ("/a/ r\nif /b/\n/c/ d\n", 2),
        ("/(a)/ $2\n", 1),
        ("/(a)\\1/ back-reference\n", 1),
        ("plain r\n", 1),
        ("if /a/ junk\nendif\n", 1),
    ];
    for (src, line) in cases {
        let e = Table::from_regexp("regexp:t", "t", src).unwrap_err();
        assert_eq!(e.line, *line, "{src:?}: {e}");
    }
}

#[test]
fn tables_search_in_order() {
    let a = Table::from_text("a", "a", "k first\n").unwrap();
    let b = Table::from_text("b", "b", "k second\nj only-b\n").unwrap();
    let t = Tables::from_tables(vec![a, b]);
    assert_eq!(t.lookup("k").as_deref(), Some("first"));
    assert_eq!(t.lookup("j").as_deref(), Some("only-b"));
    assert_eq!(t.lookup("z"), None);
    assert!(Tables::none().lookup("k").is_none());
}

#[test]
fn bad_references() {
    for r in ["nocolon", ":x", "hash:", "ha sh:/x"] {
        assert!(parse_ref(r).is_err(), "{r}");
    }
    assert_eq!(
        parse_ref("hash:/etc/aliases").unwrap(),
        mref("hash", "/etc/aliases")
    );
}

#[test]
fn passwd_table_knows_users() {
    let t = Table::from_passwd(
        "unix:passwd.byname",
        "root:x:0:0::/root:/bin/sh\n#c\nmail:x:8:8::/:/bin/false\n",
    );
    assert!(t.lookup("root").is_some());
    assert!(t.lookup("mail").is_some());
    assert!(t.lookup("nobody-here").is_none());
}

proptest::proptest! {
    #[test]
    fn any_source_never_panics(src in "(?s).{0,200}", key in "(?s).{0,40}") {
        if let Ok(t) = Table::from_text("t", "t", &src) { let _ = t.lookup(&key); }
        if let Ok(t) = Table::from_regexp("t", "t", &src) { let _ = t.lookup(&key); }
        if let Ok(t) = Table::from_inline("t", &src) { let _ = t.lookup(&key); }
    }
}

#[test]
fn checked_tables_refuse_a_bad_value_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let no_x = |v: &str| {
        if v.contains('x') {
            Err("no x here".to_string())
        } else {
            Ok(())
        }
    };
    let open = |kind: &str, text: &str| {
        let path = dir.path().join(kind);
        std::fs::write(&path, text).unwrap();
        let r = parse_ref(&format!("{kind}:{}", path.display())).unwrap();
        Table::open_checked(&r, &no_x)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let e = open("hash", "a ok\n# x\nb fine\nc bad x\n").unwrap_err();
    assert!(e.ends_with("line 4: bad value \"bad x\": no x here"), "{e}");
    assert!(open("hash", "a ok\n").is_ok());
    // A result with $n is only known at lookup: not checked.
    assert!(open("regexp", "/^(.*)$/ $1\n").is_ok());
    let e = open("regexp", "/^a/ ok\n/^b/ x\n").unwrap_err();
    assert!(e.ends_with("line 2: bad value \"x\": no x here"), "{e}");
    let inline = parse_ref("inline:{ a = ok, b = x }").unwrap();
    assert!(Table::open_checked(&inline, &no_x).is_err());
    assert!(Table::open_checked(&parse_ref("static:x").unwrap(), &no_x).is_err());
    // Unchecked, the same tables open.
    assert!(Table::open(&inline).is_ok());
}

#[test]
fn a_table_that_cannot_be_read_fails_lookups_that_miss_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    std::fs::write(&good, "a 1\n").unwrap();
    let refs = [
        parse_ref(&format!("hash:{}", dir.path().join("missing").display())).unwrap(),
        parse_ref(&format!("hash:{}", good.display())).unwrap(),
    ];
    assert!(Tables::open(&refs).is_err());
    let t = Tables::open_tolerant(&refs, &any_value).unwrap();
    assert_eq!(t.unavailable().len(), 1);
    assert!(!t.is_empty());
    assert_eq!(t.lookup("a"), Some("1".to_string()));
    let e = &t.unavailable()[0];
    assert!(e.file.ends_with("missing"), "{e}");
    // A bad line is still an error: only unreadable files are tolerated.
    std::fs::write(&good, "no-value\n").unwrap();
    assert!(Tables::open_tolerant(&refs, &any_value).is_err());
}

#[test]
fn a_lookup_that_reaches_an_unreadable_table_fails() {
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before");
    let after = dir.path().join("after");
    std::fs::write(&before, "a 1\n").unwrap();
    std::fs::write(&after, "b 2\n").unwrap();
    let refs = [
        parse_ref(&format!("hash:{}", before.display())).unwrap(),
        parse_ref(&format!("hash:{}", dir.path().join("missing").display())).unwrap(),
        parse_ref(&format!("hash:{}", after.display())).unwrap(),
    ];
    let t = Tables::open_tolerant(&refs, &any_value).unwrap();
    // Answered before the unread table: as if it were there.
    assert_eq!(t.find("a"), Ok(Some("1".to_string())));
    // Behind it, or nowhere: the unread table might have said otherwise.
    for key in ["b", "c"] {
        let e = t.find(key).unwrap_err();
        assert!(e.file.ends_with("missing"), "{e}");
    }
    let all = Tables::open(&refs[..1]).unwrap();
    assert_eq!(all.find("c"), Ok(None));
}
