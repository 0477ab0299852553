//! File system figures: free space for the queue's admission checks.

use std::path::Path;

use crate::SysError;

/// Bytes an unprivileged process may still write on the file system that
/// holds `path` (statvfs(2): available blocks times fragment size), as
/// Postfix's `fsspace` measures the queue.
pub fn free_space(path: &Path) -> Result<u64, SysError> {
    let st = nix::sys::statvfs::statvfs(path)
        .map_err(|e| SysError::new(format!("statvfs {}", path.display()), e))?;
    // Both are u64 on 64-bit Linux and narrower elsewhere.
    #[allow(clippy::useless_conversion)]
    let (blocks, size) = (
        u64::from(st.blocks_available()),
        u64::from(st.fragment_size()),
    );
    Ok(blocks.saturating_mul(size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_is_measured_and_errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        // A temporary directory's file system has some room.
        assert!(free_space(dir.path()).unwrap() > 0);
        let missing = dir.path().join("missing");
        let e = free_space(&missing).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }
}
