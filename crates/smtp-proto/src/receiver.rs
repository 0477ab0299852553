//! DATA and BDAT content receivers: find the end of data, police line endings,
//! count the size, and hand on the content in wire format.
//!
//! The spool keeps messages exactly as they go on the wire (CRLF line ends,
//! dot-stuffed; DESIGN §2), so [`DataReceiver`] does NOT undo dot-stuffing: it
//! passes the client's bytes through and only strips the final `.CRLF`. It
//! tracks where lines start so that it can find the terminator, which is only
//! ever CRLF `.` CRLF (the first CRLF being the end of the last line, or the
//! DATA command's own line end). `LF.LF`, `CR.CR`, `CRLF.LF`, `LF.CRLF`,
//! `CR.LF`, `LF.CR` and every other mix never end a message (SMTP smuggling,
//! CVE-2023-51764 and friends).
//!
//! [`BdatReceiver`] takes BDAT chunk bytes, which are not dot-stuffed (RFC
//! 3030), and produces the same wire format: a `.` at the start of a line is
//! doubled and a final CRLF is added when the content does not end with one.
//!
//! Bare LF and bare CR follow [`BareNewline`] (Postfix
//! `smtpd_forbid_bare_newline`):
//! - `Reject` (default): the content is read to its end, then refused with
//!   `550 5.5.2 Error: bare <LF> received` (or `<CR>`); the counts are in the
//!   [`DataSummary`] so the shell can log them.
//! - `Normalize`: each bare LF or CR becomes CRLF in the output. A line that
//!   begins after such a converted line end and is a lone `.` is written as
//!   `..`, so the output can never contain a terminator the input did not.
//! - `Allow` (Postfix `no`): bare LF and CR pass through unchanged and are never
//!   line ends, neither for the terminator nor for dot-stuffing. Downstream
//!   receivers that treat bare LF as a line end may then see lines we did not:
//!   that is the known risk of `no`.
//!
//! Long lines: like Postfix's smtpd, lines longer than RFC 5321's 1000 octets
//! are accepted as they are (never truncated or split here; the SMTP client
//! folds on output if needed); the longest line is reported. A hard limit can be
//! set with [`ReceiverLimits::max_line`], which rejects the message after its
//! end with `500 5.5.2`. Size: over [`ReceiverLimits::max_size`] the output
//! stops, the input is still consumed to its end, and the summary says
//! `552 5.3.4`. Once a message is known to be refused no more output is
//! produced. Memory is bounded: the receivers keep a few bytes of state; the
//! output of one `feed` is at most twice its input.

use crate::reply::{Reply, StatusCode};

/// Policy for bare LF and bare CR (Postfix `smtpd_forbid_bare_newline`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BareNewline {
    /// Refuse the message after its end (default).
    #[default]
    Reject,
    /// Turn each bare LF or CR into CRLF.
    Normalize,
    /// Pass them through (Postfix `no`); never a line end.
    Allow,
}

/// Limits for one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiverLimits {
    /// Maximum output size in octets; 0 means no limit.
    pub max_size: u64,
    /// Maximum line length in octets (without CRLF); `None` accepts any length.
    pub max_line: Option<usize>,
    /// Bare LF / CR policy.
    pub bare_newline: BareNewline,
}

impl Default for ReceiverLimits {
    fn default() -> Self {
        Self {
            max_size: 10_240_000,
            max_line: None,
            bare_newline: BareNewline::Reject,
        }
    }
}

/// Why a message was refused by the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// Larger than `max_size`.
    TooBig,
    /// A bare LF under `BareNewline::Reject`.
    BareLf,
    /// A bare CR under `BareNewline::Reject`.
    BareCr,
    /// A line longer than `max_line`.
    LineTooLong,
}

impl Refusal {
    /// The reply sent after the end of the data.
    pub fn reply(&self) -> Reply {
        match self {
            Refusal::TooBig => Reply::enhanced(
                552,
                StatusCode::MESSAGE_TOO_BIG,
                "Error: message file too big",
            ),
            Refusal::BareLf => {
                Reply::enhanced(550, StatusCode::SYNTAX_ERROR, "Error: bare <LF> received")
            }
            Refusal::BareCr => {
                Reply::enhanced(550, StatusCode::SYNTAX_ERROR, "Error: bare <CR> received")
            }
            Refusal::LineTooLong => {
                Reply::enhanced(500, StatusCode::SYNTAX_ERROR, "Error: line too long")
            }
        }
    }
}

/// What the receiver saw, reported at the end of the content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataSummary {
    /// Octets of wire-format content (what the output held or would have held).
    pub size: u64,
    /// Number of bare LFs.
    pub bare_lf: u64,
    /// Number of bare CRs.
    pub bare_cr: u64,
    /// Longest line, in octets without its line end.
    pub longest_line: u64,
    /// Set when the message must be refused.
    pub refusal: Option<Refusal>,
}

