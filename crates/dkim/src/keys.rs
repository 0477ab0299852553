//! The signing and key tables, as opendkim's `SigningTable` and
//! `KeyTable`: `dkim_signing_table` maps the From: address, or else its
//! domain, to a key name; `dkim_key_table` maps a key name to
//! `domain:selector:/path/to/key.pem`. Every key of the key table is read
//! when the tables are (at start and reload), so a missing or unusable
//! key stops the program with its name instead of failing mail later;
//! the key table must therefore be of an indexed type (texthash, hash,
//! lmdb, inline), whose entries can be listed.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use tables::{MapRef, Table, Tables};

use crate::key::PrivateKey;
use crate::sign::KeySpec;

/// The keys main.cf's tables name, loaded.
#[derive(Debug)]
pub struct Keys {
    signing: Tables,
    keys: HashMap<String, KeySpec>,
}

impl Keys {
    /// Opens both tables and reads every key; `None` when
    /// `signing` is empty (nothing is signed). Errors name the table and key.
    pub fn open(signing: &[MapRef], key_table: &[MapRef]) -> Result<Option<Keys>, String> {
        if signing.is_empty() {
            return Ok(None);
        }
        if key_table.is_empty() {
            return Err("dkim_signing_table is set but dkim_key_table is empty".into());
        }
        let signing_tables =
            Tables::open(signing).map_err(|e| format!("dkim_signing_table: {e}"))?;
        let mut keys = HashMap::new();
        for r in key_table {
            let t = Table::open(r).map_err(|e| format!("dkim_key_table: {e}"))?;
            let Some(entries) = t.entries() else {
                return Err(format!(
                    "dkim_key_table: {r}: a {} table cannot be listed; use texthash, hash, lmdb or inline",
                    r.kind
                ));
            };
            for (name, value) in entries {
                if keys.contains_key(name) {
                    continue;
                }
                let spec = parse_entry(value)
                    .map_err(|e| format!("dkim_key_table: {r}: key {name}: {e}"))?;
                keys.insert(name.to_string(), spec);
            }
        }
        Ok(Some(Keys {
            signing: signing_tables,
            keys,
        }))
    }

    /// The key for mail whose From: address is `from` (lower case): the
    /// address is looked up, then its domain. `Err` names a key the signing
    /// table gives that the key table lacks.
    pub fn lookup(&self, from: &str) -> Result<Option<&KeySpec>, String> {
        let domain = from.rsplit_once('@').map_or(from, |(_, d)| d);
        let name = match self.signing.lookup(from) {
            Some(n) => n,
            None => match self.signing.lookup(domain) {
                Some(n) => n,
                None => return Ok(None),
            },
        };
        let name = name.trim().to_lowercase();
        match self.keys.get(&name) {
            Some(k) => Ok(Some(k)),
            None => Err(format!(
                "dkim_signing_table names key \"{name}\", which dkim_key_table does not have"
            )),
        }
    }

    /// How many keys were loaded.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key was loaded.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// `domain:selector:/path`.
fn parse_entry(value: &str) -> Result<KeySpec, String> {
    let mut parts = value.trim().splitn(3, ':');
    let (Some(domain), Some(selector), Some(path)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("\"{value}\" is not domain:selector:/path/to/key"));
    };
    let ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
    };
    if !ok(domain) || !ok(selector) {
        return Err(format!("\"{value}\": bad domain or selector"));
    }
    let key = PrivateKey::load(Path::new(path)).map_err(|e| match e {
        // Already names the file.
        crate::KeyError::Read(_) => e.to_string(),
        _ => format!("{path}: {e}"),
    })?;
    Ok(KeySpec {
        domain: domain.to_lowercase(),
        selector: selector.to_string(),
        key: Arc::new(key),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_address_then_domain() {
        let dir = tempfile::tempdir().unwrap();
        let k = dir.path().join("k.pem");
        std::fs::write(&k, crate::key::generate_ed25519().unwrap()).unwrap();
        let kt = dir.path().join("keytable");
        std::fs::write(
            &kt,
            format!(
                "main example.com:s1:{}\nboss example.com:s2:{}\n",
                k.display(),
                k.display()
            ),
        )
        .unwrap();
        let st = dir.path().join("signingtable");
        std::fs::write(
            &st,
            "example.com main\nceo@example.com boss\nother.example missing\n",
        )
        .unwrap();
        let r = |s: &std::path::Path| {
            vec![tables::parse_ref(&format!("texthash:{}", s.display())).unwrap()]
        };
        let keys = Keys::open(&r(&st), &r(&kt)).unwrap().unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(
            keys.lookup("x@example.com").unwrap().unwrap().selector,
            "s1"
        );
        assert_eq!(
            keys.lookup("ceo@example.com").unwrap().unwrap().selector,
            "s2"
        );
        assert!(keys.lookup("x@example.net").unwrap().is_none());
        assert!(keys
            .lookup("x@other.example")
            .unwrap_err()
            .contains("\"missing\""));

        std::fs::write(&kt, "main example.com:s1:/nonexistent/key.pem\n").unwrap();
        let e = Keys::open(&r(&st), &r(&kt)).unwrap_err();
        assert!(e.contains("key main: /nonexistent/key.pem"), "{e}");
        let e = Keys::open(&r(&st), &[tables::parse_ref("regexp:/x").unwrap()]).unwrap_err();
        assert!(e.contains("dkim_key_table"), "{e}");
    }
}
