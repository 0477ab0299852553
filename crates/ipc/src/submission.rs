//! One message handed to cleanup over a blocking client: `Begin`, content,
//! `End`. Used by sendmail(1) and by local(8) when it forwards or sends an
//! owner notice; each maps the errors its own way (exit codes, or 4xx/5xx
//! for qmgr).

use std::path::Path;
use std::time::Duration;

use crate::cleanup::{Cleanup, Origin, Request, Response, MAX_CHUNK};
use crate::Client;

/// Why a submission did not end with a queue id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitError {
    /// cleanup's socket could not be reached.
    Connect(String),
    /// The link failed while talking.
    Link(String),
    /// cleanup refused the message: its reply, 4xx try again, 5xx never.
    Refused(mail::Refusal),
    /// cleanup answered something that does not belong here.
    Unexpected(String),
}

impl SubmitError {
    /// True when trying again cannot help (a 5xx refusal).
    pub fn is_permanent(&self) -> bool {
        matches!(self, SubmitError::Refused(r) if r.is_permanent())
    }
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::Connect(e) => write!(f, "connect to cleanup: {e}"),
            SubmitError::Link(e) => write!(f, "cleanup: {e}"),
            SubmitError::Refused(r) => write!(f, "{r}"),
            SubmitError::Unexpected(e) => write!(f, "unexpected answer from cleanup: {e}"),
        }
    }
}

/// A message being handed to cleanup.
pub struct Submission {
    client: Client<Cleanup>,
}

impl Submission {
    /// Connects to `socket` and starts a message.
    pub fn begin(
        socket: &Path,
        timeout: Duration,
        envelope: mail::Envelope,
        origin: Origin,
    ) -> Result<Self, SubmitError> {
        let mut client = Client::<Cleanup>::connect(socket, timeout)
            .map_err(|e| SubmitError::Connect(format!("{}: {e}", socket.display())))?;
        let begin = Request::Begin {
            envelope: Box::new(envelope),
            origin,
            hold: false,
            quiet: false,
        };
        match answer(client.call(&begin))? {
            Response::Started { .. } => Ok(Submission { client }),
            other => Err(SubmitError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Sends content (wire format), in frames, without waiting.
    pub fn data(&mut self, bytes: &[u8]) -> Result<(), SubmitError> {
        for chunk in bytes.chunks(MAX_CHUNK) {
            self.client
                .send(&Request::Data {
                    bytes: chunk.to_vec(),
                })
                .map_err(|e| SubmitError::Link(e.to_string()))?;
        }
        Ok(())
    }

    /// Ends the message: its queue id once it is on stable storage.
    pub fn end(mut self) -> Result<String, SubmitError> {
        match answer(self.client.call(&Request::End))? {
            Response::Queued { queue_id } => Ok(queue_id),
            other => Err(SubmitError::Unexpected(format!("{other:?}"))),
        }
    }
}

fn answer(r: Result<Response, crate::IpcError>) -> Result<Response, SubmitError> {
    match r {
        Ok(Response::Failed { reply }) => Err(SubmitError::Refused(reply)),
        Ok(other) => Ok(other),
        Err(e) => Err(SubmitError::Link(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::net::{UnixListener, UnixStream};

    use super::*;
    use crate::{decode, encode, FrameBuf, Hello, HelloReply, Protocol, Tagged};

    /// Reads one frame's payload from `s`.
    fn frame(s: &mut UnixStream, buf: &mut FrameBuf) -> Vec<u8> {
        loop {
            if let Some(p) = buf.next_frame().unwrap() {
                return p;
            }
            buf.read_from(s).unwrap();
        }
    }

    /// A cleanup stand-in on a socket in a fresh directory: it speaks
    /// `version` and answers every request with `answer`.
    fn cleanup(
        version: u32,
        answer: Response,
    ) -> (std::path::PathBuf, std::thread::JoinHandle<()>) {
        let dir = std::env::temp_dir().join(format!(
            "ipc-submission-{}-{version}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cleanup");
        let l = UnixListener::bind(&path).unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = FrameBuf::new();
            let hello: Hello = decode(&frame(&mut s, &mut buf)).unwrap();
            let ours = Hello {
                protocol: Cleanup::NAME.into(),
                version,
            };
            let reply = if hello == ours {
                HelloReply::Accepted
            } else {
                HelloReply::Refused {
                    protocol: ours.protocol,
                    version,
                }
            };
            s.write_all(&encode(&reply)).unwrap();
            if reply != HelloReply::Accepted {
                return;
            }
            let req: Tagged<Request> = decode(&frame(&mut s, &mut buf)).unwrap();
            assert!(matches!(req.body, Request::Begin { .. }), "{req:?}");
            s.write_all(&encode(&Tagged {
                id: req.id,
                body: answer,
            }))
            .unwrap();
        });
        (path, t)
    }

    fn begin(path: &Path) -> Result<Submission, SubmitError> {
        let origin = Origin::Local {
            user: "u".into(),
            full_name: None,
        };
        Submission::begin(
            path,
            Duration::from_secs(10),
            mail::Envelope::default(),
            origin,
        )
    }

    #[test]
    fn a_refusal_arrives_typed() {
        let reply = mail::Refusal::new(
            550,
            mail::StatusCode::NOT_AUTHORIZED,
            "Only the mail system may submit SMTP mail here",
        );
        let (path, t) = cleanup(
            Cleanup::VERSION,
            Response::Failed {
                reply: reply.clone(),
            },
        );
        let e = begin(&path).err().unwrap();
        t.join().unwrap();
        assert!(e.is_permanent());
        assert_eq!(
            e.to_string(),
            "550 5.7.1 Only the mail system may submit SMTP mail here"
        );
        assert_eq!(e, SubmitError::Refused(reply));
        let (path, t) = cleanup(
            Cleanup::VERSION,
            Response::Failed {
                reply: mail::Refusal::new(451, mail::StatusCode::SYSTEM_TEMP, "later"),
            },
        );
        let e = begin(&path).err().unwrap();
        t.join().unwrap();
        assert!(!e.is_permanent(), "{e}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_cleanup_of_the_string_status_version_is_refused() {
        // Version 4 sent enhanced codes as strings: never misread.
        let (path, t) = cleanup(
            4,
            Response::Started {
                queue_id: "X".into(),
            },
        );
        let e = begin(&path).err().unwrap();
        t.join().unwrap();
        let want = format!(
            "{}: protocol mismatch: wanted sluice-cleanup {}, peer speaks sluice-cleanup 4",
            path.display(),
            Cleanup::VERSION
        );
        assert_eq!(e, SubmitError::Connect(want));
        assert!(!e.is_permanent());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
