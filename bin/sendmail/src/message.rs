//! Turning a local message (LF line ends, a lone "." maybe ending it) into
//! wire format (CRLF, dot-stuffed), streaming, and reading recipients from
//! its headers for `-t`.

/// The mbox "From " line prefix (after any ">") that is dropped at the start.
const FROM_: &[u8] = b"From ";

/// Where the converter is among the leading mbox "From " lines it drops,
/// as Postfix's sendmail does (its skip_from_): a message piped from an
/// mbox would otherwise carry the line into its header section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leading {
    /// At the start of a line that may be one: `quotes` ">" then the first
    /// `matched` bytes of "From " seen and held.
    Maybe { quotes: usize, matched: usize },
    /// Dropping a "From " line up to its LF.
    Dropping,
    /// Past them.
    Done,
}

/// Streams input bytes into wire format.
#[derive(Debug)]
pub struct Converter {
    leading: Leading,
    ignore_dots: bool,
    at_line_start: bool,
    /// A "." began this line; held until we know whether it is alone.
    dot: bool,
    /// A CR is held until we know whether an LF follows.
    cr: bool,
    ended: bool,
}

impl Converter {
    /// A converter; `ignore_dots` is `-i`.
    pub fn new(ignore_dots: bool) -> Self {
        Converter {
            leading: Leading::Maybe {
                quotes: 0,
                matched: 0,
            },
            ignore_dots,
            at_line_start: true,
            dot: false,
            cr: false,
            ended: false,
        }
    }

    /// Whether a lone "." has ended the input.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Converts `input`, appending wire bytes to `out`; stops at a lone ".".
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            if self.ended {
                return;
            }
            match self.leading {
                Leading::Done => self.byte(b, out),
                Leading::Dropping => {
                    if b == b'\n' {
                        self.leading = Leading::Maybe {
                            quotes: 0,
                            matched: 0,
                        };
                    }
                }
                Leading::Maybe { quotes, matched } => {
                    if b == b'>' && matched == 0 {
                        self.leading = Leading::Maybe {
                            quotes: quotes + 1,
                            matched,
                        };
                    } else if b == FROM_[matched] {
                        self.leading = if matched + 1 == FROM_.len() {
                            Leading::Dropping
                        } else {
                            Leading::Maybe {
                                quotes,
                                matched: matched + 1,
                            }
                        };
                    } else {
                        self.release(out);
                        self.byte(b, out);
                    }
                }
            }
        }
    }

    /// Ends the look for "From " lines: bytes held are converted as read.
    fn release(&mut self, out: &mut Vec<u8>) {
        if let Leading::Maybe { quotes, matched } = self.leading {
            self.leading = Leading::Done;
            for _ in 0..quotes {
                self.byte(b'>', out);
            }
            for &b in &FROM_[..matched] {
                self.byte(b, out);
            }
        }
        self.leading = Leading::Done;
    }

    /// Converts one byte past the leading "From " lines.
    fn byte(&mut self, b: u8, out: &mut Vec<u8>) {
        if self.cr {
            self.cr = false;
            if b == b'\n' {
                self.end_line(out);
                return;
            }
            self.flush_dot(out);
            out.push(b'\r');
            self.at_line_start = false;
        }
        match b {
            // Held: CRLF is a line end like LF, and ".\r\n" is a lone dot.
            b'\r' => self.cr = true,
            b'\n' => self.end_line(out),
            b'.' if self.at_line_start => {
                self.at_line_start = false;
                self.dot = true;
            }
            _ => {
                self.flush_dot(out);
                self.at_line_start = false;
                out.push(b);
            }
        }
    }

    fn flush_dot(&mut self, out: &mut Vec<u8>) {
        if self.dot {
            // Dot-stuffing: a line that starts with "." gets another.
            out.extend_from_slice(b"..");
            self.dot = false;
        }
    }

    fn end_line(&mut self, out: &mut Vec<u8>) {
        if self.dot && !self.ignore_dots {
            self.ended = true;
            self.dot = false;
            return;
        }
        self.flush_dot(out);
        out.extend_from_slice(b"\r\n");
        self.at_line_start = true;
    }

    /// Ends the input: a last line without LF is completed.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        self.release(out);
        self.flush_dot(out);
        if self.cr {
            self.cr = false;
            out.push(b'\r');
            self.at_line_start = false;
        }
        if !self.at_line_start {
            out.extend_from_slice(b"\r\n");
            self.at_line_start = true;
        }
    }
}

/// Splits a wire-format header section into fields (name, full text with
/// continuation lines), in order.
pub fn fields(headers: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    for line in headers.split_inclusive(|&b| b == b'\n') {
        if line.starts_with(b" ") || line.starts_with(b"\t") {
            if let Some(last) = out.last_mut() {
                last.1.extend_from_slice(line);
                continue;
            }
        }
        let name = line.iter().position(|&b| b == b':').map(|i| {
            String::from_utf8_lossy(&line[..i])
                .trim()
                .to_ascii_lowercase()
        });
        out.push((name.unwrap_or_default(), line.to_vec()));
    }
    out
}

