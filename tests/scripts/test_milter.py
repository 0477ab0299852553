#!/usr/bin/env python3
"""A milter (Debian's python3-milter, on libmilter) that takes the actions
opendkim does not, chosen by the addresses and the Subject: of each message.

usage: test_milter.py SOCKET LOGFILE

  MAIL FROM with "reject-mail"      550 5.7.1 sender refused by the test milter
  RCPT TO with "reject-rcpt"        550 5.7.1 recipient refused by the test milter
  RCPT TO with "tempfail-rcpt"      TEMPFAIL
  RCPT TO with "multiline-rcpt"     554-5.7.1 first line / 554 5.7.1 second line
  Subject: with "reject-header"     REJECT at that header
  Subject: with "rewrite"           at the end: Subject: changed, X-Remove:
                                    deleted, X-First: inserted first, the body
                                    replaced, added@ added, removed@ deleted,
                                    the sender changed to changed@test.example
  Subject: with "quarantine"        quarantine ("held by the test milter")
  Subject: with "discard"           DISCARD at the end
  Subject: with "tempfail-eom"      TEMPFAIL at the end
  Subject: with "multiline-eom"     at the end, the two lines RCPT's gives
  Subject: with "slow"              sleeps 6 s at the end, then CONTINUE
  Subject: with "add-header"        at the end: X-Added-By-Milter: yes
  an unknown SMTP command           TEMPFAIL with "tempfail" in it, else REJECT
Every accepted message gets X-Test-Milter: seen. Each event is appended to
LOGFILE as one line (stage and argument), so tests can see what the milter
was told, macros included.
"""

import sys
import time

import Milter
import os

SOCKET, LOG = sys.argv[1], sys.argv[2]


def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")


class TestMilter(Milter.Base):
    def __init__(self):
        self.id = Milter.uniqueID()
        self.subject = ""

    def connect(self, hostname, family, hostaddr):
        log("connect %s %s j=%s _=%s" % (hostname, hostaddr[0], self.getsymval("j"),
                                          self.getsymval("_")))
        return Milter.CONTINUE

    def hello(self, name):
        log("helo %s" % name)
        return Milter.CONTINUE

    def envfrom(self, mailfrom, *params):
        log("mail %s auth=%s addr=%s client=%s i=%s args=%s" % (
            mailfrom, self.getsymval("{auth_authen}"), self.getsymval("{mail_addr}"),
            self.getsymval("{client_addr}"), self.getsymval("i"), ",".join(params)))
        self.subject = ""
        if "reject-mail" in mailfrom:
            self.setreply("550", "5.7.1", "sender refused by the test milter")
            return Milter.REJECT
        return Milter.CONTINUE

    def envrcpt(self, to, *params):
        log("rcpt %s args=%s" % (to, ",".join(params)))
        if "reject-rcpt" in to:
            self.setreply("550", "5.7.1", "recipient refused by the test milter")
            return Milter.REJECT
        if "tempfail-rcpt" in to:
            return Milter.TEMPFAIL
        if "multiline-rcpt" in to:
            self.setreply("554", "5.7.1", "first line", "second line")
            return Milter.REJECT
        return Milter.CONTINUE

    def header(self, name, value):
        log("header %s: %s" % (name, value))
        if name.lower() == "subject":
            self.subject = value
            if "reject-header" in value:
                return Milter.REJECT
        return Milter.CONTINUE

    def eoh(self):
        log("eoh i=%s" % self.getsymval("i"))
        return Milter.CONTINUE

    def body(self, chunk):
        log("body %d" % len(chunk))
        return Milter.CONTINUE

    def eom(self):
        log("eom %s i=%s" % (self.subject, self.getsymval("i")))
        s = self.subject
        if "discard" in s:
            return Milter.DISCARD
        if "tempfail-eom" in s:
            return Milter.TEMPFAIL
        if "multiline-eom" in s:
            self.setreply("554", "5.7.1", "first line", "second line")
            return Milter.REJECT
        if "slow" in s:
            time.sleep(6)
        self.addheader("X-Test-Milter", "seen")
        if "rewrite" in s:
            self.chgheader("Subject", 1, "changed by the test milter")
            self.chgheader("X-Remove", 1, "")
            self.addheader("X-First", "inserted", 0)
            self.replacebody(b"The test milter replaced this body.\r\n.A line with a dot.\r\n")
            self.addrcpt("<added@test.example>")
            self.delrcpt("<removed@test.example>")
            self.chgfrom("<changed@test.example>")
        if "add-header" in s:
            self.addheader("X-Added-By-Milter", "yes")
        if "quarantine" in s:
            self.quarantine("held by the test milter")
        return Milter.CONTINUE

    def unknown(self, cmd):
        log("unknown %s client=%s" % (cmd, self.getsymval("{client_addr}")))
        if "tempfail" in cmd:
            return Milter.TEMPFAIL
        return Milter.REJECT

    def abort(self):
        log("abort")
        return Milter.CONTINUE

    def close(self):
        return Milter.CONTINUE


if __name__ == "__main__":
    Milter.factory = TestMilter
    Milter.set_flags(
        Milter.ADDHDRS
        | Milter.CHGHDRS
        | Milter.CHGBODY
        | Milter.ADDRCPT
        | Milter.DELRCPT
        | Milter.QUARANTINE
        | Milter.CHGFROM
    )
    os.umask(0)  # the instance runs as nobody and must connect
    log("ready")
    Milter.runmilter("sluice-test", "unix:" + SOCKET, 60)
