//! Any bytes as a message (header block, then the body after the first
//! empty line) signed with an Ed25519 key and hostile settings: signing
//! must never panic, and the field must be exactly as long as the length
//! cleanup reserved for it before the body was read (`Signing::len`).
#![no_main]

use std::sync::{Arc, OnceLock};

use dkim::{Canon, KeySpec, PrivateKey, Settings, Signing};
use libfuzzer_sys::fuzz_target;

fn key() -> Arc<PrivateKey> {
    static KEY: OnceLock<Arc<PrivateKey>> = OnceLock::new();
    KEY.get_or_init(|| {
        let pem = dkim::generate_ed25519().expect("fuzz: ring makes a key");
        Arc::new(PrivateKey::from_pem(pem.as_bytes()).expect("fuzz: our own PEM"))
    })
    .clone()
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, msg)) = data.split_first() else { return };
    let cut = msg.windows(4).position(|w| w == b"\r\n\r\n");
    let (head, body) = match cut {
        Some(i) => (&msg[..i + 2], &msg[i + 4..]),
        None => (msg, &b""[..]),
    };
    let _ = dkim::from_address(head);
    let canon = |bit: u8| if flags & bit != 0 { Canon::Relaxed } else { Canon::Simple };
    let mut settings = Settings {
        header_canon: canon(1),
        body_canon: canon(2),
        ..Settings::default()
    };
    if flags & 4 != 0 {
        // Many signed and oversigned names: the h= list folds many times.
        settings.signed.extend((0..40).map(|i| format!("X-Field-{i}")));
        settings.oversigned.extend(settings.signed.clone());
    }
    let spec = KeySpec {
        domain: "example.test".into(),
        selector: "s1".into(),
        key: key(),
    };
    let time = u64::from(flags) << 30;
    let mut s = Signing::start(spec, &settings, head, time);
    let reserved = s.len();
    for piece in body.chunks(usize::from(flags % 7) + 1) {
        s.body(piece);
    }
    let field = s.finish().expect("fuzz: Ed25519 signing does not fail");
    assert_eq!(field.len(), reserved);
    assert!(field.starts_with(b"DKIM-Signature: v=1; a=ed25519-sha256;"));
});
