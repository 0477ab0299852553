//! Pipe delivery: a command run with the message on its standard input.
//!
//! As Postfix local(8): `/bin/sh -c command` with a clean environment (the
//! caller's `SENDER`, `RECIPIENT`, `USER`, `HOME`, `EXTENSION`, ... and
//! `PATH=/usr/bin:/bin`), in its own process group, as the given uid/gid
//! when we are root, killed after `command_time_limit`. Exit status 0 is
//! delivered, 75 (EX_TEMPFAIL) deferred, anything else bounced; a time-out
//! is deferred. The first line of the command's output goes into the reason.
//! The message is written to the command's input as it is read (a
//! [`Input`] streams it), so a large one is never held whole; a message
//! that cannot be read ends the command (killed, so that it cannot act on
//! half a message) and defers.

use mail::StatusCode;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::mailbox::Failure;

/// sysexits.h EX_TEMPFAIL.
pub const EX_TEMPFAIL: i32 = 75;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// exit(n).
    Exit(i32),
    /// Killed by a signal.
    Signal(i32),
    /// Killed by us after the time limit.
    TimedOut,
}

/// What a command reads on its standard input.
pub trait Input: Sync {
    /// Writes all of the input to `w`. A write that fails ends it quietly
    /// (a command need not read its input); `Err` only when the input
    /// itself could not be read, with the reason.
    fn feed(&self, w: &mut dyn Write) -> Result<(), String>;
}

impl Input for &[u8] {
    fn feed(&self, w: &mut dyn Write) -> Result<(), String> {
        let _ = w.write_all(self);
        Ok(())
    }
}

