//! The saved address verification cache, `address_verify_map`
//! (`state/verify_cache` under the queue directory by default,
//! mail_owner's). Soft state: replaced whole by a write and a rename, not
//! synced, so that a crash leaves the old file, the new one, or a new one
//! whose last line is cut short (which the cache skips when it loads).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Replaces the saved cache with `text`.
pub fn save(to: &Path, text: &str) -> io::Result<()> {
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut tmp = to.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    fs::rename(&tmp, to)
}

/// The saved cache, empty when none was saved.
pub fn load(from: &Path) -> io::Result<String> {
    match fs::read(from) {
        // A file cut short may end inside a character.
        Ok(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_saved_cache_is_replaced_whole_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state/verify_cache");
        assert_eq!(load(&p).unwrap(), "");
        save(&p, "a\n").unwrap();
        save(&p, "b\n").unwrap();
        assert_eq!(load(&p).unwrap(), "b\n");
        assert!(!dir.path().join("state/verify_cache.tmp").exists());
    }
}
