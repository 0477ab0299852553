//! Policy file text → reader: must never panic; a refusal is one line
//! naming the file, and a policy read evaluates the same through its
//! condition index as by testing every condition.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shaping::{Binding, Field, Policy};

fuzz_target!(|input: (&str, [u8; 3])| {
    let (text, picks) = input;
    match Policy::parse("policy.yaml", text) {
        Err(e) => {
            let shown = e.to_string();
            assert!(shown.starts_with("policy.yaml:"), "{shown}");
            assert!(!shown.contains('\n'), "{shown}");
        }
        Ok(p) => {
            // A binding made of the values the file's own conditions test,
            // so that some of them match.
            let values: Vec<&(Field, String)> = p
                .policies
                .iter()
                .flat_map(|k| k.conditions.iter().flat_map(|c| c.when.iter()))
                .collect();
            let mut b = Binding::default();
            if !values.is_empty() {
                for pick in picks {
                    let (f, v) = values[usize::from(pick) % values.len()];
                    b.set(*f, v);
                }
            }
            for i in 0..p.policies.len() {
                assert_eq!(p.props(i, &b), p.props_by_scan(i, &b));
            }
        }
    }
});
