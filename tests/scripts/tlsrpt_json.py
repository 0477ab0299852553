#!/usr/bin/env python3
"""Reads TLS report messages (RFC 8460) as smtp-sink -d dumps them, parses
their JSON and prints, per policy of each report, one line of what a test
checks: `DOMAIN key=value ...` (header domain, policy type, counts, the
result types of the failure details, the mx patterns).

usage: tlsrpt_json.py FILE...

A message without an application/tlsrpt+json part is an error.
"""
import email
import email.policy
import json
import sys

for f in sys.argv[1:]:
    msg = email.message_from_bytes(open(f, "rb").read(), policy=email.policy.compat32)
    assert msg.get_content_type() == "multipart/report", msg.get_content_type()
    assert msg.get_param("report-type") == "tlsrpt", msg.get_param("report-type")
    parts = [p for p in msg.get_payload() if p.get_content_type() == "application/tlsrpt+json"]
    assert len(parts) == 1, "no application/tlsrpt+json part in %s" % f
    report = json.loads(parts[0].get_payload(decode=True))
    for p in report["policies"]:
        pol, summ = p["policy"], p["summary"]
        details = p.get("failure-details", [])
        print("%s header=%s type=%s ok=%d failed=%d results=%s mx=%s detail_sum=%d org=%s start=%s" % (
            pol["policy-domain"],
            msg["TLS-Report-Domain"],
            pol["policy-type"],
            summ["total-successful-session-count"],
            summ["total-failure-session-count"],
            ",".join(sorted({d["result-type"] for d in details})) or "-",
            ",".join(pol.get("mx-host", [])) or "-",
            sum(d["failed-session-count"] for d in details),
            report["organization-name"],
            report["date-range"]["start-datetime"],
        ))
