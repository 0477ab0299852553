//! The journal's file operations behind a seam, and a disk that fails on demand.
//!
//! Everything the journal and replay do to segment files (create, write at
//! an offset, `fdatasync`, truncate, fsync of the directory) goes through
//! `Disk` and `DiskFile`, so that tests can put a `FaultyDisk` (feature
//! `fault-injection`) in place of `OsDisk` and fail the Nth write or sync,
//! make a write short, or fill the disk. Reads are not faulted: the faults
//! worth testing are the ones that decide what is durable. Message files
//! (cleanup's, the pool's) do not go through here.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// Where the journal's segments live.
pub trait Disk: Send + Sync + fmt::Debug {
    /// Creates `path`, which must not exist, open for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>>;
    /// Opens an existing `path` for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>>;
    /// Makes the entries of directory `path` durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
}

/// One open segment file.
pub trait DiskFile: Send + Sync + fmt::Debug {
    /// Writes up to `buf.len()` bytes at `offset`; gives how many were written.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Reads up to `buf.len()` bytes at `offset` (fewer at the end of the file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// `fdatasync`.
    fn sync_data(&self) -> io::Result<()>;
    /// `ftruncate`.
    fn set_len(&self, len: u64) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsDisk;

impl Disk for OsDisk {
    fn create(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Arc::new(OsFile(f)))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(OsFile(f)))
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
}

#[derive(Debug)]
struct OsFile(File);

impl DiskFile for OsFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.0.write_at(buf, offset)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

#[cfg(feature = "fault-injection")]
pub use faulty::{Fault, FaultyDisk};

#[cfg(feature = "fault-injection")]
mod faulty {
    use super::{Disk, DiskFile, OsDisk};
    use std::collections::BTreeMap;
    use std::io;
    use std::path::Path;
    use std::sync::{Arc, Mutex, MutexGuard};

    /// What an injected fault does.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Fault {
        /// Fails with "No space left on device" (nothing written).
        NoSpace,
        /// Fails with EIO; a failed sync also loses every byte written
        /// since the last good sync (the page cache dropped them, as
        /// Linux does after a writeback error).
        Io,
        /// A write writes only this many bytes and says so.
        Short(usize),
        /// A sync panics: a bug that kills the thread running it.
        Panic,
    }

    #[derive(Debug, Default)]
    struct Plan {
        writes: u64,
        syncs: u64,
        on_write: BTreeMap<u64, Fault>,
        on_sync: BTreeMap<u64, Fault>,
        full: bool,
        truncate_fails: bool,
    }

    /// A disk that fails the Nth write or sync, or is full; clones share one plan.
    #[derive(Debug, Clone, Default)]
    pub struct FaultyDisk {
        plan: Arc<Mutex<Plan>>,
    }

    impl FaultyDisk {
        /// A disk with no faults planned.
        pub fn new() -> Self {
            Self::default()
        }

        fn plan(&self) -> MutexGuard<'_, Plan> {
            self.plan.lock().unwrap_or_else(|p| p.into_inner())
        }

        /// The `n`th write from now (1 = the next) does `fault`.
        pub fn fail_write(&self, n: u64, fault: Fault) {
            let mut p = self.plan();
            let at = p.writes + n.max(1);
            p.on_write.insert(at, fault);
        }

        /// The `n`th sync from now (1 = the next) does `fault`.
        pub fn fail_sync(&self, n: u64, fault: Fault) {
            let mut p = self.plan();
            let at = p.syncs + n.max(1);
            p.on_sync.insert(at, fault);
        }

        /// While full, every write and every file creation fails with ENOSPC.
        pub fn set_full(&self, full: bool) {
            self.plan().full = full;
        }

        /// While set, truncation fails with EIO.
        pub fn set_truncate_fails(&self, fails: bool) {
            self.plan().truncate_fails = fails;
        }

        /// Writes attempted so far.
        pub fn writes(&self) -> u64 {
            self.plan().writes
        }

        /// Syncs attempted so far.
        pub fn syncs(&self) -> u64 {
            self.plan().syncs
        }
    }

    fn enospc() -> io::Error {
        io::Error::from_raw_os_error(28)
    }

    fn eio() -> io::Error {
        io::Error::from_raw_os_error(5)
    }

    impl Disk for FaultyDisk {
        fn create(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
            if self.plan().full {
                return Err(enospc());
            }
            Ok(Arc::new(FaultyFile {
                inner: OsDisk.create(path)?,
                disk: self.clone(),
                dirty: Mutex::new(Vec::new()),
            }))
        }

        fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
            Ok(Arc::new(FaultyFile {
                inner: OsDisk.open(path)?,
                disk: self.clone(),
                dirty: Mutex::new(Vec::new()),
            }))
        }

        fn sync_dir(&self, path: &Path) -> io::Result<()> {
            OsDisk.sync_dir(path)
        }
    }

    #[derive(Debug)]
    struct FaultyFile {
        inner: Arc<dyn DiskFile>,
        disk: FaultyDisk,
        /// Ranges written since the last good sync: what a failed sync loses.
        dirty: Mutex<Vec<(u64, usize)>>,
    }

    impl FaultyFile {
        fn dirty(&self) -> MutexGuard<'_, Vec<(u64, usize)>> {
            self.dirty.lock().unwrap_or_else(|p| p.into_inner())
        }
    }

    impl DiskFile for FaultyFile {
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
            let fault = {
                let mut p = self.disk.plan();
                p.writes += 1;
                let n = p.writes;
                if p.full {
                    Some(Fault::NoSpace)
                } else {
                    p.on_write.remove(&n)
                }
            };
            let buf = match fault {
                None => buf,
                Some(Fault::NoSpace) => return Err(enospc()),
                Some(Fault::Io) => return Err(eio()),
                Some(Fault::Short(k)) => &buf[..k.min(buf.len())],
                Some(Fault::Panic) => panic!("planted: a write panics"),
            };
            let n = self.inner.write_at(buf, offset)?;
            self.dirty().push((offset, n));
            Ok(n)
        }

        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.inner.read_exact_at(buf, offset)
        }

        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            self.inner.read_at(buf, offset)
        }

        fn sync_data(&self) -> io::Result<()> {
            let fault = {
                let mut p = self.disk.plan();
                p.syncs += 1;
                let n = p.syncs;
                p.on_sync.remove(&n)
            };
            match fault {
                None | Some(Fault::Short(_)) => {
                    self.inner.sync_data()?;
                    self.dirty().clear();
                    Ok(())
                }
                Some(Fault::NoSpace) => Err(enospc()),
                Some(Fault::Panic) => panic!("planted: a sync panics"),
                Some(Fault::Io) => {
                    // The unsynced bytes are gone; zeros read back in their place.
                    for (off, len) in std::mem::take(&mut *self.dirty()) {
                        let _ = self.inner.write_at(&vec![0u8; len], off);
                    }
                    let _ = self.inner.sync_data();
                    Err(eio())
                }
            }
        }

        fn set_len(&self, len: u64) -> io::Result<()> {
            if self.disk.plan().truncate_fails {
                return Err(eio());
            }
            self.inner.set_len(len)
        }
    }
}
