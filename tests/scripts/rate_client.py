#!/usr/bin/env python3
"""Run SMTP commands with smtplib from a chosen source address and print
each reply as "verb: code text", one a line.

Steps: "mail" (MAIL FROM:<s@example.org>), "rcpt:N" (RCPT TO:<uN@mx.test.example>),
"vrfy:N", "rset", "data" (a short message).

usage: rate_client.py PORT SOURCE_IP STEP...
"""
import smtplib
import sys

port, source = int(sys.argv[1]), sys.argv[2]
s = smtplib.SMTP("127.0.0.1", port, source_address=(source, 0), timeout=30)
s.ehlo("client.example")
for step in sys.argv[3:]:
    verb, _, arg = step.partition(":")
    if verb == "mail":
        code, text = s.mail("s@example.org")
    elif verb == "rcpt":
        code, text = s.rcpt(f"u{arg}@mx.test.example")
    elif verb == "vrfy":
        code, text = s.docmd("VRFY", f"u{arg}@mx.test.example")
    elif verb == "rset":
        code, text = s.rset()
    elif verb == "data":
        code, text = s.data(b"Subject: rate\r\n\r\nhello\r\n")
    else:
        sys.exit(f"unknown step {step}")
    print(f"{step}: {code} {text.decode()}", flush=True)
s.quit()
