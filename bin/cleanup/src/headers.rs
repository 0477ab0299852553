//! The header section of a message as cleanup sees it, sans-IO.
//!
//! cleanup holds back the start of the content until the empty line that
//! ends the headers (or `MAX_HEADER_BYTES`, past which the content is
//! passed through untouched, as Postfix's header_size_limit does), so that
//! it can prepend Received: and add the headers a message must have
//! (Message-ID:, Date:, and From: for local submissions) before anything
//! reaches the spool. Content is wire format: CRLF line ends, dot-stuffed.
//!
//! It also takes traffic shaping's tenant and job ids from the headers
//! `tenant_id_header` and `job_id_header` name ([`take_ids`]), removing
//! those headers unless `shaping_header_keep`, and settles where each id
//! comes from ([`settle_ids`]): an smtpd access action, then the header,
//! then (for the tenant) the SASL login name.

use std::borrow::Cow;

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
    /// Received: headers counted: the hops the message made before us.
    pub received: usize,
}

/// Collects the header section.
#[derive(Debug, Default)]
pub struct HeaderBuffer {
    buf: Vec<u8>,
    done: bool,
}

/// The result of feeding content.
#[derive(Debug, PartialEq, Eq)]
pub enum Fed<'a> {
    /// Still inside the headers: everything was kept.
    Holding,
    /// The header section is complete: `headers` (without the empty line)
    /// then `rest` (from the empty line on) follow.
    Complete {
        /// The header lines, each ending in CRLF.
        headers: Vec<u8>,
        /// The empty line and everything after it that was fed: borrowed
        /// from what was just fed (the body is not copied here), unless
        /// the empty line began in an earlier feed.
        rest: Cow<'a, [u8]>,
    },
    /// Past the header section already: the bytes fed pass through as
    /// they are (the caller writes them; nothing is copied here).
    Through,
}

impl HeaderBuffer {
    /// Feeds content bytes. Only header bytes are kept: the body that
    /// comes with the end of the headers is handed back as a part of
    /// `bytes`.
    pub fn feed<'a>(&mut self, bytes: &'a [u8]) -> Fed<'a> {
        if self.done {
            return Fed::Through;
        }
        let old = self.buf.len();
        // Where the empty line starts, counted in what was held and then
        // fed: a message that starts with the empty line has no headers;
        // else the first CRLF CRLF, across the two or within `bytes`.
        let starts_empty = match old {
            0 => bytes.starts_with(b"\r\n"),
            1 => self.buf[0] == b'\r' && bytes.first() == Some(&b'\n'),
            _ => false,
        };
        let end = if starts_empty {
            Some(0)
        } else {
            let start = old.saturating_sub(3);
            let mut seam = self.buf[start..].to_vec();
            seam.extend_from_slice(&bytes[..bytes.len().min(3)]);
            find(&seam, b"\r\n\r\n")
                .map(|i| start + i + 2)
                .or_else(|| find(bytes, b"\r\n\r\n").map(|i| old + i + 2))
        };
        if let Some(end) = end {
            self.done = true;
            if end >= old {
                self.buf.extend_from_slice(&bytes[..end - old]);
                return Fed::Complete {
                    headers: std::mem::take(&mut self.buf),
                    rest: Cow::Borrowed(&bytes[end - old..]),
                };
            }
            let mut rest = self.buf.split_off(end);
            rest.extend_from_slice(bytes);
            return Fed::Complete {
                headers: std::mem::take(&mut self.buf),
                rest: Cow::Owned(rest),
            };
        }
        self.buf.extend_from_slice(bytes);
        if self.buf.len() > MAX_HEADER_BYTES {
            self.done = true;
            return Fed::Complete {
                headers: Vec::new(),
                rest: Cow::Owned(std::mem::take(&mut self.buf)),
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

/// Which headers carry the shaping ids, and whether they stay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdHeaders {
    /// `tenant_id_header`, if set.
    pub tenant: Option<String>,
    /// `job_id_header`, if set.
    pub job: Option<String>,
    /// `shaping_header_keep`.
    pub keep: bool,
}

impl IdHeaders {
    /// From main.cf (the names were checked when it was loaded).
    pub fn from_config(cfg: &config::Config) -> Self {
        let name = |p: &str| {
            config::parse_header_name(&cfg.str(p))
                .ok()
                .flatten()
                .map(str::to_string)
        };
        IdHeaders {
            tenant: name("tenant_id_header"),
            job: name("job_id_header"),
            keep: cfg.bool("shaping_header_keep"),
        }
    }

    fn is_on(&self) -> bool {
        self.tenant.is_some() || self.job.is_some()
    }
}

/// What the first tenant and job headers said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ids {
    /// The first tenant header's value: `Ok` when it is a valid id,
    /// `Err` with the value when it is not (ignored, but logged).
    pub tenant: Option<Result<String, String>>,
    /// The same for the job header.
    pub job: Option<Result<String, String>>,
}

