#!/usr/bin/env python3
"""Send N messages over THREADS concurrent SMTP sessions with smtplib.

Each message has a unique Message-ID. Every message that got a 250 after
DATA is written to OUT as "queue-id message-id" (one line, flushed at
once), so a crash test can check that each acknowledged message survived.
Connection failures are tolerated (the server may be killed under us):
the client reconnects and carries on until N attempts were made.

usage: send_many.py HOST PORT N THREADS OUT [SIZE [DOMAIN]]
"""
import smtplib
import sys
import threading
import time

host, port, n, threads, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
size = int(sys.argv[6]) if len(sys.argv) > 6 else 1024
domain = sys.argv[7] if len(sys.argv) > 7 else "mx.test.example"
lock = threading.Lock()
counter = [0]
results = open(out, "a", buffering=1)
stats = {"ok": 0, "temp": 0, "error": 0}


def next_index():
    with lock:
        if counter[0] >= n:
            return None
        counter[0] += 1
        return counter[0]


def worker(tid):
    conn = None
    while True:
        i = next_index()
        if i is None:
            break
        mid = "<t%d.%d.%f@test.example>" % (tid, i, time.time())
        body = ("Message-ID: %s\r\nSubject: test %d\r\nFrom: s@test.example\r\nTo: r@%s\r\n\r\n" % (mid, i, domain)
                + ("x" * 70 + "\r\n") * max(1, size // 72))
        try:
            if conn is None:
                conn = smtplib.SMTP(host, port, timeout=30)
                conn.ehlo("client.test.example")
            conn.mail("s%d@test.example" % tid)
            code, _ = conn.rcpt("r%d@%s" % (i, domain))
            if code != 250:
                conn.rset()
                continue
            code, msg = conn.data(body)
            if code == 250:
                qid = msg.decode().split()[-1]
                with lock:
                    results.write("%s %s\n" % (qid, mid))
                    stats["ok"] += 1
            else:
                with lock:
                    stats["temp"] += 1
                conn.rset()
        except Exception:
            with lock:
                stats["error"] += 1
            try:
                if conn is not None:
                    conn.close()
            except Exception:
                pass
            conn = None
            time.sleep(0.05)
    if conn is not None:
        try:
            conn.quit()
        except Exception:
            pass


ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("ok=%d temp=%d error=%d" % (stats["ok"], stats["temp"], stats["error"]))
