#!/usr/bin/env python3
"""An HTTPS server for MTA-STS policies: Python's http.server over ssl.

usage: mta_sts_https.py ADDR PORT CERT KEY DIR

GET /.well-known/mta-sts.txt answers DIR/<Host>.txt as text/plain; any
other path or host is a 404. It prints "ready" once listening.
"""
import http.server
import os
import ssl
import sys

addr, port, cert, key, root = sys.argv[1:6]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        host = (self.headers.get("Host") or "").split(":")[0].lower()
        path = os.path.join(root, host + ".txt")
        if self.path != "/.well-known/mta-sts.txt" or "/" in host or not os.path.isfile(path):
            self.send_error(404)
            return
        body = open(path, "rb").read()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        sys.stderr.write("%s\n" % (fmt % args))


srv = http.server.HTTPServer((addr, int(port)), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("ready", flush=True)
srv.serve_forever()
