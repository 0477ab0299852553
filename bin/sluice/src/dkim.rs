//! `sluice dkim keygen DOMAIN SELECTOR`: a new DKIM key, as
//! opendkim-genkey makes one.
//!
//! Writes `DIR/SELECTOR.private` (PEM PKCS#8, mode 0600, never over an
//! existing file) and prints the DNS TXT record to publish, in zone file
//! form, with the text cut into strings of at most 255 bytes as TXT
//! records need. RSA keys (the default, 2048 bits) are made by
//! `openssl genpkey`, since ring signs with RSA but does not make RSA
//! keys; Ed25519 keys are made here. The key is read back through the
//! signer before it is written, so what is written is what cleanup can use.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;

use crate::fail;

/// Makes the key and prints the record; the exit code.
pub fn keygen(domain: &str, selector: &str, algorithm: &str, bits: u32, dir: &Path) -> i32 {
    let label_ok = |s: &str| {
        !s.is_empty()
            && s.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            })
    };
    if !label_ok(domain) || !label_ok(selector) {
        return fail(format!("bad domain or selector: {domain} {selector}"));
    }
    let pem = match algorithm {
        "rsa" => {
            if !(2048..=8192).contains(&bits) {
                return fail(format!("RSA key size {bits}: use 2048 to 8192 bits"));
            }
            let out = Command::new("openssl")
                .args(["genpkey", "-algorithm", "RSA", "-pkeyopt"])
                .arg(format!("rsa_keygen_bits:{bits}"))
                .output();
            match out {
                Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
                Ok(o) => {
                    return fail(format!(
                        "openssl genpkey: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    ))
                }
                Err(e) => return fail(format!("openssl (needed for RSA keys): {e}")),
            }
        }
        "ed25519" => match dkim::generate_ed25519() {
            Ok(p) => p,
            Err(e) => return fail(e),
        },
        other => return fail(format!("unknown algorithm {other}: rsa or ed25519")),
    };
    let key = match dkim::PrivateKey::from_pem(pem.as_bytes()) {
        Ok(k) => k,
        Err(e) => return fail(format!("the new key: {e}")),
    };
    let path = dir.join(format!("{selector}.private"));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(pem.as_bytes()).and_then(|()| f.sync_all()));
    if let Err(e) = written {
        return fail(format!("{}: {e}", path.display()));
    }
    print!("{}", txt_record(domain, selector, &key.dns_record()));
    eprintln!(
        "sluice: wrote {}; dkim_key_table entry: {domain} {domain}:{selector}:{}",
        path.display(),
        std::path::absolute(&path).unwrap_or(path.clone()).display()
    );
    0
}

/// The zone file line for `text`, in strings of at most 255 bytes.
fn txt_record(domain: &str, selector: &str, text: &str) -> String {
    let strings: Vec<String> = text
        .as_bytes()
        .chunks(255)
        .map(|c| format!("\"{}\"", String::from_utf8_lossy(c)))
        .collect();
    format!(
        "{selector}._domainkey.{domain}.\tIN\tTXT\t( {} )\n",
        strings.join("\n\t")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_records_are_cut_into_strings() {
        let text = format!("v=DKIM1; k=rsa; p={}", "A".repeat(392));
        let r = txt_record("example.com", "s1", &text);
        assert!(r.starts_with("s1._domainkey.example.com.\tIN\tTXT\t( \""));
        let strings: Vec<&str> = r.split('"').skip(1).step_by(2).collect();
        assert_eq!(strings.len(), 2);
        assert_eq!(strings[0].len(), 255);
        assert_eq!(strings.concat(), text);
    }
}
