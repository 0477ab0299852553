//! The receiver's ledger: every transfer id it has taken, durable, so that
//! a retried transfer is recognised after the message was delivered and
//! removed here (the mover crashed after the acceptance and before
//! removing its copy: it offers the message again).
//!
//! One line per transfer, `TRANSFER QUEUEID SECONDS`, appended and
//! synced before the acceptance goes out. Entries older than the
//! retention (long past any retry a mover would make) are dropped when
//! the ledger is opened and whenever its owner compacts it (transferd:
//! daily), by writing the rest to a new file and renaming it over the old. A torn last line (a crash mid-append) is ignored: its
//! transfer was never accepted. Nothing here panics on file contents.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// The transfer ids taken, and the file behind them.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    file: File,
    taken: HashMap<String, (String, u64)>,
    unsynced: Vec<u8>,
}

fn ctx(op: &str, path: &Path, e: io::Error) -> String {
    format!("{op} {}: {e}", path.display())
}

impl Ledger {
    /// Opens (creating) the ledger at `path`, dropping entries older than
    /// `keep_secs` before `now_secs`.
    pub fn open(path: &Path, now_secs: u64, keep_secs: u64) -> Result<Ledger, String> {
        let mut taken = HashMap::new();
        let mut dropped = 0usize;
        match File::open(path) {
            Ok(f) => {
                for line in BufReader::new(f).split(b'\n') {
                    let line = line.map_err(|e| ctx("read", path, e))?;
                    let Ok(text) = std::str::from_utf8(&line) else {
                        continue;
                    };
                    let mut parts = text.split(' ');
                    let (Some(t), Some(id), Some(at), None) =
                        (parts.next(), parts.next(), parts.next(), parts.next())
                    else {
                        continue;
                    };
                    let Ok(at) = at.parse::<u64>() else {
                        continue;
                    };
                    if at.saturating_add(keep_secs) < now_secs {
                        dropped += 1;
                        continue;
                    }
                    taken.insert(t.to_string(), (id.to_string(), at));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(ctx("open", path, e)),
        }
        if dropped > 0 {
            rewrite(path, &taken)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| ctx("open", path, e))?;
        // End a torn last line, so the next entry is not glued to it.
        let torn = fs::read(path)
            .map(|b| b.last().is_some_and(|&c| c != b'\n'))
            .unwrap_or(false);
        if torn {
            file.write_all(b"\n")
                .and_then(|_| file.sync_data())
                .map_err(|e| ctx("append to", path, e))?;
        }
        if let Some(dir) = path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| ctx("fsync", dir, e))?;
        }
        Ok(Ledger {
            path: path.to_path_buf(),
            file,
            taken,
            unsynced: Vec::new(),
        })
    }

    /// The queue id a transfer was taken as, if it was.
    pub fn get(&self, transfer: &str) -> Option<&str> {
        self.taken.get(transfer).map(|(id, _)| id.as_str())
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.taken.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.taken.is_empty()
    }

    /// Notes a transfer taken as `id`; durable after [`Ledger::sync`].
    /// A transfer id with a space or newline in it could not be read
    /// back: refused.
    pub fn add(&mut self, transfer: &str, id: &str, now_secs: u64) -> Result<(), String> {
        if transfer.is_empty() || transfer.contains([' ', '\n', '\r']) {
            return Err(format!(
                "transfer id {transfer:?} has a space or line break"
            ));
        }
        self.unsynced
            .extend_from_slice(format!("{transfer} {id} {now_secs}\n").as_bytes());
        self.taken
            .insert(transfer.to_string(), (id.to_string(), now_secs));
        Ok(())
    }

    /// Drops the entries older than `keep_secs` before `now_secs` and
    /// rewrites the file without them (nothing dropped, nothing written);
    /// how many went.
    pub fn compact(&mut self, now_secs: u64, keep_secs: u64) -> Result<usize, String> {
        self.sync()?;
        let before = self.taken.len();
        self.taken
            .retain(|_, (_, at)| at.saturating_add(keep_secs) >= now_secs);
        let dropped = before - self.taken.len();
        if dropped > 0 {
            rewrite(&self.path, &self.taken)?;
            self.file = OpenOptions::new()
                .append(true)
                .open(&self.path)
                .map_err(|e| ctx("open", &self.path, e))?;
        }
        Ok(dropped)
    }

