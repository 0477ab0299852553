#!/usr/bin/env python3
"""An SMTP sink that offers CHUNKING (RFC 3030), for the smtp agent's tests.

Postfix's smtp-sink (3.7 here) does not announce CHUNKING, so this one
records what a BDAT client sends, byte for byte: for each transaction,
DIR/N.msg holds the message content (BDAT chunks concatenated as received;
DATA content with the dot-stuffing undone) and DIR/N.cmd the commands.
Behaviour is scripted by the recipient: a local part starting with
"reject-bdat" makes every BDAT chunk of the transaction fail with 554 (the
chunk is still read, as RFC 3030 wants), "reject-rcpt" is refused at RCPT.
It offers SMTPUTF8 too, which smtp-sink does not: tests/delivery.rs relays
the notice about SMTPUTF8 mail to it.

usage: bdat_sink.py PORT DIR
"""

import os
import socketserver
import sys
import threading

COUNTER = [0]
LOCK = threading.Lock()


class Handler(socketserver.StreamRequestHandler):
    def reply(self, text):
        self.wfile.write(text.encode() + b"\r\n")
        self.wfile.flush()

    def save(self, content, commands):
        with LOCK:
            COUNTER[0] += 1
            n = COUNTER[0]
        base = os.path.join(sys.argv[2], str(n))
        with open(base + ".cmd.tmp", "wb") as f:
            f.write(b"\n".join(commands) + b"\n")
        with open(base + ".msg.tmp", "wb") as f:
            f.write(content)
        os.rename(base + ".cmd.tmp", base + ".cmd")
        os.rename(base + ".msg.tmp", base + ".msg")
        return n

    def handle(self):
        self.reply("220 bdat-sink ESMTP")
        rcpts, commands, content, refuse = [], [], b"", False
        while True:
            line = self.rfile.readline()
            if not line:
                return
            cmd = line.rstrip(b"\r\n")
            verb = cmd.split(b" ")[0].upper()
            if verb in (b"EHLO", b"HELO"):
                self.reply("250-bdat-sink\r\n250-PIPELINING\r\n250-8BITMIME\r\n"
                           "250-SMTPUTF8\r\n250-CHUNKING\r\n250 ENHANCEDSTATUSCODES")
            elif verb == b"MAIL":
                rcpts, commands, content, refuse = [], [cmd], b"", False
                self.reply("250 2.1.0 Ok")
            elif verb == b"RCPT":
                commands.append(cmd)
                addr = cmd.split(b":", 1)[1].strip().lstrip(b"<").lower()
                if addr.startswith(b"reject-rcpt"):
                    self.reply("550 5.1.1 No such user")
                    continue
                if addr.startswith(b"reject-bdat"):
                    refuse = True
                rcpts.append(addr)
                self.reply("250 2.1.5 Ok")
            elif verb == b"BDAT":
                commands.append(cmd)
                words = cmd.split()
                size = int(words[1])
                last = len(words) > 2 and words[2].upper() == b"LAST"
                chunk = self.rfile.read(size)
                if len(chunk) != size:
                    return
                if refuse or not rcpts:
                    self.reply("554 5.6.0 Chunk refused by the test sink")
                    continue
                content += chunk
                if last:
                    n = self.save(content, commands)
                    self.reply("250 2.0.0 Ok: queued as %d" % n)
                    rcpts = []
                else:
                    self.reply("250 2.0.0 Ok: %d octets" % size)
            elif verb == b"DATA":
                commands.append(cmd)
                if not rcpts:
                    self.reply("554 5.5.1 No valid recipients")
                    continue
                self.reply("354 End data with <CR><LF>.<CR><LF>")
                body = b""
                while True:
                    l = self.rfile.readline()
                    if not l or l == b".\r\n":
                        break
                    body += l[1:] if l.startswith(b".") else l
                n = self.save(body, commands)
                self.reply("250 2.0.0 Ok: queued as %d" % n)
                rcpts = []
            elif verb == b"RSET":
                rcpts, commands, content, refuse = [], [], b"", False
                self.reply("250 2.0.0 Ok")
            elif verb == b"QUIT":
                self.reply("221 2.0.0 Bye")
                return
            else:
                self.reply("502 5.5.2 Error: command not recognized")


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


if __name__ == "__main__":
    Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