/// Output side shared by both receivers: size, counts, refusal, suppression.
#[derive(Debug)]
struct Sink {
    limits: ReceiverLimits,
    summary: DataSummary,
    line_len: u64,
}

impl Sink {
    fn new(limits: ReceiverLimits) -> Self {
        Self {
            limits,
            summary: DataSummary::default(),
            line_len: 0,
        }
    }

    fn refuse(&mut self, r: Refusal) {
        // The first reason found is the one reported.
        self.summary.refusal.get_or_insert(r);
    }

    fn emit(&mut self, out: &mut Vec<u8>, bytes: &[u8]) {
        self.summary.size += bytes.len() as u64;
        if self.limits.max_size > 0 && self.summary.size > self.limits.max_size {
            self.refuse(Refusal::TooBig);
        }
        if self.summary.refusal.is_none() {
            out.extend_from_slice(bytes);
        }
    }

    fn line_bytes(&mut self, n: usize) {
        self.line_len += n as u64;
        self.summary.longest_line = self.summary.longest_line.max(self.line_len);
        if let Some(max) = self.limits.max_line {
            if self.line_len > max as u64 {
                self.refuse(Refusal::LineTooLong);
            }
        }
    }

    fn end_line(&mut self) {
        self.line_len = 0;
    }

    /// Records a bare LF or CR; returns true when it must become CRLF.
    fn bare(&mut self, lf: bool) -> bool {
        if lf {
            self.summary.bare_lf += 1;
        } else {
            self.summary.bare_cr += 1;
        }
        match self.limits.bare_newline {
            BareNewline::Normalize => true,
            BareNewline::Allow => false,
            BareNewline::Reject => {
                self.refuse(if lf { Refusal::BareLf } else { Refusal::BareCr });
                false
            }
        }
    }
}

/// Where the DATA receiver is within a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DataState {
    /// At a line start; `real` when the previous line end was a real CRLF
    /// (or the DATA command's), so a `.CRLF` here is the terminator.
    Bol { real: bool },
    /// A `.` at a line start, not yet written.
    Dot { real: bool },
    /// `.` CR at a line start, not yet written.
    DotCr { real: bool },
    /// Inside a line.
    Text,
    /// A CR inside a line, not yet known to be CRLF or bare.
    Cr,
    /// The terminator was seen.
    Done,
}

/// Receiver for DATA content, up to and including CRLF.CRLF.
#[derive(Debug)]
pub struct DataReceiver {
    state: DataState,
    sink: Sink,
}

impl DataReceiver {
    /// A receiver positioned just after the DATA command's CRLF.
    pub fn new(limits: ReceiverLimits) -> Self {
        Self {
            state: DataState::Bol { real: true },
            sink: Sink::new(limits),
        }
    }

    /// A receiver after a DATA command that ended with a bare LF (accepted under
    /// `Normalize` or `Allow`): a `.CRLF` right away is then `LF.CRLF`, which
    /// must not end the message.
    pub fn after_bare_newline(limits: ReceiverLimits) -> Self {
        Self {
            state: DataState::Bol { real: false },
            sink: Sink::new(limits),
        }
    }

    /// True once the terminator was consumed.
    pub fn is_done(&self) -> bool {
        self.state == DataState::Done
    }

