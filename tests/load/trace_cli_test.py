#!/usr/bin/env python3
"""Tracing a live smarm-server: smarm-load --trace records the server's trace
over its load through GET /debug/trace on the admin listener; the file is
Chrome trace-event JSON that Perfetto loads (fields per phase, X slices
nested per thread, every flow paired, async tracks balanced) holding the
requests as spans named by their route. The flight recorder answers
GET /debug/trace/flight; a second interval while one records is refused
(409), bad parameters are named (400), and without trace.flight the flight
dump says so.

usage: trace_cli_test.py SMARM_LOAD SMARM_SERVER CONFIG
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
import rel  # noqa: E402


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check_trace(text):
    """What Perfetto needs of the file; returns the parsed events."""
    doc = json.loads(text)
    events = doc["traceEvents"]
    need = {"X": {"name", "ts", "dur", "pid", "tid"}, "b": {"id", "cat", "name", "ts"},
            "e": {"id", "cat", "ts"}, "s": {"id", "ts", "tid"}, "f": {"id", "ts", "bp"},
            "C": {"name", "ts", "args"}, "i": {"name", "ts", "s"}, "M": {"name", "args"}}
    for e in events:
        if e.get("ph") not in need:
            fail("unexpected phase in %r" % e)
        missing = need[e["ph"]] - set(e)
        if missing:
            fail("%s event without %s: %r" % (e["ph"], missing, e))
    by_tid = {}
    for e in events:
        if e["ph"] == "X":
            by_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for tid, spans in by_tid.items():
        spans.sort()
        for (b0, e0), (b1, _) in zip(spans, spans[1:]):
            if b1 < e0 - 1e-3:
                fail("X slices overlap on tid %s: %s..%s and %s" % (tid, b0, e0, b1))
    starts = [e["id"] for e in events if e["ph"] == "s"]
    ends = [e["id"] for e in events if e["ph"] == "f"]
    if sorted(starts) != sorted(ends) or len(set(starts)) != len(starts):
        fail("flows do not pair up")
    depth = {}
    for e in events:
        if e["ph"] in "be":
            k = (e["cat"], e["id"])
            depth[k] = depth.get(k, 0) + (1 if e["ph"] == "b" else -1)
            if depth[k] < 0:
                fail("async end before its begin: %r" % e)
    if any(depth.values()):
        fail("async tracks left open")
    return doc, events


def get(port, path, timeout=30):
    status, body = rel.request(port, "GET", path, timeout=timeout)
    return status, body.decode(errors="replace")


def main():
    load, server, config = sys.argv[1:4]
    tmp = tempfile.mkdtemp(prefix="smarm-trace-")
    out = os.path.join(tmp, "trace.json")
    srv = rel.start(server, config, ["--trace.flight=true", "--trace.buffer=4MiB"])
    try:
        p = subprocess.run(
            [load, "http://127.0.0.1:%d/plaintext" % srv.port, "-c", "8", "-t", "1", "-d", "3s",
             "-w", "200ms", "-q", "--trace", out, "--trace-admin",
             "http://127.0.0.1:%d" % srv.admin_port],
            capture_output=True, text=True, timeout=90)
        if p.returncode != 0:
            fail("smarm-load --trace -> %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
        if "errors     none" not in p.stdout or "wrote " + out not in p.stdout:
            fail("smarm-load output:\n" + p.stdout)
        doc, events = check_trace(open(out).read())
        spans = [e for e in events if e["ph"] == "b" and e["name"] == "GET /plaintext"]
        done = [e for e in events if e["ph"] == "e" and e.get("args", {}).get("status") == 200]
        if len(spans) < 100 or len(done) < 100:
            fail("want >= 100 GET /plaintext spans answered 200: %d, %d" % (len(spans), len(done)))
        threads = [e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
        if not any(t.startswith("smarm-sched") for t in threads):
            fail("no scheduler thread tracks: %r" % threads)
        if not any(e["ph"] == "C" and e["name"] == "run queue" for e in events):
            fail("no run-queue counter")
        if doc["otherData"]["mode"] != "interval":
            fail("otherData: %r" % doc["otherData"])

        # The flight recorder came back after the interval: it dumps now.
        status, body = get(srv.admin_port, "/debug/trace/flight")
        if status != 200:
            fail("/debug/trace/flight -> %d %s" % (status, body))
        doc, events = check_trace(body)
        if doc["otherData"]["mode"] != "flight" or not any(e["ph"] == "X" for e in events):
            fail("the flight dump has no runs: %r" % doc["otherData"])

        # One interval at a time; the flight dump waits for it.
        first = {}
        t = threading.Thread(target=lambda: first.update(r=get(srv.admin_port, "/debug/trace?seconds=2")))
        t.start()
        time.sleep(0.5)
        status, body = get(srv.admin_port, "/debug/trace?seconds=1")
        if status != 409 or "already recording" not in body:
            fail("a second interval: %d %s" % (status, body))
        status, body = get(srv.admin_port, "/debug/trace/flight")
        if status != 409:
            fail("the flight dump during an interval: %d %s" % (status, body))
        t.join()
        if first["r"][0] != 200:
            fail("the first interval: %d" % first["r"][0])
        check_trace(first["r"][1])
        for path, word in [("/debug/trace?seconds=0", "seconds=0"),
                           ("/debug/trace?seconds=61", "seconds=61"),
                           ("/debug/trace?seconds=1&max_bytes=12", "max_bytes=12")]:
            status, body = get(srv.admin_port, path)
            if status != 400 or word not in body:
                fail("%s -> %d %s" % (path, status, body))
        # The cap: a small trace is cut, and says so (traffic first: the
        # flight recorder restarted empty after the last interval).
        for _ in range(200):
            get(srv.port, "/plaintext")
        status, body = get(srv.admin_port, "/debug/trace/flight?max_bytes=64KiB")
        if status != 200 or len(body) > 65536:
            fail("capped flight dump: %d, %d bytes" % (status, len(body)))
        if json.loads(body)["otherData"]["cut_events"] <= 0:
            fail("a 64 KiB dump after 200 requests cut nothing")
        # Never on the public listener.
        status, _ = get(srv.port, "/debug/trace?seconds=1")
        if status != 404:
            fail("/debug/trace on the public port -> %d" % status)
    finally:
        srv.stop()

    srv = rel.start(server, config, [])
    try:
        status, body = get(srv.admin_port, "/debug/trace/flight")
        if status != 409 or "trace.flight" not in body:
            fail("flight dump without trace.flight: %d %s" % (status, body))
    finally:
        srv.stop()
    p = subprocess.run([load, "http://127.0.0.1:1/", "--trace", out],
                       capture_output=True, text=True, timeout=30)
    if p.returncode != 2 or "--trace-admin" not in p.stderr:
        fail("--trace without an admin URL: %d %s" % (p.returncode, p.stderr))
    print("ok")


if __name__ == "__main__":
    main()
