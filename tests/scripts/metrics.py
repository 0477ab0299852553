"""Fetches qmgr's Prometheus endpoint with urllib and checks it.

metrics.py URL DEAD SLOW: parses the text format (HELP and TYPE before the
samples of each family) and checks the figures of the mail mix of
tests/monitoring.rs: 4 delivered, 1 bounced, 3 messages deferred for the
dead destination on port DEAD, 2 in flight to the slow one on port SLOW.
Prints "ok", or "not yet: ..." while the figures settle.

metrics.py URL bad-requests: other paths and methods are refused with
404 and 405, a request head over the bound with 431, and /metrics still
answers afterwards.
"""
import re
import sys
import urllib.error
import urllib.request

url = sys.argv[1]


def fetch():
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200, r.status
        ctype = r.headers["Content-Type"]
        assert ctype.startswith("text/plain; version=0.0.4"), ctype
        return r.read().decode("utf-8")


if sys.argv[2] == "bad-requests":
    base = url.rsplit("/", 1)[0]
    for path, method, code in (("/", "GET", 404), ("/metrics", "POST", 405)):
        try:
            urllib.request.urlopen(urllib.request.Request(base + path, method=method, data=b"" if method == "POST" else None), timeout=10)
            raise SystemExit("%s %s was answered" % (method, path))
        except urllib.error.HTTPError as e:
            assert e.code == code, (path, e.code)
    # A request head without end is cut at its bound and refused.
    import socket
    host, port = base.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as c:
        c.sendall(b"GET /metrics HTTP/1.0\r\nX-Filler: " + b"a" * 5000)
        answer = b""
        while True:
            b = c.recv(4096)
            if not b:
                break
            answer += b
    assert answer.startswith(b"HTTP/1.0 431 "), answer[:100]
    assert "sluice_queue_messages" in fetch()
    print("ok")
    sys.exit(0)

dead, slow = sys.argv[2], sys.argv[3]
text = fetch()
sample = re.compile(r'^([a-z_]+)(?:\{(.*)\})? (\d+)$')
label = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')
families, values, current = {}, {}, None
for line in text.splitlines():
    if line.startswith("# HELP "):
        current = line.split()[2]
        families[current] = None
        continue
    if line.startswith("# TYPE "):
        name, kind = line.split()[2:4]
        assert name == current and kind in ("gauge", "counter"), line
        families[name] = kind
        continue
    m = sample.match(line)
    assert m, "not a sample line: %r" % line
    name, labels, v = m.group(1), m.group(2) or "", int(m.group(3))
    assert name == current and families[name], "sample before its HELP/TYPE: %r" % line
    key = (name, tuple(sorted(label.findall(labels))))
    assert key not in values, "duplicate %r" % (key,)
    values[key] = v


def get(name, **labels):
    return values.get((name, tuple(sorted(labels.items()))))


def not_yet(why):
    print("not yet: %s" % (why,))
    sys.exit(0)


for f in ("sluice_queue_messages", "sluice_deliveries_total", "sluice_class_queued",
          "sluice_destination_queued", "sluice_destination_concurrency_window",
          "sluice_destination_inflight", "sluice_destination_dead"):
    assert f in families, (f, sorted(families))
assert families["sluice_deliveries_total"] == "counter"
assert families["sluice_queue_messages"] == "gauge"

dead_d = "[127.0.0.1]:%s" % dead
slow_d = "[127.0.0.1]:%s" % slow
if get("sluice_destination_dead", transport="deadend", destination=dead_d) != 1:
    not_yet("dead flag")
if get("sluice_destination_deferred", transport="deadend", destination=dead_d) != 3:
    not_yet("deferred for the dead destination")
if get("sluice_destination_queued", transport="smtp", destination=slow_d) != 2:
    not_yet("queued for the slow destination")
# Results are journaled a moment after the sink has the mail.
if get("sluice_deliveries_total", status="sent") != 4:
    not_yet("4 sent")
if sum(get("sluice_queue_messages", state=st) for st in ("incoming", "active", "deferred", "hold")) != 5:
    not_yet("5 messages")
assert get("sluice_deliveries_total", status="bounced") == 1, text
assert get("sluice_deliveries_total", status="deferred") >= 3, text
assert get("sluice_queue_messages", state="deferred") == 3, text
assert get("sluice_queue_messages", state="active") == 2, text
assert get("sluice_queue_messages", state="hold") == 0, text
assert get("sluice_destination_dead", transport="smtp", destination=slow_d) == 0, text
assert get("sluice_destination_inflight", transport="smtp", destination=slow_d) >= 1, text
w = get("sluice_destination_concurrency_window", transport="smtp", destination=slow_d)
busy = get("sluice_destination_busy", transport="smtp", destination=slow_d)
assert 1 <= busy <= w, (busy, w)
per_class = sum(get(n, transport="smtp", **{"class": c}) for n in ("sluice_class_queued", "sluice_class_inflight")
                for c in ("small", "medium", "large"))
assert per_class == 2, text
print("ok")
