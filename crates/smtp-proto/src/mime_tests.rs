use super::*;

/// Walks `content` line by line: the headers found (class, text) and
/// the body lines, in order, as one list.
fn walk(content: &str, limit: usize) -> Vec<String> {
    let mut w = Walker::new(limit);
    let mut out = Vec::new();
    let header = |h: Header, out: &mut Vec<String>| {
        out.push(format!(
            "{:?}{}: {}",
            h.class,
            if h.truncated { "!" } else { "" },
            String::from_utf8_lossy(&h.raw).trim_end()
        ))
    };
    for line in content.split_inclusive('\n') {
        let text = line.trim_end_matches('\n').trim_end_matches('\r');
        let step = w.record(text.as_bytes(), line.as_bytes(), line.ends_with('\n'));
        if let Some(h) = step.header {
            header(h, &mut out);
        }
        if step.ends_headers {
            out.push("end".to_string());
        } else if step.body {
            out.push(format!("body: {text}"));
        }
    }
    if let Some(h) = w.finish() {
        header(h, &mut out);
    }
    out
}

#[test]
fn parts_and_attached_messages_are_told_apart() {
    let content = "Subject: top\r\nContent-Type: multipart/mixed;\r\n boundary=\"b1\"\r\n\r\n\
        preamble\r\n--b1\r\nContent-Type: text/plain\r\nX-Part: 1\r\n\r\nhello\r\n\
        --b1\r\nContent-Type: message/rfc822\r\n\r\nSubject: inner\r\nFrom: x\r\n\r\ninner body\r\n\
        --b1--\r\nepilogue\r\n";
    assert_eq!(
        walk(content, 1000),
        [
            "Primary: Subject: top",
            "Primary: Content-Type: multipart/mixed;\r\n boundary=\"b1\"",
            "end",
            "body: preamble",
            "body: --b1",
            "Multipart: Content-Type: text/plain",
            "Multipart: X-Part: 1",
            "end",
            "body: hello",
            "body: --b1",
            "Multipart: Content-Type: message/rfc822",
            "end",
            "Nested: Subject: inner",
            "Nested: From: x",
            "end",
            "body: inner body",
            "body: --b1--",
            "body: epilogue",
        ]
    );
}

#[test]
fn digest_parts_default_to_messages_and_text_is_not_walked() {
    let content = "Content-Type: multipart/digest; boundary=d\r\n\r\n--d\r\n\r\n\
        Subject: in digest\r\n\r\nx\r\n--d--\r\n";
    let got = walk(content, 1000);
    assert!(
        got.contains(&"Nested: Subject: in digest".to_string()),
        "{got:?}"
    );
    // No Content-Type: the body is text, header-like lines and all.
    let got = walk("Subject: s\r\n\r\nX-Not: header\r\n--b\r\n", 1000);
    assert_eq!(got[2..], ["body: X-Not: header", "body: --b"]);
}

#[test]
fn a_long_header_is_cut_after_the_record_that_reaches_the_limit() {
    let content =
        "Subject: 0123456789\r\n more 0123456789\r\n dropped\r\n also dropped\r\nTo: x\r\n\r\n";
    assert_eq!(
        walk(content, 25),
        [
            "Primary!: Subject: 0123456789\r\n more 0123456789",
            "Primary: To: x",
            "end",
        ]
    );
    // A record that starts below the limit is kept whole.
    assert_eq!(walk("A: b\r\n c\r\n\r\n", 4)[0], "Primary!: A: b");
}

#[test]
fn a_header_block_ended_by_a_non_header_and_an_unended_header() {
    assert_eq!(
        walk("Subject: s\r\nnot a header\r\n", 100),
        ["Primary: Subject: s", "body: not a header"]
    );
    assert_eq!(walk("Subject: s", 100), ["Primary: Subject: s"]);
}

#[test]
fn nesting_is_bounded() {
    let mut content = String::new();
    for i in 0..NESTING_LIMIT + 5 {
        content.push_str(&format!(
            "Content-Type: multipart/mixed; boundary=b{i}\r\n\r\n--b{i}\r\n"
        ));
    }
    let mut w = Walker::new(1000);
    for line in content.split_inclusive('\n') {
        w.record(line.trim_end().as_bytes(), line.as_bytes(), true);
    }
    assert!(w.too_deep());
    assert!(w.stack.0.len() <= NESTING_LIMIT);
}

#[test]
fn content_types() {
    let ct = content_type(b" multipart/alternative; (c) boundary=\"a b\"; boundary=x");
    assert_eq!(ct.ctype, Ctype::Multipart);
    assert_eq!(ct.boundaries, [b"a b".to_vec(), b"x".to_vec()]);
    assert_eq!(content_type(b"Message/RFC822").stype, Stype::Rfc822);
    assert_eq!(content_type(b"image/png").ctype, Ctype::Other);
    assert!(is_header(b"X-A: b") && !is_header(b" X: b") && !is_header(b":x"));
    assert!(is_mime_header(b"MIME-Version") && !is_mime_header(b"Subject"));
}