    /// Writes and syncs what was added: one `fdatasync` for many.
    pub fn sync(&mut self) -> Result<(), String> {
        if self.unsynced.is_empty() {
            return Ok(());
        }
        self.file
            .write_all(&self.unsynced)
            .and_then(|_| self.file.sync_data())
            .map_err(|e| ctx("append to", &self.path, e))?;
        self.unsynced.clear();
        Ok(())
    }
}

/// Replaces the file at `path` with `taken`, durably: a new file synced,
/// renamed over the old, the directory synced.
fn rewrite(path: &Path, taken: &HashMap<String, (String, u64)>) -> Result<(), String> {
    let tmp = path.with_extension("new");
    let mut out = Vec::new();
    for (t, (id, at)) in taken {
        out.extend_from_slice(format!("{t} {id} {at}\n").as_bytes());
    }
    let mut f = File::create(&tmp).map_err(|e| ctx("create", &tmp, e))?;
    f.write_all(&out).map_err(|e| ctx("write", &tmp, e))?;
    f.sync_data().map_err(|e| ctx("fdatasync", &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| ctx("rename", path, e))?;
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| ctx("fsync", dir, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taken_ids_survive_a_reopen_and_old_ones_age_out() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ledger");
        let mut l = Ledger::open(&p, 1000, 500).unwrap();
        l.add("a/1", "Q1", 600).unwrap();
        l.add("a/2", "Q2", 900).unwrap();
        l.sync().unwrap();
        assert!(l.add("a b", "Q3", 900).is_err());
        drop(l);
        // A torn last line from a crash mid-append is not an entry.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"a/3 Q3").unwrap();
        let mut l = Ledger::open(&p, 1000, 500).unwrap();
        assert_eq!(
            (l.get("a/1"), l.get("a/2"), l.get("a/3")),
            (Some("Q1"), Some("Q2"), None)
        );
        l.add("a/4", "Q4", 950).unwrap();
        l.sync().unwrap();
        drop(l);
        assert_eq!(Ledger::open(&p, 1000, 500).unwrap().get("a/4"), Some("Q4"));
        // Past the retention: a/1 goes, and the file is rewritten without it.
        let l = Ledger::open(&p, 1200, 500).unwrap();
        assert_eq!((l.get("a/1"), l.get("a/2"), l.len()), (None, Some("Q2"), 2));
        let text = fs::read_to_string(&p).unwrap();
        assert!(
            !text.contains("a/1") && text.contains("a/2 Q2 900\n"),
            "{text}"
        );
    }

    #[test]
    fn a_running_ledger_compacts_without_losing_what_it_adds_after() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ledger");
        let mut l = Ledger::open(&p, 1000, 500).unwrap();
        l.add("a/1", "Q1", 1000).unwrap();
        l.add("a/2", "Q2", 1400).unwrap();
        l.sync().unwrap();
        assert_eq!(l.compact(1450, 500).unwrap(), 0, "nothing old yet");
        assert_eq!(l.compact(1600, 500).unwrap(), 1);
        assert_eq!((l.get("a/1"), l.get("a/2")), (None, Some("Q2")));
        // Appends after a compaction go to the new file.
        l.add("a/3", "Q3", 1600).unwrap();
        l.sync().unwrap();
        drop(l);
        let text = fs::read_to_string(&p).unwrap();
        assert!(
            !text.contains("a/1")
                && text.contains("a/2 Q2 1400\n")
                && text.contains("a/3 Q3 1600\n"),
            "{text}"
        );
        let l = Ledger::open(&p, 1600, 500).unwrap();
        assert_eq!((l.len(), l.get("a/3")), (2, Some("Q3")));
    }
}
