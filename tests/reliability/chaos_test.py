#!/usr/bin/env python3
"""Chaos under load (issue 27): the supervision tree restarts what a test
stops while smarm-load runs, and clients see only documented answers.

Phase 1, services: smarm-load drives the kv 90/10 scenario (kv log, group
commit) and the sha256 workers while the test stops the kv server and a
worker, one after the other (POST /test/stop/{kv,worker} on the admin
listener, http.test_routes). No connection fails (no read, write, parse,
connect or timeout error), every answer is one of 200 201 204 404 503 504,
and smarm_supervisor_restarts_total grows by exactly the number of stops.

Phase 2, the public listener: smarm-load at /plaintext while the test
stops the http listener child. It drains like a SIGTERM (lame duck) and
restarts on the same port, so the only errors allowed are refused
connects while it is down; every answer is a 200, and the restart count
grows by one per stop (rest_for_one restarts the admin listener with it,
one restart event, as OTP counts intensity).

Usage: chaos_test.py SMARM_SERVER CONFIG SMARM_LOAD
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rel  # noqa: E402

# Supervisors tolerate 3 restarts in 5 s (supervisor_options defaults);
# the stops are spaced so that none gives up (a give-up restarts a whole
# subtree, which is another test). Spacing only grows when the machine is
# slow, so the restart counts stay exact.
SERVICE_GAP = 2.0   # one restart each: at most 3 in any 5 s
LISTENER_GAP = 2.0


def restarts(srv):
    return srv.metric("smarm_supervisor_restarts_total")


def stop(srv, what):
    status, body = rel.request(srv.admin_port, "POST", f"/test/stop/{what}")
    return status == 202


def wait_ready(srv, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if rel.request(srv.port, "GET", "/readyz", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.02)
    rel.fail(f"not ready within {timeout} s after a stop")


def services_phase(srv, load_bin):
    before = restarts(srv)
    n = 6
    seconds = int(2 + n * SERVICE_GAP)
    kv = rel.load(load_bin, srv.port, "/", ["-c", "16", *rel.scenario("kv-90-10.yaml")],
                  seconds)
    work = rel.load(load_bin, srv.port, "/", ["-c", "8", *rel.scenario("sha256-4k.yaml")],
                    seconds)
    time.sleep(1)
    stops = 0
    for i in range(n):
        if stop(srv, "kv" if i % 2 == 0 else "worker"):
            stops += 1
        wait_ready(srv)
        time.sleep(SERVICE_GAP)
    reports = {"kv": rel.load_report(kv), "sha256": rel.load_report(work)}
    rel.check(stops == n, f"only {stops} of {n} stops found their actor")
    for name, r in reports.items():
        rel.check(r["error_total"] == 0, f"{name}: connections failed: {r['errors']}")
        rel.check_statuses(name, r)
    grown = restarts(srv) - before
    rel.check(grown == stops, f"{stops} stops but smarm_supervisor_restarts_total grew by {grown}")
    print(f"ok: services: {stops} stops, {grown} restarts; kv {reports['kv']['statuses']}, "
          f"sha256 {reports['sha256']['statuses']}", flush=True)


def listener_phase(srv, load_bin):
    before = restarts(srv)
    n = 3
    p = rel.load(load_bin, srv.port, "/plaintext", ["-c", "32"], int(2 + n * LISTENER_GAP))
    time.sleep(1)
    stops = 0
    for _ in range(n):
        if stop(srv, "http"):
            stops += 1
        time.sleep(0.3)
        wait_ready(srv)
        time.sleep(LISTENER_GAP)
    r = rel.load_report(p)
    rel.check(stops == n, f"only {stops} of {n} listener stops found it")
    lost = {k: v for k, v in r["errors"].items() if k != "connect" and v}
    rel.check(not lost, f"listener restarts: errors other than refused connects: {r['errors']}")
    rel.check(set(r["statuses"]) == {"200"}, f"listener restarts: statuses {r['statuses']}")
    # Wait for the admin listener too (restarted after http).
    deadline = time.monotonic() + 20
    while True:
        try:
            grown = restarts(srv) - before
            break
        except (OSError, RuntimeError):
            rel.check(time.monotonic() < deadline, "the admin listener did not come back")
            time.sleep(0.05)
    rel.check(grown == stops,
              f"{stops} listener stops but smarm_supervisor_restarts_total grew by {grown}")
    print(f"ok: listener: {stops} stops, {grown} restarts, {r['requests']} requests, "
          f"errors {r['errors']}", flush=True)


def main():
    server, config, load_bin = sys.argv[1:4]
    work = tempfile.mkdtemp(prefix="smarm-chaos-")
    srv = rel.start(server, config, ["--runtime.schedulers=2", "--http.test_routes=true",
                                     f"--kv.log_path={work}/kv.log", "--kv.sync=group"])
    try:
        rel.wait_kv(srv.port)
        services_phase(srv, load_bin)
        listener_phase(srv, load_bin)
        rel.check(srv.alive(), "the server died")
    finally:
        rel.check(srv.stop() == 0, "the server did not stop cleanly")


if __name__ == "__main__":
    main()
