//! The policy cache on disk: `sts/policy/<domain>` under the queue directory.
//!
//! router(8) writes an entry when it has fetched a policy; smtp(8) reads
//! it when it opens a connection for that domain, so both see one policy
//! and it outlives restarts, as RFC 8461 section 5.1 wants (a cached
//! policy is used until its `max_age` runs out, whatever DNS says in the
//! meantime). An entry is the TXT id it was fetched under, the fetch time
//! and the policy text as served; it is written to a temporary file and
//! renamed, so a reader never sees half of one. An entry that does not
//! parse is treated as absent.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::policy::{self, Mode, Policy};

/// One cached policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    /// The `id` of the `_mta-sts` record it was fetched under.
    pub id: String,
    /// When it was fetched, seconds since the epoch.
    pub fetched: u64,
    /// The policy text as served (for the reports' `policy-string`).
    pub text: String,
    /// The policy.
    pub policy: Policy,
}

impl Cached {
    /// When it stops being usable, seconds since the epoch.
    pub fn expires(&self) -> u64 {
        self.fetched.saturating_add(self.policy.max_age)
    }

    /// Whether it may still be used at `now`.
    pub fn valid(&self, now: u64) -> bool {
        now < self.expires()
    }

    /// Whether it is time to fetch it again in the background: in the
    /// last quarter of its life, or in its last day, whichever is later
    /// (section 5.1: refresh well before expiry, so a domain's outage
    /// cannot make senders lose it).
    pub fn refresh_due(&self, now: u64) -> bool {
        let left = self.policy.max_age / 4;
        let left = left.max(86_400.min(self.policy.max_age / 2));
        now.saturating_add(left) >= self.expires()
    }

    /// Whether the policy asks anything of senders (`none` does not).
    pub fn active(&self) -> bool {
        self.policy.mode != Mode::None
    }
}

/// Whether `domain` can name a cache file: a lower-case host name.
fn safe(domain: &str) -> bool {
    !domain.is_empty()
        && domain.len() <= 253
        && !domain.starts_with('.')
        && !domain.contains("..")
        && domain
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// The cache file of `domain` (lower case) under queue directory `root`.
pub fn path(root: &Path, domain: &str) -> Option<PathBuf> {
    safe(domain).then(|| root.join("sts/policy").join(domain))
}

/// The cached policy of `domain`, if there is a readable one.
pub fn load(root: &Path, domain: &str) -> Option<Cached> {
    let text = std::fs::read_to_string(path(root, domain)?).ok()?;
    decode(&text)
}

/// Writes the entry of `domain`.
pub fn store(root: &Path, domain: &str, c: &Cached) -> std::io::Result<()> {
    let p = path(root, domain).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a domain name")
    })?;
    let dir = root.join("sts/policy");
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(".{domain}.{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(encode(c).as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, &p)
}

fn encode(c: &Cached) -> String {
    format!("id: {}\nfetched: {}\n\n{}", c.id, c.fetched, c.text)
}

fn decode(s: &str) -> Option<Cached> {
    let (head, text) = s.split_once("\n\n")?;
    let mut id = None;
    let mut fetched = None;
    for l in head.lines() {
        match l.split_once(": ")? {
            ("id", v) => id = Some(v.to_string()),
            ("fetched", v) => fetched = v.parse().ok(),
            _ => {}
        }
    }
    Some(Cached {
        id: id?,
        fetched: fetched?,
        text: text.to_string(),
        policy: policy::parse(text).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str =
        "version: STSv1\r\nmode: testing\r\nmx: *.example.test\r\nmax_age: 86400\r\n";

    #[test]
    fn entries_round_trip_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cached {
            id: "abc1".into(),
            fetched: 1_000_000,
            text: TEXT.into(),
            policy: policy::parse(TEXT).unwrap(),
        };
        store(dir.path(), "example.test", &c).unwrap();
        let back = load(dir.path(), "example.test").unwrap();
        assert_eq!(back, c);
        assert!(back.valid(1_000_000 + 86_399));
        assert!(!back.valid(1_000_000 + 86_400));
        assert!(!back.refresh_due(1_000_000 + 40_000));
        assert!(back.refresh_due(1_000_000 + 43_200));
        assert!(load(dir.path(), "other.test").is_none());
    }

    #[test]
    fn hostile_domains_name_no_file() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["../etc", "a/b", "", ".x", "A.test", "a..b"] {
            assert!(path(dir.path(), d).is_none(), "{d}");
        }
        std::fs::create_dir_all(dir.path().join("sts/policy")).unwrap();
        std::fs::write(
            dir.path().join("sts/policy/bad.test"),
            "id: x\nfetched: 1\n\n<html>",
        )
        .unwrap();
        assert!(load(dir.path(), "bad.test").is_none());
    }
}
