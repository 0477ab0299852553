#!/usr/bin/env python3
"""Hostile SMTP clients for tests/hostile.rs, and for running the same
attacks against another MTA (docs/reliability.md compares with Postfix).

usage: hostile.py SCENARIO --port PORT --pid PID [options]

SCENARIO is one of
  flood      many concurrent sessions from many loopback source addresses
  slowloris  sessions that send one byte every --interval seconds
  longline   a 64 MiB line without a newline, as a command and in DATA
  pipeline   10,000 RCPTs pipelined without reading any reply

While the attack runs, a normal client on --normal-addr keeps sending
one message per session with smtplib, and the resident memory of the
MTA's whole process tree (PID and all its descendants, VmRSS from /proc)
is sampled every 50 ms. The results are printed as `key=value` lines:
rss_base_kb (before the attack), rss_peak_kb (during it), rss_end_kb
(after it, once the sessions are gone), normal_* for the normal client,
and the scenario's own counts.
"""
import argparse
import errno
import os
import resource
import selectors
import smtplib
import socket
import sys
import threading
import time

HOST = "127.0.0.1"


def tree_rss_kb(root):
    """VmRSS summed over `root` and all its descendants, in kB."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: split after it.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


class Sampler(threading.Thread):
    """Samples the tree's RSS until stopped; marks split it into phases."""

    def __init__(self, root):
        super().__init__(daemon=True)
        self.root = root
        self.samples = []  # (time, kB)
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), tree_rss_kb(self.root)))
            time.sleep(0.05)

    def peak(self, start, end):
        vals = [kb for t, kb in self.samples if start <= t <= end]
        return max(vals) if vals else tree_rss_kb(self.root)


class Normal(threading.Thread):
    """The well-behaved client: one message per session, back to back."""

    def __init__(self, port, addr):
        super().__init__(daemon=True)
        self.port, self.addr = port, addr
        self.stop = threading.Event()
        self.ok, self.failed, self.max_s, self.errors = 0, 0, 0.0, []

    def send_one(self):
        t0 = time.monotonic()
        try:
            with smtplib.SMTP(HOST, self.port, timeout=60, source_address=(self.addr, 0)) as s:
                s.ehlo("normal.test.example")
                refused = s.sendmail(
                    "normal@test.example",
                    ["someone@mx.test.example"],
                    "Subject: normal\r\n\r\nstill served\r\n",
                )
                if refused:
                    raise smtplib.SMTPException("refused %r" % refused)
            self.ok += 1
        except (OSError, smtplib.SMTPException) as e:
            self.failed += 1
            self.errors.append(repr(e)[:200])
        self.max_s = max(self.max_s, time.monotonic() - t0)

    def run(self):
        while not self.stop.is_set():
            self.send_one()
            self.stop.wait(0.2)

    def report(self):
        out("normal_ok", self.ok)
        out("normal_failed", self.failed)
        out("normal_max_ms", int(self.max_s * 1000))
        if self.errors:
            out("normal_first_error", self.errors[0])


def out(key, value):
    print("%s=%s" % (key, value), flush=True)


