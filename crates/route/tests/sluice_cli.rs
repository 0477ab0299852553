//! `sluice route` and `sluice map query`, whose code lives in bin/sluice
//! and is compiled here against a temporary configuration directory.

#[path = "../../../bin/sluice/src/route.rs"]
#[allow(dead_code)]
mod route_cmd;

#[path = "../../../bin/sluice/src/map.rs"]
#[allow(dead_code)]
mod map_cmd;

use std::path::Path;

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("transport"), "special.test smtp:[192.0.2.1]:2525\n").unwrap();
    std::fs::write(d.join("bad"), "ok value\nno-value-here\n").unwrap();
    std::fs::write(
        d.join("main.cf"),
        "myhostname = mx.example.test\nmydestination = $myhostname, example.test\n\
         transport_maps = hash:$config_directory/transport\nlocal_recipient_maps =\ndns_servers = 127.0.0.1:9\n",
    )
    .unwrap();
    dir
}

fn run_route(d: &Path, args: &[&str], hosts: bool) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let code = route_cmd::route_to(&mut out, &mut err, d, &args, hosts);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn run_map(d: &Path, table: &str, keys: &[&str]) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let keys: Vec<String> = keys.iter().map(|s| s.to_string()).collect();
    let code = map_cmd::map_query_to(&mut out, &mut err, d, table, &keys);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn route_prints_one_line_per_address() {
    let dir = setup();
    let (code, out, err) = run_route(
        dir.path(),
        &["joe@Example.TEST", "x@special.test", "a\nb@x"],
        false,
    );
    assert_eq!(code, 1, "one address is malformed: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "joe@Example.TEST: address=joe@example.test, transport=local, nexthop=mx.example.test, class=local");
    assert_eq!(lines[1], "x@special.test: address=x@special.test, transport=smtp, nexthop=[192.0.2.1]:2525, class=default, transport_maps");
    assert!(
        lines[2].contains("error: address contains a control character"),
        "{out}"
    );
    let (code, out, _) = run_route(dir.path(), &["x@special.test"], true);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("  host 192.0.2.1:2525 preference=0 addresses=192.0.2.1"),
        "{out}"
    );
}

#[test]
fn route_fails_cleanly_without_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_route(dir.path(), &["x@y"], false);
    assert_eq!(code, 1);
    assert!(err.contains("main.cf"), "{err}");
}

#[test]
fn map_query_like_postmap() {
    let dir = setup();
    let d = dir.path();
    assert_eq!(
        run_map(d, "hash:$config_directory/transport", &["SPECIAL.test"]),
        (0, "smtp:[192.0.2.1]:2525\n".into(), String::new())
    );
    let (code, out, _) = run_map(d, "inline:{ a = 1, b = 2 }", &["a", "b", "c"]);
    assert_eq!((code, out.as_str()), (1, "a\t1\nb\t2\n"));
    let (code, _, err) = run_map(d, &format!("texthash:{}/bad", d.display()), &["ok"]);
    assert_eq!(code, 1);
    assert!(err.contains("line 2"), "{err}");
    let (code, _, err) = run_map(d, "nonsense", &["k"]);
    assert_eq!(code, 1);
    assert!(err.contains("type:name"), "{err}");
}
