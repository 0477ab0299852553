#!/usr/bin/env python3
"""An SMTP client for the AUTH tests, on Python's smtplib.

usage: sasl_client.py PORT STEP...
Steps, run in order on one connection:
  ehlo                 EHLO; prints "auth: MECHS" (or "auth: -" when not offered)
  starttls             STARTTLS (certificate not verified: a test certificate), then EHLO
  login USER PASSWORD  smtplib's login(), which picks the mechanism; prints "login: CODE TEXT"
  auth ARGS            a raw "AUTH ARGS" command; prints "auth: CODE TEXT"
  line TEXT            a raw line (an AUTH exchange's response); prints "line: CODE TEXT"
  send FROM TO         MAIL, RCPT and DATA of a small message; prints
                       "send: ok" or "send: CODE TEXT" of the refusal
  quit                 QUIT
A dropped connection prints "closed: ..." and ends the run.
"""
import smtplib
import ssl
import sys


def show(what, code, text):
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    print(f"{what}: {code} {text}".replace("\n", " | "), flush=True)


def main():
    port = int(sys.argv[1])
    steps = sys.argv[2:]
    s = smtplib.SMTP("127.0.0.1", port, timeout=60)
    i = 0
    try:
        while i < len(steps):
            step = steps[i]
            i += 1
            if step == "ehlo":
                s.ehlo()
                print("auth:", s.esmtp_features.get("auth", "-").strip() or "-", flush=True)
            elif step == "starttls":
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                s.starttls(context=ctx)
                s.ehlo()
            elif step == "login":
                user, password = steps[i], steps[i + 1]
                i += 2
                try:
                    code, text = s.login(user, password)
                    show("login", code, text)
                except smtplib.SMTPAuthenticationError as e:
                    show("login", e.smtp_code, e.smtp_error)
                except smtplib.SMTPNotSupportedError as e:
                    print("login: not offered:", e, flush=True)
            elif step in ("auth", "line"):
                arg = steps[i]
                i += 1
                if step == "auth":
                    code, text = s.docmd("AUTH", arg)
                else:
                    s.send((arg + "\r\n").encode())
                    code, text = s.getreply()
                show(step, code, text)
            elif step == "send":
                frm, to = steps[i], steps[i + 1]
                i += 2
                try:
                    s.sendmail(frm, [to], f"From: <{frm}>\r\nTo: <{to}>\r\nSubject: auth test\r\n\r\nhello\r\n")
                    print("send: ok", flush=True)
                except smtplib.SMTPRecipientsRefused as e:
                    code, text = e.recipients[to]
                    show("send", code, text)
                except smtplib.SMTPResponseException as e:
                    show("send", e.smtp_code, e.smtp_error)
                    s.rset()
            elif step == "quit":
                s.quit()
            else:
                sys.exit(f"unknown step {step}")
    except (smtplib.SMTPServerDisconnected, ConnectionError) as e:
        print("closed:", e, flush=True)


main()