def connect(addr, port, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((addr, 0))
    s.connect((HOST, port))
    return s


def read_reply(f):
    """One whole (maybe multi-line) reply from a file object; '' on EOF."""
    lines = []
    while True:
        line = f.readline()
        if not line:
            return "".join(lines)
        lines.append(line.decode("latin-1"))
        if len(line) < 4 or line[3:4] != b"-":
            return "".join(lines)


class LineReader:
    """Splits what non-blocking sockets deliver into reply lines."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data
        *lines, self.buf = self.buf.split(b"\r\n")
        return [l.decode("latin-1") for l in lines]


# --- flood -----------------------------------------------------------------

def flood(a, port):
    """`--heavy` addresses with `--per-heavy` sessions each, plus `--light`
    addresses with one session each, all open at once; every session reads
    its greeting and, when it was welcome, says EHLO and then holds."""
    targets = []
    for i in range(a.heavy):
        targets += [("127.0.1.%d" % (i + 1), "heavy")] * a.per_heavy
    for i in range(a.light):
        targets.append(("127.0.%d.%d" % (2 + i // 250, 1 + i % 250), "light"))
    sel = selectors.DefaultSelector()
    state = {}
    connect_failed = 0
    for addr, kind in targets:
        # Without waiting: a server whose listen queue is full leaves the
        # handshake to the kernel's SYN retries, which take minutes.
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((addr, 0))
        s.setblocking(False)
        if s.connect_ex((HOST, port)) not in (0, errno.EINPROGRESS):
            connect_failed += 1
            s.close()
            continue
        state[s] = {"addr": addr, "kind": kind, "r": LineReader(), "greet": None, "ehlo": None}
        sel.register(s, selectors.EVENT_READ)
    out("flood_connected", len(state))
    out("flood_connect_failed", connect_failed)

    def pump(until, done):
        while time.monotonic() < until and not done():
            for key, _ in sel.select(timeout=0.2):
                s = key.fileobj
                st = state[s]
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    st["closed"] = True
                    sel.unregister(s)
                    continue
                for line in st["r"].feed(data):
                    if st["greet"] is None:
                        st["greet"] = line
                        if line.startswith("220"):
                            s.send(b"EHLO flood.test.example\r\n")
                    elif st["ehlo"] is None and line[3:4] == " ":
                        st["ehlo"] = line

    def all_answered():
        return all(st["greet"] is not None and (st["ehlo"] is not None or not st["greet"].startswith("220"))
                   or st.get("closed") for st in state.values())

    pump(time.monotonic() + a.answer_within, all_answered)
    out("flood_answered_s", "%.1f" % (time.monotonic() - a.t_attack))
    # Hold the sessions open while the normal client carries on.
    pump(time.monotonic() + a.hold, lambda: False)
    greet_220 = sum(1 for st in state.values() if (st["greet"] or "").startswith("220"))
    refused = [st for st in state.values() if (st["greet"] or "").startswith("421")]
    ehlo_250 = sum(1 for st in state.values() if (st["ehlo"] or "").startswith("250"))
    silent = sum(1 for st in state.values() if st["greet"] is None)
    out("flood_greeting_220", greet_220)
    out("flood_ehlo_250", ehlo_250)
    out("flood_refused_421", len(refused))
    out("flood_refused_421_470", sum(1 for st in refused if st["greet"].startswith("421 4.7.0")))
    if refused:
        out("flood_refusal_text", refused[0]["greet"])
    out("flood_no_greeting", silent)
    per_heavy = {}
    for st in state.values():
        if st["kind"] == "heavy" and (st["greet"] or "").startswith("220"):
            per_heavy[st["addr"]] = per_heavy.get(st["addr"], 0) + 1
    counts = [per_heavy.get("127.0.1.%d" % (i + 1), 0) for i in range(a.heavy)]
    out("flood_heavy_welcome_min", min(counts) if counts else 0)
    out("flood_heavy_welcome_max", max(counts) if counts else 0)
    out("flood_light_welcome", sum(1 for st in state.values()
                                   if st["kind"] == "light" and (st["greet"] or "").startswith("220")))
    out("flood_closed_by_server_while_held", sum(1 for st in state.values()
                                                 if st.get("closed") and (st["greet"] or "").startswith("220")))
    for s in list(state):
        try:
            s.close()
        except OSError:
            pass


# --- slowloris -------------------------------------------------------------

def slowloris(a, port):
    """`--sessions` sessions, spread over addresses so that no one address
    is over the connection count limit, each trickling one byte of a command
    every `--interval` seconds, for at most `--hold` seconds."""
    sel = selectors.DefaultSelector()
    state = {}
    for i in range(a.sessions):
        addr = "127.0.3.%d" % (1 + i % 20)
        s = connect(addr, port)
        s.setblocking(False)
        state[s] = {"r": LineReader(), "lines": [], "closed_at": None, "pos": 0}
        sel.register(s, selectors.EVENT_READ)
    payload = b"EHLO slowloris.test.example"
    end = time.monotonic() + a.hold
    next_tick = time.monotonic()
    while time.monotonic() < end:
        now = time.monotonic()
        if now >= next_tick:
            for s, st in state.items():
                if st["closed_at"] is None and st["lines"]:
                    try:
                        s.send(payload[st["pos"] % len(payload):][:1])
                        st["pos"] += 1
                    except OSError:
                        pass
            next_tick = now + a.interval
        if all(st["closed_at"] is not None for st in state.values()):
            break
        for key, _ in sel.select(timeout=max(0.0, min(next_tick, end) - time.monotonic())):
            s = key.fileobj
            st = state[s]
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                st["closed_at"] = time.monotonic() - a.t_attack
                sel.unregister(s)
                continue
            st["lines"] += st["r"].feed(data)
    closed = [st for st in state.values() if st["closed_at"] is not None]
    out("slow_sessions", len(state))
    out("slow_greeted", sum(1 for st in state.values() if st["lines"] and st["lines"][0].startswith("220")))
    out("slow_closed_by_server", len(closed))
    out("slow_last_closed_s", "%.1f" % max((st["closed_at"] for st in closed), default=0.0))
    out("slow_bytes_sent_max", max(st["pos"] for st in state.values()))
    goodbyes = [st["lines"][-1] for st in closed if len(st["lines"]) > 1]
    out("slow_goodbye_421", sum(1 for g in goodbyes if g.startswith("421 4.")))
    if goodbyes:
        out("slow_goodbye_text", goodbyes[0])
    for s in state:
        s.close()


# --- longline --------------------------------------------------------------

def send_blob(s, size):
    """Writes `size` bytes of 'x' without a newline; the bytes the peer took."""
    chunk = b"x" * (1 << 20)
    sent = 0
    try:
        while sent < size:
            sent += s.send(chunk[: min(len(chunk), size - sent)])
    except OSError as e:
        out("longline_send_error", e.__class__.__name__)
    return sent


def longline(a, port):
    """A `--size` line without a newline, first as a command after EHLO,
    then as message content after DATA; each then ends with CRLF (and the
    content with the terminator) so that the server can answer."""
    for phase in ("cmd", "data"):
        s = connect(a.normal_addr, port)
        s.settimeout(60)
        f = s.makefile("rb")
        read_reply(f)
        s.sendall(b"EHLO longline.test.example\r\n")
        read_reply(f)
        if phase == "data":
            for cmd in (b"MAIL FROM:<long@test.example>\r\n", b"RCPT TO:<someone@mx.test.example>\r\n",
                        b"DATA\r\n"):
                s.sendall(cmd)
                out("longline_data_setup", read_reply(f).strip().replace("\r\n", " | "))
        t0 = time.monotonic()
        sent = send_blob(s, a.size)
        out("longline_%s_sent" % phase, sent)
        out("longline_%s_send_s" % phase, "%.1f" % (time.monotonic() - t0))
        end = b"\r\n.\r\n" if phase == "data" else b"\r\n"
        try:
            s.sendall(end)
            reply = read_reply(f)
        except OSError as e:
            reply = "(%s)" % e.__class__.__name__
        out("longline_%s_reply" % phase, reply.strip().replace("\r\n", " | ") or "(closed)")
        # Is the session still usable after the error?
        try:
            s.sendall(b"NOOP\r\n")
            after = read_reply(f)
        except OSError as e:
            after = "(%s)" % e.__class__.__name__
        out("longline_%s_then_noop" % phase, after.strip() or "(closed)")
        s.close()


# --- pipeline --------------------------------------------------------------

def pipeline(a, port):
    """EHLO, MAIL, `--rcpts` RCPTs, DATA, a message and QUIT, written by one
    thread while nobody reads: how much the server takes in is what it reads
    while its replies are not collected. Then all the replies are read."""
    s = connect(a.normal_addr, port, rcvbuf=4096)
    s.settimeout(120)
    f = s.makefile("rb")
    read_reply(f)
    cmds = [b"EHLO pipeline.test.example\r\n", b"MAIL FROM:<pipe@test.example>\r\n"]
    cmds += [b"RCPT TO:<recipient-%05d@mx.test.example>\r\n" % i for i in range(a.rcpts)]
    cmds += [b"DATA\r\n", b"Subject: pipelined\r\n\r\nmany recipients\r\n.\r\n", b"QUIT\r\n"]
    blob = b"".join(cmds)
    progress = {"sent": 0, "error": None}

    def writer():
        try:
            view = memoryview(blob)
            while progress["sent"] < len(blob):
                progress["sent"] += s.send(view[progress["sent"]:progress["sent"] + 4096])
        except OSError as e:
            progress["error"] = e.__class__.__name__

    w = threading.Thread(target=writer, daemon=True)
    w.start()
    # Let the writer run until it stalls (or finishes) without reading.
    last, still = -1, time.monotonic()
    while time.monotonic() - still < a.stall:
        if progress["sent"] != last:
            last, still = progress["sent"], time.monotonic()
        if progress["sent"] == len(blob):
            break
        time.sleep(0.1)
    out("pipe_total_bytes", len(blob))
    out("pipe_written_unread", progress["sent"])
    a.mark_unread_end = time.monotonic()
    counts = {}
    first = {}
    replies = 0
    final = ""
    while True:
        try:
            r = read_reply(f)
        except OSError as e:
            out("pipe_read_error", e.__class__.__name__)
            break
        if not r:
            break
        replies += 1
        key = r[:9]
        counts[key] = counts.get(key, 0) + 1
        first.setdefault(key, r.strip().replace("\r\n", " | ")[:120])
        final = r.strip()
    w.join(10)
    out("pipe_written_total", progress["sent"])
    if progress["error"]:
        out("pipe_write_error", progress["error"])
    out("pipe_replies", replies)
    for key in sorted(counts):
        out("pipe_reply[%s]" % key.strip(), "%d %s" % (counts[key], first[key]))
    out("pipe_rcpt_250", counts.get("250 2.1.5", 0))
    out("pipe_rcpt_452", counts.get("452 4.5.3", 0))
    out("pipe_last_reply", final[:120])
    s.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["flood", "slowloris", "longline", "pipeline"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--pid", type=int, required=True, help="root of the MTA's process tree")
    p.add_argument("--normal-addr", default="127.0.0.1")
    p.add_argument("--settle", type=float, default=2.0, help="seconds after the attack before rss_end")
    p.add_argument("--heavy", type=int, default=8)
    p.add_argument("--per-heavy", type=int, default=100)
    p.add_argument("--light", type=int, default=200)
    p.add_argument("--answer-within", type=float, default=30.0)
    p.add_argument("--hold", type=float, default=5.0)
    p.add_argument("--sessions", type=int, default=300)
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--size", type=int, default=64 << 20)
    p.add_argument("--rcpts", type=int, default=10000)
    p.add_argument("--stall", type=float, default=3.0)
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard or soft < hard < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))

    sampler = Sampler(a.pid)
    sampler.start()
    normal = Normal(a.port, a.normal_addr)
    # One message first: the processes a message needs exist before the baseline.
    normal.send_one()
    time.sleep(0.5)
    base = max(kb for _, kb in sampler.samples[-5:])
    out("rss_base_kb", base)
    normal.start()
    a.t_attack = time.monotonic()
    {"flood": flood, "slowloris": slowloris, "longline": longline, "pipeline": pipeline}[a.scenario](a, a.port)
    t_end = time.monotonic()
    out("attack_s", "%.1f" % (t_end - a.t_attack))
    out("rss_peak_kb", sampler.peak(a.t_attack, t_end))
    normal.stop.set()
    normal.join(90)
    time.sleep(a.settle)
    out("rss_end_kb", tree_rss_kb(a.pid))
    sampler.stop.set()
    normal.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
