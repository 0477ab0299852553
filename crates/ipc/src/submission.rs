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
    /// cleanup refused the message.
    Refused {
        /// SMTP-style code: 4xx try again, 5xx never.
        code: u16,
        /// Enhanced status.
        enhanced: String,
        /// Reason.
        text: String,
    },
    /// cleanup answered something that does not belong here.
    Unexpected(String),
}

impl SubmitError {
    /// True when trying again cannot help (a 5xx refusal).
    pub fn is_permanent(&self) -> bool {
        matches!(self, SubmitError::Refused { code, .. } if *code >= 500)
    }
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::Connect(e) => write!(f, "connect to cleanup: {e}"),
            SubmitError::Link(e) => write!(f, "cleanup: {e}"),
            SubmitError::Refused {
                code,
                enhanced,
                text,
            } => write!(f, "{code} {enhanced} {text}"),
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
        Ok(Response::Failed {
            code,
            enhanced,
            text,
        }) => Err(SubmitError::Refused {
            code,
            enhanced,
            text,
        }),
        Ok(other) => Ok(other),
        Err(e) => Err(SubmitError::Link(e.to_string())),
    }
}