    /// Consumes input, appending wire-format content to `out`.
    ///
    /// Returns the bytes consumed and, when the terminator was found, the
    /// summary; bytes after the terminator (pipelined commands) are left.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> (usize, Option<DataSummary>) {
        let normalize = self.sink.limits.bare_newline == BareNewline::Normalize;
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                DataState::Done => break,
                DataState::Text => {
                    let rest = &input[i..];
                    let n = rest
                        .iter()
                        .position(|&c| c == b'\r' || c == b'\n')
                        .unwrap_or(rest.len());
                    self.sink.line_bytes(n);
                    self.sink.emit(out, &rest[..n]);
                    i += n;
                    if let Some(&c) = rest.get(n) {
                        i += 1;
                        if c == b'\r' {
                            self.state = DataState::Cr;
                        } else {
                            self.bare_lf(out, b"\n");
                        }
                    }
                }
                DataState::Bol { real } => match b {
                    b'.' => {
                        self.sink.line_bytes(1);
                        self.state = DataState::Dot { real };
                        i += 1;
                    }
                    b'\r' => {
                        self.state = DataState::Cr;
                        i += 1;
                    }
                    b'\n' => {
                        self.bare_lf(out, b"\n");
                        i += 1;
                    }
                    _ => self.state = DataState::Text,
                },
                DataState::Dot { real } => match b {
                    b'\r' => {
                        self.state = DataState::DotCr { real };
                        i += 1;
                    }
                    b'\n' => {
                        // A lone dot ended by a bare LF: never the terminator.
                        if normalize {
                            self.sink.bare(true);
                            self.sink.emit(out, b"..\r\n");
                            self.sink.end_line();
                            self.state = DataState::Bol { real: false };
                        } else {
                            self.sink.bare(true);
                            self.sink.emit(out, b".\n");
                            self.sink.line_bytes(1);
                            self.state = DataState::Text;
                        }
                        i += 1;
                    }
                    _ => {
                        self.sink.emit(out, b".");
                        self.state = DataState::Text;
                    }
                },
                DataState::DotCr { real } => {
                    if b == b'\n' {
                        i += 1;
                        if real {
                            self.state = DataState::Done;
                            return (i, Some(self.sink.summary));
                        }
                        // The previous line end was a bare newline (converted, or
                        // the DATA command's), so this lone dot is content: stuff it.
                        self.sink.emit(out, b"..\r\n");
                        self.sink.end_line();
                        self.state = DataState::Bol { real: true };
                    } else if self.sink.bare(false) {
                        self.sink.emit(out, b"..\r\n");
                        self.sink.end_line();
                        self.state = DataState::Bol { real: false };
                    } else {
                        self.sink.emit(out, b".\r");
                        self.sink.line_bytes(1);
                        self.state = DataState::Text;
                    }
                }
                DataState::Cr => {
                    if b == b'\n' {
                        self.sink.emit(out, b"\r\n");
                        self.sink.end_line();
                        self.state = DataState::Bol { real: true };
                        i += 1;
                    } else if self.sink.bare(false) {
                        self.sink.emit(out, b"\r\n");
                        self.sink.end_line();
                        self.state = DataState::Bol { real: false };
                    } else {
                        self.sink.emit(out, b"\r");
                        self.sink.line_bytes(1);
                        self.state = DataState::Text;
                    }
                }
            }
        }
        (i, None)
    }

    /// Handles a bare LF in Text or at a line start (not after a lone dot).
    fn bare_lf(&mut self, out: &mut Vec<u8>, byte: &[u8]) {
        if self.sink.bare(true) {
            self.sink.emit(out, b"\r\n");
            self.sink.end_line();
            self.state = DataState::Bol { real: false };
        } else {
            self.sink.emit(out, byte);
            self.sink.line_bytes(1);
            self.state = DataState::Text;
        }
    }
}

/// Where the BDAT receiver is within a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BdatState {
    Bol,
    Text,
    Cr,
}

/// Receiver for the chunks of one BDAT transaction; output is wire format.
#[derive(Debug)]
pub struct BdatReceiver {
    state: BdatState,
    sink: Sink,
}

impl BdatReceiver {
    /// A receiver for a new BDAT message.
    pub fn new(limits: ReceiverLimits) -> Self {
        Self {
            state: BdatState::Bol,
            sink: Sink::new(limits),
        }
    }

    /// Content octets received so far (wire format).
    pub fn size(&self) -> u64 {
        self.sink.summary.size
    }

    /// Consumes chunk content (all of `input`), appending wire format to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                BdatState::Text => {
                    let rest = &input[i..];
                    let n = rest
                        .iter()
                        .position(|&c| c == b'\r' || c == b'\n')
                        .unwrap_or(rest.len());
                    self.sink.line_bytes(n);
                    self.sink.emit(out, &rest[..n]);
                    i += n;
                    if let Some(&c) = rest.get(n) {
                        i += 1;
                        if c == b'\r' {
                            self.state = BdatState::Cr;
                        } else {
                            self.bare(out, true);
                        }
                    }
                }
                BdatState::Bol => {
                    match b {
                        // BDAT content is not stuffed; the spool's wire format is.
                        b'.' => {
                            self.sink.emit(out, b"..");
                            self.sink.line_bytes(1);
                            self.state = BdatState::Text;
                            i += 1;
                        }
                        b'\r' => {
                            self.state = BdatState::Cr;
                            i += 1;
                        }
                        b'\n' => {
                            self.bare(out, true);
                            i += 1;
                        }
                        _ => self.state = BdatState::Text,
                    }
                }
                BdatState::Cr => {
                    if b == b'\n' {
                        self.sink.emit(out, b"\r\n");
                        self.sink.end_line();
                        self.state = BdatState::Bol;
                        i += 1;
                    } else {
                        self.bare(out, false);
                    }
                }
            }
        }
    }

    fn bare(&mut self, out: &mut Vec<u8>, lf: bool) {
        if self.sink.bare(lf) {
            self.sink.emit(out, b"\r\n");
            self.sink.end_line();
            self.state = BdatState::Bol;
        } else {
            self.sink.emit(out, if lf { b"\n" } else { b"\r" });
            self.sink.line_bytes(1);
            self.state = BdatState::Text;
        }
    }

    /// Ends the message (BDAT LAST): adds the final CRLF if missing, returns the summary.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> DataSummary {
        if self.state == BdatState::Cr {
            self.bare(out, false);
        }
        if self.state == BdatState::Text {
            self.sink.emit(out, b"\r\n");
            self.sink.end_line();
            self.state = BdatState::Bol;
        }
        self.sink.summary
    }
}

#[cfg(test)]
#[path = "receiver_tests.rs"]
mod tests;
