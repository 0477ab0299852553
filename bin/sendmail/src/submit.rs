//! Submitting to cleanup over `public/submit`, and the queue commands.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use config::Config;
use ipc::cleanup::Origin;
use ipc::queuectl::{self, QueueCtl};
use ipc::submission::SubmitError;
use mail::{Envelope, Recipient};

use crate::args::Args;
use crate::message::{addresses, fields, Converter};
use crate::{ex, fatal};

/// Header bytes read for `-t` before giving up.
const MAX_HEADERS: usize = 1 << 20;

fn login() -> String {
    let uid = sys::current_ids().0;
    sys::privilege::lookup_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| format!("uid{uid}"))
}

/// Qualifies a bare local name with `myorigin` and checks the syntax.
pub fn qualify(addr: &str, origin: &str) -> Result<String, String> {
    let a = addr.trim().trim_start_matches('<').trim_end_matches('>');
    let full = if a.is_empty() || a.contains('@') {
        a.to_string()
    } else {
        format!("{a}@{origin}")
    };
    if full.is_empty() {
        return Ok(full);
    }
    let text = format!("<{full}>");
    match smtp_proto::address::parse_path(&text, true) {
        Ok((_, "")) => Ok(full),
        _ => Err(format!("bad address syntax: {addr}")),
    }
}

/// A connection to cleanup's submission socket.
pub struct Submission {
    inner: ipc::submission::Submission,
}

impl Submission {
    /// Connects and starts a message; `Err` carries the exit code and message.
    pub fn begin(
        cfg: &Config,
        envelope: Envelope,
        full_name: Option<String>,
    ) -> Result<Self, (i32, String)> {
        let sock = PathBuf::from(cfg.str("queue_directory")).join("public/submit");
        let origin = Origin::Local {
            user: login(),
            full_name,
        };
        match ipc::submission::Submission::begin(&sock, Duration::from_secs(300), envelope, origin)
        {
            Ok(inner) => Ok(Submission { inner }),
            Err(SubmitError::Connect(e)) => Err((
                ex::TEMPFAIL,
                format!("the mail system is not accepting mail: connect to {e}"),
            )),
            Err(e @ SubmitError::Refused(_)) => Err((exit_of(&e), e.to_string())),
            Err(e @ SubmitError::Unexpected(_)) => Err((ex::SOFTWARE, e.to_string())),
            Err(e @ SubmitError::Link(_)) => Err((ex::TEMPFAIL, e.to_string())),
        }
    }

    /// Sends content (wire format).
    pub fn data(&mut self, bytes: &[u8]) -> Result<(), (i32, String)> {
        self.inner
            .data(bytes)
            .map_err(|e| (ex::TEMPFAIL, e.to_string()))
    }

    /// Ends the message; `Ok(queue id)` once it is queued.
    pub fn end(self) -> Result<String, SubmitError> {
        self.inner.end()
    }
}

/// sendmail's exit status for a submission that failed: a permanent
/// refusal is the data's fault, anything else may pass.
fn exit_of(e: &SubmitError) -> i32 {
    if e.is_permanent() {
        ex::DATAERR
    } else {
        ex::TEMPFAIL
    }
}

