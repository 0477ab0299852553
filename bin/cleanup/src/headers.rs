//! The header section of a message as cleanup sees it, sans-IO.
//!
//! cleanup holds back the start of the content until the empty line that
//! ends the headers (or `MAX_HEADER_BYTES`, past which the content is
//! passed through untouched, as Postfix's header_size_limit does), so that
//! it can prepend Received: and add the headers a message must have
//! (Message-ID:, Date:, and From: for local submissions) before anything
//! reaches the spool. Content is wire format: CRLF line ends, dot-stuffed.

/// Header bytes held back before giving up on header processing.
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// What the header section held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// The Message-ID: value, trimmed.
    pub message_id: Option<String>,
    /// A Date: header was present.
    pub date: bool,
    /// A From: header was present.
    pub from: bool,
}

/// Collects the header section.
#[derive(Debug, Default)]
pub struct HeaderBuffer {
    buf: Vec<u8>,
    done: bool,
}

/// The result of feeding content.
#[derive(Debug, PartialEq, Eq)]
pub enum Fed {
    /// Still inside the headers: everything was kept.
    Holding,
    /// The header section is complete: `headers` (without the empty line)
    /// then `rest` (from the empty line on) follow.
    Complete {
        /// The header lines, each ending in CRLF.
        headers: Vec<u8>,
        /// The empty line and everything after it that was fed.
        rest: Vec<u8>,
    },
    /// Past the header section already: the bytes fed pass through as
    /// they are (the caller writes them; nothing is copied here).
    Through,
}

impl HeaderBuffer {
    /// Feeds content bytes.
    pub fn feed(&mut self, bytes: &[u8]) -> Fed {
        if self.done {
            return Fed::Through;
        }
        let start = self.buf.len().saturating_sub(3);
        self.buf.extend_from_slice(bytes);
        // A message that starts with the empty line has no headers.
        let end = if self.buf.starts_with(b"\r\n") {
            Some(0)
        } else {
            find(&self.buf[start..], b"\r\n\r\n").map(|i| start + i + 2)
        };
        if let Some(end) = end {
            self.done = true;
            let rest = self.buf.split_off(end);
            return Fed::Complete {
                headers: std::mem::take(&mut self.buf),
                rest,
            };
        }
        if self.buf.len() > MAX_HEADER_BYTES {
            self.done = true;
            return Fed::Complete {
                headers: Vec::new(),
                rest: std::mem::take(&mut self.buf),
            };
        }
        Fed::Holding
    }

    /// The content ended inside the headers: all of it is header lines.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        if self.done {
            return None;
        }
        self.done = true;
        Some(std::mem::take(&mut self.buf))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Looks at complete header lines for the ones cleanup cares about.
pub fn inspect(headers: &[u8]) -> Seen {
    let mut seen = Seen::default();
    let text = String::from_utf8_lossy(headers);
    let mut current: Option<(String, String)> = None;
    let mut fields = Vec::new();
    for line in text.split("\r\n") {
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = current.as_mut() {
                v.push_str(line);
            }
            continue;
        }
        if let Some(f) = current.take() {
            fields.push(f);
        }
        if let Some((name, value)) = line.split_once(':') {
            current = Some((name.trim().to_ascii_lowercase(), value.to_string()));
        }
    }
    if let Some(f) = current.take() {
        fields.push(f);
    }
    for (name, value) in fields {
        match name.as_str() {
            "message-id" => seen.message_id = Some(value.trim().to_string()),
            "date" => seen.date = true,
            "from" => seen.from = true,
            _ => {}
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_the_empty_line_across_chunks() {
        let msg = b"From: a@b\r\nMessage-ID: <1@x>\r\n\r\nbody\r\n";
        for cut in 0..msg.len() {
            let mut h = HeaderBuffer::default();
            let mut got = None;
            for piece in [&msg[..cut], &msg[cut..]] {
                match h.feed(piece) {
                    Fed::Holding => {}
                    Fed::Complete { headers, rest } => got = Some((headers, rest)),
                    Fed::Through => got.as_mut().unwrap().1.extend(piece),
                }
            }
            let (headers, rest) = got.expect("complete");
            assert_eq!(headers, b"From: a@b\r\nMessage-ID: <1@x>\r\n", "cut {cut}");
            assert_eq!(rest, b"\r\nbody\r\n", "cut {cut}");
        }
    }

    #[test]
    fn no_headers_and_headers_only() {
        let mut h = HeaderBuffer::default();
        assert_eq!(
            h.feed(b"\r\nbody\r\n"),
            Fed::Complete {
                headers: vec![],
                rest: b"\r\nbody\r\n".to_vec()
            }
        );
        let mut h = HeaderBuffer::default();
        assert_eq!(h.feed(b"Subject: x\r\n"), Fed::Holding);
        assert_eq!(h.finish(), Some(b"Subject: x\r\n".to_vec()));
    }

    #[test]
    fn inspect_finds_fields_case_insensitively_with_folding() {
        let s = inspect(b"message-id:\r\n <abc@x>\r\nDATE: now\r\nSubject: From: nobody\r\n");
        assert_eq!(s.message_id.as_deref(), Some("<abc@x>"));
        assert!(s.date);
        assert!(
            !s.from,
            "a From: inside another header's value is not a From: header"
        );
    }

    #[test]
    fn oversized_headers_pass_through() {
        let mut h = HeaderBuffer::default();
        let big = vec![b'x'; MAX_HEADER_BYTES + 10];
        assert!(matches!(h.feed(&big), Fed::Complete { ref headers, .. } if headers.is_empty()));
        assert_eq!(h.feed(b"more"), Fed::Through);
    }
}
