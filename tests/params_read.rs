//! No documented parameter is silently ignored: every main.cf parameter
//! in the table is read by some program, or is marked as not implemented
//! (then `sluice check` and master warn when it is set). Setting
//! `header_checks`, before cleanup implemented it, let REJECT rules pass
//! mail with "0 warning(s)".
//!
//! A parameter counts as read when a program outside crates/config names
//! it as a string literal, when it is the per-transport row of a read
//! per-transport parameter (`local_destination_concurrency_limit` through
//! qmgr's view of transport local), when another parameter's default refers
//! to it (`$mail_name` in smtpd_banner), or when crates/config itself acts
//! on it (`config_directory`, `inet_interfaces`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use config::Config;

/// The .rs files of the programs: bin/ and crates/, without tests,
/// fuzz targets and the configuration crate itself.
fn program_sources(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.join("bin"), root.join("crates")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if !["tests", "fuzz", "benches", "target", "config"].contains(&name.as_str()) {
                    dirs.push(p);
                }
            } else if name.ends_with(".rs") && !name.ends_with("tests.rs") {
                out.push(p);
            }
        }
    }
    out
}

fn text_of(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_parameter_is_read_or_marked_unimplemented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let programs = text_of(&program_sources(root));
    let config_src = text_of(
        &["config.rs", "inet.rs", "mastercf.rs"].map(|f| root.join("crates/config/src").join(f)),
    );
    let named = |text: &str, n: &str| text.contains(&format!("\"{n}\""));
    let params: Vec<_> = Config::params().collect();
    let by_program: BTreeSet<&str> = params
        .iter()
        .filter(|s| named(&programs, s.name))
        .map(|s| s.name)
        .collect();
    // A row of its own that is a read per-transport parameter's override
    // (`default_extra_recipient_limit` is not `default_recipient_limit`'s).
    let per_transport_row = |n: &str| {
        params.iter().any(|s| {
            s.per_transport
                && by_program.contains(s.name)
                && n.strip_suffix(s.short_name())
                    .and_then(|p| p.strip_suffix('_'))
                    .is_some_and(|p| !p.is_empty() && !p.starts_with("default"))
        })
    };
    let in_a_default = |n: &str| {
        params.iter().any(|s| {
            let d = s.default_doc();
            [format!("${n}"), format!("${{{n}}}")].iter().any(|r| {
                d.match_indices(r.as_str()).any(|(i, _)| {
                    !d[i + r.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                })
            })
        })
    };
    let mut unread = Vec::new();
    let mut marked_but_read = Vec::new();
    for s in &params {
        let read = by_program.contains(s.name) || per_transport_row(s.name);
        if s.implemented && !read && !in_a_default(s.name) && !named(&config_src, s.name) {
            unread.push(s.name);
        }
        if !s.implemented && read {
            marked_but_read.push(s.name);
        }
    }
    assert!(
        unread.is_empty(),
        "no program reads these parameters: implement them, or mark them no(...) in \
         crates/config/src/table.rs and say what happens instead: {unread:?}"
    );
    assert!(
        marked_but_read.is_empty(),
        "marked as not implemented, yet a program reads them: {marked_but_read:?}"
    );
}
