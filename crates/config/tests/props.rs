//! Property tests: no input makes the parsers or the editor panic, and the
//! editor's output always reads back as the values it was asked to set.

use std::collections::BTreeMap;
use std::path::Path;

use config::{edit_main_cf, parse_master_cf, Config};
use proptest::prelude::*;

/// Text made mostly of the characters that matter to the parsers.
fn cf_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(
            prop_oneof![
                Just("\n".to_string()),
                Just(" ".to_string()),
                Just("\t".to_string()),
                Just("=".to_string()),
                Just("#".to_string()),
                Just("$".to_string()),
                Just("{".to_string()),
                Just("}".to_string()),
                Just("(".to_string()),
                Just(")".to_string()),
                Just("?".to_string()),
                Just(":".to_string()),
                Just(",".to_string()),
                Just("-o".to_string()),
                Just("\0".to_string()),
                Just("myorigin".to_string()),
                Just("message_size_limit".to_string()),
                Just("mynetworks".to_string()),
                Just("inet".to_string()),
                Just("unix".to_string()),
                "[a-z_]{1,8}",
                "[0-9]{1,4}[kmsdhw]?",
                any::<char>().prop_map(String::from),
            ],
            0..60,
        )
        .prop_map(|v| v.concat()),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("myorigin".to_string()),
        Just("relayhost".to_string()),
        Just("smtpd_banner".to_string()),
        "[a-z][a-z0-9_]{0,10}",
    ]
}

/// Reads main.cf leniently: last definition of each name, as text.
fn definitions(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut cur: Option<String> = None;
    let flush = |cur: &mut Option<String>, out: &mut BTreeMap<String, String>| {
        if let Some(line) = cur.take() {
            if let Some((n, v)) = line.split_once('=') {
                out.insert(n.trim().to_string(), v.trim().to_string());
            }
        }
    };
    for raw in text.split('\n') {
        let t = raw.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if raw.starts_with(char::is_whitespace) {
            if let Some(c) = cur.as_mut() {
                c.push(' ');
                c.push_str(raw.trim());
            }
            continue;
        }
        flush(&mut cur, &mut out);
        cur = Some(raw.trim_end().to_string());
    }
    flush(&mut cur, &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn main_cf_parser_never_panics(text in cf_text()) {
        if let Ok(loaded) = Config::with_hostname("h.example").with_text(&text, Path::new("main.cf"), &[]) {
            // Every getter works on whatever loaded.
            let c = loaded.config;
            let _ = config::render(&c, config::RenderMode::All);
            let _ = c.size("message_size_limit");
            let _ = c.cidrs("mynetworks");
        }
    }

    #[test]
    fn master_cf_parser_never_panics(text in cf_text()) {
        let _ = parse_master_cf(&text, Path::new("master.cf"));
    }

    #[test]
    fn overrides_never_panic(n in name(), v in cf_text()) {
        let mut c = Config::with_hostname("h.example");
        let _ = c.set_override(&n, &v);
        let _ = c.str("myorigin");
    }

    #[test]
    fn editor_output_reads_back(
        text in cf_text(),
        set in proptest::collection::vec((name(), cf_text()), 0..4),
    ) {
        let out = edit_main_cf(&text, &set);
        let got = definitions(&out);
        let mut want = BTreeMap::new();
        for (n, v) in &set {
            let clean: String = v.chars().map(|c| if matches!(c, '\n' | '\r' | '\0') { ' ' } else { c }).collect();
            want.insert(n.clone(), clean.trim().to_string());
        }
        for (n, v) in &want {
            prop_assert_eq!(got.get(n), Some(v), "name {} in {:?}", n, out);
        }
        // Lines the editor did not own are kept, in order.
        let kept: Vec<&str> = text.split('\n').filter(|l| l.trim_start().starts_with('#')).collect();
        let after: Vec<&str> = out.split('\n').filter(|l| l.trim_start().starts_with('#')).collect();
        prop_assert_eq!(kept, after);
    }
}