/// Reads the message on stdin and queues it.
pub fn deliver(cfg: &Config, args: &Args) -> i32 {
    let origin = cfg.str("myorigin");
    let sender = match &args.sender {
        Some(s) => match qualify(s, &origin) {
            Ok(s) => s,
            Err(e) => return fatal(ex::USAGE, e),
        },
        None => format!("{}@{origin}", login()),
    };
    let mut rcpts = Vec::new();
    for r in &args.recipients {
        match qualify(r, &origin) {
            Ok(q) => rcpts.push(q),
            Err(e) => return fatal(ex::NOUSER, e),
        }
    }
    let mut stdin = std::io::stdin().lock();
    let mut conv = Converter::new(args.ignore_dots);
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending = Vec::new();
    let mut eof = false;
    // With -t the header section decides the recipients: read it first.
    if args.from_headers {
        loop {
            if let Some(end) = find_header_end(&pending) {
                let rest = pending.split_off(end);
                let mut kept = Vec::new();
                for (name, text) in fields(&pending) {
                    if matches!(name.as_str(), "to" | "cc" | "bcc") {
                        let value = String::from_utf8_lossy(&text);
                        let value = value.split_once(':').map(|(_, v)| v).unwrap_or("");
                        for a in addresses(&value.replace("\r\n", "")) {
                            match qualify(&a, &origin) {
                                Ok(q) => rcpts.push(q),
                                Err(e) => return fatal(ex::NOUSER, e),
                            }
                        }
                    }
                    // Bcc: is for the envelope only.
                    if name != "bcc" {
                        kept.extend_from_slice(&text);
                    }
                }
                kept.extend_from_slice(&rest);
                pending = kept;
                break;
            }
            if eof || conv.ended() || pending.len() > MAX_HEADERS {
                break;
            }
            match stdin.read(&mut buf) {
                Ok(0) => {
                    eof = true;
                    conv.finish(&mut pending);
                }
                Ok(n) => conv.feed(&buf[..n], &mut pending),
                Err(e) => return fatal(ex::TEMPFAIL, format!("reading the message: {e}")),
            }
        }
    }
    if rcpts.is_empty() {
        return fatal(ex::USAGE, "no recipients specified");
    }
    rcpts.dedup();
    let envelope = Envelope {
        sender,
        recipients: rcpts
            .into_iter()
            .map(|r| Recipient {
                notify: args.notify.unwrap_or_default(),
                ..Recipient::new(r)
            })
            .collect(),
        ret: args.ret,
        envid: args.envid.clone(),
        ..Envelope::default()
    };
    let mut sub = match Submission::begin(cfg, envelope, args.full_name.clone()) {
        Ok(s) => s,
        Err((code, msg)) => return fatal(code, msg),
    };
    if let Err((code, msg)) = sub.data(&pending) {
        return fatal(code, msg);
    }
    while !eof && !conv.ended() {
        let mut out = Vec::new();
        match stdin.read(&mut buf) {
            Ok(0) => {
                eof = true;
                conv.finish(&mut out);
            }
            Ok(n) => conv.feed(&buf[..n], &mut out),
            Err(e) => return fatal(ex::TEMPFAIL, format!("reading the message: {e}")),
        }
        if let Err((code, msg)) = sub.data(&out) {
            return fatal(code, msg);
        }
    }
    match sub.end() {
        Ok(_) => 0,
        Err(e) => fatal(exit_of(&e), e.to_string()),
    }
}

fn find_header_end(wire: &[u8]) -> Option<usize> {
    if wire.starts_with(b"\r\n") {
        return Some(0);
    }
    wire.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 2)
}

fn queue_client(cfg: &Config) -> Result<ipc::Client<QueueCtl>, String> {
    let sock = PathBuf::from(cfg.str("queue_directory")).join("private/qmgr");
    ipc::Client::<QueueCtl>::connect(&sock, Duration::from_secs(30)).map_err(|e| {
        format!(
            "the mail system is not running: connect to {}: {e}",
            sock.display()
        )
    })
}

/// `-bp`: the queue in mailq format.
pub fn list_queue(cfg: &Config) -> i32 {
    match queue_client(cfg)
        .and_then(|mut c| c.call(&queuectl::Request::List).map_err(|e| e.to_string()))
    {
        Ok(queuectl::Response::List(l)) => {
            print!("{}", queuectl::mailq(&l));
            0
        }
        Ok(other) => fatal(ex::SOFTWARE, format!("unexpected answer {other:?}")),
        Err(e) => fatal(ex::TEMPFAIL, e),
    }
}

/// `-q`: deferred mail due now.
pub fn flush(cfg: &Config) -> i32 {
    match queue_client(cfg)
        .and_then(|mut c| c.call(&queuectl::Request::Flush).map_err(|e| e.to_string()))
    {
        Ok(queuectl::Response::Flushed(_)) => 0,
        Ok(other) => fatal(ex::SOFTWARE, format!("unexpected answer {other:?}")),
        Err(e) => fatal(ex::TEMPFAIL, e),
    }
}

/// `-bi` (newaliases): `sluice newaliases`, as Postfix's sendmail runs
/// newaliases(1). The `sluice` beside this program comes first, so a build
/// tree and an installation each use their own; then the one on PATH.
pub fn newaliases(dir: &std::path::Path) -> i32 {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("sluice")))
        .filter(|p| p.is_file());
    let program = beside.unwrap_or_else(|| std::path::PathBuf::from("sluice"));
    match std::process::Command::new(&program)
        .arg("-c")
        .arg(dir)
        .arg("newaliases")
        .status()
    {
        Ok(s) if s.success() => 0,
        Ok(s) => s.code().unwrap_or(ex::SOFTWARE),
        Err(e) => fatal(ex::SOFTWARE, format!("{}: {e}", program.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualify_local_names() {
        assert_eq!(
            qualify("root", "host.example").unwrap(),
            "root@host.example"
        );
        assert_eq!(qualify("<a@b.example>", "x").unwrap(), "a@b.example");
        assert_eq!(qualify("", "x").unwrap(), "");
        assert!(qualify("a b@c", "x").is_err());
        assert!(qualify("a@@c", "x").is_err());
    }
}
