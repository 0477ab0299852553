//! The queue control protocol: `sluice queue` asking qmgr about messages.

use serde::{Deserialize, Serialize};

/// Marker type for the queue control protocol.
#[derive(Debug)]
pub enum QueueCtl {}

impl crate::Protocol for QueueCtl {
    const NAME: &'static str = "sluice-queuectl";
    const VERSION: u32 = 2;
    type Request = Request;
    type Response = Response;
}

/// What `sluice queue` asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Every message in the queue, oldest first.
    List,
    /// Make every deferred message due now (`sendmail -q`, `sluice queue flush`).
    Flush,
    /// One message in detail.
    Show {
        /// Its queue id.
        id: String,
    },
    /// Put the selected messages on hold (not delivered until released).
    Hold(Selector),
    /// Release the selected messages from hold.
    Release(Selector),
    /// Delete the selected messages, without notice to anyone.
    Delete(Selector),
    /// Deliver the selected messages now, routing them afresh.
    Requeue(Selector),
}

/// Which messages an operation applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Selector {
    /// These queue ids.
    Ids(Vec<String>),
    /// Messages from this envelope sender (exact, case-insensitive).
    Sender(String),
    /// Messages with a pending recipient in this domain.
    Domain(String),
    /// Every message.
    All,
}

/// qmgr's answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to `List`.
    List(Vec<QueuedMessage>),
    /// The answer to `Flush`: how many messages became due.
    Flushed(u64),
    /// The answer to `Show`: the message as text, or why not.
    Shown(Result<String, String>),
    /// The answer to hold, release, delete and requeue: how many messages it changed.
    Done(u64),
}

/// One queued message as `mailq` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedMessage {
    /// The queue id.
    pub id: String,
    /// Message size in bytes.
    pub size: u64,
    /// Arrival time, seconds since the epoch.
    pub arrival: u64,
    /// The envelope sender ("" for the null sender).
    pub sender: String,
    /// `active`, `deferred` or `hold`.
    pub state: String,
    /// Recipients still to be delivered, with the last reason if deferred.
    pub recipients: Vec<QueuedRecipient>,
}

/// One pending recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedRecipient {
    /// The address.
    pub address: String,
    /// The last deferral reason, if any.
    pub reason: Option<String>,
}

/// The listing in Postfix's `mailq` / `postqueue -p` format, so that
/// scripts and qshape-style tools keep working.
pub fn mailq(list: &[QueuedMessage]) -> String {
    if list.is_empty() {
        return "Mail queue is empty\n".to_string();
    }
    let mut out =
        String::from("-Queue ID-  --Size-- ----Arrival Time---- -Sender/Recipient-------\n");
    let mut bytes = 0u64;
    for m in list {
        let mark = match m.state.as_str() {
            "active" => "*",
            "hold" => "!",
            _ => "",
        };
        let when = sys::time::mailq_stamp(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(m.arrival),
        );
        let sender = if m.sender.is_empty() {
            "MAILER-DAEMON"
        } else {
            &m.sender
        };
        out.push_str(&format!(
            "{:<11} {:>8} {} {}\n",
            format!("{}{mark}", m.id),
            m.size,
            when,
            sender
        ));
        for r in &m.recipients {
            if let Some(reason) = &r.reason {
                out.push_str(&format!("{:<41} ({reason})\n", ""));
            }
            out.push_str(&format!("{:<41} {}\n", "", r.address));
        }
        out.push('\n');
        bytes += m.size;
    }
    let n = list.len();
    out.push_str(&format!(
        "-- {} Kbytes in {n} Request{}.\n",
        bytes.div_ceil(1024),
        if n == 1 { "" } else { "s" }
    ));
    out
}

/// The listing as JSON: one object per line, as `postqueue -j` prints it.
pub fn json_lines(list: &[QueuedMessage]) -> String {
    let mut out = String::new();
    for m in list {
        let rcpts: Vec<String> = m
            .recipients
            .iter()
            .map(|r| {
                format!(
                    "{{\"address\":{}{}}}",
                    json_str(&r.address),
                    r.reason
                        .as_deref()
                        .map(|x| format!(",\"delay_reason\":{}", json_str(x)))
                        .unwrap_or_default()
                )
            })
            .collect();
        out.push_str(&format!(
            "{{\"queue_name\":{},\"queue_id\":{},\"arrival_time\":{},\"message_size\":{},\"sender\":{},\"recipients\":[{}]}}\n",
            json_str(&m.state),
            json_str(&m.id),
            m.arrival,
            m.size,
            json_str(&m.sender),
            rcpts.join(",")
        ));
    }
    out
}

/// A JSON string literal (RFC 8259 escaping).
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<QueuedMessage> {
        vec![QueuedMessage {
            id: "ABC123".into(),
            size: 2048,
            arrival: 0,
            sender: String::new(),
            state: "hold".into(),
            recipients: vec![
                QueuedRecipient {
                    address: "a@example.org".into(),
                    reason: None,
                },
                QueuedRecipient {
                    address: "b\"q@example.org".into(),
                    reason: Some("connect timeout".into()),
                },
            ],
        }]
    }

    #[test]
    fn mailq_shape_matches_postfix() {
        let text = mailq(&sample());
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("-Queue ID-"));
        assert!(
            lines[1].starts_with("ABC123!") && lines[1].ends_with("MAILER-DAEMON"),
            "{text}"
        );
        assert_eq!(lines[2].trim(), "a@example.org");
        assert_eq!(lines[3].trim(), "(connect timeout)");
        assert_eq!(lines.last().unwrap(), &"-- 2 Kbytes in 1 Request.");
        assert_eq!(mailq(&[]), "Mail queue is empty\n");
    }

    #[test]
    fn json_escapes() {
        let j = json_lines(&sample());
        assert!(
            j.contains(r#""address":"b\"q@example.org","delay_reason":"connect timeout""#),
            "{j}"
        );
        assert_eq!(json_str("a\u{1}b"), "\"a\\u0001b\"");
    }
}
