//! How a delivery writes the message to each kind of target: an mbox
//! entry (From line, local's headers, quoted content, blank line), a
//! Maildir file (local's headers, content), a `/file` target (a Maildir
//! when its name ends in `/`, as in Postfix, else an mbox) and a command's
//! input (From line, local's headers, content). Each is written as the
//! message is read from the spool ([`Message::write_unwired`]), so none of
//! them holds it whole.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::content::clean;
use crate::deliver::{switch, Delivery};
use crate::mailbox::{self, Failure};
use crate::message::{CopyError, Message};
use crate::pipe;

impl Delivery<'_> {
    /// What a command reads: the From line, local's headers, the content.
    pub(crate) fn command_input(&self, addr: &str) -> Streamed<'_> {
        Streamed {
            head: [self.envelope_line(), self.headers(addr)].concat(),
            message: self.wire,
        }
    }

    /// Local's own header lines, LF-ended.
    fn headers(&self, addr: &str) -> Vec<u8> {
        format!(
            "Return-Path: <{}>\nDelivered-To: {}\n",
            clean(&self.txn.sender),
            clean(addr)
        )
        .into_bytes()
    }

    /// The mbox `From ` line (also a command's first line).
    fn envelope_line(&self) -> Vec<u8> {
        let sender = if self.txn.sender.is_empty() {
            "MAILER-DAEMON".to_string()
        } else {
            clean(&self.txn.sender).replace(' ', "_")
        };
        format!(
            "From {sender}  {}\n",
            sys::time::asctime_stamp(SystemTime::now())
        )
        .into_bytes()
    }

    /// Appends a complete mbox entry (From line, headers, quoted content,
    /// blank line) to `mbox`, as the current effective user.
    pub(crate) fn append(
        &self,
        mbox: &Path,
        addr: &str,
        owner: Option<u32>,
    ) -> Result<(), Failure> {
        mailbox::append_mbox_with(mbox, self.settings.size_limit, owner, |w| {
            w.write_all(&self.envelope_line())
                .and_then(|()| w.write_all(&self.headers(addr)))
                .map_err(CopyError::Write)?;
            self.wire.write_unwired(true, w)?;
            w.write_all(b"\n").map_err(CopyError::Write)
        })
    }

    /// Delivers headers and content into the Maildir `dir`, as the
    /// current effective user.
    pub(crate) fn maildir(&self, dir: &Path, addr: &str) -> Result<PathBuf, Failure> {
        mailbox::deliver_maildir_with(dir, &self.settings.myhostname, |w| {
            w.write_all(&self.headers(addr)).map_err(CopyError::Write)?;
            self.wire.write_unwired(false, w)
        })
    }

    /// A `/file` target, with `ids`' rights: a Maildir when the name ends
    /// in `/` (as in Postfix), else an mbox.
    pub(crate) fn file(
        &self,
        f: &str,
        addr: &str,
        ids: Option<(u32, u32)>,
    ) -> Result<String, Failure> {
        let _guard = match ids {
            Some((uid, gid)) => Some(switch(uid, gid)?),
            None => None,
        };
        if f.ends_with('/') {
            self.maildir(Path::new(f), addr)?;
            return Ok("delivered to maildir".into());
        }
        self.append(Path::new(f), addr, None)?;
        Ok(format!("delivered to file: {f}"))
    }
}

/// A command's input: local's own lines, then the message, unstuffed with
/// LF line ends, read from the spool as the command takes it.
pub(crate) struct Streamed<'a> {
    head: Vec<u8>,
    message: &'a Message,
}

impl pipe::Input for Streamed<'_> {
    fn feed(&self, w: &mut dyn Write) -> Result<(), String> {
        if w.write_all(&self.head).is_err() {
            return Ok(());
        }
        match self.message.write_unwired(false, w) {
            Err(CopyError::Read(e)) => Err(e.to_string()),
            Ok(()) | Err(CopyError::Write(_)) => Ok(()),
        }
    }
}