/// The addresses in an address-list header value (RFC 5322, leniently):
/// display names, comments, groups and angle brackets handled.
pub fn addresses(value: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut angle, mut comment) = (false, false, 0u32);
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '"' if comment == 0 => {
                quoted = !quoted;
                cur.push(c);
            }
            '(' if !quoted => comment += 1,
            ')' if !quoted && comment > 0 => comment -= 1,
            _ if comment > 0 => {}
            '<' if !quoted => {
                angle = true;
                cur.push(c);
            }
            '>' if !quoted => {
                angle = false;
                cur.push(c);
            }
            ':' if !quoted && !angle => cur.clear(), // "group:" prefix
            ',' | ';' if !quoted && !angle => items.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    items.push(cur);
    items
        .into_iter()
        .filter_map(|item| {
            let item = item.trim();
            let addr = match (item.rfind('<'), item.rfind('>')) {
                (Some(a), Some(b)) if a < b => item[a + 1..b].trim(),
                _ => item,
            };
            (!addr.is_empty() && !addr.contains(char::is_whitespace)).then(|| addr.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(input: &[u8], ignore_dots: bool) -> (Vec<u8>, bool) {
        // Every split point must give the same result.
        let mut first = None;
        for cut in 0..=input.len() {
            let mut c = Converter::new(ignore_dots);
            let mut out = Vec::new();
            c.feed(&input[..cut], &mut out);
            c.feed(&input[cut..], &mut out);
            c.finish(&mut out);
            let r = (out, c.ended());
            if let Some(f) = &first {
                assert_eq!(&r, f, "cut {cut}");
            }
            first = Some(r);
        }
        first.unwrap()
    }

    #[test]
    fn converts_line_ends_and_stuffs_dots() {
        assert_eq!(
            conv(b"a\nb\r\n.c\n", false),
            (b"a\r\nb\r\n..c\r\n".to_vec(), false)
        );
        assert_eq!(conv(b"a\n.\nafter\n", false), (b"a\r\n".to_vec(), true));
        assert_eq!(
            conv(b"a\n.\nafter\n", true),
            (b"a\r\n..\r\nafter\r\n".to_vec(), false)
        );
        assert_eq!(
            conv(b"no newline", false),
            (b"no newline\r\n".to_vec(), false)
        );
        assert_eq!(
            conv(b"bare\rcr\n", false),
            (b"bare\rcr\r\n".to_vec(), false)
        );
        assert_eq!(conv(b".", false), (b"..\r\n".to_vec(), false));
        assert_eq!(conv(b"", false), (b"".to_vec(), false));
        assert_eq!(conv(b"x\n.\r\n", false), (b"x\r\n".to_vec(), true));
    }

    #[test]
    fn leading_mbox_from_lines_are_dropped() {
        let c = |i: &[u8]| conv(i, false).0;
        assert_eq!(
            c(b"From x@y Fri Nov 27 05:00:00 2026\n>From z\r\nSubject: s\n\nFrom body\n"),
            b"Subject: s\r\n\r\nFrom body\r\n"
        );
        // Only leading lines, "From " exactly, as Postfix's sendmail.
        assert_eq!(c(b"Subject: s\nFrom x\n"), b"Subject: s\r\nFrom x\r\n");
        assert_eq!(c(b"\nFrom x\n"), b"\r\nFrom x\r\n");
        assert_eq!(c(b"From:x\n"), b"From:x\r\n");
        assert_eq!(c(b"from x\n"), b"from x\r\n");
        assert_eq!(c(b">>Fro\n"), b">>Fro\r\n");
        assert_eq!(c(b">>Fro"), b">>Fro\r\n");
        assert_eq!(c(b"From x"), b"");
        assert_eq!(c(b">.\n"), b">.\r\n");
        assert_eq!(conv(b"From x\n.\nafter\n", false), (b"".to_vec(), true));
        assert_eq!(c(b"From x\n.a\n"), b"..a\r\n");
    }

    #[test]
    fn address_lists() {
        assert_eq!(
            addresses(
                r#"Joe <joe@x.example>, "Doe, Jane" <jane@y.example> (work), plain@z.example"#
            ),
            ["joe@x.example", "jane@y.example", "plain@z.example"]
        );
        assert_eq!(
            addresses("friends: a@b.example, c@d.example;"),
            ["a@b.example", "c@d.example"]
        );
        assert_eq!(addresses("undisclosed-recipients:;"), Vec::<String>::new());
        assert_eq!(addresses(""), Vec::<String>::new());
    }

    #[test]
    fn header_fields_with_folding() {
        let f = fields(b"To: a@b,\r\n c@d\r\nBcc: e@f\r\nSubject: x\r\n");
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].0, "to");
        assert_eq!(f[0].1, b"To: a@b,\r\n c@d\r\n");
        assert_eq!(f[1].0, "bcc");
    }
}
