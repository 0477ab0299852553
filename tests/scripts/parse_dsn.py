#!/usr/bin/env python3
"""Parses a delivery status notification with Python's email package and
prints what a test checks, one "key: value" per line.

RFC 6533's global report (message/global-delivery-status, for SMTPUTF8
mail) is read from a second parse with the SMTPUTF8 policy, its fields
UTF-8: the email package knows no message/global-delivery-status and
parses it as a message (the per-message fields its header), so its
blocks of fields are split here and each read by the email package.

usage: parse_dsn.py FILE   (a message as smtp-sink -d dumps it)
"""
import email
import email.policy
import sys

raw = open(sys.argv[1], "rb").read()
# smtp-sink puts X-Client-*/X-Mail-Args/X-Rcpt-Args lines before the message.
msg = email.message_from_bytes(raw, policy=email.policy.compat32)
umsg = email.message_from_bytes(raw, policy=email.policy.SMTPUTF8)
print("content-type: %s" % msg.get_content_type())
print("report-type: %s" % msg.get_param("report-type"))
print("to: %s" % umsg["To"])
print("subject: %s" % msg["Subject"])
parts = msg.get_payload()
print("parts: %d" % len(parts))
for p, up in zip(parts, umsg.get_payload()):
    print("part: %s" % p.get_content_type())
    if up.get_content_type() == "message/global-delivery-status":
        text = up.get_payload(0).as_bytes().replace(b"\r\n", b"\n")
        blocks = [
            email.message_from_bytes(b, policy=email.policy.SMTPUTF8)
            for b in text.split(b"\n\n")
            if b.strip()
        ]
        print("reporting-mta: %s" % blocks[0]["Reporting-MTA"])
        print("x-sluice-sender: %s" % blocks[0]["X-Sluice-Sender"])
        for b in blocks[1:]:
            print("final-recipient: %s" % b["Final-Recipient"])
            print("original-recipient: %s" % b["Original-Recipient"])
            print("action: %s" % b["Action"])
            print("status: %s" % b["Status"])
            print("diagnostic-code: %s" % b["Diagnostic-Code"])
    if up.get_content_type() in ("message/global", "message/global-headers"):
        returned = up.get_payload(0)
        print("returned-subject: %s" % returned["Subject"])
        print("returned-body: %r" % returned.get_payload())
    if p.get_content_type() == "message/delivery-status":
        blocks = p.get_payload()
        per_msg = blocks[0]
        print("reporting-mta: %s" % per_msg["Reporting-MTA"])
        print("original-envelope-id: %s" % per_msg["Original-Envelope-Id"])
        for b in blocks[1:]:
            print("final-recipient: %s" % b["Final-Recipient"])
            print("original-recipient: %s" % b["Original-Recipient"])
            print("action: %s" % b["Action"])
            print("status: %s" % b["Status"])
            print("remote-mta: %s" % b["Remote-MTA"])
            print("diagnostic-code: %s" % b["Diagnostic-Code"])
    if p.get_content_type() in ("message/rfc822", "text/rfc822-headers"):
        body = p.get_payload()
        if isinstance(body, list):
            print("returned-subject: %s" % body[0]["Subject"])
        else:
            print("returned-headers: %s" % ("Subject: bounced" in body))
