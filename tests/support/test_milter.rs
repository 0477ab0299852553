//! The Python test milter (`tests/scripts/test_milter.py`, on Debian's
//! python3-milter) that `tests/milter.rs` and `tests/milter_sendmail.rs`
//! drive: every action chosen by the addresses and the Subject:.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{wait_for, Kill};

/// Debian's Python, which has Debian's python3-milter (not a python3
/// earlier in PATH, such as pyenv's).
const PYTHON: &str = "/usr/bin/python3";

/// The Python test milter on a Unix socket in its own directory.
pub struct TestMilter {
    _proc: Kill,
    dir: tempfile::TempDir,
}

impl TestMilter {
    /// Starts it on a socket in a directory of its own.
    pub fn start() -> TestMilter {
        let probe = Command::new(PYTHON)
            .args(["-c", "import Milter"])
            .output()
            .expect("python3");
        assert!(
            probe.status.success(),
            "python3-milter is not installed (scripts/test installs it): {}",
            String::from_utf8_lossy(&probe.stderr)
        );
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/test_milter.py");
        let socket = dir.path().join("milter.sock");
        let log = dir.path().join("milter.log");
        let proc = Command::new(PYTHON)
            .arg(script)
            .arg(&socket)
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the test milter");
        let m = TestMilter {
            _proc: Kill(proc),
            dir,
        };
        wait_for(20, "the test milter's socket", || {
            std::os::unix::net::UnixStream::connect(m.socket())
                .ok()
                .map(drop)
        });
        m
    }

    /// Its socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("milter.sock")
    }

    /// What it was told, one event a line.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("milter.log")).unwrap_or_default()
    }
}
