//! The stages of an SMTP session a milter hears of, with the command
//! that announces each and the negotiation flags that leave it or its
//! answer out (`client` speaks them, `macros` names the macros of each).

use crate::codec::{cmd, proto};

/// The stages of a session a milter hears of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Option negotiation.
    Negotiate,
    /// The client connected.
    Connect,
    /// HELO or EHLO.
    Helo,
    /// MAIL FROM.
    Mail,
    /// RCPT TO.
    Rcpt,
    /// DATA.
    Data,
    /// One header.
    Header,
    /// The end of the headers.
    Eoh,
    /// A body chunk.
    Body,
    /// The end of the message.
    Eom,
    /// The transaction was abandoned (RSET, or a rejected message).
    Abort,
    /// The session ends.
    Quit,
    /// An SMTP command smtpd does not know.
    Unknown,
}

impl Stage {
    /// The stage's macro code (the letter of its command).
    pub(crate) fn code(self) -> u8 {
        match self {
            Stage::Negotiate => cmd::OPTNEG,
            Stage::Connect => cmd::CONNECT,
            Stage::Helo => cmd::HELO,
            Stage::Mail => cmd::MAIL,
            Stage::Rcpt => cmd::RCPT,
            Stage::Data => cmd::DATA,
            Stage::Header => cmd::HEADER,
            Stage::Eoh => cmd::EOH,
            Stage::Body => cmd::BODY,
            Stage::Eom => cmd::BODYEOB,
            Stage::Abort => cmd::ABORT,
            Stage::Quit => cmd::QUIT,
            Stage::Unknown => cmd::UNKNOWN,
        }
    }

    /// (the flag that leaves it out, the flag that leaves out its answer).
    pub(crate) fn flags(self) -> (u32, u32) {
        match self {
            Stage::Connect => (proto::NOCONNECT, proto::NR_CONN),
            Stage::Helo => (proto::NOHELO, proto::NR_HELO),
            Stage::Mail => (proto::NOMAIL, proto::NR_MAIL),
            Stage::Rcpt => (proto::NORCPT, proto::NR_RCPT),
            Stage::Data => (proto::NODATA, proto::NR_DATA),
            Stage::Header => (proto::NOHDRS, proto::NR_HDR),
            Stage::Eoh => (proto::NOEOH, proto::NR_EOH),
            Stage::Body => (proto::NOBODY, proto::NR_BODY),
            Stage::Unknown => (proto::NOUNKNOWN, proto::NR_UNKN),
            Stage::Negotiate | Stage::Eom | Stage::Abort | Stage::Quit => (0, 0),
        }
    }

    /// Part of a mail transaction (dropped when it is abandoned).
    pub(crate) fn in_transaction(self) -> bool {
        matches!(
            self,
            Stage::Mail
                | Stage::Rcpt
                | Stage::Data
                | Stage::Header
                | Stage::Eoh
                | Stage::Body
                | Stage::Eom
        )
    }

    /// Part of the content, whose verdict waits for the end of the message.
    pub(crate) fn in_content(self) -> bool {
        matches!(self, Stage::Data | Stage::Header | Stage::Eoh | Stage::Body)
    }
}
