use super::*;

/// Converts `input` fed in pieces of `step` bytes.
fn run(input: &[u8], step: usize) -> Result<Vec<u8>, MimeError> {
    let mut d = Downgrader::new();
    let mut out = Vec::new();
    for piece in input.chunks(step.max(1)) {
        d.push(piece, &mut out)?;
    }
    d.finish(&mut out)?;
    Ok(out)
}

/// The same output whatever the pieces the input came in.
fn convert(input: &[u8]) -> Vec<u8> {
    let whole = run(input, input.len()).unwrap();
    for step in [1, 2, 3, 7, 64] {
        assert_eq!(
            run(input, step).unwrap(),
            whole,
            "fed {step} bytes at a time"
        );
    }
    whole
}

/// Decodes quoted-printable lines (RFC 2045 §6.7).
fn unqp(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in text.split_inclusive(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r\n").expect("CR LF line");
        let (line, soft) = match line.strip_suffix(b"=") {
            Some(l) => (l, true),
            None => (line, false),
        };
        let mut i = 0;
        while i < line.len() {
            if line[i] == b'=' {
                let h = std::str::from_utf8(&line[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(h, 16).unwrap());
                i += 3;
            } else {
                out.push(line[i]);
                i += 1;
            }
        }
        if !soft {
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

fn seven_bit(text: &[u8]) {
    assert!(
        text.iter().all(|&b| b < 128),
        "8-bit byte in {:?}",
        String::from_utf8_lossy(text)
    );
    for line in text.split(|&b| b == b'\n') {
        assert!(line.len() <= 77, "line of {} bytes", line.len());
    }
}

const HEAD_8: &[u8] = b"From: a@b\r\nSubject: caf\xc3\xa9\r\nMIME-Version: 1.0\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n";

#[test]
fn leaf_8bit_becomes_quoted_printable() {
    let body: &[u8] = b"caf\xc3\xa9 = ok\r\n.dot line\r\nend  \r\n\ttab\t\r\n";
    let out = convert(&[HEAD_8, body].concat());
    let want_head = b"From: a@b\r\nSubject: caf\xc3\xa9\r\nMIME-Version: 1.0\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n";
    assert!(
        out.starts_with(want_head),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let qp = &out[want_head.len()..];
    assert_eq!(
        qp,
        b"caf=C3=A9 =3D ok\r\n.dot line\r\nend =20\r\n\ttab=09\r\n"
    );
    assert_eq!(unqp(qp), body);
}

#[test]
fn long_lines_get_soft_breaks_within_76() {
    for len in [70, 72, 73, 74, 75, 76, 77, 150, 5000, 9000] {
        let mut body: Vec<u8> = (0..len)
            .map(|i| if i % 5 == 0 { 0xe9 } else { b'x' })
            .collect();
        body.extend_from_slice(b" \r\n");
        let out = convert(&[HEAD_8, &body].concat());
        let qp = &out[out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
        seven_bit(qp);
        assert_eq!(unqp(qp), body, "length {len}");
        for line in qp.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            assert!(line.len() <= 77, "{} > 76 + CR", line.len());
        }
    }
}

#[test]
fn seven_bit_and_undeclared_parts_pass_unchanged() {
    for msg in [
        &b"From: a@b\r\nSubject: x\r\n\r\nplain \xe9 no MIME\r\n"[..],
        b"Content-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n\r\nw6k=\r\n",
        b"Content-Transfer-Encoding: 7bit\r\n\r\nline=\r\n",
        b"Subject: no final newline\r\n\r\nbody",
        b"",
    ] {
        let out = convert(msg);
        let mut want = msg.to_vec();
        if !msg.is_empty() && !msg.ends_with(b"\n") {
            want.extend_from_slice(b"\r\n");
        }
        assert_eq!(out, want, "{}", String::from_utf8_lossy(msg));
    }
}

#[test]
fn multipart_converts_each_8bit_part() {
    let msg: &[u8] = b"MIME-Version: 1.0\r\n\
Content-Type: multipart/mixed;\r\n boundary=\"b1\" (comment)\r\n\
Content-Transfer-Encoding: 8bit\r\n\
\r\n\
prolog \xe9\r\n\
--b1\r\n\
Content-Type: text/plain; charset=latin1\r\n\
Content-Transfer-Encoding: 8BIT\r\n\
\r\n\
one \xe9\r\n\
--b1\r\n\
Content-Type: application/octet-stream\r\n\
Content-Transfer-Encoding: base64\r\n\
\r\n\
AAAA\r\n\
--b1\r\n\
\r\n\
default text \xe9\r\n\
--b1--\r\n\
epilogue \xe9\r\n";
    let out = convert(msg);
    let want: &[u8] = b"MIME-Version: 1.0\r\n\
Content-Type: multipart/mixed;\r\n boundary=\"b1\" (comment)\r\n\
Content-Transfer-Encoding: 7bit\r\n\
\r\n\
prolog \xe9\r\n\
--b1\r\n\
Content-Type: text/plain; charset=latin1\r\n\
Content-Transfer-Encoding: quoted-printable\r\n\
\r\n\
one =E9\r\n\
--b1\r\n\
Content-Type: application/octet-stream\r\n\
Content-Transfer-Encoding: base64\r\n\
\r\n\
AAAA\r\n\
--b1\r\n\
\r\n\
default text \xe9\r\n\
--b1--\r\n\
epilogue \xe9\r\n";
    assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(want));
}

#[test]
fn nested_message_rfc822_is_walked() {
    let msg: &[u8] = b"Content-Type: multipart/mixed; boundary=outer\r\n\r\n\
--outer\r\n\
Content-Type: message/rfc822\r\n\
Content-Transfer-Encoding: 8bit\r\n\
\r\n\
Subject: inner\r\n\
Content-Type: multipart/alternative; boundary=\"inner\"\r\n\
\r\n\
--inner\r\n\
Content-Type: text/plain\r\n\
Content-Transfer-Encoding: binary\r\n\
\r\n\
in \xc3\xa9=\r\n\
--inner--\r\n\
--outer\r\n\
Content-Type: text/plain\r\n\
Content-Transfer-Encoding: 8bit\r\n\
\r\n\
.two \xe9\r\n\
--outer--\r\n";
    let out = convert(msg);
    let want: &[u8] = b"Content-Type: multipart/mixed; boundary=outer\r\n\r\n\
--outer\r\n\
Content-Type: message/rfc822\r\n\
Content-Transfer-Encoding: 7bit\r\n\
\r\n\
Subject: inner\r\n\
Content-Type: multipart/alternative; boundary=\"inner\"\r\n\
\r\n\
--inner\r\n\
Content-Type: text/plain\r\n\
Content-Transfer-Encoding: quoted-printable\r\n\
\r\n\
in =C3=A9=3D\r\n\
--inner--\r\n\
--outer\r\n\
Content-Type: text/plain\r\n\
Content-Transfer-Encoding: quoted-printable\r\n\
\r\n\
.two =E9\r\n\
--outer--\r\n";
    assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(want));
    seven_bit(&out);
}

#[test]
fn crlf_and_control_bytes() {
    // A bare CR inside a line is quoted; a bare LF ends a line as CR LF.
    let out = convert(&[HEAD_8, b"a\rb\x00c\nlast\r\n"].concat());
    assert!(
        out.ends_with(b"\r\n\r\na=0Db=00c\r\nlast\r\n"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    // No final line end: the quoted line still gets one.
    let out = convert(&[HEAD_8, b"tail \xe9"].concat());
    assert!(out.ends_with(b"\r\n\r\ntail =E9\r\n"));
    // A CR LF across the segment edge is one line end.
    let mut long = vec![b'y'; SEGMENT - 1];
    long.extend_from_slice(b"\r\nz\r\n");
    let msg = [b"Subject: s\r\n\r\n".as_slice(), &long].concat();
    assert_eq!(convert(&msg), msg);
}

#[test]
fn headers_end_without_body_or_with_garbage() {
    // Headers only: the replacement still comes.
    let out = convert(b"Content-Transfer-Encoding: 8bit\r\nSubject: x");
    assert_eq!(
        out,
        b"Subject: x\r\nContent-Transfer-Encoding: quoted-printable\r\n"
    );
    // A line that is no header ends the primary header; nothing is added.
    let out = convert(b"Subject: x\r\nnot a header\r\n");
    assert_eq!(out, b"Subject: x\r\nnot a header\r\n");
    // Converted, the new header must end the block: an empty line goes
    // in before the line that ended it (else it reads as a header).
    let out = convert(b"Content-Transfer-Encoding: 8bit\r\n\xe9\r\n");
    assert_eq!(
        out,
        b"Content-Transfer-Encoding: quoted-printable\r\n\r\n=E9\r\n"
    );
}

#[test]
fn a_part_with_several_transfer_encodings_is_converted_once() {
    // 8bit then 7bit: still converted (8-bit bytes never go out raw), and
    // neither header kept beside the new one.
    for head in [
        &b"Content-Transfer-Encoding: 8bit\r\nContent-Transfer-Encoding: 7bit\r\n"[..],
        b"Content-Transfer-Encoding: 8bit\r\nX: y\r\nContent-Transfer-Encoding: base64\r\n",
    ] {
        let out = convert(&[head, b"\r\ncaf\xc3\xa9\r\n"].concat());
        seven_bit(&out);
        let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
        assert_eq!(
            text.matches("content-transfer-encoding:").count(),
            1,
            "{text}"
        );
        assert!(
            text.contains("content-transfer-encoding: quoted-printable"),
            "{text}"
        );
    }
}

#[test]
fn nesting_beyond_the_limit_fails() {
    let mut msg = Vec::new();
    // One level more than the limit, as cleanup's walk (mime.rs) counts.
    for i in 0..=NESTING_LIMIT {
        msg.extend_from_slice(
            format!("Content-Type: multipart/mixed; boundary=b{i}\r\n\r\n--b{i}\r\n").as_bytes(),
        );
    }
    assert_eq!(run(&msg, msg.len()), Err(MimeError::Nesting));
    assert_eq!(MimeError::Nesting.status().0, StatusCode::known(5, 6, 0));
    let mut ok = Vec::new();
    for i in 0..NESTING_LIMIT {
        ok.extend_from_slice(
            format!("Content-Type: multipart/mixed; boundary=b{i}\r\n\r\n--b{i}\r\n").as_bytes(),
        );
    }
    assert!(run(&ok, 5).is_ok());
}

#[test]
fn oversized_header_passes_unparsed() {
    let mut msg = b"X-Big: ".to_vec();
    msg.extend(std::iter::repeat_n(b'a', HEADER_LIMIT + 10));
    msg.extend_from_slice(b"\r\n more\r\nContent-Transfer-Encoding: 8bit\r\n\r\n\xe9\r\n");
    let out = convert(&msg);
    assert!(
        out.ends_with(b"\r\n more\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n=E9\r\n")
    );
}

#[test]
fn stuffing_doubles_leading_dots() {
    let mut out = Vec::new();
    let mid = stuff(b".a\r\n..b\r\nc.", false, &mut out);
    assert!(mid);
    let mid = stuff(b"\r\n.", mid, &mut out);
    assert_eq!(out, b"..a\r\n...b\r\nc.\r\n..");
    assert!(mid);
}
