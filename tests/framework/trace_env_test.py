#!/usr/bin/env python3
"""SMARM_TRACE=path writes a trace of the whole run at exit: smarm-ring (a
ring of actors passing a token) runs with it set; the file is Chrome trace
JSON holding the ring's runs and messages, and the program says where it
wrote it. A bad SMARM_TRACE_BUFFER is named and the program still runs.

usage: trace_env_test.py SMARM_RING
"""
import json
import os
import subprocess
import sys
import tempfile


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    ring = sys.argv[1]
    path = os.path.join(tempfile.mkdtemp(prefix="smarm-trace-env-"), "run.json")
    env = dict(os.environ, SMARM_TRACE=path, SMARM_TRACE_BUFFER="1MiB")
    p = subprocess.run([ring, "16", "1", "2"], env=env, capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        fail("smarm-ring -> %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
    if "written to " + path not in p.stderr:
        fail("no note of the file in stderr:\n" + p.stderr)
    doc = json.load(open(path))
    events = doc["traceEvents"]
    runs = [e for e in events if e["ph"] == "X"]
    flows = [e for e in events if e["ph"] == "s"]
    if len(runs) < 100 or len(flows) < 100:
        fail("want >= 100 runs and messages: %d, %d" % (len(runs), len(flows)))
    other = doc["otherData"]
    # A 1 MiB ring per thread fills in a second of ring traffic: the file
    # says how much was refused.
    if other["mode"] != "interval" or other["dropped_events"] <= 0:
        fail("otherData: %r" % other)
    env["SMARM_TRACE_BUFFER"] = "12 parsecs"
    p = subprocess.run([ring, "16", "1", "2"], env=env, capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0 or "SMARM_TRACE_BUFFER=12 parsecs" not in p.stderr:
        fail("a bad SMARM_TRACE_BUFFER: %d\n%s" % (p.returncode, p.stderr))
    print("ok")


if __name__ == "__main__":
    main()
