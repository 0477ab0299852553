"""Checks `sluice status --json` output (argv[1]).

argv[2] says what the queue should hold:
  one-deferred           one message deferred for the relay host
  dead-and-slow DEAD SLOW
                         3 messages deferred for a dead destination on port
                         DEAD (transport deadend) and 2 in flight to a slow
                         one on port SLOW (transport smtp)
Prints "ok", or "not yet: ..." when the figures are not there yet (the
caller polls), and fails on anything malformed.
"""
import json
import sys

s = json.loads(sys.argv[1])
assert s["running"] is True, s
names = {x["name"] for x in s["services"]}
assert {"qmgr", "cleanup", "smtp"} <= names, names
qmgr = [x for x in s["services"] if x["name"] == "qmgr"][0]
assert len(qmgr["processes"]) == 1 and qmgr["processes"][0]["pid"] > 0, qmgr
assert s["uptime"] >= 0 and s["master_pid"] > 0, s

q = s["queue"]
for k in ("messages", "incoming", "active", "deferred", "hold", "active_recipients"):
    assert isinstance(q[k], int) and q[k] >= 0, (k, q)
assert q["messages"] == q["incoming"] + q["active"] + q["deferred"] + q["hold"], q
for k in ("sent", "deferred", "bounced"):
    c = s["deliveries"][k]
    assert c["last_10s"] <= c["last_60s"] <= c["total"], c
    assert abs(c["rate_60s"] - c["last_60s"] / 60) < 0.01, c
transports = {t["name"]: t for t in s["transports"]}
for t in transports.values():
    cl = t["classes"]
    assert set(cl) == {"small", "medium", "large"}, t
    assert t["queued"] == sum(c["queued"] for c in cl.values()), t
    assert t["inflight"] == sum(c["inflight"] for c in cl.values()), t


def dest(port):
    found = [d for d in s["destinations"] if d["destination"].endswith(":%s" % port)]
    return found[0] if found else None


def not_yet(why):
    print("not yet: %s" % (why,))
    sys.exit(0)


mode = sys.argv[2]
if mode == "one-deferred":
    if not (q["messages"] == 1 and q["deferred"] == 1):
        not_yet(q)
    assert s["deliveries"]["deferred"]["total"] >= 1, s["deliveries"]
    d = [d for d in s["destinations"] if d["deferred"] == 1]
    assert len(d) == 1 and d[0]["transport"] == "smtp" and not d[0]["dead"], s["destinations"]
elif mode == "dead-and-slow":
    dead, slow = dest(sys.argv[3]), dest(sys.argv[4])
    if dead is None or slow is None:
        not_yet(s["destinations"])
    if not (dead["dead"] and dead["deferred"] == 3 and slow["queued"] == 2 and slow["inflight"] >= 1):
        not_yet((dead, slow))
    # Results are journaled a moment after the sink has the mail.
    if q["messages"] != 5 or s["deliveries"]["sent"]["total"] != 4:
        not_yet((q, s["deliveries"]))
    assert dead["transport"] == "deadend", dead
    assert dead["retry_at"] is not None and dead["retry_at"] > 0, dead
    assert dead["queued"] == 0 and dead["busy"] == 0, dead
    assert transports["deadend"]["dead"] == 1, transports
    assert slow["transport"] == "smtp" and not slow["dead"] and slow["retry_at"] is None, slow
    assert 1 <= slow["busy"] <= slow["window"], slow
    assert q["deferred"] == 3 and q["active"] == 2 and q["hold"] == 0, q
    assert s["deliveries"]["bounced"]["total"] == 1, s["deliveries"]
    assert q["active_recipients"] == 2, q
    assert transports["smtp"]["queued"] + transports["smtp"]["inflight"] == 2, transports
    assert s["deliveries"]["deferred"]["total"] >= 3, s["deliveries"]
    # The busiest come first: 3 deferred before 2 queued.
    assert s["destinations"][0] == dead and s["destinations"][1] == slow, s["destinations"]
else:
    raise SystemExit("unknown mode %r" % mode)
print("ok")
