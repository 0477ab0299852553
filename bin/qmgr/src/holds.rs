//! The saved shaping holds: `state/shaping.holds` in the queue directory
//! (mail_owner's: the queue directory itself is root's when master runs
//! privileged), replaced whole (write, fsync, rename, fsync the
//! directory) so that a crash leaves the old list or the new, never half
//! of one. A file an older release left at the top is still read.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The file's path under the queue directory.
pub fn path(root: &Path) -> PathBuf {
    root.join("state/shaping.holds")
}

/// Replaces the saved holds with `text`.
pub fn save(root: &Path, text: &str) -> io::Result<()> {
    let dir = root.join("state");
    fs::create_dir_all(&dir)?;
    let to = path(root);
    let tmp = dir.join("shaping.holds.tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, &to)?;
    File::open(&dir)?.sync_all()
}

/// The saved holds, empty when none were saved.
pub fn load(root: &Path) -> io::Result<String> {
    for p in [path(root), root.join("shaping.holds")] {
        match fs::read_to_string(&p) {
            Ok(t) => return Ok(t),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_holds_replace_the_old_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), "");
        save(dir.path(), "1\tone\n").unwrap();
        save(dir.path(), "2\ttwo\n").unwrap();
        assert_eq!(load(dir.path()).unwrap(), "2\ttwo\n");
        assert!(!dir.path().join("state/shaping.holds.tmp").exists());
    }
}
