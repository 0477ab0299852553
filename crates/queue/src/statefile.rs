//! Small files of saved state under the queue directory (qmgr's shaping
//! holds, its address verification cache), mail_owner's, each replaced
//! whole by a write to a temporary beside it and a rename, so that a
//! crash leaves the old file or the new one. Hard state is also synced
//! (the file, then its directory: [`replace_synced`]); soft state is not
//! ([`replace`]), and a crash may leave a new file whose last line is
//! cut short, which its reader skips.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// `path` with `.tmp` added: where a new version is written first.
fn tmp_of(path: &Path) -> PathBuf {
    let mut tmp = OsString::from(path.as_os_str());
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

fn write_tmp(path: &Path, text: &str, sync: bool) -> io::Result<PathBuf> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let tmp = tmp_of(path);
    let mut f = File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    if sync {
        f.sync_all()?;
    }
    Ok(tmp)
}

/// Replaces `path` with `text`, durably: written, synced, renamed, and
/// the directory synced.
pub fn replace_synced(path: &Path, text: &str) -> io::Result<()> {
    let tmp = write_tmp(path, text, true)?;
    fs::rename(&tmp, path)?;
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// Replaces `path` with `text`, not synced.
pub fn replace(path: &Path, text: &str) -> io::Result<()> {
    let tmp = write_tmp(path, text, false)?;
    fs::rename(&tmp, path)
}

/// The text of the first of `paths` that exists (a file an older release
/// kept elsewhere is still read), empty when none does. A file cut short
/// may end inside a character: that is kept as a replacement character.
pub fn read<P: AsRef<Path>>(paths: &[P]) -> io::Result<String> {
    for p in paths {
        match fs::read(p.as_ref()) {
            Ok(b) => return Ok(String::from_utf8_lossy(&b).into_owned()),
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
    fn a_state_file_is_replaced_whole_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state/shaping.holds");
        assert_eq!(read(&[&p]).unwrap(), "");
        replace_synced(&p, "1\tone\n").unwrap();
        replace_synced(&p, "2\ttwo\n").unwrap();
        assert_eq!(read(&[&p]).unwrap(), "2\ttwo\n");
        assert!(!dir.path().join("state/shaping.holds.tmp").exists());
        let v = dir.path().join("state/verify_cache");
        replace(&v, "a\n").unwrap();
        replace(&v, "b\n").unwrap();
        assert_eq!(read(&[&v]).unwrap(), "b\n");
        assert!(!dir.path().join("state/verify_cache.tmp").exists());
    }

    #[test]
    fn an_older_location_is_read_when_the_new_one_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("state/shaping.holds");
        let old = dir.path().join("shaping.holds");
        fs::write(&old, "old\n").unwrap();
        assert_eq!(read(&[&new, &old]).unwrap(), "old\n");
        replace_synced(&new, "new\n").unwrap();
        assert_eq!(read(&[&new, &old]).unwrap(), "new\n");
        let cut = dir.path().join("cut");
        fs::write(&cut, b"caf\xc3").unwrap();
        assert_eq!(read(&[&cut]).unwrap(), "caf\u{fffd}");
    }
}
