#!/usr/bin/env python3
"""Verifies the DKIM signatures of a message with dkimpy, looking the key up
in the DNS server at HOST:PORT (the test's dnsmasq), not the system's.

usage: dkim_verify.py MESSAGE_FILE HOST PORT
Prints "pass d=DOMAIN s=SELECTOR" and exits 0 when every signature verifies;
prints the reason and exits 1 otherwise (or when there is no signature).
"""

import logging
import sys

import dkim
import dns.resolver

path, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
message = open(path, "rb").read()

resolver = dns.resolver.Resolver(configure=False)
resolver.nameservers = [host]
resolver.port = port


def dnsfunc(name, timeout=5):
    name = name.decode() if isinstance(name, bytes) else name
    answer = resolver.resolve(name.rstrip("."), "TXT", lifetime=timeout)
    return b"".join(b"".join(r.strings) for r in answer)


logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format="%(message)s")
d = dkim.DKIM(message, logger=logging.getLogger("dkimpy"))
sigs = [h for h in d.headers if h[0].lower() == b"dkim-signature"]
if not sigs:
    print("no DKIM-Signature header")
    sys.exit(1)
for i in range(len(sigs)):
    if not d.verify(idx=i, dnsfunc=dnsfunc):
        print("fail: %s" % (d.err if hasattr(d, "err") else "signature does not verify"))
        sys.exit(1)
tags = dkim.util.parse_tag_value(sigs[0][1])
print("pass d=%s s=%s" % (tags[b"d"].decode(), tags[b"s"].decode()))