/// One pipe delivery.
pub struct PipeJob<'a, I: Input = &'a [u8]> {
    /// The command line.
    pub command: &'a str,
    /// The message (LF line ends).
    pub input: I,
    /// The environment.
    pub env: Vec<(&'static str, String)>,
    /// uid and gid to run as (root only).
    pub ids: Option<(u32, u32)>,
    /// Working directory.
    pub dir: std::path::PathBuf,
    /// `command_time_limit`.
    pub timeout: Duration,
}

/// Maps how a command ended to a delivery result (Postfix local(8) rules).
pub fn map_status(command: &str, ended: Ended, output: &str) -> Result<(), Failure> {
    let out = if output.is_empty() {
        String::new()
    } else {
        format!(". Command output: {output}")
    };
    match ended {
        Ended::Exit(0) => Ok(()),
        Ended::Exit(EX_TEMPFAIL) => Err(Failure::defer(
            StatusCode::known(4, 3, 0),
            format!("temporary failure. Command \"{command}\" exited with status 75{out}"),
        )),
        Ended::Exit(n) => Err(Failure::bounce(
            StatusCode::known(5, 3, 0),
            format!("Command died with status {n}: \"{command}\"{out}"),
        )),
        Ended::Signal(s) => Err(Failure::bounce(
            StatusCode::known(5, 3, 0),
            format!(
                "Command died with signal {}: \"{command}\"{out}",
                sys::process::signal_name(s)
            ),
        )),
        Ended::TimedOut => Err(Failure::defer(
            StatusCode::known(4, 3, 0),
            format!("Command time limit exceeded: \"{command}\"{out}"),
        )),
    }
}

/// Runs the job and maps its end to a result.
pub fn run<I: Input>(job: &PipeJob<'_, I>) -> Result<(), Failure> {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(job.command)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(job.env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(&job.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some((uid, gid)) = job.ids {
        // std drops supplementary groups when root changes uid.
        cmd.uid(uid).gid(gid);
    }
    let mut child = cmd.spawn().map_err(|e| {
        Failure::defer(
            StatusCode::known(4, 3, 0),
            format!("cannot run \"{}\": {e}", job.command),
        )
    })?;
    let pid = child.id() as i32;
    let stdin = child.stdin.take();
    let outputs: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .collect();
    // Scoped: the writer reads the message where it is, borrowed.
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || {
            let mut s = stdin?;
            let fed = job.input.feed(&mut s);
            if fed.is_err() {
                // Half a message must not be acted upon.
                let _ = sys::process::signal(-pid, 9);
            }
            fed.err()
        });
        let readers: Vec<_> = outputs
            .into_iter()
            .map(|mut s| {
                scope.spawn(move || {
                    let mut buf = Vec::new();
                    let _ = (&mut s).take(4096).read_to_end(&mut buf);
                    // Drain the rest so the command never blocks on a full pipe.
                    let _ = std::io::copy(&mut s, &mut std::io::sink());
                    buf
                })
            })
            .collect();
        let deadline = Instant::now() + job.timeout;
        let ended = loop {
            match child.try_wait() {
                Ok(Some(st)) => {
                    break match (st.code(), st.signal()) {
                        (Some(c), _) => Ended::Exit(c),
                        (None, Some(s)) => Ended::Signal(s),
                        _ => Ended::Exit(1),
                    }
                }
                Ok(None) if Instant::now() >= deadline => {
                    let _ = sys::process::signal(-pid, 9);
                    let _ = child.wait();
                    break Ended::TimedOut;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => {
                    let _ = sys::process::signal(-pid, 9);
                    return Err(Failure::defer(
                        StatusCode::known(4, 3, 0),
                        format!("waiting for \"{}\": {e}", job.command),
                    ));
                }
            }
        };
        // The process group may still hold the pipes open: it is gone or
        // killed by now unless the command left children behind, which we end.
        let _ = sys::process::signal(-pid, 9);
        let unread = writer.join().unwrap_or(None);
        let mut output = Vec::new();
        for r in readers {
            output.extend(r.join().unwrap_or_default());
        }
        if let Some(e) = unread {
            return Err(Failure::defer(
                StatusCode::known(4, 3, 0),
                format!("cannot read the message for \"{}\": {e}", job.command),
            ));
        }
        let text = String::from_utf8_lossy(&output);
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let first: String = first.chars().take(200).collect();
        map_status(job.command, ended, first.trim())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_map_as_postfix_local() {
        let ok = map_status("c", Ended::Exit(0), "");
        assert_eq!(ok, Ok(()));
        let cases = [
            (Ended::Exit(75), "4.3.0"),
            (Ended::Exit(1), "5.3.0"),
            (Ended::Exit(67), "5.3.0"),
            (Ended::Signal(9), "5.3.0"),
            (Ended::TimedOut, "4.3.0"),
        ];
        for (ended, enh) in cases {
            let f = map_status("c", ended, "out").unwrap_err();
            assert_eq!(f.status.to_string(), enh, "{ended:?}");
            assert!(f.text.contains("Command output: out"), "{}", f.text);
        }
    }

    fn job<'a>(command: &'a str, input: &'a [u8], timeout: Duration) -> PipeJob<'a> {
        PipeJob {
            command,
            input,
            env: vec![("RECIPIENT", "r@x".into())],
            ids: None,
            dir: std::env::temp_dir(),
            timeout,
        }
    }

    /// Input that breaks off after a first piece, as a message whose
    /// queue file cannot be read midway.
    struct Broken;

    impl Input for Broken {
        fn feed(&self, w: &mut dyn Write) -> Result<(), String> {
            let _ = w.write_all(b"first half\n");
            let _ = w.flush();
            // Let the command read it: it must not get to act on it.
            std::thread::sleep(Duration::from_millis(200));
            Err("spool gone".into())
        }
    }

    #[test]
    fn a_message_that_cannot_be_read_kills_the_command_and_defers() {
        let _serial = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let cmd = format!("cat > {0}.part && mv {0}.part {0}", out.display());
        let job = PipeJob {
            command: &cmd,
            input: Broken,
            env: vec![],
            ids: None,
            dir: std::env::temp_dir(),
            timeout: Duration::from_secs(10),
        };
        let e = run(&job).unwrap_err();
        assert_eq!(e.status.to_string(), "4.3.0");
        assert!(e.text.contains("spool gone"), "{}", e.text);
        assert!(!out.exists(), "the command finished with half a message");
    }

    #[test]
    fn commands_run_with_a_clean_environment_and_a_time_limit() {
        let _serial = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let cmd = format!("cat > {0}; env | sort >> {0}", out.display());
        run(&job(&cmd, b"hello\n", Duration::from_secs(10))).unwrap();
        let got = std::fs::read_to_string(&out).unwrap();
        assert!(got.starts_with("hello\n"), "{got}");
        assert!(got.contains("RECIPIENT=r@x\n"), "{got}");
        assert!(got.contains("PATH=/usr/bin:/bin\n"), "{got}");
        assert!(!got.contains("CARGO"), "{got}");
        let e = run(&job(
            "echo no such user; exit 67",
            b"",
            Duration::from_secs(10),
        ));
        assert!(e.unwrap_err().text.contains("no such user"));
        let e = run(&job("exit 75", b"", Duration::from_secs(10))).unwrap_err();
        assert_eq!(e.status.class(), 4);
        let t = Instant::now();
        let e = run(&job("sleep 30", b"", Duration::from_millis(200))).unwrap_err();
        assert!(e.text.contains("time limit"), "{}", e.text);
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
