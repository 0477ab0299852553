//! The control protocol: `sluice` asking master about the running system.
//!
//! Served on `$queue_directory/pid/master.sock`; master answers only root,
//! its own uid and mail_owner (checked with SO_PEERCRED).

use serde::{Deserialize, Serialize};

/// Marker type for the control protocol.
#[derive(Debug)]
pub enum Control {}

impl crate::Protocol for Control {
    const NAME: &'static str = "sluice-control";
    const VERSION: u32 = 1;
    type Request = Request;
    type Response = Response;
}

/// What `sluice` asks master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// The services and processes right now.
    Status,
    /// Re-read the configuration, as SIGHUP does.
    Reload,
    /// Stop gracefully, as SIGTERM does.
    Stop,
}

/// master's answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to `Status`.
    Status(MasterStatus),
    /// The request was carried out or started.
    Done,
    /// The request was refused, with the reason.
    Refused(String),
}

/// The whole system as master sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MasterStatus {
    /// master's pid.
    pub pid: i32,
    /// When master started, in seconds since the epoch.
    pub started: u64,
    /// The configuration directory.
    pub config_directory: String,
    /// The queue directory.
    pub queue_directory: String,
    /// Whether master runs without privileges (no identity changes).
    pub unprivileged: bool,
    /// One entry per master.cf service.
    pub services: Vec<ServiceStatus>,
}

/// One master.cf service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceStatus {
    /// The service name as in master.cf.
    pub name: String,
    /// `inet` or `unix`.
    pub kind: String,
    /// The command run.
    pub command: String,
    /// Where it listens (addresses or socket paths).
    pub listen: Vec<String>,
    /// Its process limit; 0 = none.
    pub maxproc: u32,
    /// Seconds left of a throttle after failed starts; 0 = not throttled.
    pub throttled_for: u64,
    /// Its live processes.
    pub processes: Vec<ProcessStatus>,
}

/// One child process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStatus {
    /// Its pid.
    pub pid: i32,
    /// `available` or `busy`, or `starting` before its first report.
    pub state: String,
    /// Clients served so far.
    pub uses: u32,
    /// When it started, in seconds since the epoch.
    pub started: u64,
}