/// The header section without the headers named in `names` (Postfix's
/// message_drop_headers: Bcc:, Resent-Bcc:, Return-Path:, Content-Length:
/// by default), continuation lines included; borrowed when none is there.
pub fn drop_named<'a>(headers: &'a [u8], names: &[String]) -> std::borrow::Cow<'a, [u8]> {
    let named = |line: &[u8]| {
        line.iter().position(|&b| b == b':').is_some_and(|i| {
            let n = line[..i].trim_ascii();
            names.iter().any(|d| d.as_bytes().eq_ignore_ascii_case(n))
        })
    };
    let folded = |line: &[u8]| line.starts_with(b" ") || line.starts_with(b"\t");
    let lines = || headers.split_inclusive(|&b| b == b'\n');
    if names.is_empty() || !lines().any(|l| !folded(l) && named(l)) {
        return headers.into();
    }
    let mut kept = Vec::with_capacity(headers.len());
    let mut dropping = false;
    for line in lines() {
        if !folded(line) {
            dropping = named(line);
        }
        if !dropping {
            kept.extend_from_slice(line);
        }
    }
    kept.into()
}

/// Finds the id headers in complete header lines; gives the header lines
/// to keep (all of them with `keep`, else all but every id header, folded
/// lines included) and what the first of each said.
pub fn take_ids<'a>(headers: &'a [u8], which: &IdHeaders) -> (std::borrow::Cow<'a, [u8]>, Ids) {
    let mut ids = Ids::default();
    if !which.is_on() {
        return (headers.into(), ids);
    }
    let mut kept = Vec::with_capacity(headers.len());
    let mut dropping = false;
    // The first tenant (false) or job (true) header being read, its value so far.
    let mut current: Option<(bool, Vec<u8>)> = None;
    let done = |ids: &mut Ids, cur: Option<(bool, Vec<u8>)>| {
        if let Some((job, v)) = cur {
            let slot = if job { &mut ids.job } else { &mut ids.tenant };
            *slot = Some(id_value(&v));
        }
    };
    for line in headers.split_inclusive(|&b| b == b'\n') {
        if line.starts_with(b" ") || line.starts_with(b"\t") {
            if let Some((_, v)) = current.as_mut() {
                v.extend_from_slice(line);
            }
            if !dropping {
                kept.extend_from_slice(line);
            }
            continue;
        }
        done(&mut ids, current.take());
        let hit = line.iter().position(|&b| b == b':').and_then(|i| {
            let n = String::from_utf8_lossy(&line[..i]);
            let n = n.trim();
            let is = |h: &Option<String>| h.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(n));
            let value = line[i + 1..].to_vec();
            if is(&which.tenant) {
                Some((false, value))
            } else if is(&which.job) {
                Some((true, value))
            } else {
                None
            }
        });
        dropping = hit.is_some() && !which.keep;
        if let Some((job, v)) = hit {
            // Only the first such header counts.
            let seen = if job { &ids.job } else { &ids.tenant };
            if seen.is_none() {
                current = Some((job, v));
            }
        }
        if !dropping {
            kept.extend_from_slice(line);
        }
    }
    done(&mut ids, current.take());
    (kept.into(), ids)
}

