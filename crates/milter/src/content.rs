//! The message as milters see it: headers one by one, then the body.
//!
//! smtpd receives content in wire format (CRLF line ends, dot-stuffed,
//! without the final dot) in chunks cut anywhere. [`Splitter`] undoes the
//! dot-stuffing and cuts the header section into [`Part::Header`]s (name,
//! and value without the space after the colon, continuation lines joined
//! by LF as Sendmail and Postfix send them; the space after the colon
//! is kept, for milters that ask for it), then [`Part::EndOfHeaders`],
//! then the body as it is, CRLF included. The header section ends at the
//! empty line, at a line that is no header, or past [`MAX_HEADER_BYTES`]
//! (the rest is then body, as cleanup's limit does).

/// Header bytes taken as headers; past them, everything is body.
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// A piece of the message for the milters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// One header.
    Header(String, String),
    /// The header section is over.
    EndOfHeaders,
    /// Body bytes (CRLF, not dot-stuffed).
    Body(Vec<u8>),
}

/// Turns wire-format chunks into [`Part`]s.
#[derive(Debug, Default)]
pub struct Splitter {
    /// A partial line (not yet ending in LF).
    line: Vec<u8>,
    /// The header being collected (its continuation lines may follow).
    header: Vec<u8>,
    header_bytes: usize,
    in_body: bool,
}

impl Splitter {
    /// Feeds a chunk; the parts it completes are pushed to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Part>) {
        let mut body = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let (line, more, complete) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..=i], &rest[i + 1..], true),
                None => (rest, &rest[rest.len()..], false),
            };
            rest = more;
            if !complete {
                self.line.extend_from_slice(line);
                break;
            }
            let whole;
            let line = if self.line.is_empty() {
                line
            } else {
                self.line.extend_from_slice(line);
                whole = std::mem::take(&mut self.line);
                &whole[..]
            };
            // Dot-stuffing undone at each line start.
            let line = if line.starts_with(b"..") {
                &line[1..]
            } else {
                line
            };
            if self.in_body {
                body.extend_from_slice(line);
            } else {
                self.header_line(line, out, &mut body);
            }
        }
        if !body.is_empty() {
            out.push(Part::Body(body));
        }
    }

    /// The content is over: what is pending goes out.
    pub fn finish(&mut self, out: &mut Vec<Part>) {
        let line = std::mem::take(&mut self.line);
        let mut body = Vec::new();
        if !self.in_body {
            if !line.is_empty() && !self.is_continuation(&line) {
                self.flush_header(out);
                self.header = line;
            } else {
                self.header.extend_from_slice(&line);
            }
            self.flush_header(out);
            self.in_body = true;
            out.push(Part::EndOfHeaders);
        } else {
            body = line;
        }
        if !body.is_empty() {
            out.push(Part::Body(body));
        }
    }

    fn is_continuation(&self, line: &[u8]) -> bool {
        !self.header.is_empty() && matches!(line.first(), Some(b' ' | b'\t'))
    }

    fn header_line(&mut self, line: &[u8], out: &mut Vec<Part>, body: &mut Vec<u8>) {
        self.header_bytes += line.len();
        if self.is_continuation(line) && self.header_bytes <= MAX_HEADER_BYTES {
            self.header.extend_from_slice(line);
            return;
        }
        self.flush_header(out);
        let is_header = line
            .iter()
            .position(|&b| b == b':')
            .is_some_and(|i| i > 0 && line[..i].iter().all(|&b| (33..=126).contains(&b)));
        if is_header && self.header_bytes <= MAX_HEADER_BYTES {
            self.header = line.to_vec();
            return;
        }
        // The empty line, or the first line of a body without one.
        self.in_body = true;
        out.push(Part::EndOfHeaders);
        if line != b"\r\n" && line != b"\n" {
            body.extend_from_slice(line);
        }
    }

    fn flush_header(&mut self, out: &mut Vec<Part>) {
        if self.header.is_empty() {
            return;
        }
        let raw = std::mem::take(&mut self.header);
        let text = String::from_utf8_lossy(&raw);
        let Some((name, value)) = text.split_once(':') else {
            return;
        };
        let value = value.trim_end_matches(['\r', '\n']).replace("\r\n", "\n");
        out.push(Part::Header(name.to_string(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(chunks: &[&[u8]]) -> Vec<Part> {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, &mut out);
        }
        s.finish(&mut out);
        // Body parts joined: chunking is not part of the meaning.
        let mut merged: Vec<Part> = Vec::new();
        for p in out {
            match (merged.last_mut(), p) {
                (Some(Part::Body(a)), Part::Body(b)) => a.extend_from_slice(&b),
                (_, p) => merged.push(p),
            }
        }
        merged
    }

    #[test]
    fn headers_then_unstuffed_body_whatever_the_chunks() {
        let msg: &[u8] =
            b"Subject: hi\r\nX-Long: a\r\n\tb\r\nFrom: a@b\r\n\r\n..dot\r\nline\r\n.x\r\n";
        let want = vec![
            Part::Header("Subject".into(), " hi".into()),
            Part::Header("X-Long".into(), " a\n\tb".into()),
            Part::Header("From".into(), " a@b".into()),
            Part::EndOfHeaders,
            Part::Body(b".dot\r\nline\r\n.x\r\n".to_vec()),
        ];
        assert_eq!(split_all(&[msg]), want);
        for cut in 1..msg.len() {
            assert_eq!(split_all(&[&msg[..cut], &msg[cut..]]), want, "cut at {cut}");
        }
    }

    #[test]
    fn no_empty_line_and_headers_only() {
        assert_eq!(
            split_all(&[b"Subject: x\r\nnot a header\r\n"]),
            vec![
                Part::Header("Subject".into(), " x".into()),
                Part::EndOfHeaders,
                Part::Body(b"not a header\r\n".to_vec()),
            ]
        );
        assert_eq!(
            split_all(&[b"Subject: x\r\n"]),
            vec![
                Part::Header("Subject".into(), " x".into()),
                Part::EndOfHeaders
            ]
        );
        assert_eq!(
            split_all(&[b"Subject: x"]),
            vec![
                Part::Header("Subject".into(), " x".into()),
                Part::EndOfHeaders
            ]
        );
        assert_eq!(split_all(&[b""]), vec![Part::EndOfHeaders]);
    }

    #[test]
    fn hostile_header_section_stays_bounded() {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        let line = b"X-Flood: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
        for _ in 0..(MAX_HEADER_BYTES / line.len() + 10) {
            s.feed(line, &mut out);
        }
        assert!(out.contains(&Part::EndOfHeaders));
        assert!(matches!(out.last(), Some(Part::Body(_))));
    }
}
