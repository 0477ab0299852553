//! Every program has its manual page, every page names only parameters
//! that exist, and groff reads every page without a warning.

use std::path::Path;
use std::process::Command;

#[test]
fn every_program_has_a_manual_page() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(top.join("bin")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let found = ["1", "8"]
            .iter()
            .any(|s| top.join("man").join(format!("{name}.{s}")).is_file());
        if !found {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "programs without a page in man/: {missing:?}"
    );
    assert!(top.join("man/sluice.conf.5").is_file() && top.join("man/master.cf.5").is_file());
}

#[test]
fn parameters_named_in_pages_exist() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let known: std::collections::BTreeSet<&str> =
        config::Config::params().map(|p| p.name).collect();
    let mut unknown = Vec::new();
    for entry in std::fs::read_dir(top.join("man")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        // Parameters are set in bold: \fBname\fR, with underscores.
        for part in text.split("\\fB").skip(1) {
            let word = part.split("\\f").next().unwrap_or("");
            let looks_like_param = word.contains('_')
                && word
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && !word.starts_with('_');
            // Restriction names and per-transport forms are not table rows.
            let restriction = word.starts_with("check_") && word.ends_with("_access")
                || policy::parse_list(word).is_ok();
            let per_transport = config::split_transport_param(word).is_some();
            if looks_like_param
                && !known.contains(word)
                && !restriction
                && !per_transport
                && !word.ends_with('_')
            {
                unknown.push(format!("{}: {word}", path.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "pages name parameters that are not in the table: {unknown:?}"
    );
}

/// A page holds no control character but the newline: a font escape
/// written through a string that reads `\f` as a form feed renders as
/// stray letters (`Bsluice reloadR`).
#[test]
fn pages_hold_no_control_characters() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for entry in std::fs::read_dir(top.join("man")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.chars().any(|c| c.is_control()) {
                found.push(format!("{}:{}: {line:?}", path.display(), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "control characters in pages: {found:?}");
}

/// groff reads every page without a warning: lintian's groff-message
/// (scripts/test-package) fails the package on any, such as the one for a
/// line that begins with `...`, which troff reads as a call of macro `..`.
/// groff's options are those lintian has man(1) give it: UTF-8 input
/// (preconv), the utf8 device, and every warning.
#[test]
fn groff_reads_every_page_without_a_warning() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut warned = Vec::new();
    for entry in std::fs::read_dir(top.join("man")).unwrap() {
        let path = entry.unwrap().path();
        let out = Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
            .arg(&path)
            .env("LC_ALL", "C.UTF-8")
            .output()
            .unwrap_or_else(|e| {
                panic!("groff cannot be run ({e}): scripts/test installs groff-base")
            });
        let said = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || !said.trim().is_empty() {
            warned.push(format!(
                "{} ({}):\n{}",
                path.display(),
                out.status,
                said.trim_end()
            ));
        }
    }
    assert!(
        warned.is_empty(),
        "groff warns about pages in man/:\n{}",
        warned.join("\n")
    );
}
