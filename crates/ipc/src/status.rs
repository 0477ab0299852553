//! The master ↔ child status contract.
//!
//! Like Postfix's master_proto: master starts each child with fixed
//! descriptors, and the child reports over a pipe whether it can take more
//! clients. Records are fixed-size and under PIPE_BUF, so writes from the
//! many children sharing one pipe never interleave.
//!
//! Descriptors in the child: 3 = status pipe (write end), 4 = life pipe
//! (read end; it reaches end-of-file when master dies, so children never
//! outlive it), 5.. = the service's listening sockets.

/// Descriptor of the status pipe in a child.
pub const STATUS_FD: i32 = 3;
/// Descriptor of the life pipe in a child.
pub const LIFE_FD: i32 = 4;
/// Descriptor of the first listening socket in a child.
pub const FIRST_LISTEN_FD: i32 = 5;
/// Environment variable holding the number of listening sockets passed.
pub const LISTEN_FDS_ENV: &str = "SLUICE_LISTEN_FDS";
/// Environment variable naming the configuration directory.
pub const CONFIG_DIR_ENV: &str = "SLUICE_CONFIG_DIR";
/// Environment variable telling a child it runs in the foreground (log to stderr).
pub const FOREGROUND_ENV: &str = "SLUICE_FOREGROUND";

/// What a child says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    /// Ready and able to take another client.
    Available,
    /// Working, or full: master should not count on it for new clients.
    Busy,
}

/// One status report: 12 bytes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusRecord {
    /// The reporting child's pid.
    pub pid: i32,
    /// Its state.
    pub state: ChildState,
    /// Clients it has served so far.
    pub uses: u32,
}

/// Size of an encoded record.
pub const RECORD_LEN: usize = 12;

impl StatusRecord {
    /// Encodes the record.
    pub fn to_bytes(self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[..4].copy_from_slice(&self.pid.to_le_bytes());
        b[4..8].copy_from_slice(&(self.state as u32).to_le_bytes());
        b[8..].copy_from_slice(&self.uses.to_le_bytes());
        b
    }

    /// Decodes a record; `None` for an unknown state word.
    pub fn from_bytes(b: &[u8; RECORD_LEN]) -> Option<StatusRecord> {
        let pid = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let state = match u32::from_le_bytes([b[4], b[5], b[6], b[7]]) {
            0 => ChildState::Available,
            1 => ChildState::Busy,
            _ => return None,
        };
        let uses = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        Some(StatusRecord { pid, state, uses })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip() {
        let r = StatusRecord {
            pid: 4242,
            state: ChildState::Busy,
            uses: 7,
        };
        assert_eq!(StatusRecord::from_bytes(&r.to_bytes()), Some(r));
        let mut bad = r.to_bytes();
        bad[4] = 9;
        assert_eq!(StatusRecord::from_bytes(&bad), None);
    }
}