/// An id header's value unfolded: the id, or the value that is not one.
fn id_value(raw: &[u8]) -> Result<String, String> {
    let text = String::from_utf8_lossy(raw).replace("\r\n", "");
    match mail::shaping_id(&text) {
        Some(id) => Ok(id.to_string()),
        None => Err(text.trim().escape_default().to_string()),
    }
}

/// Settles the message's tenant and job: what an smtpd access action set
/// (already in the envelope) stays; else the header's valid value; else,
/// for the tenant with `tenant_from_sasl`, the SASL login name.
pub fn settle_ids(env: &mut mail::Envelope, ids: &Ids, tenant_from_sasl: bool) {
    let valid = |v: &Option<Result<String, String>>| v.as_ref().and_then(|r| r.clone().ok());
    if env.tenant.is_none() {
        env.tenant = valid(&ids.tenant);
    }
    if env.job.is_none() {
        env.job = valid(&ids.job);
    }
    if env.tenant.is_none() && tenant_from_sasl {
        env.tenant = env
            .auth
            .as_deref()
            .and_then(mail::shaping_id)
            .map(str::to_string);
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
            "received" => seen.received += 1,
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
                    Fed::Complete { headers, rest } => got = Some((headers, rest.into_owned())),
                    Fed::Through => got.as_mut().unwrap().1.extend(piece),
                }
            }
            let (headers, rest) = got.expect("complete");
            assert_eq!(headers, b"From: a@b\r\nMessage-ID: <1@x>\r\n", "cut {cut}");
            assert_eq!(rest, b"\r\nbody\r\n", "cut {cut}");
        }
    }

    #[test]
    fn the_body_fed_with_the_end_of_the_headers_is_handed_back_not_copied() {
        let mut h = HeaderBuffer::default();
        assert_eq!(h.feed(b"Subject: x\r\n"), Fed::Holding);
        let fed = b"From: a@b\r\n\r\nbody\r\n".to_vec();
        match h.feed(&fed) {
            Fed::Complete {
                headers,
                rest: Cow::Borrowed(rest),
            } => {
                assert_eq!(headers, b"Subject: x\r\nFrom: a@b\r\n");
                assert_eq!(rest, b"\r\nbody\r\n");
                assert!(std::ptr::eq(rest.as_ptr(), fed[11..].as_ptr()));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(h.feed(b"more\r\n"), Fed::Through);
    }

    #[test]
    fn no_headers_and_headers_only() {
        let mut h = HeaderBuffer::default();
        assert_eq!(
            h.feed(b"\r\nbody\r\n"),
            Fed::Complete {
                headers: vec![],
                rest: Cow::Borrowed(b"\r\nbody\r\n")
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

    fn which(keep: bool) -> IdHeaders {
        IdHeaders {
            tenant: Some("X-Tenant-ID".into()),
            job: Some("X-Job-ID".into()),
            keep,
        }
    }

    #[test]
    fn id_headers_are_taken_and_removed_folded_lines_too() {
        let h = b"From: a@b\r\nx-tenant-id:  acme \r\nSubject: hi\r\nX-Job-ID: spring\r\n sale\r\nX-Tenant-ID: other\r\nTo: c@d\r\n";
        let (kept, ids) = take_ids(h, &which(false));
        assert_eq!(&*kept, b"From: a@b\r\nSubject: hi\r\nTo: c@d\r\n");
        assert_eq!(ids.tenant, Some(Ok("acme".into())), "the first one counts");
        assert_eq!(ids.job, Some(Ok("spring sale".into())));
        let (kept, ids2) = take_ids(h, &which(true));
        assert_eq!(&*kept, &h[..]);
        assert_eq!(ids2, ids);
    }

    #[test]
    fn bad_id_values_are_ignored_and_off_means_untouched() {
        let long = format!(
            "X-Tenant-ID: {}\r\nX-Job-ID:   \r\nSubject: x\r\n",
            "t".repeat(65)
        );
        let (kept, ids) = take_ids(long.as_bytes(), &which(false));
        assert_eq!(&*kept, b"Subject: x\r\n");
        assert!(matches!(ids.tenant, Some(Err(_))));
        assert_eq!(ids.job, Some(Err(String::new())));
        let (_, ids) = take_ids(b"X-Tenant-ID: a\x01b\r\n", &which(false));
        assert_eq!(ids.tenant, Some(Err("a\\u{1}b".into())));
        let h = b"X-Tenant-ID: acme\r\n";
        let (kept, ids) = take_ids(h, &IdHeaders::default());
        assert_eq!((&*kept, ids), (&h[..], Ids::default()));
        // A header whose value merely mentions the name is not one.
        let (kept, ids) = take_ids(b"Subject: X-Tenant-ID: acme\r\n", &which(false));
        assert_eq!(
            (&*kept, ids),
            (&b"Subject: X-Tenant-ID: acme\r\n"[..], Ids::default())
        );
    }

    #[test]
    fn an_access_action_beats_the_header_which_beats_sasl() {
        let ids = Ids {
            tenant: Some(Ok("from-header".into())),
            job: Some(Ok("job-h".into())),
        };
        let env = |tenant: Option<&str>, auth: Option<&str>| mail::Envelope {
            tenant: tenant.map(str::to_string),
            auth: auth.map(str::to_string),
            ..mail::Envelope::default()
        };
        let mut e = env(Some("from-action"), Some("alice"));
        settle_ids(&mut e, &ids, true);
        assert_eq!(
            (e.tenant.as_deref(), e.job.as_deref()),
            (Some("from-action"), Some("job-h"))
        );
        let mut e = env(None, Some("alice"));
        settle_ids(&mut e, &ids, true);
        assert_eq!(e.tenant.as_deref(), Some("from-header"));
        let mut e = env(None, Some("alice"));
        settle_ids(&mut e, &Ids::default(), true);
        assert_eq!(e.tenant.as_deref(), Some("alice"));
        let mut e = env(None, Some("alice"));
        settle_ids(&mut e, &Ids::default(), false);
        assert_eq!(e.tenant, None, "tenant_from_sasl = no");
        // A bad header value does not hide the SASL name.
        let bad = Ids {
            tenant: Some(Err(String::new())),
            job: None,
        };
        let mut e = env(None, Some("bob"));
        settle_ids(&mut e, &bad, true);
        assert_eq!(e.tenant.as_deref(), Some("bob"));
        let mut e = env(None, None);
        settle_ids(&mut e, &bad, true);
        assert_eq!((e.tenant, e.job), (None, None));
    }

    #[test]
    fn oversized_headers_pass_through() {
        let mut h = HeaderBuffer::default();
        let big = vec![b'x'; MAX_HEADER_BYTES + 10];
        assert!(matches!(h.feed(&big), Fed::Complete { ref headers, .. } if headers.is_empty()));
        assert_eq!(h.feed(b"more"), Fed::Through);
    }

    #[test]
    fn named_headers_are_dropped_with_their_continuations() {
        let names: Vec<String> = ["bcc", "return-path"].map(String::from).to_vec();
        let h =
            b"To: a@x\r\nBCC: b@x,\r\n c@x\r\nSubject: s\r\nReturn-Path : <r@x>\r\nX-Bcc: kept\r\n";
        assert_eq!(
            &*drop_named(h, &names),
            &b"To: a@x\r\nSubject: s\r\nX-Bcc: kept\r\n"[..]
        );
        let plain = b"To: a@x\r\nSubject: s\r\n";
        assert!(matches!(
            drop_named(plain, &names),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(&*drop_named(h, &[]), &h[..]);
    }
}
