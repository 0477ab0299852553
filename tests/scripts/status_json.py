"""Checks `sluice status --json` output (argv[1]) for one deferred message."""
import json
import sys

s = json.loads(sys.argv[1])
assert s["running"] is True, s
q = s["queue"]
assert q["messages"] == 1 and q["deferred"] == 1 and q["recipients"] == 1, q
assert q["bytes"] > 0, q
names = {x["name"] for x in s["services"]}
assert {"qmgr", "cleanup", "smtp"} <= names, names
qmgr = [x for x in s["services"] if x["name"] == "qmgr"][0]
assert len(qmgr["processes"]) == 1 and qmgr["processes"][0]["pid"] > 0, qmgr
assert s["uptime"] >= 0 and s["master_pid"] > 0, s
print("ok")
